"""Safe names: SQL identifier quoting and path components for hostile schema/table/column names.

Source names may contain backticks, quotes, dots, spaces, unicode, `..` or `/`. They must neither
break SQL (always quote) nor escape the staging or lakehouse roots (always encode path components).
"""

from __future__ import annotations

import re
from urllib.parse import quote

_SAFE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]*$")


def quote_mysql(name: str) -> str:
    """Quote a MySQL/MariaDB identifier: `a``b`."""
    return "`" + name.replace("`", "``") + "`"


def quote_spark(name: str) -> str:
    """Quote a Spark SQL identifier (same backtick rule as MySQL)."""
    return "`" + name.replace("`", "``") + "`"


def path_component(name: str) -> str:
    """One path segment that is reversible, portable, and never `.`/`..` or contains `/`.

    Plain names stay readable (`orders` -> `orders`); anything else is percent-encoded, with `.`
    and a leading `-`/`_`-less oddity encoded too so no segment can be special.
    """
    if _SAFE.match(name):
        return name
    encoded = quote(name, safe="").replace(".", "%2E")
    if encoded.startswith("~"):
        encoded = "%7E" + encoded[1:]
    return encoded or "%00empty"


def table_id(schema: str, table: str) -> str:
    """The product's name for a source table: `schema.table` (informational; not a path)."""
    return f"{schema}.{table}"


def window_dir_name(seq: int) -> str:
    return f"w{seq:010d}"
