"""Which Spark settings load the Kafka connector: the pipeline image's baked-in jars, or Ivy from Maven Central."""

from __future__ import annotations

from pathlib import Path

from lagwatch.pipeline.session import connector_conf, kafka_connector

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
