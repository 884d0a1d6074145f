"""Notes for operators and the monitor: the last failed step (`<state>/last_error`) and the last maintenance
run's result (`<pipeline>/maintenance`). Nothing reads either to decide anything. The last error is written
best effort and unfenced (recording it must never hide the failure itself); the maintenance result is written
fenced like everything else, so a zombie maintenance run cannot overwrite its successor's record."""


from __future__ import annotations

import json
import logging
from typing import Any

from cdc_core.coordination.fenced import MAX_REQUEST_BYTES, Done, FencedStore, Write, put_op
from cdc_core.coordination.records import COORDINATION_FORMAT, LeaseGrant, check_format, dumps
from cdc_core.model.errors import CoordinationError
from cdc_core.model.logfmt import kv

log = logging.getLogger("cdc.coordination")


def _maintenance_record(d: dict[str, Any]) -> dict[str, Any]:
    check_format(d, "maintenance record")
    return d


class LastError:
    """The last failure of a pipeline's (or group source's) steps, for the monitor."""

    def __init__(self, store: FencedStore) -> None:
        self.store = store
        self.path = store.nodes.last_error

    def record(self, holder: str, step: str, seq: int | None, message: str) -> None:
        """Note the last failure for the monitor (`last_error`). Best effort and not fenced: it is a note
        for operators, not pipeline state (nothing reads it to decide anything), and recording it must
        never hide the failure itself."""
        store = self.store
        data = dumps(
            {"format": COORDINATION_FORMAT, "holder": holder, "step": step, "seq": seq,
             "message": message[:4000], "at": store.clock()}
        )
        try:
            store.require_connected("record error")
            with store.zk("recording the last error"):
                if store.client.exists(self.path) is None:
                    store.client.create(self.path, data, acl=store.acl, makepath=True)
                else:
                    store.client.set(self.path, data)
        except Exception as e:  # never mask the error being recorded
            log.warning("error.not_recorded %s", kv(pipeline=store.pipeline, step=step, reason=type(e).__name__))

    def read(self) -> dict[str, Any] | None:
        """The last failure noted by `record`, or None."""
        self.store.require_connected("read last error")
        got = self.store.get(self.path, "reading the last error")
        if got is None:
            return None
        try:
            value: dict[str, Any] = json.loads(got[0])
        except ValueError:
            return None
        return value


class MaintenanceNote:
    """The last maintenance run's result (JSON, format-versioned), for the monitor and `cdc status`."""

    def __init__(self, store: FencedStore) -> None:
        self.store = store
        self.path = store.nodes.maintenance

    def record(self, grant: LeaseGrant, result: dict[str, Any]) -> None:
        """Store the last maintenance run's result (replacing the previous one), fenced on the lease."""
        data = dumps({"format": COORDINATION_FORMAT, **result})
        if len(data) > MAX_REQUEST_BYTES:  # ZooKeeper's request limit is 1 MB
            raise CoordinationError(
                f"pipeline {self.store.pipeline!r}: the maintenance result is {len(data)} bytes, too large for "
                f"{self.path}; record fewer details per table"
            )

        def attempt() -> Write | Done:
            got = self.store.get(self.path, "reading the maintenance record")
            op = put_op(self.path, data, got[1] if got is not None else None)
            return Write([op], None, "maintenance.recorded", {"bytes": len(data)})

        self.store.fenced(grant, "record maintenance", attempt)

    def read(self) -> dict[str, Any] | None:
        """The last maintenance run's result, or None when maintenance never ran."""
        self.store.require_connected("read maintenance record")
        got = self.store.get(self.path, "reading the maintenance record")
        if got is None:
            return None
        result: dict[str, Any] = self.store.parse(got[0], self.path, _maintenance_record)
        return result
