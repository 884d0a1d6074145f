"""The Spark jobs' one argument (cdc_core.lake.job_specs): what the submitter writes, the job reads back
exactly; anything else is a ConfigError that names the field."""

from __future__ import annotations

import json

import pytest

from cdc_core.lake.job_specs import SPEC_FLAG, MaintenanceJobSpec, MergeJobSpec
from cdc_core.model.errors import ConfigError

pytestmark = pytest.mark.unit

MERGE = MergeJobSpec(
    window_dir="s3://b/staging/orders/w0000000007", lake_root="s3://b/lake", pipeline="orders", seq=7,
    token=0x1A2B, report="s3://b/staging/orders/reports/w7.json", delete_mode="soft", zk_hosts="zk1:2181",
    zk_root="/cdc", table_options={"shop.orders": {"partition_by": ["day"]}},
    table_properties={"delta.logRetentionDuration": "interval 30 days"}, parallelism=3,
)


def test_the_merge_job_reads_back_exactly_what_the_pipeline_wrote() -> None:
    from spark_apps.merge import parse_args

    args = MERGE.args()
    assert args[0] == SPEC_FLAG and len(args) == 2
    assert parse_args(args) == MERGE


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": 2}, "no format 1"),
        ({"seq": "7"}, "seq must be int"),
        ({"seq": True}, "seq must be int"),
        ({"zk_hosts": 5}, "zk_hosts must be str | None"),
        ({"table_options": []}, "table_options must be dict"),
        ({"sequence": 7}, "unknown field(s) sequence"),
        ({"delete_mode": "purge"}, "delete_mode must be one of hard, soft"),
        ({"zk_root": None}, "zk_hosts needs zk_root"),
        ({"parallelism": 0}, "parallelism must be >= 1"),
    ],
)
def test_a_bad_merge_spec_is_refused_naming_the_field(change: dict[str, object], message: str) -> None:
    from spark_apps.merge import parse_args

    raw = {**json.loads(MERGE.to_json()), **change}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("|", r"\|")):
        parse_args([SPEC_FLAG, json.dumps(raw)])


def test_missing_fields_and_bad_json_are_refused() -> None:
    with pytest.raises(ConfigError, match="missing field"):
        MergeJobSpec.from_json(json.dumps({"format": 1, "pipeline": "orders"}))
    with pytest.raises(ConfigError, match="not valid JSON"):
        MaintenanceJobSpec.from_json("{pipeline: orders}")
    with pytest.raises(ConfigError, match="must be a JSON object"):
        MaintenanceJobSpec.from_json("[]")
