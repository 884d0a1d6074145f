"""Reads the merge job makes of staged files and Delta tables, counted: a small staged file on an object store is
fetched once per process (kept by its verified sha256, bounded), and the ack reads each Delta table once."""

from __future__ import annotations

import hashlib
import io
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cdc_core.lake import delta_state, staging_store
from cdc_core.lake.delta_state import TableFacts
from cdc_core.model.manifest import StagedFile
from cdc_core.run.lake_tables import LakeReads

pytestmark = pytest.mark.unit


def _parquet(rows: int) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table({"id": list(range(rows)), "v": [str(i) for i in range(rows)]}), out)
    return out.getvalue()


class _Store:
    """An object store's fsspec filesystem, as far as `read_staged_file` uses it: whole-object GETs, counted."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.gets: list[str] = []

    def cat_file(self, path: str) -> bytes:
        self.gets.append(path)
        return self.files[path]


def _staged(path: str, data: bytes, sha256: str | None = None) -> StagedFile:
    return StagedFile(path, 0, len(data), sha256 or hashlib.sha256(data).hexdigest(), ("id", "v"))


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch) -> Any:
    cache = staging_store._Fetched(largest=4096, total=3 * 1024)
    monkeypatch.setattr(staging_store, "_FETCHED", cache)
    return cache


def test_a_small_staged_file_is_fetched_once_for_every_read_of_it(fetched: Any) -> None:
    data = _parquet(5)
    store = _Store({"w/a.parquet": data})
    f = _staged("a.parquet", data)
    keys = staging_store.read_staged_file(store, "w/a.parquet", f, ["id"])
    whole = staging_store.read_staged_file(store, "w/a.parquet", f)
    assert keys.column_names == ["id"] and whole.num_rows == 5 and whole.column("v")[4].as_py() == "4"
    assert store.gets == ["w/a.parquet"]


def test_content_that_is_not_the_manifests_and_big_files_are_never_kept(fetched: Any) -> None:
    data = _parquet(5)
    store = _Store({"w/a.parquet": data, "w/big.parquet": _parquet(2000)})
    damaged = _staged("a.parquet", data, sha256="0" * 64)  # the manifest says other bytes
    for _ in range(2):
        assert staging_store.read_staged_file(store, "w/a.parquet", damaged).num_rows == 5
    big = _staged("big.parquet", store.files["w/big.parquet"])
    assert big.bytes > fetched.largest
    for _ in range(2):
        staging_store.read_staged_file(store, "w/big.parquet", big)
    assert store.gets == ["w/a.parquet"] * 2 + ["w/big.parquet"] * 2


def test_the_kept_files_stay_under_their_bound_oldest_out_first(fetched: Any) -> None:
    files = {f"w/{i}.parquet": _parquet(1 + i) for i in range(6)}
    store = _Store(files)
    staged = {p: _staged(p, d) for p, d in files.items()}
    for p in files:
        staging_store.read_staged_file(store, p, staged[p])
    assert fetched._bytes <= fetched.total and fetched._bytes == sum(len(d) for d in fetched._data.values())
    newest = list(files)[-1]
    oldest = next(iter(files))
    staging_store.read_staged_file(store, newest, staged[newest])
    staging_store.read_staged_file(store, oldest, staged[oldest])
    assert store.gets.count(newest) == 1 and store.gets.count(oldest) == 2  # the newest kept, the oldest evicted


def test_a_local_file_is_read_in_place(tmp_path: Any, fetched: Any) -> None:
    data = _parquet(3)
    (tmp_path / "a.parquet").write_bytes(data)
    assert staging_store.read_staged_file(None, str(tmp_path / "a.parquet"), _staged("a.parquet", data)).num_rows == 3
    assert not fetched._data


def test_the_ack_reads_each_delta_table_once(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []

    def facts(uri: str, app_id: str, *, storage: Any) -> TableFacts | None:
        opened.append(uri)
        return None if uri.endswith("gone") else TableFacts(f"id-{uri}", 3, 2)

    monkeypatch.setattr(delta_state, "table_facts", facts)
    reads = LakeReads(SimpleNamespace(name="p", storage=None, lake_root="/lake"))
    assert reads.facts(["/lake/a", "/lake/b", "/lake/a"]) == [
        TableFacts("id-/lake/a", 3, 2), TableFacts("id-/lake/b", 3, 2), TableFacts("id-/lake/a", 3, 2)]
    assert reads.one("/lake/gone") is None and reads.one("/lake/gone") is None
    assert reads.facts(["/lake/b", "/lake/c"])[1] == TableFacts("id-/lake/c", 3, 2)
    assert opened == ["/lake/a", "/lake/b", "/lake/gone", "/lake/c"]
