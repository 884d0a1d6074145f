"""Recognising a dead lease holder on this host (cdc_core.model.holders.judge): pure, over facts."""

from __future__ import annotations

import os

import pytest

from cdc_core.model.holders import LocalHost, ProcessIdentity, judge, start_ticks, this_process

pytestmark = pytest.mark.unit

HERE = LocalHost(host="etl1", boot_id="boot-a", pid_ns="pid:[4026531836]")
HOLDER = ProcessIdentity(host="etl1", pid=4242, start_ticks=1000, boot_id="boot-a", pid_ns="pid:[4026531836]")


@pytest.mark.parametrize(
    ("recorded", "ticks_now", "verdict"),
    [
        (HOLDER, 1000, "alive"),  # the same process is still running
        (HOLDER, None, "dead"),  # no process with that PID (or a zombie)
        (HOLDER, 2000, "dead"),  # the PID now belongs to another process: reused
        (ProcessIdentity("etl2", 4242, 1000, "boot-b", HOLDER.pid_ns), None, "other_host"),
        (ProcessIdentity("etl1", 4242, 1000, "boot-a", "pid:[1]"), None, "other_host"),  # another container
        (ProcessIdentity("etl1", 4242, 1000, "boot-old", HOLDER.pid_ns), 1000, "dead"),  # the host rebooted
        (ProcessIdentity("etl1", 4242, None, "boot-a", HOLDER.pid_ns), None, "unknown"),  # no start time
        (None, None, "unknown"),  # an Airflow task or an older release: no identity recorded
    ],
)
def test_verdicts(recorded: ProcessIdentity | None, ticks_now: int | None, verdict: str) -> None:
    got, reason = judge(recorded, HERE, ticks_now)
    assert got == verdict and reason


def test_identity_round_trips_and_unknown_formats_are_ignored() -> None:
    assert ProcessIdentity.from_dict(HOLDER.to_dict()) == HOLDER
    assert ProcessIdentity.from_dict({**HOLDER.to_dict(), "format": 99}) is None
    assert ProcessIdentity.from_dict({"format": 1, "host": "x"}) is None
    assert ProcessIdentity.from_dict(None) is None


def test_this_process_is_alive_by_its_own_facts() -> None:
    me = this_process()
    assert me.pid == os.getpid() and me.start_ticks == start_ticks(os.getpid()) is not None
    assert start_ticks(2**22 + 12345) is None  # above pid_max: never a process
