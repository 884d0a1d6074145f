"""The window loop: (plan -> stage -> merge -> ack) window after window, until a stop predicate says why not.

`run`, `backfill` and `snapshot` (the CLI) and a group pipeline's run over its sources all use
`run_windows`; they differ only in their stop predicate (`caught_up`, `backfill_done`, `snapshot_done`).
A step that fails is recorded for the monitor page (`note_failure`: the step, the window, the error) before
the error goes on, whichever command ran the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cdc_core.coordination import LeaseGrant
from cdc_core.model import windows
from cdc_core.model.positions import binlog_file_index
from cdc_core.run import ack, merge_step, plan, stage
from cdc_core.run.context import PipelineContext
from cdc_core.run.plan import PlannedWindow
from cdc_core.run.stage import StagedWindow

# The steps as a failure names them (`note_failure`; the DAG's task ids are the same names).
PLAN_STEP, STAGE_STEP, MERGE_STEP, ACK_STEP = "plan_window", "stage_window", "merge_window", "ack_window"

# Why a loop stopped.
STOP_MAX_WINDOWS = "max_windows"
STOP_EMPTY_WINDOW = "empty_window"
STOP_CAUGHT_UP = "caught_up"
STOP_BACKFILL_DONE = "backfill_done"
STOP_SNAPSHOT_DONE = "snapshot_done"

Merge = Callable[[LeaseGrant, int], Any]
# Called before the first window (with no windows) and after each window (with the windows done so far, in
# order): None to go on, else why the loop stops.
Stop = Callable[[Sequence["WindowDone"]], "str | None"]


@dataclass(frozen=True)
class WindowDone:
    """One window the loop landed: its plan step's and its stage step's results."""

    planned: PlannedWindow
    staged: StagedWindow

    def to_dict(self) -> dict[str, Any]:
        """The window as `cdc run` prints it: the plan step's answer and the changes staged."""
        return {**self.planned.to_dict(), "changes": self.staged.changes}


@dataclass(frozen=True)
class WindowsRun:
    """What a loop over one pipeline (or one source of a group) landed, and why it stopped (None: not
    reported, as a run without `until_caught_up` does)."""

    pipeline: str
    windows: tuple[WindowDone, ...] = ()
    stopped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pipeline": self.pipeline, "windows": [w.to_dict() for w in self.windows]}
        if self.stopped is not None:
            out["stopped"] = self.stopped
        return out


def run_windows(
    p: PipelineContext,
    grant: LeaseGrant,
    holder: str,
    *,
    max_windows: int,
    stop: Stop,
    merge: Merge | None = None,
) -> WindowsRun:
    """(plan -> stage -> merge -> ack) x at most `max_windows` under a lease the caller holds, while `stop`
    says go on. `merge(grant, seq)`: the merge step (default `merge_step.merge`, spark-submit or the merge
    server). A failing step is recorded (`note_failure`, as `holder`) and raised."""
    done: list[WindowDone] = []
    doing, seq = PLAN_STEP, None
    try:
        reason = stop(done)
        while reason is None and len(done) < max_windows:
            doing, seq = PLAN_STEP, None
            planned = plan.plan(p, grant)
            doing, seq = STAGE_STEP, planned.seq
            staged = stage.stage(p, grant, planned.seq)
            if not staged.empty:
                doing = MERGE_STEP
                if merge is None:
                    merge_step.merge(p, grant, planned.seq)
                else:
                    merge(grant, planned.seq)
            doing = ACK_STEP
            ack.ack(p, grant, planned.seq)
            done.append(WindowDone(planned, staged))
            reason = stop(done)
    except Exception as e:
        note_failure(p, doing, e, seq=seq, holder=holder)
        raise
    return WindowsRun(p.name, tuple(done), reason or STOP_MAX_WINDOWS)


def run(
    p: PipelineContext,
    grant: LeaseGrant,
    holder: str,
    *,
    max_windows: int = 1,
    merge: Merge | None = None,
    until_caught_up: bool = False,
) -> WindowsRun:
    """`cdc run`'s loop over one pipeline (or one source): an empty window always ends it; with
    `until_caught_up` it goes on while behind (`caught_up`) and reports why it stopped."""
    done = run_windows(p, grant, holder, max_windows=max_windows, merge=merge,
                       stop=caught_up(p, grant, max_windows, until_caught_up))
    return done if until_caught_up else WindowsRun(done.pipeline, done.windows)


def caught_up(p: PipelineContext, grant: LeaseGrant, max_windows: int, until_caught_up: bool) -> Stop:
    """`cdc run`'s stop predicate. An empty window stops the run. With `until_caught_up` the run goes on
    while it is behind the source's end as seen when it started (a window cut short by a cap), or while a
    backfill or a snapshot is in progress, and stops once a window reaches that end: new changes arriving
    meanwhile wait for the next run, so a busy source cannot keep one run going forever."""
    target: list[Any] = [None]  # the source's end when the run started

    def stop(done: Sequence[WindowDone]) -> str | None:
        if not done:
            target[0] = p.source_facts(refresh=True).end if until_caught_up else None
            return None
        last = done[-1].planned
        if last.empty:
            return STOP_EMPTY_WINDOW
        if not until_caught_up:
            return None
        behind = behind_reason(p, target[0])
        if behind is None:
            return STOP_CAUGHT_UP
        p.log_event("run.continue", grant, seq=last.seq, reason=behind, windows=len(done))
        if len(done) >= max_windows and behind_reason(p, target[0]) is not None:
            p.log_event("run.window_cap", grant, windows=len(done), max_windows=max_windows,
                        hint="more is waiting: run again, or raise --max-windows")
        return None

    return stop


def backfill_done(p: PipelineContext) -> Stop:
    """`cdc backfill`'s stop predicate: the backfill is complete (or was never started)."""
    return lambda done: STOP_BACKFILL_DONE if p.coordinator.read_cursor().backfill is None else None


def snapshot_done(p: PipelineContext) -> Stop:
    """`cdc snapshot`'s stop predicate: no snapshot is active and no window is pending."""
    return lambda done: (
        STOP_SNAPSHOT_DONE
        if not p.coordinator.read_snapshot().active and p.coordinator.pending_window() is None
        else None
    )


def behind_reason(p: PipelineContext, target: Any) -> str | None:
    """Why the run should go on (backfill, snapshot, before the source end seen at its start), or None."""
    cursor = p.coordinator.read_cursor()
    if cursor.backfill is not None:
        return "backfill"
    if p.coordinator.read_snapshot().active:
        return "snapshot"
    pos = cursor.position
    if target is None or pos is None:
        return None
    if (binlog_file_index(pos.file), pos.offset) < (binlog_file_index(target.file), target.offset):
        return "behind_source_end"
    return None


def note_failure(p: PipelineContext, step: str, error: BaseException, *, seq: int | None = None,
                 holder: str = "") -> None:
    """Record a failed step for the monitor page (`status()["last_error"]`)."""
    message = f"{type(error).__name__}: {error}"
    p.log_event("step.failed", None, step=step, seq=seq, error_type=type(error).__name__, error=message[:500])
    p.coordinator.record_error(holder, step, seq, message)


def more_work(p: PipelineContext, seq: int) -> dict[str, Any]:
    """Right after window `seq` was acked: is more work waiting now, and why?

    {"more": bool, "reason": one of `windows.MORE_*`, "detail": text, "seq": seq}. More is waiting
    while a backfill or a snapshot is in progress, or when the window was cut short by a cap before
    the source's end (see `windows.more_work`); the DAGs then trigger the next run at once instead
    of waiting for the schedule (`continue_while_behind`). Reads ZooKeeper only.
    """
    record = p.coordinator.get_window(seq)
    cursor = p.coordinator.read_cursor()
    answer = windows.more_work(
        record.plan if record is not None else None,
        acked=record is not None and record.state == "acked",
        enabled=p.config.continue_while_behind,
        backfill_active=cursor.backfill is not None,
        snapshot_active=p.coordinator.read_snapshot().active,
    )
    answer["seq"] = seq
    p.log_event("window.more_work", None, seq=seq, more=answer["more"], reason=answer["reason"])
    return answer
