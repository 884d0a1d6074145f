"""The one window loop (`cdc_core.run.loop.run_windows`) that `cdc run`, `cdc backfill` and `cdc snapshot` share:
its stop predicate is asked before the first window and after each, `max_windows` caps it, an empty
window is not merged, and a failing step is recorded (step, window, holder) before the error goes on,
whichever command ran it. The steps are stand-ins here; the real ones run in tests/integration/test_cli_run.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from cdc_core.coordination import LeaseGrant
from cdc_core.model.errors import LakeError, SourceError
from cdc_core.run import ack, loop, plan, stage
from cdc_core.run.plan import PlannedWindow
from cdc_core.run.stage import StagedWindow

pytestmark = pytest.mark.unit

GRANT = LeaseGrant(pipeline="p", holder="cli/run/x/1", token=0x42, expires_at=0.0, acquired_at=0.0)


class _Steps:
    """Windows 1, 2, ... from stand-in steps; `empty`: the seqs that stage nothing; `fail`: (step, seq)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, empty: frozenset[int] = frozenset(),
                 fail: tuple[str, int] | None = None) -> None:
        self.calls: list[tuple[str, int]] = []
        self.errors: list[tuple[str, str, int | None, str]] = []
        self.seq = 0
        self.empty, self.fail = empty, fail
        coordinator = SimpleNamespace(
            record_error=lambda holder, step, seq, message: self.errors.append((holder, step, seq, message))
        )
        self.p: Any = SimpleNamespace(name="p", coordinator=coordinator, log_event=lambda *a, **k: None)
        monkeypatch.setattr(plan, "plan", self.plan)
        monkeypatch.setattr(stage, "stage", self.stage)
        monkeypatch.setattr(ack, "ack", self.ack)

    def _step(self, name: str, seq: int) -> None:
        self.calls.append((name, seq))
        if self.fail == (name, seq):
            raise SourceError(f"{name} {seq} failed")

    def plan(self, p: Any, grant: LeaseGrant) -> PlannedWindow:
        self.seq += 1
        self._step("plan", self.seq)
        return PlannedWindow(self.seq, "stream", self.seq in self.empty, "a", "b", 0)

    def stage(self, p: Any, grant: LeaseGrant, seq: int) -> StagedWindow:
        self._step("stage", seq)
        empty = seq in self.empty
        return StagedWindow(seq, () if empty else ("db.t",), 0 if empty else 3, f"/w/{seq}", empty)

    def merge(self, grant: LeaseGrant, seq: int) -> None:
        self._step("merge", seq)

    def ack(self, p: Any, grant: LeaseGrant, seq: int) -> ack.AckResult:
        self._step("ack", seq)
        return ack.AckResult(seq, cursor="f:1")


def test_the_predicate_stops_before_the_first_window_and_after_each(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _Steps(monkeypatch)
    asked: list[int] = []

    def stop(done: Sequence[loop.WindowDone]) -> str | None:
        asked.append(len(done))
        return "done" if len(done) == 2 else None

    out = loop.run_windows(s.p, GRANT, "h", max_windows=10, stop=stop, merge=s.merge)
    assert asked == [0, 1, 2]
    assert [w.planned.seq for w in out.windows] == [1, 2] and out.stopped == "done"
    assert s.calls == [(step, seq) for seq in (1, 2) for step in ("plan", "stage", "merge", "ack")]
    assert out.to_dict()["windows"][0] == {**out.windows[0].planned.to_dict(), "changes": 3}
    assert s.errors == []

    s = _Steps(monkeypatch)
    out = loop.run_windows(s.p, GRANT, "h", max_windows=5, stop=lambda done: "nothing to do", merge=s.merge)
    assert out.windows == () and out.stopped == "nothing to do" and s.calls == []


def test_max_windows_caps_the_loop_and_an_empty_window_is_not_merged(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _Steps(monkeypatch, empty=frozenset({2}))
    out = loop.run_windows(s.p, GRANT, "h", max_windows=3, stop=lambda done: None, merge=s.merge)
    assert out.stopped == loop.STOP_MAX_WINDOWS and len(out.windows) == 3
    assert ("merge", 2) not in s.calls and ("ack", 2) in s.calls and ("merge", 3) in s.calls
    assert loop.run_windows(s.p, GRANT, "h", max_windows=0, stop=lambda done: None).windows == ()


@pytest.mark.parametrize(
    ("fail", "step"),
    [(("plan", 2), loop.PLAN_STEP), (("stage", 2), loop.STAGE_STEP), (("merge", 2), loop.MERGE_STEP),
     (("ack", 2), loop.ACK_STEP)],
)
def test_a_failing_step_is_recorded_and_raised(
    monkeypatch: pytest.MonkeyPatch, fail: tuple[str, int], step: str
) -> None:
    s = _Steps(monkeypatch, fail=fail)
    with pytest.raises(SourceError, match="failed"):
        loop.run_windows(s.p, GRANT, "cli/backfill/x/1", max_windows=5, stop=lambda done: None, merge=s.merge)
    [(holder, recorded, seq, message)] = s.errors
    assert (holder, recorded) == ("cli/backfill/x/1", step)
    assert seq == (None if step == loop.PLAN_STEP else 2)  # the plan step has no window yet
    assert message == f"SourceError: {fail[0]} 2 failed"


def test_a_failing_stop_predicate_is_recorded_as_the_plan_step(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _Steps(monkeypatch)

    def stop(done: Sequence[loop.WindowDone]) -> str | None:
        raise LakeError("the source end is unreadable")

    with pytest.raises(LakeError):
        loop.run_windows(s.p, GRANT, "h", max_windows=5, stop=stop)
    assert [(step, seq) for _, step, seq, _ in s.errors] == [(loop.PLAN_STEP, None)]


def test_the_run_predicate_stops_at_an_empty_window_and_reports_only_when_catching_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = _Steps(monkeypatch, empty=frozenset({2}))
    out = loop.run(s.p, GRANT, "h", max_windows=5, merge=s.merge)
    assert [w.planned.seq for w in out.windows] == [1, 2] and out.stopped is None
    assert "stopped" not in out.to_dict()
