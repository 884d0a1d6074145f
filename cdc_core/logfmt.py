"""The product's one log-line format: `event key=value key=value` (../docs/operations.md greps for it).

A value that is empty or holds a space, a quote, an `=` or a newline is double-quoted, with `\\`, `"` and
newlines escaped, so every line splits back into its fields unambiguously.
"""

from __future__ import annotations

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
