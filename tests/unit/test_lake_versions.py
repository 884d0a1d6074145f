"""The checkpoints table's rules (cdc_core.lake.lake_versions) and the asset-event decisions
(cdc_core.run.table_events).

Pure functions over rows and window records; the idempotent append runs delta-rs on a temporary
directory (no service).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cdc_core.coordination import STATE_ACKED, STATE_PLANNED, WindowRecord
from cdc_core.lake import lake_versions as lv
from cdc_core.model.errors import ConfigError, LakeError
from cdc_core.model.positions import BinlogPosition, ServerIdentity
from cdc_core.model.window_plan import WindowPlan
from cdc_core.run import table_events as te

pytestmark = pytest.mark.unit


def _rows(pipeline: str, seq: int, versions: dict[str, int], commit_ts: float, changed: tuple[str, ...] = ()) -> Any:
    tables = [lv.TableAtWindow(n, f"/lake/{n.replace('.', '/')}", v, n in changed) for n, v in versions.items()]
    return lv.checkpoint_rows(pipeline, seq, "stream", tables, cursor=f"mysql-bin.000001:{seq}",
                              commit_ts=commit_ts, acked_at=commit_ts + 1)


def _history() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    out += _rows("p", 1, {"s.a": 1, "s.b": 1}, 100.0, ("s.a", "s.b")).to_pylist()
    out += _rows("p", 2, {"s.a": 2, "s.b": 1}, 200.0, ("s.a",)).to_pylist()
    out += _rows("p", 4, {"s.a": 2, "s.b": 3}, 400.0, ("s.b",)).to_pylist()
    out += _rows("other", 9, {"s.x": 7}, 900.0).to_pylist()
    return out


def test_resolve_cut_newest_window_or_seq_or_time() -> None:
    rows = _history()
    newest = lv.resolve_cut(rows, "p")
    assert newest.seq == 4 and {n: t.version for n, t in newest.tables.items()} == {"s.a": 2, "s.b": 3}
    assert newest.tables["s.b"].changed and not newest.tables["s.a"].changed
    assert lv.resolve_cut(rows, "p", window=2).tables["s.a"].version == 2
    assert lv.resolve_cut(rows, "p", as_of=399.0).seq == 2  # newest whose commits are all at or before
    assert lv.resolve_cut(rows, "p", as_of=400.0).seq == 4
    with pytest.raises(LakeError, match="window 3 is not recorded"):
        lv.resolve_cut(rows, "p", window=3)
    with pytest.raises(LakeError, match="oldest recorded one is window 1"):
        lv.resolve_cut(rows, "p", as_of=50.0)
    with pytest.raises(LakeError, match="records no window yet"):
        lv.resolve_cut(rows, "nobody")
    with pytest.raises(ConfigError, match="not both"):
        lv.resolve_cut(rows, "p", window=2, as_of=300.0)


def test_a_partial_window_is_never_a_cut() -> None:
    rows = [r for r in _history() if not (r["seq"] == 4 and r["table_name"] == "s.b")]
    assert lv.resolve_cut(rows, "p").seq == 2


def test_sql_and_table_choice() -> None:
    cut = lv.resolve_cut(_history(), "p")
    assert cut.sql(["s.b"]) == ["SELECT * FROM delta.`/lake/s/b` VERSION AS OF 3;  -- s.b"]
    with pytest.raises(ConfigError, match=r"records no table 's\.zz'"):
        cut.pick(["s.zz"])
    assert cut.to_dict()["tables"]["s.a"] == {"uri": "/lake/s/a", "version": 2, "changed": False}


def _with_outputs(seq: int, commit_ts: float, versions: dict[tuple[str, str], int]) -> Any:
    tables = [lv.TableAtWindow(n, f"/lake/{o}/{n}", v, True, output=o) for (n, o), v in versions.items()]
    return lv.checkpoint_rows("p", seq, "stream", tables, cursor=None, commit_ts=commit_ts, acked_at=commit_ts)


def test_a_cut_names_each_tables_history_and_change_log_at_the_window() -> None:
    """Consistent cuts include the outputs (docs/output-modes.md): the rows of a window list them after their
    table, a reader finds them under the table, and a window missing one of them is no cut."""
    rows = _with_outputs(3, 300.0, {("s.a", "state"): 4, ("s.a", "history"): 2, ("s.a", "changelog"): 3,
                                    ("s.b", "state"): 1})
    assert [(r["table_name"], r["output"]) for r in rows.to_pylist()] == [
        ("s.a", "state"), ("s.a", "history"), ("s.a", "changelog"), ("s.b", "state")]
    cut = lv.resolve_cut(rows.to_pylist(), "p")
    assert {n: t.version for n, t in cut.tables.items()} == {"s.a": 4, "s.b": 1}  # the states, as before
    assert cut.table("s.a", "history").version == 2 and cut.table("s.a", "changelog").uri == "/lake/changelog/s.a"
    assert cut.to_dict()["tables"]["s.a"]["outputs"] == {
        "changelog": {"uri": "/lake/changelog/s.a", "version": 3, "changed": True},
        "history": {"uri": "/lake/history/s.a", "version": 2, "changed": True}}
    assert "outputs" not in cut.to_dict()["tables"]["s.b"]
    assert cut.sql(["s.a"]) == [
        "SELECT * FROM delta.`/lake/state/s.a` VERSION AS OF 4;  -- s.a",
        "SELECT * FROM delta.`/lake/changelog/s.a` VERSION AS OF 3;  -- s.a (changelog)",
        "SELECT * FROM delta.`/lake/history/s.a` VERSION AS OF 2;  -- s.a (history)"]
    with pytest.raises(ConfigError, match=r"records no history of s\.b .*outputs recorded: none"):
        cut.table("s.b", "history")
    partial = [r for r in rows.to_pylist() if r["output"] != "history"]
    with pytest.raises(LakeError, match="records no window yet"):
        lv.resolve_cut(partial, "p")


def test_a_checkpoints_table_from_before_outputs_takes_their_rows(tmp_path: Path) -> None:
    """Rows written before the `output` column read as states; the first window with outputs adds the column."""
    from deltalake import write_deltalake

    lake = str(tmp_path)
    old = _rows("p", 1, {"s.a": 1}, 100.0)
    write_deltalake(lv.checkpoints_uri(lake, "p"), old.drop_columns(["output"]))
    assert lv.write_window(lake, "p", 2, lambda: _with_outputs(2, 200.0, {("s.a", "state"): 2,
                                                                          ("s.a", "history"): 0}))
    assert lv.load_cut(lake, "p", window=1).tables["s.a"].version == 1
    cut = lv.load_cut(lake, "p")
    assert cut.seq == 2 and cut.table("s.a", "history").version == 0 and cut.tables["s.a"].version == 2


def test_checkpoints_path_cannot_collide_with_a_table() -> None:
    from cdc_core.model.naming import path_component

    uri = lv.checkpoints_uri("/lake/", "orders")
    assert uri == "/lake/_cdc.meta/orders/checkpoints"
    assert path_component("_cdc.meta") != "_cdc.meta"  # no schema directory can be named like it


def test_spark_helper_reads_each_table_at_its_version_without_pyspark() -> None:
    calls: list[tuple[str, Any]] = []

    class Reader:
        def format(self, f: str) -> Reader:
            calls.append(("format", f))
            return self

        def option(self, k: str, v: Any) -> Reader:
            calls.append((k, v))
            return self

        def load(self, uri: str) -> str:
            return f"df({uri})"

    spark = type("Spark", (), {"read": Reader()})()
    dfs = lv.spark_dataframes(spark, lv.resolve_cut(_history(), "p"), ["s.a", "s.b"])
    assert dfs == {"s.a": "df(/lake/s/a)", "s.b": "df(/lake/s/b)"}
    assert ("versionAsOf", 2) in calls and ("versionAsOf", 3) in calls


def test_retention_hint_names_the_setting() -> None:
    cut = lv.resolve_cut(_history(), "p")
    t = cut.tables["s.a"]
    assert "maintenance.vacuum_retention_hours" in lv.retention_hint(cut, t, "files")
    assert "maintenance.log_retention_hours" in lv.retention_hint(cut, t, "log")


def test_write_window_appends_once_per_window(tmp_path: Path) -> None:
    lake = str(tmp_path)
    assert lv.write_window(lake, "p", 1, lambda: _rows("p", 1, {"s.a": 1, "s.b": 1}, 100.0))
    assert not lv.write_window(lake, "p", 1, lambda: pytest.fail("a recorded window is not rebuilt"))
    assert lv.write_window(lake, "p", 2, lambda: _rows("p", 2, {"s.a": 2, "s.b": 1}, 200.0))
    rows = lv.read_checkpoints(lake, "p")
    assert sorted((r["seq"], r["table_name"]) for r in rows) == [(1, "s.a"), (1, "s.b"), (2, "s.a"), (2, "s.b")]
    assert lv.load_cut(lake, "p").seq == 2


def test_the_checkpoints_table_keeps_its_log_checkpointed_every_ten_windows(tmp_path: Path) -> None:
    """One commit per window: without a log checkpoint every 10 (delta-rs' own default is 100) each ack's
    reads of the table replay up to 100 JSON commits. A table created before the property is given it by
    maintenance."""
    from deltalake import DeltaTable, write_deltalake

    from cdc_core.model.layout import checkpoints_uri
    from cdc_core.model.retention import PROP_CHECKPOINT_INTERVAL

    lake = str(tmp_path)
    for seq in range(1, 13):
        assert lv.write_window(lake, "p", seq, lambda seq=seq: _rows("p", seq, {"s.a": seq}, 100.0 + seq))
    log = Path(checkpoints_uri(lake, "p")) / "_delta_log"
    assert (log / f"{9:020d}.checkpoint.parquet").exists()
    assert DeltaTable(checkpoints_uri(lake, "p")).metadata().configuration[PROP_CHECKPOINT_INTERVAL] == "10"

    old = str(tmp_path / "old")  # a checkpoints table created before the property: maintenance sets it
    write_deltalake(checkpoints_uri(old, "p"), _rows("p", 1, {"s.a": 1}, 100.0))
    assert PROP_CHECKPOINT_INTERVAL not in DeltaTable(checkpoints_uri(old, "p")).metadata().configuration
    lv.maintain(old, "p", vacuum_retention_hours=2)
    assert DeltaTable(checkpoints_uri(old, "p")).metadata().configuration[PROP_CHECKPOINT_INTERVAL] == "10"
    DeltaTable(checkpoints_uri(old, "p")).alter.set_table_properties({PROP_CHECKPOINT_INTERVAL: "100"})
    lv.maintain(old, "p", vacuum_retention_hours=2)  # an operator's own value stays
    assert DeltaTable(checkpoints_uri(old, "p")).metadata().configuration[PROP_CHECKPOINT_INTERVAL] == "100"


def test_two_writers_racing_on_one_window_leave_one_copy(tmp_path: Path) -> None:
    """A zombie and its successor: both saw the window unrecorded; Delta's conflict check on the app id
    lets one commit through, and the other reports "already there"."""
    lake = str(tmp_path)
    lv.write_window(lake, "p", 1, lambda: _rows("p", 1, {"s.a": 1}, 100.0))
    both_built = threading.Barrier(2)
    results: list[bool] = []

    def build() -> Any:
        both_built.wait(timeout=30)
        return _rows("p", 2, {"s.a": 2}, 200.0)

    threads = [threading.Thread(target=lambda: results.append(lv.write_window(lake, "p", 2, build))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(results) == [False, True]
    assert sorted(r["seq"] for r in lv.read_checkpoints(lake, "p")) == [1, 2]


# ------------------------------------------------------------------------------- asset event decisions


def _record(seq: int, state: str = STATE_ACKED, tables: dict[str, Any] | None = None) -> WindowRecord:
    server = ServerIdentity("mariadb", 1)
    start = BinlogPosition("mysql-bin.000001", 4 + seq, server)
    end = BinlogPosition("mysql-bin.000001", 5 + seq, server, commit_ts=1000.0 + seq)
    plan = WindowPlan(pipeline="p", seq=seq, start=start, end=end, transactions=1, events=2, bytes=10)
    result = {"tables": tables if tables is not None else {"s.a": {"changes": 2, "delta_version": seq,
                                                                    "inserted": 1, "updated": 1, "deleted": 0}}}
    return WindowRecord(plan=plan, state=state, result=result, acked_at=2000.0 + seq)  # type: ignore[arg-type]


def test_windows_to_announce() -> None:
    recs = [_record(1), _record(2), _record(3), _record(4, STATE_PLANNED)]
    assert [r.seq for r in te.windows_to_announce(recs, 3, set())] == [3]  # first time: only its own window
    assert [r.seq for r in te.windows_to_announce(recs, 3, {1})] == [2, 3]  # 2 acked by recovery
    assert te.windows_to_announce(recs, 3, {1, 2, 3}) == []  # a retried / cleared ack: nothing twice
    assert te.windows_to_announce(recs, 4, {3}) == []  # not acked: nothing


def test_window_events_only_changed_tables_with_extra() -> None:
    rec = _record(5, tables={"s.a": {"changes": 3, "delta_version": 7, "inserted": 2, "updated": 0, "deleted": 1},
                             "`my.db`.`t`": {"changes": 1},
                             "s.created": {"status": "no table"}})  # only a CREATE TABLE: not in the lake
    events = te.window_events("p", rec, {"s.a": ("s", "a"), "`my.db`.`t`": ("my.db", "t")})
    assert [(e.name, e.schema, e.table) for e in events] == [("`my.db`.`t`", "my.db", "t"), ("s.a", "s", "a")]
    extra = events[1].extra
    assert extra["pipeline"] == "p" and extra["window_seq"] == 5 and extra["delta_version"] == 7
    assert (extra["inserted"], extra["updated"], extra["deleted"]) == (2, 0, 1)
    assert extra["newest_commit_ts"] == 1005.0 and extra["newest_commit_at"].endswith("Z")
    assert "source" not in extra
    assert te.announced_seqs("p", [extra, {"pipeline": "q", "window_seq": 9}, {}]) == {5}


def test_a_table_with_outputs_announces_each_of_them() -> None:
    rec = _record(6, tables={"s.a": {"changes": 2, "delta_version": 9, "inserted": 2,
                                     "history": {"delta_version": 4, "inserted": 3, "updated": 1},
                                     "changelog": {"delta_version": 5, "inserted": 2}}})
    events = te.window_events("p", rec, {"s.a": ("s", "a")})
    assert [(e.name, e.output, e.extra["delta_version"], e.extra.get("output")) for e in events] == [
        ("s.a", "state", 9, None), ("s.a", "history", 4, "history"), ("s.a", "changelog", 5, "changelog")]
    assert events[1].extra["inserted"] == 3 and events[1].extra["updated"] == 1 and events[1].extra["window_seq"] == 6
    assert te.announced_seqs("p", [e.extra for e in events]) == {6}


def test_current_versions_refuses_a_table_already_past_the_window(tmp_path: Path) -> None:
    """A stale ack (another run acked the window and merged the next one) records nothing."""
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    from cdc_core.lake import delta_state
    from cdc_core.model.errors import StateConflict

    uri = str(tmp_path / "s" / "a")
    for seq in (1, 2, 3):
        write_deltalake(uri, pa.table({"id": [seq]}), mode="append",
                        commit_properties=CommitProperties(app_transactions=[Transaction("p", seq)]))
    missing = str(tmp_path / "s" / "gone")

    def read(uris: list[str]) -> list[delta_state.TableFacts | None]:
        return [delta_state.table_facts(u, "p") for u in uris]

    assert lv.current_versions("p", 3, {"s.a": uri, "s.gone": missing}, read=read) == {"s.a": 2, "s.gone": None}
    with pytest.raises(StateConflict, match="already holds window 3, after window 2"):
        lv.current_versions("p", 2, {"s.a": uri}, read=read)


def test_a_vacuumed_or_forgotten_version_names_the_retention_to_raise(tmp_path: Path) -> None:
    import os
    import time

    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": [1]}))
    write_deltalake(uri, pa.table({"id": [2]}), mode="overwrite")
    cut = lv.Cut("p", 1, "stream", None, None, time.time() - 7200, {"s.t": lv.TableVersion("s.t", uri, 0, True)})
    assert lv.read_table(cut, "s.t").column("id").to_pylist() == [1]
    DeltaTable(uri).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    with pytest.raises(LakeError, match=r"removed by VACUUM .* raise maintenance\.vacuum_retention_hours above"):
        lv.read_table(cut, "s.t")
    for f in os.listdir(f"{uri}/_delta_log"):
        if f.startswith("0" * 20):
            os.remove(f"{uri}/_delta_log/{f}")
    with pytest.raises(LakeError, match=r"log no longer reaches back .* raise maintenance\.log_retention_hours"):
        lv.check_version(cut, "s.t")


def test_maintenance_compacts_the_checkpoints_table_and_keeps_its_idempotency(tmp_path: Path) -> None:
    lake = str(tmp_path)
    for seq in range(1, 41):
        lv.write_window(lake, "p", seq, lambda seq=seq: _rows("p", seq, {"s.a": seq, "s.b": 1}, 100.0 * seq))
    out = lv.maintain(lake, "p", vacuum_retention_hours=0, min_files=32)
    assert out["files_before"] == 40 and out["files_after"] == 1 and out["vacuumed"] == 40, out
    assert lv.load_cut(lake, "p").seq == 40 and lv.load_cut(lake, "p", window=7).tables["s.a"].version == 7
    assert not lv.write_window(lake, "p", 40, lambda: pytest.fail("window 40 is recorded"))
    assert lv.write_window(lake, "p", 41, lambda: _rows("p", 41, {"s.a": 41, "s.b": 1}, 4100.0))
    assert lv.maintain(str(tmp_path / "nothing"), "p", vacuum_retention_hours=1) == {
        "uri": lv.checkpoints_uri(str(tmp_path / "nothing"), "p"), "exists": False}


def test_maintenance_keeps_the_checkpoints_tables_log_for_the_pipelines_log_retention(tmp_path: Path) -> None:
    """One commit per window: at Delta's default 30 days a one-minute pipeline's table kept 43,200 log entries,
    which every ack's open of it read through (the long run, 2026-12-01). Maintenance sets the pipeline's
    log_retention_hours on it, and its log clean-up then drops what is older."""
    from deltalake import DeltaTable

    from cdc_core.model.layout import checkpoints_uri
    from cdc_core.model.retention import PROP_LOG_RETENTION

    lake = str(tmp_path)
    for seq in range(1, 26):
        lv.write_window(lake, "p", seq, lambda seq=seq: _rows("p", seq, {"s.a": seq}, 100.0 * seq))
    log = Path(checkpoints_uri(lake, "p")) / "_delta_log"
    three_hours_ago = time.time() - 3 * 3600
    for f in log.glob("*.json"):
        os.utime(f, (three_hours_ago, three_hours_ago))
    assert len(list(log.glob("*.json"))) == 25
    lv.maintain(lake, "p", vacuum_retention_hours=2, log_retention_hours=2)
    assert DeltaTable(checkpoints_uri(lake, "p")).metadata().configuration[PROP_LOG_RETENTION] == "interval 2 hours"
    left = sorted(int(f.name[:20]) for f in log.glob("*.json"))
    assert left[0] >= 5, left  # the old commits before a later checkpoint went (at Delta's default 30 days: none)
    assert lv.load_cut(lake, "p").seq == 25 and lv.load_cut(lake, "p", window=25).tables["s.a"].version == 25
    assert not lv.write_window(lake, "p", 25, lambda: pytest.fail("window 25 is recorded"))  # idempotency kept
    assert lv.write_window(lake, "p", 26, lambda: _rows("p", 26, {"s.a": 26}, 2600.0))
