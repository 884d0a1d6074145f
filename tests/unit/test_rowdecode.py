"""Pure parts of the columnar decoder: the compiled row scanner and every vector kernel against the
per-value functions (which mirror python-mysql-replication; the MariaDB integration test compares those
with the library itself), on generated row images."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_core.capture import rowdecode
from cdc_core.capture.rowdecode.decoder import OPC_BEFORE, OPC_UPDATE, TableDecoder, scan_table
from cdc_core.capture.rowdecode.kernels import vector_kernel
from cdc_core.capture.rowdecode.layout import DIG2BYTES, ColumnLayout, decimal_size
from cdc_core.capture.rowdecode.native import rowscan
from cdc_core.capture.rowdecode.values import value_function
from cdc_core.capture.rowdecode.walk import compile_scanners, row_offsets
from cdc_core.model.changes import RowBatch, SourceColumn, TableSchema
from cdc_core.model.errors import SourceError
from cdc_core.model.types import column_codec

pytestmark = pytest.mark.unit


def fixed(kind: str, width: int, nullable: bool = True, **kw: object) -> ColumnLayout:
    return ColumnLayout(name=f"c_{kind}", type=0, kind=kind, width=width, prefix=0, nullable=nullable, **kw)  # type: ignore[arg-type]


def var(prefix: int, nullable: bool = True) -> ColumnLayout:
    return ColumnLayout(name="v", type=0, kind="string", width=0, prefix=prefix, nullable=nullable, encoding="utf8")


# ------------------------------------------------------------------------------------- the scanner


@st.composite
def table_and_rows(draw: st.DrawFn) -> tuple[list[ColumnLayout], list[list[bytes | None]]]:
    ncols = draw(st.integers(1, 40))
    layouts = []
    for i in range(ncols):
        nullable = draw(st.booleans())
        if draw(st.booleans()):
            lay = ColumnLayout(f"c{i}", 0, "int", draw(st.sampled_from([1, 2, 3, 4, 5, 8])), 0, nullable)
        else:
            lay = ColumnLayout(f"c{i}", 0, "string", 0, draw(st.sampled_from([1, 2, 3, 4])), nullable, encoding="utf8")
        layouts.append(lay)
    rows = []
    for _ in range(draw(st.integers(1, 12))):
        row: list[bytes | None] = []
        for lay in layouts:
            if lay.nullable and draw(st.booleans()):
                row.append(None)
            elif lay.width:
                row.append(draw(st.binary(min_size=lay.width, max_size=lay.width)))
            else:
                row.append(draw(st.binary(max_size=300)))
        rows.append(row)
    return layouts, rows


def encode_row(layouts: list[ColumnLayout], row: list[bytes | None]) -> tuple[bytes, list[int]]:
    """A row image (null bitmap, then values) and each column's offset in it (-1 for NULL)."""
    nb = sum(1 << i for i, v in enumerate(row) if v is None)
    out = bytearray(nb.to_bytes((len(layouts) + 7) // 8, "little"))
    offsets = []
    for lay, v in zip(layouts, row, strict=True):
        if v is None:
            offsets.append(-1)
            continue
        offsets.append(len(out))
        if not lay.width:
            out += len(v).to_bytes(lay.prefix, "little")
        out += v
    return bytes(out), offsets


@settings(max_examples=150, deadline=None)
@given(table_and_rows())
def test_scanner_and_row_offsets_find_every_value(case: tuple[list[ColumnLayout], list[list[bytes | None]]]) -> None:
    layouts, rows = case
    buf = bytearray(b"\xee" * 5)  # images do not start at 0
    want_starts, want_offsets = [], []
    for row in rows:
        image, offs = encode_row(layouts, row)
        want_starts.append(len(buf))
        want_offsets.append([o + len(buf) if o >= 0 else -1 for o in offs])
        buf += image
    scan, image_fn = compile_scanners(layouts, key_columns=list(range(len(layouts))))
    starts: list[int] = []
    end, n = scan(bytes(buf), 5, len(buf), starts.append)
    assert (end, n, starts) == (len(buf), len(rows), want_starts)
    got = row_offsets(layouts, np.frombuffer(bytes(buf), np.uint8), np.array(starts, dtype=np.int64))
    assert [[int(a[r]) for a in got] for r in range(len(rows))] == want_offsets
    pos = 5
    for r in range(len(rows)):  # the update-event image reader: row start and every column's offset
        res = image_fn(bytes(buf), pos)
        assert res[1] == want_starts[r] and list(res[2:]) == want_offsets[r]
        pos = res[0]
    assert pos == len(buf)


def native_decoder(layouts: list[ColumnLayout], key_columns: list[int], native: bool,
                   before_images: bool = False) -> TableDecoder:
    columns = tuple(
        SourceColumn(lay.name, "datetime" if lay.kind == "datetime2" else "int" if lay.width else "varbinary(300)",
                     lay.nullable)
        for lay in layouts
    )
    shape = TableSchema("s", "t", columns, tuple(layouts[i].name for i in key_columns))
    dec = TableDecoder(shape, tuple(layouts), vectorize=False, native=native, before_images=before_images)
    assert dec.native is native
    return dec


def test_the_compiled_walk_is_built() -> None:
    """scripts/setup.sh builds it (setup.py); without it the decoder silently runs the Python walk, so the
    suite insists on it being there (the Python walk is tested with native=False)."""
    assert rowscan is not None, "cdc_core/capture/_rowscan.c is not built: run scripts/setup.sh"


@settings(max_examples=150, deadline=None)
@given(table_and_rows(), st.data())
def test_the_compiled_walk_finds_what_the_python_walk_finds(
    case: tuple[list[ColumnLayout], list[list[bytes | None]]], data: st.DataObject
) -> None:
    """Row starts, ops (updates: a changed key is a delete and an insert), rows per event and every value's
    offset, compiled and generated-Python walks alike, over write, update and delete events."""
    layouts, rows = case
    # 5-byte columns as DATETIME: a key of those is compared by value, which the compiled walk asks Python.
    layouts = [dataclasses.replace(lay, kind="datetime2") if lay.width == 5 else lay for lay in layouts]
    keys = sorted(data.draw(st.sets(st.integers(0, len(layouts) - 1), min_size=1, max_size=3)))
    images = [encode_row(layouts, row)[0] for row in rows]
    raw = bytearray(b"\xee" * 3)
    kinds, ends = bytearray(), []
    i = 0
    while i < len(images):
        kind = data.draw(st.sampled_from([rowdecode.EV_WRITE, rowdecode.EV_UPDATE, rowdecode.EV_DELETE]))
        take = 2 if kind == rowdecode.EV_UPDATE else data.draw(st.integers(1, 3))
        if kind == rowdecode.EV_UPDATE and i + 2 > len(images):
            kind, take = rowdecode.EV_WRITE, 1
        for image in images[i : i + take]:
            raw += image
        i += take
        kinds.append(kind)
        ends.append(len(raw))
    raw = bytes(raw[3:])  # a table's buffer starts with its first event
    ends = [e - 3 for e in ends]
    results = []
    for before_images in (False, True):
        for native in (True, False):
            dec = native_decoder(layouts, keys, native, before_images)
            starts, counts, ops = scan_table(dec, raw, bytes(kinds), ends)
            starts = np.asarray(starts, dtype=np.int64)
            offsets = [a.tolist() for a in dec.offsets(np.frombuffer(raw, np.uint8), starts)]
            results.append((starts.tolist(), list(counts), bytes(ops), offsets))
    assert results[0] == results[1] and results[2] == results[3]
    # With before images, each update (op 1) that keeps its key is preceded by its before image (op 3): the
    # image just before its after image in the event, nothing else moved.
    plain, with_before = results[0], results[2]
    every_image: list[int] = []  # images follow each other in the buffer: an after image's before image precedes it
    compile_scanners(layouts)[0](raw, 0, len(raw), every_image.append)
    preceding = dict(zip(every_image[1:], every_image[:-1], strict=True))
    want_starts, want_ops = [], bytearray()
    for start, op in zip(plain[0], plain[2], strict=True):
        if op == OPC_UPDATE:
            want_starts.append(preceding[start])
            want_ops.append(OPC_BEFORE)
        want_starts.append(start)
        want_ops.append(op)
    assert (with_before[0], bytes(with_before[2])) == (want_starts, bytes(want_ops))
    updates = plain[2].count(OPC_UPDATE)
    assert sum(with_before[1]) == sum(plain[1]) + updates


def test_the_compiled_walk_reports_images_the_table_map_does_not_describe() -> None:
    layouts = [ColumnLayout("id", 0, "int", 4, 0, False), var(1)]
    image = encode_row(layouts, [b"\x01\x00\x00\x00", b"abc"])[0]
    two = bytes([rowdecode.EV_WRITE, rowdecode.EV_DELETE])
    for native in (True, False):  # the first event's declared end cuts its image short
        dec = native_decoder(layouts, [0], native)
        with pytest.raises(SourceError, match="a rows event's images end at byte 9 of 8"):
            scan_table(dec, image + image, two, [8, 18])
    dec = native_decoder(layouts, [0], True)
    with pytest.raises(SourceError, match="images end at byte"):  # past the buffer: never read beyond
        scan_table(dec, image + b"\x00", bytes([rowdecode.EV_WRITE]), [len(image) + 1])


def test_the_compiled_walk_asks_python_about_keys_equal_in_value_but_not_in_bytes() -> None:
    """A DOUBLE key of -0.0 updated to 0.0 is the same key (the library compares values): an update."""
    import struct

    lay = ColumnLayout("k", 0, "double", 8, 0, False)
    before, after = b"\x00" + struct.pack("<d", -0.0), b"\x00" + struct.pack("<d", 0.0)
    other = b"\x00" + struct.pack("<d", 1.0)
    raw = before + after + before + other
    shape = TableSchema("s", "t", (SourceColumn("k", "double", False),), ("k",))
    for native in (True, False):
        dec = TableDecoder(shape, (lay,), native=native)
        starts, counts, ops = scan_table(dec, raw, bytes([rowdecode.EV_UPDATE]), [len(raw)])
        assert (np.asarray(starts).tolist(), list(counts), bytes(ops)) == ([9, 18, 27], [3], b"\x01\x02\x00")


# ------------------------------------------------------------------------------------ the kernels


def encode_decimal(value: decimal.Decimal, p: int, s: int) -> bytes:
    """MySQL's binary DECIMAL (decimal2bin)."""
    sign, digits, exp = value.as_tuple()
    q = int("".join(map(str, digits)) or "0") * 10 ** (exp + s)  # unscaled by 10**s (exact for our inputs)
    intg, frac = divmod(q, 10**s)
    istr, fstr = str(intg).zfill(p - s), str(frac).zfill(s) if s else ""
    out = bytearray()
    lead = (p - s) % 9
    if lead:
        out += int(istr[:lead]).to_bytes(DIG2BYTES[lead], "big")
    for j in range(lead, p - s, 9):
        out += int(istr[j : j + 9]).to_bytes(4, "big")
    for j in range(0, s - s % 9, 9):
        out += int(fstr[j : j + 9]).to_bytes(4, "big")
    if s % 9:
        out += int(fstr[s - s % 9 :]).to_bytes(DIG2BYTES[s % 9], "big")
    out[0] ^= 0x80
    if sign:
        out = bytearray(b ^ 0xFF for b in out)
    return bytes(out)


def random_value(lay: ColumnLayout, rng: random.Random) -> bytes:
    w = lay.width
    if lay.kind == "decimal":
        p, s = lay.precision, lay.scale
        q = rng.randrange(-(10**p) + 1, 10**p)
        if rng.random() < 0.2:  # zero, tiny and extreme values (leading zero groups, all nines)
            q = rng.choice([0, 1, -1, 10**p - 1, -(10**p) + 1, rng.randrange(-1000, 1000)])
        return encode_decimal(decimal.Decimal(q).scaleb(-s), p, s)
    if lay.kind == "date":
        if rng.random() < 0.1:
            return bytes(3) if rng.random() < 0.5 else (2024 << 9).to_bytes(3, "little")  # zero, zero month/day
        d = dt.date(1, 1, 1) + dt.timedelta(days=rng.randrange(3652059))
        return (d.year << 9 | d.month << 5 | d.day).to_bytes(3, "little")
    if lay.kind == "datetime2":
        ym = rng.randrange(1 << 17)
        fields = [(rng.randrange(32), 5), (rng.randrange(32), 5), (rng.randrange(64), 6), (rng.randrange(64), 6)]
        v = 1 << 39 | ym << 22
        for (x, _), shift in zip(fields, (17, 12, 6, 0), strict=True):
            v |= x << shift
        frac = rng.randrange(10 ** lay.fsp) * (10 if lay.fsp % 2 else 1) if lay.fsp else 0
        return v.to_bytes(5, "big") + frac.to_bytes(w - 5, "big")
    if lay.kind == "timestamp2":
        secs = 0 if rng.random() < 0.1 else rng.randrange(1 << 31)
        frac = rng.randrange(10 ** lay.fsp) * (10 if lay.fsp % 2 else 1) if lay.fsp and secs else 0
        return secs.to_bytes(4, "big") + frac.to_bytes(w - 4, "big")
    if lay.kind == "enum":
        return rng.randrange(len(lay.labels)).to_bytes(w, "little")
    if lay.kind in ("float", "double"):
        x = rng.uniform(-1e30, 1e30)
        return np.array([x], dtype="<f4" if w == 4 else "<f8").tobytes()
    return rng.randbytes(w)


KERNEL_CASES = [
    *(("tinyint" + u, fixed("int", 1, unsigned=bool(u))) for u in ("", " unsigned")),
    *(("smallint" + u, fixed("int", 2, unsigned=bool(u))) for u in ("", " unsigned")),
    *(("mediumint" + u, fixed("int", 3, unsigned=bool(u))) for u in ("", " unsigned")),
    *(("int" + u, fixed("int", 4, unsigned=bool(u))) for u in ("", " unsigned")),
    *(("bigint" + u, fixed("int", 8, unsigned=bool(u))) for u in ("", " unsigned")),
    ("float", fixed("float", 4)),
    ("double", fixed("double", 8)),
    *(
        (f"decimal({p},{s})", fixed("decimal", decimal_size(p, s), precision=p, scale=s))
        for p, s in (
            (1, 0), (5, 5), (9, 0), (10, 2), (12, 3), (18, 9), (18, 0), (18, 18),
            (20, 5), (38, 10), (30, 30), (39, 0), (47, 17), (65, 30), (65, 0), (64, 1),  # 128-bit and text
        )
    ),
    ("date", fixed("date", 3)),
    *((f"datetime({f})", fixed("datetime2", 5 + (f + 1) // 2, fsp=f)) for f in range(7)),
    *((f"timestamp({f})", fixed("timestamp2", 4 + (f + 1) // 2, fsp=f)) for f in range(7)),
    ("year", fixed("year", 1)),
    ("enum('a','b','ü')", fixed("enum", 1, labels=("", "a", "b", "ü"))),
]


@pytest.mark.parametrize("native", [True, False], ids=["compiled-gather", "numpy-gather"])
@pytest.mark.parametrize(("mysql_type", "lay"), KERNEL_CASES, ids=[c[0] for c in KERNEL_CASES])
def test_every_vector_kernel_equals_the_per_value_path(mysql_type: str, lay: ColumnLayout, native: bool) -> None:
    codec = column_codec(SourceColumn(lay.name, mysql_type, True, ()))
    kernel = vector_kernel(lay, codec, native=native)
    assert kernel is not None, f"{mysql_type} has no vector kernel"
    rng = random.Random(mysql_type)
    buf = bytearray(b"\x00" * 3)
    offsets = []
    for _ in range(400):
        if rng.random() < 0.15:
            offsets.append(-1)
            continue
        offsets.append(len(buf))
        buf += random_value(lay, rng)
    raw = bytes(buf)
    offs = np.array(offsets, dtype=np.int64)
    got = kernel(np.frombuffer(raw, np.uint8), offs, raw)
    fn = value_function(lay)
    want = pa.array(codec.convert_values([None if o < 0 else fn(raw, o) for o in offsets]), codec.arrow_type)
    assert got.type == want.type
    assert got.equals(want), f"{mysql_type}: {got.to_pylist()[:5]} vs {want.to_pylist()[:5]}"


def prefixed(values: list[bytes | None], prefix: int) -> tuple[bytes, np.ndarray]:
    """Length-prefixed values after one byte of padding, and their offsets (-1 for None)."""
    buf, offs = bytearray(b"\x00"), []
    for v in values:
        if v is None:
            offs.append(-1)
            continue
        offs.append(len(buf))
        buf += len(v).to_bytes(prefix, "little") + v
    return bytes(buf), np.array(offs, dtype=np.int64)


@pytest.mark.parametrize("native", [True, False], ids=["compiled-gather", "numpy-gather"])
def test_a_string_column_with_a_nullable_two_byte_prefix(native: bool) -> None:
    lay = var(2)
    codec = column_codec(SourceColumn("v", "varchar(300)", True, (("charset", "utf8mb4"),)))
    kernel = vector_kernel(lay, codec, native=native)
    assert kernel is not None
    values = ["", None, "héllo", "x" * 300, None, "🎉"]
    buf, offs = prefixed([None if v is None else v.encode() for v in values], 2)
    got = kernel(np.frombuffer(buf, np.uint8), offs, buf)
    assert got.to_pylist() == values


@pytest.mark.parametrize("native", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize(("charset", "codec"), [("latin1", None), ("cp1251", "cp1251"), ("ascii", "ascii")])
def test_single_byte_charsets_transcode_like_python_and_refuse_undefined_bytes(
    charset: str, codec: str | None, native: bool
) -> None:
    from cdc_core.model.types import python_codec

    enc = codec or python_codec(charset)
    assert enc is not None
    lay = ColumnLayout("v", 0, "string", 0, 2, True, encoding=enc)
    col = column_codec(SourceColumn("v", "varchar(300)", True, (("charset", charset),)))
    kernel = vector_kernel(lay, col, native=native)
    assert kernel is not None
    rng = random.Random(charset)
    defined = [b for b in range(256) if _decodes(bytes([b]), enc)]
    values: list[bytes | None] = [b"", None, bytes(defined), b"x" * 300]
    values += [None if rng.random() < 0.1 else bytes(rng.choice(defined) for _ in range(rng.randrange(40)))
               for _ in range(300)]
    buf, offs = prefixed(values, 2)
    got = kernel(np.frombuffer(buf, np.uint8), offs, buf)
    assert got.to_pylist() == [None if v is None else v.decode(enc) for v in values]
    undefined = [b for b in range(256) if b not in defined]
    if undefined:
        bad = b"ok" + bytes([undefined[0]])
        raw = b"\x00" + len(bad).to_bytes(2, "little") + bad
        with pytest.raises(SourceError, match="is not valid in its character set"):
            kernel(np.frombuffer(raw, np.uint8), np.array([1], dtype=np.int64), raw)


def _decodes(b: bytes, enc: str) -> bool:
    try:
        b.decode(enc)
    except UnicodeDecodeError:
        return False
    return True


def test_a_slice_drops_a_transaction_that_never_commits() -> None:
    shape = TableSchema("s", "t", (SourceColumn("id", "tinyint", False),), ("id",))
    spec = rowdecode.TableSpec(shape, (ColumnLayout("id", 1, "int", 1, 0, False),))
    sl = rowdecode.Slice()
    sl.add_rows(1, spec, rowdecode.EV_WRITE, 100, b"\x00\x01\x00\x02", 0, 4)  # rows 1, 2
    sl.commit(10.0, 90)
    sl.add_ddl(("s", "ALTER TABLE t ADD x INT", 150))
    sl.add_rows(1, spec, rowdecode.EV_WRITE, 200, b"\x00\x03", 0, 2)  # never committed
    sl.rollback()
    sl.add_rows(1, spec, rowdecode.EV_DELETE, 300, b"\x00\x01", 0, 2)
    sl.commit(11.0, 290)
    result = rowdecode.decode_slice(sl.job(batch_rows=1000, vectorize=True))
    assert result.ordinals == 3 and result.ddl_ordinals == []
    (batch,) = rowdecode.finish_slice(result, base=40)
    assert batch.batch.to_pydict() == {
        "_cdc_op": ["I", "I", "D"],
        "_cdc_version": [100, 100, 300],
        "_cdc_ordinal": [41, 42, 43],
        "_cdc_commit_ts": [dt.datetime(1970, 1, 1, 0, 0, s, tzinfo=dt.UTC) for s in (10, 10, 11)],
        "_cdc_txn": [90, 90, 290],  # each change's transaction: where it began
        "id": [1, 2, 1],
    }
    assert (batch.first_ordinal, batch.last_ordinal) == (41, 43)


def test_before_images_share_their_updates_ordinal_and_batch_and_stage_whatever_the_batch_size(tmp_path: Path) -> None:
    """A table staging before images: each update's B row takes the ordinal of its U (the other rows' ordinals are
    what they are without before images), a batch never ends between the two, and the batches stage the same
    window whatever the batch size."""
    from cdc_core.lake import staging
    from tests.support.all_types import make_plan

    shape = TableSchema("s", "t", (SourceColumn("id", "tinyint", False), SourceColumn("v", "tinyint", False)), ("id",))
    layouts = (ColumnLayout("id", 1, "int", 1, 0, False), ColumnLayout("v", 1, "int", 1, 0, False))

    def image(i: int, v: int) -> bytes:
        return b"\x00" + bytes([i, v])

    def batches(before: bool, batch_rows: int) -> list[RowBatch]:
        spec = rowdecode.TableSpec(shape, layouts, before_images=before)
        sl = rowdecode.Slice()
        rows = b"".join(image(i, 0) for i in (1, 2, 3))
        sl.add_rows(1, spec, rowdecode.EV_WRITE, 100, rows, 0, len(rows))
        ups = b"".join(image(i, 0) + image(i, 5) for i in (1, 2, 3))  # three updates in one event
        sl.add_rows(1, spec, rowdecode.EV_UPDATE, 200, ups, 0, len(ups))
        sl.commit(10.0, 90)
        result = rowdecode.decode_slice(sl.job(batch_rows=batch_rows, vectorize=True))
        assert result.ordinals == 6
        return rowdecode.finish_slice(result, base=0)

    plain = [r for b in batches(False, 1000) for r in b.batch.to_pylist()]
    assert [(r["_cdc_op"], r["_cdc_ordinal"]) for r in plain] == [("I", 1), ("I", 2), ("I", 3), ("U", 4), ("U", 5),
                                                                ("U", 6)]
    for batch_rows in (1000, 4, 2, 1):
        got = batches(True, batch_rows)
        rows = [r for b in got for r in b.batch.to_pylist()]
        assert [(r["_cdc_op"], r["_cdc_ordinal"], r["v"]) for r in rows] == [
            ("I", 1, 0), ("I", 2, 0), ("I", 3, 0), ("B", 4, 0), ("U", 4, 5), ("B", 5, 0), ("U", 5, 5), ("B", 6, 0),
            ("U", 6, 5)], batch_rows
        assert all(b.batch.column(0)[-1].as_py() != "B" for b in got), batch_rows
        m = staging.stage_window(make_plan(), iter(got), str(tmp_path / f"rows{batch_rows}"))
        assert (m.changes, m.before_images) == (6, 3)

