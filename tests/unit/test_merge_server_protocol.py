"""The warm merge option without Spark: the protocol (cdc_core/lake/merge_client.py), the server's request
handling (spark_apps/merge_server.py with a fake session), and how `Pipeline.merge_locally` uses it.

The real job on a real Spark session: tests/integration/test_warm_merge.py (and the fault suite, whose
merge server is this one).
"""

from __future__ import annotations

import shlex
import socket
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

import spark_apps.merge_server as ms
from cdc_core.capture.source import SourceParams
from cdc_core.coordination import LeaseGrant
from cdc_core.lake import merge_client as mc
from cdc_core.lake.job_specs import MergeJobSpec
from cdc_core.model.config import PipelineConfig
from cdc_core.model.errors import ConfigError, Fenced, LakeError, StagingError
from cdc_core.run import stage
from cdc_core.run.pipeline import Pipeline
from tests.support.fake_manifest import fake_manifest
from tests.support.ports import free_port

pytestmark = pytest.mark.unit

GRANT = LeaseGrant(pipeline="p", holder="cli/run/x/1", token=0x42, expires_at=0.0, acquired_at=0.0)


def _spec_args(pipeline: str = "p", seq: int = 3) -> list[str]:
    return MergeJobSpec(window_dir="/w", lake_root="/l", pipeline=pipeline, seq=seq, token=0x42, report="/r").args()


# ------------------------------------------------------------------------------------------ protocol


@pytest.mark.parametrize(("text", "want"), [("127.0.0.1:7199", ("127.0.0.1", 7199)), (" h:1 ", ("h", 1)),
                                            ("[::1]:80", ("::1", 80))])
def test_addresses(text: str, want: tuple[str, int]) -> None:
    assert mc.parse_address(text) == want


@pytest.mark.parametrize("text", ["", "host", ":7199", "h:0", "h:70000", "h:x"])
def test_bad_addresses_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError, match="host:port"):
        mc.parse_address(text)


def test_a_request_carries_the_job_arguments_and_only_the_armed_fault_points() -> None:
    req = mc.merge_request(["--spec", "{}"], pid=7, environ={"CDC_FAULT": "mid_merge", "OTHER": "x"})
    assert req == {"v": 1, "op": "merge", "args": ["--spec", "{}"], "pid": 7, "fault": "mid_merge"}
    assert "fault" not in mc.merge_request([], pid=1, environ={})
    assert mc.decode(mc.encode(req)) == req


@pytest.mark.parametrize(("line", "match"), [(b"nope\n", "not JSON"), (b"[1]\n", "JSON object"),
                                             (b'{"v": 2}\n', "protocol version 2")])
def test_lines_that_are_not_the_protocol(line: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        mc.decode(line)


def test_answers_are_checked() -> None:
    a = mc.MergeAnswer(5, "", "merge_window: Fenced: x\n")
    assert mc.MergeAnswer.from_dict(a.to_dict()) == a
    for bad in ({"rc": "0"}, {"rc": True}, {"rc": 0, "stdout": 1}, {}):
        with pytest.raises(ValueError, match="integer rc"):
            mc.MergeAnswer.from_dict(bad)


def test_an_unreachable_server_is_a_retryable_lake_error() -> None:
    with pytest.raises(mc.MergeServerUnavailable, match=r"cannot reach the merge server .*safe to retry") as e:
        mc.request_merge(f"127.0.0.1:{free_port()}", ["--spec", "{}"])
    assert isinstance(e.value, LakeError) and e.value.exit_code == 8


@pytest.fixture
def hangup_server() -> Iterator[str]:
    """Reads a request, then closes without answering (a server killed mid-merge)."""
    lsock = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = lsock.accept()
        with conn:
            mc.read_line(conn)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"127.0.0.1:{lsock.getsockname()[1]}"
    t.join(5)
    lsock.close()


def test_a_server_gone_before_answering_is_a_retryable_lake_error(hangup_server: str) -> None:
    with pytest.raises(mc.MergeServerUnavailable, match=r"without an answer.*safe to retry"):
        mc.request_merge(hangup_server, ["--spec", "{}"])


# -------------------------------------------------------------------------- the server (fake Spark)


class FakeSession:
    made = 0

    def __init__(self) -> None:
        FakeSession.made += 1
        self.conf: dict[str, str] = {}
        self.sparkContext = SimpleNamespace(_jsc=object())

    def newSession(self) -> FakeSession:
        return FakeSession()


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ms.MergeServer, list[Any]]]:
    seen: list[Any] = []

    def job(spark: Any, argv: list[str]) -> dict[str, Any]:
        seen.append(spark)
        spec = MergeJobSpec.from_json(argv[1])
        if spec.seq == 13:
            raise StagingError("the manifest is gone")
        if spec.seq == 14:
            raise RuntimeError("boom\nsecond line")
        spark.conf["spark.databricks.delta.write.txnVersion"] = str(spec.seq)  # what the real job sets
        return {"pipeline": spec.pipeline, "seq": spec.seq, "tables": {}}

    monkeypatch.setattr(ms, "run_job", job)
    with ms.MergeServer(FakeSession, pipelines=["p"]) as s:
        yield s, seen


def test_each_request_runs_in_a_session_of_its_own_and_answers_like_spark_submit(server: Any) -> None:
    s, seen = server
    first = mc.request_merge(s.address, _spec_args(seq=3))
    second = mc.request_merge(s.address, _spec_args(seq=4))
    assert first.rc == 0 and first.stdout.splitlines()[-1] == '{"pipeline": "p", "seq": 3, "tables": {}}'
    assert second.rc == 0 and '"seq": 4' in second.stdout
    base = s.spark()
    assert len(seen) == 2 and seen[0] is not seen[1] and base not in seen  # nothing reaches the next request
    assert base.conf == {} and seen[1].conf == {"spark.databricks.delta.write.txnVersion": "4"}
    assert mc.ping(s.address) == {"v": 1, "ok": True, "pid": mc.os.getpid(), "merges": 2, "pipelines": ["p"]}


def test_job_errors_answer_with_the_jobs_exit_code_and_error_line(server: Any) -> None:
    s, _ = server
    staging = mc.request_merge(s.address, _spec_args(seq=13))
    assert (staging.rc, staging.stdout) == (StagingError.exit_code, "")
    assert staging.stderr == "merge_window: StagingError: the manifest is gone\n"
    other = mc.request_merge(s.address, _spec_args(seq=14))
    assert (other.rc, other.stderr) == (1, "merge_window: unexpected RuntimeError: boom\n")


def test_a_request_for_another_pipeline_is_refused(server: Any) -> None:
    s, seen = server
    answer = mc.request_merge(s.address, _spec_args(pipeline="q"))
    assert answer.rc == ConfigError.exit_code and "merges for p, not 'q'" in answer.stderr and not seen


def test_garbage_is_answered_not_crashed_on(server: Any) -> None:
    s, _ = server
    with socket.create_connection(tuple(mc.parse_address(s.address))) as sock:
        sock.sendall(b"hello\n")
        answer = mc.decode(mc.read_line(sock))
    assert answer["rc"] == 2 and "not JSON" in answer["stderr"]
    assert mc.request_merge(s.address, _spec_args()).rc == 0  # still serving


# ------------------------------------------------------------------------------ the pipeline's side


def _pipeline(monkeypatch: pytest.MonkeyPatch, **spark: Any) -> Pipeline:
    cfg = PipelineConfig(name="p", source={"conn_id": "x"}, tables={"include": ["db.*"]},
                         staging_root="/nonexistent/staging", lake_root="/nonexistent/lake", spark=spark)
    coordinator: Any = SimpleNamespace(renew=lambda grant, ttl: grant)
    p = Pipeline(config=cfg, source=SourceParams(host="h", port=1, user="u", password="pw"), coordinator=coordinator)
    monkeypatch.setattr(stage, "manifest", lambda p, seq: fake_manifest("t"))
    monkeypatch.setattr(p, "spark_jars", lambda: "a.jar")
    monkeypatch.delenv(mc.ADDRESS_ENV, raising=False)
    return p


def test_the_config_option_and_the_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _pipeline(monkeypatch).merge_server_address() is None
    p = _pipeline(monkeypatch, merge_server={"address": "127.0.0.1:7199"})
    assert p.merge_server_address() == "127.0.0.1:7199" and p.config.spark.merge_server
    assert p.config.spark.merge_server.timeout_seconds == 3600
    monkeypatch.setenv(mc.ADDRESS_ENV, "127.0.0.1:7200")
    assert p.merge_server_address() == "127.0.0.1:7200"
    with pytest.raises(ValueError, match="host:port"):
        _pipeline(monkeypatch, merge_server={"address": "nowhere"})


def test_merge_step_goes_to_the_server_and_keeps_spark_submits_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _pipeline(monkeypatch, merge_server={"address": "127.0.0.1:1"})
    monkeypatch.setattr("cdc_core.lake.job_runner.subprocess.run", lambda *a, **k: pytest.fail("spark-submit started"))
    # The server has the pipeline's jars and confs: where the step runs needs none (nor a Spark connection).
    monkeypatch.setattr(p, "spark_jars", lambda: pytest.fail("local jars for a merge server"))
    monkeypatch.setattr(p, "spark_master", lambda: pytest.fail("a Spark master for a merge server"))
    sent: list[Any] = []

    def answer(rc: int, err: str = "") -> None:
        def request(address: str, args: list[str], timeout: float | None = None) -> mc.MergeAnswer:
            sent.append((address, args, timeout))
            return mc.MergeAnswer(rc, "{}\n" if rc == 0 else "", err)

        monkeypatch.setattr(mc, "request_merge", request)

    answer(0)
    assert p.merge_locally(GRANT, 7).merged is True
    assert sent[-1] == ("127.0.0.1:1", p.merge_application_args(GRANT, 7), 3600)
    answer(Fenced.exit_code, "merge_window: Fenced: fenced\n")
    with pytest.raises(Fenced, match="no longer holds the lease"):
        p.merge_locally(GRANT, 7)
    answer(1, "merge_window: unexpected Boom: no\n")
    with pytest.raises(LakeError, match="Boom: no; the step is safe to retry"):
        p.merge_locally(GRANT, 7)


def test_an_unreachable_server_fails_the_merge_step(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _pipeline(monkeypatch, merge_server={"address": f"127.0.0.1:{free_port()}"})
    monkeypatch.setattr("cdc_core.lake.job_runner.subprocess.run", lambda *a, **k: pytest.fail("spark-submit started"))
    with pytest.raises(mc.MergeServerUnavailable, match="merge of window 7 failed: cannot reach") as e:
        p.merge_locally(GRANT, 7)
    assert e.value.exit_code == 8


def test_the_server_is_launched_with_the_merge_jobs_spark_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _pipeline(monkeypatch, merge_server={"address": "127.0.0.1:7199"}, driver_memory="2g")
    monkeypatch.setattr(p, "spark_master", lambda: "local[2]")
    monkeypatch.setenv(mc.ADDRESS_ENV, "127.0.0.1:1")
    argv, env = p.merge_server_launch("127.0.0.1:7199")
    assert argv[1].endswith("spark_apps/merge_server.py")
    assert argv[2:] == ["--listen", "127.0.0.1:7199", "--pipeline", "p"]
    submit = shlex.split(env["PYSPARK_SUBMIT_ARGS"])
    job = p.merge_job(GRANT, 1).command("local[2]")
    assert submit[-1] == "pyspark-shell" and submit[:4] == job[1:5]  # --master local[2] --deploy-mode client
    confs = {submit[i + 1] for i, a in enumerate(submit) if a == "--conf"}
    assert confs == {job[i + 1] for i, a in enumerate(job) if a == "--conf"} and "spark.driver.memory=2g" in confs
    assert submit[submit.index("--jars") + 1] == "a.jar"
    assert mc.ADDRESS_ENV not in env  # the server never forwards to itself


# ------------------------------------------------- the same job as spark-submit's (a drift guard)


def test_the_server_runs_the_spark_submit_jobs_steps_with_the_same_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    """`merge_server.run_job` and `merge.job._run` (spark-submit's) are one job (`merge.job.run_job`) on
    different sessions: same fence, same merge arguments (txn identity, options, properties, routes), same
    report target; spark-submit's session is stopped at the end, the server's is not."""
    import spark_apps.merge.job as mw

    calls: list[tuple[str, Any]] = []
    session = FakeSession()
    spec = MergeJobSpec(window_dir="/w", lake_root="/l", pipeline="p", seq=9, token=0x42, report="/r/w9.json",
                        zk_hosts="zk:1", zk_root="/root", delete_mode="soft", parallelism=3,
                        table_options={"db.t": {"partition_by": ["a"]}}, table_properties={"delta.x": "1"},
                        routes=[{"from": "db.*", "to": "lake.t"}], source="s1", group_sources=["s1", "s2"])

    def fence(hosts: str, root: str, pipeline: str, token: int) -> tuple[Any, Any]:
        calls.append(("fence", (hosts, root, pipeline, token)))
        return (lambda: calls.append(("check", None))), (lambda: calls.append(("close", None)))

    def merge(spark: Any, *args: Any, **kw: Any) -> dict[str, Any]:
        assert spark is session
        calls.append(("merge", (args[1:], {k: (v if k != "fence_check" else "fence") for k, v in kw.items()})))
        return {"seq": 9}

    monkeypatch.setattr(mw, "zk_fence_check", fence)
    monkeypatch.setattr(mw, "read_manifest", lambda d, storage: calls.append(("manifest", d)) or "M")
    monkeypatch.setattr(mw, "merge_window", merge)
    monkeypatch.setattr(mw, "write_report",
                        lambda target, report, storage: calls.append(("report", (target, report))))
    monkeypatch.setattr(mw, "build_session", lambda name: session)
    stopped: list[int] = []
    session.stop = lambda: stopped.append(1)  # type: ignore[attr-defined]
    session.sparkContext.setLogLevel = lambda level: None

    mw._run(spec.args())
    by_spark_submit = [(k, v) for k, v in calls if k != "report"] + [("report", calls[-2][1][0])]
    assert stopped == [1]
    calls.clear()
    ms.run_job(session, spec.args())
    by_server = [(k, v) for k, v in calls if k != "report"] + [("report", calls[-2][1][0])]
    assert by_server == by_spark_submit
    assert stopped == [1]  # the server's application keeps running
    assert [k for k, _ in by_server] == ["manifest", "fence", "check", "merge", "close", "report"]
