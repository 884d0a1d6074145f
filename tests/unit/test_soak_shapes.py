"""The fault soak's shapes (tests/faults/soak.py, issue 39 §1): drawn from the seed alone, forced parts win, no
impossible pairing, and the per-shape and per-kind figures add up what the seeds report."""

from __future__ import annotations

from typing import Any

import pytest

from tests.faults.soak import (
    GROUP_MENU,
    LAKES,
    MENU,
    MERGES,
    PIPELINES,
    SHAPE_STEPS,
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
    assert draw_shape(7, lake="object_store", merge="inproc").merge == "warm"


def test_each_shapes_own_faults_are_drawn_only_where_the_shape_has_the_thing_to_break() -> None:
    def menu(shape: Shape) -> set[str]:
        base = GROUP_MENU if shape.pipeline == "group" else MENU
        return {n for n, _ in base if SHAPE_STEPS.get(n, lambda _s: True)(shape)}

    assert "merge_server_kill" not in menu(Shape("local", "inproc"))
    assert "merge_server_kill" in menu(Shape("local", "warm"))
    assert "object_store_restart" in menu(Shape("object_store", "warm", "group"))
    assert "object_store_restart" not in menu(Shape("local", "spark_submit"))
    assert "cluster_worker_kill" in menu(Shape("local", "cluster")) - menu(Shape("local", "spark_submit"))
    assert "shard_down" in menu(Shape(pipeline="group")) and "shard_down" not in menu(Shape())
    # A group's runs are its sources': no scenario that reads one source's records and paths.
    assert not {"zombie", "staging_deleted", "lake_table_deleted"} & menu(Shape(pipeline="group"))


def _seed(shape: str, ok: bool, steps: list[str], failed_step: str | None = None, **figures: int) -> dict[str, Any]:
    f = {"windows_acked": 0, "rows_compared": 0, "rows_lost": 0, "rows_duplicated": 0, "wrong_values": 0, **figures}
    out: dict[str, Any] = {"shape": shape, "ok": ok, "steps": [{"scenario": s} for s in steps], "runs": len(steps),
                           "figures": f}
    if failed_step:
        out["failed_step"] = failed_step
    return out


def test_figures_per_shape_and_per_fault_kind_add_up() -> None:
    seeds = [
        _seed("single+local+inproc", True, ["crash_point", "zombie"], windows_acked=3, rows_compared=10),
        _seed("single+local+inproc", False, ["crash_point"], "random_kill", rows_lost=2, wrong_values=1),
        _seed("group+object_store+warm", True, ["shard_down", "crash_point"], windows_acked=4, rows_compared=7),
    ]
    shapes = _by_shape(seeds)
    assert shapes["single+local+inproc"] == {"seeds": 2, "passed": 1, "steps": 3, "runs": 3, "windows_acked": 3,
                                             "rows_compared": 10, "bad_rows": 3}
    assert shapes["group+object_store+warm"]["passed"] == 1
    kinds = _by_kind(seeds)
    assert kinds["crash_point"] == {"steps": 3, "seeds": 3, "failed": 0}
    assert kinds["random_kill"] == {"steps": 0, "seeds": 0, "failed": 1}  # the step it failed at, not finished
    assert kinds["shard_down"] == {"steps": 1, "seeds": 1, "failed": 0}
