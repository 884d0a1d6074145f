"""The merge job: MERGE one staged window into its Delta tables, exactly once (docs/merge.md).

    job.py        the process: spec, session, fence, report, exit code (spark_apps/merge_window.py runs it)
    window.py     one window: its lake tables, the schema phase, each table on a writer thread
    land.py       one lake table: txn check, read, tombstones, the MERGE as the window's commit
    run.py        a run's identity, table lifecycle and idempotent commits (every step builds on it)
    schema.py     schema changes applied before the rows, rows read through the table's history
    schema_steps.py  the Spark/Delta operations of a schema change's plan
    small.py      small tables by delta-rs
    derive.py     derived tables of group pipelines
    outputs.py    a table's history (SCD type 2) and change log, before its state
    staged.py     the staged window as Spark rows and driver-side facts
    targets.py    which Delta table each staged table lands in
    tables.py     table options, CREATE TABLE, txn versions, the MERGE statements

The job's plumbing shared with the maintenance job is spark_apps/spark_job.py.
"""

from __future__ import annotations

from cdc_core.model.layout import base_uri, table_uri, tombstone_uri
from cdc_core.model.merge_semantics import STATUS_ALREADY, STATUS_COMMITTED, STATUS_EMPTY, STATUS_NO_TABLE
from spark_apps.merge.job import main, parse_args, run_job
from spark_apps.merge.staged import metadata_columns
from spark_apps.merge.tables import TableOptions, create_table_sql, merge_sql
from spark_apps.merge.window import merge_window

__all__ = [
    "STATUS_ALREADY", "STATUS_COMMITTED", "STATUS_EMPTY", "STATUS_NO_TABLE", "TableOptions", "base_uri",
    "create_table_sql", "main", "merge_sql", "merge_window", "metadata_columns", "parse_args", "run_job", "table_uri",
    "tombstone_uri",
]
