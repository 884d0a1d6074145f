"""The small-table writer (delta-rs) on an object store with conditional writes (issue 37 §1).

A real S3 server (S3Proxy 4.1 over its filesystem backend, which publishes an `If-None-Match: *` PUT by link(2),
so two racing writers of one key cannot both succeed), staging and lake both on it. The same windows land in
a local lake and in the store's, both through the merge job's delta-rs path; after each window the two lakes
hold the same rows, tombstones, txn versions and report counts, and no Spark commit is in the store's logs.
Then what only conditional writes give: a writer that checked version V cannot commit on top of another
writer's V+1 (the zombie), racing writers of one version admit exactly one, and a merge killed between its
tombstone and its MERGE commits replays to the same lake.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdc_core.lake import small_writer
from cdc_core.lake.delta_state import last_txn_version
from cdc_core.lake.object_store import Storage, commit_storage, from_env, probe_conditional_put
from cdc_core.model.layout import tombstone_uri
from cdc_core.model.manifest import COL_VERSION
from spark_apps.merge import STATUS_ALREADY, STATUS_COMMITTED, merge_window, table_uri
from tests.support.object_store import ObjectStore, commit_engines, fs_for, running_object_store
from tests.support.staged_builder import Col, VersionClock, WindowBuilder

pytestmark = pytest.mark.integration

PIPE = "orders"
TOKEN = 0x37
ID = Col("id", pa.int32(), "INT")
COLS = [ID, Col("Note", pa.string(), "STRING"), Col("qty", pa.int64(), "BIGINT"),
        Col("price", pa.decimal128(10, 2), "DECIMAL(10,2)")]


def row(i: int, note: str | None = "n") -> dict[str, Any]:
    from decimal import Decimal

    return {"id": i, "Note": note, "qty": i * 10_000_000_000, "price": Decimal(f"{i}.25")}


@pytest.fixture(scope="module")
def store() -> Any:
    with running_object_store() as s:
        yield s


def storage_of(store: ObjectStore) -> Storage:
    conn = json.loads(store.connection)
    creds = from_env({"AWS_ACCESS_KEY_ID": conn["login"], "AWS_SECRET_ACCESS_KEY": conn["password"],
                      "AWS_ENDPOINT_URL": conn["extra"]["endpoint_url"]})
    return Storage(creds)


class Pair:
    """The same windows into a local lake and into the store's lake (staging uploaded to the store)."""

    def __init__(self, spark: Any, store: ObjectStore, tmp_path: Path, name: str, **kw: Any) -> None:
        self.spark, self.store, self.kw = spark, store, kw
        self.staging = tmp_path / "staging"
        self.lakes = {"local": str(tmp_path / "lake"), "s3": store.url(name, "lake")}
        self.s3_staging = store.url(name, "staging")
        self.storage = storage_of(store)
        self.clock = VersionClock()
        self.fs = fs_for(store)

    def window(self, seq: int) -> WindowBuilder:
        return WindowBuilder(self.staging, PIPE, seq, self.clock)

    def upload(self, wdir: str) -> str:
        target = f"{self.s3_staging}/{Path(wdir).parent.name}/{Path(wdir).name}"
        self.fs.put(wdir, target.removeprefix("s3://"), recursive=True)
        return target

    def land(self, w: WindowBuilder, lakes: tuple[str, ...] = ("local", "s3"), **kw: Any) -> dict[str, Any]:
        manifest, wdir = w.build()
        dirs = {"local": wdir, "s3": self.upload(wdir)}
        reports = {
            lake: merge_window(self.spark, manifest, dirs[lake], self.lakes[lake], PIPE, manifest.plan.seq, TOKEN,
                               storage=self.storage, **{**self.kw, **kw})
            for lake in lakes
        }
        if len(reports) == 2:
            for table, r in reports["local"]["tables"].items():
                other = reports["s3"]["tables"][table]
                counts = ("status", "inserted", "updated", "deleted", "writer")
                assert {k: r.get(k) for k in counts} == {k: other.get(k) for k in counts}, table
                schema, _, name = table.partition(".")
                assert self.rows("local", schema, name) == self.rows("s3", schema, name), table
                assert self.txn("local", schema, name) == self.txn("s3", schema, name) == manifest.plan.seq
        return reports["s3"] if "s3" in reports else reports["local"]

    def table(self, uri: str) -> Any:
        from deltalake import DeltaTable

        return DeltaTable(uri, storage_options=self.storage.delta_rs_options(uri))

    def rows(self, lake: str, schema: str, name: str, *, tombstones: bool = False) -> list[dict[str, Any]]:
        root = self.lakes[lake]
        uri = tombstone_uri(root, schema, name) if tombstones else table_uri(root, schema, name)
        got = self.table(uri).to_pyarrow_table().to_pylist()
        return sorted(got, key=lambda d: repr(sorted(d.items())))

    def txn(self, lake: str, schema: str, name: str) -> int | None:
        return last_txn_version(table_uri(self.lakes[lake], schema, name), PIPE, storage=self.storage)

    def engines(self, schema: str, name: str) -> set[str]:
        """Who wrote the commits of the store's table ("delta-rs" or "spark")."""
        return set(commit_engines(self.store, table_uri(self.lakes["s3"], schema, name)))


def test_the_store_is_probed_for_conditional_writes(store):
    storage = storage_of(store)
    assert probe_conditional_put(storage, store.url("probe")) is None
    assert not [k for k in store.objects() if "_cdc_probes" in k]  # the probe cleaned up after itself
    checked, why = commit_storage(storage, store.url("probe", "lake"))
    assert why is None and checked.conditional_put and checked.may_commit(store.url("x", "t"))
    assert checked.delta_rs_options(store.url("t"))["conditional_put"] == "etag"
    assert "AWS_S3_ALLOW_UNSAFE_RENAME" not in checked.delta_rs_options(store.url("t"))
    off, why = commit_storage(storage, store.url("probe", "lake"), "off")
    assert not off.may_commit(store.url("t")) and "conditional_puts is off" in str(why)


def test_small_tables_land_on_the_store_as_on_local_disk(spark, store, tmp_path):
    pair = Pair(spark, store, tmp_path, "parity")
    a, b = Col("a", pa.int32(), "INT"), Col("b", pa.string(), "STRING")
    w1 = pair.window(1).file("shop", "t", ("id",), COLS, [("I", row(i)) for i in range(1, 6)])
    w1.file("shop", "k", ("a", "b"), [a, b], [("I", {"a": 1, "b": None}), ("I", {"a": 1, "b": "x"})])
    report = pair.land(w1)
    assert {t: r["writer"] for t, r in report["tables"].items()} == {"shop.t": "delta-rs", "shop.k": "delta-rs"}

    # A key changed twice (the last change wins), an insert, a file without `price` (NULL, as Spark has it).
    w2 = pair.window(2).file("shop", "t", ("id",), COLS, [("U", row(1, "u1")), ("U", row(3, "a")), ("U", row(3, "b"))])
    w2.file("shop", "t", ("id",), COLS[:-1], [("I", row(7, None)), ("U", row(2, "u2"))])
    w2.file("shop", "k", ("a", "b"), [a, b], [("I", {"a": 2, "b": None})])
    report = pair.land(w2)
    assert (report["tables"]["shop.t"]["inserted"], report["tables"]["shop.t"]["updated"]) == (1, 3)
    again = pair.land(pair.window(2).extend(w2.files))
    assert again["tables"]["shop.t"]["status"] == STATUS_ALREADY

    # Hard deletes: the tombstone table is created on the store by delta-rs, then the MERGE.
    w3 = pair.window(3).file("shop", "t", ("id",), COLS, [("D", row(4)), ("U", row(9)), ("D", row(9))])
    report = pair.land(w3)
    assert report["tables"]["shop.t"]["writer"] == "delta-rs"
    assert pair.rows("s3", "shop", "t", tombstones=True) == pair.rows("local", "shop", "t", tombstones=True)
    assert sorted(r["id"] for r in pair.rows("s3", "shop", "t", tombstones=True)) == [4, 9]
    w4 = pair.window(4).file("shop", "t", ("id",), COLS, [("I", row(8))])
    pair.land(w4)
    assert pair.txn("s3", "shop", "k") == 2  # not in windows 3 and 4

    assert sorted(r["id"] for r in pair.rows("s3", "shop", "t")) == [1, 2, 3, 5, 7, 8]
    assert pair.engines("shop", "t") == pair.engines("shop", "k") == {"delta-rs"}  # no Spark commit


def test_soft_deletes_on_the_store(spark, store, tmp_path):
    pair = Pair(spark, store, tmp_path, "soft", delete_mode="soft")
    pair.land(pair.window(1).file("shop", "s", ("id",), COLS, [("I", row(1)), ("I", row(2))]))
    report = pair.land(pair.window(2).file("shop", "s", ("id",), COLS, [("D", row(1)), ("D", row(9, "never"))]))
    assert (report["tables"]["shop.s"]["writer"], report["tables"]["shop.s"]["updated"]) == ("delta-rs", 1)


def test_a_stale_writer_cannot_commit_on_top_of_a_newer_version_on_the_store(spark, store, tmp_path, monkeypatch):
    """The zombie: delta-rs read the table at V, another run of the same window committed V+1. The stale commit's
    conditional PUT of V+1 is refused (412): the writer re-reads, finds the window landed and writes nothing.
    A storage whose store was not found to honour conditional writes is refused before anything is read."""
    from deltalake import DeltaTable

    pair = Pair(spark, store, tmp_path, "zombie")
    pair.land(pair.window(1).file("shop", "z", ("id",), COLS, [("I", row(1))]), lakes=("s3",))
    uri = table_uri(pair.lakes["s3"], "shop", "z")
    checked, _ = commit_storage(pair.storage, pair.lakes["s3"])
    stale = DeltaTable(uri, storage_options=checked.delta_rs_options(uri))  # version V

    w2 = pair.window(2).file("shop", "z", ("id",), COLS, [("U", row(1, "once"))])
    manifest, wdir = w2.build()
    s3_dir = pair.upload(wdir)
    st = next(t for t in manifest.tables if t.table == "z")

    def job(storage: Storage) -> small_writer.SmallMerge:
        return small_writer.SmallMerge(
            uri=uri, label=st.name, window_dir=s3_dir, members=(small_writer.Member(st),), key=st.key,
            delete_mode="hard", app_id=PIPE, seq=2, user_metadata="test 2", max_rows=1000, storage=storage,
        )

    # Without conditional writes the writer refuses the store's table: Spark takes it.
    assert small_writer.land(job(pair.storage), lambda: None) == small_writer.Ineligible(small_writer.NO_ATOMIC_COMMIT)
    assert small_writer.land(job(checked), lambda: None) == small_writer.Landed(
        "committed", updated=1, version=stale.version() + 1)
    head = DeltaTable(uri, storage_options=checked.delta_rs_options(uri))
    landed_v = head.version()
    monkeypatch.setattr(small_writer, "open_table", lambda _uri, _storage=None: stale)
    assert small_writer.land(job(checked), lambda: None) == small_writer.Landed("already")
    monkeypatch.undo()
    assert DeltaTable(uri, storage_options=checked.delta_rs_options(uri)).version() == landed_v  # nothing on top
    assert [r["Note"] for r in pair.rows("s3", "shop", "z")] == ["once"]



def test_racing_commits_of_one_version_on_the_store_admit_exactly_one(store):
    """Six writers holding version V commit V+1 at once, ten rounds: the store's conditional PUT admits exactly
    one per round (no retries: the others fail), and every winner's commit is in the log, in order."""
    import threading

    import deltalake
    from deltalake import CommitProperties, DeltaTable, Transaction
    from deltalake.exceptions import CommitFailedError

    checked, why = commit_storage(storage_of(store), store.url("race", "lake"))
    assert why is None
    uri = store.url("race", "lake", "t")
    opts = checked.delta_rs_options(uri)
    deltalake.write_deltalake(uri, pa.table({"a": [1]}), storage_options=opts)
    winners: list[list[int]] = []
    for rnd in range(10):
        handles = [DeltaTable(uri, storage_options=opts) for _ in range(6)]
        won: list[int] = []
        lost: list[str] = []
        barrier = threading.Barrier(len(handles))

        def commit(i: int, rnd: int = rnd, won: list[int] = won, lost: list[str] = lost,
                   barrier: threading.Barrier = barrier, handles: list[Any] = handles) -> None:
            t = handles[i]
            barrier.wait()
            try:
                t.create_write_transaction(
                    [], mode="append", schema=t.schema(), partition_by=[],
                    commit_properties=CommitProperties(app_transactions=[Transaction(f"w{i}", rnd + 1)],
                                                       max_commit_retries=0))
                won.append(i)
            except CommitFailedError as e:
                lost.append(str(e))

        threads = [threading.Thread(target=commit, args=(i,)) for i in range(len(handles))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert len(won) == 1 and len(lost) == len(handles) - 1, (rnd, won, lost)
        winners.append(won)
    final = DeltaTable(uri, storage_options=opts)
    assert final.version() == 10
    assert [final.transaction_version(f"w{w[0]}") is not None for w in winners] == [True] * 10


def test_a_merge_killed_between_tables_on_the_store_replays_to_the_same_lake(spark, store, tmp_path, monkeypatch):
    """The job dies after its first table's commits (tombstones and MERGE), before the second's: the retry finds
    the first landed (its txn), lands the second with delta-rs, and appends no tombstone twice."""
    pair = Pair(spark, store, tmp_path, "killed", parallelism=1)
    w1 = pair.window(1).file("shop", "a", ("id",), COLS, [("I", row(i)) for i in range(1, 5)])
    pair.land(w1.file("shop", "b", ("id",), COLS, [("I", row(1))]))
    w2 = pair.window(2).file("shop", "a", ("id",), COLS, [("D", row(2)), ("U", row(3, "u3")), ("I", row(5))])
    w2.file("shop", "b", ("id",), COLS, [("D", row(1)), ("I", row(2))])
    pair.land(w2, lakes=("local",))
    monkeypatch.setenv("CDC_FAULT", "mid_merge")
    monkeypatch.setenv("CDC_FAULT_ACTION", "raise:LakeError")
    with pytest.raises(Exception, match="fault point mid_merge"):
        pair.land(pair.window(2).extend(w2.files), lakes=("s3",))
    assert sorted(pair.txn("s3", "shop", t) for t in ("a", "b")) == [1, 2]  # one table landed, one not
    monkeypatch.delenv("CDC_FAULT")
    report = pair.land(pair.window(2).extend(w2.files), lakes=("s3",))
    assert sorted((r["status"], r.get("writer")) for r in report["tables"].values()) == [
        (STATUS_ALREADY, None), (STATUS_COMMITTED, "delta-rs")]
    for t in ("a", "b"):
        assert pair.rows("s3", "shop", t) == pair.rows("local", "shop", t), t
        assert pair.rows("s3", "shop", t, tombstones=True) == pair.rows("local", "shop", t, tombstones=True), t
        assert pair.txn("s3", "shop", t) == 2
    assert sorted(r["id"] for r in pair.rows("s3", "shop", "a", tombstones=True)) == [2]  # appended once
    assert all(r[COL_VERSION] > 0 for r in pair.rows("s3", "shop", "a"))
