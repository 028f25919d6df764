"""A SparkSession with Spark's official Kafka connector, as users would write `--packages`.

The connector must match Spark's version (pyspark is pinned to 4.2.x, whose connector is on Maven Central). Ivy
resolves it from Maven Central into ~/.ivy2.5.2 on first use; pyspark already ships lz4-java and snappy-java, and
Ivy fails to fetch those two, so they are excluded.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from lagwatch.errors import LagwatchError

SCALA = "2.13"


def kafka_connector(spark_version: str) -> str:
    return f"org.apache.spark:spark-sql-kafka-0-10_{SCALA}:{spark_version}"


def check_spark() -> None:
    """pyspark importable and Java found, or one LagwatchError line saying what to install."""
    try:
        import pyspark  # noqa: F401
        from pyspark.sql import SparkSession  # noqa: F401
    except ImportError:
        raise LagwatchError("the Spark jobs need the spark extra: pip install 'lagwatch[spark]'") from None
    from shutil import which

    java_home = os.environ.get("JAVA_HOME")
    if which("java") is None and not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))):
        raise LagwatchError("Spark needs Java 17: install it (Debian: apt-get install openjdk-17-jre-headless)")


def spark_session(master: str | None = "local[2]", app: str = "lagwatch", **conf: str) -> Any:
    """The session (getOrCreate). `master` None leaves the master to spark-submit. Raises LagwatchError when pyspark
    or Java is missing or the JVM does not start."""
    check_spark()
    import pyspark
    from pyspark.sql import SparkSession

    # Workers must run this interpreter, which has lagwatch, pandas and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app)
    if master is not None:
        builder = builder.master(master)
    builder = (
        builder.config("spark.jars.packages", kafka_connector(pyspark.__version__))
        .config("spark.jars.excludes", "at.yawk.lz4:lz4-java,org.xerial.snappy:snappy-java")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in conf.items():
        builder = builder.config(key.replace("__", "."), value)
    try:
        return builder.getOrCreate()
    except Exception as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise LagwatchError(f"Spark did not start: {lines[0] if lines else type(e).__name__}") from None
