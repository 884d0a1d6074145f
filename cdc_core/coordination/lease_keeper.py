"""Keeps a lease alive while a long step (the Spark job) runs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from cdc_core.model.errors import CdcError, Fenced
from cdc_core.model.logfmt import kv

log = logging.getLogger("cdc.coordination")  # with the lease's other events


class LeaseKeeper:
    """Renews a lease in a background thread while a long step (the Spark job) runs.

    Stops by itself when the lease is lost (Fenced): the job's own fencing check then stops the job.
    A passing ZooKeeper problem is logged and retried at the next beat.
    """

    def __init__(self, renew: Callable[[], Any], interval_seconds: float, pipeline: str = "") -> None:
        self._renew = renew
        self.interval = max(0.05, interval_seconds)
        self.pipeline = pipeline
        self.lost: Fenced | None = None
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-keeper-{pipeline}", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._renew()
                self.renewals += 1
            except Fenced as e:
                self.lost = e
                log.warning("%s", kv(event="lease.keeper_lost", pipeline=self.pipeline, reason=str(e)[:300]))
                return
            except CdcError as e:
                log.warning("%s", kv(event="lease.keeper_retry", pipeline=self.pipeline, reason=str(e)[:300]))

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
