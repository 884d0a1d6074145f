"""How a pipeline's lake tables follow its source's schema changes: the `schema_changes:` settings as a value.

`follow` (the default) makes the lake follow the source exactly; `lenient` never drops or renames in the lake;
`refuse` stops at any change (docs/schema-changes.md). Per table overrides, statements an operator applied by
hand (`skip`), and the names online schema-change tools give their tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MODE_FOLLOW, MODE_LENIENT, MODE_REFUSE = "follow", "lenient", "refuse"
MODES = (MODE_FOLLOW, MODE_LENIENT, MODE_REFUSE)

# Online schema-change tools (gh-ost, pt-online-schema-change): the table they build the new shape in (ghost),
# and the tables they leave behind (trash). `{table}` is the real table's name.
DEFAULT_GHOST_TABLES = ("_{table}_gho", "_{table}_new")
DEFAULT_TRASH_TABLES = ("_{table}_del", "_{table}_ghc", "_{table}_old")
OSC_GHOST, OSC_TRASH = "ghost", "trash"


@dataclass(frozen=True)
class SchemaPolicy:
    """How each lake table follows its source's schema changes (the pipeline's `schema_changes:`).

    `mode` for every table, `tables` (pattern, mode) overrides in order: the first that matches the source table
    (or the lake table it lands in) wins. `skip`: statements (`file:offset` of their binlog event) an operator
    applied by hand, passed over. `ghost_tables` / `trash_tables`: online schema-change tools' names."""

    mode: str = MODE_FOLLOW
    tables: tuple[tuple[str, str], ...] = ()
    # Renames and drops as Delta column mapping (metadata only; Spark and delta-rs' engine read it), or False:
    # the table rewritten without it (every reader, at the cost of a rewrite).
    column_mapping: bool = True
    skip: tuple[str, ...] = ()
    ghost_tables: tuple[str, ...] = DEFAULT_GHOST_TABLES
    trash_tables: tuple[str, ...] = DEFAULT_TRASH_TABLES

    def mode_for(self, source_table: str, lake_table: str | None = None) -> str:
        from cdc_core.model.naming import parse_table_pattern

        names = [source_table] if lake_table is None or lake_table == source_table else [source_table, lake_table]
        for pattern, mode in self.tables:
            schema_p, table_p = parse_table_pattern(pattern)
            for name in names:
                s, t = _split_id(name)
                if schema_p.matches(s) and table_p.matches(t):
                    return mode
        return self.mode

    def osc_role(self, table: str) -> tuple[str, str] | None:
        """(OSC_GHOST or OSC_TRASH, the real table's name) when `table` is named like an online schema-change
        tool's table, else None. The caller checks that the real table is captured."""
        for role, templates in ((OSC_GHOST, self.ghost_tables), (OSC_TRASH, self.trash_tables)):
            for template in templates:
                prefix, _, suffix = template.partition("{table}")
                if (len(table) > len(prefix) + len(suffix) and table.startswith(prefix)
                        and table.endswith(suffix)):
                    return role, table[len(prefix): len(table) - len(suffix)]
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "tables": [list(p) for p in self.tables], "column_mapping": self.column_mapping,
            "skip": list(self.skip), "ghost_tables": list(self.ghost_tables), "trash_tables": list(self.trash_tables),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SchemaPolicy:
        if not d:
            return cls()
        mode = str(d.get("mode", MODE_FOLLOW))
        tables = tuple((str(p), str(m)) for p, m in d.get("tables") or ())
        for m in (mode, *(m for _, m in tables)):
            if m not in MODES:
                raise ValueError(f"schema_changes mode must be one of {', '.join(MODES)}, got {m!r}")
        return cls(
            mode, tables, bool(d.get("column_mapping", True)), tuple(str(x) for x in d.get("skip") or ()),
            tuple(str(x) for x in d.get("ghost_tables", DEFAULT_GHOST_TABLES)),
            tuple(str(x) for x in d.get("trash_tables", DEFAULT_TRASH_TABLES)),
        )


def _split_id(name: str) -> tuple[str, str]:
    """A `naming.table_id` back into (schema, table)."""
    from cdc_core.model.naming import parse_table_pattern

    s, t = parse_table_pattern(name)
    return s.text, t.text
