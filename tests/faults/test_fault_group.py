"""Crashes of a group pipeline's `cdc run` (SIGKILL, no cleanup) at every point of POINTS (CRASH_POINTS and
`mid_derive`), with several sources holding unfinished windows at once.

Two shards of `shard_servers` are the sources of one group pipeline (docs/group-pipelines.md): source `a`
(shard 1) has two schemas, source `b` (shard 2) one, each with `orders`, `items` and `accounts`. `orders` and
`items` have equal keys everywhere; a route lands them in `shop.orders` and `shop.items`, where
(`_cdc_source`, `_cdc_source_table`) lead the key. `accounts` ids are globally unique (one allocator shared by
every source and schema); a `key: primary_key` route lands them in `shop.accounts`, one row per id, derived
from the lineage-keyed base `<lake>/_cdc.base/shop/accounts` ("Global keys"). A seeded random workload
(inserts, updates, deletes, primary-key changes, orders moved between the shards both ways keeping their key,
and accounts moved shard 1 -> shard 2, shard 2 -> shard 1 and between a's schemas: a DELETE, then an INSERT of
the same id in another transaction on the other server) runs on both shards. `cdc run <p> --source a`,
`--source b` and whole-group runs are killed at each of POINTS in turn (`STEPS`), so that both sources hold a
planned, staged, half-merged (some of its Delta commits landed), half-derived (the base of shop.accounts
holds the window, the derived table not) or merged-but-unacked window at the same time, with new changes
written between some crashes; then clean runs land everything.

The oracle (`GroupOracle`), after every run, per source: window plans never change and acked windows stay
acked; the cursor never moves back and stands at the end of its last acked window; every Delta table a
window of the source acked holds that window under the source's txnAppId `<pipeline>.<id>` (the cursor
never gets ahead of Delta: for shop.accounts the derived table and its base), and no table holds a window
the source never planned; no (txnAppId, version) is committed twice in any Delta log (tombstones, base and
derived table included); each lineage-keyed table (shop.orders, shop.items, the base of shop.accounts) has
no duplicate key, and the source's rows in it equal the source's tables replayed up to the end of the window
the table holds for that source. The derived shop.accounts has one row per id; per source its txn version
is at most the base's; and it equals the documented function of the base (per id the alive row with the
latest `_cdc_commit_ts`, ties to the smaller `_cdc_source`, then `_cdc_source_table`; no row: no id) for
every id, or, while a base window is not derived yet, for every id no such window touched. At the end, the
lake equals the union of the real source tables, keyed by (`_cdc_source`, `_cdc_source_table`, primary key),
shop.accounts equals the union of the shards' accounts keyed by id alone (`_cdc_source`: the shard holding
it), and each cursor is at its shard's last transaction. Then damage is made on purpose (a duplicated row, a
lost row, a cursor moved back, a Delta table gone under acked windows; in shop.accounts a second row for an
id, a lost row, a row of an id no shard has) and the oracle must report each.

Merges go to the suite's one-JVM merge server (tests/faults/merge_server.py) with `merge_parallelism: 1`,
so that a crash inside the merge job leaves a known set of tables committed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from cdc_core.lake import delta_state
from tests.faults.group import BIG_CAPS, GLOBAL, POINTS, SOURCES, GroupRig, crash, drain

pytestmark = [pytest.mark.integration, pytest.mark.timeout(5400)]

SEED = 4242


class Step(NamedTuple):
    point: str
    who: str | None  # whose run is killed: a source id, or None for the whole group
    writes: tuple[str, ...]  # sources that get new transactions before the run
    expected: dict[str, str]  # what each source holds unfinished afterwards (GroupOracle.pending)
    windows: int = 1  # the run's --max-windows


# The scenario. A group run lands source a, then b, so its crash hits a while a has anything to do; a pending
# window whose merge was done is acked when a run starts (recovered), before that run's own window. Every
# window with a batch touches `accounts`, the first of its lake tables (sorted by name), so `mid_merge` (after
# the first table) finds both of accounts' commits landed and `mid_derive` fires at the window's first table.
STEPS: tuple[Step, ...] = (
    Step("after_acquire", "a", (), {"a": "none", "b": "none"}),
    Step("after_plan", "a", (), {"a": "planned", "b": "none"}),
    Step("mid_stage_before", "b", (), {"a": "planned", "b": "planned"}),
    Step("mid_stage", None, ("a", "b"), {"a": "planned", "b": "planned"}),  # a's read killed half-way: nothing written
    Step("after_stage", None, (), {"a": "staged", "b": "planned"}),
    Step("mid_merge", "b", ("a", "b"), {"a": "staged", "b": "half-merged"}),
    Step("mid_merge_table", None, (), {"a": "half-merged", "b": "half-merged"}),
    Step("after_merge", None, ("a", "b"), {"a": "merged", "b": "half-merged"}),
    Step("before_ack", "b", (), {"a": "merged", "b": "merged"}),
    Step("mid_ack", None, (), {"a": "merged", "b": "merged"}),
    Step("after_ack", None, ("a", "b"), {"a": "none", "b": "merged"}),
    Step("mid_merge", None, ("b",), {"a": "none", "b": "half-merged"}),  # a's window is empty, b is killed
    # Base committed, derived not: a's new window (the last changes of both shards are written before it);
    # then b finishes its half-merged window and its next one stops there too; then a group run replays a's
    # window (its base commit is a no-op) and dies there again. The clean runs then replay both.
    Step("mid_derive", None, ("a", "b"), {"a": "half-derived", "b": "half-merged"}),
    Step("mid_derive", "b", (), {"a": "half-derived", "b": "half-derived"}, windows=2),
    Step("mid_derive", None, (), {"a": "half-derived", "b": "half-derived"}),
)


# ------------------------------------------------------------------------------------------------ the test


def test_group_pipeline_crashes_at_every_fault_point_with_several_sources_pending_converge(
    private_services: Any, shard_servers: Any, merge_server: Any, fault_zk: Any, tmp_path: Path
) -> None:
    assert {step.point for step in STEPS} == set(POINTS)
    rig = GroupRig(private_services, tmp_path / "group", fault_zk, merge_server.address, SEED,
                   shards=tuple(shard_servers)[:2], caps=BIG_CAPS, windows_per_run=1)
    try:
        a, b = rig.sources["a"], rig.sources["b"]
        a.batch(6)
        b.batch(6)
        a.move_to(b)  # shard 1 -> shard 2, keeping its key
        a.move_account(b)  # a global id: shard 1 -> shard 2
        moved: tuple[Any, ...] = ()
        moved_account: tuple[Any, ...] = ()
        together: list[str] = []
        for point, who, writes, expected, windows in STEPS:
            for sid in writes:
                rig.sources[sid].batch(3)
            if len(writes) == 2:  # rows move both ways: global ids between the shards and between a's schemas
                a.move_account(a)
                a.move_account(b)
                moved_account = b.move_account(a)
                moved = b.move_to(a)  # an order, keeping its key: the last change on both shards
            r = crash(rig, point, who, windows)
            pending = rig.oracle.pending()
            assert pending == expected, (
                f"after the crash at {point} ({who or 'group'} run) the sources hold {pending}, expected {expected}\n"
                f"{r.explain()}"
            )
            if all(state != "none" for state in pending.values()):
                together.append(f"{point}: {pending}")
        assert len(together) >= 11, together  # both sources had unfinished windows across most of the crashes
        runs = drain(rig)
        rig.check("final", final=True)
        f = rig.oracle.figures
        assert (f.rows_lost, f.rows_duplicated, f.wrong_values) == (0, 0, 0), f
        assert f.rows_compared > 0 and all(f.windows_acked[s] >= 3 for s in SOURCES), f
        # shop.accounts was checked whole and, while some base windows were not derived yet, in part
        assert f.derived_whole > 0 and f.derived_partial >= 3 and f.derived_rows > 0, f
        accounts = [r for r in delta_state.read_rows(rig.oracle.uri(GLOBAL)).to_pylist() if r["id"] == moved_account[0]]
        assert [(r["_cdc_source"], r["balance"], r["note"]) for r in accounts] == [("a", *moved_account[1:])], (
            accounts)  # the id moved last: one row, under the shard that holds it now
        lake = [r for r in delta_state.read_rows(rig.oracle.uri("orders")).to_pylist() if r["id"] == moved[0]]
        assert [(r["_cdc_source"], r["_cdc_source_table"], r["amount"], r["note"]) for r in lake
                if r["_cdc_source_table"] in (f"{a.schemas[0]}.orders", f"{b.schemas[0]}.orders")] == [
            ("a", f"{a.schemas[0]}.orders", *moved[1:])
        ], lake  # exactly one copy of the row moved last: under the shard that holds it now
        print(f"\ngroup fault scenario: {len(STEPS)} crashes, {runs} clean run(s); both sources pending after "
              f"{len(together)} crashes:\n  " + "\n  ".join(together) + f"\n{f}")
        _oracle_notices_damage(rig, merge_server.spark())
    finally:
        rig.close()


def _oracle_notices_damage(rig: GroupRig, spark: Any) -> None:
    """The oracle can fail: a duplicated lake row, a lost one, a cursor moved back, a Delta table gone under
    acked windows (the cursor ahead of Delta), and in the derived table a second row for one id, a lost row
    and a row of an id no shard has are each reported."""
    t = f"delta.`{rig.oracle.uri('orders')}`"
    first = spark.sql(f"SELECT _cdc_source_table, id FROM {t} WHERE _cdc_source = 'b' ORDER BY id LIMIT 1").collect()[0]
    where = f"_cdc_source = 'b' AND _cdc_source_table = '{first[0]}' AND id = {first[1]}"
    spark.sql(f"INSERT INTO {t} SELECT * FROM {t} WHERE {where}")
    with pytest.raises(AssertionError, match=r"shop\.orders: duplicated 1"):
        rig.check("a duplicated lake row")
    spark.sql(f"DELETE FROM {t} WHERE {where}")
    with pytest.raises(AssertionError, match=r"rows of source b differ .* missing 1"):
        rig.check("a lost lake row")
    co = rig.oracle.coordinators["a"]
    data, stat = rig.zk_client.get(co.cursor_path)
    cursor = json.loads(data)
    cursor["seq"] -= 1
    rig.zk_client.set(co.cursor_path, json.dumps(cursor).encode(), version=stat.version)
    with pytest.raises(AssertionError, match="cursor of a moved back"):
        rig.check("a cursor moved back")
    shutil.rmtree(rig.oracle.uri("items"))
    with pytest.raises(AssertionError, match=r"Delta table shop\.items holds only window None .* ahead of Delta"):
        rig.check("a Delta table deleted under acked windows")
    from pyspark.sql import functions as F

    uri = rig.oracle.uri(GLOBAL)
    g = f"delta.`{uri}`"
    some = spark.sql(f"SELECT id FROM {g} ORDER BY id LIMIT 1").collect()[0][0]
    spark.sql(f"INSERT INTO {g} SELECT * FROM {g} WHERE id = {some}")
    with pytest.raises(AssertionError, match=rf"shop\.accounts: more than one row for id \[{some}\]"):
        rig.check("a second row for one id in the derived table")
    spark.sql(f"DELETE FROM {g} WHERE id = {some}")
    differs = r"shop\.accounts differs from the function of its base"
    with pytest.raises(AssertionError, match=rf"{differs} .*: missing 1 \[{some}\]"):
        rig.check("a derived row lost")
    stranger = 10**9  # no shard has it, the allocator never gave it
    some = spark.sql(f"SELECT id FROM {g} ORDER BY id LIMIT 1").collect()[0][0]
    (spark.read.format("delta").load(uri).where(f"id = {some}").withColumn("id", F.lit(stranger))
     .write.format("delta").mode("append").save(uri))
    with pytest.raises(AssertionError, match=rf"{differs} .*extra 1 .*{stranger}"):
        rig.check("a derived row of an id no shard has")
