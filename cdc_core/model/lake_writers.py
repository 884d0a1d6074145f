"""One writer per lake table: who may merge into a Delta table, and which config files break that rule.

Two pipelines that land the same source table name under one lake root would MERGE into the same Delta
table, comparing `_cdc_version`s that come from two different binlogs: a row of one server then
overwrites, or is blocked by, the row with the same key from the other, and nothing notices. So:

- **At run time** (the merge job, before it writes anything): every Delta table records its writer in
  the table property `cdc.writer` (a JSON object, today `{"pipeline": name}`; room for the sources and
  routes of group pipelines), set when the merge job creates the table. A window whose tables include
  one recorded for another writer fails with a `LakeError` naming the table, its writer and this
  pipeline; nothing of the window is written and the cursor does not move. A table without the property
  (created before this rule, or by hand) is claimed by the first pipeline that merges into it, with a
  `merge.writer_claimed` log line.
- **Statically** (`cdc validate`): two pipelines of one file with the same lake root whose table patterns
  can match one table name are refused, naming both pipelines and both patterns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cdc_core.model.naming import NamePattern, parse_table_pattern

WRITER_PROPERTY = "cdc.writer"


def writer_value(pipeline: str, sources: Sequence[str] = (), routes: Sequence[dict[str, str]] = ()) -> str:
    """The `cdc.writer` property value for tables this pipeline creates: the pipeline (what the rule
    compares), and for a group pipeline its sources and routes as they were when the table was created
    (for people reading the table's properties)."""
    record: dict[str, Any] = {"pipeline": pipeline}
    if sources:
        record["sources"] = list(sources)
    if routes:
        record["routes"] = [dict(r) for r in routes]
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def writer_pipeline(value: str | None) -> str | None:
    """The pipeline a `cdc.writer` value names; None when the table has no writer recorded.

    A value that is not the product's JSON (set by hand) still names a writer: the raw text, so that it
    is refused rather than silently claimed."""
    if value is None or value == "":
        return None
    try:
        decoded: Any = json.loads(value)
    except ValueError:
        return value
    if isinstance(decoded, dict) and isinstance(decoded.get("pipeline"), str):
        return str(decoded["pipeline"])
    return value


def foreign_writer_message(pipeline: str, seq: int, conflicts: Sequence[tuple[str, str, str]]) -> str:
    """The LakeError text for tables (label, uri, recorded writer) that belong to another pipeline."""
    tables = "; ".join(f"{label} at {uri} belongs to pipeline {writer!r}" for label, uri, writer in conflicts)
    return (
        f"pipeline {pipeline!r} window {seq}: refusing to merge, {tables} (table property {WRITER_PROPERTY}). "
        "Two pipelines landing in one Delta table would overwrite each other's rows. Nothing of this window was "
        "written and the cursor did not move. Give this pipeline its own lake_root, or exclude the table from one "
        "of the two pipelines (`cdc validate` lists every overlap of a config file)"
    )


# ------------------------------------------------------------------------------ static overlap check


@dataclass(frozen=True)
class _Token:
    kind: str  # "char" (one character of a set), "star" (any string)
    chars: frozenset[str] = frozenset()
    ranges: tuple[tuple[str, str], ...] = ()
    negated: bool = False

    def accepts(self, c: str) -> bool:
        inside = c in self.chars or any(lo <= c <= hi for lo, hi in self.ranges)
        return inside != self.negated

    def candidates(self) -> set[str]:
        out = set(self.chars)
        for lo, hi in self.ranges:
            out |= {lo, hi}
        return out


_ANY = _Token("char", negated=True)  # `?`: a set with nothing excluded
_FRESH = "\x00"  # a character no glob in a config file names: stands for "any other character"


def _glob_tokens(text: str) -> list[_Token]:
    """fnmatch's grammar: `*`, `?`, `[...]`/`[!...]` (a `[` without its `]` is a literal)."""
    out: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        i += 1
        if c == "*":
            if not out or out[-1].kind != "star":
                out.append(_Token("star"))
        elif c == "?":
            out.append(_ANY)
        elif c == "[":
            j = i
            if j < n and text[j] == "!":
                j += 1
            if j < n and text[j] == "]":
                j += 1
            while j < n and text[j] != "]":
                j += 1
            if j >= n:
                out.append(_Token("char", frozenset("[")))
                continue
            body = text[i:j]
            i = j + 1
            negated = body.startswith("!")
            if negated:
                body = body[1:]
            chars: set[str] = set()
            ranges: list[tuple[str, str]] = []
            k = 0
            while k < len(body):
                if k + 2 < len(body) and body[k + 1] == "-":
                    if body[k] <= body[k + 2]:
                        ranges.append((body[k], body[k + 2]))
                    k += 3
                else:
                    chars.add(body[k])
                    k += 1
            out.append(_Token("char", frozenset(chars), tuple(ranges), negated))
        else:
            out.append(_Token("char", frozenset(c)))
    return out


def _tokens(p: NamePattern) -> list[_Token]:
    if p.is_literal:
        return [_Token("char", frozenset(c)) for c in p.text]
    return _glob_tokens(p.text)


def _common_char(a: _Token, b: _Token) -> str | None:
    for c in sorted(a.candidates() | b.candidates() | {_FRESH}):
        if a.accepts(c) and b.accepts(c):
            return c
    return None


def names_overlap(a: NamePattern, b: NamePattern) -> str | None:
    """A name both patterns match (a witness), or None when no name matches both.

    Exact for fnmatch globs: a search over pairs of positions, where a character step needs one character
    both sides accept (sets and ranges are finite or co-finite, so trying the characters they name plus
    one they do not is enough)."""
    ta, tb = _tokens(a), _tokens(b)
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[int, int, str]] = [(0, 0, "")]
    while stack:
        i, j, built = stack.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if i == len(ta) and j == len(tb):
            return built
        if i < len(ta) and ta[i].kind == "star":
            stack.append((i + 1, j, built))  # the star matches nothing more
        if j < len(tb) and tb[j].kind == "star":
            stack.append((i, j + 1, built))
        if i < len(ta) and j < len(tb):
            sa, sb = ta[i].kind == "star", tb[j].kind == "star"
            if sa and sb:
                continue  # both stars: skipping one of them covers it
            # One character: each side either consumes a char token or stays on its star.
            pa = _ANY if sa else ta[i]
            pb = _ANY if sb else tb[j]
            c = _common_char(pa, pb)
            if c is not None:
                stack.append((i if sa else i + 1, j if sb else j + 1, built + c))
    return None


def _excluded(name: tuple[str, str], patterns: Iterable[str]) -> bool:
    for text in patterns:
        s, t = parse_table_pattern(text)
        if s.matches(name[0]) and t.matches(name[1]):
            return True
    return False


@dataclass(frozen=True)
class Overlap:
    lake_root: str
    first: str
    first_pattern: str
    second: str
    second_pattern: str
    example: str

    def message(self) -> str:
        return (
            f"pipelines {self.first!r} ({self.first_pattern}) and {self.second!r} ({self.second_pattern}) can both "
            f"land table {self.example} in lake root {self.lake_root}: one Delta table must have one writer. Give "
            "one of them another lake_root, or make their table patterns disjoint (include/exclude)"
        )


def route_target_pattern(target: str) -> str:
    """A route's target as a table pattern: a group reference (`\\1`) can be any name."""
    return re.sub(r"\\\d+", "*", target)


def _landing_patterns(p: Any) -> list[str]:
    """The table patterns a pipeline can land: its include patterns (a routed table counts under them
    too: conservative) and its routes' targets."""
    return [*p.tables.include, *(route_target_pattern(r.to) for r in getattr(p, "routes", ()) or ())]


@dataclass(frozen=True)
class RouteClash:
    pipeline: str
    route: str
    target: str
    include: str
    example: str

    def message(self) -> str:
        return (
            f"pipeline {self.pipeline!r}: route {self.route!r} lands in {self.target}, and {self.example} is also "
            f"captured unrouted (include {self.include!r}): two kinds of rows in one Delta table, with different "
            "keys. Exclude that table, or route it too"
        )


def route_clashes(p: Any) -> list[RouteClash]:
    """A route's target that a source table of the same pipeline could also land in unrouted (its name
    matched by an include pattern and by no route)."""
    found = []
    for r in getattr(p, "routes", ()) or ():
        ts, tt = parse_table_pattern(route_target_pattern(r.to))
        for inc in p.tables.include:
            s, t = parse_table_pattern(inc)
            schema = names_overlap(ts, s)
            table = names_overlap(tt, t) if schema is not None else None
            if schema is None or table is None:
                continue
            example = f"{schema}.{table}".replace(_FRESH, "x")
            if any(re.fullmatch(other.from_, example, flags=re.S) for other in p.routes):
                continue  # that name is routed itself
            if _excluded((schema, table), p.tables.exclude):
                continue
            found.append(RouteClash(p.name, r.from_, r.to, inc, example))
    return found


def overlaps(pipelines: Sequence[Any]) -> list[Overlap]:
    """Pairs of pipelines (objects with `name`, `lake_root`, `tables.include`, `tables.exclude`, optionally
    `routes`) that can land the same table under the same lake root.

    A name both include patterns match is tried against both exclude lists: when the witness is excluded
    by either side, the pair passes only if both include patterns are literal names (then that name is the
    only one they share); two globs stay refused, since another name may slip past the excludes."""
    found: list[Overlap] = []
    for x in range(len(pipelines)):
        for y in range(x + 1, len(pipelines)):
            p, q = pipelines[x], pipelines[y]
            if p.lake_root.rstrip("/") != q.lake_root.rstrip("/"):
                continue
            for a in _landing_patterns(p):
                for b in _landing_patterns(q):
                    sa, ta = parse_table_pattern(a)
                    sb, tb = parse_table_pattern(b)
                    schema = names_overlap(sa, sb)
                    table = names_overlap(ta, tb) if schema is not None else None
                    if schema is None or table is None:
                        continue
                    literal = (sa.is_literal and ta.is_literal) or (sb.is_literal and tb.is_literal)
                    witness = (schema, table)
                    if literal and (_excluded(witness, p.tables.exclude) or _excluded(witness, q.tables.exclude)):
                        continue
                    found.append(Overlap(p.lake_root, p.name, a, q.name, b, f"{schema}.{table}".replace(_FRESH, "x")))
    return found
