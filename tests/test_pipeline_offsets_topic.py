"""`lagwatch pipeline offsets-topic` on the real test broker: real groups of every kind (classic that left, simple,
KIP-848, deleted, transactional with an aborted transaction), read back from Parquet with pandas and checked
against kafka-python's OffsetFetch and against the clocks lagwatch's own `__consumer_offsets` reader gives.
Plus the one-line errors of the command, and the executors' imports."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from kafka import KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.structs import OffsetAndMetadata

from lagwatch.collect.offsets_reader import OffsetsTopicReader
from lagwatch.config import ClusterConfig
from lagwatch.devbroker.jars import kafka_major
from lagwatch.history import ExactClocks
from lagwatch.model import TopicPartition as LagwatchTopicPartition
from lagwatch.offsets_topic import GroupTombstone, Record
from tests.conftest import KAFKA_VERSION, run_lagwatch, unique, wait_for
from tests.kafka_scenario import admin, create_topic, produce, run_kip848_group, stopped_group

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Groups:
    classic: str
    simple: str
    kip848: str | None
    deleted: str
    deleted_topic: str
    tx: str
    tx_topic: str


class ClocksFromReader:
    """lagwatch's own daemon reader (kafka-python, read_committed), feeding the same ExactClocks the daemon uses."""

    def __init__(self, bootstrap: str) -> None:
        self.clocks = ExactClocks()
        self.records: list[Record] = []
        self._lock = threading.Lock()
        config = ClusterConfig(bootstrap_servers=[bootstrap], request_timeout_s=10)
        self.reader = OffsetsTopicReader("test", config, self._sink).start()

    def _sink(self, records: Sequence[Record], caught_up: bool) -> None:
        with self._lock:
            for r in records:
                self.clocks.apply(r)
                self.records.append(r)

    def holds(self, check: Any) -> bool:
        with self._lock:
            return bool(check(self))

    def close(self) -> None:
        self.reader.stop()


def kip848_group(bootstrap: str, kafka_libs: Path) -> str:
    topic, group = unique("pipe-k848"), unique("pipe-k848g")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, {0: 10, 1: 10})
    run_kip848_group(kafka_libs, bootstrap, topic, group, 20)
    return group


def transactional_commits(bootstrap: str) -> tuple[str, str]:
    """One committed and one aborted transaction that both send offsets for the group: only the first counts."""
    topic, group = unique("pipe-tx"), unique("pipe-txg")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, {0: 5, 1: 5})
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique("pipe-txid"))
    try:
        producer.init_transactions()
        for offsets, commit in (({0: 5, 1: 2}, True), ({0: 1, 1: 1}, False)):
            producer.begin_transaction()
            producer.send(topic, b"in-the-transaction", partition=0)
            producer.send_offsets_to_transaction(
                {TopicPartition(topic, p): OffsetAndMetadata(o, "tx", -1) for p, o in offsets.items()}, group
            )
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()
    return group, topic


@pytest.fixture(scope="module")
def groups_and_clocks(bootstrap: str, kafka_libs: Path) -> Any:
    classic = stopped_group(bootstrap, unique("pipe-classic"), {0: 10, 1: 6}, {0: 10, 1: 4})[1]
    simple = stopped_group(bootstrap, unique("pipe-simple"), {0: 8, 1: 8, 2: 8}, {0: 8, 2: 3}, assign=True)[1]
    deleted_topic, deleted = stopped_group(bootstrap, unique("pipe-del"), {0: 5, 1: 5}, {0: 2, 1: 3})
    a = admin(bootstrap)
    try:
        assert a.delete_groups([deleted]) == {deleted: "OK"}
    finally:
        a.close()
    tx, tx_topic = transactional_commits(bootstrap)
    k848 = kip848_group(bootstrap, kafka_libs) if kafka_major(KAFKA_VERSION) >= 4 else None
    groups = Groups(classic, simple, k848, deleted, deleted_topic, tx, tx_topic)

    reader = ClocksFromReader(bootstrap)

    def settled(r: ClocksFromReader) -> bool:
        c = r.clocks
        return (
            c.group_empty_since(classic) is not None
            and simple in c.commits
            and tx in c.commits
            and (k848 is None or len(c.commits.get(k848, {})) == 2)
            and GroupTombstone(deleted) in r.records
        )

    try:
        wait_for(lambda: reader.holds(settled), timeout=60, what="every group's records in __consumer_offsets")
        yield groups, reader
    finally:
        reader.close()


@pytest.fixture(scope="module")
def backfilled(spark: Any, bootstrap: str, groups_and_clocks: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from lagwatch.pipeline.offsets_topic import backfill

    out = tmp_path_factory.mktemp("pipeline") / "out"
    as_of = datetime.now(UTC)
    summary = backfill(spark, "test", ClusterConfig(bootstrap_servers=[bootstrap]), str(out), as_of=as_of)
    tables = {name: pd.read_parquet(out / name) for name in ("commits", "latest", "groups", "expiry_audit")}
    return summary, tables, as_of


def ms(ts: Any) -> int:
    return int(pd.Timestamp(ts).value // 1_000_000)


def retention_minutes(bootstrap: str) -> int:
    a = admin(bootstrap)
    try:
        (broker,) = [str(b["broker_id"]) for b in a.describe_cluster()["brokers"]]
        res = ConfigResource(ConfigResourceType.BROKER, broker, configs={"offsets.retention.minutes": None})
        described = a.describe_configs([res], config_filter="all")
        return int(described["broker"][broker]["offsets.retention.minutes"]["value"])
    finally:
        a.close()


@pytest.mark.kafka
@pytest.mark.spark
def test_latest_offsets_equal_offset_fetch(bootstrap: str, groups_and_clocks: Any, backfilled: Any) -> None:
    groups, _ = groups_and_clocks
    summary, tables, _ = backfilled
    assert summary.undecodable == 0 and summary.kinds.get("control", 0) == 0
    assert summary.records == sum(summary.kinds.values()) > 0
    latest = tables["latest"]
    live = [g for g in (groups.classic, groups.simple, groups.kip848, groups.tx) if g is not None]
    a = admin(bootstrap)
    try:
        fetched = a.list_group_offsets(dict.fromkeys([*live, groups.deleted]))
    finally:
        a.close()
    for group in live:
        mine = latest[(latest["group"] == group) & ~latest["deleted"]]
        got = {(r.topic, int(r.partition)): (int(r.offset), r.metadata) for r in mine.itertuples()}
        want = {(tp.topic, tp.partition): (om.offset, om.metadata) for tp, om in fetched[group].items()}
        assert got == want and got, group
    # The aborted transaction's offsets (1, 1) never count; the committed one's do.
    tx_commits = tables["commits"][tables["commits"]["group"] == groups.tx]
    assert sorted(zip(tx_commits["partition"], tx_commits["offset"], strict=True)) == [(0, 5), (1, 2)]


@pytest.mark.kafka
@pytest.mark.spark
def test_deleted_group_shows_as_deleted(groups_and_clocks: Any, backfilled: Any) -> None:
    groups, _ = groups_and_clocks
    _, tables, _ = backfilled
    latest = tables["latest"][tables["latest"]["group"] == groups.deleted]
    assert sorted(zip(latest["partition"], latest["offset"], strict=True)) == [(0, 2), (1, 3)]  # what was lost
    assert latest["deleted"].all() and latest["deleted_timestamp"].notna().all()
    commits = tables["commits"][tables["commits"]["group"] == groups.deleted]
    assert set(commits[commits["deleted"]]["partition"]) == {0, 1}
    assert commits[commits["deleted"]]["offset"].isna().all()
    g = tables["groups"].set_index("group").loc[groups.deleted]
    assert g["deleted"] and g["state"] == "Dead"
    assert groups.deleted not in set(tables["expiry_audit"]["group"])


@pytest.mark.kafka
@pytest.mark.spark
def test_groups_and_expiry_audit_match_the_daemon_clocks(
    bootstrap: str, groups_and_clocks: Any, backfilled: Any
) -> None:
    groups, reader = groups_and_clocks
    summary, tables, as_of = backfilled
    clocks: ExactClocks = reader.clocks
    retention = retention_minutes(bootstrap)
    assert summary.retention_minutes == retention
    retention_ms = retention * 60_000

    classic = tables["groups"].set_index("group").loc[groups.classic]
    assert classic["state"] == "Empty" and classic["protocol_type"] == "consumer" and not classic["deleted"]
    empty_since = clocks.group_empty_since(groups.classic)
    assert empty_since is not None and ms(classic["state_timestamp"]) == round(empty_since * 1000)

    audit = tables["expiry_audit"]
    assert (audit["retention_minutes"] == retention).all()
    assert (audit["past_expiry"] == (audit["expires_at"] <= pd.Timestamp(as_of))).all()

    def rows(group: str) -> pd.DataFrame:
        return audit[audit["group"] == group]

    for r in rows(groups.classic).itertuples():
        assert (r.group_kind, r.group_state, r.clock, r.can_expire) == ("classic", "Empty", "group_empty", True)
        assert ms(r.expires_at) == round(empty_since * 1000) + retention_ms
    expected_simple = {"simple": groups.simple, "kip848": groups.kip848, "tx-simple": groups.tx}
    for kind, group in expected_simple.items():
        if group is None:
            continue
        mine = rows(group)
        assert len(mine) == len(clocks.commits[group]) > 0, group
        for r in mine.itertuples():
            commit_s = clocks.commit_time(group, LagwatchTopicPartition(r.topic, int(r.partition)))
            assert commit_s is not None
            assert r.clock == "last_commit" and ms(r.clock_start) == round(commit_s * 1000)
            assert ms(r.expires_at) == round(commit_s * 1000) + retention_ms
            assert not r.past_expiry
            if kind == "kip848":
                assert r.group_kind == "kip848" and pd.isna(r.can_expire)
                assert 3 in set(r.record_types)
            else:
                assert r.group_kind == "simple" and r.can_expire


@pytest.mark.kafka
@pytest.mark.spark
def test_past_expiry_under_a_short_retention(
    spark: Any, bootstrap: str, groups_and_clocks: Any, tmp_path: Path
) -> None:
    """--retention-minutes and a later `as_of`: the same offsets are past their expiry."""
    from lagwatch.pipeline.offsets_topic import backfill

    groups, _ = groups_and_clocks
    as_of = datetime.now(UTC) + timedelta(minutes=2)
    summary = backfill(
        spark, "test", ClusterConfig(bootstrap_servers=[bootstrap]), str(tmp_path), retention_minutes=1, as_of=as_of
    )
    assert summary.retention_minutes == 1 and summary.retention_source == "--retention-minutes"
    audit = pd.read_parquet(tmp_path / "expiry_audit")
    mine = audit[audit["group"].isin([groups.classic, groups.simple])]
    assert len(mine) == 4 and mine["past_expiry"].all()


def test_executors_import_only_the_core_decoder() -> None:
    code = (
        "import sys, lagwatch.pipeline.offsets_decode\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('kafka', 'slack_sdk', 'pyspark', 'fastapi')"
        " or (m.startswith('lagwatch.') and m != 'lagwatch.native'"  # which core runs: stdlib only
        " and not m.startswith(('lagwatch.offsets_topic', 'lagwatch.pipeline'))))\n"
        "assert not bad, bad\n"
        "assert sorted(m for m in sys.modules if m.startswith('lagwatch.pipeline')) == "
        "['lagwatch.pipeline', 'lagwatch.pipeline.offsets_decode']\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# -- the command's one-line errors --------------------------------------------------------------------------------


def assert_one_line(result: subprocess.CompletedProcess[str], code: int, words: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in result.stderr, result.stderr


def test_no_such_cluster_in_the_config(tmp_path: Path) -> None:
    config = tmp_path / "lagwatch.yaml"
    config.write_text("clusters:\n  prod:\n    bootstrap_servers: ['127.0.0.1:1']\n")
    result = run_lagwatch(
        "pipeline", "offsets-topic", "--config", str(config), "--cluster", "staging", "--out", str(tmp_path / "o")
    )
    assert_one_line(result, 2, "no cluster 'staging'")


def test_unreachable_bootstrap(tmp_path: Path) -> None:
    result = run_lagwatch(
        "pipeline", "offsets-topic", "--bootstrap-server", "127.0.0.1:1", "--timeout", "2", "--out", str(tmp_path)
    )
    assert_one_line(result, 1, "unreachable")


def test_out_not_writable(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    result = run_lagwatch(
        "pipeline", "offsets-topic", "--bootstrap-server", "127.0.0.1:1", "--out", str(tmp_path / "a-file" / "out")
    )
    assert_one_line(result, 1, "not writable")


def test_no_java(tmp_path: Path) -> None:
    result = run_lagwatch(
        "pipeline",
        "offsets-topic",
        "--bootstrap-server",
        "127.0.0.1:1",
        "--out",
        str(tmp_path),
        env={"PATH": str(tmp_path), "JAVA_HOME": ""},
    )
    assert_one_line(result, 1, "Spark needs Java 17")


def test_pyspark_missing(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "pyspark"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('simulated: no pyspark')\n")
    result = run_lagwatch(
        "pipeline",
        "offsets-topic",
        "--bootstrap-server",
        "127.0.0.1:1",
        "--out",
        str(tmp_path / "out"),
        env={"PYTHONPATH": str(tmp_path / "site")},
    )
    assert_one_line(result, 2, "pip install '.[spark]'")


def test_spark_submit_module_has_the_same_errors(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lagwatch.pipeline.offsets_topic", "--bootstrap-server", "nonsense", "--out", "x"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert_one_line(result, 2, "--bootstrap-server")
