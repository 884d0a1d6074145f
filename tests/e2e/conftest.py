"""End-to-end fixtures: one pipeline of its own per test (helpers in tests/support/e2e.py); the throwaway
Airflow of the test session (`airflow_home`) is in tests/conftest.py, shared with tests/faults."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.e2e import AirflowHome, CdcCase


@pytest.fixture
def cdc_case(airflow_home: AirflowHome, services, source_db: str, zk_root: str, tmp_path: Path) -> Iterator[CdcCase]:  # type: ignore[no-untyped-def]
    name = "e2e_" + uuid.uuid4().hex[:6]
    case = CdcCase(
        name=name,
        database=source_db,
        zk_root=zk_root,
        lake=tmp_path / "lake",
        staging=tmp_path / "staging",
        config_path=tmp_path / "pipelines.yaml",
        airflow=airflow_home,
        services=services,
    )
    case.lake.mkdir()
    case.staging.mkdir()
    yield case
