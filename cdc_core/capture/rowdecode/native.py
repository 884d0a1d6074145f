"""The compiled row walk (cdc_core/capture/_rowscan.c, built by scripts/setup.sh and `pip install`): its
module, or None when it is not built (the same walk then runs as generated Python: slower, same results)."""

from __future__ import annotations

import importlib
import os
from typing import Any

rowscan: Any
try:  # the compiled row walk (setup.py builds it as cdc_core.capture._rowscan)
    rowscan = importlib.import_module("cdc_core.capture._rowscan")
except ImportError:  # not built: the same walk runs as generated Python (slower, same results)
    rowscan = None


def native_available() -> bool:
    """Whether the compiled row walk is used: built, and not switched off with CDC_NATIVE_DECODER=0."""
    return rowscan is not None and os.environ.get("CDC_NATIVE_DECODER", "1") != "0"
