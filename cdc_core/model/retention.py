"""Housekeeping decisions as pure functions: retention floors, and what may be deleted.

Nothing here does I/O. `cdc_core.run.housekeeping` gathers the facts (ZooKeeper records, staging
listings, Delta state) and applies these rules; `cdc_core.model.config` uses the floors to refuse a
configuration that could delete something a replay still needs; the Spark maintenance job re-checks
them. docs/housekeeping.md explains the reasoning in prose.

The one horizon everything derives from, the **replay horizon** H (whole hours):

    H = staging_retention_hours + ceil(2 * lease_seconds / 3600)

An acked window's staged copy is kept `staging_retention_hours` after its ack, and until then anyone
may re-run its merge (an Airflow clear of an old run, an operator, a zombie). Such a re-run starts at
the latest when the staged copy goes, and runs for about a lease; the window's Delta commit precedes
its ack by up to about a lease too (merge, then ack, in one run). So for H after a window's commit:

- its Delta transaction identifier (txnAppId=pipeline, txnVersion>=seq) must still be readable, so
  that the re-run is recognised as "already committed" (`delta.setTransactionRetentionDuration` >= H;
  both delta-spark and delta-rs drop an expired identifier at *read* time, not only at checkpoints);
- the data files of the table versions it produced must still exist (VACUUM retention >= H): a merge
  that read a snapshot must not see its files vanish, and an operator inspecting a window that is
  still staged can time-travel to the version it produced;
- the log must reach back at least as far as the files (`delta.logRetentionDuration` >= VACUUM
  retention; Delta itself refuses the opposite).

An expired identifier is never a correctness problem (the merge only lets newer change versions win
and keeps tombstones, so re-applying an old window changes nothing): it costs a redundant MERGE. The
floors keep the normal paths from ever paying it.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

HOUR = 3600.0

# Table properties the product manages on every Delta table it writes (set at creation by the merge
# job, aligned on existing tables by the maintenance job); a per-table override could break a floor.
PROP_TXN_RETENTION = "delta.setTransactionRetentionDuration"
PROP_FILE_RETENTION = "delta.deletedFileRetentionDuration"
PROP_LOG_RETENTION = "delta.logRetentionDuration"
MANAGED_PROPERTIES = (PROP_TXN_RETENTION, PROP_FILE_RETENTION, PROP_LOG_RETENTION)

# Every reader of a table (the ack's checks, the consistent cut, `cdc status`, the monitor; delta-rs or
# Spark) replays the JSON commits since the last log checkpoint. delta-rs writes one every 100 commits
# unless the table says otherwise, Spark every 10: a table delta-rs lands one commit per window into cost
# ~0.45 ms more to open per commit since its checkpoint (15 ms fresh, 40+ ms 60 commits later; measured by
# bench/longrun.py). Tables the product creates carry 10 (a user's table_options properties win);
# maintenance sets it on tables that lack it.
PROP_CHECKPOINT_INTERVAL = "delta.checkpointInterval"
CHECKPOINT_INTERVAL = 10

_MAINTENANCE_REPORT_RE = re.compile(r"^maintenance-[0-9a-f]+-\d+\.json$")
# A window directory `w<seq>`, a temp leftover `.w<seq>.tmp-x` / `.old-x`, or a merge report `w<seq>-<token>.json`
# (layout.merge_report_name), in one match: each group the seq of its kind.
_WINDOW_TEMP_OR_REPORT_RE = re.compile(
    r"^(?:w(\d{10})|\.w(\d{10})\.(?:tmp|old)-[A-Za-z0-9]+|w(\d{10})-[0-9a-f]+\.json)$"
)


# ------------------------------------------------------------------------------------------ floors


def replay_horizon_hours(staging_retention_hours: int, lease_seconds: int) -> int:
    """H: how long after a window's Delta commit anything may still replay or re-check it (see above)."""
    return int(staging_retention_hours) + math.ceil(2 * lease_seconds / HOUR)


def interval(hours: int) -> str:
    """A Delta table-property interval that delta-spark and delta-rs both parse."""
    return f"interval {int(hours)} hours"


def managed_table_properties(vacuum_hours: int, log_hours: int, txn_hours: int) -> dict[str, str]:
    """The retention properties every table of the pipeline carries (tombstone tables included)."""
    return {
        PROP_TXN_RETENTION: interval(txn_hours),
        PROP_FILE_RETENTION: interval(vacuum_hours),
        PROP_LOG_RETENTION: interval(log_hours),
    }


def retention_problems(
    *,
    staging_retention_hours: int,
    lease_seconds: int,
    vacuum_retention_hours: int,
    log_retention_hours: int,
    txn_retention_hours: int,
) -> list[str]:
    """Every way these settings break a floor, as messages naming the keys and the way out ([] = fine)."""
    h = replay_horizon_hours(staging_retention_hours, lease_seconds)
    why = (
        f"the replay horizon is {h}h (staging_retention_hours {staging_retention_hours} + twice "
        f"lease_seconds {lease_seconds}, rounded up to whole hours)"
    )
    out = []
    if vacuum_retention_hours < h:
        out.append(
            f"maintenance.vacuum_retention_hours: {vacuum_retention_hours} is shorter than the replay horizon: "
            f"VACUUM could delete files that a merge still reading an older snapshot, or time travel to a window "
            f"that is still staged, needs; {why}. Set it to at least {h} "
            "(or lower staging_retention_hours or lease_seconds)"
        )
    if txn_retention_hours < h:
        out.append(
            f"maintenance.txn_retention_hours: {txn_retention_hours} is shorter than the replay horizon: Delta "
            f"would forget a window's idempotent-write identity while the window can still be replayed; {why}. "
            f"Set it to at least {h}"
        )
    if log_retention_hours < vacuum_retention_hours:
        out.append(
            f"maintenance.log_retention_hours: {log_retention_hours} is shorter than "
            f"maintenance.vacuum_retention_hours ({vacuum_retention_hours}); Delta refuses a log that forgets "
            f"versions whose files are still kept. Set it to at least {vacuum_retention_hours}"
        )
    return out


def managed_property_overrides(table_options: dict[str, Any]) -> list[str]:
    """Per-table `properties` that try to set a managed retention property (they would bypass the floors)."""
    out = []
    for name, opts in sorted(table_options.items()):
        props = (opts or {}).get("properties") or {}
        for key in sorted(props):
            if key in MANAGED_PROPERTIES:
                out.append(
                    f"table_options[{name!r}].properties: {key} is managed by the product (from "
                    "maintenance.vacuum_retention_hours / log_retention_hours / txn_retention_hours, which are "
                    "checked against the replay horizon); remove it and set the maintenance key instead"
                )
    return out


# ---------------------------------------------------------------------------------- staged windows

Verdict = Literal["delete", "keep"]


@dataclass(frozen=True)
class AckFacts:
    """What ZooKeeper says about one window, as read.

    `state`: the record's state, or None when the record is absent (read, and not there: pruned).
    `acked_at`: the record's ack time (None when absent or never acked).
    `acked_by`: an upper bound of the ack time taken from a later record (windows are acked in order,
    so window s was acked no later than any window after it); used when the record itself is gone.
    """

    state: str | None
    acked_at: float | None = None
    acked_by: float | None = None


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str

    @property
    def delete(self) -> bool:
        return self.verdict == "delete"


def ack_time_bound(facts: AckFacts) -> float | None:
    """The window's ack time (its record's), or an upper bound of it (a later record's, a mark's), or None."""
    return facts.acked_at if facts.state == "acked" else facts.acked_by


def staging_pass_due_at(
    *, now: float, first_kept_acked: float | None, backlog: bool, retention_seconds: float, slack_seconds: float
) -> float:
    """When the after-ack pass next has a staged window to delete, give or take its batching slack.

    Windows are acked in order, so the first window a pass kept (`first_kept_acked`: its ack time, or bound) is
    the next to age past the retention; every window after it was acked later, or is not acked yet. A pass cut
    short by its per-pass bound (`backlog`) has more to delete now. When nothing it kept has a known ack time
    (only the pending window is left, or a record disagrees), look again after the slack. Slack batches the
    deletions (a pass every `slack_seconds`, not every ack) and costs at most that much longer on disk."""
    if backlog:
        return now
    if first_kept_acked is None:
        return now + slack_seconds
    return first_kept_acked + retention_seconds + slack_seconds


def staged_window_decision(
    seq: int, cursor_seq: int, facts: AckFacts, now: float, retention_seconds: float
) -> Decision:
    """May window `seq`'s staged artifacts (directory, reports, leftovers) be deleted now?

    Only when it is provably acked and its ack is older than the retention. The cursor's seq is the
    last acked window; windows are acked in order, one at a time, so `seq <= cursor_seq` means acked,
    and the record must agree: a record that says "planned" for such a seq is inconsistent and kept.
    A window after the cursor is pending or was never acked: never deleted.
    """
    if seq > cursor_seq:
        return Decision("keep", "not acked (at or after the pending window)")
    if facts.state is not None and facts.state != "acked":
        return Decision("keep", f"record says {facts.state!r} although the cursor passed it: inconsistent, kept")
    acked = ack_time_bound(facts)
    if acked is None:
        return Decision("keep", "ack time unknown")
    age = now - acked
    if age < retention_seconds:
        return Decision("keep", f"acked {age / HOUR:.1f}h ago, within the retention")
    source = "record" if facts.state == "acked" else "record pruned; bound from a later record"
    return Decision("delete", f"acked {age / HOUR:.1f}h ago ({source})")


# ------------------------------------------------------------------------------- pruned-record marks
#
# A window whose ZooKeeper record was pruned keeps its staged copy until that copy is provably older than the
# staging retention; the proof is an upper bound of its ack time. Each prune leaves a mark (seq, ack time) of the
# newest record it deleted: every window up to seq was acked no later than that time. A mark is left only
# `horizon/200` seconds of ack time after the previous one (the windows pruned meanwhile are bounded by the next
# mark, at most that much later, and until it by the next record's ack: they are young anyway), and of the marks
# older than the horizon only the newest (it bounds every window before it): at most ~200 marks, a few KB, however
# fast windows are pruned.

MARKS_PER_HORIZON = 200
DEFAULT_MARKS_HORIZON = 7 * 24 * HOUR  # when the caller does not say (the staging retention, usually)

Mark = tuple[int, float]


def marks_after_prune(marks: list[Mark], newest: Mark, now: float, horizon_seconds: float) -> list[Mark]:
    """The pruned-record marks after a prune whose newest deleted record is `newest` (seq, acked_at)."""
    out = sorted(marks)
    if out and (newest[0] <= out[-1][0] or newest[1] - out[-1][1] < horizon_seconds / MARKS_PER_HORIZON):
        return out  # a replay, or within the spacing: the next mark will bound these windows too
    out.append(newest)
    while len(out) >= 2 and out[1][1] < now - horizon_seconds:
        out.pop(0)
    return out


def acked_by_mark(marks: list[Mark], seq: int) -> float | None:
    """An upper bound of window `seq`'s ack time from the marks (the first mark at or after it), or None."""
    i = bisect.bisect_left(marks, (seq, float("-inf")))
    return marks[i][1] if i < len(marks) else None


StagingKind = Literal["window", "temp", "report", "maintenance_report", "due", "other"]
# The after-ack pass's note of when it next has work (staging_pass_due_at), beside the windows.
STAGING_DUE_NAME = "cleanup-due.json"


def classify_staging_entry(name: str) -> tuple[StagingKind, int | None]:
    """What a name under `<staging>/<pipeline>/` (or its `reports/`) is, and the window it belongs to."""
    m = _WINDOW_TEMP_OR_REPORT_RE.match(name)  # one match for the common names: every ack classifies them all
    if m:
        window, temp, report = m.groups()
        if window is not None:
            return "window", int(window)
        return ("temp", int(temp)) if temp is not None else ("report", int(report))
    if _MAINTENANCE_REPORT_RE.match(name):
        return "maintenance_report", None
    if name == STAGING_DUE_NAME:
        return "due", None
    return "other", None


def maintenance_report_name(token: int, started_at: float) -> str:
    return f"maintenance-{token:x}-{int(started_at)}.json"


# ------------------------------------------------------------------------------ ZooKeeper records


@dataclass(frozen=True)
class PrunePlan:
    """Whether to prune window records now: by age (records older than the retention) and/or by count."""

    by_age: bool
    by_count: bool

    @property
    def any(self) -> bool:
        return self.by_age or self.by_count


def record_prune_plan(
    *,
    records: int,
    oldest_acked_at: float | None,
    now: float,
    retention_seconds: float,
    keep: int,
    max_records: int,
    slack_seconds: float = 0.0,
) -> PrunePlan:
    """Decide from two cheap facts (the record count and the oldest record's ack time) whether a prune
    pass is worth its reads.

    With `slack_seconds` > 0 (the after-ack path) a pass runs only once the oldest record is older than
    the retention plus the slack, so records go in batches instead of one read-everything pass per run.
    `prune_windows` itself never removes the pending window nor the last acked one.
    """
    by_age = (
        records > keep
        and oldest_acked_at is not None
        and oldest_acked_at < now - retention_seconds - max(0.0, slack_seconds)
    )
    return PrunePlan(by_age=by_age, by_count=records > max_records)


def after_ack_slack_seconds(retention_seconds: float) -> float:
    """The after-ack path's batching slack: a tenth of the retention, at most an hour."""
    return min(HOUR, retention_seconds / 10)


def staging_pass_slack_seconds(staging_retention_seconds: float, lease_seconds: float) -> float:
    """The after-ack staging pass's batching slack (staging_pass_due_at): the records' slack, but never more than
    what the replay horizon rounds up (H - retention - two leases, 40 min with the defaults): a staged copy kept
    that much past its retention can still only be re-run inside H, so the Delta floors keep holding."""
    spare = math.ceil(2 * lease_seconds / HOUR) * HOUR - 2 * lease_seconds
    return max(0.0, min(after_ack_slack_seconds(staging_retention_seconds), spare))
