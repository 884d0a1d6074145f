"""Helpers for the security tests: throwaway MariaDB users, hostile names, secret scanning, ZooKeeper dumps,
and "nothing changed" snapshots of ZooKeeper and directories.

Everything here works against the shared services without disturbing them: users and databases get unique
names and are dropped afterwards, ZooKeeper roots are the test's own.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdc_core.capture.source import grant_schema_pattern
from cdc_core.model.naming import quote_mysql

LOCAL = "127.0.0.1"

# Names MariaDB 10.11 accepts (probed): backticks, both quotes, dots, spaces inside, CJK, SQL keywords, `.`,
# `..`, `/`, `\`, leading dashes, glob characters, `%` and `_` (GRANT wildcards). It refuses 4-byte UTF-8 (emoji) in
# identifiers ("Invalid utf8mb4 character string") and names ending in a space.
# Few tables, since every table costs Spark time; together they hold every kind of hostile character.
HOSTILE_TABLES = (
    "select",
    "..",
    ".",
    "-rf a/b\\c it's \"q\" `b` 日本 x.y[1]*?",
)


def hostile_database() -> str:
    """A unique database name with most of the hostile characters (64 characters at most)."""
    return f"x{uuid.uuid4().hex[:6]}_%\\ `'\" ../日本 -"


@dataclass(frozen=True)
class DbUser:
    name: str
    password: str
    host: str = LOCAL

    @property
    def account(self) -> str:
        return f"'{self.name}'@'{self.host}'"


@contextmanager
def mariadb_user(services: Any, grants: Iterable[str], prefix: str = "cdc_sec") -> Iterator[DbUser]:
    """A user of the test's own with exactly `grants` (GRANT statements' `... ON ...` parts); dropped afterwards."""
    user = DbUser(f"{prefix}_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}")
    conn = services.root_connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE USER {user.account} IDENTIFIED BY %s", (user.password,))
            for g in grants:
                cur.execute(f"GRANT {g} TO {user.account}")
        yield user
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS {user.account}")
        conn.close()


def least_privilege_grants(schemas: Iterable[str], monitor: bool = True, slave: bool = True) -> list[str]:
    """The documented minimum: REPLICATION SLAVE + BINLOG MONITOR globally, SELECT on the captured schemas."""
    out = []
    globals_ = [g for g, on in (("REPLICATION SLAVE", slave), ("BINLOG MONITOR", monitor)) if on]
    if globals_:
        out.append(f"{', '.join(globals_)} ON *.*")
    out += [f"SELECT ON {grant_schema_pattern(s)}.*" for s in schemas]
    return out


def create_database(services: Any, name: str) -> None:
    conn = services.root_connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {quote_mysql(name)} CHARACTER SET utf8mb4")
    finally:
        conn.close()


def drop_database(services: Any, name: str) -> None:
    conn = services.root_connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {quote_mysql(name)}")
    finally:
        conn.close()


# ------------------------------------------------------------------------------------------- snapshots


def zk_tree(client: Any, path: str) -> dict[str, tuple[bytes, int, int]]:
    """Every node under `path`: data, data version, child version (what "nothing changed" compares)."""
    out: dict[str, tuple[bytes, int, int]] = {}
    if not client.exists(path):
        return out
    stack = [path]
    while stack:
        p = stack.pop()
        data, stat = client.get(p)
        out[p] = (data or b"", stat.version, stat.cversion)
        stack += [f"{p.rstrip('/')}/{c}" for c in client.get_children(p)]
    return out


def dir_tree(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file (and '<dir>' for directories) under root."""
    out: dict[str, str] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = "<dir>"
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return out


# --------------------------------------------------------------------------------------------- secrets


def secret_forms(secret: str) -> list[str]:
    """A secret and the encodings a leak might take (repr escapes, JSON escapes, percent-encoding)."""
    from urllib.parse import quote

    forms = {secret, quote(secret, safe=""), secret.encode("unicode_escape").decode()}
    return sorted(f for f in forms if f)


def find_secrets_in_files(roots: Iterable[Path], secrets: Iterable[str]) -> list[str]:
    """'<file>: <secret>' for every file under the roots whose bytes contain a secret (any form)."""
    needles = [(s, f.encode()) for s in secrets for f in secret_forms(s)]
    hits = []
    for root in roots:
        files = [root] if root.is_file() else [Path(dp) / f for dp, _, fs in os.walk(root) for f in fs]
        for p in files:
            try:
                data = p.read_bytes()
            except OSError:
                continue
            hits += [f"{p}: {s[:6]}..." for s, n in needles if n in data]
    return hits


def find_values_in_files(roots: Iterable[Path], values: Iterable[str]) -> list[str]:
    """'<file>: <value>' for every file under the roots that holds a value: Parquet files decoded (their pages
    are compressed, so their bytes prove nothing), every other file as bytes (UTF-8)."""
    import json

    import pyarrow.parquet as pq

    wanted = list(values)
    hits = []
    for root in roots:
        for path in [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]:
            try:
                if path.suffix == ".parquet":
                    text = json.dumps(pq.read_table(path).to_pylist(), default=str)
                else:
                    text = path.read_bytes().decode("utf-8", "replace")
            except OSError:
                continue
            hits += [f"{path}: {v!r}" for v in wanted if v in text]
    return hits


def find_secrets_in_text(where: str, text: str, secrets: Iterable[str]) -> list[str]:
    return [f"{where}: {s[:6]}..." for s in secrets for f in secret_forms(s) if f in text]


def files_outside(top: Path, allowed: Iterable[Path]) -> list[str]:
    """Files or directories under `top` that are neither inside an allowed root nor a parent of one."""
    roots = [Path(os.path.realpath(a)) for a in allowed]
    bad = []
    for dirpath, dirnames, filenames in os.walk(top):
        for name in [*dirnames, *filenames]:
            real = Path(os.path.realpath(os.path.join(dirpath, name)))
            inside = any(real == r or r in real.parents for r in roots)
            ancestor = any(real in r.parents for r in roots)
            if not inside and not ancestor:
                bad.append(str(real))
    return bad
