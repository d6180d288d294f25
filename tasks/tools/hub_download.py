"""Download a hub model's serving files into the Hugging Face cache; print the snapshot folder.

Run as a script by the Python of an engine's environment (huggingface_hub installed; it imports
nothing of tradeoff):
    python tasks/tools/hub_download.py REPO OUT_FILE
Only what an engine loads is fetched (`serving_patterns`): configs, tokenizer files, chat templates,
custom code and the weights in one format, safetensors when the repo has them (else PyTorch .bin),
never the `original/` folder of Llama repos (Meta's consolidated copy, ~16 GB for Llama-3.1-8B).
The snapshot folder's path is written to OUT_FILE.
"""

from __future__ import annotations

import sys

CONFIG_PATTERNS = ["*.json", "*.model", "*.tiktoken", "*.txt", "*.jinja", "*.py"]
IGNORE_PATTERNS = ["original/*", "*/original/*"]


def serving_patterns(files: list[str]) -> list[str]:
    """allow_patterns for snapshot_download: configs and tokenizer, and the weights in one format."""
    served = [f for f in files if not f.startswith("original/") and "/original/" not in f]
    weights = ["*.safetensors"] if any(f.endswith(".safetensors") for f in served) else ["*.bin"]
    return CONFIG_PATTERNS + weights


def main(repo: str, out_file: str) -> None:
    from huggingface_hub import HfApi, snapshot_download

    files = HfApi().list_repo_files(repo)
    path = snapshot_download(repo, allow_patterns=serving_patterns(files), ignore_patterns=IGNORE_PATTERNS)
    with open(out_file, "w") as f:
        f.write(path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: hub_download.py REPO OUT_FILE")
    main(sys.argv[1], sys.argv[2])
