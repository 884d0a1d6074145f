"""A stand-in for a staged window's `Manifest` in unit tests of the merge step: tables with staged files, no
schema changes (what `Pipeline.merge_needed` and the step's logging read)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


def fake_manifest(*names: str, changes: int = 1) -> Any:
    tables = tuple(SimpleNamespace(name=n, schema=n.rpartition(".")[0], table=n.rpartition(".")[2],
                                   files=("part-00000.parquet",)) for n in names)
    return SimpleNamespace(tables=tables, changes=changes, schema_changes=())
