"""A job's writer threads: items (the merge's tables and groups of schema changes, the maintenance's tables)
handed to up to `parallelism` threads, each with its own Spark session (`spark.newSession()`: same SparkContext,
own SQL conf, so each writer's txn identity and commit metadata are its own)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from cdc_core.model.errors import Fenced

T = TypeVar("T")
R = TypeVar("R")


def in_threads(
    run: Any,
    items: Sequence[T],
    parallelism: int,
    action: Callable[[Any, T], R],
    after_each: Callable[[int], None] | None = None,
    *,
    fork: Callable[[Any], Any] | None = None,
) -> list[R | None]:
    """`action(run_copy, item)` for every item, on up to `parallelism` threads; the results in the items' order.
    `run_copy` is `fork(run)` (default: the dataclass `run` with `spark=run.spark.newSession()`), one per thread.
    `after_each(n)`: called after the n-th item done (the crash suite's fault point). The first error stops the
    other threads from taking more items and is raised: a fencing verdict first (exit code 5 tells the caller
    it is a zombie), else the error of the earliest item."""
    work: queue.Queue[int] = queue.Queue()
    for i in range(len(items)):
        work.put(i)
    results: list[R | None] = [None] * len(items)
    errors: list[tuple[int, BaseException]] = []
    finished = [0]
    lock = threading.Lock()
    stop = threading.Event()

    def worker() -> None:
        # own SQL conf: own txn identity
        mine = fork(run) if fork is not None else replace(run, spark=run.spark.newSession())
        while not stop.is_set():
            try:
                i = work.get_nowait()
            except queue.Empty:
                return
            try:
                result = action(mine, items[i])
                with lock:
                    results[i] = result
                    finished[0] += 1
                    n = finished[0]
                if after_each is not None:
                    after_each(n)
            except BaseException as e:  # re-raised by the caller
                with lock:
                    errors.append((i, e))
                stop.set()
                return

    threads = [threading.Thread(target=worker, name=f"cdc-writer-{i}", daemon=True)
               for i in range(min(parallelism, len(items)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        fenced = [e for _, e in errors if isinstance(e, Fenced)]
        raise fenced[0] if fenced else min(errors, key=lambda x: x[0])[1]
    return results
