"""Where a pipeline's state lives in ZooKeeper (the one place that builds these paths; docs/zookeeper-layout.md)."""


from __future__ import annotations

import logging
import re
from dataclasses import dataclass

log = logging.getLogger("cdc.coordination")

# Same rule as the configuration's pipeline names: the name is a ZooKeeper node name.
PIPELINE_NAME_RE = re.compile(r"^[a-z0-9_-]{1,64}\Z")  # \Z: `$` also matches before a trailing newline
WINDOW_NODE_RE = re.compile(r"^\d{10}$")


def pipeline_path(root: str, pipeline: str) -> str:
    """`<root>/pipelines/<pipeline>`: every node of one pipeline lives below it (docs/operations.md)."""
    return f"{root.rstrip('/')}/pipelines/{pipeline}"


def source_path(root: str, pipeline: str, source: str | None) -> str:
    """Where one source's state lives: the pipeline node itself for a single-source pipeline (today's
    layout), `<pipeline>/sources/<id>` for a source of a group pipeline (no node shared between sources)."""
    base = pipeline_path(root, pipeline)
    return base if source is None else f"{base}/sources/{source}"


def lease_path(root: str, pipeline: str) -> str:
    """The pipeline's lease node; its czxid is the fencing token the Spark jobs check."""
    return f"{pipeline_path(root, pipeline)}/lease"


@dataclass(frozen=True)
class PipelineNodes:
    """Every node one coordinator reads or changes: the pipeline's (node, lease, maintenance) and its
    source's state (cursor, windows, snapshot, lake registry, last error), as `source_path` places them."""

    base: str
    lease: str
    maintenance: str
    state_base: str
    cursor: str
    windows: str
    snapshot: str
    lake: str
    last_error: str
    pruned: str  # the newest pruned window record's seq and ack time (housekeeping's bound for older windows)

    @classmethod
    def of(cls, root: str, pipeline: str, source: str | None) -> PipelineNodes:
        base = pipeline_path(root, pipeline)
        state = source_path(root, pipeline, source)
        return cls(
            base=base, lease=lease_path(root, pipeline), maintenance=f"{base}/maintenance", state_base=state,
            cursor=f"{state}/cursor", windows=f"{state}/windows", snapshot=f"{state}/snapshot", lake=f"{state}/lake",
            last_error=f"{state}/last_error", pruned=f"{state}/pruned",
        )

    def window(self, seq: int) -> str:
        return f"{self.windows}/{seq:010d}"
