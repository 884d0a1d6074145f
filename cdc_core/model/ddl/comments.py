"""A statement's executable text, by the servers' comment rules (`executable_sql`).

Versioned comments `/*!50100 ...*/` and MariaDB's `/*M!100100 ...*/` are part of the statement when the server
runs them (`_executes`); other comments are dropped; quoted strings and names are copied untouched. `scan` also
says where an unterminated quoted string or name starts, and `first_word` reads the first word cheaply, so that
a statement which cannot be DDL stops there.
"""

from __future__ import annotations


def executable_sql(query: str, server_version: int | None = None) -> str:
    """The statement as the server executes it: comments removed, versioned comments applied.

    `/*!NNNNN ...*/` (5 or 6 digits) and MariaDB's `/*M!NNNNNN ...*/` contribute their content when the
    server runs them (`_executes`: NNNNN <= server_version, with the servers' own exceptions; all of them
    when server_version is None); `/*! ...*/` without a version always does; `/* ...*/`, `-- ...` and
    `# ...` do not. Quoted strings and names are copied untouched. Trailing semicolons and whitespace are
    removed."""
    text, _ = scan(query, server_version)
    return text


def scan(query: str, server_version: int | None) -> tuple[str, int | None]:
    """(executable text, offset in it where an unterminated quoted string or name starts, else None)."""
    out: list[str] = []
    size = 0  # characters in `out`
    i, n = 0, len(query)
    in_versioned = False  # inside an executed /*! ... */: its `*/` ends it
    while i < n:
        c = query[i]
        if c in "'\"`":
            j = _quoted_end(query, i)
            if j < 0:
                out.append(query[i:])
                return _finish(out), size
            out.append(query[i:j])
            size += j - i
            i = j
            continue
        if c == "/" and query.startswith("/*", i):
            nested = False
            if not in_versioned and (query.startswith("/*!", i) or query.startswith("/*M!", i)):
                mariadb_syntax = query[i + 2] == "M"
                k = i + (4 if mariadb_syntax else 3)
                digits = 0
                while k + digits < n and digits < 6 and query[k + digits] in "0123456789":
                    digits += 1
                version = int(query[k : k + digits]) if digits >= 5 else None
                if version is not None:
                    k += digits
                if _executes(version, mariadb_syntax, server_version):
                    in_versioned = True
                    out.append(" ")
                    size += 1
                    i = k
                    continue
                nested = True  # a skipped versioned comment may hold one ordinary comment
            i = _comment_end(query, i + 2, nested)
            out.append(" ")
            size += 1
            continue
        if c == "*" and in_versioned and query.startswith("*/", i):
            in_versioned = False
            out.append(" ")
            size += 1
            i += 2
            continue
        if c == "#" or (c == "-" and query.startswith("--", i) and (i + 2 == n or query[i + 2] <= " ")):
            end = query.find("\n", i)
            i = n if end < 0 else end + 1
            out.append(" ")
            size += 1
            continue
        if c == "-" and query.startswith("--", i):
            out.append("- -")  # `a--1` is a - (-1) in MySQL; keep any later reader from seeing a comment
            size += 3
            i += 2
            continue
        out.append(c)
        size += 1
        i += 1
    return _finish(out), None


def _executes(version: int | None, mariadb_syntax: bool, server_version: int | None) -> bool:
    """Whether a versioned comment is executed, by the servers' lexers: MySQL runs `/*!NNNNN` up to its
    version and ignores `/*M!`; MariaDB (versions from 100000 on) runs `/*M!NNNNNN` up to its version, and
    `/*!NNNNN` too except MySQL 5.7+ versions (50700..99999), whose syntax it may not have."""
    if server_version is None:
        return True
    mariadb = server_version >= 100000
    if mariadb_syntax and not mariadb:
        return False
    if version is None:
        return True
    if mariadb and not mariadb_syntax and 50700 <= version <= 99999:
        return False
    return version <= server_version


def _comment_end(query: str, i: int, nested: bool) -> int:
    """The index after the `*/` that closes a comment whose text starts at i (the end when there is none)."""
    n = len(query)
    while i < n:
        end = query.find("*/", i)
        if end < 0:
            return n
        inner = query.find("/*", i, end) if nested else -1
        if inner < 0:
            return end + 2
        nested = False
        i = query.find("*/", inner + 2)
        if i < 0:
            return n
        i += 2
    return n


def _finish(out: list[str]) -> str:
    text = "".join(out).strip()
    while text.endswith(";"):
        text = text[:-1].rstrip()
    return text


def _quoted_end(query: str, i: int) -> int:
    """The index after the quoted string or name starting at query[i], or -1 when it is not terminated."""
    quote = query[i]
    j, n = i + 1, len(query)
    while j < n:
        ch = query[j]
        if ch == "\\" and quote != "`":
            j += 2
            continue
        if ch == quote:
            if j + 1 < n and query[j + 1] == quote:
                j += 2
                continue
            return j + 1
        j += 1
    return -1


def first_word(query: str, server_version: int | None) -> str:
    """The statement's first word, upper-case (cheap: statements that cannot be DDL stop here)."""
    text, _ = scan(query[:4096], server_version)
    word = []
    for ch in text:
        if ch.isalnum() or ch == "_":
            word.append(ch)
        elif word or not ch.isspace():
            break
    first = "".join(word).upper()
    if first or len(query) <= 4096:
        return first
    text, _ = scan(query, server_version)  # a leading comment longer than the cheap window
    return text.split(maxsplit=1)[0].upper() if text.split() else ""
