"""Savepoints inside a logged transaction (pure; no I/O).

A transaction that rolls back to a savepoint normally leaves no trace of the undone rows in the binlog: the
server drops them from its transaction cache. Not when the transaction also changed a non-transactional table
(MyISAM, Aria): then the cache is written whole, with `SAVEPOINT `a`` and `ROLLBACK TO `a`` query events among
the rows, and a replica undoes the rows between them as it replays. A reader must do the same: the rows after a
savepoint that the transaction rolls back to are not changes (checked on MariaDB 10.11).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Generic, TypeVar

M = TypeVar("M")

_STATEMENT = re.compile(
    r"^\s*(SAVEPOINT|ROLLBACK\s+(?:WORK\s+)?TO(?:\s+SAVEPOINT)?|RELEASE\s+SAVEPOINT)\s+(`(?:[^`]|``)+`|\S+?)\s*;?\s*$",
    re.IGNORECASE,
)


def savepoint_statement(query: str) -> tuple[str, str] | None:
    """("savepoint" | "rollback" | "release", name) for a savepoint statement, else None. Names compare as the
    server compares them (case-insensitively), without their quotes."""
    m = _STATEMENT.match(query)
    if m is None:
        return None
    verb = m.group(1).split()[0].lower()
    name = m.group(2)
    if name.startswith("`"):
        name = name[1:-1].replace("``", "`")
    return ("savepoint" if verb == "savepoint" else "rollback" if verb == "rollback" else "release"), name.lower()


class Savepoints(Generic[M]):
    """The open transaction's savepoints, each with the reader's mark of where its changes stood then."""

    def __init__(self) -> None:
        self.marks: dict[str, M] = {}

    def clear(self) -> None:
        """A transaction began or ended."""
        self.marks.clear()

    def statement(self, query: str, mark: Callable[[], M], rollback: Callable[[M], None]) -> bool:
        """Apply a savepoint statement (True), or return False for any other statement. `mark()` takes the
        reader's mark; `rollback(mark)` drops what was read after it."""
        found = savepoint_statement(query)
        if found is None:
            return False
        verb, name = found
        if verb == "savepoint":
            self.marks.pop(name, None)  # a savepoint set again moves (and later ones stay: the server keeps them)
            self.marks[name] = mark()
        elif verb == "rollback":
            if name in self.marks:
                rollback(self.marks[name])
                names = list(self.marks)
                for later in names[names.index(name) + 1 :]:  # savepoints set after it are gone
                    del self.marks[later]
        else:
            self.marks.pop(name, None)
        return True
