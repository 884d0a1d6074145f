"""The fault suite's oracle: every invariant of the product, checked after every step of a scenario.

After each step (a run, a crash, a restart, a resumed zombie) `Oracle.check()` reads ZooKeeper, the
staging area and the lakehouse and asserts:

- **window records are immutable**: a window's plan never changes once seen (same bytes), an acked
  window stays acked with the same result, and windows never disappear;
- **the cursor** only moves forward (sequence and position), every window up to it is acked, at most
  the next one is planned, and it stands exactly at the end of the last acked stream window;
- **ack only after Delta holds the window**: every table of an acked window's manifest has a Delta
  txn version (app id = pipeline) >= the window, and no table holds a window that was never planned;
- **a staged window never changes**: a manifest, once seen, is byte-identical whenever it exists
  again (a deleted window must be re-staged identically);
- **no window is applied twice**: in every Delta table's log (tombstone tables included) each
  (app id, version) appears in at most one commit;
- **the lake equals the source at the window it holds**: each captured table, at the Delta commit that
  recorded its txn version v when every later commit is the merge job's for a later window (a window's
  schema changes commit before its txn commit, so a run killed in the schema phase leaves the next window's
  steps on top, for the next run to finish), else at its latest version (the final check always), equals
  the source table replayed up to the end of window v (tests/faults/workload.py's
  `Shadow`), row for row, value for value (cdc_core.run.verify.compare_table, duplicates included), and
  column for column: names (order-insensitive) and Delta types per the type map (cdc_core.model.types);
  a table whose version is older than the cursor had no change in the windows since, DDL included (else a
  window was acked without it); a table the lake does not have held no row at the cursor;
- **nothing remains of a table that is gone**: a captured name no source table has at that point
  (dropped, renamed away) holds no live row in the lake (soft deletes: only tombstones); an online
  schema-change tool's ghost, trash or changelog table has no lake table at all, and the lake holds no table
  the workload never named. `lenient` (schema_changes mode): the lake keeps columns the source dropped or
  renamed (compared with `kept_columns`) and the rows of dropped and renamed-away tables (not checked);
- **no re-read**: no window is a snapshot (the workload keeps statements the lake must re-read out).

Tables damaged on purpose (`damaged()`) are exempt until `repaired()`. Violations raise
AssertionError with the step's label; the counts feed the figures (tests/faults/RESULTS.md).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdc_core.capture.source import TableFilter, describe_tables
from cdc_core.coordination import STATE_ACKED, Cursor, PipelineCoordinator, WindowRecord
from cdc_core.lake import delta_state
from cdc_core.model.manifest import COL_DELETED
from cdc_core.model.naming import path_component
from cdc_core.model.positions import BinlogPosition
from cdc_core.model.types import column_types
from cdc_core.model.window_plan import KIND_BACKFILL, KIND_SNAPSHOT, KIND_STREAM
from cdc_core.run.verify import compare_table
from tests.faults.workload import Shadow, Workload, changed_between

_DELTA_TYPES = {
    "byte": "TINYINT", "short": "SMALLINT", "integer": "INT", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE",
    "string": "STRING", "binary": "BINARY", "date": "DATE", "timestamp": "TIMESTAMP", "timestamp_ntz": "TIMESTAMP_NTZ",
    "boolean": "BOOLEAN",
}


def gtid_seq(position: BinlogPosition) -> int:
    """The domain-0 sequence number of a MariaDB position's GTID state ('0-1-42' -> 42)."""
    for part in (position.gtid or "").split(","):
        domain, _, rest = part.strip().partition("-")
        if domain == "0" and rest:
            return int(rest.rsplit("-", 1)[1])
    raise AssertionError(f"position {position.label()} carries no domain-0 GTID")


def _txn_and_version(uri: str, app_id: str) -> tuple[int | None, int | None]:
    """(the app's txn version, the table version it was read at), both None without a table."""
    if not delta_state.table_exists(uri):
        return None, None
    from deltalake import DeltaTable

    dt = DeltaTable(uri)
    v = dt.transaction_version(app_id)
    return (None if v is None else int(v)), int(dt.version())


def _delta_type(t: Any) -> str:
    if isinstance(t, str):
        if t.startswith("decimal"):
            return t.upper().replace(" ", "")
        return _DELTA_TYPES.get(t, t.upper())
    return json.dumps(t, sort_keys=True)


@dataclass
class Figures:
    checks: int = 0
    table_compares: int = 0
    rows_compared: int = 0
    rows_lost: int = 0
    rows_duplicated: int = 0
    wrong_values: int = 0  # rows with at least one wrong value (or a row the source does not have)
    type_mismatches: int = 0
    windows_acked: int = 0
    changes_staged: int = 0  # row changes in acked windows' manifests (what flowed through the pipeline)
    restaged_identical: int = 0
    fenced_zombies: int = 0
    gone_checked: int = 0  # comparisons of a table gone at the source (dropped, renamed away) with its lake table
    rows_left_behind: int = 0  # live lake rows of such a table

    def add(self, other: Figures) -> None:
        for k, v in other.__dict__.items():
            setattr(self, k, getattr(self, k) + v)


@dataclass
class Oracle:
    services: Any
    workload: Workload
    shadow: Shadow
    pipeline: str
    zk_client: Any
    zk_root: str
    lake_root: Path
    staging_root: Path
    lenient: bool = False  # schema_changes mode lenient: kept columns, dropped tables keep their rows
    figures: Figures = field(default_factory=Figures)
    damaged_tables: set[str] = field(default_factory=set)
    log: list[str] = field(default_factory=list)
    _plans: dict[int, str] = field(default_factory=dict)
    _acked: dict[int, str] = field(default_factory=dict)
    _manifests: dict[int, bytes] = field(default_factory=dict)
    _manifest_tables: dict[int, list[str]] = field(default_factory=dict)
    _manifest_ddl_only: dict[int, set[str]] = field(default_factory=dict)  # staged without files (DDL only)
    _manifest_rows: dict[int, int] = field(default_factory=dict)
    _counted: set[int] = field(default_factory=set)
    _verified: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    # table -> the Delta version this check reads: the commit that recorded the window the table holds (its txn)
    _snapshots: dict[str, int | None] = field(default_factory=dict)
    _latest: dict[str, int | None] = field(default_factory=dict)  # table -> its latest Delta version
    _commit_seqs: dict[str, dict[str, int | None]] = field(default_factory=dict)  # uri -> commit -> merge job's seq
    _cursor: Cursor | None = None
    _commits: dict[str, dict[str, tuple[tuple[str, int], ...]]] = field(default_factory=dict)
    _restage_seen: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.coordinator = PipelineCoordinator(self.zk_client, self.zk_root, self.pipeline)

    def close(self) -> None:
        self.coordinator.close()

    # ------------------------------------------------------------------------------------ marks

    def damaged(self, table: str) -> None:
        self.damaged_tables.add(table)

    def repaired(self, table: str) -> None:
        self.damaged_tables.discard(table)

    def table_uri(self, table: str) -> str:
        return str(self.lake_root / path_component(self.workload.database) / path_component(table))

    # ------------------------------------------------------------------------------------ check

    def check(self, label: str, *, final: bool = False) -> Figures:
        """Every invariant now; raises AssertionError naming the step. `final`: also against the real source."""
        problems: list[str] = []
        windows, cursor = self._check_zk(problems)
        self._check_staging(windows, problems)
        versions = self._check_delta(windows, cursor, problems)
        step = self._check_content(windows, cursor, versions, problems, final=final)
        self.figures.checks += 1
        self.log.append(f"{label}: cursor seq={cursor.seq} windows={len(windows)} problems={len(problems)}")
        if problems:
            raise AssertionError(f"oracle, after {label}:\n  " + "\n  ".join(problems))
        return step

    def _check_zk(self, problems: list[str]) -> tuple[dict[int, WindowRecord], Cursor]:
        co = self.coordinator
        cursor = co.read_cursor()
        seqs = co._window_seqs()
        windows: dict[int, WindowRecord] = {}
        for s in seqs:
            rec = co.get_window(s)
            if rec is not None:
                windows[s] = rec
        for s, plan in self._plans.items():
            if s not in windows:
                problems.append(f"window {s} disappeared from ZooKeeper")
        for s, rec in windows.items():
            plan = json.dumps(rec.plan.to_dict(), sort_keys=True)
            if self._plans.setdefault(s, plan) != plan:
                problems.append(f"window {s} was re-planned: {self._plans[s]} -> {plan}")
            if rec.state == STATE_ACKED:
                result = json.dumps(rec.result, sort_keys=True)
                if s not in self._acked:
                    self.figures.windows_acked += 1
                if self._acked.setdefault(s, result) != result:
                    problems.append(f"acked window {s} changed its result: {self._acked[s]} -> {result}")
            elif s in self._acked:
                problems.append(f"window {s} went from acked back to {rec.state}")
        prev = self._cursor
        if prev is not None:
            if cursor.seq < prev.seq:
                problems.append(f"cursor moved back from window {prev.seq} to {cursor.seq}")
            if prev.position is not None and (cursor.position is None or cursor.position < prev.position):
                problems.append(f"cursor position moved back from {prev.position.label()} to "
                                f"{cursor.position.label() if cursor.position else None}")
        for s, rec in windows.items():
            if rec.plan.kind == KIND_SNAPSHOT:
                problems.append(f"window {s} is a snapshot (a re-read the lake asked for), but the workload makes no "
                                "statement whose rows the lake must re-read")
            if s <= cursor.seq and rec.state != STATE_ACKED:
                problems.append(f"window {s} <= cursor {cursor.seq} is {rec.state}, not acked")
            if s > cursor.seq and rec.state == STATE_ACKED:
                problems.append(f"window {s} is acked but the cursor says {cursor.seq}")
            if s > cursor.seq + 1:
                problems.append(f"window {s} planned beyond the next one ({cursor.seq + 1})")
        streams = [windows[s] for s in sorted(windows) if s <= cursor.seq and windows[s].plan.kind == KIND_STREAM]
        if streams and cursor.position is not None:
            end = streams[-1].plan.end
            if not (end.same_point(cursor.position) and end.server.same_server(cursor.position.server)):
                problems.append(f"cursor {cursor.position.label()} is not the end of the last acked stream window "
                                f"{streams[-1].seq} ({end.label()})")
        self._cursor = cursor
        return windows, cursor

    def _check_staging(self, windows: dict[int, WindowRecord], problems: list[str]) -> None:
        base = self.staging_root / path_component(self.pipeline)
        for s in windows:
            m = base / f"w{s:010d}" / "manifest.json"
            try:
                data = m.read_bytes()
            except FileNotFoundError:
                continue
            if s in self._manifests:
                if self._manifests[s] != data:
                    problems.append(f"staged window {s} changed: its manifest differs from the one first staged")
                elif s in self._restage_seen:
                    self.figures.restaged_identical += 1
                    self._restage_seen.discard(s)
            else:
                self._manifests[s] = data
                manifest = json.loads(data)
                mine = [t for t in manifest.get("tables", []) if t["schema"] == self.workload.database]
                self._manifest_tables[s] = [t["table"] for t in mine]
                self._manifest_ddl_only[s] = {t["table"] for t in mine if not t["files"]}
                self._manifest_rows[s] = sum(f["rows"] for t in mine for f in t["files"])
        for s in sorted(set(self._acked) - self._counted):  # what flowed: changes of acked windows
            if s in self._manifest_rows:
                self.figures.changes_staged += self._manifest_rows[s]
                self._counted.add(s)

    def forget_staged(self, seq: int) -> None:
        """The test deleted window `seq`'s staged files: the next copy must be identical (counted)."""
        self._restage_seen.add(seq)

    def _delta_log_txns(self, uri: str) -> dict[str, tuple[tuple[str, int], ...]]:
        """commit file -> its (appId, version) txn actions; commit files are immutable, so cached."""
        log_dir = Path(uri) / "_delta_log"
        cache = self._commits.setdefault(uri, {})
        try:
            names = sorted(n for n in os.listdir(log_dir) if n.endswith(".json") and n[:20].isdigit())
        except FileNotFoundError:
            self._commits[uri] = {}
            return {}
        for stale in set(cache) - set(names):  # the table was deleted and re-created
            del cache[stale]
        for n in names:
            if n in cache:
                continue
            txns = []
            seq = None
            for line in (log_dir / n).read_text().splitlines():
                action = json.loads(line)
                if "txn" in action:
                    txns.append((action["txn"]["appId"], int(action["txn"]["version"])))
                if "commitInfo" in action:  # the merge job's commits say whose window they belong to
                    try:
                        meta = json.loads(action["commitInfo"].get("userMetadata") or "null")
                    except ValueError:
                        meta = None
                    if isinstance(meta, dict) and meta.get("pipeline") == self.pipeline:
                        seq = int(meta.get("seq", 0))
            cache[n] = tuple(txns)
            self._commit_seqs.setdefault(uri, {})[n] = seq
        return cache

    def _txn_commit(self, uri: str, window: int, latest: int | None) -> int | None:
        """The Delta version to read the table at `uri` holding `window`: the commit that recorded the window (the
        pipeline's txn) when every commit after it is the merge job's for a later window of this pipeline (its
        schema steps, before that window's own txn commit); else the latest, `latest` (anything else written
        after the window is the lake's content too)."""
        for attempt in range(2):  # a commit newer than the cached log: read the log again
            log = self._delta_log_txns(uri)
            found = [int(name[:20]) for name, txns in log.items() if (self.pipeline, window) in txns]
            if found:
                at = max(found)
                seqs = self._commit_seqs.get(uri, {})
                upto = latest if latest is not None else at
                after = [seqs.get(name) for name in log if at < int(name[:20]) <= upto]
                return at if all(seq is not None and seq > window for seq in after) else latest
            if attempt == 0:
                self._commits.pop(uri, None)
        return latest

    def _check_delta(
        self, windows: dict[int, WindowRecord], cursor: Cursor, problems: list[str]
    ) -> dict[str, int | None]:
        versions: dict[str, int | None] = {}
        top = max(windows) if windows else 0
        names = self.workload.all_names
        uris = {t: self.table_uri(t) for t in names}
        tomb_root = self.lake_root / "_cdc_tombstones" / path_component(self.workload.database)
        for t in names:
            uris[f"tombstones of {t}"] = str(tomb_root / path_component(t))
        for t in self.workload.osc_names:  # never in the lake
            for where in (Path(self.table_uri(t)), tomb_root / path_component(t)):
                if where.exists():
                    problems.append(f"{t}: an online schema-change tool's table has a lake table ({where})")
        known = {path_component(t) for t in (*names, *self.workload.osc_names)}
        lake_dir = self.lake_root / path_component(self.workload.database)
        for d in sorted(lake_dir.iterdir()) if lake_dir.is_dir() else ():
            if d.name not in known:
                problems.append(f"the lake holds a table the workload never named: {d}")
        for name, uri in uris.items():
            seen: dict[tuple[str, int], str] = {}
            for commit, txns in sorted(self._delta_log_txns(uri).items()):
                for txn in txns:
                    if txn in seen:
                        problems.append(
                            f"{name}: window {txn[1]} of {txn[0]!r} committed twice ({seen[txn]}, {commit})"
                        )
                    seen[txn] = commit
            if name in names:
                # One snapshot for the txn version and, later, the rows: an orphaned merge (its client was
                # killed) may still be committing while the oracle looks.
                v, self._latest[name] = _txn_and_version(uri, self.pipeline)
                versions[name] = v
                # A window's schema changes commit before its txn commit (docs/schema-changes.md): a run killed
                # in between leaves the next window's schema steps on top of the window the table holds, which
                # the next run finishes. The table "at the window it holds" is the commit that recorded it.
                self._snapshots[name] = (
                    self._txn_commit(uri, v, self._latest[name]) if v is not None else self._latest[name]
                )
                if v is not None and v > top:
                    problems.append(f"{name} holds window {v}, which was never planned (last planned {top})")
        for s, rec in windows.items():
            if rec.state != STATE_ACKED:
                continue
            for t in self._manifest_tables.get(s, []):
                if t in self.damaged_tables:
                    continue
                v = versions.get(t)
                if v is None and t in self._manifest_ddl_only.get(s, ()):
                    continue  # DDL on a table the lake never had (e.g. created LIKE another, no row yet)
                if v is None or v < s:
                    problems.append(f"window {s} is acked but Delta table {t} holds only window {v}")
        return versions

    def _check_content(self, windows: dict[int, WindowRecord], cursor: Cursor, versions: dict[str, int | None],
                       problems: list[str], *, final: bool) -> Figures:
        step = Figures()
        acked_streams = [windows[s] for s in sorted(windows) if s <= cursor.seq and windows[s].plan.kind == KIND_STREAM]
        cursor_gtid = gtid_seq(acked_streams[-1].plan.end) if acked_streams else None
        conn = self.services.root_connect()
        try:
            for t in self.workload.all_names:
                if t in self.damaged_tables:
                    continue
                v = versions.get(t)
                if v is None:
                    if cursor_gtid is None:
                        continue
                    if changed_between(self.workload, t, 0, cursor_gtid) and not self.workload.all_ddl:
                        problems.append(f"{t}: the cursor passed its changes but Delta has no table for it")
                        continue
                    # A table the lake never had (or no longer has, as a table) held no row at the cursor.
                    schema = self.shadow.advance(t, max(cursor_gtid, self.shadow.at.get(t, 0)))
                    if final:
                        schema = self.workload.database
                    rows = self.shadow.row_count(t, schema)
                    if rows:
                        problems.append(f"{t}: the source held {rows} rows at the cursor (GTID {cursor_gtid}, "
                                        f"{schema}) but Delta has no table for it")
                    continue
                rec = windows.get(v)
                if rec is None:
                    problems.append(f"{t}: Delta holds window {v}, which has no record")
                    continue
                if rec.plan.kind == KIND_BACKFILL and cursor.backfill is not None:
                    continue  # mid-backfill: tombstones make the partial state no prefix; checked when done
                g = gtid_seq(rec.plan.end)
                if v <= cursor.seq and cursor_gtid is not None and rec.plan.kind == KIND_STREAM:
                    later = changed_between(self.workload, t, g, cursor_gtid, ddl=True)
                    if later:
                        problems.append(
                            f"{t}: holds window {v} (to GTID {g}) but the cursor is at GTID {cursor_gtid} and {t} "
                            f"changed in between (GTIDs {later[:5]}): a window was acked without it"
                        )
                schema = self.shadow.advance(t, max(g, self.shadow.at.get(t, 0)))
                if final:
                    if cursor_gtid is not None:
                        self.shadow.advance(t, max(cursor_gtid, self.shadow.at.get(t, 0)))
                    schema = self.workload.database  # the real source, not the replay
                    self._snapshots[t] = self._latest.get(t)  # and the table as it is, nothing left on top
                if self.shadow.exists(t, schema):
                    self._compare(conn, schema, t, step, problems)
                elif not self.lenient:  # lenient keeps a dropped table's rows
                    self._gone(schema, t, step, problems)
        finally:
            conn.close()
        self.figures.add(step)
        return step

    def _gone(self, schema: str, table: str, step: Figures, problems: list[str]) -> None:
        """`table` does not exist at the source at this point (dropped, renamed away): its lake table holds no
        live row (soft deletes: tombstones only)."""
        snapshot = self._snapshots.get(table)
        seen = (schema, self.shadow.at.get(table), snapshot, "gone")
        if self._verified.get(table) == seen:
            return
        rows = delta_state.read_rows(self.table_uri(table), version=snapshot).to_pylist()
        live = [r for r in rows if not r.get(COL_DELETED)]
        step.gone_checked += 1
        step.rows_left_behind += len(live)
        if live:
            problems.append(f"{table} is gone at the source ({schema} has no such table) but its lake table still "
                            f"holds {len(live)} live rows, e.g. {live[:2]}")
        else:
            self._verified[table] = seen

    def _compare(self, conn: Any, schema: str, table: str, step: Figures, problems: list[str]) -> None:
        uri = self.table_uri(table)
        # Neither side changed since the last comparison that passed (same shadow position, same Delta
        # commits): the answer is the same, skip the work.
        snapshot = self._snapshots.get(table)
        seen = (schema, self.shadow.at.get(table), snapshot)
        if self._verified.get(table) == seen:
            return
        known = len(problems)
        # The key is the source's primary key (tables come and go with DDL); the lake may keep columns under lenient.
        diff = compare_table(conn, schema, table, uri, None, version=snapshot, kept_columns=self.lenient)
        step.table_compares += 1
        step.rows_compared += diff.source_rows
        wrong = len({k for k, *_ in diff.different}) + len(diff.extra)
        step.rows_lost += len(diff.missing)
        step.rows_duplicated += len(diff.duplicates)
        step.wrong_values += wrong
        step.type_mismatches += len(diff.schema)  # columns missing, extra, or of another type than the type map's
        if not diff.equal:
            problems.append(f"{table} differs from the source replayed to its window ({schema}): {diff.summary()}")
        # Type for type: the Delta column types are the type map's for the source's columns.
        from deltalake import DeltaTable

        schema_json = json.loads(DeltaTable(uri, version=snapshot).schema().to_json())
        fields = {f["name"]: f["type"] for f in schema_json["fields"]}
        described = describe_tables(conn, TableFilter(include=(f"{schema}.{table}",), exclude=()), self.pipeline)
        for col in described[f"{schema}.{table}"].columns:
            if col.name not in fields:
                continue  # compare_table reported it missing
            want = column_types(col, table)[1].replace(" ", "").upper()
            have = _delta_type(fields[col.name])
            if want != have:
                step.type_mismatches += 1
                problems.append(f"{table}.{col.name}: Delta type {have}, the type map says {want} for {col.mysql_type}")
        if len(problems) == known:
            self._verified[table] = seen
