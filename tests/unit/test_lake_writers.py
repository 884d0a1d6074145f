"""One writer per lake table (cdc_core.model.lake_writers): the overlap rule `cdc validate` applies, the writer
record."""

from __future__ import annotations

import fnmatch
import itertools
from dataclasses import dataclass, field

import pytest

from cdc_core.model.lake_writers import names_overlap, overlaps, writer_pipeline, writer_value
from cdc_core.model.naming import NamePattern, parse_table_pattern

pytestmark = pytest.mark.unit


def side(text: str) -> NamePattern:
    return parse_table_pattern(f"s.{text}")[1]


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("orders", "orders", True),
        ("orders", "order", False),
        ("ord*", "*ers", True),
        ("a*", "b*", False),
        ("[0-9]x", "?x", True),
        ("[!a]", "a", False),
        ("[a-c]", "[!abc]", False),
        ("shop_[0-9][0-9]", "shop_1?", True),
        ("shop_[0-9][0-9]", "shop_1", False),
        ("*a*b*", "*b*a*", True),
        ("`a*b`", "a?b", True),  # a literal name with a glob character, matched by a glob
        ("`a*b`", "`a?b`", False),
        ("x[", "x[", True),  # an unclosed bracket is a literal
    ],
)
def test_names_overlap_with_a_witness_both_sides_match(a: str, b: str, overlap: bool) -> None:
    pa, pb = side(a), side(b)
    witness = names_overlap(pa, pb)
    assert (witness is not None) == overlap
    if witness is not None:
        assert pa.matches(witness) and pb.matches(witness)


def test_names_overlap_agrees_with_brute_force_over_short_names() -> None:
    """Every name of up to 3 characters over a small alphabet: the search finds an overlap exactly when one exists
    among them (the globs here cannot need longer names to meet)."""
    globs = ["a*", "*b", "?", "??", "a?b", "[ab]*", "[!a]?", "*", "ab", "b[a-b]", "*a*"]
    names = ["".join(t) for n in range(4) for t in itertools.product("abc", repeat=n)]
    for a, b in itertools.product(globs, repeat=2):
        brute = any(fnmatch.fnmatchcase(n, a) and fnmatch.fnmatchcase(n, b) for n in names)
        assert (names_overlap(side(a), side(b)) is not None) == brute, (a, b)


@dataclass
class Tables:
    include: list[str]
    exclude: list[str] = field(default_factory=list)


@dataclass
class P:
    name: str
    include: list[str]
    exclude: list[str] = field(default_factory=list)
    lake_root: str = "/lake"

    @property
    def tables(self) -> Tables:
        return Tables(self.include, self.exclude)


def test_two_pipelines_over_one_table_of_one_lake_root_are_refused_naming_both() -> None:
    found = overlaps([P("east", ["shop.orders"]), P("west", ["shop.*"])])
    assert len(found) == 1
    msg = found[0].message()
    assert "'east'" in msg and "'west'" in msg and "shop.orders" in msg and "/lake" in msg and "lake_root" in msg


def test_other_lake_roots_disjoint_patterns_and_excluded_literals_pass() -> None:
    assert overlaps([P("a", ["shop.orders"]), P("b", ["shop.orders"], lake_root="/other")]) == []
    assert overlaps([P("a", ["shop.orders_*"]), P("b", ["shop.items_*"])]) == []
    assert overlaps([P("a", ["shop.*"], exclude=["shop.orders"]), P("b", ["shop.orders"])]) == []
    assert overlaps([P("a", ["east_*.*"]), P("b", ["west_*.*"])]) == []


def test_two_globs_stay_refused_when_an_exclude_only_removes_one_shared_name() -> None:
    found = overlaps([P("a", ["shop.o*"], exclude=["shop.orders"]), P("b", ["shop.*s"])])
    assert len(found) == 1  # shop.os, shop.outlets, ... are still shared


def test_writer_value_round_trips_and_a_hand_set_value_still_names_a_writer() -> None:
    assert writer_pipeline(writer_value("orders")) == "orders"
    assert writer_pipeline(None) is None and writer_pipeline("") is None
    assert writer_pipeline("someone else") == "someone else"
