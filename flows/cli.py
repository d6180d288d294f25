"""The `tradeoff` command: check a config, run the nightly flow, load a run folder, print the report and the
recommendation."""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import signal
import sys
from pathlib import Path

from tasks.core.lifecycle import StopSignals

# Everything else is imported by the command that needs it, inside main's signal handling: the
# imports take seconds (Prefect, GX, DuckDB), and Ctrl-C then too ends the command in one line
# with 130, and `tradeoff perf` does not wait for Prefect's.


def _warehouse(args: argparse.Namespace) -> Path:
    return Path(args.warehouse or os.environ.get("TRADEOFF_WAREHOUSE") or "warehouse/tradeoff.duckdb")


def cmd_check(args: argparse.Namespace) -> int:
    import math

    from tasks.core.percentiles import look_confidence
    from tasks.decision.gate_plan import plan_config, plan_lines
    from tasks.decision.ranking import OBJECTIVE_WORDS, RANKED_OBJECTIVE
    from tasks.decision.slo import evidence_lines
    from tasks.loader import load_config

    cfg = load_config(args.config)
    names = ", ".join(f"{v.name}{' (reference)' if v.reference else ''}" for v in cfg.variants)
    suites = ", ".join(s.key for s in cfg.quality.suites) or "none"
    lines, cannot = evidence_lines(cfg)
    trace = ""
    if cfg.perf.trace:
        from tasks.perf.trace import load_trace, trace_duration_s, trace_span_note

        t = cfg.perf.trace
        reqs = load_trace(t.path, "perf.trace", t.max_requests)
        trace = f"; trace {t.path}: {len(reqs)} requests over {trace_duration_s(reqs, t.speed):.1f} s x {t.repeats}"
        cut = trace_span_note(reqs, t, cfg.perf.max_duration_s)
        trace += f" ({cut})" if cut else ""
    print(
        f"ok: {args.config}: {len(cfg.variants)} variants [{names}]; concurrency {cfg.perf.concurrency}{trace}; "
        f"suites [{suites}]; warehouse {cfg.warehouse_path()}"
    )
    if cfg.perf.interleave:
        print(
            f"perf in {cfg.perf.repeats} interleaved rounds (perf.interleave): the variants served at once, round r "
            "of each before round r + 1, the order reversed each round; their servers must fit this host together"
        )
        ext = cfg.decision.extend
        figure = OBJECTIVE_WORDS.get(RANKED_OBJECTIVE.get(cfg.decision.optimise, ""))
        if ext is not None and ext.rank_budget_s and figure is None:
            print(
                f"ranking (decision.extend.rank_budget_s): not extended: optimise {cfg.decision.optimise} has no "
                "interval"
            )
        elif ext is not None and ext.rank_budget_s:
            print(
                f"ranking (decision.extend.rank_budget_s): while the ratio of two neighbouring variants' {figure}, "
                f"paired round by round, is neither above 1 nor within {cfg.decision.tie_tolerance_pct:g} %, the two "
                "get "
                f"{math.ceil(cfg.perf.repeats / 2)} more round(s) of their closed-loop steps, within "
                f"{ext.rank_budget_s:g} s a variant, up to {ext.looks} looks (shared with a step's own claim), each "
                f"read at {look_confidence(cfg.decision.confidence, ext.looks) * 100:.4g} % (tasks/decision/ranking.py)"
            )
    print("\n".join(lines))
    if cannot:
        print(f"warning: {args.config}: the night would judge no variant on the SLO: {cannot}", file=sys.stderr)
    for line in plan_lines(plan_config(cfg, cfg.warehouse_path())):
        print(line)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from tasks.doctor import main as doctor

    return doctor()


def cmd_run(args: argparse.Namespace) -> int:
    from flows.nightly import nightly
    from tasks.core.lifecycle import start_prefect_api, tie_prefect_api
    from tasks.core.runinfo import valid_run_id
    from tasks.loader import load_config_file
    from tasks.orchestration.run_bookkeeping import checked_run
    from tasks.orchestration.run_outcome import run_summary

    valid_run_id(args.run_id, "--run-id")
    text, raw, cfg = load_config_file(args.config)  # bad input fails here, before Prefect or any engine starts
    from tasks.decision.slo import evidence_lines

    tie_prefect_api()  # Prefect's ephemeral API, when this process starts one, dies with it
    # Results location, work pool, notify block: one line each. The nightly takes the checked run as it is.
    checked = checked_run(args.config, text, raw, cfg, args.run_id, args.work_pool)
    # Said before any work, as `tradeoff check` says it, once the run's errors (one line each) are ruled out.
    _, cannot = evidence_lines(cfg)
    if cannot:
        print(f"warning: {args.config}: the night will judge no variant on the SLO: {cannot}", file=sys.stderr)
    start_prefect_api()  # now, from this thread (not lazily from one of Prefect's worker threads)
    summary = run_summary(nightly(config=checked, run_id=args.run_id, work_pool=args.work_pool, return_state=True))
    print(
        f"run {summary['run_id']}: {summary['status']}; warehouse {summary['warehouse']}; folder {summary['run_dir']}"
    )
    return 0 if summary["status"] == "ok" else 1


def cmd_load(args: argparse.Namespace) -> int:
    from tasks.orchestration.warehouse_ops import load_checked

    counts = load_checked(args.run_dir, _warehouse(args), skip_validation=args.skip_validation)
    print("loaded: " + ", ".join(f"{t} {n}" for t, n in counts.items()))
    return 0


def cmd_warehouse_rebuild(args: argparse.Namespace) -> int:
    """Build the warehouse anew from every run folder (or a results URL), each through the nightly's gate."""
    from tasks.orchestration.warehouse_ops import rebuild

    summary = rebuild(_warehouse(args), runs=args.runs_dir, results_url=args.results_url)
    print(summary.line())
    return 1 if summary.skipped else 0


def cmd_report(args: argparse.Namespace) -> int:
    from tasks.report.html import write_html
    from tasks.report.text import format_report, latest_run_id
    from warehouse.db import open_warehouse

    con = open_warehouse(_warehouse(args), read_only=True)
    try:
        print(format_report(con, args.run, brief=args.brief))  # also rejects an unknown run id
        if args.html:
            path = write_html(con, args.run or latest_run_id(con), args.html)
            print(f"html report: {path}")
    finally:
        con.close()
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """What changed across nights, newest first; --all: each matching series and its change points (v_history,
    v_change_points)."""
    from tasks.report.history import format_history, parse_day
    from warehouse.db import open_warehouse

    since = parse_day("--since", args.since)
    con = open_warehouse(_warehouse(args), read_only=True)
    try:
        print(format_history(con, args.config, args.variant, args.metric, since, args.all))
    finally:
        con.close()
    return 0


def cmd_recommend(args: argparse.Namespace) -> int:
    """Which variant to ship under the run's SLO and quality gate (v_recommendation): one screen, the evidence in
    full (--explain) or the decision as JSON (--json)."""
    import json

    from tasks.report.recommend import format_recommendation, overrides_from_args, stability_from_args
    from tasks.report.screen import format_screen, recommendation_data
    from warehouse.db import open_warehouse

    overrides = overrides_from_args(args)  # bad flags fail here, before the warehouse is opened
    stability = stability_from_args(args)
    con = open_warehouse(_warehouse(args), read_only=True)
    try:
        if args.json:
            print(json.dumps(recommendation_data(con, args.run, overrides, stability), indent=1))
        elif args.explain:
            print(format_recommendation(con, args.run, overrides, stability))
        else:
            print(format_screen(con, args.run, overrides, stability))
    finally:
        con.close()
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    """Run one SQL statement read-only and print its result as a table."""
    import duckdb

    from warehouse.db import open_warehouse
    from warehouse.errors import REBUILD_HINT, is_damaged

    con = open_warehouse(_warehouse(args), read_only=True)
    try:
        if not args.allow_external:
            # No file writes (COPY ... TO), reads of other files or extension installs from a query.
            con.execute("set enable_external_access = false")
            con.execute("set lock_configuration = true")
        rel = con.sql(args.query)
        if rel is not None:
            rel.show(max_width=args.max_width, max_rows=args.max_rows)
    except duckdb.Error as err:
        hint = f"; the warehouse file is damaged: {REBUILD_HINT}" if is_damaged(str(err)) else ""
        print(f"error: {str(err).splitlines()[0]}{hint}", file=sys.stderr)
        return 1
    finally:
        con.close()
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Write a table or view (or a select query) to Parquet or CSV, by the output's extension.

    NAME must be a table or view of the warehouse (quoted as an identifier, never pasted into SQL); a
    select query runs with external access off, the output file the one path it may write.
    """
    import duckdb

    from warehouse.db import open_warehouse

    out = Path(args.output)
    fmt = {".parquet": "parquet", ".csv": "csv"}.get(out.suffix.lower())
    if fmt is None:
        print(f"error: --output: unknown format '{out.suffix}'; use a .parquet or .csv file name", file=sys.stderr)
        return 2
    quote = lambda s: "'" + s.replace("'", "''") + "'"
    con = open_warehouse(_warehouse(args), read_only=True)
    try:
        if args.name.strip().lower().startswith(("select", "with")):
            what = args.name
        else:
            names = {
                n
                for (n,) in con.execute(
                    "select table_name from duckdb_tables() where database_name = current_database() union "
                    "select view_name from duckdb_views() where database_name = current_database() and not internal"
                ).fetchall()
            }
            if args.name not in names:
                near = ", ".join(sorted(n for n in names if n.startswith("v_"))[:8])
                print(
                    f"error: NAME: {args.name[:60]!r} is not a table or view of the warehouse; give one (e.g. {near}) "
                    f"or a select query",
                    file=sys.stderr,
                )
                return 2
            what = 'select * from "' + args.name + '"'
        out.parent.mkdir(parents=True, exist_ok=True)
        target = str(out.resolve())
        con.execute(f"set allowed_paths = [{quote(target)}]")  # the one file the statement may touch
        con.execute("set enable_external_access = false")
        con.execute("set lock_configuration = true")
        con.execute(f"copy ({what}) to {quote(target)} (format {fmt})")
    except duckdb.Error as err:
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 1
    finally:
        con.close()
    print(f"wrote {out}")
    return 0


def cmd_perf(args: argparse.Namespace) -> int:
    """Measure a running OpenAI-compatible server; write vllm-bench-serve-style JSON."""
    from tasks.perf.options import scenarios_without_ok
    from tasks.perf.perf_run import run_standalone as run_perf_standalone
    from tasks.perf.vllm_json import one_line

    results = run_perf_standalone(args)
    for r in results:
        print(one_line(r))
    print(f"wrote {args.output} ({len(results)} scenario{'s' if len(results) != 1 else ''})")
    failed = scenarios_without_ok(results)
    if failed:
        print(
            f"error: no ok request in scenario {', '.join(failed)}: every request there errored or was cut short "
            f"(see {args.output}, --detailed lists each error)",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_quality(args: argparse.Namespace) -> int:
    """One quality suite against any running endpoint; tables, summary and the suite's own files in --output."""
    import tasks.loader  # noqa: F401  (registers the built-in engines and suites)
    from tasks.quality.suite_loop import format_summary, load_suite_spec, parse_param
    from tasks.quality.suite_loop import run_standalone as run_quality_standalone

    params = dict(parse_param(t) for t in args.param or [])
    spec = load_suite_spec(args.suite, limit=args.limit, params=params, seed=args.seed)
    summary = run_quality_standalone(
        args.endpoint,
        args.model,
        spec,
        Path(args.output),
        gguf=Path(args.gguf) if args.gguf else None,
        reference_gguf=Path(args.reference_gguf) if args.reference_gguf else None,
        n_ctx=args.n_ctx,
        timeout_s=args.timeout_s,
        max_error_rate=args.max_error_rate,
    )
    print(format_summary(summary))
    print(f"wrote {args.output}")
    return 1 if any(s["metric"] == "suite_failed" for s in summary["scores"]) else 0


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a share between 0 and 1, e.g. 0.1 for 10 %")
    return value


def cmd_trace(args: argparse.Namespace) -> int:
    """Generate a seeded trace for `perf.trace:` or `tradeoff perf --trace`."""
    from tasks.perf.trace import generate_trace, shape_from_args, trace_line, write_trace

    lines = generate_trace(shape_from_args(args), args.seed)
    write_trace(lines, args.output)
    print(trace_line(lines, args.output))
    return 0


def parser() -> argparse.ArgumentParser:
    from tasks.perf.options import add_arguments as add_perf_arguments
    from tasks.perf.trace import add_arguments as add_trace_arguments

    p = argparse.ArgumentParser(prog="tradeoff", description="What each LLM speed optimisation really costs.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="validate a config without running anything")
    c.add_argument("config")
    c.set_defaults(func=cmd_check)
    c = sub.add_parser(
        "doctor",
        help="check this host: packages, the llama.cpp build (one real token), engines, "
        "energy meters, Prefect, chromium; one line each",
    )
    c.set_defaults(func=cmd_doctor)
    c = sub.add_parser("run", help="run the nightly flow on a config")
    c.add_argument("config")
    c.add_argument("--run-id", help="reuse a run id: re-run a crashed run, skipping its variants already measured")
    c.add_argument(
        "--work-pool",
        help="fan the variants out on this Prefect work pool (overrides scale_out.work_pool; '' runs them in-process)",
    )
    c.set_defaults(func=cmd_run)
    _add_warehouse_commands(sub)
    c = sub.add_parser("perf", help="measure any running OpenAI-compatible server (JSON as vllm bench serve)")
    add_perf_arguments(c)
    c.set_defaults(func=cmd_perf)
    c = sub.add_parser(
        "trace", help="write a seeded synthetic request trace (Mooncake JSONL: diurnal rate, bursts, prefix groups)"
    )
    add_trace_arguments(c)
    c.set_defaults(func=cmd_trace)
    _add_quality_command(sub)
    return p


def _add_warehouse(c: argparse.ArgumentParser) -> None:
    c.add_argument("--warehouse", help="DuckDB file (default: TRADEOFF_WAREHOUSE or warehouse/tradeoff.duckdb)")


def _add_warehouse_commands(sub) -> None:
    """The commands that load, rebuild, read and export the warehouse."""
    c = sub.add_parser("load", help="load a run folder's Parquet results into the warehouse")
    c.add_argument("run_dir")
    _add_warehouse(c)
    c.add_argument(
        "--skip-validation",
        action="store_true",
        help="load without the nightly's GX gate (experts: results that gate refuses)",
    )
    c.set_defaults(func=cmd_load)
    c = sub.add_parser("warehouse", help="warehouse upkeep: rebuild it from the run folders")
    w = c.add_subparsers(dest="action", required=True).add_parser(
        "rebuild",
        help="build the warehouse anew from every run folder, each through the nightly's gate; "
        "the previous file is kept as <warehouse>.before-rebuild",
    )
    src = w.add_mutually_exclusive_group()
    src.add_argument("--runs-dir", help="folder of run folders (default: TRADEOFF_RUNS_DIR or runs)")
    src.add_argument("--results-url", help="results location (folder or fsspec URL) to fetch the run folders from")
    _add_warehouse(w)
    w.set_defaults(func=cmd_warehouse_rebuild)
    c = sub.add_parser("report", help="print a run's trade-off table and takeaways")
    c.add_argument("--run", help="run id (default: the latest)")
    c.add_argument("--html", metavar="PATH", help="also write the self-contained HTML report (tables and plots)")
    c.add_argument(
        "--brief",
        action="store_true",
        help="the table, takeaways and the gates' power only (the evidence: tradeoff recommend --explain)",
    )
    _add_warehouse(c)
    c.set_defaults(func=cmd_report)
    c = sub.add_parser(
        "history",
        help="what changed across nights, newest first, one line per change (Otava, or the band rule on a "
        "series' first nights); --all: every series (keyed on what was measured), one metric: every night",
    )
    c.add_argument("--config", help="series with a night under this config name (a renamed config shows it all)")
    c.add_argument("--variant", help="series of this variant")
    c.add_argument("--metric", help="one metric, e.g. tpot_ms_mean or arithmetic.accuracy (with --all: every night)")
    c.add_argument("--since", metavar="YYYY-MM-DD", help="only changes and nights from this day (UTC) on")
    c.add_argument("--all", action="store_true", help="every matching series, with or without a change")
    _add_warehouse(c)
    c.set_defaults(func=cmd_history)
    _add_recommend_command(sub)
    c = sub.add_parser("sql", help="run a SQL query on the warehouse (read-only) and print the result")
    c.add_argument("query")
    c.add_argument("--max-rows", type=int, default=100)
    c.add_argument("--max-width", type=int, default=200)
    _add_warehouse(c)
    c.add_argument(
        "--allow-external",
        action="store_true",
        help="let the query read or write other files and load extensions (off by default)",
    )
    c.set_defaults(func=cmd_sql)
    c = sub.add_parser("export", help="write a table, view or select query to .parquet or .csv")
    c.add_argument(
        "name", help="table or view name (e.g. v_tradeoff), or a select query (run without access to other files)"
    )
    c.add_argument("--output", "-o", required=True, help="file name ending in .parquet or .csv")
    _add_warehouse(c)
    c.set_defaults(func=cmd_export)


def _add_recommend_command(sub) -> None:
    """`tradeoff recommend`: the flags are read by tasks.report.recommend (overrides_from_args, stability_from_args)
    and checked by DecisionSpec, one line each."""
    from tasks.decision.stability import STABILITY_RESAMPLES

    c = sub.add_parser(
        "recommend",
        help="which variant to ship under an SLO and a quality gate, at what load and cost (v_recommendation)",
    )
    c.add_argument("--run", help="run id (default: the latest)")
    c.add_argument(
        "--slo",
        help="a preset (mlperf-llama2-70b-server, mlperf-llama2-70b-interactive) or limits, "
        "e.g. ttft_ms=500,tpot_ms=50 (default: the run's decision.slo, else perf.slo)",
    )
    c.add_argument("--percentile", help="share of a step's requests that must meet each limit, e.g. 99 (default 99)")
    c.add_argument(
        "--gate",
        action="append",
        metavar="SUITE.METRIC",
        help="gating quality metric; repeatable (default: the run's decision.gate_metrics, else the primary)",
    )
    c.add_argument(
        "--retention", help="share of the reference's score each gating metric must keep, e.g. 0.99 or 0.999"
    )
    c.add_argument(
        "--margin-points",
        dest="margin_points",
        help="non-inferiority margin for fraction metrics instead of --retention: at most this many points lost",
    )
    c.add_argument(
        "--identity-gate",
        dest="identity_gate",
        action="store_true",
        default=None,
        help="a speculative variant whose plain decoding is the reference passes on its identity evidence",
    )
    c.add_argument("--optimise", help="rate | tps | cost | energy | cost_per_correct (default: rate)")
    c.add_argument("--grid-gco2e-per-kwh", dest="grid", help="grid carbon intensity (gCO2e/kWh) for carbon per token")
    _add_warehouse(c)
    layer = c.add_mutually_exclusive_group()
    layer.add_argument(
        "--explain",
        action="store_true",
        help="the evidence in full: every claim with its requests, looks, design effects, host and ranking",
    )
    layer.add_argument("--json", action="store_true", help="the same decision as one JSON object, for machines")
    c.add_argument(
        "--stability",
        default=str(STABILITY_RESAMPLES),
        metavar="N",
        help=f"replicates of the perf side for how often the pick holds (default {STABILITY_RESAMPLES}; 0: off)",
    )
    c.set_defaults(func=cmd_recommend)


def _add_quality_command(sub) -> None:
    """`tradeoff quality`: one suite against any running OpenAI-compatible endpoint."""
    c = sub.add_parser("quality", help="run one quality suite against any running OpenAI-compatible endpoint")
    c.add_argument("--endpoint", required=True, help="base URL, e.g. http://127.0.0.1:8000 (a trailing /v1 is fine)")
    c.add_argument("--model", required=True, help="model name the endpoint serves")
    c.add_argument(
        "--suite",
        required=True,
        help="suite name (arithmetic, longctx, lm_eval, ...) or a YAML file "
        "with one suite spec (name, limit, seed, params)",
    )
    c.add_argument("--limit", type=int, help="number of samples")
    c.add_argument("--seed", type=int, help="the suite's seed")
    c.add_argument("--param", action="append", metavar="KEY=VALUE", help="suite parameter, value as YAML; repeatable")
    c.add_argument("--output", required=True, help="folder for results, scores.json and the suite's own files")
    c.add_argument("--gguf", help="the GGUF the endpoint serves: the model's tokenizer, in-process log-likelihood")
    c.add_argument("--reference-gguf", help="the reference GGUF (fidelity)")
    c.add_argument("--n-ctx", type=int, default=2048, help="the endpoint's context length (tokens)")
    c.add_argument("--timeout-s", type=float, default=300.0, help="per request (seconds)")
    c.add_argument(
        "--max-error-rate",
        type=_share,
        default=0.1,
        help="share of requests that may error at the "
        "endpoint (0-1); above it the suite is suite_failed instead of a score",
    )
    c.set_defaults(func=cmd_quality)


def main(argv: list[str] | None = None) -> int:
    stop = StopSignals(owns_process=argv is None)  # argv None: the `tradeoff` command's own process
    code = _run(stop, argv)
    if stop.owns_process and stop.signum is not None:
        end_stopped(code)
    return code


def end_stopped(code: int) -> None:
    """End the command's own process after a stop, with `code`: its exit hooks run (Prefect stops its API, logging
    flushes), then the process exits at once. Left to the interpreter, the exit walks the ~200,000 objects Prefect,
    GX, pandas and torch leave (9-10 s after a Ctrl-C on 2 busy cores), joins threads a library left running, and
    a KeyboardInterrupt raised there (CI saw one: exit -2, 'killed by SIGINT', after the one line was printed)
    would end it with the signal instead of the code."""
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()  # the interpreter's own call at exit; an error in a hook is printed and the next runs
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _run(stop: StopSignals, argv: list[str] | None) -> int:
    try:
        # SIGTERM and SIGHUP stop as Ctrl-C does (servers stopped, Prefect's API too); a second signal exits at once.
        with stop:
            args = parser().parse_args(argv)
            code = args.func(args)
        # A command that went on after the signal (a library swallowed the interrupt) was still stopped.
        return stopped(stop) if stop.signum is not None else code
    except KeyboardInterrupt:
        return stopped(stop)
    except BaseException as err:  # users get one line; TRADEOFF_DEBUG=1 shows the traceback
        # The stop, turned into its own error by a library: DuckDB's 'Query interrupted', or pydantic_core's pyo3
        # PanicException (a BaseException) when Ctrl-C lands inside its import of the datetime C API.
        if stop.signum is not None:
            return stopped(stop)
        if not isinstance(err, Exception):
            raise
        return error_line(err)
    finally:
        if stop.owns_process:
            # The process ends now; its exit hooks still run, but the interpreter's last collections need not walk
            # the objects that Prefect, GX, pandas and torch leave: the memory goes back to the system anyway.
            gc.freeze()


def stopped(stop: StopSignals) -> int:
    if stop.signum is None:  # a KeyboardInterrupt no handler of ours noted: Python's own, for Ctrl-C
        stop.signum = signal.SIGINT
    print(f"stopped by {stop.name}; what it started is stopped", file=sys.stderr)
    return stop.exit_code


def error_line(err: Exception) -> int:
    """One line on stderr for a failed command: exit 2 for bad input (ConfigError), 1 for anything else."""
    from tasks.core.errors import ConfigError
    from warehouse.errors import REBUILD_HINT, WarehouseError, is_damaged

    if isinstance(err, ConfigError):
        print(f"error: {err}", file=sys.stderr)
        return 2
    if os.environ.get("TRADEOFF_DEBUG"):
        raise err
    prefix = "error" if isinstance(err, WarehouseError) else f"error ({type(err).__name__})"
    damaged = is_damaged(str(err)) and REBUILD_HINT not in str(err)
    hint = f"; the warehouse file is damaged: {REBUILD_HINT}" if damaged else ""
    print(f"{prefix}: {str(err).splitlines()[0] if str(err) else ''}{hint}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
