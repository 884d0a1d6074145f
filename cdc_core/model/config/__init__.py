"""The configuration model: one YAML file that declares any number of pipelines.

The file has two keys. `defaults` holds every setting a pipeline may override (ZooKeeper, lease,
storage roots, Spark, window caps, schedule, catching up, delete mode, ...); `pipelines` lists the pipelines, each
with its name, its source (an Airflow connection id: secrets never live in this file), its table
filter and its configured start. `load_config()` reads the file it is given, else the one `$CDC_CONFIG`
names, else `config/pipelines.yaml` in the current directory (`loader.config_path`; never a path inside the
installed package), merges the defaults into each pipeline (mappings key by key; lists and scalars
replace) and validates everything with pydantic. Every problem becomes a `ConfigError`
line that names the file, the pipeline, the key path and what is wrong:

    config/pipelines.yaml: pipeline 'orders': caps.max_events: must be > 0 (got -1)

Relative storage roots are relative to the configuration file's directory; fsspec URLs
(`s3://bucket/lake`) are kept as written.

Modules: `checks` (the field checks and the strict base model), `sections` (the settings sections: ZooKeeper,
Spark, object store, caps, snapshot, table options, schema changes, maintenance), `pipelines`
(`PipelineSettings`, `PipelineConfig`, `CdcConfig`) and `loader` (reading, merging, error lines). The names
below are what the run cycle, the CLI, the DAGs and most tests use.
"""

from __future__ import annotations

from cdc_core.model.config.checks import parse_utc_timestamp
from cdc_core.model.config.loader import load_config
from cdc_core.model.config.pipelines import PipelineConfig
from cdc_core.model.config.sections import MaintenanceConfig

__all__ = ["MaintenanceConfig", "PipelineConfig", "load_config", "parse_utc_timestamp"]
