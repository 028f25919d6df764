"""The SparkSession lagwatch builds: which settings load the Kafka connector (the pipeline image's baked-in jars,
or Ivy from Maven Central), spark-submit's settings kept, Spark's log in a file, a failure in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lagwatch.pipeline.jobs import spark_error
from lagwatch.pipeline.session import connector_conf, kafka_connector
from tests.helm_tool import ROOT
from tests.synthetic import TP

BAKED = (
    "spark-sql-kafka-0-10_2.13-4.2.0.jar",
    "spark-token-provider-kafka-0-10_2.13-4.2.0.jar",
    "kafka-clients-3.9.2.jar",
    "commons-pool2-2.13.1.jar",
)


def jars_dir(tmp_path: Path, names: tuple[str, ...]) -> str:
    for name in names:
        (tmp_path / name).write_bytes(b"PK")
    (tmp_path / "README").write_text("not a jar")
    return str(tmp_path)


def test_baked_jars_are_given_as_spark_jars(tmp_path: Path) -> None:
    conf = connector_conf("4.2.0", jars_dir(tmp_path, BAKED))
    assert set(conf) == {"spark.jars"}  # no spark.jars.packages: Ivy is never asked
    assert conf["spark.jars"].split(",") == sorted(str(tmp_path / name) for name in BAKED)


def test_without_the_directory_ivy_resolves_the_connector(tmp_path: Path) -> None:
    for jars in (None, "", str(tmp_path / "missing")):
        conf = connector_conf("4.2.0", jars)
        assert conf["spark.jars.packages"] == kafka_connector("4.2.0")
        assert "spark.jars" not in conf


def test_a_connector_of_another_spark_version_is_not_used(tmp_path: Path) -> None:
    other = ("spark-sql-kafka-0-10_2.13-4.1.0.jar", "kafka-clients-3.9.2.jar")
    conf = connector_conf("4.2.0", jars_dir(tmp_path, other))
    assert conf["spark.jars.packages"] == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
    assert "spark.jars" not in conf


def test_a_python_workers_cause_is_the_one_line() -> None:
    """What Spark 4.2 raised when the executors' Python had no pyarrow (captured from a real run): the first line
    said only "An exception was thrown from the Python worker:"."""
    text = (
        "An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
        '  File "/venv/pyspark.zip/pyspark/worker.py", line 3602, in main\n'
        "    func, profiler, deserializer, serializer = read_udfs(\n"
        '  File "/venv/pyspark.zip/pyspark/worker.py", line 2530, in read_udfs\n'
        "    import pyarrow as pa\nModuleNotFoundError: No module named 'pyarrow'\n"
    )
    line = spark_error(Exception(text))
    assert line.startswith("a Python worker failed: ModuleNotFoundError: No module named 'pyarrow'")
    assert "PYSPARK_PYTHON" in line and "\n" not in line
    java = (
        "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 1.0 failed 1 times, most "
        "recent failure: Lost task 0.0 (TID 1) (host executor driver): org.apache.spark.api.python.PythonException: "
        "Traceback (most recent call last):\n  File \"/x/worker.py\", line 9, in main\n    raise ValueError('bad row')\n"
        "ValueError: bad row\n\n\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(X.scala:1)\n"
        "Driver stacktrace:\n\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(X.scala:1)\n"
    )
    assert spark_error(Exception(java)) == "a Python worker failed: ValueError: bad row"
    assert spark_error(Exception("[PATH_NOT_FOUND] Path does not exist: file:/x.\nmore")) == (
        "[PATH_NOT_FOUND] Path does not exist: file:/x."
    )


SUBMITTED = """
from lagwatch.pipeline.session import spark_session
spark = spark_session(None, "lagwatch-conf-test", kafka=False)
conf = spark.sparkContext.getConf()
print(conf.get("spark.sql.shuffle.partitions"), conf.get("spark.ui.enabled"), conf.get("spark.ui.showConsoleProgress"))
spark.stop()
"""


@pytest.mark.spark
def test_spark_submit_conf_wins_over_lagwatchs_defaults(tmp_path: Path) -> None:
    """`spark-submit --conf` settings stay as given (offsets-topic set its own shuffle partitions and UI over
    them); what spark-submit leaves unset gets lagwatch's defaults (no console progress bars)."""
    script = tmp_path / "job.py"
    script.write_text(SUBMITTED)
    submit = Path(sys.executable).with_name("spark-submit")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
    args = ["--conf", "spark.sql.shuffle.partitions=7", "--conf", "spark.ui.enabled=true", str(script)]
    done = subprocess.run([str(submit), "--master", "local[1]", *args], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["7", "true", "false"]


@pytest.mark.spark
@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs a Python without lagwatch's extra")
def test_a_failing_executor_says_its_cause_in_one_line_and_spark_logs_to_a_file(
    tmp_path: Path, spark_jars: Path
) -> None:
    """A real job whose executors run a Python without pyarrow (Debian's own): one line naming the missing module
    (it was "An exception was thrown from the Python worker:", the cause only in a Java stack trace), and nothing
    of Spark's on the console: its warnings and that stack trace are in the log file the job names."""
    if subprocess.run(["/usr/bin/python3", "-c", "import pyarrow"], capture_output=True).returncode == 0:
        pytest.skip("Debian's Python has pyarrow here")
    from lagwatch.lake import LakeConfig
    from lagwatch.lake.writer import LakeWriter
    from tests.synthetic import Pipeline, group, snapshot

    lake = tmp_path / "lake"
    pipeline = Pipeline()
    writer = LakeWriter(LakeConfig(enabled=True, path=str(lake), retention_days=0))
    writer.record_config("c", {}, {}, 90.0, False, 30.0, pipeline.book)
    for i in range(5):
        snap = snapshot(1.8e9 + 30 * i, [group("g")], {TP: 10 * i})
        writer.record(snap, pipeline.step(snap), pipeline.book)
    writer.flush()
    log = tmp_path / "spark.log"
    env = {**os.environ, "PYSPARK_PYTHON": "/usr/bin/python3", "LAGWATCH_SPARK_LOG": str(log)}
    done = subprocess.run(
        [sys.executable, "-m", "lagwatch", "pipeline", "backtest", "--master", "local[1]", "--lake", str(lake),
         "--output", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "the Spark job failed: a Python worker failed: ModuleNotFoundError: No module named" in last
    assert "PYSPARK_PYTHON" in last
    assert "Traceback" not in done.stderr and "\tat " not in done.stderr and " WARN " not in done.stderr
    assert "[Stage" not in done.stderr  # no progress bar
    assert f"Spark's own log: {log}" in done.stderr
    assert "PythonException" in log.read_text()  # the whole story, for whoever looks


def test_the_driver_heap_is_a_quarter_of_the_memory_allowed_unless_the_user_names_one(tmp_path: Path) -> None:
    """Spark's own 1 GB driver heap ran out on a week's backtest of 5 candidates (local mode: the driver's heap is
    the executors' too). A quarter of what the process may use, 1-8 GB; a pod's cgroup limit counts."""
    from lagwatch.pipeline.session import default_driver_memory

    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    no_cgroup = tmp_path / "none"
    assert default_driver_memory({}, no_cgroup) == f"{max(1, min(8, machine // 4 // 2**30))}g"
    pod = tmp_path / "pod"
    pod.mkdir()
    (pod / "memory.max").write_text(f"{3 * 2**30}\n")  # a 3 GiB pod: Spark's 1 GB, the floor
    assert default_driver_memory({}, pod) == "1g"
    (pod / "memory.max").write_text(f"{12 * 2**30}\n")
    assert default_driver_memory({}, pod) == ("3g" if machine >= 12 * 2**30 else f"{max(1, machine // 4 // 2**30)}g")
    (pod / "memory.max").write_text("max\n")  # cgroup v2 without a limit: the machine's
    assert default_driver_memory({}, pod) == default_driver_memory({}, no_cgroup)
    # Named by the user: left to Spark.
    assert default_driver_memory({"SPARK_DRIVER_MEMORY": "2g"}, pod) is None
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.executor.memory 2g\n")
    assert default_driver_memory({"SPARK_CONF_DIR": str(conf)}, no_cgroup) is not None
    (conf / "spark-defaults.conf").write_text("# heap\nspark.driver.memory   6g\n")
    assert default_driver_memory({"SPARK_CONF_DIR": str(conf)}, no_cgroup) is None
