"""What a GPU host fetches and feeds the quantizers: hub downloads of serving files only, local calibration data.

Both run in the engine's own environment (its Python) as argument lists, never shell strings:
- `download_command`: tools/hub_download.py, snapshot_download with allow_patterns (configs,
  tokenizer, one weight format) and without Llama's `original/` folder;
- `calibration_command`: tools/calibration_text.py, a local file or folder (the GSM8K/BBH files,
  any text) turned into a `train.jsonl` of {"text"} rows, the local dataset folder TensorRT-LLM's
  quantize.py (`--calib_dataset`) and llm-compressor (`--dataset`) read without the hub.
"""

from __future__ import annotations

import os
from pathlib import Path

from tasks.core.runinfo import TOOLS

HUB_DOWNLOAD = TOOLS / "hub_download.py"
CALIBRATION_TEXT = TOOLS / "calibration_text.py"


def download_command(python: str, repo: str, out_file: Path) -> list[str]:
    """Download `repo`'s serving files into the HF cache; the snapshot folder's path is written to `out_file`."""
    return [python, str(HUB_DOWNLOAD), repo, str(out_file)]


def is_local_data(spec: str) -> bool:
    """A calibration source given as a path (absolute, relative, ~, or an existing file) rather than a hub name."""
    return (
        spec.startswith(("/", "./", "../", "~"))
        or Path(os.path.expanduser(spec)).exists()
        or spec.endswith((".json", ".jsonl", ".txt"))
    )


def calibration_command(python: str, source: str, out_dir: Path, samples: int) -> list[str]:
    """`out_dir/train.jsonl` from a local calibration source, first `samples` texts."""
    return [
        python,
        str(CALIBRATION_TEXT),
        str(Path(os.path.expanduser(source)).resolve()),
        str(out_dir),
        "--samples",
        str(samples),
    ]
