"""The fault soak's shapes (tests/faults/soak.py, issue 39 §1): drawn from the seed alone, forced parts win, no
impossible pairing, and the per-shape and per-kind figures add up what the seeds report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.faults import soak
from tests.faults.soak import (
    GROUP_MENU,
    LAKES,
    MENU,
    MERGES,
    PIPELINES,
    SHAPE_STEPS,
    SHARD_COUNTS,
    Shape,
    _by_kind,
    _by_shape,
    draw_shape,
)

pytestmark = pytest.mark.unit


def test_a_seed_draws_the_same_shape_every_time_and_every_kind_occurs() -> None:
    drawn = [draw_shape(seed) for seed in range(1, 201)]
    assert drawn == [draw_shape(seed) for seed in range(1, 201)]  # a failing seed replays from its number
    assert {s.lake for s in drawn} == set(LAKES)
    assert {s.merge for s in drawn} == set(MERGES)
    assert {s.pipeline for s in drawn} == set(PIPELINES)
    assert {s.shards for s in drawn if s.pipeline == "group"} == set(SHARD_COUNTS)
    assert {s.shards for s in drawn if s.pipeline == "single"} == {0}
    # The in-process server has no object-store access: such a seed merges on its own warm server.
    assert not [s for s in drawn if s.lake == "object_store" and s.merge == "inproc"]


def test_forced_parts_override_the_draw_and_keep_the_rest() -> None:
    for seed in range(1, 50):
        free = draw_shape(seed)
        local = draw_shape(seed, lake="local")
        assert (local.lake, local.pipeline) == ("local", free.pipeline)
        if free.lake == "local":
            assert local == free
        assert draw_shape(seed, pipeline="group").merge == free.merge
        assert draw_shape(seed, pipeline="group", shards=3).shards == 3
    assert draw_shape(7, lake="object_store", merge="inproc").merge == "warm"


def test_adding_the_shard_count_left_the_seeds_that_ran_before_it_their_shapes() -> None:
    """The first 22 seeds ran before a group had 2-4 shards (every group then had two; results.json records them
    as group2): each still draws the lake, merge path and pipeline it ran with, and `--shards 2` replays it."""
    ran = json.loads((Path(soak.__file__).parent / "results.json").read_text())["per_seed"]
    assert len(ran) >= 22
    for seed in ran:
        before = seed["seed"] <= 22 and seed["shape"].startswith("group")  # groups then had two shards
        assert draw_shape(seed["seed"], shards=2 if before else None).label == seed["shape"], seed["seed"]
    assert draw_shape(3).label.startswith("group") and draw_shape(3).label != "group+local+inproc"


def test_each_shapes_own_faults_are_drawn_only_where_the_shape_has_the_thing_to_break() -> None:
    def menu(shape: Shape) -> set[str]:
        base = GROUP_MENU if shape.pipeline == "group" else MENU
        return {n for n, _ in base if SHAPE_STEPS.get(n, lambda _s: True)(shape)}

    assert "merge_server_kill" not in menu(Shape("local", "inproc"))
    assert "merge_server_kill" in menu(Shape("local", "warm"))
    assert "object_store_restart" in menu(Shape("object_store", "warm", "group", 3))
    assert "object_store_restart" not in menu(Shape("local", "spark_submit"))
    assert "cluster_worker_kill" in menu(Shape("local", "cluster")) - menu(Shape("local", "spark_submit"))
    assert "merge_driver_kill" in menu(Shape("local", "spark_submit")) & menu(Shape("local", "cluster"))
    assert "merge_driver_kill" not in menu(Shape("local", "warm")) | menu(Shape("local", "inproc"))
    assert "shard_down" in menu(Shape(pipeline="group", shards=2)) and "shard_down" not in menu(Shape())
    # A group's runs are its sources': no scenario that reads one source's records and paths.
    assert not {"zombie", "staging_deleted", "lake_table_deleted"} & menu(Shape(pipeline="group", shards=2))


def _seed(shape: str, ok: bool, steps: list[str], failed_step: str | None = None, **figures: int) -> dict[str, Any]:
    f = {"windows_acked": 0, "rows_compared": 0, "rows_lost": 0, "rows_duplicated": 0, "wrong_values": 0, **figures}
    out: dict[str, Any] = {"shape": shape, "ok": ok, "steps": [{"scenario": s, "outcome": "ok"} for s in steps],
                           "runs": len(steps),
                           "figures": f}
    if failed_step:
        out["failed_step"] = failed_step
    return out


def test_figures_per_shape_and_per_fault_kind_add_up() -> None:
    seeds = [
        _seed("single+local+inproc", True, ["crash_point", "zombie"], windows_acked=3, rows_compared=10),
        _seed("single+local+inproc", False, ["crash_point"], "random_kill", rows_lost=2, wrong_values=1),
        _seed("group2+object_store+warm", True, ["shard_down", "crash_point"], windows_acked=4, rows_compared=7),
    ]
    shapes = _by_shape(seeds)
    assert shapes["single+local+inproc"] == {"seeds": 2, "passed": 1, "steps": 3, "runs": 3, "windows_acked": 3,
                                             "rows_compared": 10, "bad_rows": 3}
    assert shapes["group2+object_store+warm"]["passed"] == 1
    kinds = _by_kind(seeds)
    assert kinds["crash_point"] == {"steps": 3, "seeds": 3, "failed": 0}
    assert kinds["random_kill"] == {"steps": 0, "seeds": 0, "failed": 1}  # the step it failed at, not finished
    assert kinds["shard_down"] == {"steps": 1, "seeds": 1, "failed": 0}


def test_a_soak_continued_in_parts_keeps_the_earlier_seeds_and_their_notes(tmp_path: Path) -> None:
    """`--append`: the figures are over every seed of every part; the notes on failed seeds stay."""
    workload = {"transactions": 3, "rows": 9, "largest_txn_rows": 4}
    first = [{**_seed("single+local+inproc", False, ["zombie"], "zombie", rows_compared=5), "seed": 1,
              "error": "AssertionError: the harness's", "exit_codes": {"0": 1}, "workload": workload}]
    soak.write_results(tmp_path, first, "python -m tests.faults.soak --seeds 1", 60.0, 1)
    earlier = json.loads((tmp_path / "results.json").read_text())
    earlier["notes"] = "Seed 1 failed on the harness: fixed in abc1234."
    second = [{**_seed("group3+local+warm", True, ["shard_down"], windows_acked=2, rows_compared=7), "seed": 2,
               "exit_codes": {"9": 1}, "workload": workload}]
    soak.write_results(tmp_path, [*earlier["per_seed"], *second], "x", 120.0, 2, earlier=earlier)
    both = json.loads((tmp_path / "results.json").read_text())
    assert [s["seed"] for s in both["per_seed"]] == [1, 2] and both["totals"]["rows_compared"] == 12
    assert both["notes"] == earlier["notes"] and both["seeds_failed"] == 1
    md = (tmp_path / "RESULTS.md").read_text()
    assert "fixed in abc1234" in md and "| group3+local+warm | 1 | 1 |" in md
