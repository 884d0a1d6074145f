"""The suite's lean Spark JVM options and the `spark_defaults` fixture's way back to Spark's own execution."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.jvm_archive import LEAN, QUIET, options, spark_defaults_opts

pytestmark = pytest.mark.unit


def test_spark_defaults_drop_the_lean_options_and_keep_the_archive() -> None:
    suite = f"-XX:SharedArchiveFile=/x/spark-1.jsa {QUIET} {LEAN}"
    defaults = spark_defaults_opts(suite)
    assert "TieredStopAtLevel" not in defaults and "codegen" not in defaults and "GC" not in defaults
    assert defaults == f"-XX:SharedArchiveFile=/x/spark-1.jsa {QUIET}"


def test_the_lean_options_are_jit_and_spark_system_properties_only() -> None:
    # Java options and spark.* system properties (which SparkConf reads): nothing a job's result depends on.
    assert all(o.startswith(("-XX:", "-Dspark.sql.codegen.")) for o in LEAN.split())
    assert spark_defaults_opts(LEAN) == ""


def test_one_option_string_with_or_without_the_archive_and_the_lean_options() -> None:
    archive = Path("/x/spark-1.jsa")
    assert options(archive) == f"-XX:SharedArchiveFile=/x/spark-1.jsa {QUIET} {LEAN}"
    assert options(archive, lean=False) == f"-XX:SharedArchiveFile=/x/spark-1.jsa {QUIET}"
    assert options(None) == LEAN
    assert spark_defaults_opts(options(archive)) == options(archive, lean=False)


def test_lean_executors_get_the_jit_flag_only_and_keep_the_timezone(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.jvm_archive import C1_ONLY, CODE_CACHE, DISABLE_ENV, SERIAL_GC, lean_executor_confs

    monkeypatch.delenv(DISABLE_ENV, raising=False)
    opts = lean_executor_confs()["spark.executor.extraJavaOptions"].split()
    assert opts == ["-Duser.timezone=UTC", C1_ONLY, CODE_CACHE, SERIAL_GC]  # no -Dspark.*: Spark refuses those there
    monkeypatch.setenv(DISABLE_ENV, "1")
    assert lean_executor_confs() == {}
