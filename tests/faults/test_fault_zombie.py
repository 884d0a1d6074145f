"""Zombies: a `cdc run` paused with SIGSTOP past its lease expiry while another run takes over and lands
windows; resumed with SIGCONT, it must be fenced (exit 5, "no longer holds the lease") and change
nothing: cursor, window records, staged files and Delta logs are compared byte for byte before and
after it resumes (tests/faults/scenarios.py::zombie). The lease is 1 s here.
"""

from __future__ import annotations

import random

import pytest

from tests.faults.scenarios import zombie

# Minutes on a quiet machine; a busy shared one can take ten times longer than the suite-wide 900 s.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(5400)]


def test_paused_runs_are_fenced_and_change_nothing(rig) -> None:  # type: ignore[no-untyped-def]
    r = rig(2001, tables=("orders",), windows_per_run=1, lease_seconds=1,
            caps={"max_events": 100_000, "max_bytes": 1 << 30, "max_transactions": 1000})
    rng = random.Random(2001)
    # Holding a staged window, and inside the ack (lease read, multi-op not committed yet: BookKeeper's
    # fencing case). A pause at a random moment is the soak's (tests/faults/soak.py).
    outcomes = [zombie(r, rng, "after_stage", txns=4), zombie(r, rng, "mid_ack", txns=3)]
    # rc 5: fenced by the lease token; rc 4: its ZooKeeper session expired during the pause (a slow
    # machine) and it stopped before writing. Either way it changed nothing (checked by `zombie`).
    assert all(o.endswith(("rc 5", "rc 4")) for o in outcomes), outcomes
    r.finish("after two zombies")
    f = r.oracle.figures
    assert (f.rows_lost, f.rows_duplicated, f.wrong_values) == (0, 0, 0), f
    assert f.fenced_zombies >= 2, f
