"""Staging: exact round trips of every mapped type, determinism, atomicity, DDL splits, hostile names, memory."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import gc
import hashlib
import logging
import os
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pyarrow.parquet as pq
import pytest

from cdc_core.lake import staging, staging_store
from cdc_core.model import layout
from cdc_core.model.changes import RowChange, TableSchema
from cdc_core.model.errors import StagingError, UnsupportedType
from cdc_core.model.manifest import MANIFEST_NAME, STAGED_META_COLUMNS
from cdc_core.model.naming import path_component
from tests.support.all_types import ALL_TYPES, D65_MAX, ROWS, U8, changes_for, col, expected_row, make_plan

pytestmark = pytest.mark.unit

UTC = dt.UTC
D = decimal.Decimal


@dataclasses.dataclass(frozen=True)
class Ddl:
    ordinal: int
    schema: str
    query: str
    version: int


# ------------------------------------------------------------------------------- every type, exactly


def test_every_mapped_type_round_trips_exactly(tmp_path: Path) -> None:
    root = str(tmp_path / "staging")
    manifest = staging.stage_window(make_plan(), iter(changes_for([r for r, _ in ROWS], ops="IUD")), root)
    t = manifest.table("shop.all_types")
    assert (t.inserts, t.updates, t.deletes) == (1, 1, 1)
    assert t.key == ("id",)
    assert [c.name for c in t.columns] == list(ALL_TYPES.column_names)
    got = staging.read_table_changes(root, manifest, "shop.all_types").to_pylist()
    assert len(got) == len(ROWS)
    for i, (row, (reader, overrides)) in enumerate(zip(got, ROWS, strict=True)):
        assert row["_cdc_op"] == "IUD"[i]
        assert row["_cdc_version"] == 1000 + i
        assert row["_cdc_ordinal"] == i + 1
        assert row["_cdc_commit_ts"] == dt.datetime.fromtimestamp(1_700_000_000 + i, UTC)
        want = expected_row(reader, overrides)
        for name in ALL_TYPES.column_names:
            assert row[name] == want[name], f"row {i} column {name}: {row[name]!r} != {want[name]!r}"
            assert type(row[name]) is type(want[name]) or want[name] is None, name
    # The wide decimals' text is exact to the last digit and parses back to the same number.
    assert D(got[0]["d65"]) == D65_MAX
    assert got[0]["f"] == 3.4028234663852886e38  # float32 max survives FLOAT


def test_staged_file_is_self_describing(tmp_path: Path) -> None:
    root = str(tmp_path)
    m = staging.stage_window(make_plan(), iter(changes_for([ROWS[0][0]])), root)
    f = m.tables[0].files[0]
    assert f.path == "tables/shop/all_types/part-00000.parquet"
    path = Path(layout.window_dir(root, "demo", 1)) / f.path
    data = path.read_bytes()
    assert (len(data), hashlib.sha256(data).hexdigest()) == (f.bytes, f.sha256)
    schema = pq.read_schema(path)
    assert schema.names == [*STAGED_META_COLUMNS, *ALL_TYPES.column_names]
    assert str(schema.field("_cdc_commit_ts").type) == "timestamp[us, tz=UTC]"
    for c in m.tables[0].columns:
        assert str(schema.field(c.name).type) == c.arrow_type
    assert f.columns == ALL_TYPES.column_names


# ------------------------------------------------------------------------------------------ determinism

T1 = TableSchema(
    "db", "t1", (col("id", "bigint", False), col("v", "varchar(20)", **U8), col("n", "decimal(12,3)")), ("id",)
)
T2 = TableSchema("db", "t2", (col("k", "int unsigned", False), col("ts", "timestamp(6)")), ("k",))


def mixed_stream(n: int) -> Iterator[Any]:
    for i in range(n):
        if i % 3 == 0:
            yield RowChange(
                "I", T2, {"k": i, "ts": dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=i)}, 5000 + i, i, 1.7e9
            )
        else:
            yield RowChange("UD"[i % 2], T1, {"id": i, "v": f"v{i}", "n": D(i) / 1000}, 5000 + i, i, 1.7e9 + i)


def tree_bytes(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*")) if p.is_file()}


def test_restaging_gives_byte_identical_files_and_manifest(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    ma = staging.stage_window(make_plan(), mixed_stream(5000), str(a), row_group_rows=700)
    mb = staging.stage_window(make_plan(), mixed_stream(5000), str(b), row_group_rows=700)
    assert ma == mb
    ta, tb = tree_bytes(a), tree_bytes(b)
    assert ta == tb
    assert "demo/w0000000001/manifest.json" in ta
    assert [t.name for t in ma.tables] == ["db.t1", "db.t2"]  # sorted, whatever the order of arrival
    # Several row groups were cut (by row count only).
    pf = pq.ParquetFile(a / "demo/w0000000001" / ma.table("db.t1").files[0].path)
    assert pf.num_row_groups > 1


def test_staging_an_already_staged_window_returns_it_untouched(tmp_path: Path) -> None:
    root = str(tmp_path)
    m1 = staging.stage_window(make_plan(), mixed_stream(300), root)
    mpath = Path(layout.window_dir(root, "demo", 1)) / MANIFEST_NAME
    before = mpath.stat().st_ino, mpath.stat().st_mtime_ns

    def boom() -> Iterator[Any]:
        raise AssertionError("an already staged window must not read the source again")
        yield

    assert staging.stage_window(make_plan(), boom(), root) == m1
    assert (mpath.stat().st_ino, mpath.stat().st_mtime_ns) == before


def test_a_different_plan_in_the_window_directory_is_refused(tmp_path: Path) -> None:
    root = str(tmp_path)
    staging.stage_window(make_plan(end=9000), mixed_stream(10), root)
    with pytest.raises(StagingError, match="different plan"):
        staging.stage_window(make_plan(end=9500), mixed_stream(10), root)


# ------------------------------------------------------------------------------------------ atomicity


def test_leftover_temp_dir_and_manifestless_window_are_not_staged_and_get_replaced(tmp_path: Path) -> None:
    root = str(tmp_path)
    wdir = Path(layout.window_dir(root, "demo", 1))
    tmp_left = wdir.parent / f".{wdir.name}.tmp-deadbeef"
    (tmp_left / "tables/db/t1").mkdir(parents=True)
    (tmp_left / MANIFEST_NAME).write_text("{}")  # even a manifest in a temp dir does not count
    (wdir / "tables/db/t1").mkdir(parents=True)
    (wdir / "tables/db/t1/part-00000.parquet").write_bytes(b"half a file")
    (wdir / "tables/db/junk.parquet").write_bytes(b"junk")
    assert staging.read_manifest(root, "demo", 1) is None
    assert staging.list_windows(root, "demo") == []

    m = staging.stage_window(make_plan(), mixed_stream(100), root)
    assert staging.read_manifest(root, "demo", 1) == m
    staging.verify_window(root, m)
    assert not tmp_left.exists()
    assert not (wdir / "tables/db/junk.parquet").exists()
    assert sorted(p.name for p in wdir.parent.iterdir()) == [wdir.name]
    assert staging.list_windows(root, "demo") == [1]


def test_unreadable_manifest_counts_as_not_staged(tmp_path: Path) -> None:
    root = str(tmp_path)
    staging.stage_window(make_plan(), mixed_stream(10), root)
    mpath = Path(layout.window_dir(root, "demo", 1)) / MANIFEST_NAME
    mpath.write_text('{"format": 1, "pla')
    assert staging.read_manifest(root, "demo", 1) is None
    m = staging.stage_window(make_plan(), mixed_stream(10), root)
    assert staging.read_manifest(root, "demo", 1) == m


def test_corrupt_file_is_detected_and_the_window_restaged(tmp_path: Path) -> None:
    root = str(tmp_path)
    m = staging.stage_window(make_plan(), mixed_stream(1000), root)
    wdir = Path(layout.window_dir(root, "demo", 1))
    good = tree_bytes(wdir)
    victim = wdir / m.table("db.t2").files[0].path
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(StagingError) as e:
        staging.verify_window(root, m)
    assert "tables/db/t2/part-00000.parquet" in str(e.value) and "re-staged" in str(e.value)
    victim.unlink()
    with pytest.raises(StagingError, match="is missing"):
        staging.verify_window(root, m)

    assert staging.stage_window(make_plan(), mixed_stream(1000), root) == m
    staging.verify_window(root, m)
    assert tree_bytes(wdir) == good


def test_interrupted_staging_leaves_nothing_staged(tmp_path: Path) -> None:
    root = str(tmp_path)

    def dies() -> Iterator[Any]:
        yield from mixed_stream(2000)
        raise ConnectionError("source went away")

    with pytest.raises(ConnectionError):
        staging.stage_window(make_plan(), dies(), root, row_group_rows=100)
    assert staging.read_manifest(root, "demo", 1) is None
    pdir = Path(layout.window_dir(root, "demo", 1)).parent
    assert not pdir.exists() or list(pdir.iterdir()) == []


def test_delete_window(tmp_path: Path) -> None:
    root = str(tmp_path)
    staging.stage_window(make_plan(), mixed_stream(10), root)
    assert staging.delete_window(root, "demo", 1) is True
    assert staging.read_manifest(root, "demo", 1) is None
    assert not Path(layout.window_dir(root, "demo", 1)).exists()
    assert staging.delete_window(root, "demo", 1) is False


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_fsspec_urls_use_the_same_code(tmp_path: Path, scheme: str) -> None:
    root = f"memory://stg-{uuid.uuid4().hex[:8]}" if scheme == "memory" else f"file://{tmp_path}/stg"
    local = str(tmp_path / "local")
    assert layout.window_dir(root, "demo", 3).startswith(root + "/demo/w0000000003")
    fs, _ = fsspec.core.url_to_fs(root)
    wdir = fs._strip_protocol(layout.window_dir(root, "demo", 3))
    fs.makedirs(f"{wdir}/tables/db/t1", exist_ok=True)
    # A partial window left behind on an object store (no manifest) is not staged, and is replaced.
    with fs.open(f"{wdir}/tables/db/t1/part-00000.parquet", "wb") as f:
        f.write(b"partial")
    with fs.open(f"{wdir}/tables/db/stale.parquet", "wb") as f:
        f.write(b"stale")
    assert staging.read_manifest(root, "demo", 3) is None

    m = staging.stage_window(make_plan(seq=3), mixed_stream(500), root, row_group_rows=64)
    ml = staging.stage_window(make_plan(seq=3), mixed_stream(500), local, row_group_rows=64)
    assert m == ml
    assert staging.read_manifest(root, "demo", 3) == m
    staging.verify_window(root, m)
    assert not fs.exists(f"{wdir}/tables/db/stale.parquet")
    assert staging.read_table_changes(root, m, "db.t1").equals(staging.read_table_changes(local, ml, "db.t1"))
    with fs.open(f"{wdir}/{m.tables[0].files[0].path}", "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == m.tables[0].files[0].sha256
    assert staging.list_windows(root, "demo") == [3]
    assert staging.delete_window(root, "demo", 3)
    assert staging.read_manifest(root, "demo", 3) is None


# ------------------------------------------------------------------------------------------- DDL split


def test_ddl_mid_window_splits_a_table_into_two_files(tmp_path: Path) -> None:
    root = str(tmp_path)
    v1 = TableSchema(
        "db", "people", (col("id", "int", False), col("name", "varchar(10)", **U8), col("age", "tinyint")), ("id",)
    )
    v2 = TableSchema(
        "db", "people", (col("id", "int", False), col("name", "varchar(10)", **U8), col("email", "text", **U8)), ("id",)
    )
    other = TableSchema("db", "other", (col("id", "int", False),), ("id",))
    alter = Ddl(3, "db", "ALTER TABLE people DROP age, ADD email TEXT", 777)
    stream = [
        RowChange("I", v1, {"id": 1, "name": "ann", "age": 30}, 100, 1, 1.0),
        RowChange("I", other, {"id": 9}, 101, 2, 1.0),
        alter,
        RowChange(
            "U",
            TableSchema(v2.schema, v2.table, v2.columns, v2.key),
            {"id": 1, "name": "ann", "email": "a@x"},
            102,
            4,
            2.0,
        ),
        RowChange("I", v2, {"id": 2, "name": "bob", "email": None}, 103, 5, 2.0),  # equal shape, another object
        RowChange("D", v2, {"id": 2, "name": "bob", "email": None}, 104, 6, 2.0),
    ]
    m = staging.stage_window(make_plan(), iter(stream), root)
    t = m.table("db.people")
    assert [f.path for f in t.files] == ["tables/db/people/part-00000.parquet", "tables/db/people/part-00001.parquet"]
    assert [f.columns for f in t.files] == [("id", "name", "age"), ("id", "name", "email")]
    assert [f.rows for f in t.files] == [1, 3]
    assert [c.name for c in t.columns] == ["id", "name", "age", "email"]  # the dropped column keeps its place
    assert (t.inserts, t.updates, t.deletes) == (2, 1, 1)
    assert [(e.ordinal, e.schema, e.query, e.version) for e in m.ddl] == [(3, "db", alter.query, 777)]
    rows = staging.read_table_changes(root, m, "db.people").to_pylist()
    assert [(r["_cdc_ordinal"], r["id"], r["age"], r["email"]) for r in rows] == [
        (1, 1, 30, None),
        (4, 1, None, "a@x"),
        (5, 2, None, None),
        (6, 2, None, None),
    ]
    assert m.table("db.other").rows == 1


def test_updates_before_images_go_to_a_companion_file_only_the_manifest_links(tmp_path: Path) -> None:
    """Rows with op B (an update's before image, the ordinal of its update) are staged next to their segment's file
    (`StagedFile.before`), by the row path and the batch path alike: the changes' own files, counts and ordinals are
    what they are without them, a DDL closes both files, and the companion's bytes are verified with the window."""
    from cdc_core.model.changes import RowBatch

    root = str(tmp_path)
    v1 = TableSchema("db", "people", (col("id", "int", False), col("name", "varchar(10)", **U8)), ("id",))
    v2 = TableSchema("db", "people", (*v1.columns, col("age", "tinyint")), ("id",))
    alter = Ddl(5, "db", "ALTER TABLE people ADD age TINYINT", 777)
    stream: list[Any] = [
        RowChange("I", v1, {"id": 1, "name": "ann"}, 100, 1, 1.0, 90),
        RowChange("B", v1, {"id": 1, "name": "ann"}, 101, 2, 1.0, 90),
        RowChange("U", v1, {"id": 1, "name": "anne"}, 101, 2, 1.0, 90),
        RowChange("B", v1, {"id": 1, "name": "anne"}, 102, 3, 1.0, 90),
        RowChange("U", v1, {"id": 1, "name": "annie"}, 102, 3, 1.0, 90),
        RowChange("D", v1, {"id": 1, "name": "annie"}, 103, 4, 1.0, 90),
        alter,
        RowChange("I", v2, {"id": 2, "name": "bob", "age": 3}, 104, 6, 2.0, 91),
        RowChange("B", v2, {"id": 2, "name": "bob", "age": 3}, 105, 7, 2.0, 91),
        RowChange("U", v2, {"id": 2, "name": "bob", "age": 4}, 105, 7, 2.0, 91),
    ]
    plain = staging.stage_window(make_plan(), iter([c for c in stream if getattr(c, "op", "") != "B"]),
                                 str(tmp_path / "plain"))
    m = staging.stage_window(make_plan(), iter(stream), root)
    t = m.table("db.people")
    assert [(f.path, f.rows, f.sha256) for f in t.files] == [
        (f.path, f.rows, f.sha256) for f in plain.table("db.people").files]
    assert (t.inserts, t.updates, t.deletes) == (2, 3, 1) and m.changes == plain.changes
    assert [f.before.path if f.before else None for f in t.files] == [
        "tables/db/people/part-00000.before.parquet", "tables/db/people/part-00001.before.parquet"]
    assert [f.before.rows if f.before else None for f in t.files] == [2, 1]
    assert (m.before_images, plain.before_images) == (3, 0)
    befores = staging.read_table_changes(root, m, "db.people", before_images=True).to_pylist()
    assert [(r["_cdc_op"], r["_cdc_version"], r["_cdc_ordinal"], r["_cdc_txn"], r["name"], r["age"]) for r in befores] \
        == [("B", 101, 2, 90, "ann", None), ("B", 102, 3, 90, "anne", None), ("B", 105, 7, 91, "bob", 3)]
    assert "B" not in {r["_cdc_op"] for r in staging.read_table_changes(root, m, "db.people").to_pylist()}

    # The batch path (the columnar reader's RowBatches): the same files, byte for byte.
    writer_rows = [c for c in stream if isinstance(c, RowChange)]
    batches: list[Any] = []
    for shape, part in ((v1, writer_rows[:6]), (v2, writer_rows[6:])):
        table = _as_batch(shape, part)
        batches.append(RowBatch(shape, table, part[0].ordinal, part[-1].ordinal))
    by_batch = staging.stage_window(make_plan(), iter([batches[0], alter, batches[1]]), str(tmp_path / "batches"))
    assert by_batch.to_json() == m.to_json()

    wdir = Path(layout.window_dir(root, "demo", 1))
    (wdir / "tables/db/people/part-00001.before.parquet").unlink()
    with pytest.raises(StagingError, match=r"part-00001\.before\.parquet is missing"):
        staging.verify_window(root, m)


def _as_batch(shape: TableSchema, rows: list[RowChange]) -> Any:
    import pyarrow as pa

    from cdc_core.model.types import table_codec

    codec = table_codec(shape)
    arrays = [pa.array([r.op for r in rows]), pa.array([r.version for r in rows], pa.int64()),
              pa.array([r.ordinal for r in rows], pa.int64()),
              pa.array([round(r.commit_ts * 1_000_000) for r in rows], codec.arrow_schema.field(3).type),
              pa.array([r.txn for r in rows], pa.int64())]
    arrays += [pa.array(c.convert_values([r.values.get(c.name) for r in rows]), c.arrow_type) for c in codec.columns]
    return pa.RecordBatch.from_arrays(arrays, schema=codec.arrow_schema)


def test_each_file_records_the_key_its_rows_were_written_under(tmp_path: Path) -> None:
    """A name handed to a table of another key inside the window (RENAME TABLE a TO c, b TO a): each file keeps
    its own key, so the merge can land the rows before the rename under the old table's key."""
    old = TableSchema("db", "a", (col("k1", "int", False), col("k2", "int", False), col("v", "int")), ("k1", "k2"))
    new = TableSchema("db", "a", (col("id", "int", False), col("w", "int")), ("id",))
    stream = [RowChange("I", old, {"k1": 1, "k2": 3, "v": 7}, 100, 1, 1.0),
              Ddl(2, "db", "RENAME TABLE a TO c, b TO a", 101),
              RowChange("D", new, {"id": 1, "w": 10}, 102, 3, 2.0)]
    m = staging.stage_window(make_plan(), iter(stream), str(tmp_path))
    t = m.table("db.a")
    assert [(f.columns, f.key) for f in t.files] == [(("k1", "k2", "v"), ("k1", "k2")), (("id", "w"), ("id",))]
    assert t.key == ("id",)


def test_tables_without_changes_do_not_appear_and_an_empty_window_has_a_manifest(tmp_path: Path) -> None:
    root = str(tmp_path)
    m = staging.stage_window(make_plan(), iter([Ddl(1, "db", "CREATE TABLE x (id INT)", 5)]), root)
    assert m.tables == () and len(m.ddl) == 1
    assert staging.read_manifest(root, "demo", 1) == m


# ------------------------------------------------------------------------------------------ hostile names


@pytest.mark.parametrize(
    ("pipeline", "schema", "table"),
    [
        ("..", "..", "a/b"),
        ("../../etc", ".", "`x``y`"),
        ("p/q", "sch ema", ".."),
        ("ok", "..%2F..", "a%2Fb"),
        ("ok", "日本", "~x"),
    ],
)
def test_hostile_names_stay_inside_the_root(tmp_path: Path, pipeline: str, schema: str, table: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    t = TableSchema(schema, table, (col("id", "int", False),), ("id",))
    # A second table whose name is the first one's path encoding must not collide with it.
    t_enc = TableSchema(schema, path_component(table), (col("id", "int", False),), ("id",))
    plan = make_plan(pipeline=pipeline)
    m = staging.stage_window(
        plan, iter([RowChange("I", t, {"id": 1}, 1, 1, 1.0), RowChange("I", t_enc, {"id": 2}, 2, 2, 1.0)]), str(root)
    )
    inside = str(root.resolve()) + os.sep
    for p in tmp_path.rglob("*"):
        assert p == root or os.path.realpath(p).startswith(inside), p
    assert len({f.path for st in m.tables for f in st.files}) == 2
    assert staging.read_manifest(str(root), pipeline, 1) == m
    assert staging.read_table_changes(str(root), m, t.name).column("id").to_pylist() == [1]
    staging.verify_window(str(root), m)


# ------------------------------------------------------------------------------------------ errors


def test_contract_violations_are_refused_clearly(tmp_path: Path) -> None:
    root = str(tmp_path)
    with pytest.raises(StagingError, match="strictly"):
        staging.stage_window(
            make_plan(),
            iter(
                [
                    RowChange("I", T2, {"k": 1, "ts": None}, 1, 5, 1.0),
                    RowChange("I", T2, {"k": 2, "ts": None}, 1, 5, 1.0),
                ]
            ),
            root,
        )
    with pytest.raises(StagingError, match=r"'ts'.*incomplete"):
        staging.stage_window(make_plan(), iter([RowChange("I", T2, {"k": 1}, 1, 1, 1.0)]), root)
    with pytest.raises(StagingError, match="operation 'X'"):
        staging.stage_window(make_plan(), iter([RowChange("X", T2, {"k": 1, "ts": None}, 1, 1, 1.0)]), root)
    tiny = TableSchema("db", "tiny", (col("v", "tinyint"),), ("v",))
    with pytest.raises(StagingError, match=r"'db.tiny' column 'v'.*300"):
        staging.stage_window(
            make_plan(),
            iter([RowChange("I", tiny, {"v": 1}, 1, 1, 1.0), RowChange("I", tiny, {"v": 300}, 1, 2, 1.0)]),
            root,
        )
    geo = TableSchema("db", "geo", (col("id", "int"), col("g", "geometry")), ("id",))
    with pytest.raises(UnsupportedType, match=r"'db\.geo' column 'g'"):
        staging.stage_window(make_plan(), iter([RowChange("I", geo, {"id": 1, "g": b""}, 1, 1, 1.0)]), root)
    with pytest.raises(StagingError, match="neither a RowChange"):
        staging.stage_window(make_plan(), iter([object()]), root)
    assert staging.read_manifest(root, "demo", 1) is None
    assert list(Path(root).rglob("*.parquet")) == []


# ------------------------------------------------------------------------------------ logs and progress


def test_one_log_line_per_window_and_steady_progress(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[tuple[int, dict[str, Any]]] = []
    caplog.set_level(logging.INFO, logger="cdc_core.lake.staging")
    staging.stage_window(
        make_plan(seq=7),
        mixed_stream(20_000),
        str(tmp_path),
        progress=lambda rows, **kw: calls.append((rows, kw)),
        progress_every_rows=2048,
        progress_every_secs=3600,
    )
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("window.staged")]
    assert len(lines) == 1
    assert lines[0].startswith("window.staged pipeline=demo seq=7 tables=2 changes=20000 bytes=")
    assert " secs=" in lines[0]
    rows = [r for r, _ in calls]
    assert 8 <= len(calls) <= 12  # every ~2k rows, then once at the end; not per row
    assert rows == sorted(rows) and rows[-1] == 20_000
    assert calls[-1][1]["tables"] == 2 and calls[-1][1]["bytes"] > 0


def test_row_groups_shrink_for_windows_of_big_events() -> None:
    assert staging.effective_row_group_rows(make_plan(events=1000, nbytes=1000 * 200), 50_000, 64 << 20) == 50_000
    assert staging.effective_row_group_rows(make_plan(events=10, nbytes=10 * (4 << 20)), 50_000, 64 << 20) == 64
    assert staging.effective_row_group_rows(make_plan(events=10, nbytes=10 * (1 << 20)), 50_000, 64 << 20) == 64
    assert staging.effective_row_group_rows(make_plan(events=10, nbytes=10 * (256 << 10)), 50_000, 64 << 20) == 256


# ------------------------------------------------------------------------------------------ memory


def small_changes(n: int) -> Iterator[RowChange]:
    tables = [
        TableSchema(
            "db", f"m{j}", (col("id", "bigint", False), col("v", "varchar(30)", **U8), col("x", "double")), ("id",)
        )
        for j in range(3)
    ]
    for i in range(n):
        yield RowChange("IUD"[i % 3], tables[i % 3], {"id": i, "v": f"value-{i}", "x": i * 0.5}, i, i, 1.7e9)


def peak_staging_memory(tmp_path: Path, n: int) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        m = staging.stage_window(make_plan(seq=n), small_changes(n), str(tmp_path / f"mem{n}"), row_group_rows=5000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert m.changes == n
    return peak


def test_memory_does_not_grow_with_the_window(tmp_path: Path) -> None:
    peak_staging_memory(tmp_path, 20_000)  # warm-up: first-use allocations (lazy imports, caches) are not per row
    small = peak_staging_memory(tmp_path, 50_000)
    large = peak_staging_memory(tmp_path, 300_000)
    # Six times the changes; a buffer-everything implementation would need about six times the memory.
    assert large < small * 1.5 + (1 << 20), (small, large)
    assert small < 64 << 20, small  # and the bound itself is small (rows buffered for a few row groups)


def test_merge_report_names_read_back_to_their_window_and_token() -> None:
    uri = layout.merge_report_uri("s3://bucket/staging", "shop.eu1", 42, 0x1A2B)
    assert uri == "s3://bucket/staging/shop/sources/eu1/reports/w0000000042-1a2b.json"
    assert layout.merge_report_key(uri) == (42, 0x1A2B)
    for other in ("maintenance-1a2b-1800000000.json", "w0000000042-zz.json", "w42-1a2b.json", "x/w0000000042-1a2b"):
        assert layout.merge_report_key(other) is None


def test_the_ack_reads_the_newest_merge_report_of_its_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its own run's report is read by name, without listing every staged window's report (the long run: the
    listing grew with staging); without one (an earlier run merged), the newest token's report of the window."""
    from types import SimpleNamespace

    from cdc_core.lake.object_store import AMBIENT
    from cdc_core.run import ack

    p = SimpleNamespace(storage=AMBIENT, staging_root=str(tmp_path), name="shop")
    assert ack.merge_report(p, 7, 0x30) is None  # no reports directory yet
    reports = Path(layout.reports_dir(str(tmp_path), "shop"))
    reports.mkdir(parents=True)
    for seq, token in ((7, 0x10), (7, 0x2F), (8, 0x40), (70, 0x50)):
        (reports / layout.merge_report_name(seq, token)).write_text(f'{{"seq": {seq}, "token": {token}}}')
    listed: list[str] = []
    real_list = staging_store.list_names
    monkeypatch.setattr(staging_store, "list_names", lambda fs, path: listed.append(path) or real_list(fs, path))
    assert ack.merge_report(p, 7, 0x2F) == {"seq": 7, "token": 0x2F} and listed == []
    assert ack.merge_report(p, 7, 0x30) == {"seq": 7, "token": 0x2F} and len(listed) == 1  # merged before
    assert ack.merge_report(p, 7) == {"seq": 7, "token": 0x2F}
    assert ack.merge_report(p, 9, 0x30) is None


def test_a_window_is_verified_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stage, merge and ack each read the window's manifest: its files are hashed the first time only (on an
    object store, each hash is a download)."""
    root = str(tmp_path)
    m = staging.stage_window(make_plan(), mixed_stream(100), root)
    checked: list[str] = []
    real = staging_store._check_file
    monkeypatch.setattr(
        staging_store, "_check_file", lambda store, path, f: checked.append(path) or real(store, path, f)
    )
    staging.verify_window(root, m)
    first = len(checked)
    staging.verify_window(root, m)
    assert first == sum(len(t.files) for t in m.tables) and len(checked) == first
