"""The row walk: only the row boundaries are found row by row.

The scanner (`compile_scanners`, Python generated per table layout) records where each row image starts and
walks to its end (null bitmap, fixed widths, length prefixes). Column offsets are then recomputed for all rows
at once from the recorded starts (`row_offsets`), with the same walk done in numpy. The compiled walk
(`native`) does both in C with the same results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from cdc_core.capture.rowdecode.layout import ColumnLayout
from cdc_core.model.errors import SourceError

# Runs of fixed-width columns are skipped with one lookup per this many columns, indexed by their null
# bits (the table holds the run's width for each combination).
_LOOKUP_BITS = 10


class _Walk:
    """Emits the code walking a row image. Constant advances are carried in `pending` (an offset from
    `pos` not yet added) and folded into the next length read, so most columns cost one statement."""

    def __init__(self, layouts: Sequence[ColumnLayout], tables: list[tuple[int, ...]]) -> None:
        self.layouts = layouts
        self.tables = tables
        self.lines: list[str] = []
        self.pending = 0

    def at(self, extra: int = 0) -> str:
        k = self.pending + extra
        return f"pos + {k}" if k else "pos"

    def length(self, lay: ColumnLayout) -> str:
        p = lay.prefix
        if p == 1:
            return f"d[{self.at()}]"
        if p in (2, 3, 4):  # byte reads: cheaper than slicing for int.from_bytes (JSON, LONGTEXT: 4 bytes)
            return "(" + " | ".join(f"d[{self.at(j)}] << {8 * j}" if j else f"d[{self.at()}]" for j in range(p)) + ")"
        return f"int.from_bytes(d[{self.at()}:{self.at(p)}], 'little')"

    def var(self, i: int, lay: ColumnLayout) -> None:
        step = f"pos += {lay.prefix} + {self.length(lay)}"
        if lay.nullable:
            self.lines += [f"if not nb & {1 << i}:", f"    {step}"]
        else:
            self.lines.append(step)

    def fixed(self, cols: list[int]) -> None:
        """Advance over consecutive fixed-width columns `cols`, by their null bits in `nb`."""
        layouts = self.layouts
        for c in range(0, len(cols), _LOOKUP_BITS):
            chunk = cols[c : c + _LOOKUP_BITS]
            nullable = [i for i in chunk if layouts[i].nullable]
            self.pending += sum(layouts[i].width for i in chunk if not layouts[i].nullable)
            if len(nullable) <= 1:
                for i in nullable:
                    self.lines += [f"if not nb & {1 << i}:", f"    pos += {layouts[i].width}"]
                continue
            lo, span = nullable[0], nullable[-1] - nullable[0] + 1
            table = tuple(
                sum(layouts[lo + j].width for j in range(span) if layouts[lo + j].nullable and not (bits >> j) & 1)
                for bits in range(1 << span)
            )
            self.tables.append(table)
            self.lines.append(f"pos += T{len(self.tables) - 1}[nb >> {lo} & {(1 << span) - 1}]")

    def flush(self) -> None:
        if self.pending:
            self.lines.append(f"pos += {self.pending}")
            self.pending = 0


def _row_lines(layouts: Sequence[ColumnLayout], record: Sequence[int], tables: list[tuple[int, ...]]) -> list[str]:
    """Code that walks one row image from `pos` to its end; columns in `record` get their offset (-1 for
    NULL) in variables k0, k1, ..."""
    nbytes = (len(layouts) + 7) // 8
    w = _Walk(layouts, tables)
    if any(lay.nullable for lay in layouts):
        if nbytes <= 4:
            w.lines.append("nb = " + " | ".join(f"d[pos + {j}] << {8 * j}" if j else "d[pos]" for j in range(nbytes)))
        else:
            w.lines.append(f"nb = int.from_bytes(d[pos:pos + {nbytes}], 'little')")
    w.pending = nbytes
    run: list[int] = []
    for i, lay in enumerate(layouts):
        if i in record:
            w.fixed(run)
            run = []
            var = f"k{list(record).index(i)}"
            w.lines.append(f"{var} = -1 if nb & {1 << i} else {w.at()}" if lay.nullable else f"{var} = {w.at()}")
            if lay.width:
                w.fixed([i])
                continue
        elif lay.width:
            run.append(i)
            continue
        w.fixed(run)
        run = []
        w.var(i, lay)
    w.fixed(run)
    w.flush()
    return w.lines


def compile_scanners(
    layouts: Sequence[ColumnLayout], key_columns: Sequence[int] = ()
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(scan, image) for a table layout.

    `scan(d, pos, end, record) -> (pos, rows)` calls `record(row_start)` for every row image in
    d[pos:end] (write and delete events). `image(d, pos) -> (end, row_start, key offsets...)` reads one
    row image (update events read two per row and compare their keys).
    """
    tables: list[tuple[int, ...]] = []
    body = _row_lines(layouts, (), tables)
    src = ["def scan(d, pos, end, record):", "    n = 0", "    while pos < end:", "        record(pos)"]
    src += ["        " + line for line in body]
    src += ["        n += 1", "    return pos, n", "", "def image(d, pos):", "    start = pos"]
    src += ["    " + line for line in _row_lines(layouts, key_columns, tables)]
    keys = "".join(f", k{j}" for j in range(len(key_columns)))
    src.append(f"    return (pos, start{keys})")
    namespace: dict[str, Any] = {f"T{j}": t for j, t in enumerate(tables)}
    # Generated from the table map's layout only (column widths, prefixes, bit positions: all integers).
    exec(compile("\n".join(src), f"<row scanner {len(layouts)} columns>", "exec"), namespace)  # noqa: S102
    return namespace["scan"], namespace["image"]


def row_offsets(layouts: Sequence[ColumnLayout], buf: np.ndarray, starts: np.ndarray) -> list[np.ndarray]:
    """Every column's value offset (-1 for NULL) in each row image starting at `starts`: the scanner's
    walk, vectorized over rows."""
    nbytes = (len(layouts) + 7) // 8
    n = len(starts)
    bitmap = buf[starts[:, None] + np.arange(nbytes, dtype=np.int64)]
    running = starts + nbytes
    out: list[np.ndarray] = []
    for i, lay in enumerate(layouts):
        present = None
        if lay.nullable:
            present = ((bitmap[:, i >> 3] >> (i & 7)) & 1) == 0
        if lay.width:
            if present is None:
                out.append(running)
                running = running + lay.width
            else:
                out.append(np.where(present, running, -1))
                running = running + np.where(present, lay.width, 0)
            continue
        safe = running if present is None else np.where(present, running, 0)
        length = np.zeros(n, dtype=np.int64)
        last = len(buf) - 1  # NULL rows read clipped bytes (a buffer may be shorter than one prefix)
        for j in range(lay.prefix - 1, -1, -1):
            length = (length << 8) | buf[np.minimum(safe + j, last)]
        if present is None:
            out.append(running)
            running = running + lay.prefix + length
        else:
            out.append(np.where(present, running, -1))
            running = running + np.where(present, lay.prefix + length, 0)
    # Recorded images follow each other in the buffer (update events skip unrecorded before images).
    if n and (np.any(running[:-1] > starts[1:]) or running[-1] > len(buf)):
        raise SourceError(
            "row images overlap when decoded column-wise: the table map does not describe these rows "
            "(report this with the binlog position)"
        )
    return out
