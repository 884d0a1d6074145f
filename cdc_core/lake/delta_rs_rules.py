"""What delta-rs may write here (cdc_core.lake.small_writer): the tested deltalake release, and the table
protocols, features and properties it writes correctly; anything else stays with Spark."""

from __future__ import annotations

from typing import Any

# The deltalake release whose commit and protocol behaviour this writer was tested against
# (tests/integration/test_small_table_writer.py); any other leaves every table to Spark until re-tested.
TESTED_DELTALAKE = "1.6."


def untested_deltalake() -> str | None:
    import deltalake

    version = str(getattr(deltalake, "__version__", "?"))
    if version.startswith(TESTED_DELTALAKE):
        return None
    return f"deltalake {version} is not the tested {TESTED_DELTALAKE}x"

# Writer features delta-rs 1.6 writes correctly on the tables the merge job creates small. Legacy
# protocols up to writer version 2 imply appendOnly and invariants, which are checked below.
_WRITER_FEATURES = frozenset({"appendOnly", "invariants", "timestampNtz"})
_READER_FEATURES = frozenset({"timestampNtz"})
# Table properties that switch on something this writer does not do.
_REFUSED_PROPERTIES = {
    "delta.enableDeletionVectors": "true",
    "delta.enableChangeDataFeed": "true",
    "delta.appendOnly": "true",
    "delta.enableTypeWidening": "true",
    "delta.enableRowTracking": "true",
}
_FIELD_METADATA_REFUSED = ("delta.invariants", "delta.generationExpression", "delta.identity.start",
                           "delta.columnMapping.id")


def refused_property(config: dict[str, str]) -> str | None:
    for k, v in _REFUSED_PROPERTIES.items():
        if str(config.get(k, "")).lower() == v:
            return f"{k}={v}"
    if config.get("delta.columnMapping.mode", "none") != "none":
        return "column mapping"
    if any(k.startswith("delta.constraints.") for k in config):
        return "check constraints"
    return None


def unsupported(table: Any) -> str | None:  # noqa: PLR0911 (one answer per rule)
    """Why delta-rs must not write this table version (None: it may)."""
    proto = table.protocol()
    if proto.min_reader_version > 3 or proto.min_writer_version > 7:
        return f"protocol {proto.min_reader_version}/{proto.min_writer_version}"
    if proto.min_writer_version == 7:
        extra = set(proto.writer_features or ()) - _WRITER_FEATURES
        if extra:
            return f"writer features {sorted(extra)}"
    elif proto.min_writer_version > 2:
        return f"legacy writer version {proto.min_writer_version}"
    if proto.min_reader_version == 3 and set(proto.reader_features or ()) - _READER_FEATURES:
        return f"reader features {sorted(set(proto.reader_features or ()) - _READER_FEATURES)}"
    why = refused_property(dict(table.metadata().configuration or {}))
    if why is not None:
        return why
    for f in table.schema().fields:
        if any(k in (f.metadata or {}) for k in _FIELD_METADATA_REFUSED):
            return f"column {f.name!r} has invariants, a generation expression, an identity or a mapping"
    return None
