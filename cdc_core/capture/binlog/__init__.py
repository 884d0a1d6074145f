"""Reading the binlog with python-mysql-replication: transaction boundaries and a window's row changes.

Two readers and a scanner over one event stream:

- `BinlogScanner` (`scanner`) finds *transaction boundaries* cheaply (no row is decoded): the planner cuts
  windows from them and the start resolver searches them.
- `read_changes` (`library_reader`) replays exactly one planned window `[plan.start, plan.end)` as
  `RowChange`s and `SchemaChangeEvent`s, in binlog order, decoded by the library.
- `read_change_batches` (`columnar_reader`) reads the same window as Arrow `RowBatch`es, decoded
  column-wise by `cdc_core.capture.rowdecode`.

Underneath: `stream` (the events, read off the dump connection), `transactions` (where a transaction
starts and ends; the checks of a read window), `table_maps` (table-map events as `TableSchema`s),
`schema_events` (DDL statements in a window) and `compat` (every place that reaches past the public API
of python-mysql-replication 1.0.17 and pymysql, and why).
"""

from __future__ import annotations

from cdc_core.capture.binlog.columnar_reader import read_change_batches
from cdc_core.capture.binlog.compat import Packets
from cdc_core.capture.binlog.library_reader import read_changes
from cdc_core.capture.binlog.scanner import BinlogScanner

__all__ = ["BinlogScanner", "read_change_batches", "read_changes"]

# tests/faults/test_fault_infra.py slows the packet reads through `binlog._Packets.read` (the class is
# `compat.Packets`): this alias goes once that test patches `compat.Packets` itself.
_Packets = Packets
