"""The shape of cdc_core is kept by a contract, not by review: `lint-imports` checks the layers in
pyproject.toml (`[tool.importlinter]`; docs/architecture.md) on every test run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_cdc_core_keeps_its_layers_and_imports_neither_airflow_nor_spark() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(lint), "--no-cache"], check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_every_cdc_core_module_sits_in_a_layer() -> None:
    """A module added at the top of cdc_core would escape the layers contract: only the CLI lives there."""
    top = sorted(p.name for p in (ROOT / "cdc_core").glob("*.py"))
    assert top == ["__init__.py", "cli.py"], top
