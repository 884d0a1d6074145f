"""Safe names: SQL identifier quoting, path components and table ids for hostile schema/table/column names.

Source names may contain backticks, quotes, dots, spaces, unicode, glob characters, `..` or `/`. They
must neither break SQL (always quote: `quote_mysql`, `quote_spark`) nor escape the staging or lakehouse
roots (always encode: `path_component`), nor be mistaken for another table (`table_id` is injective and
`parse_table_pattern` reads it back). docs/security.md describes the model.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from dataclasses import dataclass

# Bytes a path component keeps as they are; every other byte becomes `~XX` (uppercase hex).
_KEEP = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ESCAPE = "~"
# Longest component path_component emits in full; longer encodings are cut and get a hash suffix.
# Filesystems and object stores allow 255 bytes per component: leave room for the hash and for
# tools that add suffixes (".tmp-...", ".crc").
MAX_COMPONENT = 160
_HASH_CHARS = 32


def quote_mysql(name: str) -> str:
    """Quote a MySQL/MariaDB identifier: `a``b`."""
    return "`" + name.replace("`", "``") + "`"


def quote_spark(name: str) -> str:
    """Quote a Spark SQL identifier (same backtick rule as MySQL)."""
    return "`" + name.replace("`", "``") + "`"


def path_component(name: str) -> str:
    """One path segment for a source name: stable, injective, never empty, never `.`/`..`, no `/`.

    Letters, digits, `_` and `-` stay (so `orders` -> `orders`, `order_items` -> `order_items`); every
    other UTF-8 byte, and a leading `-`, becomes `~XX` (`a.b` -> `a~2Eb`, `..` -> `~2E~2E`, `日` ->
    `~E6~97~A5`). The segment then holds only `A-Za-z0-9_-~`: no separator, no dot, no `%` (delta-rs
    percent-decodes local table paths, twice: `%252E` would be read as `.`), nothing a shell or a
    glob treats specially, and no leading `-` (never read as an option). Each `~` is followed by two
    hex digits, so decoding is unambiguous and two names never share a segment.

    The empty name becomes `~`, which no encoding produces. An encoding longer than MAX_COMPONENT
    (64 CJK characters need 576) is cut and ends in `~~` plus 128 bits of SHA-256 of the name:
    still stable, and distinct from every other segment because `~~` occurs in no full encoding.
    """
    if not name:
        return _ESCAPE
    data = name.encode("utf-8", "surrogatepass")
    out = []
    for i, byte in enumerate(data):
        if byte in _KEEP and not (i == 0 and byte == 0x2D):
            out.append(chr(byte))
        else:
            out.append(f"{_ESCAPE}{byte:02X}")
    encoded = "".join(out)
    if len(encoded) > MAX_COMPONENT:
        digest = hashlib.sha256(data).hexdigest()[:_HASH_CHARS]
        encoded = f"{encoded[: MAX_COMPONENT - _HASH_CHARS - 2]}{_ESCAPE * 2}{digest}"
    return encoded


def decode_path_component(component: str) -> str | None:
    """The name a path_component came from (None for a cut, hashed one): for tools and tests."""
    if component == _ESCAPE:
        return ""
    if _ESCAPE * 2 in component:
        return None
    out = bytearray()
    i = 0
    while i < len(component):
        if component[i] == _ESCAPE:
            out.append(int(component[i + 1 : i + 3], 16))
            i += 3
        else:
            out += component[i].encode()
            i += 1
    return out.decode("utf-8", "surrogatepass")


# ---------------------------------------------------------------------------------------- table ids

# A part of a table id or pattern that needs no quoting: no dot, whitespace, backtick or glob character.
_PLAIN_PART = re.compile(r"[^\s.`*?\[\]]+")  # fullmatch: `$` would accept a trailing newline
_GLOB_CHARS = re.compile(r"[*?\[]")


def _id_part(name: str) -> str:
    return name if _PLAIN_PART.fullmatch(name) else quote_mysql(name)


def table_id(schema: str, table: str) -> str:
    """The product's name for a source table: `schema.table`, each part in backticks when it needs them.

    `shop.orders` stays `shop.orders`; `my.db` + `order items` is `` `my.db`.`order items` ``. Injective
    (a dot in a name can no longer make two tables look alike), and `parse_table_pattern` reads it
    back as a pattern that matches exactly this table.
    """
    return f"{_id_part(schema)}.{_id_part(table)}"


@dataclass(frozen=True)
class NamePattern:
    """One side of a table pattern: a literal name (backtick-quoted) or an fnmatch glob."""

    text: str
    literal: bool

    @property
    def is_literal(self) -> bool:
        return self.literal or not _GLOB_CHARS.search(self.text)

    def matches(self, name: str) -> bool:
        return name == self.text if self.literal else fnmatch.fnmatchcase(name, self.text)


_QUOTED = r"`(?:[^`]|``)+`"
_BARE = r"[^\s.`]+"
_PATTERN = re.compile(rf"({_QUOTED}|{_BARE})\.({_QUOTED}|{_BARE})", re.S)


def _pattern_part(text: str) -> NamePattern:
    if text.startswith("`"):
        return NamePattern(text[1:-1].replace("``", "`"), literal=True)
    return NamePattern(text, literal=False)


def parse_table_pattern(pattern: str) -> tuple[NamePattern, NamePattern]:
    """`schema.table` -> (schema pattern, table pattern); ValueError saying how to write it.

    Each side is a name or an fnmatch glob (`*`, `?`, `[...]`) without dots or whitespace, or any
    name in backticks (taken literally; a backtick inside is doubled), as MySQL writes identifiers.
    The two sides are matched separately, so `shop.*` never matches a table of a schema `shop.x`.
    """
    m = _PATTERN.fullmatch(pattern) if isinstance(pattern, str) else None
    if m is None:
        raise ValueError(
            f"{pattern!r} is not of the form schema.table (one dot; globs allowed, e.g. demo.orders or demo.*; "
            "put a name with dots, spaces, backticks or glob characters in backticks, e.g. `my.db`.`order items`)"
        )
    return _pattern_part(m.group(1)), _pattern_part(m.group(2))


def window_dir_name(seq: int) -> str:
    return f"w{seq:010d}"
