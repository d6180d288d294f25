"""Open a flow run's page in the Prefect UI in headless Chromium, find its artifacts, save a screenshot.

    python scripts/ui_screenshot.py FLOW_RUN_ID --out run.png [--ui http://127.0.0.1:4200] [--expect tradeoff-table]

The UI is a JavaScript app that loads the run after the page: a wait loop over the Chrome
DevTools Protocol (plain websockets, no Playwright) polls the page's text until the run's
tabs are there, opens the Artifacts tab, polls until every --expect text shows (an artifact's
key), then captures the screenshot. Exit code 0 when every expected text showed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from instruments.chromium import HEADLESS_FLAGS, chromium
from tasks.engines.launcher import stop_group

FLAGS = [*HEADLESS_FLAGS, "--disable-breakpad", "--disable-crash-reporter"]
CLICK_TAB = """(() => { const el = [...document.querySelectorAll('button, [role=tab], a, li')]
  .find(e => e.textContent.trim() === %s); if (el) { el.click(); return true } return false })()"""


def flow_run_url(ui: str, flow_run_id: str) -> str:
    return f"{ui.rstrip('/')}/runs/flow-run/{flow_run_id}"


class Page:
    """One browser tab driven over the DevTools websocket."""

    def __init__(self, ws) -> None:
        self.ws, self.ids = ws, itertools.count(1)

    async def call(self, method: str, **params) -> dict:
        msg_id = next(self.ids)
        await self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(await self.ws.recv())
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    async def text(self) -> str:
        r = await self.call(
            "Runtime.evaluate", expression="document.body ? document.body.innerText : ''", returnByValue=True
        )
        return r.get("result", {}).get("value") or ""

    async def wait_for(self, texts: list[str], timeout_s: float, poll_s: float = 0.5) -> list[str]:
        """Poll the page's text until it holds every one of `texts`; returns those still missing at the timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            body = await self.text()
            missing = [t for t in texts if t not in body]
            if not missing or time.monotonic() > deadline:
                return missing
            await asyncio.sleep(poll_s)


async def _shoot(ws_url: str, url: str, out: Path, expect: list[str], tab: str, timeout_s: float) -> list[str]:
    import websockets

    async with websockets.connect(ws_url, max_size=64 << 20) as ws:
        page = Page(ws)
        await page.call("Page.enable")
        await page.call("Page.navigate", url=url)
        missing = await page.wait_for([tab], timeout_s)  # the run has loaded: its tabs are shown
        if not missing:
            await page.call("Runtime.evaluate", expression=CLICK_TAB % json.dumps(tab), returnByValue=True)
            missing = await page.wait_for(expect, timeout_s)
        await asyncio.sleep(1.0)  # let the last paint land
        shot = await page.call("Page.captureScreenshot", format="png")
        out.write_bytes(base64.b64decode(shot["data"]))
        return missing


def screenshot(
    url: str, out: Path, expect: list[str], tab: str = "Artifacts", timeout_s: float = 90.0, size: str = "1400,1100"
) -> list[str]:
    """Screenshot of `url` after opening `tab` and waiting for `expect`; returns the expected texts never shown."""
    browser = chromium()
    if browser is None:
        raise RuntimeError("chromium is not installed (apt-get install chromium)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tradeoff-chromium-") as profile:
        proc = subprocess.Popen(
            [
                browser,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--window-size={size}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 30
            while not (port_file.exists() and port_file.read_text().strip()):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"chromium did not open its DevTools port (exit code {proc.poll()})")
                time.sleep(0.2)
            port = int(port_file.read_text().split()[0])
            targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
            ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            return asyncio.run(asyncio.wait_for(_shoot(ws_url, url, out, expect, tab, timeout_s), 3 * timeout_s))
        finally:
            # Chromium's own children (renderer, GPU, crash handler) write into the profile after the
            # browser process has gone: stop the whole process group and wait for the last of them
            # before the profile folder is removed (else: "Directory not empty: 'Default'").
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            stop_group(proc.pid, grace_s=10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("flow_run_id")
    p.add_argument("--out", required=True, type=Path, help="PNG to write")
    p.add_argument(
        "--ui",
        default=(os.environ.get("PREFECT_API_URL") or "http://127.0.0.1:4200/api").removesuffix("/api"),
        help="the UI's base URL (default: PREFECT_API_URL without /api)",
    )
    p.add_argument("--expect", action="append", default=[], help="text the Artifacts tab must show (repeat)")
    p.add_argument("--timeout-s", type=float, default=90.0, help="wait this long for the page, then for the texts")
    args = p.parse_args(argv)
    url = flow_run_url(args.ui, args.flow_run_id)
    missing = screenshot(url, args.out, args.expect, timeout_s=args.timeout_s)
    print(f"screenshot {args.out} of {url}" + (f"; never shown: {', '.join(missing)}" if missing else ""))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
