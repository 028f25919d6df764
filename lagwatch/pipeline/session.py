"""A SparkSession with Spark's official Kafka connector, as users would write `--packages`.

The connector must match Spark's version (pyspark is pinned to 4.2.x, whose connector is on Maven Central). Ivy
resolves it from Maven Central into ~/.ivy2.5.2 on first use; pyspark already ships lz4-java and snappy-java, and
Ivy fails to fetch those two, so they are excluded. The pipeline image (deploy/Dockerfile, target `pipeline`) has the
connector and its dependencies baked in and names their directory in LAGWATCH_SPARK_JARS: when that directory has
the connector of this Spark version, its jars are given as `spark.jars` and nothing is downloaded.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lagwatch.errors import SPARK_EXTRA, ConfigError, LagwatchError, MissingExtraError

SCALA = "2.13"
JARS_ENV = "LAGWATCH_SPARK_JARS"


def kafka_connector(spark_version: str) -> str:
    return f"org.apache.spark:spark-sql-kafka-0-10_{SCALA}:{spark_version}"


# Hadoop's S3 connector for `s3a://`, of the Hadoop pyspark 4.2.0 ships (hadoop-client-api 3.5.0): hadoop-aws
# and what it needs that pyspark lacks (the AWS SDK bundle 2.35.4, 686 MB, and analyticsaccelerator-s3 1.3.1).
HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.5.0"
HADOOP_AWS_JAR = "hadoop-aws-3.5.0.jar"


# Delta Lake's Spark connector for the lake's tables: 4.4.0 is the release built against Spark 4.2.0 (4.1.0-4.3.1
# against Spark 4.1). Spark reads the tables; every write to them stays with delta-rs (the daemon, compact):
# delta-spark 4.4.0's only S3 log store cannot keep two writers apart.
DELTA_SPARK = f"io.delta:delta-spark_{SCALA}:4.4.0"
DELTA_SPARK_JAR = f"delta-spark_{SCALA}-4.4.0.jar"


def connector_conf(
    spark_version: str, jars_dir: str | None, kafka: bool = True, s3: bool = False, delta: bool = False
) -> dict[str, str]:
    """Spark settings that load the Kafka connector (`kafka`), Hadoop's S3 connector (`s3`) and Delta Lake's
    (`delta`): every jar of `jars_dir` when it has any of them (the pipeline image's), else Ivy resolving what is
    missing from Maven Central (`spark.jars.packages`)."""
    jars = sorted(Path(jars_dir).glob("*.jar")) if jars_dir else []
    names = {jar.name for jar in jars}
    wanted = {
        kafka_connector(spark_version): (kafka, f"spark-sql-kafka-0-10_{SCALA}-{spark_version}.jar" in names),
        HADOOP_AWS: (s3, HADOOP_AWS_JAR in names),
        DELTA_SPARK: (delta, DELTA_SPARK_JAR in names),
    }
    conf: dict[str, str] = {}
    if any(want and has for want, has in wanted.values()):
        conf["spark.jars"] = ",".join(str(jar) for jar in jars)
    packages = [package for package, (want, has) in wanted.items() if want and not has]
    if packages:
        conf["spark.jars.packages"] = ",".join(packages)
        conf["spark.jars.excludes"] = "at.yawk.lz4:lz4-java,org.xerial.snappy:snappy-java"
    return conf


def s3a_conf() -> dict[str, str]:
    """Hadoop's s3a settings for the store the AWS variables name (the jobs put --config's `lake.s3` there):
    the endpoint and region; the keys are read by s3a's own chain (AWS_ACCESS_KEY_ID, a web identity...), never
    written into Spark's settings."""
    from urllib.parse import urlsplit

    from lagwatch.lake.writer import s3_from_env

    access = s3_from_env()
    conf = {
        "spark.hadoop.fs.s3a.endpoint.region": access.region,
        # As the daemon: a store that does not answer fails the job in seconds, not after Hadoop's minutes.
        "spark.hadoop.fs.s3a.connection.establish.timeout": f"{int(access.connect_timeout_s * 1000)}",
        "spark.hadoop.fs.s3a.attempts.maximum": "2",
        # pyarrow's spelling too (the daemon's lake.path, a report's default --out under it): the same place.
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }
    if access.endpoint is not None:
        conf["spark.hadoop.fs.s3a.endpoint"] = access.endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"  # what S3-compatible servers take
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(urlsplit(access.endpoint).scheme == "https").lower()
    return conf


def check_spark() -> None:
    """pyspark importable and Java found, or one LagwatchError line saying what to install."""
    try:
        import pyspark  # noqa: F401
        from pyspark.sql import SparkSession  # noqa: F401
    except ImportError:
        raise MissingExtraError(f"the Spark jobs need {SPARK_EXTRA}") from None
    from shutil import which

    java_home = os.environ.get("JAVA_HOME")
    if which("java") is None and not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))):
        raise LagwatchError("Spark needs Java 17: install it (Debian: apt-get install openjdk-17-jre-headless)")


# The masters Spark 4 takes (SparkContext.createTaskScheduler); anything else failed only once the JVM had started,
# its stack trace printed, and the one line left said "Java gateway process exited".
_MASTER = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[\d+, *\d+, *\d+\]|(spark|k8s)://\S+|yarn")


def check_master(master: str) -> None:
    if not _MASTER.fullmatch(master):
        raise ConfigError(
            [
                f"--master: {master!r} is not a Spark master (local, local[N], local[*], spark://HOST:PORT, yarn, k8s://...)"
            ]
        )


# lagwatch's own defaults: each is set only where neither spark-submit's --conf nor spark-defaults.conf set it.
DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.showConsoleProgress": "false",  # its bars overwrote lagwatch's progress lines on stderr
}
# Needed for the jobs to be right (dates are UTC days, as the daemon writes them): always set.
REQUIRED = {"spark.sql.session.timeZone": "UTC"}
LOG_ENV = "LAGWATCH_SPARK_LOG"


def spark_log_path() -> str:
    """Where Spark's own log goes when lagwatch starts the JVM: LAGWATCH_SPARK_LOG, else a file in the temp dir."""
    import tempfile

    return os.environ.get(LOG_ENV) or os.path.join(tempfile.gettempdir(), f"lagwatch-spark-{os.getpid()}.log")


def _launch_conf(log: str, jars: dict[str, str]) -> Any:
    """Settings for the JVM lagwatch starts (spark-submit's own keeps its logging): Spark's log4j2 output into
    `log`, nothing on the console; the connectors' jars on the driver's class path from the start (Hadoop loads
    its s3a filesystem from there). These become spark-submit's argv: no secret among them."""
    from pyspark import SparkConf

    config = Path(__file__).with_name("log4j2.properties")
    java = f"-Dlog4j2.configurationFile=file:{config} -Dlagwatch.spark.log={log}"
    conf = SparkConf(loadDefaults=False).set("spark.driver.extraJavaOptions", java).setAll(list(jars.items()))
    memory = default_driver_memory()
    return conf.set("spark.driver.memory", memory) if memory else conf


def default_driver_memory(environ: Mapping[str, str] = os.environ, cgroup: Path = Path("/sys/fs/cgroup")) -> str | None:
    """The driver's heap when lagwatch starts the JVM and nothing names one (SPARK_DRIVER_MEMORY, or
    spark.driver.memory in spark-defaults.conf): a quarter of the memory this process may use (the machine's, or
    its cgroup's limit, as in a pod), 1 to 8 GB. Spark's own 1 GB ran out on a week's backtest of 5 candidates at
    10,000 group-partitions (OutOfMemoryError merging the sort's spill files, bench/README.md); in local mode the
    driver's heap is the executors' too."""
    if environ.get("SPARK_DRIVER_MEMORY"):
        return None
    conf_dir = environ.get("SPARK_CONF_DIR") or (
        str(Path(environ["SPARK_HOME"]) / "conf") if environ.get("SPARK_HOME") else None
    )
    if conf_dir:
        try:
            text = (Path(conf_dir) / "spark-defaults.conf").read_text()
        except OSError:
            text = ""
        if any(line.split()[:1] == ["spark.driver.memory"] for line in text.splitlines()):
            return None
    limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for name in ("memory.max", "memory/memory.limit_in_bytes"):  # cgroup v2, v1 ("max": none)
        try:
            value = (cgroup / name).read_text().strip()
        except OSError:
            continue
        if value.isdigit():
            limit = min(limit, int(value))
    gib = max(1, min(8, limit // 4 // 2**30))
    return f"{gib}g"


def spark_session(
    master: str | None = "local[2]",
    app: str = "lagwatch",
    kafka: bool = True,
    s3: bool = False,
    delta: bool = False,
    **conf: str,
) -> Any:
    """The session (getOrCreate). `master` None leaves the master to spark-submit. `kafka` False: without the Kafka
    connector (the lake's jobs read Parquet only: no Ivy resolution, nothing fetched). `s3`: with Hadoop's S3
    connector and the s3a settings of the AWS variables (a lake or output on s3://). lagwatch's DEFAULTS and
    `conf` apply only where spark-submit's --conf (or spark-defaults.conf) set nothing. Raises LagwatchError when
    pyspark or Java is missing or the JVM does not start, ConfigError for a master Spark would not take."""
    if master is not None:
        check_master(master)
    check_spark()
    import pyspark
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    # Workers must run this interpreter, which has lagwatch, pandas and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    launched = SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ
    log = spark_log_path() if launched else None
    jars = (
        connector_conf(pyspark.__version__, os.environ.get(JARS_ENV), kafka, s3, delta) if kafka or s3 or delta else {}
    )
    try:
        # The JVM first (spark-submit's, or one started here), so that what it was given can be read back. One
        # started here writes its stderr to the log too: Java's and the AWS SDK's own lines (SLF4J's binder
        # warning) came before log4j's configuration could keep them off the console.
        gateway = None
        if log:
            from pyspark.java_gateway import launch_gateway

            with open(log, "ab") as stderr:
                gateway = launch_gateway(_launch_conf(log, jars), popen_kwargs={"stderr": stderr})  # type: ignore[no-untyped-call]
        SparkContext._ensure_initialized(gateway=gateway)
    except Exception as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        where = f" (Spark's log: {log})" if log else ""
        raise LagwatchError(f"Spark did not start: {lines[0] if lines else type(e).__name__}{where}") from None
    if log:
        print(f"lagwatch: Spark's own log: {log}", file=sys.stderr, flush=True)
    # The JVM's spark.* properties: spark-submit's --conf and spark-defaults.conf (and a running session's).
    given = {key for key, _ in SparkConf().getAll()}
    active = SparkContext._active_spark_context
    if active is not None:
        given |= {key for key, _ in active.getConf().getAll()}
    if launched:  # spark-submit's own default for the "pyspark-shell" that lagwatch started, not the user's
        given.discard("spark.ui.showConsoleProgress")
    builder = SparkSession.builder.appName(app)
    if master is not None:
        builder = builder.master(master)
    wanted: dict[str, str] = {} if launched else dict(jars)
    wanted.update(DEFAULTS)
    if s3:
        wanted.update(s3a_conf())
    if delta:  # reading by path needs only the data source; the extension makes `delta.`path`` SQL work too
        wanted["spark.sql.extensions"] = "io.delta.sql.DeltaSparkSessionExtension"
        wanted["spark.sql.catalog.spark_catalog"] = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    wanted.update({key.replace("__", "."): value for key, value in conf.items()})
    for key, value in wanted.items():
        if key not in given:
            builder = builder.config(key, value)
    for key, value in REQUIRED.items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except Exception as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise LagwatchError(f"Spark did not start: {lines[0] if lines else type(e).__name__}") from None
