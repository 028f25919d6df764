"""The chart end to end on a real S3-compatible server (SeaweedFS): rendered with the README's minimal values and
a lake (its URL, endpoint and an existing Secret's keys), the daemon with the rendered config and the projected
secrets directory writes the lake; then each CronJob's exact args and env run against it, as the pipeline image
would run them (its LAGWATCH_SPARK_JARS: the s3a jars it pins). Paths the pod mounts are mapped to local ones."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

pa = pytest.importorskip("pyarrow")
import pyarrow.dataset as ds  # noqa: E402

from lagwatch.config import load_settings  # noqa: E402
from lagwatch.daemon import Daemon  # noqa: E402
from lagwatch.model import ClusterSnapshot  # noqa: E402
from tests.helm_tool import CHART, helm_binary, template  # noqa: E402
from tests.s3_server import ACCESS_KEY, SECRET_KEY, S3Server  # noqa: E402
from tests.spark_jars import ensure_spark_jars  # noqa: E402
from tests.synthetic import TP, group, snapshot  # noqa: E402

HELM = helm_binary()
pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(HELM is None, reason="helm not built (make test builds it: deploy/tools/install-helm.sh)"),
]
# The Secrets the cluster would hold: the README's one, and the lake's keys.
SECRETS = {
    "lagwatch-secrets": {"clusters__prod__security__sasl__password": "kafka-pw", "notifiers__slack__token": "xoxb-1"},
    "lagwatch-lake": {"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY},
}
YESTERDAY_NOON = (datetime.now(UTC).timestamp() // 86400 - 1) * 86400 + 43200


class YesterdaysPoller:
    """Yesterday's polls of a group that stops consuming (the report CronJob reports yesterday)."""

    def __init__(self, name: str, config: object) -> None:
        self.i = 0

    def poll(self) -> ClusterSnapshot:
        self.i += 1
        t = YESTERDAY_NOON + 60 * self.i
        polled = snapshot(t, [group("orders-app", {TP: 0}, state="Empty", members=0)], {TP: 100 * self.i})
        return dataclasses.replace(polled, cluster="prod")

    def close(self) -> None:
        pass


def project_secrets(pod: dict, target: Path) -> Path:
    """The secrets volume as the kubelet projects it: each source's items (or every key) as files."""
    (volume,) = [v for v in pod["volumes"] if v["name"] == "secrets"]
    target.mkdir()
    for source in volume["projected"]["sources"]:
        data = SECRETS[source["secret"]["name"]]
        items = source["secret"].get("items") or [{"key": k, "path": k} for k in data]
        for item in items:
            (target / item["path"]).write_text(data[item["key"]])
    return target


def test_the_charts_cronjobs_run_on_the_lake_the_daemon_wrote(s3_server: S3Server, tmp_path: Path) -> None:
    assert HELM is not None
    docs = template(
        HELM, "-f", str(CHART / "ci" / "minimal-values.yaml"),
        "--set", "lake.url=s3://lake/chart", "--set", f"lake.s3.endpoint={s3_server.endpoint}",
        "--set", "lake.existingSecret=lagwatch-lake",
        "--set", "pipeline.report.enabled=true", "--set", "pipeline.compact.enabled=true",
    )  # fmt: skip
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap"]
    config = tmp_path / "lagwatch.yaml"
    config.write_text(configmap["data"]["lagwatch.yaml"])
    assert SECRET_KEY not in config.read_text() and yaml.safe_load(config.read_text())["lake"]["enabled"] is True
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    secrets = project_secrets(deployment["spec"]["template"]["spec"], tmp_path / "secrets")

    # The daemon, with the rendered file and the mounted keys (its polls yesterday's, from a stand-in poller).
    settings = load_settings(config, secrets, state_dir=tmp_path / "state", http={"enabled": False})
    daemon = Daemon(settings, notifiers={}, poller_factory=YesterdaysPoller, clock=lambda: YESTERDAY_NOON - 60,
                    reader_factory=None)  # fmt: skip
    assert daemon.lake is not None
    try:
        for _ in range(30):
            daemon.poll_cluster("prod")
        assert daemon.lake.flush()
    finally:
        daemon.stop()
    s3 = s3_server.filesystem()
    assert ds.dataset("lake/chart/snapshots", filesystem=s3, format="parquet").count_rows() > 30

    jobs = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in docs if d["kind"] == "CronJob"}
    assert set(jobs) == {"pipeline-report", "pipeline-compact"}
    local = {"/etc/lagwatch/lagwatch.yaml": str(config), "/var/run/secrets/lagwatch": str(secrets)}
    for name in ("pipeline-report", "pipeline-compact"):
        pod = jobs[name]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        job_secrets = project_secrets(pod, tmp_path / f"{name}-secrets")
        local["/var/run/secrets/lagwatch"] = str(job_secrets)
        args = [local.get(a, a) for a in container["args"]]
        env = {e["name"]: local.get(e["value"], e["value"]) for e in container["env"]}
        env["HOME"] = str(tmp_path / name)  # the pod's /tmp emptyDir
        Path(env["HOME"]).mkdir()
        # The pipeline image's own environment (deploy/Dockerfile): its jars, its Python on PATH.
        env.update(LAGWATCH_SPARK_JARS=str(ensure_spark_jars()), PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin")
        env.update(PYSPARK_PYTHON=sys.executable, **{k: os.environ[k] for k in ("JAVA_HOME",) if k in os.environ})
        done = subprocess.run([sys.executable, "-m", "lagwatch", *args], capture_output=True, text=True, env=env,
                              timeout=600)  # fmt: skip
        assert done.returncode == 0, f"{name}: {args}\n{done.stderr[-3000:]}"
        assert SECRET_KEY not in done.stdout + done.stderr and SECRET_KEY not in " ".join(args)
        # lagwatch's progress lines only: Spark's and the JVM's own are in Spark's log file.
        assert [line for line in done.stderr.splitlines() if not line.startswith(("report: ", "compact: ",
                "lagwatch: "))] == [], done.stderr  # fmt: skip
        if name == "pipeline-report":
            assert "thresholds: the configuration the daemon recorded" in done.stderr
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    daily = ds.dataset(f"lake/chart/reports/{day}/group_daily", filesystem=s3, format="parquet").to_table()
    assert daily.column("group").to_pylist() == ["orders-app"] and daily.column("polls").to_pylist() == [30]
    assert s3.get_file_info(f"lake/chart/reports/{day}/report.html").size > 10_000
