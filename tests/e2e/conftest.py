"""End-to-end fixtures: one throwaway Airflow per test session, one pipeline of its own per test
(helpers in e2e_support.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import AirflowHome, CdcCase, airflow_env


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory, services) -> AirflowHome:  # type: ignore[no-untyped-def]
    home = tmp_path_factory.mktemp("airflow")
    af = AirflowHome(home=home, env=airflow_env(home))
    proc = af.airflow("db", "migrate", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return af


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
