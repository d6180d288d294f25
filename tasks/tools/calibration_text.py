"""Turn a local data file into a calibration set: OUT_DIR/train.jsonl with one {"text": ...} row per sample.

Run as a script by an engine environment's Python (it imports nothing of tradeoff):
    python tasks/tools/calibration_text.py SOURCE OUT_DIR [--samples N]
SOURCE is any local text data: JSON Lines (GSM8K's {"question", "answer"}, or rows with a "text"
field, or ShareGPT-style "conversations"/"messages"), a JSON file (BBH's {"examples": [{"input",
"target"}]}, or a list of strings / rows), or plain text (paragraphs split at blank lines). The
folder is what TensorRT-LLM's quantize.py takes as `--calib_dataset` (a local dataset directory:
train split, text column) and llmcompressor_quantize.py as `--dataset`: calibration without the hub.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

TEXT_FIELDS = (("question", "answer"), ("input", "target"), ("prompt", "completion"), ("text",), ("content",))


def row_text(row) -> str | None:
    """The text of one data row: known field pairs joined, a conversation's turns, or the string itself."""
    if isinstance(row, str):
        return row
    if not isinstance(row, dict):
        return None
    for fields in TEXT_FIELDS:
        if all(isinstance(row.get(f), str) for f in fields):
            return "\n".join(row[f] for f in fields)
    turns = row.get("conversations") or row.get("messages")
    if isinstance(turns, list):
        parts = [t.get("value") or t.get("content") for t in turns if isinstance(t, dict)]
        return "\n".join(p for p in parts if isinstance(p, str)) or None
    return None


def texts_from(path: Path) -> list[str]:
    """Every sample's text in a local file (see the module docstring); ValueError when there is none."""
    raw = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in raw.splitlines() if line.strip()]
    elif path.suffix == ".json":
        data = json.loads(raw)
        rows = (data.get("examples") or data.get("data") or []) if isinstance(data, dict) else data
    else:
        rows = [p.strip() for p in raw.split("\n\n") if p.strip()]
    texts = [t for t in (row_text(r) for r in rows) if t and t.strip()]
    if not texts:
        raise ValueError(
            f"{path}: no text found (JSON Lines or JSON rows with question/answer, input/target, text, "
            f"or conversations; or plain text)"
        )
    return texts


def write_calibration(source: Path, out_dir: Path, samples: int) -> int:
    """OUT_DIR/train.jsonl from the first `samples` texts of SOURCE (a file, or every file in a folder)."""
    files = (
        sorted(p for p in source.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".txt"))
        if source.is_dir()
        else [source]
    )
    texts: list[str] = []
    for f in files:
        texts += texts_from(f)
        if len(texts) >= samples:
            break
    texts = texts[:samples]
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / "train.jsonl.partial"
    tmp.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    os.replace(tmp, out_dir / "train.jsonl")
    return len(texts)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--samples", type=int, default=512)
    a = ap.parse_args()
    print(write_calibration(a.source, a.out_dir, a.samples))
