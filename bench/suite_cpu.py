"""What the test suite's Spark JVM options cost: test modules run one at a time (one pytest process, no xdist)
under each SPARK_SUBMIT_OPTS variant, measuring the machine's CPU seconds (user + system of every process, from
/proc/stat) and the wall time. The suite is CPU-bound on 2 cores, so machine CPU is what its wall time follows.

Variants: `archive` (the class-data archive only, the suite's options before 2026-11-28) and `lean` (the
archive, the client JIT and Spark's interpreted expressions: tests/support/jvm_archive.py, what the suite uses
now); `--defaults` adds Spark's and Java's defaults; `--opts name=options` (repeatable) adds a variant of the
lean options plus `options` (e.g. another garbage collector); `--only name` runs the named variants alone.

    python -m bench.suite_cpu tests/faults/test_fault_crashes.py tests/integration/test_cli_run.py

Prints one JSON line per (module, variant). Never part of the test suite; run it on a quiet machine (services
are started by the tests' own fixtures).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from bench.common import ROOT, load_avg, log


def machine_cpu() -> float:
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    return sum(int(x) for x in fields[:3]) / os.sysconf("SC_CLK_TCK")  # user, nice, system


def variants(defaults: bool, extra: list[str] = (), only: list[str] = ()) -> dict[str, str]:  # type: ignore[assignment]
    from tests.support.jvm_archive import build, options

    archive = build()
    out = {"archive": options(archive, lean=False), "lean": options(archive)}
    if defaults:
        out = {"defaults": "", **out}
    for item in extra:
        name, _, opts = item.partition("=")
        out[name] = f"{options(archive)} {opts}"
    return {k: v for k, v in out.items() if not only or k in only}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.suite_cpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("modules", nargs="+", help="test modules (or node ids)")
    p.add_argument("--defaults", action="store_true", help="also Spark's and Java's defaults")
    p.add_argument("--opts", action="append", default=[], help="another variant: name=JVM options added to lean")
    p.add_argument("--only", action="append", default=[], help="run only this variant (repeatable)")
    args = p.parse_args(argv)
    for module in args.modules:
        for name, opts in variants(args.defaults, args.opts, args.only).items():
            env = {**os.environ, "SPARK_SUBMIT_OPTS": opts, "SPARK_LOCAL_IP": "127.0.0.1"}
            if not opts:
                env.pop("SPARK_SUBMIT_OPTS")
                env["CDC_TEST_JVM_DEFAULTS"] = "1"
            cpu0, t0 = machine_cpu(), time.monotonic()
            done = subprocess.run([sys.executable, "-m", "pytest", module, "-p", "no:xdist", "-q", "-x"], env=env,
                                  cwd=ROOT, capture_output=True, text=True, check=False)
            cpu, wall = machine_cpu() - cpu0, time.monotonic() - t0
            if done.returncode != 0:
                log(f"suite_cpu: {module} under {name} failed:\n{done.stdout[-3000:]}")
                return 1
            print(json.dumps({"module": module, "variant": name, "machine_cpu_s": round(cpu), "wall_s": round(wall),
                              "load": load_avg()}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
