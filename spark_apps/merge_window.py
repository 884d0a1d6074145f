"""spark-submit's entry point of the merge job (the job itself: spark_apps/merge/, docs/merge.md)."""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import cdc_core  # noqa: F401
except ImportError:  # spark-submit of a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_apps.merge.job import main

if __name__ == "__main__":
    sys.exit(main())
