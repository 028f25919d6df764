"""Reading the lake in Spark with the schema the codec declares, not the one Spark infers.

Inference would take the schema of whichever file Spark opens first: a version-1 file (no `expires_at`) would hide
the column from every later file, and `cluster=123` would become a number. An explicit schema reads every version
alike (a column a file lacks reads as null) and keeps the partition keys strings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lagwatch.lake.codec import date_of

_SPARK_TYPES = {
    "int16": "smallint",
    "int32": "int",
    "int64": "bigint",
    "float64": "double",
    "string": "string",
    "bool": "boolean",
    "timestamp": "timestamp",
}


def spark_schema(columns: Mapping[str, str]) -> str:
    """A Spark DDL schema for one of the codec's datasets, with the Hive partition keys (cluster, date) as strings."""
    fields = [f"`{name}` {_SPARK_TYPES[kind]}" for name, kind in columns.items()]
    return ", ".join([*fields, "`cluster` string", "`date` string"])


def spark_uri(lake: str) -> str:
    """The lake as Spark's Hadoop filesystems name it: pyarrow's (and the daemon's) `s3://` is Hadoop's `s3a://`."""
    return "s3a://" + lake.removeprefix("s3://") if lake.startswith("s3://") else lake


def read_snapshots(spark: Any, lake: str, since: float | None = None, until: float | None = None) -> Any:
    """The lake's snapshot rows in [since, until), every schema version, as a DataFrame."""
    from pyspark.sql import functions as F

    from lagwatch.lake.codec import SNAPSHOT_COLUMNS

    df = _read(spark, lake, "snapshots", SNAPSHOT_COLUMNS)
    if since is not None:  # the date predicate prunes whole partitions before the rows are read
        df = df.where((F.col("date") >= date_of(since)) & (F.col("taken_at") >= since))
    if until is not None:
        df = df.where((F.col("date") <= date_of(until)) & (F.col("taken_at") < until))
    return df


def read_config(spark: Any, lake: str) -> Any:
    """The lake's `config` rows (the configuration each daemon start recorded), every schema version."""
    from lagwatch.lake.codec import CONFIG_COLUMNS

    return _read(spark, lake, "config", CONFIG_COLUMNS)


def _read(spark: Any, lake: str, dataset: str, columns: Mapping[str, str]) -> Any:
    """A dataset of the lake, without the files a crashed `compact` left beside their merged file (read with it,
    every row of them counted twice: a report doubled every lag)."""
    from lagwatch.pipeline.compact import readable_files

    base = f"{spark_uri(lake)}/{dataset}"
    reader = spark.read.schema(spark_schema(columns))
    try:
        files = readable_files(lake, dataset)
    except Exception:  # no such dataset, a damaged merged file, a listing refused: Spark reads (and says) as before
        files = None
    if files is None:
        return reader.parquet(base)
    return reader.option("basePath", base).parquet(*(f"{base}/{f}" for f in files))


def polls_per_cluster(snapshots: Any) -> list[Any]:
    """Per cluster of the lake's snapshot rows: its number of polls and the first and last poll time, by cluster."""
    from pyspark.sql import functions as F

    return list(
        snapshots.where(F.col("row_kind") == "poll")
        .groupBy("cluster")
        .agg(F.count("*").alias("polls"), F.min("taken_at").alias("first"), F.max("taken_at").alias("last"))
        .orderBy("cluster")
        .collect()
    )
