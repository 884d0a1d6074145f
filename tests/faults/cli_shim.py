"""`python -m tests.faults.cli_shim <cdc args>`: the real `cdc` CLI with two test seams.

- `CDC_MERGE_SERVER=host:port`: the merge step's `spark-submit merge_window.py <args>` is sent to the
  fault suite's merge server (tests/faults/merge_server.py, one Spark JVM for the whole suite) instead
  of starting a JVM per window. Everything else `Pipeline.merge_locally` does (manifest check, lease
  renew, exit-code handling, the error it raises) runs unchanged.
- `CDC_TEST_ZK_SESSION_FILE=<path>`: the ZooKeeper session id and password of the CLI's client are
  written there (and rewritten on every new session), so a test can expire that session from outside.

Without those variables this is exactly `cdc` (cdc_core.cli:main).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from typing import Any


def _patch_merge(address: str) -> None:
    import cdc_core.run.pipeline as pipeline
    from tests.faults.merge_server import request_merge

    real_run = subprocess.run
    job = str(pipeline.MERGE_JOB)

    def run(cmd: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(cmd, list) and cmd and cmd[0] == "spark-submit" and job in cmd:
            app_args = cmd[cmd.index(job) + 1 :]
            answer = request_merge(address, app_args)
            return subprocess.CompletedProcess(cmd, answer["rc"], answer["stdout"], answer["stderr"])
        return real_run(cmd, *args, **kwargs)

    pipeline.subprocess = types.SimpleNamespace(**{**vars(subprocess), "run": run})  # type: ignore[assignment]


def _patch_session_file(path: str) -> None:
    from kazoo.protocol.states import KazooState

    import cdc_core.run.pipeline as pipeline

    real = pipeline.make_zk_client

    def make(*args: Any, **kwargs: Any) -> Any:
        client = real(*args, **kwargs)

        def write(_state: Any = None) -> None:
            session_id, password = client.client_id or (None, b"")
            if session_id is None:
                return
            tmp = f"{path}.tmp"
            with open(tmp, "w") as f:
                json.dump({"session_id": session_id, "password": password.hex(), "pid": os.getpid()}, f)
            os.replace(tmp, path)

        write()
        client.add_listener(lambda state: write() if state == KazooState.CONNECTED else None)
        return client

    pipeline.make_zk_client = make


def main() -> int:
    if os.environ.get("CDC_MERGE_SERVER"):
        _patch_merge(os.environ["CDC_MERGE_SERVER"])
    if os.environ.get("CDC_TEST_ZK_SESSION_FILE"):
        _patch_session_file(os.environ["CDC_TEST_ZK_SESSION_FILE"])
    from cdc_core.cli import main as cdc_main

    return cdc_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
