"""Named fault-injection points for the crash suite (tests/faults).

`CDC_FAULT=after_plan` (comma-separated names allowed) makes the process kill itself with SIGKILL
when it reaches that point: no exception handlers, no finally blocks, no cleanup — exactly what a
crashed worker looks like. `CDC_FAULT_ONCE=<file>` makes each point fire only once (the file records
what fired), so a retry after the crash proceeds. `CDC_FAULT_ACTION=stop` makes the point pause the
process with SIGSTOP instead (a zombie, a worker frozen while a service restarts): whoever set the
fault resumes it with SIGCONT, and it carries on from that very point. `CDC_FAULT_ACTION=raise:<Error>`
makes the point raise that error of the product's hierarchy (`raise:ConfigError`, `raise:Fenced`, ...)
instead: in the Spark job, what the job says and exits with, which is how the DAG tests show what each
outcome makes of the task (tests/e2e/test_merge_outcomes_dag.py). Unset in production: the check is one
dict lookup.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from cdc_core.model import errors

T = TypeVar("T")
RAISE_ACTION = "raise:"

POINTS = (
    "after_acquire",
    "after_plan",  # the window to work on is known: stored now, or a pending one to replay
    "mid_stage_before",  # the window's binlog reader is set up, nothing read yet
    "mid_stage",  # about half of the window's changes read (the binlog connection is open)
    "after_stage",
    "merge_start",  # in the Spark job, its spec read: no Spark session yet, nothing written
    "mid_merge",  # in the Spark job, after the first table committed
    "mid_merge_table",  # in the Spark job, a table's tombstones committed, its main MERGE not yet
    "mid_derive",  # in the Spark job, a derived table's base committed, the derived table not yet
    "mid_outputs",  # in the Spark job, a table's history and change log committed, its state not yet
    "mid_schema_change",  # in the Spark job, a schema change's structure and row steps done, its mark not yet
    "after_merge",  # the merge job finished; the ack step has not started
    "before_ack",  # the ack step checked Delta; ZooKeeper not yet touched
    "after_checkpoint",  # the window is in the lake's checkpoints table; the cursor has not moved
    "mid_ack",  # inside the coordinator's ack: lease and records read, the multi-op not yet committed
    "after_ack",
)


def armed(name: str) -> bool:
    """True when `name` is among the points this process was asked to fire."""
    wanted = os.environ.get("CDC_FAULT")
    return wanted is not None and name in wanted.split(",")


def point(name: str) -> None:
    if not armed(name):
        return
    once = os.environ.get("CDC_FAULT_ONCE")
    if once:
        marker = Path(once)
        fired = set(marker.read_text().split()) if marker.exists() else set()
        if name in fired:
            return
        marker.write_text(" ".join(sorted(fired | {name})))
    action = os.environ.get("CDC_FAULT_ACTION") or ""
    if action.startswith(RAISE_ACTION):
        raise injected_error(name, action.removeprefix(RAISE_ACTION))
    if action == "stop":
        if once:  # who to resume or kill (a process title may hide its environment, e.g. Airflow's workers)
            Path(f"{once}.{name}.pid").write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)  # returns once someone sends SIGCONT
        return
    os.kill(os.getpid(), signal.SIGKILL)


def injected_error(at: str, name: str) -> errors.CdcError:
    """The error `CDC_FAULT_ACTION=raise:<name>` raises at the point `at`: the hierarchy's class `name`."""
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, errors.CdcError)):
        raise ValueError(f"CDC_FAULT_ACTION={RAISE_ACTION}{name}: not an error of the hierarchy (model.errors)")
    return cls(f"fault point {at}: injected {name} (CDC_FAULT_ACTION={RAISE_ACTION}{name})")


def midway(items: Iterable[T], expected: int, name: str) -> Iterator[T]:
    """Pass `items` through, firing `name` once about half-way (after max(1, expected // 2) rows; an item
    with a `rows` count, such as a RowBatch, counts that many), or after the last item when `expected`
    overestimated (a window's event count includes its GTID, table-map and commit events)."""
    at = max(1, expected // 2)
    seen = 0
    fired = False
    for item in items:
        yield item
        seen += getattr(item, "rows", 1)
        if not fired and seen >= at:
            fired = True
            point(name)
    if not fired and seen:
        point(name)


def clock() -> float:
    """The time leases are granted and judged by: the wall clock, ahead by `CDC_FAULT_CLOCK_OFFSET` seconds
    when the crash suite sets it. A test then lets a run take over a lease that a crashed or paused run still
    holds without sleeping until it expires: exactly what a clock running ahead does, which can only fence
    the holder early, never let two runs write (docs/zookeeper-layout.md). Unset in production."""
    offset = os.environ.get("CDC_FAULT_CLOCK_OFFSET")
    return time.time() + float(offset) if offset else time.time()

