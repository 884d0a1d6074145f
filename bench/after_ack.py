"""What the after-ack staging pass costs an ack, with a retention's worth of windows staged (issue 39 §4).

`--windows` windows are planned and acked through a real ZooKeeper (the dev services': CDC_ZK_PORT), each
staged as a window directory with a manifest and a merge report beside it, all acked "now", so all within the
retention: what every ack of a steady pipeline sees (4,320 windows: 72 h of one-minute windows). Then
`--acks` after-ack passes (`clean_staging` as `cleanup_after_ack` calls it), timed each:

- `listing every ack`: without the due note (the pass before ee315e7: it listed staging on every ack);
- `due note`: the pass as it is (the first one lists and writes the note; the others read the note only).

On local disk, and with `--object-store` also on S3Proxy (tests/support/object_store.py), where a listing is
one LIST request per 1,000 names.

    python -m bench.after_ack --windows 4320 --acks 20 [--object-store]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import ROOT, load_avg, log, now_iso

OUT_JSON = ROOT / "bench" / "results-after-ack.json"


def _stage(storage: Any, staging_root: str, unit: str, seqs: range) -> None:
    """A window directory (a manifest and one part) and a merge report per window, written as the product
    names them; their content does not matter to the pass, which lists names."""
    from cdc_core.lake.staging_store import StagingStore
    from cdc_core.model import layout

    store = StagingStore(staging_root, storage)
    base = f"{store.root}/{layout.unit_dir(unit)}"
    if store.local:
        for seq in seqs:
            wdir = Path(f"{base}/w{seq:010d}")
            wdir.mkdir(parents=True)
            (wdir / "manifest.json").write_text("{}")
            (wdir / "part-00000.parquet").write_bytes(b"x")
            Path(f"{base}/reports").mkdir(exist_ok=True)
            Path(f"{base}/reports/{layout.merge_report_name(seq, 0x1a)}").write_text("{}")
        return
    payload = {}
    for seq in seqs:
        payload[f"{base}/w{seq:010d}/manifest.json"] = b"{}"
        payload[f"{base}/w{seq:010d}/part-00000.parquet"] = b"x"
        payload[f"{base}/reports/{layout.merge_report_name(seq, 0x1a)}"] = b"{}"
    store.fs.pipe(payload)


def _measure(label: str, coordinator: Any, grant: Any, staging_root: str, storage: Any, acks: int,
             slack: float | None) -> dict[str, Any]:
    from cdc_core.run.housekeeping import AFTER_ACK_MAX_WINDOWS
    from cdc_core.run.staging_cleanup import clean_staging

    seconds = []
    for _ in range(acks):
        t0 = time.perf_counter()
        out = clean_staging(coordinator, grant, staging_root, 72 * 3600.0, stop_at_first_kept=True,
                            max_windows=AFTER_ACK_MAX_WINDOWS, storage=storage, due_slack_seconds=slack)
        seconds.append(time.perf_counter() - t0)
        assert out["windows_deleted"] == 0
    res = {"pass": label, "acks": acks, "first_s": round(seconds[0], 4),
           "median_s": round(statistics.median(seconds), 4), "max_s": round(max(seconds), 4)}
    log(f"after_ack: {res}")
    return res


def run_on(storage: Any, staging_root: str, zk: Any, windows: int, acks: int, where: str) -> list[dict[str, Any]]:
    from cdc_core.coordination import PipelineCoordinator
    from cdc_core.model import retention
    from cdc_core.model.positions import BinlogPosition, ServerIdentity
    from cdc_core.model.window_plan import WindowPlan

    unit = f"after_ack_{uuid.uuid4().hex[:6]}"
    root = f"/bench-after-ack-{uuid.uuid4().hex[:6]}"
    c = PipelineCoordinator(zk, root, unit)
    try:
        grant = c.acquire("bench", 10**9)

        def pos(i: int) -> BinlogPosition:
            return BinlogPosition("mysql-bin.000001", 4 + i * 100, ServerIdentity("mariadb", 1))

        c.set_start(grant, pos(1))
        t0 = time.perf_counter()
        for seq in range(1, windows + 1):
            c.store_plan(grant, WindowPlan(unit, seq, pos(seq), pos(seq + 1), transactions=1, events=1))
            c.ack_window(grant, seq, {})
        log(f"after_ack: {windows} windows acked in ZooKeeper in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        _stage(storage, staging_root, unit, range(1, windows + 1))
        log(f"after_ack: {windows} windows staged ({where}) in {time.perf_counter() - t0:.1f} s")
        slack = retention.staging_pass_slack_seconds(72 * 3600.0, 600)
        rows = [_measure("listing every ack", c, grant, staging_root, storage, acks, None),
                _measure("due note", c, grant, staging_root, storage, acks, slack)]
        for r in rows:
            r |= {"where": where, "windows_staged": windows}
        return rows
    finally:
        c.close()
        zk.delete(root, recursive=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--windows", type=int, default=4320)
    ap.add_argument("--acks", type=int, default=20)
    ap.add_argument("--object-store", action="store_true", help="also on S3Proxy")
    ap.add_argument("--zk", default=f"127.0.0.1:{os.environ.get('CDC_ZK_PORT', '2181')}")
    args = ap.parse_args()
    from kazoo.client import KazooClient

    from cdc_core.lake.object_store import AMBIENT, Storage, from_env

    zk = KazooClient(hosts=args.zk)
    zk.start(timeout=15)
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        stack.callback(zk.stop)
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-after-ack-"))
        rows += run_on(AMBIENT, tmp, zk, args.windows, args.acks, "local disk")
        if args.object_store:
            from tests.support.object_store import running_object_store

            store = stack.enter_context(running_object_store())
            conn = json.loads(store.connection)
            storage = Storage(from_env({"AWS_ACCESS_KEY_ID": conn["login"], "AWS_SECRET_ACCESS_KEY": conn["password"],
                                        "AWS_ENDPOINT_URL": conn["extra"]["endpoint_url"]}))
            rows += run_on(storage, store.url("staging"), zk, args.windows, args.acks, "object store (S3Proxy)")
    out = {"date": now_iso(), "load": load_avg(), "windows": args.windows, "acks": args.acks, "rows": rows}
    OUT_JSON.write_text(json.dumps(out, indent=2) + "\n")
    log(f"after_ack: written {OUT_JSON}")


if __name__ == "__main__":
    main()
