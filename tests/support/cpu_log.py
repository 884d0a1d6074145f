"""What each test costs in CPU (CDC_TEST_CPU_LOG=<file.jsonl>): the CPU seconds of the test process's whole
tree (itself, its Spark session and merge servers, every subprocess it waited for) over each test's setup,
call and teardown, one JSON line per test. The suite is CPU-bound on 2 cores, so this, not a test's wall
time (which includes waiting while the other worker computes), is what a test costs the suite.
`python -m tests.support.cpu_log <file.jsonl>` prints the costliest modules and tests."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stats() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, CPU-s of the process and its reaped children)."""
    out: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2:].split()
        out[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / _TICK)
    return out


def tree_cpu(root: int | None = None) -> float:
    root = root or os.getpid()
    stats = _stats()
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _) in stats.items():
        children[ppid].append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo.extend(children.get(pid, ()))
    return total


class CpuLog:
    def __init__(self, path: str) -> None:
        self.path = path

    def around(self, nodeid: str) -> Iterator[None]:
        cpu0, t0 = tree_cpu(), time.monotonic()
        yield
        line = {"test": nodeid, "cpu": round(tree_cpu() - cpu0, 2), "wall": round(time.monotonic() - t0, 2),
                "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")


def report(path: str, top: int = 40) -> None:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    mods: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        m = mods[r["test"].split("::")[0]]
        m[0] += r["cpu"]
        m[1] += r["wall"]
        m[2] += 1
    print(f"{len(rows)} tests, {sum(r['cpu'] for r in rows):.0f} CPU-s, {sum(r['wall'] for r in rows):.0f} s")
    print("   CPU-s  wall-s tests module")
    for name, (cpu, wall, n) in sorted(mods.items(), key=lambda x: -x[1][0])[:top]:
        print(f"{cpu:8.0f} {wall:7.0f} {n:5d} {name}")
    print("\n   CPU-s  wall-s test")
    for r in sorted(rows, key=lambda r: -r["cpu"])[:top]:
        print(f"{r['cpu']:8.0f} {r['wall']:7.0f} {r['test'][:150]}")


if __name__ == "__main__":
    report(sys.argv[1])
