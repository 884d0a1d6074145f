"""Named fault-injection points for the crash suite.

`CDC_FAULT=after_plan` (comma-separated names allowed) makes the process kill itself with SIGKILL
when it reaches that point: no exception handlers, no finally blocks, no cleanup — exactly what a
crashed worker looks like. `CDC_FAULT_ONCE=<file>` makes each point fire only once (the file records
what fired), so a retry after the crash proceeds. Unset in production: the check is one dict lookup.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

POINTS = (
    "after_acquire",
    "after_plan",
    "mid_stage_before",
    "mid_stage",
    "after_stage",
    "mid_merge",  # in the Spark job, after the first table committed
    "before_ack",
    "after_ack",
)


def point(name: str) -> None:
    wanted = os.environ.get("CDC_FAULT")
    if not wanted or name not in wanted.split(","):
        return
    once = os.environ.get("CDC_FAULT_ONCE")
    if once:
        marker = Path(once)
        fired = set(marker.read_text().split()) if marker.exists() else set()
        if name in fired:
            return
        marker.write_text(" ".join(sorted(fired | {name})))
    os.kill(os.getpid(), signal.SIGKILL)
