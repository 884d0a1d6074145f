"""The suite's waiting lane (tests/support/lanes.py): which xdist worker gets which module."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.lanes import WAITING_MODULES, LaneScheduling, lane_worker

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LANE = WAITING_MODULES[:2]
MAIN = tuple(f"tests/integration/test_{c}.py" for c in "abcdefgh")


class Node:
    def __init__(self, worker: str) -> None:
        self.gateway = SimpleNamespace(id=worker)
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def _scheduler(workers: int = 3) -> tuple[LaneScheduling, list[Node], list[str]]:
    config: Any = SimpleNamespace(getvalue=lambda name: [f"{workers}*popen"] if name == "tx" else None,
                                  option=SimpleNamespace(loadscopereorder=False))
    sched = LaneScheduling(config, lane=lane_worker(workers))
    nodes = [Node(f"gw{i}") for i in range(workers)]
    modules = (*MAIN[:2], LANE[0], *MAIN[2:5], LANE[1], *MAIN[5:])
    collection = [f"{m}::test_{i}" for m in modules for i in range(2)]
    for n in nodes:
        sched.add_node(n)  # type: ignore[arg-type]
        sched.add_node_collection(n, collection)  # type: ignore[arg-type]
    sched.schedule()
    return sched, nodes, collection


def _modules(node: Node, collection: list[str]) -> set[str]:
    return {collection[i].split("::")[0] for i in node.sent}


def _finish(sched: LaneScheduling, node: Node) -> None:
    for index in list(node.sent):
        scope = sched.registered_collections[node][index].split("::")[0]  # type: ignore[index]
        if not sched.assigned_work[node][scope][sched.registered_collections[node][index]]:  # type: ignore[index]
            sched.mark_test_complete(node, index)  # type: ignore[arg-type]


def test_the_lane_worker_runs_only_the_waiting_modules_and_the_others_none_of_them() -> None:
    sched, (gw0, gw1, gw2), collection = _scheduler()
    for _ in range(len(MAIN)):
        for n in (gw0, gw1, gw2):
            _finish(sched, n)
    assert _modules(gw2, collection) == set(LANE)
    assert _modules(gw0, collection) | _modules(gw1, collection) == set(MAIN)
    assert not (_modules(gw0, collection) | _modules(gw1, collection)) & set(LANE)
    assert sched.tests_finished and all(n.shutting_down for n in (gw0, gw1, gw2))


def test_the_lane_shuts_down_when_its_modules_are_done_while_the_others_go_on() -> None:
    sched, (gw0, gw1, gw2), _ = _scheduler()
    _finish(sched, gw2)
    assert gw2.shutting_down and not gw0.shutting_down and not gw1.shutting_down
    assert sched.workqueue and not sched.tests_finished


def test_a_dead_lane_worker_leaves_its_modules_to_the_main_workers() -> None:
    sched, (gw0, gw1, gw2), collection = _scheduler()
    sched.remove_node(gw2)  # type: ignore[arg-type]  # crashed with its modules pending
    for _ in range(len(MAIN) + len(LANE)):
        for n in (gw0, gw1):
            _finish(sched, n)
    assert set(LANE) <= _modules(gw0, collection) | _modules(gw1, collection)
    assert sched.tests_finished


def test_the_waiting_modules_exist() -> None:
    assert all((ROOT / m).is_file() for m in WAITING_MODULES)
