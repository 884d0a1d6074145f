"""What one window read and wrote, as lineage: per lake table, the source tables that land in it, its
columns, which source column each one copies, and how many rows the window changed in it.

Plain values, named the way OpenLineage names datasets (MySQL: namespace `mysql://host:port`, name
`schema.table`; a Delta table by location: `file` + absolute path, or `s3://bucket` + key), so the Airflow glue
(plugins/cdc_airflow/lineage.py) only translates them into OpenLineage objects; cdc_core stays free of it.
Read after the merge (or the ack) from the staged manifest, the merge report and the Delta log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlparse

from cdc_core.lake import delta_state
from cdc_core.model import transforms
from cdc_core.run import ack, stage
from cdc_core.run.context import PipelineContext

# Columns the product adds to lake rows (merge metadata, a group pipeline's lineage columns): no source
# column feeds them.
PRODUCT_COLUMN_PREFIX = "_cdc_"


@dataclass(frozen=True)
class DatasetName:
    namespace: str
    name: str


@dataclass(frozen=True)
class LakeTableLineage:
    """One lake table a window changed (or only touched)."""

    output: DatasetName
    inputs: tuple[DatasetName, ...]  # the source tables routed into it, in manifest order
    columns: tuple[tuple[str, str], ...]  # (column, Delta type) as the table holds them after the window
    # column -> the source tables whose same-named column it copies (not one a transform hashes, masks or cuts)
    copied_from: dict[str, tuple[DatasetName, ...]]
    rows_changed: int  # inserted + updated + deleted by the merge; the staged changes when no report says


def source_dataset(host: str, port: int, schema: str, table: str) -> DatasetName:
    return DatasetName(f"mysql://{host}:{port}", f"{schema}.{table}")


def lake_dataset(table_uri: str) -> DatasetName:
    """OpenLineage's naming of a table by location: `file` + absolute path, `s3://bucket` + key."""
    parsed = urlparse(table_uri)
    if parsed.scheme in ("s3", "s3a", "s3n"):
        return DatasetName(f"s3://{parsed.netloc}", parsed.path.lstrip("/"))
    if parsed.scheme not in ("", "file"):
        return DatasetName(f"{parsed.scheme}://{parsed.netloc}", parsed.path.lstrip("/"))
    return DatasetName("file", parsed.path if parsed.scheme == "file" else table_uri)


@dataclass
class _Landing:
    """The source tables of one lake table, gathered over the manifest."""

    lake_name: str
    staged: dict[DatasetName, set[str]] = field(default_factory=dict)  # source table -> its staged columns
    changes: int = 0


def window_lineage(p: PipelineContext, seq: int) -> tuple[LakeTableLineage, ...]:
    """The lineage of staged window `seq`, one entry per lake table, in manifest order (none when the window
    is not staged). The manifest alone is read (`stage.recorded_manifest`): the step that asks has landed the
    window from verified files."""
    plan = stage.window(p, seq).plan
    manifest = stage.recorded_manifest(p, plan)
    if manifest is None:
        return ()
    rules = transforms.Transforms(transforms.recorded_rules((plan.capture or {}).get("transform", ())))
    reported = (ack.merge_report(p, seq) or {}).get("tables") or {}
    landings: dict[str, _Landing] = {}
    for t in manifest.tables:
        landing = landings.setdefault(p.table_uri(t.schema, t.table), _Landing(p.lineage(t.schema, t.table).lake_name))
        rule = rules.rule_for(t.name)
        shaped = {*rule.hash, *rule.mask, *rule.truncate} if rule is not None else set()
        copied = {c.name for c in t.columns} - shaped  # a hashed, masked or truncated column is no copy
        landing.staged[source_dataset(p.source.host, p.source.port, t.schema, t.table)] = copied
        landing.changes += t.rows
    return tuple(_lake_table(p, uri, landing, reported.get(landing.lake_name)) for uri, landing in landings.items())


def _lake_table(p: PipelineContext, uri: str, landing: _Landing, merged: object) -> LakeTableLineage:
    columns = delta_state.table_columns(uri, storage=p.storage) or ()
    copied = {
        name: tuple(src for src, staged in landing.staged.items() if name in staged)
        for name, _ in columns
        if not name.startswith(PRODUCT_COLUMN_PREFIX)
    }
    counts = [merged.get(k) for k in ("inserted", "updated", "deleted")] if isinstance(merged, dict) else []
    counted = [n for n in counts if isinstance(n, int)]
    return LakeTableLineage(
        output=lake_dataset(uri),
        inputs=tuple(landing.staged),
        columns=columns,
        copied_from={name: sources for name, sources in copied.items() if sources},
        rows_changed=sum(counted) if counted else landing.changes,
    )
