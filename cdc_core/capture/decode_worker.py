"""Worker processes that decode binlog slices (`rowdecode.decode_slice`) in parallel with the reader.

A window's row images are cut into transaction-aligned slices by the reader (the one process that
talks to the server); decoding them is pure CPU, in Python, so it runs in other processes. Each worker
is `python -m cdc_core.capture.decode_worker`, fed pickled jobs on stdin and answering pickled results (or the
exception) on stdout, one at a time. Plain pipes rather than multiprocessing: nothing is forked from
the reader (which may run threads: Airflow, kazoo, the Parquet writer) and no `__main__` module is
re-imported in the workers.

Jobs go to the workers round-robin and results are taken in submission order, so the reader can
number changes in binlog order; each worker holds at most one job.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import os
import pickle
import struct
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from typing import IO, Any

from cdc_core.model.errors import SourceError
from cdc_core.model.layout import PROJECT_ROOT

_LEN = struct.Struct("<Q")


def _send(pipe: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(_LEN.pack(len(data)))
    pipe.write(data)
    pipe.flush()


def _receive(pipe: IO[bytes]) -> Any:
    head = pipe.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError
    (size,) = _LEN.unpack(head)
    data = pipe.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)  # noqa: S301 - our own child process, over its own pipe


class WorkerPool:
    """`workers` decoder processes; `submit(job)` returns a callable that waits for the result."""

    def __init__(self, workers: int) -> None:
        env = dict(os.environ)
        # The workers import the same cdc_core as this process.
        root = str(PROJECT_ROOT)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-m", "cdc_core.capture.decode_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
            for _ in range(workers)
        ]
        self.next = 0
        self.waiting: list[deque[int]] = [deque() for _ in self.procs]  # job numbers per worker
        self.results: dict[int, Any] = {}
        self.submitted = 0

    def _collect(self, w: int) -> None:
        """Read the oldest outstanding result of worker `w`."""
        proc = self.procs[w]
        job = self.waiting[w].popleft()
        try:
            ok, value = _receive(proc.stdout)  # type: ignore[arg-type]
        except (EOFError, OSError) as e:
            raise SourceError(
                f"a binlog decoder worker (pid {proc.pid}) stopped ({proc.poll()}): {e or 'no answer'}; "
                "re-run the stage step (see the task log for the worker's error)"
            ) from None
        self.results[job] = (ok, value)

    def submit(self, job: Any) -> Callable[[], Any]:
        w = self.next
        self.next = (w + 1) % len(self.procs)
        while self.waiting[w]:  # at most one job per worker: its pipe never holds more than one
            self._collect(w)
        number = self.submitted
        self.submitted += 1
        try:
            _send(self.procs[w].stdin, job)  # type: ignore[arg-type]
        except OSError as e:
            raise SourceError(
                f"a binlog decoder worker (pid {self.procs[w].pid}) is gone ({e}); re-run the stage step"
            ) from e
        self.waiting[w].append(number)

        def result() -> Any:
            while number not in self.results:
                self._collect(w)
            ok, value = self.results.pop(number)
            if not ok:
                raise value
            return value

        return result

    def shutdown(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # type: ignore[union-attr]
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            with contextlib.suppress(OSError):
                proc.stdout.close()  # type: ignore[union-attr]


class _NoPandas(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("a decode worker does not load pandas")


def main() -> int:
    """The worker: decode jobs from stdin until it closes."""
    # pyarrow imports pandas (about a second) the first time it converts a Python object, only to ask
    # whether it is a pandas object; a worker has none.
    sys.meta_path.insert(0, _NoPandas())
    from cdc_core.capture.rowdecode import decode_slice

    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # anything printed must not corrupt the result stream
    while True:
        try:
            job = _receive(inp)
        except EOFError:
            return 0
        try:
            answer: tuple[bool, Any] = (True, decode_slice(job))
        except Exception as e:
            answer = (False, e)
        try:
            _send(out, answer)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            _send(out, (False, SourceError(f"decoder worker: cannot return the result: {e}")))


if __name__ == "__main__":
    raise SystemExit(main())
