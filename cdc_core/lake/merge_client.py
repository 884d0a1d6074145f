"""The warm merge option, client side: hand a window's merge job to a long-running merge server.

By default a window's merge is `spark-submit spark_apps/merge_window.py --spec <json>`: a new JVM, Spark
session and Delta start-up per window. A merge server (`spark_apps/merge_server.py`, started by
`cdc merge-server <pipeline>`) keeps one Spark application and runs the very same job code for each
request (parse the spec, fence on the lease, MERGE with txnAppId/txnVersion, write the report) in a fresh
session of its own. This module is the protocol and the client; it imports no Spark (cdc_core never does).

Protocol: one TCP connection per request, one JSON object per line each way.

- request  `{"v": 1, "op": "merge", "args": [<the job's application arguments>], "pid": <client pid>}`
  answer   `{"v": 1, "rc": <exit code>, "stdout": "...", "stderr": "..."}`: what spark-submit would have
  returned (the report as the last stdout line, the job's `merge_window: <Error>: ...` line on stderr), so
  the caller's handling of exit codes (5 = fenced, ...) is the spark-submit path's.
- request  `{"v": 1, "op": "ping"}` -> `{"v": 1, "ok": true, "pid": ..., "merges": n, "pipelines": [...]}`.

A request may also carry `fault` / `fault_once`: the crash suite's armed fault points (CDC_FAULT,
CDC_FAULT_ONCE, cdc_core.model.faults), which a spark-submit job would have inherited from the submitter's
environment. The product server ignores them; the fault suite's server (tests/faults/merge_server.py) acts
on them.

An unreachable server, or one that closes the connection without an answer (killed mid-merge), is a
`MergeServerUnavailable` (a LakeError): the merge step failed and is safe to retry (every table commit is
idempotent and fenced), never skipped.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdc_core.model.errors import ConfigError, LakeError
from cdc_core.model.logfmt import one_line

PROTOCOL_VERSION = 1
ADDRESS_ENV = "CDC_MERGE_SERVER"  # overrides spark.merge_server.address for every pipeline of the process
FAULT_ENV = {"fault": "CDC_FAULT", "fault_once": "CDC_FAULT_ONCE"}
MAX_LINE = 64 * 1024 * 1024  # a request or an answer (a report of thousands of tables stays far below)
CONNECT_TIMEOUT = 10.0


class MergeServerUnavailable(LakeError):
    """The merge server could not be reached, or went away before answering: retry the step."""


def parse_address(address: str) -> tuple[str, int]:
    """`host:port` (IPv6 as `[::1]:port`) -> (host, port); a ConfigError says what is wrong."""
    text = address.strip()
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"merge server address must be host:port (e.g. 127.0.0.1:7199), got {address!r}")
    return host.strip("[]"), int(port)


def merge_request(
    args: Sequence[str], *, pid: int | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The request for one merge job: its application arguments (what spark-submit would get after the
    application), the client's pid (the server logs it) and the crash suite's armed fault points."""
    environ = os.environ if environ is None else environ
    req: dict[str, Any] = {"v": PROTOCOL_VERSION, "op": "merge", "args": [str(a) for a in args],
                           "pid": os.getpid() if pid is None else pid}
    for key, var in FAULT_ENV.items():
        if environ.get(var):
            req[key] = environ[var]
    return req


def encode(message: Mapping[str, Any]) -> bytes:
    return (json.dumps(dict(message), sort_keys=True) + "\n").encode()


def decode(line: bytes, what: str = "message") -> dict[str, Any]:
    """One protocol line -> its object; ValueError when it is not one (a peer speaking something else)."""
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"merge server {what} is not JSON: {one_line(e)}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"merge server {what} must be a JSON object")
    if obj.get("v") != PROTOCOL_VERSION:
        raise ValueError(f"merge server {what} has protocol version {obj.get('v')!r}, expected {PROTOCOL_VERSION}: "
                         "run the server and the client from the same release")
    return obj


@dataclass(frozen=True)
class MergeAnswer:
    """What spark-submit of the merge job would have returned."""

    rc: int
    stdout: str
    stderr: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MergeAnswer:
        rc, out, err = d.get("rc"), d.get("stdout", ""), d.get("stderr", "")
        if not isinstance(rc, int) or isinstance(rc, bool) or not isinstance(out, str) or not isinstance(err, str):
            raise ValueError("merge server answer needs an integer rc and string stdout/stderr")
        return cls(rc, out, err)

    def to_dict(self) -> dict[str, Any]:
        return {"v": PROTOCOL_VERSION, "rc": self.rc, "stdout": self.stdout, "stderr": self.stderr}


def read_line(sock: socket.socket, limit: int = MAX_LINE) -> bytes:
    """Bytes up to and including the first newline; b'' when the peer closed before sending one."""
    data = bytearray()
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            return b""
        data += chunk
        if len(data) > limit:
            raise ValueError(f"merge server line longer than {limit} bytes")
    return bytes(data)


def exchange(address: str, message: Mapping[str, Any], timeout: float | None) -> dict[str, Any]:
    """Send one message, wait (at most `timeout` seconds; None: as long as it takes) for its answer."""
    host, port = parse_address(address)
    try:
        sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
    except OSError as e:
        raise MergeServerUnavailable(
            f"cannot reach the merge server at {address}: {one_line(e)}. Start it (`cdc merge-server <pipeline>`), "
            "or remove spark.merge_server (and CDC_MERGE_SERVER) to merge with spark-submit; the merge step is safe "
            "to retry"
        ) from e
    with sock:
        try:
            sock.settimeout(timeout)
            sock.sendall(encode(message))
            line = read_line(sock)
        except TimeoutError as e:
            raise MergeServerUnavailable(
                f"the merge server at {address} did not answer within {timeout:g} s "
                "(spark.merge_server.timeout_seconds); it may still be merging: the step is safe to retry "
                "(its commits are idempotent and fenced)"
            ) from e
        except OSError as e:
            raise MergeServerUnavailable(
                f"the connection to the merge server at {address} broke: {one_line(e)}; the step is safe to retry"
            ) from e
    if not line:
        raise MergeServerUnavailable(
            f"the merge server at {address} closed the connection without an answer (killed or restarted while "
            "merging?); whatever it committed is this same immutable window, idempotently: the step is safe to retry"
        )
    try:
        return decode(line, "answer")
    except ValueError as e:
        raise MergeServerUnavailable(f"{e} (at {address})") from None


def request_merge(address: str, args: Sequence[str], timeout: float | None = None) -> MergeAnswer:
    """Run the merge job with these application arguments on the server; its spark-submit-like answer."""
    answer = exchange(address, merge_request(args), timeout)
    try:
        return MergeAnswer.from_dict(answer)
    except ValueError as e:
        raise MergeServerUnavailable(f"{e} (at {address})") from None


def ping(address: str, timeout: float = 10.0) -> dict[str, Any]:
    """The server's status (pid, merges served, pipelines); MergeServerUnavailable when not answering."""
    return exchange(address, {"v": PROTOCOL_VERSION, "op": "ping"}, timeout)
