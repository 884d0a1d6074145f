"""The fault soak: many seeds of random faults against the real CLI, with the oracle after every step.

    python -m tests.faults.soak --seeds 50            # seeds 1..50, writes tests/faults/RESULTS.md + results.json
    python -m tests.faults.soak --seeds 5 --first-seed 100 --steps 8 --out /tmp/soak
    python -m tests.faults.soak --ddl all --seeds 20 --lenient-every 5   # schema changes: results-ddl.json
    python -m tests.faults.soak --shapes random --seeds 50   # every seed draws its shape (issue 39)
    python -m tests.faults.soak --shapes random --first-seed 17 --seeds 1   # seed 17 again, same shape and steps
    python -m tests.faults.soak --shapes random --first-seed 23 --seeds 28 --append   # continue: fold in

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
tests). A group seed (`--shapes random --ddl all`) mixes schema changes of its own into its shards' writes
(tests/faults/group.py SCHEMA_CHANGES: ADD COLUMN nullable and with a default that fills older rows, DROP of an
added column, a widening to BIGINT, TRUNCATE; each on one shard's table, the lake table taking the union of the
routed shapes), and its oracle compares every row on the columns its source table had at the window's end.
Its figures go to results-ddl.json and their own section of RESULTS.md.

`--shapes random`: each seed also draws its shape (`Shape`, from a random stream of its own, so a seed's
shape and steps replay from its number): a single-source pipeline or a group of two to four shards' sources
(tests/faults/group.py: rows and global ids moved between the shards, `key: source` and `key: primary_key`
routes, the group oracle; shards on ports 13351-13354), a local lake or one on an S3-compatible object store
(S3Proxy, one for the soak, a prefix per seed; the oracle reads the store's own files), and merges on the
in-process server, on the seed's own `cdc merge-server` (the product's warm option), through spark-submit per
window, or through spark-submit to a Spark standalone cluster (one for the soak: a master, two workers). The
shape adds its own faults to the menu: the warm server SIGKILLed (at a point inside the merge job, or at a
random time) and started again, the object store restarted mid-run, a shard down for a group run, a cluster
worker killed mid-run, and the merge job's driver (the run's spark-submit, on a local master or the cluster)
SIGKILLed alone while the run lives on.
`--lake`, `--merge`, `--pipeline` and `--shards` force one part of every seed's shape (group seeds before
2026-11-30 had two shards: `--shards 2` replays them). RESULTS.md then has the figures
per shape and per fault kind.

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
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.faults import scenarios as sc
from tests.faults.group import POINTS as GROUP_POINTS
from tests.faults.group import GroupRig, shard_down
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
    # A shape's own faults (drawn only where the seed's shape has the thing to break).
    ("merge_server_kill", 12),  # merge: warm
    ("object_store_restart", 10),  # lake: object_store
    ("cluster_worker_kill", 12),  # merge: cluster
    ("merge_driver_kill", 10),  # merge: spark_submit or cluster
)
SHAPE_STEPS = {"merge_server_kill": lambda shape: shape.merge == "warm",
               "object_store_restart": lambda shape: shape.lake == "object_store",
               "cluster_worker_kill": lambda shape: shape.merge == "cluster",
               "merge_driver_kill": lambda shape: shape.merge in ("spark_submit", "cluster")}
# A group seed's menu: the scenarios that work on a group's runs (its sources' runs, or the whole group's), and a
# shard down for a run. Not there: zombies and staged or lake files deleted (they read one source's records and
# paths), MariaDB restarts (the group's sources are the shards, and a shard down is its own step).
GROUP_MENU = (
    ("crash_point", 35),
    ("random_kill", 20),
    ("zk_restart", 5),
    ("session_expiry", 5),
    ("shard_down", 10),
    ("clean_run", 8),
    ("merge_server_kill", 12),
    ("object_store_restart", 10),
    ("cluster_worker_kill", 12),
    ("merge_driver_kill", 10),
)

# A seed's shape: where its staging area and lake live, and what runs its merges.
LAKES = ("local", "object_store")
MERGES = ("inproc", "warm", "spark_submit", "cluster")
PIPELINES = ("single", "group")
SHARD_COUNTS = (2, 3, 4)  # a group seed's shards, one source each


@dataclass(frozen=True)
class Shape:
    """`lake`: local directories, or an S3-compatible object store (S3Proxy, the soak's one instance, a prefix
    per seed). `merge`: `inproc` (the soak's one-JVM merge server in this process: tests/faults/merge_server.py,
    fault points inside the job fire for the requesting run), `warm` (the product's warm option: the seed's own
    `cdc merge-server <pipeline>` process, with the pipeline's confs and credentials), `spark_submit` (a
    spark-submit per window, as the CLI does by default), or `cluster` (spark-submit to the soak's Spark
    standalone cluster). `pipeline`: one source, or a group of `shards` (2-4) shards'
    sources (tests/faults/group.py: `key: source` routes and a `key: primary_key` one, rows and global ids moved
    between the shards, the group oracle)."""

    lake: str = "local"
    merge: str = "inproc"
    pipeline: str = "single"
    shards: int = 0  # a group's sources, one per shard (0 for a single pipeline)

    @property
    def label(self) -> str:
        pipeline = f"group{self.shards}" if self.pipeline == "group" else self.pipeline
        return f"{pipeline}+{self.lake}+{self.merge}"


def draw_shape(seed: int, lake: str | None = None, merge: str | None = None, pipeline: str | None = None,
               shards: int | None = None) -> Shape:
    """The seed's shape, from a random stream of its own (so the seed's steps are the same whatever its shape),
    unless forced. The in-process server has the suite's default Spark confs, no object-store access: an
    object-store seed drawn with it merges on its warm server instead. A group's shard count comes from a
    stream of its own (added after the first seeds ran: their lake, merge and pipeline draws stay)."""
    rng = random.Random(f"shape-{seed}")
    drawn_lake = rng.choices(LAKES, (3, 2))[0]
    drawn_merge = rng.choices(MERGES, (5, 3, 2, 1))[0]
    drawn_pipeline = rng.choices(PIPELINES, (3, 2))[0]
    lake, merge, pipeline = lake or drawn_lake, merge or drawn_merge, pipeline or drawn_pipeline
    if lake == "object_store" and merge == "inproc":
        merge = "warm"
    if pipeline != "group":
        return Shape(lake, merge, pipeline)
    return Shape(lake, merge, pipeline, shards or random.Random(f"shards-{seed}").choice(SHARD_COUNTS))


def step(rig: Rig, rng: random.Random, name: str) -> str:
    txns = rng.choice((2, 4, 8, 15))
    if name == "crash_point":
        if isinstance(rig, GroupRig):
            points = (*GROUP_POINTS, "mid_schema_change") if rig.ddl == DDL_ALL else GROUP_POINTS
            return sc.crash_at(rig, rng.choice(points), txns=txns, require=False)
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
    if name == "shard_down":
        return shard_down(rig, rng, txns=txns)  # type: ignore[arg-type]
    if name == "cluster_worker_kill":
        return sc.cluster_worker_kill(rig, rng, txns=txns)
    if name == "merge_driver_kill":
        return sc.merge_driver_kill(rig, rng, txns=txns)
    if name == "merge_server_kill":
        return sc.merge_server_kill(rig, rng, txns=txns)
    if name == "object_store_restart":
        return sc.object_store_restart(rig, rng, txns=txns)
    return sc.run_cleanly(rig, txns=txns)


def soak_seed(seed: int, services: PrivateServices, zk: Any, merge: MergeServer, workdir: Path, steps: int,
              shape: Shape, ddl: str = DDL_COLUMNS, lenient: bool = False, store: Any = None,
              shards: Any = None, cluster: Any = None) -> dict[str, Any]:
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
    common: dict[str, Any] = {
        "real_spark": shape.merge in ("spark_submit", "cluster"), "lease_seconds": 1, "windows_per_run": 2,
        "caps": {"max_events": 5000, "max_bytes": 64 << 20, "max_transactions": 15 if ddl == DDL_ALL else 40},
        "store": store if shape.lake == "object_store" else None,
        "cluster": cluster if shape.merge == "cluster" else None,
    }
    address = merge.address if shape.merge == "inproc" else None
    rig: Rig
    if shape.pipeline == "group":
        rig = GroupRig(services, workdir / f"seed{seed}", zk, address, seed, shards=tuple(shards)[:shape.shards],
                       vary_units=True, ddl=ddl, **common)
    else:
        rig = Rig(services, workdir / f"seed{seed}", zk, address, seed, **common, **extra)
    out: dict[str, Any] = {"seed": seed, "shape": shape.label, "real_spark": common["real_spark"],
                           "ddl": ddl, "lenient": lenient, "steps": [], "ok": False}
    try:
        if shape.merge == "warm":  # the pipeline's own server, as an operator runs it (`cdc merge-server`)
            from tests.support.merge_server import ServerProcess
            from tests.support.ports import free_port

            rig.merge_server = ServerProcess(str(rig.config_path), rig.name, f"127.0.0.1:{free_port()}",
                                             rig.workdir, base_env=rig.env())
            rig.merge_server.start()
            rig.merge_address = rig.merge_server.address
        rig.write(rng.randint(5, 20))
        menu = [(n, w) for n, w in (GROUP_MENU if shape.pipeline == "group" else MENU)
                if not (ddl == DDL_ALL and n == "lake_table_deleted")
                and SHAPE_STEPS.get(n, lambda _shape: True)(shape)]
        names = [n for n, _ in menu]
        weights = [w for _, w in menu]
        for i in range(1, steps + 1):
            name = rng.choices(names, weights)[0]
            out["failed_step"] = name  # until it returns
            out["steps"].append({"scenario": name, "outcome": step(rig, rng, name)})
            print(f"  seed {seed} step {i}/{steps} ({time.monotonic() - t0:.0f}s): {name}: "
                  f"{out['steps'][-1]['outcome']}", flush=True)
        out["failed_step"] = "final drain and comparison"
        rig.finish(f"seed {seed}")
        out["ok"] = True
        out.pop("failed_step")
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"[:6000]
        out["traceback"] = traceback.format_exc()[-4000:]
        out["last_run"] = rig.runs[-1].explain()[-4000:] if rig.runs else None
        # Every run's whole output next to the seed's lake and staging (kept with --keep-failed).
        with (rig.workdir / "runs.log").open("w") as f:
            for r in rig.runs:
                f.write(f"{'=' * 100}\n`{' '.join(r.args)}` rc={r.rc} fired={r.fired} secs={r.seconds:.1f}\n"
                        f"--- stdout ---\n{r.stdout}\n--- stderr ---\n{r.stderr}\n")
        out["workdir"] = str(rig.workdir)
    finally:
        out["figures"], out["workload"] = _figures(rig)
        out["runs"] = len(rig.runs)
        out["exit_codes"] = dict(Counter(str(r.rc) for r in rig.runs))
        out["seconds"] = round(time.monotonic() - t0, 1)
        rig.close()
    return out


def _figures(rig: Rig) -> tuple[dict[str, Any], dict[str, Any]]:
    """The seed's oracle figures and workload statistics, a group's in the single-source terms the totals add."""
    if not isinstance(rig, GroupRig):
        return rig.oracle.figures.__dict__.copy(), rig.workload.stats.__dict__.copy()
    f = rig.oracle.figures
    figures = Figures(checks=f.checks, rows_compared=f.rows_compared + f.derived_rows, rows_lost=f.rows_lost,
                      rows_duplicated=f.rows_duplicated, wrong_values=f.wrong_values,
                      windows_acked=sum(f.windows_acked.values()))
    txns = [changes for src in rig.sources.values() for _, changes in src.txns]
    ddl = sum(rig.schema_changes.values())
    return figures.__dict__.copy(), {"transactions": len(txns) - ddl, "rows": sum(len(c) for c in txns) - ddl,
                                     "largest_txn_rows": max((len(c) for c in txns), default=0), "ddl": ddl,
                                     "ddl_kinds": {f"group: {k}": n for k, n in rig.schema_changes.items()}}


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
    if summary.get("shapes"):
        lines += ["By shape (pipeline (a group: groupN, N shards) + lake + merge path; tests/faults/soak.py `Shape`):",
                  "",
                  "| shape | seeds | passed | fault steps | CLI runs | windows acked | rows compared "
                  "| rows lost, duplicated or wrong |",
                  "|---|---|---|---|---|---|---|---|"]
        for shape, r in summary["shapes"].items():
            lines.append(f"| {shape} | {r['seeds']} | {r['passed']} | {r['steps']} | {r['runs']} | "
                         f"{r['windows_acked']} | {r['rows_compared']} | {r['bad_rows']} |")
        lines += ["", "By fault kind:", "", "| fault kind | steps | seeds | seeds failed at it |", "|---|---|---|---|"]
        for kind, r in summary["kinds"].items():
            lines.append(f"| {kind} | {r['steps']} | {r['seeds']} | {r['failed']} |")
        lines.append("")
    if summary["failures"]:
        lines += ["## Failed seeds", ""]
        if summary.get("notes"):  # what each failure was and what fixed it (written by hand, kept by --append)
            lines += [summary["notes"].rstrip(), "",
                      "The original failures' first lines (full output in results.json):", ""]
        for f in summary["failures"]:
            where = f" ({f['shape']}, at {f['step']})" if f.get("step") else ""
            lines += [f"- seed {f['seed']}{where}: {f['error'][:1500]}", ""]
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
    ap.add_argument("--real-spark-every", type=int, default=0,
                    help="every Nth seed merges with spark-submit (with --shape fixed; the random shapes draw it)")
    ap.add_argument("--shapes", choices=("fixed", "random"), default="fixed",
                    help="random: each seed draws its lake and merge path (Shape); fixed: local lake, "
                         "--lake/--merge or the in-process server")
    ap.add_argument("--lake", choices=LAKES, default=None, help="every seed's lake (overrides the draw)")
    ap.add_argument("--merge", choices=MERGES, default=None, help="every seed's merge path (overrides the draw)")
    ap.add_argument("--pipeline", choices=PIPELINES, default=None, help="every seed's pipeline (overrides the draw)")
    ap.add_argument("--shards", type=int, choices=SHARD_COUNTS, default=None,
                    help="every group seed's shards (overrides the draw)")
    ap.add_argument("--shard-base-port", type=int, default=13350, help="group seeds' shards: this + 1 .. + 4")
    ap.add_argument("--out", default=str(HERE), help="where RESULTS.md and results.json go")
    ap.add_argument("--keep-failed", action="store_true",
                    help="keep the work directory (lake, staging, config, every run's output in runs.log) of a "
                         "failed seed, and say where")
    ap.add_argument("--append", action="store_true",
                    help="add this run's seeds to the results already in --out (a soak continued in parts); "
                         "their notes and re-runs are kept")
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
    earlier: dict[str, Any] = {}
    if args.append:
        earlier = json.loads((out / ("results-ddl.json" if args.ddl == DDL_ALL else "results.json")).read_text())
        seeds = list(earlier["per_seed"])
        command = f"{earlier['command']}; then {command}"
    try:
        with MergeServer(default_spark) as merge, ExitStack() as stack:
            store: Any = None
            shards: Any = None
            cluster: Any = None
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                if args.shapes == "random":
                    shape = draw_shape(seed, args.lake, args.merge, args.pipeline, args.shards)
                else:
                    real = bool(args.real_spark_every) and seed % args.real_spark_every == 0
                    pipeline = args.pipeline or "single"
                    shape = Shape(args.lake or "local", args.merge or ("spark_submit" if real else "inproc"),
                                  pipeline, (args.shards or 2) if pipeline == "group" else 0)
                    if shape.lake == "object_store" and shape.merge == "inproc":
                        shape = Shape(shape.lake, "warm", shape.pipeline, shape.shards)
                if shape.pipeline == "group" and shards is None:  # the soak's own shards, as many as a group takes
                    from tests.support.shards import ShardServers

                    where = PRIVATE_DIR.parent / f"private-soak-shards-{args.shard_base_port}"
                    shards = ShardServers.for_worker(0, count=max(SHARD_COUNTS), base_port=args.shard_base_port,
                                                     directory=where)
                    shards.start()
                    stack.callback(shards.stop_all)
                if shape.lake == "object_store" and store is None:  # one store for the soak, a prefix per seed
                    from tests.support.object_store import running_object_store

                    store = stack.enter_context(running_object_store())
                if shape.merge == "cluster" and cluster is None:  # one cluster for the soak
                    from tests.support.spark_cluster import running_cluster

                    cluster = stack.enter_context(running_cluster())
                # A group's routed tables take the union of their shapes whatever the mode: lenient for singles only.
                lenient = (args.ddl == DDL_ALL and bool(args.lenient_every) and seed % args.lenient_every == 0
                           and shape.pipeline != "group")
                res = soak_seed(seed, services, zk, merge, workdir, args.steps, shape, args.ddl, lenient, store,
                                shards, cluster)
                seeds.append(res)
                status = "ok" if res["ok"] else f"FAILED: {res['error'][:300]}"
                print(f"seed {seed} ({shape.label}): {status} ({res['seconds']}s, {len(res['steps'])} steps, "
                      f"{res['runs']} runs)", flush=True)
                write_results(out, seeds, command, earlier.get("seconds", 0) + time.monotonic() - t0,
                              earlier.get("requested", 0) + args.seeds, args.ddl, earlier)  # partial too
    finally:
        zk.stop()
        zk.close()
        services.stop_all()
        if args.keep_failed and not all(s["ok"] for s in seeds):
            print(f"failed seeds' work directories kept under {workdir} (runs.log: every run's output)", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0 if all(s["ok"] for s in seeds) else 1


def write_results(out: Path, seeds: list[dict[str, Any]], command: str, seconds: float, requested: int,
                  ddl: str = DDL_COLUMNS, earlier: dict[str, Any] | None = None) -> None:
    """results.json (or results-ddl.json) and RESULTS.md from `seeds`; `earlier`'s hand-written notes and
    re-runs of failed seeds are carried over."""
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
        "shapes": _by_shape(seeds),
        "kinds": _by_kind(seeds),
        "failures": [{"seed": s["seed"], "shape": s.get("shape", "single+local+inproc"), "step": s.get("failed_step"),
                      "error": s["error"]} for s in seeds if not s["ok"]],
        "per_seed": [{k: v for k, v in s.items() if k != "traceback"} for s in seeds],
        **{k: earlier[k] for k in ("notes", "reruns") if earlier and k in earlier},
    }
    out.mkdir(parents=True, exist_ok=True)
    name = "results-ddl.json" if ddl == DDL_ALL else "results.json"
    (out / name).write_text(json.dumps(summary, indent=1, sort_keys=True, default=str) + "\n")
    if ddl == DDL_ALL:
        _write_md(out, ddl_section=render_ddl(summary))
    else:
        _write_md(out, main=render(summary))


def _by_shape(seeds: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per shape (lake+merge): seeds, passed, fault steps, CLI runs, windows acked, rows compared, rows lost,
    duplicated or wrong."""
    out: dict[str, dict[str, int]] = {}
    for s in seeds:
        f = s["figures"]
        row = out.setdefault(s.get("shape", "single+local+inproc"), Counter())
        row.update({"seeds": 1, "passed": int(s["ok"]), "steps": len(s["steps"]), "runs": s["runs"],
                    "windows_acked": f["windows_acked"], "rows_compared": f["rows_compared"],
                    "bad_rows": f["rows_lost"] + f["rows_duplicated"] + f["wrong_values"]})
    return {k: dict(v) for k, v in sorted(out.items())}


def _by_kind(seeds: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per fault kind: steps taken, seeds that took one, and seeds that failed at one."""
    out: dict[str, Counter[str]] = {}
    for s in seeds:
        kinds = {st["scenario"] for st in s["steps"]}
        for st in s["steps"]:
            out.setdefault(st["scenario"], Counter())["steps"] += 1
        for k in kinds:
            out[k]["seeds"] += 1
        if not s["ok"] and s.get("failed_step"):
            out.setdefault(s["failed_step"], Counter())["failed"] += 1
    return {k: {"steps": v["steps"], "seeds": v["seeds"], "failed": v["failed"]} for k, v in sorted(out.items())}


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
