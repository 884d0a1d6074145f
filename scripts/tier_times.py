"""Print how long each test tier took, from pytest's JUnit XML (scripts/test.sh calls it after the run).

Seconds are the sum of the tier's test times (setup, call and teardown as pytest reports them); on two
xdist workers the tiers overlap, so the wall-clock time of the run is less than their sum.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def tier_of(classname: str) -> str:
    parts = classname.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "tests" else parts[0]


def main(path: str) -> int:
    if not Path(path).exists():
        return 0
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for case in ET.parse(path).getroot().iter("testcase"):  # noqa: S314 (pytest's own file, just written)
        tier = tier_of(case.get("classname", ""))
        seconds[tier] += float(case.get("time") or 0)
        counts[tier] += 1
    for tier in sorted(seconds, key=seconds.get, reverse=True):  # type: ignore[arg-type]
        t = seconds[tier]
        took = f"{t / 60:.1f} min" if t >= 60 else f"{t:.0f} s"
        print(f"tier {tier}: {counts[tier]} tests, {took} of test time")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
