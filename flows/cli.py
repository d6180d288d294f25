"""The `tradeoff` command: check a config, run the nightly flow, load a run folder, print the report."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# Prefect's ephemeral API was seen to need ~20 s to start on a loaded 2-core machine;
# its default start-up timeout (20 s) then fails the run before it begins.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")


def _warehouse(args: argparse.Namespace) -> Path:
    return Path(args.warehouse or os.environ.get("TRADEOFF_WAREHOUSE") or "warehouse/tradeoff.duckdb")


def cmd_check(args: argparse.Namespace) -> int:
    from tasks.config import load_config

    cfg = load_config(args.config)
    names = ", ".join(f"{v.name}{' (reference)' if v.reference else ''}" for v in cfg.variants)
    suites = ", ".join(s.name for s in cfg.quality.suites) or "none"
    print(f"ok: {args.config}: {len(cfg.variants)} variants [{names}]; concurrency {cfg.perf.concurrency}; "
          f"suites [{suites}]; warehouse {cfg.warehouse_path()}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from tasks.config import load_config

    load_config(args.config)  # bad input fails here, before Prefect or any engine starts
    from flows.nightly import nightly

    summary = nightly(config=args.config, run_id=args.run_id)
    print(f"run {summary['run_id']}: {summary['status']}; warehouse {summary['warehouse']}; folder {summary['run_dir']}")
    return 0 if summary["status"] == "ok" else 1


def cmd_load(args: argparse.Namespace) -> int:
    from warehouse.db import load_run

    counts = load_run(args.run_dir, _warehouse(args))
    print("loaded: " + ", ".join(f"{t} {n}" for t, n in counts.items()))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from tasks.report import format_report, latest_run_id
    from warehouse.db import open_warehouse

    con = open_warehouse(_warehouse(args), read_only=True)
    try:
        print(format_report(con, args.run))  # also rejects an unknown run id
        if args.html:
            from tasks.report_html import write_html

            path = write_html(con, args.run or latest_run_id(con), args.html)
            print(f"html report: {path}")
    finally:
        con.close()
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    """Run one SQL statement read-only and print its result as a table."""
    import duckdb

    from warehouse.db import open_warehouse

    con = open_warehouse(_warehouse(args), read_only=True)
    try:
        rel = con.sql(args.query)
        if rel is not None:
            rel.show(max_width=args.max_width, max_rows=args.max_rows)
    except duckdb.Error as err:
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 1
    finally:
        con.close()
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Write a table or view (or a query) to Parquet or CSV, by the output's extension."""
    import duckdb

    from warehouse.db import open_warehouse

    out = Path(args.output)
    fmt = {".parquet": "parquet", ".csv": "csv"}.get(out.suffix.lower())
    if fmt is None:
        print(f"error: --output: unknown format '{out.suffix}'; use a .parquet or .csv file name", file=sys.stderr)
        return 2
    what = args.name if args.name.strip().lower().startswith("select") else f"select * from {args.name}"
    con = open_warehouse(_warehouse(args), read_only=True)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        con.execute(f"copy ({what}) to '{str(out).replace(chr(39), chr(39) * 2)}' (format {fmt})")
    except duckdb.Error as err:
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 1
    finally:
        con.close()
    print(f"wrote {out}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tradeoff", description="What each LLM speed optimisation really costs.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="validate a config without running anything")
    c.add_argument("config")
    c.set_defaults(func=cmd_check)
    c = sub.add_parser("run", help="run the nightly flow on a config")
    c.add_argument("config")
    c.add_argument("--run-id", help="reuse a run id (e.g. to re-run a crashed run into its folder)")
    c.set_defaults(func=cmd_run)
    c = sub.add_parser("load", help="load a run folder's Parquet results into the warehouse")
    c.add_argument("run_dir")
    c.add_argument("--warehouse", help="DuckDB file (default: TRADEOFF_WAREHOUSE or warehouse/tradeoff.duckdb)")
    c.set_defaults(func=cmd_load)
    c = sub.add_parser("report", help="print a run's trade-off table and takeaways")
    c.add_argument("--run", help="run id (default: the latest)")
    c.add_argument("--html", metavar="PATH", help="also write the self-contained HTML report (tables and plots)")
    c.add_argument("--warehouse", help="DuckDB file (default: TRADEOFF_WAREHOUSE or warehouse/tradeoff.duckdb)")
    c.set_defaults(func=cmd_report)
    c = sub.add_parser("sql", help="run a SQL query on the warehouse (read-only) and print the result")
    c.add_argument("query")
    c.add_argument("--max-rows", type=int, default=100)
    c.add_argument("--max-width", type=int, default=200)
    c.add_argument("--warehouse", help="DuckDB file (default: TRADEOFF_WAREHOUSE or warehouse/tradeoff.duckdb)")
    c.set_defaults(func=cmd_sql)
    c = sub.add_parser("export", help="write a table, view or select query to .parquet or .csv")
    c.add_argument("name", help="table or view name (e.g. v_tradeoff), or a select query")
    c.add_argument("--output", "-o", required=True, help="file name ending in .parquet or .csv")
    c.add_argument("--warehouse", help="DuckDB file (default: TRADEOFF_WAREHOUSE or warehouse/tradeoff.duckdb)")
    c.set_defaults(func=cmd_export)
    return p


def main(argv: list[str] | None = None) -> int:
    from tasks.config import ConfigError

    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - users get one line; TRADEOFF_DEBUG=1 shows the traceback
        if os.environ.get("TRADEOFF_DEBUG"):
            raise
        from warehouse.db import WarehouseError

        prefix = "error" if isinstance(err, WarehouseError) else f"error ({type(err).__name__})"
        print(f"{prefix}: {str(err).splitlines()[0] if str(err) else ''}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
