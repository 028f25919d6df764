"""Reading the lake in Spark with the schema the codec declares, not the one Spark infers.

Inference would take the schema of whichever file Spark opens first: a version-1 file (no `expires_at`) would hide
the column from every later file, and `cluster=123` would become a number. An explicit schema reads every version
alike (a column a file lacks reads as null) and keeps the partition keys strings.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lagwatch.errors import SPARK_EXTRA, LagwatchError
from lagwatch.lake.codec import date_of


@dataclass(frozen=True)
class ClusterParams:
    """A configuration a daemon start recorded for one cluster, as a replay takes it up."""

    max_gap_s: float
    read_committed: bool
    rules: Mapping[str, Any] | None  # as recorded
    alerts: Mapping[str, Any] | None
    recorded_at: float = -math.inf  # when a daemon start recorded it: in force from then to the next one
    poll_interval_s: float | None = None  # None in a lake written before it was read back (then max_gap_s / 4)


# A cluster's recorded configurations, oldest first: each daemon start that recorded one.
ParamsTimeline = Sequence[ClusterParams]


def check_lake(path: str, job: str, error: type[LagwatchError] = LagwatchError) -> str:
    """The lake's path as Spark names it (s3:// is s3a://); `error` (one line) when there is no lake there, or
    without the spark extra, which `job` needs."""
    from lagwatch.lake.writer import open_filesystem

    try:
        from pyarrow import fs
    except ImportError:
        raise error(f"the {job} needs {SPARK_EXTRA}") from None
    try:
        filesystem, root = open_filesystem(path)
        info = filesystem.get_file_info(f"{root}/snapshots")
    except Exception as e:
        raise error(f"--lake {path}: cannot open it: {str(e).splitlines()[0]}") from None
    if info.type != fs.FileType.Directory:
        raise error(f"--lake {path}: no lake there (no snapshots/ directory)")
    return spark_uri(path) if "://" in path else os.path.abspath(path)


def recorded_params(spark: Any, lake: str, until: float | None) -> dict[str, list[ClusterParams]]:
    """Per cluster, every configuration recorded (before `until`), oldest first: each is in force from its daemon
    start to the next (a replay switches at those times, as the daemon did)."""
    from pyspark.sql import functions as F

    try:  # the declared schema: `cluster=123` is a name, whatever the session infers
        df = read_config(spark, lake)
    except Exception:  # no config dataset: a lake written by hand, or without a daemon start
        return {}
    if until is not None:
        df = df.where(F.col("recorded_at") <= until)
    out: dict[str, list[ClusterParams]] = {}
    for r in df.orderBy("recorded_at").collect():
        params = ClusterParams(
            float(r["max_gap_s"]),
            bool(r["read_committed"]),
            json.loads(r["rules_json"]),
            json.loads(r["alerts_json"]),
            float(r["recorded_at"]),
            float(r["poll_interval_s"]) if r["poll_interval_s"] is not None else None,
        )
        timeline = out.setdefault(r["cluster"], [])
        if timeline and replace(timeline[-1], recorded_at=params.recorded_at) == params:
            continue  # a restart with the same configuration: nothing changes
        timeline.append(params)
    return out


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


_FORMATS: dict[str, str] = {}


def lake_format(lake: str) -> str:
    """`delta` or `parquet`: what the lake is (a Delta log beside the snapshots' files, or none); asked once."""
    if lake not in _FORMATS:
        from lagwatch.lake.writer import open_filesystem, resolve_format

        filesystem, root = open_filesystem(lake)
        _FORMATS[lake] = resolve_format(filesystem, root, "auto")
    return _FORMATS[lake]


def _read(spark: Any, lake: str, dataset: str, columns: Mapping[str, str]) -> Any:
    """A dataset of the lake: a Delta table's current version (with the codec's columns, those an older schema
    version lacks as null), or the Parquet files without those a crashed `compact` left beside their merged file
    (read with it, every row of them counted twice: a report doubled every lag)."""
    from lagwatch.pipeline.compact import readable_files

    base = f"{spark_uri(lake)}/{dataset}"
    if lake_format(lake) == "delta":
        from pyspark.sql import functions as F

        df = spark.read.format("delta").load(base)
        present = set(df.columns)
        typed = [
            (F.col(f"`{name}`") if name in present else F.lit(None)).cast(_SPARK_TYPES[kind]).alias(name)
            for name, kind in {**columns, "cluster": "string", "date": "string"}.items()
        ]
        return df.select(*typed)
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


def read_alerts(spark: Any, lake: str, since: float | None = None, until: float | None = None) -> Any:
    """The lake's `alerts` rows (the daemon's alert transitions, firing and resolved) in [since, until)."""
    from pyspark.sql import functions as F

    from lagwatch.lake.codec import ALERT_COLUMNS

    df = _read(spark, lake, "alerts", ALERT_COLUMNS)
    if since is not None:
        df = df.where((F.col("date") >= date_of(since)) & (F.col("at") >= since))
    if until is not None:
        df = df.where((F.col("date") <= date_of(until)) & (F.col("at") < until))
    return df
