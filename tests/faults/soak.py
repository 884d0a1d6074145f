"""The fault soak: many seeds of random faults against the real CLI, with the oracle after every step.

    python -m tests.faults.soak --seeds 50            # seeds 1..50, writes tests/faults/RESULTS.md + results.json
    python -m tests.faults.soak --seeds 5 --first-seed 100 --steps 8 --out /tmp/soak
    python -m tests.faults.soak --ddl all --seeds 20 --lenient-every 5   # schema changes: results-ddl.json

Per seed: a fresh pipeline over a fresh database on a private MariaDB/ZooKeeper of its own (ports 13318/22192,
started here if needed, stopped at the end if started here), a seeded workload (tests/faults/workload.py),
then `--steps` fault steps drawn by the seed from the scenario menu (tests/faults/scenarios.py: SIGKILL at
a named fault point, SIGKILL at a random time, zombies, ZooKeeper restart, session expiry, MariaDB
restart mid-staging and between windows, staged files deleted, a lake table deleted and repaired by a
backfill), each followed by the oracle (tests/faults/oracle.py); then a clean run to the source's end
and the final comparison with the source. Merges go to one in-process Spark session (the merge server),
or to real spark-submit for every `--real-spark-every`-th seed.

`--ddl all`: the workload interleaves DDL of every kind the product follows with the DML (workload.py's
DDL_ALL: about one unit of work in four is a schema change, tables truncated, dropped, re-created, renamed,
created LIKE others and migrated online as gh-ost and pt-osc do), crashes also hit `mid_schema_change`, and
every `--lenient-every`-th seed runs its pipeline with `schema_changes: {mode: lenient}`. The lake-table
deletion step is left out there (a backfill's repair across dropped and renamed tables is not what it
tests). Its figures go to results-ddl.json and their own section of RESULTS.md.

A seed that breaks an invariant is recorded as failed with the oracle's message, and the soak goes on.
Exit status 1 if any seed failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from tests.faults import scenarios as sc
from tests.faults.harness import Rig
from tests.faults.merge_server import MergeServer, default_spark
from tests.faults.oracle import Figures
from tests.faults.services import PRIVATE_DIR, PrivateServices
from tests.faults.workload import DDL_ALL, DDL_COLUMNS

HERE = Path(__file__).resolve().parent

# (name, weight): what a soak step may be.
MENU = (
    ("crash_point", 30),
    ("random_kill", 20),
    ("zombie", 14),
    ("zk_restart", 5),
    ("session_expiry", 5),
    ("mariadb_restart_mid_stage", 5),
    ("mariadb_restart_between", 4),
    ("staging_deleted", 6),
    ("lake_table_deleted", 3),
    ("clean_run", 8),
)


def step(rig: Rig, rng: random.Random, name: str) -> str:
    txns = rng.choice((2, 4, 8, 15))
    if name == "crash_point":
        point = rng.choice(sc.SCHEMA_POINTS if rig.ddl == DDL_ALL else sc.CRASH_POINTS)
        return sc.crash_at(rig, point, txns=txns, require=False)
    if name == "random_kill":
        typical = statistics.median([r.seconds for r in rig.runs if r.rc == 0] or [10.0])
        return sc.random_kill(rig, rng, txns=txns, max_after=max(2.0, 1.5 * typical))
    if name == "zombie":
        return sc.zombie(rig, rng, rng.choice((*sc.ZOMBIE_POINTS, None)), txns=txns)
    if name == "zk_restart":
        return sc.zk_restart(rig, rng.choice(("after_plan", "after_stage", "before_ack", None)), txns=txns)
    if name == "session_expiry":
        return sc.session_expiry(rig, rng.choice(("after_plan", "after_stage", "after_merge")), txns=txns)
    if name == "mariadb_restart_mid_stage":
        return sc.mariadb_restart_mid_stage(rig, txns=txns)
    if name == "mariadb_restart_between":
        return sc.mariadb_restart_between(rig, txns=txns)
    if name == "staging_deleted":
        return sc.staging_deleted(rig, rng, txns=txns)
    if name == "lake_table_deleted":
        return sc.lake_table_deleted(rig, rng, txns=txns)
    return sc.run_cleanly(rig, txns=txns)


def soak_seed(seed: int, services: PrivateServices, zk: Any, merge: MergeServer, workdir: Path, steps: int,
              real_spark: bool, ddl: str = DDL_COLUMNS, lenient: bool = False) -> dict[str, Any]:
    rng = random.Random(seed)
    t0 = time.monotonic()
    # Windows of up to 40 transactions, two per run, a 1 s lease: many windows and takeovers per seed,
    # without a merge for every handful of transactions (merges dominate the soak's time).
    # DDL_ALL: smaller windows (a schema change's merge is several commits), the small tables t1 and t2 and
    # orders to start with, about one unit of work in four a schema change.
    extra: dict[str, Any] = {}
    if ddl == DDL_ALL:
        extra = {"ddl": DDL_ALL, "ddl_every": 4, "tables": ("orders", "t1", "t2"),
                 "schema_changes": {"mode": "lenient"} if lenient else None}
    rig = Rig(services, workdir / f"seed{seed}", zk, merge.address, seed, real_spark=real_spark, lease_seconds=1,
              windows_per_run=2, caps={"max_events": 5000, "max_bytes": 64 << 20,
                                       "max_transactions": 15 if ddl == DDL_ALL else 40}, **extra)
    out: dict[str, Any] = {"seed": seed, "real_spark": real_spark, "ddl": ddl, "lenient": lenient, "steps": [],
                           "ok": False}
    try:
        rig.write(rng.randint(5, 20))
        menu = [(n, w) for n, w in MENU if not (ddl == DDL_ALL and n == "lake_table_deleted")]
        names = [n for n, _ in menu]
        weights = [w for _, w in menu]
        for _ in range(steps):
            name = rng.choices(names, weights)[0]
            out["steps"].append({"scenario": name, "outcome": step(rig, rng, name)})
        rig.finish(f"seed {seed}")
        out["ok"] = True
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"[:6000]
        out["traceback"] = traceback.format_exc()[-4000:]
        out["last_run"] = rig.runs[-1].explain()[-4000:] if rig.runs else None
    finally:
        out["figures"] = rig.oracle.figures.__dict__.copy()
        out["workload"] = rig.workload.stats.__dict__.copy()
        out["runs"] = len(rig.runs)
        out["exit_codes"] = dict(Counter(str(r.rc) for r in rig.runs))
        out["seconds"] = round(time.monotonic() - t0, 1)
        rig.close()
    return out


def render(summary: dict[str, Any]) -> str:
    t = summary["totals"]
    lines = [
        "# Fault suite figures",
        "",
        "Produced by the soak (tests/faults/soak.py); regenerate with:",
        "",
        f"    {summary['command']}",
        "",
        f"Date: {summary['date']} (UTC). Machine: {summary['machine']}. Wall time: {summary['seconds'] / 60:.0f} min.",
        "",
        "| | |",
        "|---|---|",
        f"| seeds | {summary['seeds']} of {summary['requested']} requested ({summary['seeds_ok']} passed, "
        f"{summary['seeds_failed']} failed) |",
        f"| fault steps (scenarios) | {t['steps']} over {len(summary['scenarios'])} kinds |",
        f"| CLI runs | {t['runs']} ({t['runs_killed']} killed by SIGKILL) |",
        f"| source transactions / row changes | {t['transactions']} / {t['source_rows']} "
        f"(rolled back: {t['rolled_back']}, partial rollbacks: {t['savepoint_rollbacks']}, DDL: {t['ddl']}, "
        f"binlog rotations: {t['rotations']}, largest transaction: {t['largest_txn_rows']} rows) |",
        f"| windows acked | {t['windows_acked']} |",
        f"| changes that flowed (staged in acked windows) | {t['changes_staged']} |",
        f"| oracle checks (after every step) | {t['checks']} ({t['table_compares']} table comparisons, "
        f"{t['rows_compared']} rows compared) |",
        f"| zombies fenced | {t['fenced_zombies']} |",
        f"| windows re-staged byte-identical after deletion | {t['restaged_identical']} |",
        f"| **rows lost** | **{t['rows_lost']}** |",
        f"| **rows duplicated** | **{t['rows_duplicated']}** |",
        f"| **wrong values** (rows with a wrong value, or rows the source does not have) | **{t['wrong_values']}** |",
        f"| **type mismatches** | **{t['type_mismatches']}** |",
        "",
        "Scenarios: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["scenarios"].items())) + ".",
        "",
        "Exit codes of the CLI runs: " + ", ".join(f"{k}: {v}" for k, v in sorted(summary["exit_codes"].items()))
        + " (0 ok, -9 killed, 3 source, 4 ZooKeeper, 5 fenced, 8 lake, 75 lease held).",
        "",
    ]
    if summary["failures"]:
        lines += ["## Failed seeds", ""]
        for f in summary["failures"]:
            lines += [f"- seed {f['seed']}: {f['error'][:1500]}", ""]
    lines += [
        "## The CI part",
        "",
        "`CDC_SKIP_SETUP=1 scripts/test.sh tests/faults` (part of `scripts/test.sh`): one fixed seed per test,",
        "the same scenarios and oracle, on the private MariaDB/ZooKeeper (merges in one Spark session; the DAG",
        "test uses real spark-submit through Airflow):",
        "",
        "- test_fault_crashes: SIGKILL at each of the 11 fault points (after_acquire, after_plan, mid_stage_before,",
        "  mid_stage, after_stage, mid_merge, mid_merge_table, after_merge, before_ack, mid_ack, after_ack), then",
        "  two SIGKILLs at random times; the oracle must also catch a planted duplicate, lost row and re-plan;",
        "- test_fault_zombie: runs paused past their lease (after_stage, mid_ack) are fenced and change nothing;",
        "- test_fault_infra: ZooKeeper restart and session expiry mid-run, MariaDB restart mid-staging and between",
        "  windows, staged files deleted (re-staged byte-identical), a Delta table deleted (clear LakeError, then",
        "  `cdc backfill --from --table` rebuilds it), a binlog connection dropped mid-transaction;",
        "- test_fault_dag: `airflow dags test` SIGKILLed inside the ack task; the next DAG run recovers;",
        "- test_fault_schema_changes: the workload with DDL of every kind (below), SIGKILLs at the fault points drawn",
        "  by the seed (`mid_schema_change` included) and at random times, one seed under follow, one under lenient;",
        "  and strict xfails for the product bugs it found (docs/faults.md).",
        "",
        "Per-seed details of this soak (steps, outcomes, exit codes, figures) are in results.json next to this file.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.faults.soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6, help="fault steps per seed")
    ap.add_argument("--real-spark-every", type=int, default=0, help="every Nth seed merges with spark-submit")
    ap.add_argument("--out", default=str(HERE), help="where RESULTS.md and results.json go")
    ap.add_argument("--ddl", choices=(DDL_COLUMNS, DDL_ALL), default=DDL_COLUMNS,
                    help="the workload's DDL: ADD/DROP COLUMN, or every kind the product follows")
    ap.add_argument("--lenient-every", type=int, default=0,
                    help="with --ddl all: every Nth seed's pipeline has schema_changes mode lenient")
    # Not the pytest fixture's instance (13317/22193): a soak and the test suite may run side by side.
    ap.add_argument("--mariadb-port", type=int, default=13318)
    ap.add_argument("--zk-port", type=int, default=22192)
    args = ap.parse_args(argv)

    services = PrivateServices(directory=PRIVATE_DIR.parent / f"private-soak-{args.mariadb_port}",
                               mariadb_port=args.mariadb_port, zk_port=args.zk_port)
    if not any(services.running().values()):
        shutil.rmtree(services.directory, ignore_errors=True)
    services.start()
    from kazoo.client import KazooClient
    from kazoo.retry import KazooRetry

    zk = KazooClient(hosts=services.zk_hosts, timeout=10,
                     connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2))
    zk.start(timeout=30)
    workdir = Path(tempfile.mkdtemp(prefix="cdc-soak-"))
    out = Path(args.out)
    t0 = time.monotonic()
    seeds: list[dict[str, Any]] = []
    command = "python -m tests.faults.soak " + " ".join(argv if argv is not None else sys.argv[1:])
    try:
        with MergeServer(default_spark) as merge:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                real = bool(args.real_spark_every) and seed % args.real_spark_every == 0
                lenient = args.ddl == DDL_ALL and bool(args.lenient_every) and seed % args.lenient_every == 0
                res = soak_seed(seed, services, zk, merge, workdir, args.steps, real, args.ddl, lenient)
                seeds.append(res)
                status = "ok" if res["ok"] else f"FAILED: {res['error'][:300]}"
                print(f"seed {seed}: {status} ({res['seconds']}s, {len(res['steps'])} steps, {res['runs']} runs)",
                      flush=True)
                write_results(out, seeds, command, time.monotonic() - t0, args.seeds, args.ddl)  # partial too
    finally:
        zk.stop()
        zk.close()
        services.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if all(s["ok"] for s in seeds) else 1


def write_results(out: Path, seeds: list[dict[str, Any]], command: str, seconds: float, requested: int,
                  ddl: str = DDL_COLUMNS) -> None:
    totals = Figures()
    wl: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    largest = 0
    scen: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    kills: Counter[str] = Counter()
    for s in seeds:
        totals.add(Figures(**s["figures"]))
        for k, v in s["workload"].items():
            if k == "largest_txn_rows":
                largest = max(largest, v)
            elif k == "ddl_kinds":
                kinds.update(v)
            else:
                wl[k] += v
        scen.update(st["scenario"] for st in s["steps"])
        codes.update(s["exit_codes"])
        for st in s["steps"]:
            outcome = st["outcome"]
            if " killed at " in f" {outcome}":
                kills[outcome.rsplit(" at ", 1)[1]] += 1
    import platform

    summary = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"),
        "command": command,
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores, Python {platform.python_version()}",
        "seconds": round(seconds, 1),
        "seeds": len(seeds),
        "requested": requested,
        "seeds_ok": sum(s["ok"] for s in seeds),
        "seeds_failed": sum(not s["ok"] for s in seeds),
        "seeds_lenient": sum(bool(s.get("lenient")) for s in seeds),
        "scenarios": dict(scen),
        "exit_codes": dict(codes),
        "kills_at_points": dict(kills),
        "ddl_kinds": dict(kinds),
        "totals": {
            **totals.__dict__,
            "steps": sum(len(s["steps"]) for s in seeds),
            "runs": sum(s["runs"] for s in seeds),
            "runs_killed": codes.get("-9", 0),
            "transactions": wl["transactions"],
            "source_rows": wl["rows"],
            "rolled_back": wl["rolled_back"],
            "savepoint_rollbacks": wl["savepoint_rollbacks"],
            "ddl": wl["ddl"],
            "osc_chunks": wl["osc_chunks"],
            "rotations": wl["rotations"],
            "largest_txn_rows": largest,
        },
        "failures": [{"seed": s["seed"], "error": s["error"]} for s in seeds if not s["ok"]],
        "per_seed": [{k: v for k, v in s.items() if k != "traceback"} for s in seeds],
    }
    out.mkdir(parents=True, exist_ok=True)
    name = "results-ddl.json" if ddl == DDL_ALL else "results.json"
    (out / name).write_text(json.dumps(summary, indent=1, sort_keys=True, default=str) + "\n")
    if ddl == DDL_ALL:
        _write_md(out, ddl_section=render_ddl(summary))
    else:
        _write_md(out, main=render(summary))


# RESULTS.md: the soak's figures, then this line, then the schema-change soak's; each run rewrites its own part.
_DDL_MARK = "<!-- the schema-change soak (python -m tests.faults.soak --ddl all) writes below this line -->"


def _write_md(out: Path, main: str | None = None, ddl_section: str | None = None) -> None:
    path = out / "RESULTS.md"
    head, _, tail = (path.read_text() if path.exists() else "").partition(_DDL_MARK)
    if main is not None:
        head = main
    if ddl_section is not None:
        tail = "\n\n" + ddl_section
    path.write_text(head.rstrip("\n") + "\n\n" + _DDL_MARK + tail if tail.strip() else head)


def render_ddl(summary: dict[str, Any]) -> str:
    """The schema-change soak's section of RESULTS.md (results-ddl.json)."""
    t = summary["totals"]
    kinds = summary.get("ddl_kinds", {})
    lines = [
        "## Schema-change soak",
        "",
        "The same soak with a workload that interleaves DDL of every kind the product follows with the DML",
        "(tests/faults/workload.py, DDL_ALL; docs/schema-changes.md), crashes also inside a schema change",
        "(`mid_schema_change`); regenerate with:",
        "",
        f"    {summary['command']}",
        "",
        f"Date: {summary['date']} (UTC). Machine: {summary['machine']}. Wall time: {summary['seconds'] / 60:.0f} min.",
        "",
        "| | |",
        "|---|---|",
        f"| seeds | {summary['seeds']} of {summary['requested']} requested ({summary['seeds_ok']} passed, "
        f"{summary['seeds_failed']} failed; {summary.get('seeds_lenient', 0)} with `schema_changes: "
        "{mode: lenient}`) |",
        f"| fault steps (scenarios) | {t['steps']} over {len(summary['scenarios'])} kinds |",
        f"| CLI runs | {t['runs']} ({t['runs_killed']} killed by SIGKILL) |",
        "| kills at fault points | " + (", ".join(f"{k} {v}" for k, v in sorted(summary.get("kills_at_points", {})
                                                                           .items())) or "none") + " |",
        f"| DDL statements | {t['ddl']} (the tables' creation and the online schema changes' own steps included) |",
        "| DDL by kind | " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + " |",
        f"| source transactions / row changes | {t['transactions']} / {t['source_rows']} (rows copied by online "
        f"schema changes: {t.get('osc_chunks', 0)}) |",
        f"| windows acked | {t['windows_acked']} |",
        f"| oracle checks (after every step) | {t['checks']} ({t['table_compares']} table comparisons, "
        f"{t['rows_compared']} rows compared; {t.get('gone_checked', 0)} checks of a dropped or renamed-away table) |",
        f"| **rows lost / duplicated / wrong** | **{t['rows_lost']} / {t['rows_duplicated']} / {t['wrong_values']}** |",
        f"| **column mismatches** (names, types per the type map) | **{t['type_mismatches']}** |",
        f"| **live rows left in a gone table** | **{t.get('rows_left_behind', 0)}** |",
        "",
        "Exit codes of the CLI runs: " + ", ".join(f"{k}: {v}" for k, v in sorted(summary["exit_codes"].items()))
        + ".",
        "",
    ]
    if summary["failures"]:
        lines += ["Failed seeds:", ""]
        for f in summary["failures"]:
            lines += [f"- seed {f['seed']}: {f['error'][:1500]}", ""]
    return "\n".join(lines)


def rerender(results_json: Path) -> None:
    """Rewrite RESULTS.md next to `results_json` from it, and its schema-change part from results-ddl.json
    (after a change to `render` or `render_ddl`)."""
    _write_md(results_json.parent, main=render(json.loads(results_json.read_text())))
    ddl = results_json.parent / "results-ddl.json"
    if ddl.exists():
        _write_md(results_json.parent, ddl_section=render_ddl(json.loads(ddl.read_text())))


if __name__ == "__main__":
    sys.exit(main())
