"""The merge's meaning as stated once (cdc_core/model/merge_semantics.py): what both writers render."""

from __future__ import annotations

import pytest

from cdc_core.model import merge_semantics as ms
from cdc_core.model.manifest import COL_DELETED, COL_OP, COL_VERSION, COL_WINDOW_SEQ, OP_DELETE

pytestmark = pytest.mark.unit


def test_a_table_holds_a_window_once_its_txn_reaches_the_seq() -> None:
    assert not ms.holds_window(None, 1)
    assert not ms.holds_window(4, 5)
    assert ms.holds_window(5, 5)
    assert ms.holds_window("7", 5)  # a txn version read back as text


def test_hard_deletes_delete_newer_rows_and_never_insert_a_delete() -> None:
    clauses = ms.merge_clauses(ms.DELETE_HARD, ms.SPARK)
    assert [(c.matched, c.action) for c in clauses] == [
        (True, ms.ACTION_DELETE), (True, ms.ACTION_UPDATE_ALL), (False, ms.ACTION_INSERT_ALL)]
    assert clauses[0].condition == f"s.`{COL_OP}` = '{OP_DELETE}' AND (t.`{COL_VERSION}` IS NULL OR " \
                                   f"s.`{COL_VERSION}` >= t.`{COL_VERSION}`)"
    assert clauses[2].condition == f"s.`{COL_OP}` <> '{OP_DELETE}'"


def test_soft_deletes_keep_the_row_as_its_own_tombstone() -> None:
    delete, update, insert = ms.merge_clauses(ms.DELETE_SOFT, ms.SPARK)
    assert (delete.action, update.action) == (ms.ACTION_UPDATE, ms.ACTION_UPDATE_ALL)
    assert dict(delete.sets)[f"`{COL_DELETED}`"] == "true"
    assert all(col.strip("`").startswith("_cdc_") for col, _ in delete.sets)  # source columns keep the last image
    assert insert.condition is None  # a delete the lake never saw lands as a tombstone row
    assert ms.insert_condition(ms.DELETE_SOFT, ms.SPARK) is None


def test_the_dialects_quote_keys_null_safe_in_their_own_spelling() -> None:
    assert ms.key_condition(["a`b", "c"], ms.SPARK) == "(t.`a``b` IS NOT DISTINCT FROM s.`a``b`) AND " \
                                                        "(t.`c` IS NOT DISTINCT FROM s.`c`)"
    assert ms.key_condition(['x"y'], ms.DATAFUSION) == '(t."x""y" IS NOT DISTINCT FROM s."x""y")'
    # delta-rs keeps the table's spelling of a metadata column
    v = COL_VERSION.upper()
    assert ms.newer_condition(ms.DATAFUSION, str.upper) == f'(t."{v}" IS NULL OR s."{v}" >= t."{v}")'


def test_the_spark_merge_statement_renders_the_clause_table_in_order() -> None:
    sql = ms.spark_merge_sql("delta.`/lake/t`", "window", ["id"], ms.DELETE_HARD)
    assert sql.startswith("MERGE WITH SCHEMA EVOLUTION INTO delta.`/lake/t` AS t USING window AS s ON ")
    assert sql.index("THEN DELETE") < sql.index("THEN UPDATE SET *") < sql.index("THEN INSERT *")


def test_metadata_and_derived_columns_per_delete_mode() -> None:
    hard = [c for c, _ in ms.metadata_columns(ms.DELETE_HARD)]
    soft = [c for c, _ in ms.metadata_columns(ms.DELETE_SOFT)]
    assert soft[: len(hard)] == hard and COL_DELETED in soft and COL_DELETED not in hard
    assert ms.derived_columns(ms.DELETE_HARD) == ((COL_WINDOW_SEQ, ms.DERIVE_WINDOW_SEQ),)
    with pytest.raises(ValueError, match="delete mode must be one of hard, soft"):
        ms.metadata_columns("purge")


def test_tombstone_rows_are_the_deletes_key_then_version() -> None:
    rule = ms.tombstone_rows(("tenant", "id"))
    assert (rule.op_column, rule.op, rule.columns) == (COL_OP, OP_DELETE, ("tenant", "id", COL_VERSION))
