"""What the hardening costs and how fast it refuses: the code jail per function, its kill at the deadline, the
YAML alias bomb.

    python benchmarks/bench_sandbox.py [--calls 20]

- one code-suite function (5 tests) through `run_tests`: in the bubblewrap jail and unconfined
  (`sandbox: none`), interleaved, median and p90 wall time;
- a hostile candidate (a detached setsid child, then a hang) with a 1 s timeout, jailed and with
  `sandbox: none`: wall time until `run_untrusted` returns, the processes the harness killed at the
  deadline besides the candidate, and how many were left (must be 0); which cgroup held the totals;
- the YAML alias bomb (10 references per level) refused by `tasks.core.bounds.load_yaml`, against
  what the same 10^6-value document cost before (json.dumps of it, as config_json did).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from tasks.core.bounds import load_yaml
from tasks.quality.sandbox import Limits, run_untrusted, unavailable_reason
from tasks.quality.suites.code import _CANDIDATE, code_problems, run_tests

HOSTILE = """
import os, time
if os.fork() == 0:
    os.setsid()
    os.execv("/usr/bin/sleep", ["sleep", "600"])
def f(x):
    time.sleep(60)
"""


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def bomb(levels: int) -> str:
    lines = ["x0: &x0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    t0 = time.perf_counter()
    reason = unavailable_reason()
    print(f"jail probe: {1000 * (time.perf_counter() - t0):.0f} ms ({reason or 'bwrap jail starts'})")
    if reason:
        return 1
    prob = next(p for p in code_problems(30, 0) if p.name == "add")
    source = prob.header + "\n    return a + b\n"
    times: dict[str, list[float]] = {"bwrap": [], "none": []}
    for i in range(args.calls):
        for mode in ("bwrap", "none") if i % 2 == 0 else ("none", "bwrap"):
            t = time.perf_counter()
            assert run_tests(source, prob.name, prob.tests, 5.0, sandbox=mode) == (len(prob.tests), None)
            times[mode].append(time.perf_counter() - t)
    for mode, ts in times.items():
        ts.sort()
        print(
            f"run_tests, 5 tests, sandbox {mode}: median {1000 * statistics.median(ts):.0f} ms, "
            f"p90 {1000 * ts[int(0.9 * (len(ts) - 1))]:.0f} ms ({len(ts)} calls)"
        )
    for confine in (True, False):
        t = time.perf_counter()
        out = run_untrusted(_CANDIDATE, json.dumps([HOSTILE, "f", [[1]]]), Limits(wall_s=1.0, cpu_s=1), confine=confine)
        left = [p for p in Path("/proc").glob("[0-9]*") if b"sleep\x00600" in _cmdline(p)]
        print(
            f"hostile candidate, 1 s timeout, {'jail' if confine else 'sandbox: none'}: returned after "
            f"{time.perf_counter() - t:.2f} s; the harness ended it at the deadline "
            f"({(out.verdict or {}).get('timed_out')}) "
            f"and killed {(out.verdict or {}).get('killed')} other process(es); {len(out.survivors) + len(left)} left; "
            f"cgroup {out.cgroup or 'none (rlimits only)'}"
        )
    for levels in (6, 9):
        t = time.perf_counter()
        try:
            load_yaml(bomb(levels))
            refused = "NOT refused"
        except ValueError:
            refused = "refused"
        print(f"alias bomb of 10^{levels} values: {refused} in {1000 * (time.perf_counter() - t):.1f} ms")
    import yaml

    t = time.perf_counter()
    size = len(json.dumps(yaml.safe_load(bomb(6))))
    print(
        f"before: the 10^6 bomb through yaml.safe_load + json.dumps: {time.perf_counter() - t:.2f} s, "
        f"{size / 1e6:.1f} MB (10^9: ~1000x that)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
