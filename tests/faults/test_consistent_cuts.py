"""Consistent cuts across tables (cdc_core.lake.lake_versions) hold a cross-table invariant through merges and
SIGKILLs in the middle of a window; reading the latest versions instead does not.

The source writes parent/child families, each in ONE transaction: a parent with `n_children` and
exactly that many children (new families, a child added together with the parent's count, whole
families deleted). So the source always satisfies: every parent has exactly `n_children` children and
every child has its parent. A reader thread loops over consistent cuts (`load_cut`, then both tables
read with delta-rs at the cut's versions) while the `cdc run` CLI lands windows, and while runs are
SIGKILLed after the merge job committed the first of the two tables (`mid_merge`), between the merge
and the ack (`before_ack`), and after the window's checkpoint but before the cursor moved
(`after_checkpoint`). Every cut it reads must satisfy the invariant. Right after each `mid_merge` kill
the latest versions are read too: one table holds the window and the other does not, which breaks the
invariant, so the test shows the anomaly the feature exists for (and would fail without it).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import Any

import pytest

from cdc_core.lake import delta_state, lake_versions
from cdc_core.model.errors import LakeError
from tests.faults.harness import RC_OK

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

BIG_CAPS = {"max_events": 100_000, "max_bytes": 1 << 30, "max_transactions": 1000}
PARENT, CHILD = "a_parent", "b_child"  # merged in this order: a kill in between leaves parents without children


class Families:
    """The source workload: parent/child families, each change in one transaction."""

    def __init__(self, conn: Any, database: str, seed: int) -> None:
        self.conn, self.db, self.rng = conn, database, random.Random(seed)
        self.alive: dict[int, int] = {}
        self.next_id = 1
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE `{database}`.`{PARENT}` (id INT PRIMARY KEY, n_children INT NOT NULL)")
            cur.execute(f"CREATE TABLE `{database}`.`{CHILD}` (parent_id INT, idx INT, note VARCHAR(20), "
                        "PRIMARY KEY (parent_id, idx))")

    def write(self, transactions: int) -> None:
        p, c = f"`{self.db}`.`{PARENT}`", f"`{self.db}`.`{CHILD}`"
        for _ in range(transactions):
            self.conn.begin()
            with self.conn.cursor() as cur:
                roll = self.rng.random()
                if roll < 0.2 and self.alive:  # delete a whole family
                    pid = self.rng.choice(sorted(self.alive))
                    cur.execute(f"DELETE FROM {c} WHERE parent_id = %s", (pid,))
                    cur.execute(f"DELETE FROM {p} WHERE id = %s", (pid,))
                    del self.alive[pid]
                elif roll < 0.4 and self.alive:  # one more child, and the parent's count, together
                    pid = self.rng.choice(sorted(self.alive))
                    cur.execute(f"INSERT INTO {c} VALUES (%s, %s, 'late')", (pid, self.alive[pid]))
                    cur.execute(f"UPDATE {p} SET n_children = n_children + 1 WHERE id = %s", (pid,))
                    self.alive[pid] += 1
                else:  # a new family
                    pid, n = self.next_id, self.rng.randint(1, 3)
                    self.next_id += 1
                    cur.execute(f"INSERT INTO {p} VALUES (%s, %s)", (pid, n))
                    cur.executemany(f"INSERT INTO {c} VALUES (%s, %s, 'born')", [(pid, i) for i in range(n)])
                    self.alive[pid] = n
            self.conn.commit()


def violations(parents: Any, children: Any) -> list[str]:
    """What breaks "every parent has exactly n_children children, every child has its parent"."""
    want = dict(zip(parents.column("id").to_pylist(), parents.column("n_children").to_pylist(), strict=True))
    have = Counter(children.column("parent_id").to_pylist())
    out = [f"parent {pid}: {have.get(pid, 0)} of {n} children" for pid, n in want.items() if have.get(pid, 0) != n]
    out += [f"{k} children of missing parent {pid}" for pid, k in have.items() if pid not in want]
    return out


class CutReader(threading.Thread):
    """Loops over consistent cuts until stopped; records how many it checked and what broke."""

    def __init__(self, lake: str, pipeline: str, uris: dict[str, str] | None = None) -> None:
        super().__init__(daemon=True)
        self.lake, self.pipeline = lake, pipeline
        self.latest = uris  # read these tables' latest versions instead of a cut (the anomaly)
        self.stop_event = threading.Event()
        self.cuts_checked = 0
        self.windows_seen: set[int] = set()
        self.broken: list[str] = []
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.check_once()
            except LakeError as e:
                if "records no window yet" not in str(e):
                    self.errors.append(str(e))
            except Exception as e:  # a reader must never die silently
                self.errors.append(f"{type(e).__name__}: {e}")
            self.stop_event.wait(0.05)

    def check_once(self) -> None:
        if self.latest is not None:
            bad = violations(delta_state.read_rows(self.latest[PARENT], columns=["id", "n_children"]),
                             delta_state.read_rows(self.latest[CHILD], columns=["parent_id"]))
            if bad:
                self.broken.append(f"latest: {bad[:3]}")
            self.cuts_checked += 1
            return
        cut = lake_versions.load_cut(self.lake, self.pipeline)
        names = {n.rsplit(".", 1)[1]: n for n in cut.tables}
        if PARENT not in names or CHILD not in names:
            return
        parents = lake_versions.read_table(cut, names[PARENT], columns=["id", "n_children"])
        children = lake_versions.read_table(cut, names[CHILD], columns=["parent_id"])
        bad = violations(parents, children)
        if bad:
            self.broken.append(f"window {cut.seq}: {bad[:3]}")
        self.cuts_checked += 1
        self.windows_seen.add(cut.seq)


def test_consistent_cuts_hold_across_tables_through_merges_and_kills(rig, merge_server) -> None:  # type: ignore[no-untyped-def]
    r = rig(2101, windows_per_run=1, lease_seconds=1, caps=BIG_CAPS)
    # Tables merged one after the other: a `mid_merge` kill then always leaves the parent table holding the
    # window and the child table not, so reading the latest versions must show the anomaly. With concurrent
    # writers (the default) both tables may commit before the kill, and the check below could not fail.
    r.write_config(spark={"merge_parallelism": 1})
    families = Families(r.conn, r.database, 2101)
    families.write(3)
    r.let_next_run_take_lease()
    assert r.run().rc == RC_OK  # the first window creates both tables

    lake = str(r.lake)
    parent_uri = f"{lake}/{r.database}/{PARENT}"
    child_uri = f"{lake}/{r.database}/{CHILD}"
    reader = CutReader(lake, r.name)
    latest_reader = CutReader(lake, r.name, {PARENT: parent_uri, CHILD: child_uri})  # same loop, no cut
    reader.start()
    latest_reader.start()
    latest_anomalies: list[str] = []
    # Each kill point once after a clean window, `mid_merge` (the one that breaks the latest versions) twice:
    # early, and again after the other kills' replays. A third `mid_merge` and its clean window re-proved the
    # same on the same path.
    faults = ["mid_merge", None, "before_ack", "after_checkpoint", "mid_merge", None]
    try:
        for fault in faults:
            families.write(4)
            r.let_next_run_take_lease()
            result = r.run(fault=fault) if fault else r.run()
            if fault:
                assert result.killed and fault in result.fired, result.explain()
            else:
                assert result.rc == RC_OK, result.explain()
            if fault == "mid_merge":
                # The latest versions now: the parent table holds the window, the child table does not.
                bad = violations(delta_state.read_rows(parent_uri, columns=["id", "n_children"]),
                                 delta_state.read_rows(child_uri, columns=["parent_id"]))
                latest_anomalies += bad
        r.let_next_run_take_lease()
        assert r.run().rc == RC_OK  # recovers whatever the last kill left
        deadline = time.monotonic() + 120
        while reader.cuts_checked < 20 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        for t in (reader, latest_reader):
            t.stop_event.set()
            t.join(timeout=60)
    print(f"consistent cuts: {reader.cuts_checked} read over windows {sorted(reader.windows_seen)}, "
          f"{len(reader.broken)} broken; latest versions: {latest_reader.cuts_checked} read, "
          f"{len(latest_reader.broken)} broken in the loop, {len(latest_anomalies)} violations right after "
          "the mid-merge kills")

    assert not reader.errors, reader.errors[:5]
    assert not reader.broken, reader.broken[:5]
    assert reader.cuts_checked >= 20 and len(reader.windows_seen) >= 2, (reader.cuts_checked, reader.windows_seen)
    assert latest_anomalies, "reading the latest versions after a mid-merge kill should break the invariant"

    # The final cut equals the latest state (nothing in flight) and satisfies the invariant.
    cut = lake_versions.load_cut(lake, r.name)
    names = {n.rsplit(".", 1)[1]: n for n in cut.tables}
    final_p = lake_versions.read_table(cut, names[PARENT], columns=["id", "n_children"])
    final_c = lake_versions.read_table(cut, names[CHILD], columns=["parent_id"])
    assert violations(final_p, final_c) == []
    assert sorted(final_p.column("id").to_pylist()) == sorted(families.alive)

    # Spark users get the same cut: DataFrames time-travelled to the cut's versions, and pasteable SQL.
    spark = merge_server.spark()
    dfs = lake_versions.spark_dataframes(spark, cut, [names[PARENT], names[CHILD]])
    assert sorted(r.id for r in dfs[names[PARENT]].select("id").collect()) == sorted(families.alive)
    assert dfs[names[CHILD]].count() == final_c.num_rows
    statements = cut.sql([names[PARENT], names[CHILD]])
    assert [spark.sql(q.split(";")[0]).count() for q in statements] == [final_p.num_rows, final_c.num_rows]
    older = lake_versions.load_cut(lake, r.name, window=min(reader.windows_seen))
    old_dfs = lake_versions.spark_dataframes(spark, older, [names[PARENT], names[CHILD]])
    assert violations(lake_versions.read_table(older, names[PARENT], columns=["id", "n_children"]),
                      lake_versions.read_table(older, names[CHILD], columns=["parent_id"])) == []
    assert old_dfs[names[PARENT]].count() == lake_versions.read_table(older, names[PARENT]).num_rows

    # One commit per window, never a partial or a repeated one, despite the kills and replays.
    rows = lake_versions.read_checkpoints(lake, r.name)
    per_window = Counter(row["seq"] for row in rows)
    assert all(n == rows_of["tables"] for rows_of in rows for n in [per_window[rows_of["seq"]]])
    acked = [w for w in r.oracle.coordinator.recent_windows(100) if w.state == "acked" and w.result.get("tables")]
    assert set(per_window) == {w.seq for w in acked}
    for w in acked:  # the recorded versions of the tables a window changed hold that window
        for name, info in w.result["tables"].items():
            (row,) = [x for x in rows if x["seq"] == w.seq and x["table_name"] == name]
            assert row["changed"] and row["delta_version"] >= (info.get("delta_version") or 0)
