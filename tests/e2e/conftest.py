"""End-to-end fixtures: one pipeline of its own per test (helpers in tests/support/e2e.py); the throwaway
Airflow of the test session (`airflow_home`) is in tests/conftest.py, shared with tests/faults."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.e2e import ROOT, AirflowHome, CdcCase
from tests.support.warm_airflow import WarmAirflow


@pytest.fixture(scope="session")
def warm_airflow(airflow_home: AirflowHome) -> Iterator[WarmAirflow]:
    """The session's Airflow, imported once: each `airflow dags test` forks from it (tests/support/warm_airflow.py)."""
    warm = WarmAirflow(airflow_home.env, airflow_home.home / "warm", ROOT)
    yield warm
    warm.close()


@pytest.fixture
def cdc_case(  # type: ignore[no-untyped-def]
    airflow_home: AirflowHome, warm_airflow: WarmAirflow, services, source_db: str, zk_root: str, tmp_path: Path
) -> Iterator[CdcCase]:
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
        warm=warm_airflow,
    )
    case.lake.mkdir()
    case.staging.mkdir()
    yield case
