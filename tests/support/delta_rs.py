"""delta-rs helpers of the writer tests."""

from __future__ import annotations

from typing import Any

import pytest

from cdc_core.lake import small_writer


def open_stale_first(monkeypatch: pytest.MonkeyPatch, stale: Any) -> dict[str, int]:
    """`small_writer.open_table` answers `stale` (the table as read before another commit) the first time and the
    table as it is afterwards: a writer that checked an older version. Returns the count of opens so far."""
    opened = {"n": 0}
    fresh = small_writer.open_table

    def first_stale(uri: str, storage: Any = small_writer.AMBIENT) -> Any:
        opened["n"] += 1
        return stale if opened["n"] == 1 else fresh(uri, storage)

    monkeypatch.setattr(small_writer, "open_table", first_stale)
    return opened
