"""Spark job: maintain a pipeline's Delta tables (OPTIMIZE, VACUUM, log tidiness, retention properties).

Its one argument (`--spec`, MaintenanceJobSpec), its steps per table and its report: docs/housekeeping.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import re
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

try:
    import cdc_core  # noqa: F401
except ImportError:  # spark-submit of a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.coordination.fence import zk_fence_check
from cdc_core.lake import small_maintenance
from cdc_core.lake.job_outcome import MAINTENANCE_PROG, job_error
from cdc_core.lake.job_specs import SPEC_FLAG, MaintenanceJobSpec
from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.model import retention
from cdc_core.model.errors import ConfigError, Fenced, LakeError
from cdc_core.model.logfmt import kv, one_line
from cdc_core.model.naming import quote_spark
from spark_apps.spark_job import (
    TXN_APP_ID_CONF,
    TXN_VERSION_CONF,
    USER_METADATA_CONF,
    build_session,
    is_commit_conflict,
    job_storage,
    sql_str,
    write_report,
)
from spark_apps.writer_threads import in_threads

log = logging.getLogger("cdc.maintenance")

KINDS = ("table", "tombstones", "base", "history", "changelog")  # cdc_core.run.housekeeping.LakeTable.kind
CONFLICT_ATTEMPTS = 5
_LOG_ENTRY_RE = re.compile(r"^\d{20}\.")


def _no_fence() -> None:
    return None


# ------------------------------------------------------------------------------------------ inputs


def parse_tables(raw: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The --tables list, validated (a clear ConfigError for anything else)."""
    try:
        tables = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as e:
        raise ConfigError(f"tables is not valid JSON ({e}); expected a list of {{name, uri, kind}}") from None
    if not isinstance(tables, list):
        raise ConfigError("tables must be a JSON list of {name, uri, kind, zorder_by}")
    out = []
    for i, t in enumerate(tables):
        if not isinstance(t, dict) or not isinstance(t.get("uri"), str) or not isinstance(t.get("name"), str):
            raise ConfigError(f"tables[{i}] must be an object with string 'name' and 'uri'")
        kind = t.get("kind", "table")
        if kind not in KINDS:
            raise ConfigError(f"tables[{i}].kind must be one of {KINDS}, got {kind!r}")
        zorder = t.get("zorder_by") or []
        if not isinstance(zorder, list) or not all(isinstance(c, str) and c for c in zorder):
            raise ConfigError(f"tables[{i}].zorder_by must be a list of column names")
        out.append({"name": t["name"], "uri": t["uri"], "kind": kind, "zorder_by": list(zorder)})
    return out


def check_retentions(vacuum_hours: int, log_hours: int, txn_hours: int, min_hours: int) -> None:
    """Defence in depth: the configuration refuses these already; a hand-built command must too."""
    problems = []
    if vacuum_hours < min_hours:
        problems.append(
            f"--vacuum-retention-hours {vacuum_hours} is shorter than the replay horizon {min_hours}h: VACUUM could "
            "delete files a replay or a reader still needs"
        )
    if txn_hours < min_hours:
        problems.append(
            f"--txn-retention-hours {txn_hours} is shorter than the replay horizon {min_hours}h: Delta would "
            "forget idempotent-write identities a replay still needs"
        )
    if log_hours < vacuum_hours:
        problems.append(f"--log-retention-hours {log_hours} is shorter than --vacuum-retention-hours {vacuum_hours}")
    if problems:
        raise ConfigError("; ".join(problems) + "; fix maintenance.* in the configuration (see docs/housekeeping.md)")


# ------------------------------------------------------------------------------------------ the job


class Maintenance:
    """One maintenance run over a list of tables."""

    def __init__(
        self,
        spark: SparkSession,
        pipeline: str,
        token: int,
        *,
        vacuum_hours: int,
        log_hours: int,
        txn_hours: int,
        min_hours: int,
        fence: Callable[[], None] | None = None,
        optimize: bool = True,
        vacuum: bool = True,
        sleep: Callable[[float], None] = time.sleep,
        storage: Storage = AMBIENT,
        parallelism: int = 1,
    ) -> None:
        if parallelism < 1:
            raise ConfigError(f"spec parallelism must be >= 1, got {parallelism}")
        check_retentions(vacuum_hours, log_hours, txn_hours, min_hours)
        for k in (TXN_APP_ID_CONF, TXN_VERSION_CONF):
            if spark.conf.get(k, None):
                raise ConfigError(
                    f"the Spark session sets {k}; maintenance commits must never carry a window's idempotent-write "
                    "identity (that window's merge would then be skipped). Remove it from the submitted confs"
                )
        self.spark = spark
        self.pipeline = pipeline
        self.token = token
        self.vacuum_hours = vacuum_hours
        self.properties = retention.managed_table_properties(vacuum_hours, log_hours, txn_hours)
        self.fence = fence or _no_fence
        self.do_optimize = optimize
        self.do_vacuum = vacuum
        self.sleep = sleep
        self.storage = storage  # the driver's listings of a table's log (the job's object-store credentials)
        self.parallelism = parallelism
        self.run_id = uuid.uuid4().hex
        self._session_confs(spark)

    @staticmethod
    def _session_confs(spark: SparkSession) -> None:
        # VACUUM START/END land in the table history with the files and bytes they deleted.
        spark.conf.set("spark.databricks.delta.vacuum.logging.enabled", "true")

    def _in_session(self, spark: SparkSession) -> Maintenance:
        """This run on another session of the same application (`newSession()`: its own SQL conf, so the
        commit metadata one thread sets never labels another thread's commit)."""
        other = copy.copy(self)
        other.spark = spark
        self._session_confs(spark)
        return other

    def log(self, event: str, **fields: Any) -> None:
        log.info("%s", kv(event=event, pipeline=self.pipeline, token=f"{self.token:#x}", **fields))

    # ------------------------------------------------------------------------------------- helpers

    def _meta(self, table: str, step: str) -> str:
        return json.dumps(
            {"pipeline": self.pipeline, "token": self.token, "maintenance": self.run_id, "table": table, "step": step},
            sort_keys=True,
        )

    def with_retries(self, table: str, step: str, action: Callable[[], Any]) -> tuple[Any, int]:
        """Run one committing step; on a Delta concurrency conflict re-run it (fenced again) on the new
        snapshot, with back-off. Returns (result, attempts)."""
        conf = self.spark.conf
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            self.fence()
            conf.set(USER_METADATA_CONF, self._meta(table, step))
            try:
                return action(), attempt
            except Exception as e:
                if not is_commit_conflict(e) or attempt == CONFLICT_ATTEMPTS:
                    raise
                self.log("maintenance.conflict_retry", table=table, step=step, attempt=attempt, reason=one_line(e))
                self.sleep(min(8.0, 0.5 * 2**attempt))
            finally:
                conf.unset(USER_METADATA_CONF)
        raise AssertionError("unreachable")

    def detail(self, uri: str) -> dict[str, Any]:
        row = DeltaTable.forPath(self.spark, uri).detail().collect()[0].asDict()
        history = DeltaTable.forPath(self.spark, uri).history(1).collect()
        return {
            "files": int(row.get("numFiles") or 0),
            "bytes": int(row.get("sizeInBytes") or 0),
            "properties": dict(row.get("properties") or {}),
            "clustering": list(row.get("clusteringColumns") or []),
            "partitioning": list(row.get("partitionColumns") or []),
            "version": int(history[0]["version"]) if history else None,
        }

    def log_entries(self, uri: str) -> int | None:
        """How many commit/checkpoint/checksum files the table's _delta_log holds (None: cannot list)."""
        try:
            fs, path = self.storage.fs(f"{uri.rstrip('/')}/_delta_log")
            names = [str(p).rstrip("/").rpartition("/")[2] for p in fs.ls(path, detail=False)]
        except (OSError, ValueError):
            return None
        return sum(1 for n in names if _LOG_ENTRY_RE.match(n))

    # ---------------------------------------------------------------------------------- the steps

    def align_properties(self, name: str, uri: str, current: dict[str, str]) -> list[str]:
        wanted = {k: v for k, v in self.properties.items() if current.get(k) != v}
        if retention.PROP_CHECKPOINT_INTERVAL not in current:  # a table created before it was set (or by hand)
            wanted[retention.PROP_CHECKPOINT_INTERVAL] = str(retention.CHECKPOINT_INTERVAL)
        if not wanted:
            return []
        # logRetention >= deletedFileRetention is checked by Delta on the resulting metadata, so one statement.
        sql = (
            f"ALTER TABLE delta.{quote_spark(uri)} SET TBLPROPERTIES ("
            + ", ".join(f"{sql_str(k)} = {sql_str(v)}" for k, v in sorted(wanted.items()))
            + ")"
        )
        _, attempts = self.with_retries(name, "properties", lambda: self.spark.sql(sql).collect())
        self.log("maintenance.properties", table=name, set=",".join(f"{k}={v}" for k, v in sorted(wanted.items())),
                 attempts=attempts)
        return sorted(wanted)

    def optimize(self, name: str, uri: str, info: dict[str, Any], zorder_by: list[str]) -> dict[str, Any]:
        mode = "clustering" if info["clustering"] else "zorder" if zorder_by else "compaction"

        def action() -> list[Any]:
            if mode == "clustering":  # a liquid-clustered table: plain OPTIMIZE clusters it
                return self.spark.sql(f"OPTIMIZE delta.{quote_spark(uri)}").collect()
            builder = DeltaTable.forPath(self.spark, uri).optimize()  # a fresh snapshot on every attempt
            if mode == "zorder":
                return builder.executeZOrderBy(*zorder_by).collect()
            return builder.executeCompaction().collect()

        rows, attempts = self.with_retries(name, "optimize", action)
        metrics = (rows[0].asDict(recursive=True).get("metrics") or {}) if rows else {}
        added = metrics.get("filesAdded") or {}
        removed = metrics.get("filesRemoved") or {}
        out = {
            "mode": mode,
            "zorder_by": zorder_by if mode == "zorder" else [],
            "files_removed": int(metrics.get("numFilesRemoved") or 0),
            "files_added": int(metrics.get("numFilesAdded") or 0),
            "bytes_removed": int(removed.get("totalSize") or 0),
            "bytes_added": int(added.get("totalSize") or 0),
            "attempts": attempts,
        }
        self.log("maintenance.optimize", table=name, **{k: v for k, v in out.items() if k != "zorder_by"})
        return out

    def vacuum(self, name: str, uri: str) -> dict[str, Any]:
        before = self.detail(uri)["version"]
        self.fence()
        self.spark.conf.set(USER_METADATA_CONF, self._meta(name, "vacuum"))
        try:
            DeltaTable.forPath(self.spark, uri).vacuum(float(self.vacuum_hours))
        finally:
            self.spark.conf.unset(USER_METADATA_CONF)
        files = size = None
        for row in DeltaTable.forPath(self.spark, uri).history(10).collect():
            if before is not None and row["version"] <= before:
                continue
            metrics = row["operationMetrics"] or {}
            if row["operation"] == "VACUUM START":
                size = int(metrics.get("sizeOfDataToDelete", 0))
                files = files if files is not None else int(metrics.get("numFilesToDelete", 0))
            elif row["operation"] == "VACUUM END":
                files = int(metrics.get("numDeletedFiles", 0))
        out = {"retention_hours": self.vacuum_hours, "files_deleted": files, "bytes_deleted": size}
        self.log("maintenance.vacuum", table=name, **out)
        return out

    def tidy_log(self, name: str, uri: str) -> dict[str, Any]:
        """Write a checkpoint of the current version and delete log entries past the log retention."""
        before = self.log_entries(uri)
        self.fence()
        jvm = self.spark._jvm
        assert jvm is not None  # a classic (JVM) session always has its gateway; PySpark asserts the same
        delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self.spark._jsparkSession, uri)
        none = jvm.scala.Option.empty()
        snapshot = delta_log.update(False, none, none)
        try:
            delta_log.checkpointAndCleanUpDeltaLog(snapshot, none)  # cleanup honours delta.logRetentionDuration
            how = "checkpoint+cleanup"
        except Exception as e:  # an API change in a later Delta: a checkpoint alone still bounds log replay
            self.log("maintenance.log_cleanup_unavailable", table=name, reason=one_line(e))
            delta_log.checkpoint(snapshot, none)
            how = "checkpoint"
        after = self.log_entries(uri)
        out = {
            "checkpoint_version": int(snapshot.version()),
            "mode": how,
            "entries_before": before,
            "entries_after": after,
            "entries_deleted": (before - after) if before is not None and after is not None and before > after else 0,
        }
        self.log("maintenance.log", table=name, **out)
        return out

    # ------------------------------------------------------------------------------------ a table

    def maintain(self, t: dict[str, Any]) -> dict[str, Any]:
        name, uri = t["name"], t["uri"]
        label = name if t["kind"] == "table" else f"{name} ({t['kind']})"
        t0 = time.monotonic()
        result: dict[str, Any] = {"name": name, "kind": t["kind"], "uri": uri, "status": "ok", "error": None}
        if not DeltaTable.isDeltaTable(self.spark, uri):
            result.update(status="missing", seconds=round(time.monotonic() - t0, 3))
            self.log("maintenance.table_missing", table=label, uri=uri)
            return result
        zorder = [c for c in t.get("zorder_by") or [] if t["kind"] == "table"]
        small = self.maintain_small(label, uri, zorder)
        if small is not None:
            result.update(small, properties_set=[], seconds=round(time.monotonic() - t0, 3))
            self._table_done(label, result)
            return result
        before = self.detail(uri)
        result.update(files_before=before["files"], bytes_before=before["bytes"], version_before=before["version"])
        result["properties_set"] = self.align_properties(label, uri, before["properties"])
        result["optimize"] = self.optimize(label, uri, before, zorder) if self.do_optimize else None
        result["vacuum"] = self.vacuum(label, uri) if self.do_vacuum else None
        result["log"] = self.tidy_log(label, uri)
        result["writer"] = "spark"
        after = self.detail(uri)
        result.update(files_after=after["files"], bytes_after=after["bytes"], version_after=after["version"])
        result["seconds"] = round(time.monotonic() - t0, 3)
        self._table_done(label, result)
        return result

    def _table_done(self, label: str, result: dict[str, Any]) -> None:
        self.log(
            "maintenance.table", table=label, files=f"{result['files_before']}->{result['files_after']}",
            bytes=f"{result['bytes_before']}->{result['bytes_after']}",
            vacuum_files=(result["vacuum"] or {}).get("files_deleted"),
            vacuum_bytes=(result["vacuum"] or {}).get("bytes_deleted"),
            log_entries_deleted=result["log"]["entries_deleted"], writer=result.get("writer", "spark"),
            secs=result["seconds"],
        )

    def maintain_small(self, label: str, uri: str, zorder_by: list[str]) -> dict[str, Any] | None:
        """The table's steps with delta-rs (cdc_core.lake.small_maintenance) when it may; None: Spark's (logged
        why, and after a commit that lost a race Spark redoes every step: each is idempotent)."""
        from deltalake.exceptions import CommitFailedError

        table, why = small_maintenance.eligible(uri, storage=self.storage, properties=self.properties,
                                                zorder_by=zorder_by)
        if table is None:
            self.log("maintenance.spark", table=label, reason=why)
            return None
        try:
            return small_maintenance.maintain(
                uri, table, vacuum_hours=self.vacuum_hours, fence=self.fence,
                user_metadata=lambda step: self._meta(label, step), log_entries=lambda: self.log_entries(uri),
                optimize=self.do_optimize, vacuum=self.do_vacuum, storage=self.storage,
            )
        except CommitFailedError as e:
            self.log("maintenance.spark", table=label, reason=f"a concurrent commit ({one_line(e)})")
            return None

    def maintain_or_record(self, t: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """One table's result, and its error line when it failed: one broken table must not keep the others
        from being maintained (the run still fails). A fencing verdict or a configuration error is raised:
        nothing more may be done by this run / nothing would work."""
        try:
            return self.maintain(t), None
        except (Fenced, ConfigError):
            raise
        except Exception as e:
            self.log("maintenance.table_failed", table=t["name"], kind=t["kind"], reason=one_line(e))
            return ({"name": t["name"], "kind": t["kind"], "uri": t["uri"], "status": "error", "error": one_line(e)},
                    f"{t['name']} ({t['kind']}): {type(e).__name__}: {one_line(e)}")

    def maintain_all(self, tables: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], str | None]]:
        """Every table, on up to `parallelism` threads with a session each; results in the tables' order.
        Each table's steps are Spark jobs too small to fill two cores alone (log replay, planning and
        commits on the driver), so tables overlap well. A fencing verdict stops every thread from taking
        another table and is raised once the threads are done."""
        if min(self.parallelism, len(tables)) <= 1:
            return [self.maintain_or_record(t) for t in tables]
        done = in_threads(self, tables, self.parallelism, lambda job, t: job.maintain_or_record(t),
                          fork=lambda job: job._in_session(job.spark.newSession()))
        return [r for r in done if r is not None]

    def run(self, tables: Sequence[dict[str, Any]]) -> dict[str, Any]:
        t0 = time.monotonic()
        started = time.time()
        done = self.maintain_all(tables)
        results = [r for r, _ in done]
        errors = [e for _, e in done if e is not None]
        report: dict[str, Any] = {
            "pipeline": self.pipeline,
            "token": self.token,
            "run": self.run_id,
            "started_at": started,
            "finished_at": time.time(),
            "seconds": round(time.monotonic() - t0, 3),
            "settings": {"properties": self.properties, "vacuum_retention_hours": self.vacuum_hours,
                         "optimize": self.do_optimize, "vacuum": self.do_vacuum, "parallelism": self.parallelism},
            "tables": results,
            "totals": totals(results),
            "errors": errors,
        }
        self.log(
            "maintenance.done", tables=len(results), errors=len(errors), secs=report["seconds"],
            threads=min(self.parallelism, len(tables)), **report["totals"]
        )
        return report


def totals(results: Sequence[dict[str, Any]]) -> dict[str, int]:
    """What the whole run freed: data files compacted away and deleted, bytes, log entries."""
    out = {"files_before": 0, "files_after": 0, "vacuum_files": 0, "vacuum_bytes": 0, "log_entries_deleted": 0}
    for r in results:
        out["files_before"] += int(r.get("files_before") or 0)
        out["files_after"] += int(r.get("files_after") or 0)
        out["vacuum_files"] += int((r.get("vacuum") or {}).get("files_deleted") or 0)
        out["vacuum_bytes"] += int((r.get("vacuum") or {}).get("bytes_deleted") or 0)
        out["log_entries_deleted"] += int((r.get("log") or {}).get("entries_deleted") or 0)
    return out


# ------------------------------------------------------------------------------------------- CLI


def parse_args(argv: Sequence[str] | None = None) -> MaintenanceJobSpec:
    """The job's one argument, `--spec <json>` (cdc_core.lake.job_specs.MaintenanceJobSpec), checked."""
    p = argparse.ArgumentParser(prog="maintain_tables.py", description="Maintain a pipeline's Delta tables")
    p.add_argument(SPEC_FLAG, dest="spec", required=True, help="the job's spec: a JSON object (MaintenanceJobSpec)")
    spec = MaintenanceJobSpec.from_json(p.parse_args(argv).spec)
    if spec.zk_hosts and not spec.zk_root:
        raise ConfigError("spec zk_hosts needs zk_root (the pipeline's ZooKeeper root)")
    return spec


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        report = _run(argv)
    except Exception as e:  # the exit code and error line the callers decode (cdc_core.lake.job_outcome)
        rc, said = job_error(MAINTENANCE_PROG, e)
        print(said, file=sys.stderr, flush=True)
        return rc
    print(json.dumps(report, sort_keys=True), flush=True)
    if report["errors"]:  # the others were still maintained; the report (written) names each failure
        rc, said = job_error(MAINTENANCE_PROG, LakeError("; ".join(report["errors"])))
        print(said, file=sys.stderr, flush=True)
        return rc
    return 0


def _run(argv: Sequence[str] | None, session: SparkSession | None = None) -> dict[str, Any]:
    """The job; with `session` (tests) in that session, which is left running."""
    close_zk: Callable[[], None] | None = None
    spark: SparkSession | None = None
    try:
        args = parse_args(argv)
        tables = parse_tables(args.tables)
        check_retentions(
            args.vacuum_retention_hours, args.log_retention_hours, args.txn_retention_hours, args.min_retention_hours
        )
        storage = job_storage()  # the object store's credentials from the environment, passed down from here
        fence = None
        if args.zk_hosts and args.zk_root:  # parse_args refused hosts without a root
            fence, close_zk = zk_fence_check(args.zk_hosts, args.zk_root, args.pipeline, args.token)
            fence()  # fail before paying for a Spark start when already fenced
        if session is None:
            spark = build_session(f"cdc-maintain-{args.pipeline}")
            spark.sparkContext.setLogLevel("WARN")
        job = Maintenance(
            session or spark, args.pipeline, args.token,  # type: ignore[arg-type]
            vacuum_hours=args.vacuum_retention_hours, log_hours=args.log_retention_hours,
            txn_hours=args.txn_retention_hours, min_hours=args.min_retention_hours,
            fence=fence, optimize=args.optimize, vacuum=args.vacuum, storage=storage, parallelism=args.parallelism,
        )
        report = job.run(tables)
        write_report(args.report, report, storage=storage)
        return report
    finally:
        if close_zk is not None:
            close_zk()
        if spark is not None:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
