"""Columnar decoding of rows-event bytes: per-table compiled scanners and vectorized column kernels.

python-mysql-replication decodes a row image value by value through several Python calls per column
(about 25 µs per column on a small machine), then staging converts each value again and hands Python
objects to Arrow. This module decodes the same bytes in two phases instead, per table shape:

1. *Scan* (per row, Python, compiled once per table-map layout): walk the row image and record where
   each column's value starts (-1 for NULL). Consecutive fixed-width NOT NULL columns share one
   recorded offset. That is all the per-row Python work there is: a few additions and appends per row.
2. *Decode* (per column, over many rows at once): gather the bytes at the recorded offsets with numpy
   and build the staged Arrow array directly: every integer width, FLOAT/DOUBLE, DECIMAL of any
   precision (up to 18 digits in int64; wider through exact text built by Arrow's string kernels),
   DATE, DATETIME/TIMESTAMP/TIME with every fsp, YEAR, ENUM, SET (each distinct mask of a batch joined
   once), BIT(1..64), UTF-8 text and JSON, UTF-16/UCS-2/UTF-32 text (one decode per batch), the
   single-byte charsets by a byte table, binary strings and BINARY(n) padding. Only MySQL's binary
   JSON, the pre-5.6 temporal formats and ENUMs without label metadata decode per value, with
   functions that mirror the library's decoding exactly, then go through the type map's converter
   (`ColumnCodec.convert_values`) like the row-by-row path.

Every kernel produces exactly what `pa.array(codec.convert_values(<library values>), codec.arrow_type)`
produces for the same bytes: tests/integration/test_fast_decoder_mariadb.py compares both for every
mapped type with edge values, against the real server. Library quirks are mirrored where they show in
staged values (a DATETIME the library cannot build lands as NULL, a TIMESTAMP of 0 as NULL, YEAR 0,
...; an empty SET is the empty set, not NULL, on both paths); an invalid DATE or ENUM index that makes
the library raise raises here too.

The reader copies a window's row images into transaction-aligned slices (`slices.Slice`); `decode_slice`
decodes one into staged batches, inline or in a worker process, and `finish_slice` gives them window ordinals.

Modules: `layout` (where each column's value sits), `walk` (the row walk, compiled per table layout;
`native`: the compiled C walk, cdc_core/capture/_rowscan.c), `values` (the per-value library mirrors),
the vector kernels per type family (`numbers`, `decimals`, `temporal`, `strings`, `binary`, `charsets`,
`enums`; `arrays`: their building blocks; `kernels`: which one decodes a column), `decoder` (a table's
decoder and the scan of its rows events) and `slices`. This package's names below are what the binlog
reader and the decode workers use.
"""

from __future__ import annotations

from cdc_core.capture.rowdecode.decoder import EV_DELETE, EV_UPDATE, EV_WRITE
from cdc_core.capture.rowdecode.layout import table_layout
from cdc_core.capture.rowdecode.native import native_available
from cdc_core.capture.rowdecode.slices import Slice, SliceResult, TableSpec, decode_slice, finish_slice
from cdc_core.capture.rowdecode.temporal import zero_date_error

__all__ = [
    "EV_DELETE",
    "EV_UPDATE",
    "EV_WRITE",
    "Slice",
    "SliceResult",
    "TableSpec",
    "decode_slice",
    "finish_slice",
    "native_available",
    "table_layout",
    "zero_date_error",
]
