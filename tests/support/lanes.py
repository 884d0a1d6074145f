"""The waiting lane: one extra pytest-xdist worker for the test modules that spend most of their time waiting on
other processes (a real Airflow scheduler, a Spark standalone cluster, an object store restarting), so that their
waiting overlaps the CPU-bound modules the two main workers run instead of adding to them.

scripts/test.sh runs the suite on CDC_TEST_WORKERS main workers plus this lane (CDC_TEST_LANE=1, the default):
the last worker (gwN, N = the main workers) takes only the modules of WAITING_MODULES, the others take every
other module, a module at a time (xdist's loadfile), in collection order. If the lane's worker dies, the main
workers take what it left. Three CPU-bound workers on two cores were slower than two (more JVMs and Spark
sessions at once); the lane's modules use about 40% of a core over their wall time (CDC_TEST_CPU_LOG, 2026-12-01:
e.g. the production cycle 138 CPU-s in 305 s).
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler.loadfile import LoadFileScheduling

LANE_ENV = "CDC_TEST_LANE"

# Modules whose wall time is mostly waiting (CPU-s of their process tree against their wall time, CI 2026-12-01).
WAITING_MODULES = (
    "tests/e2e/test_production_airflow.py",  # 138 CPU-s / 305 s: a real scheduler, a cluster, an object store
    "tests/cluster/test_spark_cluster.py",  # 40 / 81: a standalone cluster's master, workers and executors
    "tests/faults/test_fault_infra.py",  # 21 / 45: services stopped and restarted
    "tests/integration/test_warm_merge.py",  # 5 / 19: a merge server started, stopped, restarted
    "tests/integration/test_object_store_isolation.py",  # 3 / 15: two object stores
    "tests/integration/test_small_writer_object_store.py",  # 3 / 14: an object store
)


def lane_worker(numprocesses: int) -> str:
    """The lane's worker id: the last of `numprocesses` (the main workers are gw0 .. gw(N-2))."""
    return f"gw{numprocesses - 1}"


def in_lane(scope: str) -> bool:
    return scope.split("::", 1)[0] in WAITING_MODULES


class LaneScheduling(LoadFileScheduling):
    """xdist's loadfile scheduling, with the waiting modules kept to the lane's worker and the rest to the others."""

    def __init__(self, config: Any, log: Any = None, *, lane: str) -> None:
        super().__init__(config, log)
        self.lane = lane

    def _lane_alive(self) -> bool:
        return any(self._node_id(n) == self.lane for n in self.nodes)

    @staticmethod
    def _node_id(node: Any) -> str:
        return str(node.gateway.id)

    def takes(self, node: Any, scope: str) -> bool:
        if not self._lane_alive():  # the lane's worker died: its modules are everyone's
            return True
        return in_lane(scope) == (self._node_id(node) == self.lane)

    def _assign_work_unit(self, node: Any) -> None:
        scope = next((s for s in self.workqueue if self.takes(node, s)), None)
        if scope is None:
            node.shutdown()
            return
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(nodeid) for nodeid, done in work_unit.items() if not done])

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        if not any(self.takes(node, s) for s in self.workqueue):
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) > 2:  # xdist's heuristic: keep two units queued
            return
        self._assign_work_unit(node)
