"""The staging root as stored: where a staged window's files live (fsspec; fsync and atomic rename on a local
filesystem), and reading, verifying, listing and deleting staged windows (cdc_core/lake/staging.py writes them).

A window counts as staged only when its `manifest.json` exists; its files are verified against the manifest's
sizes and sha256 once per process (`verify_window`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.model.errors import StagingError
from cdc_core.model.layout import unit_dir
from cdc_core.model.logfmt import line
from cdc_core.model.manifest import MANIFEST_NAME, STAGED_META_COLUMNS, Manifest, StagedFile, StagedTable
from cdc_core.model.naming import window_dir_name

log = logging.getLogger("cdc_core.lake.staging")  # the staging's events, under one logger

_CHUNK = 1 << 20

# ------------------------------------------------------------------------------------------- paths


def part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


class StagingStore:
    """The staging root through fsspec; local filesystems additionally get fsync and atomic rename."""

    def __init__(self, staging_root: str, storage: Storage) -> None:
        self.root_url = staging_root
        fs, root = storage.fs(staging_root)
        self.fs: fsspec.AbstractFileSystem = fs
        self.root = root.rstrip("/")
        self.local = isinstance(fs, LocalFileSystem)

    def window_path(self, pipeline: str, seq: int) -> str:
        return f"{self.root}/{unit_dir(pipeline)}/{window_dir_name(seq)}"

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(path))

    def read_bytes(self, path: str) -> bytes | None:
        try:
            with self.fs.open(path, "rb") as f:
                return f.read()  # type: ignore[no-any-return]
        except FileNotFoundError:
            return None

    def open_write(self, path: str) -> Any:
        parent = path.rpartition("/")[0]
        if parent:
            self.fs.makedirs(parent, exist_ok=True)
        return self.fs.open(path, "wb")

    def finish_file(self, f: Any) -> None:
        """Flush, fsync (local) and close a file opened with open_write."""
        f.flush()
        if self.local:
            os.fsync(f.fileno())
        f.close()

    def write_bytes(self, path: str, data: bytes) -> None:
        f = self.open_write(path)
        try:
            f.write(data)
        finally:
            self.finish_file(f)

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(path, recursive=True)

    def fsync_dir(self, path: str) -> None:
        if not self.local:
            return
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class HashingSink:
    """A write-only file for ParquetWriter that counts and hashes bytes on their way to the real file."""

    def __init__(self, f: Any) -> None:
        self._f = f
        self.sha = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data: Any) -> int:
        mv = memoryview(data)
        self.sha.update(mv)
        self._f.write(mv)
        self.size += mv.nbytes
        return mv.nbytes

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._f.flush()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        # ParquetWriter.close() does not close a Python sink; the store closes the real file.
        self.closed = True


def list_names(fs: Any, directory: str) -> list[str]:
    """The paths of a directory's entries (FileNotFoundError: no directory). A local one by `os.listdir`: fsspec's
    `ls` spends microseconds of Python per entry, and staging is listed by every ack (cdc_core.run.housekeeping)
    and every window's staging and deletion, with up to a retention's worth of windows in it (the long run)."""
    if isinstance(fs, LocalFileSystem):
        base = directory.rstrip("/")
        return [f"{base}/{name}" for name in os.listdir(base or "/")]
    return [str(p) for p in fs.ls(directory, detail=False)]


def remove_stale_temp_dirs(store: StagingStore, parent: str, name: str) -> None:
    """Leftovers of an interrupted staging of this window (never read: only the final name counts)."""
    try:
        entries = list_names(store.fs, parent)
    except FileNotFoundError:
        return
    for p in entries:
        base = str(p).rstrip("/").rpartition("/")[2]
        if base.startswith((f".{name}.tmp-", f".{name}.old-")):
            store.remove(str(p))


# ------------------------------------------------------------------------------------------ reading


def load_manifest(store: StagingStore, wdir: str) -> Manifest | None:
    data = store.read_bytes(f"{wdir}/{MANIFEST_NAME}")
    if data is None:
        return None
    try:
        return Manifest.from_json(data)
    except (ValueError, KeyError, TypeError) as e:
        # Unreadable JSON is a damaged copy: treat the window as not staged, so it is staged again.
        log.warning("%s", line(event="window.bad_manifest", path=f"{wdir}/{MANIFEST_NAME}", error=str(e)))
        return None


def read_manifest(staging_root: str, pipeline: str, seq: int, *, storage: Storage = AMBIENT) -> Manifest | None:
    """The staged window's manifest, or None when the window is not (completely) staged."""
    store = StagingStore(staging_root, storage)
    wdir = store.window_path(pipeline, seq)
    manifest = load_manifest(store, wdir)
    if manifest is not None and (manifest.plan.pipeline != pipeline or manifest.plan.seq != seq):
        raise StagingError(
            f"{wdir}/{MANIFEST_NAME} describes window {manifest.plan.label()}, not {pipeline}#{seq}; the staging "
            "directory was copied or renamed by hand. Delete it; the window will be re-staged from the source"
        )
    return manifest


def verify_files(store: StagingStore, wdir: str, manifest: Manifest) -> None:
    for t in manifest.tables:
        for f in (g for staged in t.files for g in staged.with_before()):
            path = f"{wdir}/{f.path}"
            what = _check_file(store, path, f)
            if what:
                raise StagingError(
                    f"staged window {manifest.plan.label()}: {path} {what}; the window will be re-staged from the "
                    "source (run the stage step again: it replaces the damaged copy)"
                )


def _check_file(store: StagingStore, path: str, f: StagedFile) -> str | None:
    sha = hashlib.sha256()
    size = 0
    try:
        with store.fs.open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                sha.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        return "is missing"
    if size != f.bytes:
        return f"has {size} bytes, the manifest says {f.bytes}"
    if sha.hexdigest() != f.sha256:
        return f"has sha256 {sha.hexdigest()}, the manifest says {f.sha256}"
    return None


# Windows this process verified (store, window directory, manifest digest): a step reads its window's manifest
# several times (stage, merge, ack), and hashing every staged file each time means downloading them again from an
# object store. Verified once per process: a file that changes afterwards is a fault of another kind (the merge
# reads the files the manifest names; a later process verifies again). The store's endpoint is part of the key:
# two pipelines of one process may keep the same paths on two stores.
_VERIFIED: set[tuple[str, str, str]] = set()
_VERIFIED_MAX = 256


def verify_window(staging_root: str, manifest: Manifest, *, storage: Storage = AMBIENT) -> None:
    """Check every staged file's size and sha256 against the manifest (once per process and window);
    StagingError names the first bad one."""
    store = StagingStore(staging_root, storage)
    wdir = store.window_path(manifest.plan.pipeline, manifest.plan.seq)
    endpoint = (storage.creds.endpoint_url if storage.creds is not None else None) or ""
    seen = (endpoint, wdir, hashlib.sha256(manifest.to_json().encode()).hexdigest())
    if seen in _VERIFIED:
        return
    verify_files(store, wdir, manifest)
    if len(_VERIFIED) >= _VERIFIED_MAX:
        _VERIFIED.clear()
    _VERIFIED.add(seen)


class _Fetched:
    """Small staged files fetched from an object store, by content (sha256, checked on the way in): the merge job
    reads each of its files twice (the staged facts, then the small-table writer's rows), and a warm merge server
    may read a window again on a retry; one GET each instead. At most `total` bytes (oldest out first); a file over
    `largest` bytes (Spark reads those itself) is never kept."""

    def __init__(self, largest: int = 8 << 20, total: int = 128 << 20) -> None:
        self.largest, self.total = largest, total
        self._data: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, sha256: str) -> bytes | None:
        with self._lock:
            data = self._data.get(sha256)
            if data is not None:
                self._data.move_to_end(sha256)
            return data

    def keep(self, sha256: str, data: bytes) -> None:
        if len(data) > self.largest or hashlib.sha256(data).hexdigest() != sha256:
            return
        with self._lock:
            if sha256 in self._data:
                return
            self._data[sha256] = data
            self._bytes += len(data)
            while self._bytes > self.total:
                _, old = self._data.popitem(last=False)
                self._bytes -= len(old)


_FETCHED = _Fetched()


def read_staged_file(fs: Any, path: str, f: StagedFile, columns: Sequence[str] | None = None) -> pa.Table:
    """One staged Parquet file (`columns` of it) at `path` in `fs` (None: a local path). From an object store a
    small file is fetched once per process with one GET, and kept by its content's sha256."""
    if fs is None or isinstance(fs, LocalFileSystem):
        return pq.read_table(path, columns=columns, filesystem=fs)
    data = _FETCHED.get(f.sha256)
    if data is None:
        data = fs.cat_file(path)
        _FETCHED.keep(f.sha256, data)
    return pq.read_table(pa.BufferReader(data), columns=None if columns is None else list(columns))


def staged_file_disagrees(st: StagedTable, f: StagedFile) -> str | None:
    """Why a staged file of `st` cannot be read as the window's manifest says, known before reading it (None:
    it can). The readers without Spark (cdc_core.lake.small_writer, staged_changes) then leave it to Spark, whose
    read names the error."""
    if set(f.columns) - {c.name for c in st.columns} or set(st.key) - set(f.columns):
        return f"staged file {f.path} disagrees with the manifest"
    return None


StagedColumns = tuple[dict[str, Any], dict[str, Any]]  # (metadata column -> array, table column -> array)


def staged_file_columns(
    st: StagedTable, f: StagedFile, data: pa.Table, meta: dict[str, pa.DataType], optional: frozenset[str] = frozenset()
) -> StagedColumns | str:
    """The rows of a staged file of `st` (read into `data`), checked against the window's manifest, for the readers
    without Spark: its metadata columns cast to `meta`'s types (one of `optional` it lacks: NULL), and each column
    of the table the file was written with, as read and of the manifest's type. A str: why not."""
    manifest_types = {c.name: c.arrow_type for c in st.columns}
    present = set(data.column_names)
    metadata: dict[str, Any] = {}
    for name, typ in meta.items():
        if name in present:
            metadata[name] = data[name].cast(typ)
        elif name in optional:
            metadata[name] = pa.nulls(data.num_rows, typ)
        else:
            return f"staged file {f.path} has no {name}"
    columns: dict[str, Any] = {}
    for c in st.columns:
        if c.name not in f.columns:  # not a column when this file was written
            continue
        if c.name not in present:
            return f"staged file {f.path} lacks its column {c.name!r}"
        col = data[c.name]
        have = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
        if str(have) != manifest_types[c.name]:
            return f"staged file {f.path} column {c.name!r} is {have}, the window's is {manifest_types[c.name]}"
        columns[c.name] = col
    return metadata, columns


def read_table_changes(
    staging_root: str, manifest: Manifest, table_name: str, *, storage: Storage = AMBIENT, before_images: bool = False
) -> pa.Table:
    """All staged changes of one table (`schema.table`), metadata columns first, then the union of
    source columns in manifest order (NULL where a file lacks a column); `before_images`: the updates' before
    images instead. For tests and tools."""
    table = manifest.table(table_name)
    store = StagingStore(staging_root, storage)
    wdir = store.window_path(manifest.plan.pipeline, manifest.plan.seq)
    parts = []
    for f in (f.before for f in table.files if f.before is not None) if before_images else table.files:
        with store.fs.open(f"{wdir}/{f.path}", "rb") as fh:
            parts.append(pq.read_table(fh))
    names = [*STAGED_META_COLUMNS, *(c.name for c in table.columns)]
    if not parts:
        return pa.table({n: pa.array([], pa.null()) for n in names})
    out = pa.concat_tables(parts, promote_options="permissive")
    for name in names:  # a column no file has (added by a DDL after the window's updates, for before images)
        if name not in out.column_names:
            out = out.append_column(name, pa.nulls(out.num_rows))
    return out.select(names)


def delete_window(
    staging_root: str, pipeline: str, seq: int, *, storage: Storage = AMBIENT, sweep_leftovers: bool = True
) -> bool:
    """Remove a staged window (manifest first, so it stops counting as staged at once), and on local disk the
    leftovers of its interrupted stagings (a listing of the pipeline's directory; `sweep_leftovers=False` for a
    caller that removes them from a listing of its own).

    Returns whether anything was there.
    """
    store = StagingStore(staging_root, storage)
    wdir = store.window_path(pipeline, seq)
    found = store.exists(wdir)
    store.remove(f"{wdir}/{MANIFEST_NAME}")
    store.remove(wdir)
    if store.local and sweep_leftovers:
        remove_stale_temp_dirs(store, wdir.rpartition("/")[0], wdir.rpartition("/")[2])
    return found


def list_windows(staging_root: str, pipeline: str, *, storage: Storage = AMBIENT) -> list[int]:
    """Sequence numbers of the pipeline's completely staged windows (those with a manifest), ascending."""
    store = StagingStore(staging_root, storage)
    pdir = f"{store.root}/{unit_dir(pipeline)}"
    try:
        entries = list_names(store.fs, pdir)
    except FileNotFoundError:
        return []
    seqs = []
    for p in entries:
        base = str(p).rstrip("/").rpartition("/")[2]
        if len(base) == 11 and base[0] == "w" and base[1:].isdigit() and store.exists(f"{p}/{MANIFEST_NAME}"):
            seqs.append(int(base[1:]))
    return sorted(seqs)
