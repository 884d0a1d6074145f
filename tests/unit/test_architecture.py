"""The shape of cdc_core is kept by a contract, not by review: `lint-imports` checks the layers in
pyproject.toml (`[tool.importlinter]`; docs/architecture.md) on every test run."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_cdc_core_keeps_its_layers_and_imports_neither_airflow_nor_spark() -> None:
    """And the Spark jobs import no run or capture code, and the Airflow glue no Spark job (one contract over
    cdc_core, spark_apps and cdc_airflow)."""
    lint = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")])}
    r = subprocess.run([str(lint), "--no-cache"], check=False, cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_every_cdc_core_module_sits_in_a_layer() -> None:
    """A module added at the top of cdc_core would escape the layers contract: only the CLI lives there."""
    top = sorted(p.name for p in (ROOT / "cdc_core").glob("*.py"))
    assert top == ["__init__.py", "cli.py"], top


def _imported_names(path: Path) -> list[tuple[str, str, int]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out += [(node.module, a.name, node.lineno) for a in node.names]
    return out


def test_the_airflow_glue_and_the_dags_import_no_private_name_and_no_spark() -> None:
    """The DAG files and the Airflow glue are thin shells over cdc_core's public functions."""
    files = [*(ROOT / "plugins").rglob("*.py"), *(ROOT / "dags").glob("*.py")]
    bad = [
        f"{p.relative_to(ROOT)}:{line}: from {module} import {name}"
        for p in files
        for module, name, line in _imported_names(p)
        if (name.startswith("_") and not name.startswith("__")) or module.split(".")[0] in ("pyspark", "delta")
        or module.startswith("spark_apps")
    ]
    assert bad == [], bad

