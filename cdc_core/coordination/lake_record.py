"""The lake registry family: `<state>/lake`, the Delta tables a pipeline (or group source) landed windows
into. Its data and rules live in cdc_core/model/lake_registry.py (docs/lake-registry.md); this module only
reads the node and replaces it in one fenced compare-and-set."""


from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cdc_core.coordination.fenced import Done, FencedStore, Write, put_op
from cdc_core.coordination.records import LeaseGrant, dumps


class LakeRecord:
    """One pipeline's (or group source's) lake table registry node."""

    def __init__(self, store: FencedStore) -> None:
        self.store = store
        self.path = store.nodes.lake

    def read(self) -> dict[str, Any] | None:
        """The lake table registry's data (cdc_core.model.lake_registry), None when nothing was registered yet."""
        self.store.require_connected("read lake registry")
        got = self.store.get(self.path, "reading the lake registry")
        if got is None:
            return None
        data: dict[str, Any] = self.store.parse(got[0], self.path, lambda d: d)
        return data

    def update(
        self, grant: LeaseGrant, change: Callable[[dict[str, Any] | None], dict[str, Any] | None]
    ) -> dict[str, Any] | None:
        """Replace the lake registry's data with `change(current)` in one fenced compare-and-set
        (`change` returns None for "no change"; it is re-applied to fresh data after a race)."""

        def attempt() -> Write | Done:
            got = self.store.get(self.path, "reading the lake registry")
            current = self.store.parse(got[0], self.path, lambda d: d) if got is not None else None
            new = change(current)
            if new is None or new == current:
                return Done(current)
            op = put_op(self.path, dumps(new), got[1] if got is not None else None)
            return Write([op], new, "lake.recorded", {"tables": len(new.get("tables") or {})})

        result: dict[str, Any] | None = self.store.fenced(grant, "record lake tables", attempt)
        return result
