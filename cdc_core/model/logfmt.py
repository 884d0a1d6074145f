"""The product's one log-line format: `event key=value key=value` (../docs/operations.md greps for it).

A value that is empty or holds a space, a quote, an `=` or a newline is double-quoted, with `\\`, `"` and
newlines escaped, so every line splits back into its fields unambiguously.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def _value(v: Any) -> str:
    s = str(v)
    if not s or any(ch in s for ch in ' ="\n'):
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return s


def kv(**fields: Any) -> str:
    """`k=v k=v`, values quoted where needed."""
    return " ".join(f"{k}={_value(v)}" for k, v in fields.items())


def line(event: str, **fields: Any) -> str:
    """`event k=v k=v`."""
    return f"{event} {kv(**fields)}" if fields else event


def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:500]


def iso_ms(ts: float | None) -> str | None:
    """A unix time as UTC ISO-8601 with milliseconds (the form persisted in ZooKeeper records and reports)."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_seconds(ts: float | None) -> str:
    """A unix time as UTC ISO-8601 to the second, for messages ("unknown" when there is none)."""
    if ts is None:
        return "unknown"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
