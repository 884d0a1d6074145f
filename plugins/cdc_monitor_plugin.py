"""Registers the CDC monitor page (see cdc_airflow/monitor.py) with Airflow's plugin manager."""

from __future__ import annotations

from cdc_airflow.monitor import CdcMonitorPlugin

__all__ = ["CdcMonitorPlugin"]
