"""What extending an adaptive suite costs: seconds per arithmetic item on the demo's variants, served as the nightly
serves them.

Runs the demo's arithmetic suite (3-shot, greedy, its tasks) through the suite's own code against each
variant's llama.cpp server: the first `--first` items, then an extension to `--to` items (the suite's
offset path, as an adaptive look runs it), alternating variants over `--rounds` rounds; prints the
wall seconds per item of each, and the CPU seconds per item the server and the client spent (from
/proc: what an idle host would take, near enough, whatever the load on a shared one), and the
server's start-up. Wall timings depend on the host's load: say which.

    .venv/bin/python benchmarks/adaptive_cost.py [--variants q4_1 q4_1-spec] [--first 80] [--to 160] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from common import demo_config, variant_server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", nargs="+", default=["q4_1", "q4_1-spec"])
    ap.add_argument("--first", type=int, default=80)
    ap.add_argument("--to", type=int, default=160)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    import tasks.loader  # noqa: F401  (registers the built-in suites)
    from tasks.quality.base import SuiteContext, suite_for

    spec = next(s for s in demo_config().quality.suites if s.name == "arithmetic")
    suite = suite_for("arithmetic")
    per_item: dict[str, list[float]] = {v: [] for v in args.variants}
    startup: dict[str, list[float]] = {v: [] for v in args.variants}
    cpu: dict[str, list[tuple[float, float]]] = {v: [] for v in args.variants}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for v in args.variants:
                t0 = time.monotonic()
                with variant_server(Path(tmp) / f"{v}-{r}.log", variant=v) as (url, model, _):
                    startup[v].append(time.monotonic() - t0)
                    server = server_pid(url)
                    ctx = SuiteContext(
                        variant=v,
                        base_url=url,
                        served_model=model,
                        artifact_path=None,
                        reference_artifact_path=None,
                        limit=args.first,
                        seed=spec.seed,
                        params=spec.params,
                        work_dir=Path(tmp),
                    )
                    t1 = time.monotonic()
                    first = suite.run(ctx)
                    t2, cpu2, client2 = time.monotonic(), cpu_s(server), time.process_time()
                    more = suite.run(SuiteContext(**{**ctx.__dict__, "offset": args.first, "limit": args.to}))
                    t3, cpu3, client3 = time.monotonic(), cpu_s(server), time.process_time()
                k = args.to - args.first
                assert len(first.samples) == args.first and len(more.samples) == k
                per_item[v].append((t3 - t2) / k)
                cpu[v].append(((cpu3 - cpu2) / k, (client3 - client2) / k))
                print(
                    f"round {r + 1} {v}: start-up {startup[v][-1]:.1f} s, first {args.first} items "
                    f"{(t2 - t1) / args.first * 1000:.0f} ms/item, extension to {args.to} "
                    f"{per_item[v][-1] * 1000:.0f} ms/item wall, CPU {cpu[v][-1][0] * 1000:.0f} ms server + "
                    f"{cpu[v][-1][1] * 1000:.0f} ms client per item",
                    flush=True,
                )
    for v in args.variants:
        print(
            f"{v}: {statistics.median(per_item[v]) * 1000:.0f} ms per extension item wall, "
            f"{statistics.median(c[0] for c in cpu[v]) * 1000:.0f} ms server CPU + "
            f"{statistics.median(c[1] for c in cpu[v]) * 1000:.0f} ms client CPU (medians of {args.rounds}), "
            f"server start-up {statistics.median(startup[v]):.1f} s"
        )


def server_pid(url: str) -> int:
    """The PID of the server listening on `url`'s port (a child of this process, found by its command line)."""
    port = url.rsplit(":", 1)[1].split("/")[0]
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                args = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--port" in args and args[args.index(b"--port") + 1] == port.encode():
                return int(proc.name)
    raise RuntimeError(f"no process serves port {port}")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (and its waited-for children) from /proc/PID/stat."""
    fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
