"""History (SCD type 2) and change-log tables (cdc_core.model.output_modes) against the reference model
(tests/support/output_model.py): random change streams cut into windows, each window merged, some merged again
(a replay), a merge stopped between the change log and the history (a crash), and a backfill that delivers a
suffix of the stream again in new windows. After every window the state, history and change log equal the model
of what the lake has been given, row for row.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdc_core.model.errors import CdcError
from cdc_core.model.layout import changelog_uri, history_uri, table_uri
from cdc_core.model.merge_semantics import STATUS_ALREADY
from spark_apps.merge import merge_window
from tests.support.output_model import Change, Model
from tests.support.staged_builder import Col, VersionClock, WindowBuilder

pytestmark = pytest.mark.integration

PIPE = "shop"
TOKEN = 0x36
COLS = [Col("id", pa.int32(), "INT"), Col("tier", pa.string(), "STRING"), Col("visits", pa.int64(), "BIGINT")]
TABLES = {  # table -> (table options, the model's tracked columns)
    "every": ({"outputs": ["state", "history", "changelog"]}, ()),
    "tracked": ({"outputs": ["state", "history"], "track": ["tier"]}, ("tier",)),
}


def stream(rng: random.Random, clock: VersionClock, n: int) -> list[Change]:
    """n changes over 5 ids: inserts of absent ids, updates (some changing only `visits`, some nothing), deletes."""
    live: dict[int, dict[str, Any]] = {}
    out: list[Change] = []
    while len(out) < n:
        i = rng.randrange(5)
        version = clock()
        ts = VersionClock.commit_ts(version)
        if i not in live:
            live[i] = {"id": i, "tier": rng.choice(["gold", "silver", None]), "visits": rng.randrange(3)}
            out.append(("I", dict(live[i]), version, ts))
        elif rng.random() < 0.2:
            out.append(("D", live.pop(i), version, ts))
        else:
            row = dict(live[i])
            pick = rng.random()
            if pick < 0.4:
                row["visits"] += 1
            elif pick < 0.8:
                row["tier"] = rng.choice(["gold", "silver", "bronze", None])
            live[i] = row  # else: an update that changes nothing
            out.append(("U", dict(row), version, ts))
    return out


class Lake:
    def __init__(self, spark: Any, staging: Path, root: Path) -> None:
        self.spark, self.staging, self.root = spark, staging, str(root)
        self.options = {f"shop.{t}": opts for t, (opts, _) in TABLES.items()}

    def merge(self, seq: int, changes: list[Change], **kw: Any) -> dict[str, Any]:
        w = WindowBuilder(self.staging, PIPE, seq)
        for table in TABLES:
            w.file("shop", table, ("id",), COLS, [(op, row, version) for op, row, version, _ in changes])
        manifest, wdir = w.build()
        return merge_window(self.spark, manifest, wdir, self.root, PIPE, seq, TOKEN, table_options=self.options, **kw)

    def read(self, uri: str) -> list[dict[str, Any]]:
        return [r.asDict() for r in self.spark.read.format("delta").load(uri).collect()]

    def check(self, given: list[Change], when: str) -> None:
        """Each table's state, history and change log equal the model of the changes given so far (in binlog
        order, each once: what the source did)."""
        ordered = sorted({c[2]: c for c in given}.values(), key=lambda c: c[2])
        for table, (opts, track) in TABLES.items():
            model = Model(("id",), track).apply(ordered)
            state = {r["id"]: {c.name: r[c.name] for c in COLS} for r in self.read(table_uri(self.root, "shop", table))}
            assert state == {k[0]: v for k, v in model.state.items()}, (table, when)
            got = sorted(
                ((r["id"], r["tier"], r["visits"], r["_cdc_op"], r["_cdc_valid_from_version"],
                  r["_cdc_valid_to_version"], r["_cdc_is_current"], r["_cdc_last_version"], r["_cdc_valid_from"],
                  r["_cdc_valid_to"])
                 for r in self.read(history_uri(self.root, "shop", table))),
                key=lambda r: (r[0], r[4]),
            )
            want = sorted(
                ((v.row["id"], v.row["tier"], v.row["visits"], v.op, v.valid_from, v.valid_to, v.valid_to is None,
                  v.last_version, naive(v.valid_from_ts), naive(v.valid_to_ts))
                 for v in model.history),
                key=lambda r: (r[0], r[4]),
            )
            assert got == want, (table, when)
            if "changelog" in opts["outputs"]:
                log = sorted(((r["_cdc_version"], r["_cdc_op"], r["id"], r["tier"], r["visits"])
                              for r in self.read(changelog_uri(self.root, "shop", table))), key=repr)
                assert log == sorted(((v, op, row["id"], row["tier"], row["visits"]) for op, row, v in model.changelog),
                                     key=repr), (table, when)


def naive(ts: Any) -> Any:
    """A commit time as Spark returns a TIMESTAMP (the session's zone is UTC: tests/conftest.py)."""
    return None if ts is None else ts.replace(tzinfo=None)


def test_history_and_changelog_equal_the_model_under_replays_crashes_and_backfills(spark, tmp_path, monkeypatch):
    rng = random.Random(1)
    changes = stream(rng, VersionClock(), 60)
    lake = Lake(spark, tmp_path / "staging", tmp_path / "lake")
    cuts = sorted(rng.sample(range(1, len(changes)), 3))
    windows = [changes[a:b] for a, b in zip([0, *cuts], [*cuts, len(changes)], strict=True)]
    given: list[Change] = []
    seq = 0
    for i, w in enumerate(windows):
        seq += 1
        if i == 2:  # the job stops after the history and change log committed, before the state: the replay lands it
            monkeypatch.setenv("CDC_FAULT", "mid_outputs")
            monkeypatch.setenv("CDC_FAULT_ACTION", "raise:LakeError")
            with pytest.raises(CdcError, match="mid_outputs"):
                lake.merge(seq, w)
            monkeypatch.delenv("CDC_FAULT")
        lake.merge(seq, w)
        given += w
        lake.check(given, f"window {seq}")
        if i == 1:  # the same window again: every table and output already holds it
            again = lake.merge(seq, w)
            for r in again["tables"].values():
                assert r["status"] == STATUS_ALREADY
                assert {o["status"] for o in (r.get("history"), r.get("changelog")) if o} <= {STATUS_ALREADY}
            lake.check(given, f"window {seq} again")
    # A backfill from a point in the stream: its changes again, in new windows cut elsewhere.
    since = rng.randrange(len(changes))
    for part in (changes[since:since + 9], changes[since + 9:]):
        if part:
            seq += 1
            lake.merge(seq, part)
            lake.check(given, f"backfill window {seq}")
