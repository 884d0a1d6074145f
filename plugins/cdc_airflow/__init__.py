"""Thin Airflow glue for the CDC pipelines: a hook, the merge operator, the DAG steps, the monitor page.

Everything here delegates to `cdc_core.run.pipeline`; no CDC decision is made in Airflow code. The package
is imported as `cdc_airflow` (Airflow puts the plugins folder on sys.path); the plugin itself is
registered by `plugins/cdc_monitor_plugin.py`.
"""
