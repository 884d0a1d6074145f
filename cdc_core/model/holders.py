"""Who holds a lease, as a process: recognising a `cdc` command that died while holding it.

A CLI run records its process identity in the lease record (`LeaseRecord.process`): host name, the
kernel's boot id, the PID namespace, the PID and the process's start time (field 22 of
/proc/<pid>/stat, clock ticks since boot). A later CLI run on the same host that finds the lease held
can then tell a dead holder (killed, OOM, rebooted) from a live one, and break the lease the
documented way (`PipelineCoordinator.break_lease`: the epoch moves on, so the holder is fenced should
it be alive after all) instead of waiting `lease_seconds` for the expiry.

The decision (`judge`) is a pure function over facts; gathering them (`this_process`,
`start_ticks`, `local_host`) reads /proc. Holders on other hosts (or in another PID namespace, e.g.
another container), holders without a recorded identity (Airflow tasks, older releases) and live
processes are never judged dead. A PID reused by another process has another start time; a reboot
changes the boot id.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

PROCESS_FORMAT = 1

Verdict = Literal["dead", "alive", "unknown", "other_host"]


@dataclass(frozen=True)
class ProcessIdentity:
    """One process, unambiguously on one machine: (host, boot id, PID namespace, PID, start ticks)."""

    host: str
    pid: int
    start_ticks: int | None
    boot_id: str | None = None
    pid_ns: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PROCESS_FORMAT,
            "host": self.host,
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "boot_id": self.boot_id,
            "pid_ns": self.pid_ns,
        }

    @classmethod
    def from_dict(cls, d: Any) -> ProcessIdentity | None:
        """None for anything this version cannot read (then nobody judges the holder dead)."""
        if not isinstance(d, dict) or d.get("format") != PROCESS_FORMAT:
            return None
        try:
            ticks = d.get("start_ticks")
            return cls(
                host=str(d["host"]),
                pid=int(d["pid"]),
                start_ticks=None if ticks is None else int(ticks),
                boot_id=None if d.get("boot_id") is None else str(d["boot_id"]),
                pid_ns=None if d.get("pid_ns") is None else str(d["pid_ns"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class LocalHost:
    """The facts about this machine a verdict needs."""

    host: str
    boot_id: str | None
    pid_ns: str | None


def judge(recorded: ProcessIdentity | None, here: LocalHost, ticks_now: int | None) -> tuple[Verdict, str]:
    """Is the lease holder `recorded` dead, seen from `here`? (verdict, reason)

    `ticks_now` is the start time of the process that has `recorded.pid` on this host now (None: no
    such process, or a zombie). Only "dead" allows breaking the lease.
    """
    if recorded is None:
        return "unknown", "the lease records no process identity (an Airflow task or an older release)"
    if recorded.host != here.host:
        return "other_host", f"the holder runs on host {recorded.host!r}, this is {here.host!r}"
    if recorded.pid_ns is None or here.pid_ns is None or recorded.pid_ns != here.pid_ns:
        return "other_host", (
            f"the holder runs in PID namespace {recorded.pid_ns!r}, this process in {here.pid_ns!r} "
            "(another container on the same host name?)"
        )
    if recorded.boot_id is not None and here.boot_id is not None and recorded.boot_id != here.boot_id:
        return "dead", f"host {here.host!r} rebooted since the holder started (boot id changed)"
    if recorded.start_ticks is None:
        return "unknown", "the lease records no process start time"
    if ticks_now is None:
        return "dead", f"no process {recorded.pid} on {here.host!r}"
    if ticks_now != recorded.start_ticks:
        return "dead", (
            f"process {recorded.pid} on {here.host!r} is another process (started at tick {ticks_now}, the holder "
            f"at {recorded.start_ticks}): the PID was reused"
        )
    return "alive", f"process {recorded.pid} on {here.host!r} is running"


# ------------------------------------------------------------------------------------- gathering


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def start_ticks(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks since boot), None when there is none or it is a zombie."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ')': split after the last ')'.
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        state, ticks = fields[0], int(fields[19])  # field 3 (state) and field 22 (starttime)
    except (IndexError, ValueError):
        return None
    return None if state in ("Z", "X", "x") else ticks


def local_host() -> LocalHost:
    try:
        pid_ns: str | None = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_ns = None
    return LocalHost(os.uname().nodename, _read("/proc/sys/kernel/random/boot_id"), pid_ns)


def this_process() -> ProcessIdentity:
    here = local_host()
    pid = os.getpid()
    return ProcessIdentity(here.host, pid, start_ticks(pid), here.boot_id, here.pid_ns)


def judge_holder(recorded: ProcessIdentity | None) -> tuple[Verdict, str]:
    """`judge` with the facts of this machine (reads /proc)."""
    here = local_host()
    usable = recorded is not None and recorded.host == here.host and recorded.pid_ns == here.pid_ns
    return judge(recorded, here, start_ticks(recorded.pid) if usable and recorded is not None else None)
