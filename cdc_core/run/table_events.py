"""What the ack announces downstream: one event per lake table a window changed (Airflow Assets).

The Airflow side (plugins/cdc_airflow/assets.py) turns these into asset events through the pipeline's
`AssetAlias`; this module decides *which* windows and tables to announce, and with what extra, as pure
functions over ZooKeeper's window records (no Airflow import here):

- only acked windows, and of those only the tables the window changed (its staged tables; a table the window
  created is announced, it appeared in the lake; not a table named only by DDL that the lake does not have,
  status `no table`);
- a window is announced once: windows already announced (their seqs, as found in the alias's earlier
  events) are left out, so a retried or cleared ack, or a replayed window, emits nothing twice;
- windows acked by recovery (a crashed run's window that the next run's plan step acked) are
  announced by the next ack after them: every acked window newer than the newest announced one is;
- the first ack with nothing announced before announces only its own window (not the history).

Extra of each event (JSON): pipeline, window_seq, kind, table, delta_version, inserted, updated,
deleted, changes (staged row changes), newest_commit_ts / newest_commit_at (the newest source commit
the cursor covers after the window), cursor, acked_at; and `source`, reserved for pipelines with
several sources (absent while a pipeline has one).

A table that keeps a history or change log (docs/output-modes.md) has one Asset per output too: a window
that changed the table announces each of them (extra `output`: history | changelog, with that table's
Delta version and counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cdc_core.coordination import STATE_ACKED, WindowRecord
from cdc_core.model.logfmt import iso_ms
from cdc_core.model.merge_semantics import STATUS_NO_TABLE
from cdc_core.model.naming import parse_table_pattern
from cdc_core.model.output_modes import OUTPUT_CHANGELOG, OUTPUT_HISTORY, OUTPUT_STATE


@dataclass(frozen=True)
class TableEvent:
    """One asset event: table `name` (schema.table) changed by window `seq`."""

    seq: int
    name: str
    schema: str
    table: str
    extra: dict[str, Any]
    output: str = OUTPUT_STATE  # or the table's history or change log




def windows_to_announce(
    records: list[WindowRecord], current_seq: int, announced: set[int]
) -> list[WindowRecord]:
    """Pure: the acked windows to announce now, oldest first (see the module docstring)."""
    floor = max(announced) if announced else current_seq - 1
    return sorted(
        (r for r in records
         if r.state == STATE_ACKED and floor < r.seq <= current_seq and r.seq not in announced),
        key=lambda r: r.seq,
    )


def window_events(pipeline: str, record: WindowRecord, tables: dict[str, tuple[str, str]]) -> list[TableEvent]:
    """Pure: the events of one acked window, one per table it changed (`tables`: name -> (schema, table),
    from its manifest; a name missing there is split at its last dot)."""
    result = record.result or {}
    changed: dict[str, Any] = result.get("tables") or {}
    position = record.plan.end
    commit_ts = position.commit_ts if position is not None else None
    out = []
    for name in sorted(changed):
        info = changed[name] if isinstance(changed[name], dict) else {}
        if info.get("status") == STATUS_NO_TABLE:  # named only by DDL, not in the lake: nothing to read
            continue
        schema, table = tables.get(name) or (name.rpartition(".")[0], name.rpartition(".")[2])
        extra: dict[str, Any] = {
            "pipeline": pipeline,
            "window_seq": record.seq,
            "kind": record.plan.kind,
            "table": name,
            "delta_version": info.get("delta_version"),
            "inserted": info.get("inserted"),
            "updated": info.get("updated"),
            "deleted": info.get("deleted"),
            "changes": info.get("changes"),
            "newest_commit_ts": commit_ts,
            "newest_commit_at": iso_ms(commit_ts),
            "cursor": position.label() if position is not None else None,
            "acked_at": iso_ms(record.acked_at),
        }
        source = (record.plan.info or {}).get("source")
        if source:
            extra["source"] = source
        out.append(TableEvent(record.seq, name, schema, table, extra))
        for output in (OUTPUT_HISTORY, OUTPUT_CHANGELOG):
            landed = info.get(output)
            if isinstance(landed, dict):
                counts = {k: landed.get(k) for k in ("delta_version", "inserted", "updated", "deleted")}
                out.append(TableEvent(record.seq, name, schema, table, {**extra, **counts, "output": output},
                                      output))
    return out


def announced_seqs(pipeline: str, extras: list[dict[str, Any]]) -> set[int]:
    """Pure: the window seqs of `pipeline` found in earlier events' extra."""
    out = set()
    for e in extras:
        if isinstance(e, dict) and e.get("pipeline") == pipeline and isinstance(e.get("window_seq"), int):
            out.add(int(e["window_seq"]))
    return out


def pending_events(p: Any, current_seq: int, announced: set[int], lookback: int = 50) -> list[TableEvent]:
    """The events to emit after acking `current_seq` (`p`: a cdc_core.run.pipeline.Pipeline)."""
    records = p.coordinator.recent_windows(lookback)
    out: list[TableEvent] = []
    for record in windows_to_announce(records, current_seq, announced):
        names = {}
        for name in (record.result or {}).get("tables") or {}:
            schema, table = parse_table_pattern(str(name))  # a table id: `my.db`.`t` reads back exactly
            names[name] = (schema.text, table.text)
        out += window_events(p.name, record, names)
    return out
