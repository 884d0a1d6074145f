"""Staged-window and window-record cleanup against the real ZooKeeper and a real staging directory.

Windows are planned and acked through `PipelineCoordinator` with a clock the test moves (acks "days
ago"); staged windows are real window directories (manifest + Parquet). What the tests pin down:
acked windows older than the retention go (with their merge reports and staging leftovers), the
pending window and anything after the cursor stay, a record pruned from ZooKeeper still bounds its
window's age through a later record, the after-ack pass stops at the first young window and prunes
records only in batches, the hard bound on the record count holds, and a zombie or a ZooKeeper
outage deletes nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from cdc_core.capture.source import SourceParams
from cdc_core.coordination import PipelineCoordinator
from cdc_core.lake import staging_store
from cdc_core.model import retention
from cdc_core.model.config import MaintenanceConfig, PipelineConfig
from cdc_core.model.errors import CoordinationError, Fenced
from cdc_core.model.positions import BinlogPosition
from cdc_core.model.window_plan import WindowPlan
from cdc_core.run import housekeeping
from cdc_core.run.pipeline import Pipeline
from tests.support.staged_builder import SERVER, Col, WindowBuilder

pytestmark = pytest.mark.integration

PIPE = "orders"
DAY = 86400.0
ID = Col("id", pa.int32(), "INT")


class Clock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def pos(offset: int) -> BinlogPosition:
    return BinlogPosition("mysql-bin.000001", offset, SERVER)


def plan(seq: int) -> WindowPlan:
    return WindowPlan(PIPE, seq, pos(4 + seq * 100), pos(4 + (seq + 1) * 100), transactions=1, events=1)


def stage(staging: Path, seq: int) -> None:
    WindowBuilder(staging, PIPE, seq).file("shop", "t", ("id",), [ID], [("I", {"id": seq})]).build()


def history(coord: PipelineCoordinator, clock: Clock, staging: Path, ages_days: list[float], pending: bool) -> Any:
    """Windows 1..n acked `ages_days` ago (and one more pending), each staged; returns the grant."""
    grant = coord.acquire("run", 10**9)
    coord.set_start(grant, pos(104))
    for seq, age in enumerate(ages_days, start=1):
        clock.offset = -age * DAY
        coord.store_plan(grant, plan(seq))
        stage(staging, seq)
        coord.ack_window(grant, seq, {})
    clock.offset = 0
    if pending:
        seq = len(ages_days) + 1
        coord.store_plan(grant, plan(seq))
        stage(staging, seq)
    return grant


def names(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir()) if path.exists() else []


@pytest.fixture
def coord(zk_client: KazooClient, zk_root: str) -> Iterator[tuple[PipelineCoordinator, Clock]]:
    clock = Clock()
    c = PipelineCoordinator(zk_client, zk_root, PIPE, clock=clock)
    yield c, clock
    c.close()


def test_staging_cleanup_deletes_only_old_acked_windows(coord, staging_dir: Path, zk_client: KazooClient) -> None:
    c, clock = coord
    grant = history(c, clock, staging_dir, [5, 5, 5, 5, 2, 2, 0], pending=True)  # 8 is pending
    root = staging_dir / PIPE
    reports = root / "reports"
    reports.mkdir()
    for seq, token in ((2, "1a"), (2, "1b"), (7, "1a"), (8, "1a")):  # a zombie's report of 2 too
        (reports / f"w{seq:010d}-{token}.json").write_text("{}")
    old_maintenance = reports / retention.maintenance_report_name(0x1A, time.time() - 4 * DAY)
    young_maintenance = reports / retention.maintenance_report_name(0x1B, time.time())
    for report, age in ((old_maintenance, 4 * DAY), (young_maintenance, 0)):
        report.write_text("{}")
        os.utime(report, (time.time() - age, time.time() - age))  # maintenance reports age by their mtime
    (root / ".w0000000003.tmp-abc123").mkdir()
    (root / ".w0000000008.tmp-abc123").mkdir()
    (root / "README.txt").write_text("an operator's file")
    # A window directory after the cursor that ZooKeeper knows nothing about: never "acked".
    stage(staging_dir, 12)
    cursor_before = zk_client.get(c.cursor_path)[0]

    capped = housekeeping.clean_staging(c, grant, str(staging_dir), 3 * DAY, max_windows=1)
    assert capped["windows_deleted"] == 1 and not (root / "w0000000001").exists()
    assert capped["reports_deleted"] == 1 and not old_maintenance.exists() and young_maintenance.exists()
    out = housekeeping.clean_staging(c, grant, str(staging_dir), 3 * DAY)  # the after-ack way: stops early
    assert names(root) == [".w0000000008.tmp-abc123", "README.txt", "reports", "w0000000005", "w0000000006",
                           "w0000000007", "w0000000008", "w0000000012"]
    assert names(reports) == [young_maintenance.name, "w0000000007-1a.json", "w0000000008-1a.json"]
    assert (out["windows_deleted"], out["reports_deleted"], out["leftovers_deleted"]) == (3, 2, 1)
    assert out["bytes_freed"] > 0 and out["files_deleted"] >= 3 * 2
    assert out["first_kept"]["seq"] == 5 and "within the retention" in out["first_kept"]["reason"]
    assert out["unknown_entries"] == 1
    assert zk_client.get(c.cursor_path)[0] == cursor_before  # ZooKeeper untouched by staging cleanup
    assert c.window_record_seqs() == list(range(1, 9))

    # Records 1-6 pruned (older than a day, beyond the newest 2): windows 5-6 lose their records, but
    # record 7 (acked now) bounds their ack time, so 3 days later they are still kept ...
    m = MaintenanceConfig(window_records_retention_hours=24, window_records_keep=2, window_records_max=10)
    pruned = housekeeping.prune_records(c, grant, m)
    assert pruned["records_deleted"] == 6 and c.window_record_seqs() == [7, 8]
    later = housekeeping.clean_staging(c, grant, str(staging_dir), 3 * DAY, now=time.time() + 0.5 * DAY,
                                       stop_at_first_kept=False)
    assert later["windows_deleted"] == 0
    assert "within the retention" in later["first_kept"]["reason"]
    # ... and once that bound is older than the retention too, they go; 7 (its own record) as well.
    out = housekeeping.clean_staging(c, grant, str(staging_dir), 3 * DAY, now=time.time() + 3.5 * DAY,
                                     stop_at_first_kept=False)
    assert out["windows_deleted"] == 3
    assert names(root) == [".w0000000008.tmp-abc123", "README.txt", "reports", "w0000000008", "w0000000012"]
    assert names(reports) == ["w0000000008-1a.json"]  # the maintenance report too, 3.5 days old by then
    assert c.pending_window().seq == 8  # type: ignore[union-attr]


def test_a_zombie_or_an_unknown_answer_deletes_nothing(
    coord, staging_dir: Path, services, zk_client: KazooClient, zk_root: str
) -> None:
    c, clock = coord
    grant = history(c, clock, staging_dir, [9, 9, 9], pending=False)
    c.release(grant)
    other = c.acquire("successor", 600)
    with pytest.raises(Fenced):
        housekeeping.clean_staging(c, grant, str(staging_dir), DAY)
    with pytest.raises(Fenced):
        housekeeping.prune_records(c, grant, MaintenanceConfig(window_records_retention_hours=1, window_records_keep=1))
    assert names(staging_dir / PIPE) == ["w0000000001", "w0000000002", "w0000000003"]
    assert c.window_record_seqs() == [1, 2, 3]

    # ZooKeeper unreachable: the pass stops before deleting anything (never "not there" = acked).
    down = KazooClient(hosts=services.zk_hosts, timeout=10)
    down.start(timeout=15)
    blind = PipelineCoordinator(down, zk_root, PIPE)
    down.stop()
    with pytest.raises(CoordinationError, match="not safe to act"):
        housekeeping.clean_staging(blind, other, str(staging_dir), DAY)
    blind.close()
    down.close()
    assert names(staging_dir / PIPE) == ["w0000000001", "w0000000002", "w0000000003"]


def test_record_count_stays_bounded(coord, staging_dir: Path) -> None:
    c, clock = coord
    grant = history(c, clock, staging_dir, [0] * 13, pending=True)  # all young: only the bound applies
    m = MaintenanceConfig(window_records_retention_hours=24, window_records_keep=1, window_records_max=10)
    out = housekeeping.prune_records(c, grant, m)
    assert out["by_count"] and not out["by_age"]
    assert c.window_record_seqs() == list(range(5, 15))  # the newest 10: last acked (13) and pending (14) in
    assert housekeeping.prune_records(c, grant, m)["records_deleted"] == 0


def test_staging_of_windows_whose_records_were_pruned_by_count_still_goes(coord, staging_dir: Path) -> None:
    """Found by the long run (bench/longrun.py, 2026-12-01): with records pruned by count faster than the staging
    retention passes, a pruned window's ack time was bounded only by the oldest record left, which is always young,
    so its staged copy was never deleted: staging grew without bound. Each prune now leaves a mark (seq, ack time)
    of the newest record it deleted (retention.marks_after_prune), in the multi-op that deletes them."""
    c, clock = coord
    # Windows 1-4 acked 5 days ago, 5-13 now, 14 pending; records beyond the newest 10 go, whatever their age.
    grant = history(c, clock, staging_dir, [5, 5, 5, 5] + [0] * 9, pending=True)
    m = MaintenanceConfig(window_records_retention_hours=24 * 30, window_records_keep=1, window_records_max=10)
    assert c.pruned_marks() == []
    out = housekeeping.prune_records(c, grant, m, staging_retention_seconds=3 * DAY)
    assert out["by_count"] and c.window_record_seqs() == list(range(5, 15))
    ((seq, acked_at),) = c.pruned_marks()
    assert seq == 4 and abs(acked_at - (time.time() - 5 * DAY)) < 60
    # More windows acked now, each prune by count: marks are left one per 3 days / 200 (21.6 min) of ack time.
    for n in range(15, 19):
        c.ack_window(grant, n - 1, {})
        c.store_plan(grant, plan(n))
        stage(staging_dir, n)
        housekeeping.prune_records(c, grant, m, staging_retention_seconds=3 * DAY)
    assert [s for s, _ in c.pruned_marks()] == [4, 5] and c.window_record_seqs() == list(range(9, 19))
    # The oldest record left (9) was acked just now: windows 1-4 go on their mark's 5 days, 5-8 stay (young).
    out = housekeeping.clean_staging(c, grant, str(staging_dir), 3 * DAY, stop_at_first_kept=False)
    assert out["windows_deleted"] == 4 and names(staging_dir / PIPE)[:2] == ["w0000000005", "w0000000006"]
    # A prune that deletes nothing leaves the marks as they were.
    assert housekeeping.prune_records(c, grant, m)["records_deleted"] == 0
    assert [s for s, _ in c.pruned_marks()] == [4, 5]


def test_after_ack_cleanup_is_batched(coord, staging_dir: Path, services, zk_root: str, tmp_path: Path) -> None:
    c, clock = coord
    # Acked 24.5h, 24.5h and 1h ago; retention 24h for both staging and records, keep 1.
    grant = history(c, clock, staging_dir, [24.5 / 24, 24.5 / 24, 1 / 24], pending=True)
    cfg = PipelineConfig.model_validate(
        {
            "name": PIPE, "source": {"conn_id": "unused"}, "tables": {"include": ["shop.*"]},
            "zookeeper": {"hosts": services.zk_hosts, "root": zk_root}, "lease_seconds": 60,
            "staging_root": str(staging_dir), "lake_root": str(tmp_path / "lake"), "staging_retention_hours": 24,
            "maintenance": {"vacuum_retention_hours": 25, "log_retention_hours": 25, "txn_retention_hours": 25,
                            "window_records_retention_hours": 24, "window_records_keep": 1},
        },
        context={"base_dir": tmp_path},
    )
    p = Pipeline(config=cfg, source=SourceParams("127.0.0.1", 1, "u", "p"), coordinator=c)
    out = housekeeping.cleanup_after_ack(p, grant)
    assert out is not None
    assert out["staging"]["windows_deleted"] == 2  # staging: no slack, the retention is the promise
    # Records: the oldest is only 30 min past the retention, within the batching slack (1h here): kept.
    assert out["records"]["records_deleted"] == 0 and c.window_record_seqs() == [1, 2, 3, 4]
    full = housekeeping.cleanup(p, grant, batched=False)  # the maintenance run: no slack
    assert full["records"]["records_deleted"] == 2 and c.window_record_seqs() == [3, 4]

    # Switched off: nothing happens; and a failing pass never raises into the ack.
    no = p.config.maintenance.model_copy(update={"cleanup_after_ack": False})
    off = p.config.model_copy(update={"maintenance": no})
    assert housekeeping.cleanup_after_ack(Pipeline(config=off, source=p.source, coordinator=c), grant) is None
    c.release(grant)
    assert housekeeping.cleanup_after_ack(p, grant) is None  # Fenced: logged, not raised


def test_the_after_ack_pass_lists_staging_only_when_a_window_is_due(
    coord, staging_dir: Path, services, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c, clock = coord
    grant = history(c, clock, staging_dir, [2, 2, 1 / 24], pending=True)  # 4 is pending
    (staging_dir / PIPE / ".w0000000001.tmp-abc123").mkdir()  # a leftover of window 1's staging
    cfg = PipelineConfig.model_validate(
        {
            "name": PIPE, "source": {"conn_id": "unused"}, "tables": {"include": ["shop.*"]},
            "zookeeper": {"hosts": services.zk_hosts, "root": zk_root}, "lease_seconds": 60,
            "staging_root": str(staging_dir), "lake_root": str(tmp_path / "lake"), "staging_retention_hours": 24,
            "maintenance": {"vacuum_retention_hours": 25, "log_retention_hours": 25, "txn_retention_hours": 25},
        },
        context={"base_dir": tmp_path},
    )
    p = Pipeline(config=cfg, source=SourceParams("127.0.0.1", 1, "u", "p"), coordinator=c)
    listed: list[str] = []
    real_list_names = staging_store.list_names

    def counting_list_names(fs: Any, directory: str) -> list[str]:
        listed.append(directory.rpartition("/")[2])
        return real_list_names(fs, directory)

    monkeypatch.setattr(staging_store, "list_names", counting_list_names)
    slack = retention.staging_pass_slack_seconds(DAY, 60)
    assert slack == 3600 - 120

    out = housekeeping.cleanup_after_ack(p, grant)["staging"]  # type: ignore[index]
    assert out["windows_deleted"] == 2 and out["leftovers_deleted"] == 1
    assert listed == [PIPE, "reports"]  # one listing of each directory, none per deleted window
    acked_3 = c.get_window(3).acked_at  # type: ignore[union-attr]
    assert out["next_due"] == pytest.approx(acked_3 + DAY + slack)
    note = staging_dir / PIPE / retention.STAGING_DUE_NAME
    assert note.exists() and names(staging_dir / PIPE) == [retention.STAGING_DUE_NAME, "w0000000003", "w0000000004"]

    # Until window 3 is due, the passes of the next acks list nothing and delete nothing.
    listed.clear()
    for _ in range(3):
        skipped = housekeeping.cleanup_after_ack(p, grant)["staging"]  # type: ignore[index]
        assert skipped["windows_deleted"] == 0 and skipped["not_due_until"] == out["next_due"]
    assert listed == []
    # Once it is due, the pass lists again and deletes it; only the pending window is left, so it looks
    # again after the slack.
    due = out["next_due"]
    later = housekeeping.clean_staging(c, grant, str(staging_dir), DAY, now=due + 1, due_slack_seconds=slack)
    assert later["windows_deleted"] == 1 and later["next_due"] == due + 1 + slack
    assert names(staging_dir / PIPE) == [retention.STAGING_DUE_NAME, "w0000000004"]
    assert later["unknown_entries"] == 0  # the note is not an operator's stray file

    # The note only ever saves a listing: one for another retention (a config change), or unreadable, is ignored.
    stage(staging_dir, 3)  # a stray copy of an acked window, for the pass to find
    listed.clear()
    shorter = housekeeping.clean_staging(c, grant, str(staging_dir), DAY / 2, now=due + 2, due_slack_seconds=slack)
    assert shorter["windows_deleted"] == 1 and listed == [PIPE, "reports"]
    note.write_text("{not json")
    stage(staging_dir, 3)
    again = housekeeping.clean_staging(c, grant, str(staging_dir), DAY, now=due + 3, due_slack_seconds=slack)
    assert again["windows_deleted"] == 1
    # The maintenance run's full pass neither reads nor needs the note.
    stage(staging_dir, 3)
    assert housekeeping.cleanup(p, grant, batched=False)["staging"]["windows_deleted"] == 0  # 3 is young now
    c.release(grant)
    assert housekeeping.cleanup_after_ack(p, grant) is None  # a zombie: fenced before the note is read
