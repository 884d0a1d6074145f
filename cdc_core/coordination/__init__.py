"""Coordination in ZooKeeper: one pipeline's lease, cursor and window records, fenced on the lease.

The package's public API is re-exported here; its modules import each other directly.
The protocol and the node layout: docs/zookeeper-layout.md.
"""

from cdc_core.coordination.client import (
    RedactingLogger,
    make_zk_client,
)
from cdc_core.coordination.coordinator import (
    PipelineCoordinator,
)
from cdc_core.coordination.fence import (
    zk_fence_check,
)
from cdc_core.coordination.lease_keeper import (
    LeaseKeeper,
)
from cdc_core.coordination.paths import (
    lease_path,
    pipeline_path,
)
from cdc_core.coordination.records import (
    COORDINATION_FORMAT,
    STATE_ACKED,
    STATE_PLANNED,
    BackfillState,
    Cursor,
    LeaseGrant,
    LeaseInfo,
    LeaseRecord,
    WindowRecord,
    WindowState,
)
from cdc_core.coordination.rules import (
    LeaseDecision,
    check_backfill_request,
    check_plan,
    cursor_after_ack,
    lease_decision,
)

__all__ = [
    "COORDINATION_FORMAT",
    "STATE_ACKED",
    "STATE_PLANNED",
    "BackfillState",
    "Cursor",
    "LeaseDecision",
    "LeaseGrant",
    "LeaseInfo",
    "LeaseKeeper",
    "LeaseRecord",
    "PipelineCoordinator",
    "RedactingLogger",
    "WindowRecord",
    "WindowState",
    "check_backfill_request",
    "check_plan",
    "cursor_after_ack",
    "lease_decision",
    "lease_path",
    "make_zk_client",
    "pipeline_path",
    "zk_fence_check",
]
