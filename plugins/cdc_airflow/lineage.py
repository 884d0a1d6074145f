"""OpenLineage for the window steps: the merge and the ack report what the window read and wrote.

Both operators (`CdcMergeOperator`, `CdcAckOperator`) mix in `ReportsWindowLineage`: the OpenLineage
provider's listener calls `get_openlineage_facets_on_complete` after a successful try, and only when
OpenLineage is configured (`[openlineage] transport`, e.g. the console, file or HTTP transport), so a
pipeline without it pays nothing. The facts come from cdc_core (`cdc_core.run.lineage.window_lineage`: the
staged manifest, the merge report and the Delta log); this module only translates them:

- inputs: the window's source tables, OpenLineage's MySQL naming (`mysql://host:port`, `schema.table`);
- outputs: the Delta tables by location (`file` + path, `s3://bucket` + key), each with
  - `schema`: the table's columns and Delta types after the window,
  - `columnLineage`: each column copied from the same-named column of its source tables (IDENTITY; the
    product's `_cdc_*` columns have no source column),
  - `outputStatistics.rowCount`: the rows the merge inserted, updated or deleted in it.

A step that did nothing (an empty window: the merge is skipped) reports no datasets. The facts are gathered
in the step itself, with the pipeline it has open, and only when OpenLineage is on (a few milliseconds per
table: the Delta schema is read from the log). Lineage never fails a task: a failure to gather it is logged
(`lineage.unavailable`) and the event goes without datasets.
"""

from __future__ import annotations

import logging
from typing import Any

from cdc_core.run.lineage import DatasetName, LakeTableLineage, window_lineage

log = logging.getLogger("cdc.airflow")


def operator_lineage(tables: tuple[LakeTableLineage, ...]) -> Any:
    """The provider's `OperatorLineage` of a window's lake tables."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import (
        column_lineage_dataset,
        output_statistics_output_dataset,
        schema_dataset,
    )

    identity = column_lineage_dataset.Transformation(
        type="DIRECT", subtype="IDENTITY", description="copied from the source column", masking=False
    )
    inputs: dict[DatasetName, Any] = {}
    outputs = []
    for t in tables:
        for source in t.inputs:
            inputs.setdefault(source, InputDataset(namespace=source.namespace, name=source.name))
        columns = column_lineage_dataset.ColumnLineageDatasetFacet(
            fields={
                name: column_lineage_dataset.Fields(
                    inputFields=[
                        column_lineage_dataset.InputField(
                            namespace=src.namespace,
                            name=src.name,
                            field=name,
                            transformations=[identity],
                        )
                        for src in sources
                    ]
                )
                for name, sources in t.copied_from.items()
            }
        )
        schema = schema_dataset.SchemaDatasetFacet(
            fields=[schema_dataset.SchemaDatasetFacetFields(name=name, type=kind) for name, kind in t.columns]
        )
        outputs.append(
            OutputDataset(
                namespace=t.output.namespace,
                name=t.output.name,
                facets={"schema": schema, "columnLineage": columns},
                outputFacets={
                    "outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                        rowCount=t.rows_changed
                    )
                },
            )
        )
    return OperatorLineage(inputs=list(inputs.values()), outputs=outputs)


def lineage_enabled() -> bool:
    """Whether the OpenLineage provider will ask for lineage (a transport is configured, and it is not
    disabled): the window steps gather it only then."""
    try:
        from airflow.providers.openlineage.conf import is_disabled
    except ImportError:
        return False
    return not is_disabled()


class ReportsWindowLineage:
    """Mixin of the window operators. `execute` calls `gather_lineage` with the open pipeline and the window
    it landed, in the task's own process: the provider asks for the facets in a forked child with a time
    limit ([openlineage] execution_timeout), which must not open ZooKeeper or the lake again."""

    gathered_lineage: tuple[LakeTableLineage, ...] = ()

    def gather_lineage(self, p: Any, seq: int) -> None:
        if not lineage_enabled():
            return
        try:
            self.gathered_lineage = window_lineage(p, seq)
        except Exception as e:  # lineage never fails a window step
            log.warning("lineage.unavailable pipeline=%s seq=%s reason=%s: %s", p.name, seq, type(e).__name__, e)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return operator_lineage(self.gathered_lineage)
