"""The static checks as tests: `ruff check` over the whole repository and `mypy` as pyproject.toml
configures it (strict, over cdc_core, spark_apps, plugins/cdc_airflow and the DAG files), both run
from this interpreter's environment (the project's .venv), so a lint or type error fails the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def run_tool(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


def report(proc: subprocess.CompletedProcess[str]) -> str:
    return f"{' '.join(proc.args[2:])} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"


def test_ruff_passes_on_the_whole_repository() -> None:
    proc = run_tool("ruff", "check", ".", timeout=120)
    assert proc.returncode == 0, report(proc)


def test_mypy_passes_as_configured() -> None:
    # The targets come from [tool.mypy] in pyproject.toml; its cache (.mypy_cache, git-ignored) makes a
    # second run take about a second (a cold one ~25 s).
    proc = run_tool("mypy", timeout=600)
    assert proc.returncode == 0, report(proc)


def test_no_two_test_modules_share_a_file_name() -> None:
    """pytest imports test modules by file name (no packages under tests/ but support): two tiers' test_x.py make
    the second fail to collect ("import file mismatch")."""
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
