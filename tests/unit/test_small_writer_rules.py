"""Which tables the small-table writer (cdc_core.lake.small_writer) may write: pure rules, no table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from cdc_core.lake.delta_rs_rules import unsupported
from cdc_core.lake.small_writer import delta_type_name

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("ddl", "name"),
    [
        ("INT", "integer"),
        ("BIGINT", "long"),
        ("TINYINT", "byte"),
        ("SMALLINT", "short"),
        ("DECIMAL(20,0)", "decimal(20,0)"),
        ("decimal( 38 , 10 )", "decimal(38,10)"),
        ("TIMESTAMP", "timestamp"),
        ("TIMESTAMP_NTZ", "timestamp_ntz"),
        ("STRING", "string"),
        ("BINARY", "binary"),
        ("DATE", "date"),
        ("DOUBLE", "double"),
        ("ARRAY<INT>", None),
        ("STRUCT<a: INT>", None),
    ],
)
def test_manifest_types_map_to_delta_schema_names(ddl: str, name: str | None) -> None:
    assert delta_type_name(ddl) == name


@dataclass
class _Protocol:
    min_reader_version: int = 1
    min_writer_version: int = 2
    reader_features: list[str] | None = None
    writer_features: list[str] | None = None


@dataclass
class _Field:
    name: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Table:
    protocol_: _Protocol = field(default_factory=_Protocol)
    configuration: dict[str, str] = field(default_factory=dict)
    fields: list[_Field] = field(default_factory=lambda: [_Field("id")])

    def protocol(self) -> _Protocol:
        return self.protocol_

    def metadata(self) -> Any:
        return type("M", (), {"configuration": self.configuration})()

    def schema(self) -> Any:
        return type("S", (), {"fields": self.fields})()


def test_tables_created_small_are_writable() -> None:
    assert unsupported(_Table()) is None
    ntz = _Protocol(3, 7, ["timestampNtz"], ["appendOnly", "invariants", "timestampNtz"])
    assert unsupported(_Table(ntz, {"delta.logRetentionDuration": "interval 30 days", "cdc.writer": "x"})) is None


@pytest.mark.parametrize(
    ("table", "reason"),
    [
        (_Table(_Protocol(3, 7, ["deletionVectors"], ["deletionVectors"])), "writer features"),
        (_Table(_Protocol(1, 4)), "legacy writer version 4"),
        (_Table(_Protocol(2, 5), {"delta.columnMapping.mode": "name"}), "legacy writer version 5"),
        (_Table(_Protocol(3, 7, ["columnMapping"], [])), "reader features"),
        (_Table(_Protocol(4, 7)), "protocol 4/7"),
        (_Table(configuration={"delta.enableDeletionVectors": "true"}), "delta.enableDeletionVectors=true"),
        (_Table(configuration={"delta.enableChangeDataFeed": "TRUE"}), "delta.enableChangeDataFeed=true"),
        (_Table(configuration={"delta.appendOnly": "true"}), "delta.appendOnly=true"),
        (_Table(configuration={"delta.constraints.positive": "id > 0"}), "check constraints"),
        (_Table(fields=[_Field("id", {"delta.generationExpression": "1"})]), "generation expression"),
    ],
)
def test_anything_delta_rs_does_not_fully_write_goes_to_spark(table: _Table, reason: str) -> None:
    why = unsupported(table)
    assert why is not None and reason in why


def test_another_deltalake_release_leaves_every_table_to_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    import deltalake

    from cdc_core.lake import small_writer

    assert small_writer.untested_deltalake() is None  # the installed, pinned release
    monkeypatch.setattr(deltalake, "__version__", "1.7.0")
    job = small_writer.SmallMerge(uri="/nowhere/t", label="s.t", window_dir="/nowhere/w", members=(), key=("id",),
                                  delete_mode="hard", app_id="p", seq=1, user_metadata="m", max_rows=10)
    out = small_writer.land(job, lambda: None)
    assert isinstance(out, small_writer.Ineligible) and "1.7.0" in out.reason
    assert "1.7.0" in (small_writer.create("/nowhere/t", [("id", "INT")], (), {}) or "")
