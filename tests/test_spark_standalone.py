"""`spark-submit` to a standalone Spark cluster started here (a master and one worker, pyspark's own scripts), as a
data engineer runs the jobs on a Spark platform: the report on a Delta lake, its executors in the worker's JVM, and
spark-submit's --conf kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pa = pytest.importorskip("pyarrow")

from tests.s3_server import free_ports  # noqa: E402
from tests.test_report_spark import RULES, write_small_lake  # noqa: E402

# A minute of wall time (a master, a worker and spark-submit's JVMs): in `make test-long`, which CI runs after
# `make test`, to keep the default run under 15 minutes.
pytestmark = [pytest.mark.spark, pytest.mark.long]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    work = tmp_path_factory.mktemp("standalone")
    port, ui, worker_ui = free_ports(3)
    env = {**os.environ, "SPARK_LOG_DIR": str(work), "SPARK_NO_DAEMONIZE": "1", "PYSPARK_PYTHON": sys.executable}
    master_log, worker_log = open(work / "master.log", "wb"), open(work / "worker.log", "wb")  # noqa: SIM115
    master = subprocess.Popen(
        [str(BIN / "spark-class"), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(ui)],
        stdout=master_log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )  # fmt: skip
    url = f"spark://127.0.0.1:{port}"
    worker = subprocess.Popen(
        [str(BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
         "--cores", "2", "--memory", "2g", "--webui-port", str(worker_ui), "--work-dir", str(work / "work")],
        stdout=worker_log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while _alive_workers(f"http://127.0.0.1:{ui}/json/") < 1:
            assert time.monotonic() < deadline, (work / "worker.log").read_text()[-2000:]
            assert master.poll() is None and worker.poll() is None
            time.sleep(1)
        yield url, work / "work"
    finally:
        for proc in (worker, master):
            proc.terminate()
            proc.wait(30)
        master_log.close()
        worker_log.close()


def _alive_workers(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(json.load(response).get("aliveworkers", 0))
    except OSError:
        return 0


def test_the_report_runs_on_a_standalone_cluster_through_spark_submit(
    cluster: tuple[str, Path], tmp_path: Path, spark_jars: Path
) -> None:
    master, work = cluster
    lake, out = tmp_path / "lake", tmp_path / "out"
    write_small_lake(lake, "c")  # Delta tables, as the daemon writes a new lake (20 polls, 5 groups)
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"rules": RULES}))
    import lagwatch.pipeline.report as job

    jars = ",".join(str(j) for j in sorted(spark_jars.glob("delta-*.jar")))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(Path(job.__file__).parents[2])}
    done = subprocess.run(
        [str(BIN / "spark-submit"), "--master", master, "--jars", jars, "--conf", "spark.sql.shuffle.partitions=3",
         "--conf", "spark.executor.cores=2", job.__file__, "--lake", str(lake), "--out", str(out),
         "--config", str(rules)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr  # spark-submit's own logging (INFO on stderr) is the user's: left alone
    assert "report: starting Spark (from spark-submit)" in said and f"report: wrote {out}" in said
    import pyarrow.parquet as pq

    daily = pq.read_table(out / "group_daily")
    assert sum(daily.column("polls").to_pylist()) == 5 * 20
    # The tasks ran in the cluster's executor (a JVM the worker started for the application), not in the driver.
    (executor_log,) = work.glob("app-*/*/stderr")
    assert "Running task" in executor_log.read_text()
