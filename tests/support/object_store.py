"""An S3-compatible object store for tests (scripts/object_store.sh: S3Proxy on a free loopback port, its
own directory under .local/, stopped by PID): used by tests/integration/test_object_store.py and the
production-shape tests (tests/e2e/test_production_airflow.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "object_store.sh"
BUCKET = "cdc"


class ObjectStore:
    def __init__(self) -> None:
        self.dir = ROOT / ".local" / f"object-store-test-{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        self.env = {**os.environ, "CDC_OBJECT_STORE_DIR": str(self.dir), "CDC_OBJECT_STORE_PORT": str(self.port),
                    "CDC_OBJECT_STORE_BUCKETS": BUCKET}

    def script(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SCRIPT), *args], env=self.env, capture_output=True, text=True, timeout=300,
                              check=False)

    def start(self) -> None:
        started = self.script("start")
        assert started.returncode == 0, started.stderr[-3000:]

    def stop(self) -> None:
        stopped = self.script("stop")
        assert stopped.returncode == 0, stopped.stderr[-3000:]
        assert "running" not in self.script("status").stdout

    @property
    def connection(self) -> str:
        """The Airflow connection (type aws) as AIRFLOW_CONN_<ID> JSON."""
        out = self.script("conn")
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    @property
    def secret(self) -> str:
        return str(json.loads(self.connection)["password"])

    def url(self, *parts: str) -> str:
        """s3://cdc/<parts>: a root inside the store's bucket."""
        return "/".join([f"s3://{BUCKET}", *parts])

    def objects(self, prefix: str = "") -> list[str]:
        """Keys under `prefix` in the bucket, relative to it, read from the store's own files (the filesystem
        backend)."""
        base = self.dir / "data" / BUCKET / prefix
        return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())

    def files(self) -> Iterator[Path]:
        yield from (p for p in self.dir.rglob("*") if p.is_file() and p.name not in ("credentials", "s3proxy.conf"))


@contextmanager
def running_object_store() -> Iterator[ObjectStore]:
    store = ObjectStore()
    store.start()
    try:
        yield store
    finally:
        store.stop()
        shutil.rmtree(store.dir, ignore_errors=True)


def fs_for(store: ObjectStore) -> Any:
    """An s3fs filesystem on the store (the test's own view, not the product's)."""
    import s3fs

    conn = json.loads(store.connection)
    return s3fs.S3FileSystem(key=conn["login"], secret=conn["password"],
                             client_kwargs={"endpoint_url": conn["extra"]["endpoint_url"], "region_name": "us-east-1"})


def commit_engines(store: ObjectStore, uri: str) -> list[str]:
    """Who wrote each commit of the Delta table at `uri` on the store, oldest first: "delta-rs" (its
    clientVersion) or "spark" (Spark's engineInfo)."""
    from deltalake import DeltaTable

    conn = json.loads(store.connection)
    table = DeltaTable(uri, storage_options={
        "AWS_ACCESS_KEY_ID": conn["login"], "AWS_SECRET_ACCESS_KEY": conn["password"], "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": conn["extra"]["endpoint_url"], "AWS_ALLOW_HTTP": "true",
    })
    return ["delta-rs" if str(h.get("clientVersion", "")).startswith("delta-rs") else "spark"
            for h in reversed(table.history())]
