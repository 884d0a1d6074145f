"""`python -m tests.faults.cli_shim <cdc args>`: the real `cdc` CLI with one test seam.

- `CDC_TEST_ZK_SESSION_FILE=<path>`: the ZooKeeper session id and password of the CLI's client are
  written there (and rewritten on every new session), so a test can expire that session from outside.

Merges go to the fault suite's merge server (tests/faults/merge_server.py, one Spark JVM for the whole
suite) through the product's own warm option: the harness sets `CDC_MERGE_SERVER=host:port`, which
`Pipeline.merge_locally` honours (cdc_core/lake/merge_client.py).

Without that variable this is exactly `cdc` (cdc_core.cli:main).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


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
    if os.environ.get("CDC_TEST_ZK_SESSION_FILE"):
        _patch_session_file(os.environ["CDC_TEST_ZK_SESSION_FILE"])
    from cdc_core.cli import main as cdc_main

    return cdc_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
