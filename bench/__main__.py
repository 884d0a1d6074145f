"""`python -m bench`: run every benchmark and write bench/results.json and bench/RESULTS.md.

    python -m bench                      # everything, the issue's sizes (hours on a loaded 2-core box)
    python -m bench --quick              # small sizes, 2 rounds: a smoke run of the harness
    python -m bench --only capture,memory --sizes 100000 --widths 20

By default the capture, memory and fixed-cost workloads run against a private MariaDB + ZooKeeper
(scripts/services.sh with the harness's own directory and ports, stopped by PID and deleted at the
end): the big workloads write GBs of binlog, which must not land on the shared server. `--shared`
uses the shared services instead (own database names, dropped at the end, binlogs left as they are).
Never part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench import common
from bench.common import ROOT, PrivateServices, log, short_error


def _ints(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", default="capture,merge,fixed,memory", help="sections to run (comma-separated)")
    p.add_argument("--quick", action="store_true", help="small sizes and 2 rounds (a smoke run)")
    p.add_argument("--repeats", type=int, default=3, help="rounds per figure (median reported)")
    p.add_argument("--long-run", type=float, default=300.0, help="no further rounds after a round this long (s)")
    p.add_argument("--sizes", type=_ints, default=None, help="capture: row changes per workload (default 1e5,1e6)")
    p.add_argument("--widths", type=_ints, default=None, help="capture: table widths (default 5,20,60)")
    p.add_argument("--txns", type=_ints, default=None, help="capture: rows per transaction (default 1,1000)")
    p.add_argument("--stock-max-rows", type=int, default=20_000, help="capture: rows the stock loop reads per run")
    p.add_argument("--merge-sizes", type=_ints, default=None, help="merge: table sizes (default 1e5,1e6,1e7)")
    p.add_argument("--merge-window", type=int, default=10_000, help="merge: changes in the fixed window")
    p.add_argument("--big-window", type=int, default=1_000_000, help="merge: changes in the big window")
    p.add_argument("--big-table", type=int, default=1_000_000, help="merge: rows of the big window's table")
    p.add_argument("--memory-sizes", type=_ints, default=None, help="memory: window sizes (default 1e5,1e6)")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--shared", action="store_true", help="use the shared services (scripts/services.sh)")
    p.add_argument("--keep-services", action="store_true", help="leave the private services running")
    p.add_argument("--mariadb-port", type=int, default=13316)
    p.add_argument("--zk-port", type=int, default=22191)
    p.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir, deleted)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results.json"))
    p.add_argument("--no-dag", action="store_true", help="fixed cost: skip the Airflow runs")
    p.add_argument("--family-rows", type=int, default=100_000, help="families: rows per workload (issue 19: 1e5)")
    p.add_argument("--families", default=None,
                   help="families: which (comma-separated; default every family + mixed10/20/60)")
    p.add_argument("--family-ops", default="insert,update", help="families: insert, update or both")
    p.add_argument("--schema-rows", type=lambda x: int(float(x)), default=None,
                   help="schema: rows of the 20-column tables (issue 34: 1e6)")
    p.add_argument("--schema-wide-rows", type=lambda x: int(float(x)), default=None,
                   help="schema: rows of the 60-column table (default: --schema-rows)")
    p.add_argument("--schema-cases", default=None,
                   help="schema: which cases (comma-separated; each with the case it is compared with)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats = min(args.repeats, 2)
        args.sizes = args.sizes or [20_000]
        args.widths = args.widths or [20]
        args.txns = args.txns or [1000]
        args.stock_max_rows = min(args.stock_max_rows, 20_000)
        args.merge_sizes = args.merge_sizes or [100_000, 1_000_000]
        args.merge_window = min(args.merge_window, 10_000)
        args.big_window = min(args.big_window, 100_000)
        args.big_table = min(args.big_table, 100_000)
        args.memory_sizes = args.memory_sizes or [20_000, 100_000]
        args.schema_rows = args.schema_rows or 100_000
    args.sizes = args.sizes or [100_000, 1_000_000]
    args.widths = args.widths or [5, 20, 60]
    args.txns = args.txns or [1, 1000]
    args.merge_sizes = args.merge_sizes or [100_000, 1_000_000, 10_000_000]
    args.memory_sizes = args.memory_sizes or [100_000, 1_000_000]
    args.schema_rows = args.schema_rows or 1_000_000
    args.schema_wide_rows = args.schema_wide_rows or args.schema_rows
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="cdc-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    out_path = Path(args.out)
    run_info = {"command": " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])])}
    results: dict[str, Any] = {
        "started": common.now_iso(),
        "command": run_info["command"],
        "machine": common.machine_info(),
        "load_avg_start": common.load_avg(),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "workdir")},
    }
    private = None
    si = None
    # A schema run adds its section to the existing results file (the other sections' figures and the file's
    # header stay); so does a families run (below).
    schema_only = sections == ["schema"] and out_path.exists()
    try:
        if schema_only:
            results = json.loads(out_path.read_text())
        elif sections == ["families"] and out_path.exists():
            # A families run adds its table to the existing results: the other sections' figures stay.
            kept = json.loads(out_path.read_text())
            # Every run that measured some of the workloads is listed (each workload has its `measured_at`).
            runs = kept.pop("families_runs", [])
            if "families_run" in kept:  # the results file's earlier form: one run
                runs.append(kept.pop("families_run"))
            kept["families_runs"] = [*runs, {k: results[k] for k in ("started", "command", "load_avg_start")}]
            results = kept
        if any(s in sections for s in ("capture", "memory", "fixed", "families")):
            if args.shared:
                si = common.source_info()
            else:
                private = PrivateServices(
                    ROOT / ".local" / "bench-services", args.mariadb_port, args.zk_port, keep=args.keep_services
                )
                si = private.start()
        mariadb_version = None
        if si is not None:
            conn = si.root_connect()
            with conn.cursor() as cur:
                cur.execute("SELECT VERSION()")
                mariadb_version = str(cur.fetchone()[0])
            conn.close()
        versions = common.versions(mariadb_version)
        if not schema_only:  # the schema section records its own (below)
            results["versions"] = versions
            results["services"] = "shared" if args.shared else "private"
        for section in sections:
            t0 = time.perf_counter()
            log(f"== {section}")
            try:
                previous = results.get(section) if section in ("families", "schema") else None
                results[section] = _run_section(section, args, si, workdir, purge=not args.shared)
                if section == "schema":
                    results[section]["command"] = run_info["command"]
                    results[section]["versions"] = {k: v for k, v in versions.items() if k != "mariadb"}
                    if previous and args.schema_cases:  # re-measured cases replace theirs, the others stay
                        from bench.schema import merge_runs

                        results[section] = merge_runs(previous, results[section])
                elif previous:  # re-measured workloads replace their old figures, the others stay
                    results[section] = _merge_families(previous, results[section])
            except Exception as e:
                traceback.print_exc()
                if section == "schema" and previous:  # the figures the file held stay
                    results[section] = {**previous, "errors": [*previous.get("errors", []), short_error(e)]}
                else:
                    results[section] = {"errors": [short_error(e)]}
            results[section]["section_seconds"] = round(time.perf_counter() - t0, 1)
            _write(results, out_path)  # after every section: a long run keeps what it measured
    finally:
        if private is not None:
            private.stop()
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    if schema_only:
        pass  # the section carries its own start, end and load
    elif "families_runs" in results and sections == ["families"]:
        results["families_runs"][-1].update(finished=common.now_iso(), load_avg_end=common.load_avg())
    else:
        results["finished"] = common.now_iso()
        results["load_avg_end"] = common.load_avg()
    _write(results, out_path)
    log(f"wrote {out_path} and {out_path.with_name('RESULTS.md')}")
    return 0


def _run_section(section: str, args: argparse.Namespace, si: Any, workdir: Path, purge: bool) -> dict[str, Any]:
    if section == "capture":
        from bench import capture

        return capture.run(
            si,
            "bench_capture",
            args.sizes,
            args.widths,
            args.txns,
            args.repeats,
            args.long_run,
            workdir,
            args.stock_max_rows,
            purge=purge,
        )
    if section == "families":
        from bench import families

        kinds = args.families.split(",") if args.families else families.default_kinds()
        return families.run(
            si, "bench_families", kinds, args.family_rows, args.txns, args.family_ops.split(","), args.repeats,
            args.long_run, workdir, args.stock_max_rows, purge=purge,
        )
    if section == "merge":
        from bench import merge

        return merge.run(
            workdir,
            args.merge_sizes,
            args.merge_window,
            args.big_window,
            args.big_table,
            args.repeats,
            args.long_run,
            args.driver_memory,
        )
    if section == "schema":
        from bench import schema

        return schema.run(
            workdir / "schema", args.schema_rows, args.schema_wide_rows, args.merge_window, args.repeats,
            args.long_run, args.driver_memory, args.schema_cases.split(",") if args.schema_cases else None,
        )
    if section == "fixed":
        from bench import fixed

        return fixed.run(si, workdir / "fixed", args.repeats, dag=not args.no_dag)
    if section == "memory":
        from bench import memory

        return memory.run(si, workdir, args.memory_sizes, purge=purge)
    raise SystemExit(f"unknown section {section!r}")


def _merge_families(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    def key(w: dict[str, Any]) -> tuple[Any, ...]:
        return (w.get("family"), w.get("op"), w["workload"]["txn_rows"])

    fresh = {key(w) for w in new.get("workloads", [])}
    kept = [w for w in old.get("workloads", []) if key(w) not in fresh]
    errors = old.get("errors", []) + new.get("errors", [])
    return {**new, "workloads": kept + new.get("workloads", []), "errors": errors}


def save_section(out: str | Path, key: str, section: dict[str, Any]) -> None:
    """One benchmark module's section into the results file (others' sections kept), RESULTS.md re-rendered,
    and the section printed: how `python -m bench.tables`, `bench.warm`, ... record what they measured."""
    path = Path(out)
    results = json.loads(path.read_text()) if path.exists() else {}
    results[key] = section
    _write(results, path)
    print(json.dumps(section, indent=1, default=str))


def _write(results: dict[str, Any], path: Path) -> None:
    from bench.report import render

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, sort_keys=False, default=str) + "\n")
    path.with_name("RESULTS.md").write_text(render(results))


if __name__ == "__main__":
    raise SystemExit(main())
