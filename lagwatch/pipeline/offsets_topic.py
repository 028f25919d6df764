"""`lagwatch pipeline offsets-topic`: a cluster's whole `__consumer_offsets`, read in batch with Spark's official Kafka
connector, decoded in parallel by the core decoder (`lagwatch.offsets_topic`, the daemon's own), written as Parquet:

    commits/       every offset commit and offset tombstone (deleted = true), with the record's own position
    latest/        the latest state of every group-partition: its last commit, or deleted
    groups/        the latest group metadata record of every classic group (or its deletion)
    expiry_audit/  per committed group-partition: the group's kind, the clock its expiry counts from, when it
                   expires under offsets.retention.minutes, and whether that time has passed

Run it as `lagwatch pipeline offsets-topic ...`, `python -m lagwatch.pipeline.offsets_topic ...`, or with
spark-submit (`--packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0`) on this file.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lagwatch.errors import ConfigError, LagwatchError
from lagwatch.pipeline import jobs
from lagwatch.pipeline.offsets_decode import (
    CONTROL,
    DECODED_DDL,
    GROUP_METADATA,
    GROUP_TOMBSTONE,
    KINDS,
    OFFSET_COMMIT,
    OFFSET_TOMBSTONE,
    OTHER,
    UNDECODABLE,
    decode_batches,
)

if TYPE_CHECKING:
    from lagwatch.config import ClusterConfig

OFFSETS_TOPIC = "__consumer_offsets"
KAFKA_DEFAULT_RETENTION_MINUTES = 10080
RETENTION_SETTING = "offsets.retention.minutes"
OUTPUTS = ("commits", "latest", "groups", "expiry_audit")
CONSUMER_GROUP_METADATA_KEY = 3  # KIP-848 ConsumerGroupMetadataKey: tombstoned when the group is deleted


def add_arguments(parser: argparse.ArgumentParser) -> None:
    jobs.add_cluster_arguments(parser)
    jobs.add_spark_arguments(parser)
    parser.add_argument(
        "--retention-minutes",
        type=int,
        default=None,
        help=f"offsets.retention.minutes for the expiry audit (default: the brokers' own, else {KAFKA_DEFAULT_RETENTION_MINUTES})",
    )


# -- the cluster, through kafka-python on the driver --------------------------------------------------------------


@dataclass(frozen=True)
class ClusterFacts:
    brokers: int
    partitions: int  # of __consumer_offsets; 0 when the topic does not exist yet
    retention_minutes: int
    retention_source: str


def cluster_facts(name: str, cluster: ClusterConfig, override_minutes: int | None) -> ClusterFacts:
    """Reachability, the partitions of __consumer_offsets and offsets.retention.minutes (the shortest any broker
    runs with: every coordinator applies its own). Raises ClusterError/LagwatchError with one line."""
    import kafka.errors as Errors
    from kafka.admin import ConfigResource, ConfigResourceType

    from lagwatch.collect.client import open_admin, translate

    admin = open_admin(name, cluster)
    try:
        try:
            broker_ids = sorted(int(b["broker_id"]) for b in admin.describe_cluster()["brokers"])
            (topic,) = admin.describe_topics([OFFSETS_TOPIC])
        except Exception as e:
            raise translate(name, e) from None
        error = Errors.for_code(topic["error_code"])
        if error in (Errors.TopicAuthorizationFailedError,):
            raise LagwatchError(f"cluster {name!r}: not authorised to describe {OFFSETS_TOPIC}")
        partitions = len(topic["partitions"]) if error is Errors.NoError else 0
        if override_minutes is not None:
            return ClusterFacts(len(broker_ids), partitions, override_minutes, "--retention-minutes")
        minutes: dict[int, int] = {}
        try:
            resources = [
                ConfigResource(ConfigResourceType.BROKER, str(b), configs={RETENTION_SETTING: None}) for b in broker_ids
            ]
            described = admin.describe_configs(resources, config_filter="all")
            for broker, configs in described.get("broker", {}).items():
                value = (configs.get(RETENTION_SETTING) or {}).get("value")
                if value is not None and str(value).isdigit():
                    minutes[int(broker)] = int(value)
        except Exception:
            minutes = {}  # not allowed to describe configs: Kafka's default below
        if not minutes:
            return ClusterFacts(
                len(broker_ids),
                partitions,
                KAFKA_DEFAULT_RETENTION_MINUTES,
                "Kafka's default (the brokers did not say)",
            )
        broker, shortest = min(minutes.items(), key=lambda item: (item[1], item[0]))
        return ClusterFacts(len(broker_ids), partitions, shortest, f"broker {broker} (shortest of {len(minutes)})")
    finally:
        admin.close()


def kafka_options(name: str, cluster: ClusterConfig) -> dict[str, str]:
    """The connector's `kafka.*` options for the cluster. Holds secrets (JAAS, key password, PEM key): they go to
    the JVM as DataFrameReader options, never to argv or the log."""
    timeout_ms = str(int(cluster.request_timeout_s * 1000))
    options = {
        "kafka.bootstrap.servers": ",".join(cluster.bootstrap_servers),
        "kafka.security.protocol": cluster.security.protocol,
        "kafka.client.id": f"lagwatch-pipeline-{name}",
        "kafka.request.timeout.ms": timeout_ms,
        "kafka.default.api.timeout.ms": str(max(int(timeout_ms), 60000)),
        # Offsets committed by aborted transactions never took effect: skip them, as the daemon's reader does.
        "kafka.isolation.level": "read_committed",
    }
    tls = cluster.security.tls
    if tls is not None:
        if tls.ca_file is not None:
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = str(tls.ca_file)
        if tls.cert_file is not None and tls.key_file is not None:
            # PEM content inline (Kafka 2.7+, KIP-651); the key must be PKCS#8.
            options["kafka.ssl.keystore.type"] = "PEM"
            options["kafka.ssl.keystore.certificate.chain"] = tls.cert_file.read_text()
            options["kafka.ssl.keystore.key"] = tls.key_file.read_text()
            if tls.key_password is not None:
                options["kafka.ssl.key.password"] = tls.key_password.get_secret_value()
        if not tls.check_hostname:
            options["kafka.ssl.endpoint.identification.algorithm"] = ""
    sasl = cluster.security.sasl
    if sasl is not None:
        options["kafka.sasl.mechanism"] = sasl.mechanism
        if sasl.mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if sasl.mechanism == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            password = sasl.password.get_secret_value() if sasl.password is not None else ""
            options["kafka.sasl.jaas.config"] = (
                f'{module} required username="{_jaas(sasl.username or "")}" password="{_jaas(password)}";'
            )
        elif sasl.mechanism == "GSSAPI":
            options["kafka.sasl.kerberos.service.name"] = sasl.kerberos_service_name
            options["kafka.sasl.jaas.config"] = (
                "com.sun.security.auth.module.Krb5LoginModule required useTicketCache=true;"
            )
        else:
            raise ConfigError(
                [
                    f"clusters.{name}.security.sasl.mechanism: {sasl.mechanism} is not supported by the Spark jobs "
                    "(its login is Python code; Spark's connector needs a Java login module)"
                ]
            )
    return options


def _jaas(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


# -- the Spark job ---------------------------------------------------------------------------------------------


@dataclass
class Summary:
    records: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    groups: int = 0
    partitions: int = 0  # group-partitions with a committed offset (not deleted)
    deleted_partitions: int = 0
    read_seconds: float = 0.0
    seconds: float = 0.0
    retention_minutes: int = KAFKA_DEFAULT_RETENTION_MINUTES
    retention_source: str = ""
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def undecodable(self) -> int:
        return self.kinds.get(UNDECODABLE, 0)

    @property
    def records_per_second(self) -> float:
        return self.records / self.read_seconds if self.read_seconds > 0 else 0.0

    def lines(self) -> list[str]:
        kinds = ", ".join(f"{k} {self.kinds.get(k, 0)}" for k in KINDS if self.kinds.get(k, 0) or k == UNDECODABLE)
        return [
            f"records read: {self.records} ({kinds})",
            f"undecodable: {self.undecodable}",
            f"groups: {self.groups}; committed group-partitions: {self.partitions} (deleted: {self.deleted_partitions})",
            f"offsets.retention.minutes: {self.retention_minutes} ({self.retention_source})",
            f"read and decoded in {self.read_seconds:.1f} s ({self.records_per_second:,.0f} records/s); "
            f"{self.seconds:.1f} s in all",
            *(f"{name}/: {path}" for name, path in self.outputs.items()),
        ]


def read_records(spark: Any, options: dict[str, str], partitions: int) -> Any:
    """Every record of __consumer_offsets up to its end as of now, as Spark's Kafka source gives them.

    `assign` rather than `subscribe`: with subscribe, the connector's driver consumer joins a consumer group
    (`spark-kafka-relation-...`) and so writes a group of its own into the very topic being read, which every
    monitor of the cluster then sees. With assign nothing joins; the partitions come from the metadata."""
    import json

    # The default (admin-based) offset fetching skips internal topics: 0 rows. The consumer-based one reads them.
    spark.conf.set("spark.sql.streaming.kafka.useDeprecatedOffsetFetching", "true")
    reader = spark.read.format("kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.option("assign", json.dumps({OFFSETS_TOPIC: list(range(partitions))}))
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )


def decode(raw: Any) -> Any:
    return raw.select("key", "value", "partition", "offset", "timestamp").mapInArrow(decode_batches, DECODED_DDL)


def build_outputs(decoded: Any, retention_minutes: int, as_of: datetime) -> dict[str, Any]:
    """The four output tables from the decoded records (Spark DataFrames, not yet computed)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    gtp = ["group", "topic", "partition"]
    newest_first = F.col("source_offset").desc()

    commits = decoded.where(F.col("kind").isin(OFFSET_COMMIT, OFFSET_TOMBSTONE)).select(
        "group",
        "topic",
        "partition",
        "offset",
        "leader_epoch",
        "metadata",
        "commit_timestamp",
        "expire_timestamp",
        F.col("tombstone").alias("deleted"),
        "value_version",
        "source_partition",
        "source_offset",
        "source_timestamp",
    )

    # One group's records all live in one partition of __consumer_offsets: their offsets order them.
    def newest(df: Any, keys: list[str]) -> Any:
        w = Window.partitionBy(*keys).orderBy(newest_first)
        return df.withColumn("_n", F.row_number().over(w)).where(F.col("_n") == 1).drop("_n")

    last_event = newest(commits, gtp).select(
        *gtp, F.col("deleted").alias("_tombstoned"), "source_partition", "source_offset", "source_timestamp"
    )
    last_commit = newest(commits.where(~F.col("deleted")), gtp).select(
        *gtp, "offset", "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp", "value_version"
    )
    group_tombstones = (
        decoded.where(F.col("kind") == GROUP_TOMBSTONE)
        .groupBy("group")
        .agg(
            F.max("source_offset").alias("_gt_offset"),
            F.max_by("source_timestamp", "source_offset").alias("_gt_timestamp"),
        )
    )
    by_group_tombstone = F.coalesce(F.col("_gt_offset"), F.lit(-1)) > F.col("source_offset")
    latest = (
        last_event.join(last_commit, gtp, "left")
        .join(group_tombstones, ["group"], "left")
        .select(
            *gtp,
            "offset",
            "leader_epoch",
            "metadata",
            "commit_timestamp",
            "expire_timestamp",
            (F.col("_tombstoned") | by_group_tombstone).alias("deleted"),
            F.when(F.col("_tombstoned"), F.col("source_timestamp"))
            .when(by_group_tombstone, F.col("_gt_timestamp"))
            .alias("deleted_timestamp"),
            "value_version",
            "source_partition",
            "source_offset",
            "source_timestamp",
        )
    )

    members = F.col("members")
    groups = newest(decoded.where(F.col("kind").isin(GROUP_METADATA, GROUP_TOMBSTONE)), ["group"]).select(
        "group",
        F.col("tombstone").alias("deleted"),
        "protocol_type",
        "generation",
        "protocol",
        "leader",
        F.when(F.col("tombstone"), F.lit("Dead"))
        .when(F.size(members) == 0, F.lit("Empty"))
        .otherwise(F.lit("Stable"))
        .alias("state"),
        "state_timestamp",
        F.when(~F.col("tombstone"), F.size(members)).alias("member_count"),
        "members",
        F.array_sort(F.array_distinct(F.flatten(members.getField("subscribed_topics")))).alias("subscribed_topics"),
        F.forall(members, lambda m: F.size(m.getField("subscribed_topics")) > 0).alias("subscriptions_known"),
        "value_version",
        "source_partition",
        "source_offset",
        "source_timestamp",
    )

    other = decoded.where((F.col("kind") == OTHER) & F.col("group").isNotNull())
    modern = other.groupBy("group").agg(F.array_sort(F.collect_set("key_version")).alias("record_types"))
    modern_deleted = (
        other.where(F.col("key_version") == CONSUMER_GROUP_METADATA_KEY)
        .groupBy("group")
        .agg(F.max_by("tombstone", "source_offset").alias("_modern_deleted"))
    )
    live_groups = groups.where(~F.col("deleted")).select(
        "group",
        F.col("protocol_type").alias("_protocol_type"),
        F.col("state").alias("_state"),
        F.col("state_timestamp").alias("_state_timestamp"),
        F.col("subscribed_topics").alias("_subscribed"),
        F.col("subscriptions_known").alias("_subscriptions_known"),
    )
    audit = expiry_audit(
        latest.where(~F.col("deleted"))
        .join(live_groups, ["group"], "left")
        .join(modern, ["group"], "left")
        .join(modern_deleted, ["group"], "left"),
        retention_minutes,
        as_of,
    )
    return {"commits": commits, "latest": latest, "groups": groups, "expiry_audit": audit}


def expiry_audit(df: Any, retention_minutes: int, as_of: datetime) -> Any:
    """When each committed offset can expire, as Kafka's group coordinator decides it (Kafka 2.1+, KIP-211/496;
    the classic and KIP-848 coordinators of Kafka 4), see lagwatch/rules/expiry.py:
      classic, Empty            from the moment it became Empty (the commit time if the record has no state time)
      classic, Stable           topics no member subscribes to, from their last commit; subscribed ones never
      classic, other protocols  (Connect...) while not Empty: never
      simple (no protocol)      from each partition's last commit
      KIP-848                   from each partition's last commit, once no member subscribes to the topic (the
                                subscriptions are in records this job does not decode: can_expire is null)
    A commit with an explicit expire timestamp (value version 1) expires at that time instead."""
    from pyspark.sql import functions as F

    modern = F.col("record_types").isNotNull() & ~F.coalesce(F.col("_modern_deleted"), F.lit(False))
    classic = F.col("_protocol_type").isNotNull() & (F.col("_protocol_type") != "")
    kind = F.when(modern, F.lit("kip848")).when(classic, F.lit("classic")).otherwise(F.lit("simple"))
    df = df.withColumn("group_kind", kind)
    is_kind = F.col("group_kind")
    empty = F.col("_state") == "Empty"
    subscribed = F.coalesce(F.array_contains(F.col("_subscribed"), F.col("topic")), F.lit(False))
    stable_consumer = (
        (F.col("_state") == "Stable")
        & (F.col("_protocol_type") == "consumer")
        & F.coalesce(F.col("_subscriptions_known"), F.lit(False))
    )
    can_expire = (
        F.when(is_kind == "simple", F.lit(True))
        .when(is_kind == "kip848", F.lit(None).cast("boolean"))
        .when(empty, F.lit(True))
        .when(stable_consumer, ~subscribed)
        .otherwise(F.lit(False))
    )
    df = df.withColumn("can_expire", can_expire)
    counts = F.coalesce(F.col("can_expire"), F.lit(True))  # kip848: when the condition holds
    explicit = counts & F.col("expire_timestamp").isNotNull()
    from_empty = counts & (is_kind == "classic") & empty & F.col("_state_timestamp").isNotNull()
    clock = (
        F.when(explicit, F.lit("expire_timestamp"))
        .when(from_empty, F.lit("group_empty"))
        .when(counts, F.lit("last_commit"))
    )
    clock_start = F.when(from_empty & ~explicit, F.col("_state_timestamp")).when(
        counts & ~explicit, F.col("commit_timestamp")
    )
    retention_us = retention_minutes * 60 * 1_000_000
    df = df.withColumn("clock", clock).withColumn("clock_start", clock_start)
    expires_at = F.when(F.col("clock") == "expire_timestamp", F.col("expire_timestamp")).when(
        F.col("clock_start").isNotNull(), F.timestamp_micros(F.unix_micros(F.col("clock_start")) + F.lit(retention_us))
    )
    as_of_col = F.lit(as_of).cast("timestamp")
    note = (
        F.when(is_kind == "simple", F.lit("simple group: expires from its last commit"))
        .when(
            is_kind == "kip848",
            F.lit("KIP-848 group: expires from its last commit once no member subscribes to the topic"),
        )
        .when(empty, F.lit("classic group, Empty: every offset expires from the moment it became Empty"))
        .when(stable_consumer & subscribed, F.lit("classic group, Stable: a member subscribes to the topic"))
        .when(stable_consumer, F.lit("classic group, Stable: no member subscribes to the topic"))
        .otherwise(F.lit("classic group not Empty (other protocol, or subscriptions unknown): never expires"))
    )
    return (
        df.withColumn("expires_at", expires_at)
        .withColumn("as_of", as_of_col)
        .withColumn("past_expiry", F.col("expires_at") <= as_of_col)
        .select(
            "group",
            "topic",
            "partition",
            "offset",
            "group_kind",
            F.when(is_kind == "classic", F.col("_state"))
            .when(is_kind == "simple", F.lit("Empty"))
            .alias("group_state"),
            F.col("_protocol_type").alias("protocol_type"),
            "record_types",
            "commit_timestamp",
            "can_expire",
            "clock",
            "clock_start",
            F.lit(retention_minutes).alias("retention_minutes"),
            "expires_at",
            "as_of",
            "past_expiry",
            note.alias("note"),
        )
    )


def backfill(
    spark: Any,
    name: str,
    cluster: ClusterConfig,
    out: str,
    retention_minutes: int | None = None,
    as_of: datetime | None = None,
    facts: ClusterFacts | None = None,
) -> Summary:
    """The whole job on a running SparkSession: facts from the cluster, read, decode, write. Returns the summary."""
    from pyspark import StorageLevel

    started = time.monotonic()
    options = kafka_options(name, cluster)
    facts = facts or cluster_facts(name, cluster, retention_minutes)
    jobs.progress(
        f"cluster {name!r}: {facts.brokers} broker(s), {OFFSETS_TOPIC} with {facts.partitions} partition(s), "
        f"offsets.retention.minutes={facts.retention_minutes} ({facts.retention_source})"
    )
    summary = Summary(retention_minutes=facts.retention_minutes, retention_source=facts.retention_source)
    if facts.partitions == 0:
        jobs.progress(f"{OFFSETS_TOPIC} does not exist yet (no group has committed): nothing to read")
        summary.seconds = time.monotonic() - started
        return summary
    as_of = as_of or datetime.now(UTC)
    # Parquet timestamps as microseconds since the epoch in UTC (not INT96): pandas and pyarrow read them as UTC.
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    try:
        jobs.progress(f"reading and decoding {OFFSETS_TOPIC} (earliest to latest, read_committed)")
        decoded = decode(read_records(spark, options, facts.partitions)).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            read_started = time.monotonic()
            summary.kinds = {row["kind"]: int(row["count"]) for row in decoded.groupBy("kind").count().collect()}
            summary.read_seconds = time.monotonic() - read_started
            summary.records = sum(summary.kinds.values())
            jobs.progress(
                f"decoded {summary.records} records in {summary.read_seconds:.1f} s "
                f"({summary.undecodable} undecodable, {summary.kinds.get(CONTROL, 0)} control)"
            )
            outputs = build_outputs(decoded, facts.retention_minutes, as_of)
            base = out.rstrip("/")
            for table, df in outputs.items():
                path = f"{base}/{table}"
                jobs.progress(f"writing {table}/")
                df.write.mode("overwrite").parquet(path)
                summary.outputs[table] = path
            from pyspark.sql import functions as F

            latest = spark.read.parquet(summary.outputs["latest"])
            counts = latest.groupBy("deleted").count().collect()
            summary.partitions = sum(int(r["count"]) for r in counts if not r["deleted"])
            summary.deleted_partitions = sum(int(r["count"]) for r in counts if r["deleted"])
            summary.groups = int(
                decoded.where(F.col("group").isNotNull() & (F.col("kind") != UNDECODABLE))
                .select("group")
                .distinct()
                .count()
            )
        finally:
            decoded.unpersist()
    except LagwatchError:
        raise
    except Exception as e:
        raise LagwatchError(f"the Spark job failed: {jobs.spark_error(e)}") from None
    summary.seconds = time.monotonic() - started
    return summary


def run(args: argparse.Namespace) -> int:
    from lagwatch import logs
    from lagwatch.config import load_settings
    from lagwatch.lake.settings import is_s3
    from lagwatch.pipeline.session import check_spark, spark_session

    if args.retention_minutes is not None and args.retention_minutes <= 0:
        raise ConfigError(["--retention-minutes: must be a positive number of minutes"])
    master = jobs.default_master(args.master)
    name, cluster = jobs.cluster_from_args(args)
    if args.config is not None:
        logs.configure("WARNING", "text", secrets=logs.secret_values(load_settings(args.config)))
    kafka_options(name, cluster)  # unsupported security: say so before starting anything
    jobs.check_out_dir(args.out)
    check_spark()
    facts = cluster_facts(name, cluster, args.retention_minutes)  # unreachable: one line, before a JVM starts
    jobs.progress(f"starting Spark ({master or 'from spark-submit'}) with Spark's Kafka connector")
    spark = spark_session(master, "lagwatch-pipeline-offsets-topic", s3=is_s3(args.out))
    try:
        summary = backfill(spark, name, cluster, args.out, args.retention_minutes, facts=facts)
    finally:
        spark.stop()
    for line in summary.lines():
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    """For spark-submit and `python -m lagwatch.pipeline.offsets_topic`: the CLI's arguments and one-line errors."""
    return jobs.run_main("lagwatch pipeline offsets-topic", add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
