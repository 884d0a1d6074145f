"""The pipeline DAG's merge on a Spark standalone cluster (issue 20 §1, the DAG side of tests/cluster/): the
`cdc_<name>` DAG (`airflow dags test`) submits `merge_window` with SparkSubmitOperator through the pipeline's
Spark connection `spark://127.0.0.1:<port>`, deploy mode client; the job is an application of the cluster's
master, its executors run on the workers, and the lake equals the source.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2e_support import CdcCase, assert_all, assert_lake_equals_source, binlog_position, seed
from spark_cluster_support import Cluster, running_cluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster() as c:
        yield c


def test_the_dag_merges_on_the_cluster(cdc_case: CdcCase, cluster: Cluster) -> None:
    case = cdc_case
    case.write_config(
        binlog_position(case.services),
        spark={"conn_id": "spark_cluster", "conf": {"spark.executor.memory": "512m", "spark.cores.max": "2"}},
    )
    seed(case)
    run = case.run_pipeline(env={"AIRFLOW_CONN_SPARK_CLUSTER": cluster.connection})
    assert run.state == "success", run.explain()
    assert_all(run, "success")
    assert any(a.startswith(f"cdc-merge-{case.name}-") for a in cluster.apps()), cluster.apps()
    assert_lake_equals_source(case, ["customers", "orders"])
