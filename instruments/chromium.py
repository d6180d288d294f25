"""Headless Chromium, as the report test and the Prefect UI screenshot start it."""

from __future__ import annotations

import shutil

# No sandbox (containers), no GPU, nothing fetched in the background: a page is rendered from what it holds.
HEADLESS_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str | None:
    """Debian's chromium (or chromium-browser) on PATH; None without it."""
    return shutil.which("chromium") or shutil.which("chromium-browser")
