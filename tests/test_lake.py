"""The lake writer: lossless snapshots, atomic files, schema version, retention, and a target that refuses."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.dataset as ds  # noqa: E402

from lagwatch.config import load_settings  # noqa: E402
from lagwatch.daemon import Daemon  # noqa: E402
from lagwatch.lake import LakeConfig, codec  # noqa: E402
from lagwatch.lake.writer import LakeWriter, prune  # noqa: E402
from lagwatch.model import (  # noqa: E402
    BrokerSettings,
    ClusterSnapshot,
    CommittedOffset,
    GroupKind,
    GroupSnapshot,
    Member,
    PartitionOffsets,
    TopicPartition,
)
from tests.synthetic import TP, Pipeline, group, snapshot  # noqa: E402

T0 = 1_790_000_000.123456


def rich_snapshot(t: float) -> ClusterSnapshot:
    other = TopicPartition("payments", 3)
    unowned = TopicPartition("audit", 0)
    return ClusterSnapshot(
        cluster="c",
        taken_at=t,
        duration_s=0.25,
        groups=(
            GroupSnapshot(
                "g1",
                "Stable",
                "consumer",
                GroupKind.CLASSIC,
                2,
                members=(Member("m-1", "client", "/10.0.0.1", (TP, other), ("orders", "payments")),),
                committed={TP: CommittedOffset(7, 3, "meta"), TopicPartition("gone", 1): CommittedOffset(2)},
            ),
            GroupSnapshot(
                "regex",
                "Stable",
                "consumer",
                GroupKind.CONSUMER,
                1,
                members=(Member("m-2", "client", "/10.0.0.2", (other,), (), subscribed_regex="pay.*"),),
                committed={other: CommittedOffset(41)},
            ),
            GroupSnapshot("broken", "Unknown", "", GroupKind.UNKNOWN, None, error="COORDINATOR_NOT_AVAILABLE"),
            GroupSnapshot("simple", "Empty", "", GroupKind.SIMPLE, 1, committed={other: CommittedOffset(40)}),
        ),
        partitions={
            TP: PartitionOffsets(0, 10, 9),
            other: PartitionOffsets(5, 50, None, None),
            unowned: PartitionOffsets(None, None, None, "NOT_LEADER"),
        },
        brokers=(BrokerSettings(1, 10080, 600000), BrokerSettings(2, None, None)),
        requests={"OffsetFetch": 1, "ListOffsets": 2},
        record_times={(TP, 7): t - 30.5},
        missing_topics=frozenset({"deleted"}),
    )


def read(path: Path, dataset: str) -> Any:
    return ds.dataset(path / dataset, format="parquet", partitioning="hive").to_table()


def writer(tmp_path: Path, **config: Any) -> LakeWriter:
    return LakeWriter(LakeConfig(enabled=True, path=str(tmp_path / "lake"), **config))


def test_snapshots_come_back_equal_through_parquet(tmp_path: Path) -> None:
    lake = writer(tmp_path)
    polls = [
        rich_snapshot(T0),
        ClusterSnapshot("c", T0 + 1, 5.0, error="timed out", error_kind="timeout"),
        rich_snapshot(T0 + 2),
    ]
    p = Pipeline()
    for s in polls:
        lake.record(s, p.step(s), p.book)
    assert lake.flush()
    table = read(tmp_path / "lake", "snapshots")
    rows = table.to_pandas().to_dict("records")
    assert {r["cluster"] for r in rows} == {"c"}
    assert codec.snapshots_from_rows("c", rows) == polls
    partition_rows = [r for r in rows if r["row_kind"] == "partition" and r["taken_at"] == T0]
    first = next(r for r in partition_rows if r["group"] == "g1" and r["topic"] == "orders")
    assert (first["committed"], first["log_end"], first["lag"], first["lag_state"]) == (7, 10, 3, "ok")
    assert first["lag_seconds"] == pytest.approx(30.5) and first["lag_seconds_exact"]
    assert {(r["group"], r["topic"]) for r in partition_rows} == {
        ("g1", "orders"),
        ("g1", "gone"),
        ("g1", "payments"),
        ("regex", "payments"),
        ("simple", "payments"),
    }


def test_schema_version_in_every_row_and_in_the_file_metadata(tmp_path: Path) -> None:
    lake = writer(tmp_path, format="parquet")  # its files
    p = Pipeline()
    s = rich_snapshot(T0)
    lake.record(s, p.step(s), p.book)
    lake.record_config("c", {"lag": {}}, {"group_wait_s": 0}, 90.0, False, 30.0, p.book)
    assert lake.flush()
    for dataset in ("snapshots", "config"):
        table = read(tmp_path / "lake", dataset)
        assert table.num_rows > 0 and set(table.column("schema_version").to_pylist()) == {codec.SCHEMA_VERSION}
        assert table.schema.metadata[b"lagwatch.schema_version"] == str(codec.SCHEMA_VERSION).encode()
    files = list((tmp_path / "lake" / "snapshots" / "cluster=c").glob("date=*/part-*.parquet"))
    assert [f.parent.name for f in files] == ["date=2026-09-21"]


def test_a_file_is_invisible_until_complete(tmp_path: Path) -> None:
    lake = writer(tmp_path, format="parquet")
    p = Pipeline()
    s = rich_snapshot(T0)
    lake.record(s, p.step(s), p.book)
    seen: list[tuple[list[str], int]] = []
    real_move = lake.fs.move

    def move(src: str, dest: str) -> None:  # the file is complete: what does a reader see just before the rename?
        directory = Path(src).parent
        seen.append((sorted(f.name for f in directory.iterdir()), read(tmp_path / "lake", "snapshots").num_rows))
        real_move(src, dest)

    lake.fs = _Wrapped(lake.fs, move=move)
    assert lake.flush()
    ((names, rows_visible),) = seen
    assert len(names) == 1 and names[0].startswith(".tmp-part-") and rows_visible == 0
    assert read(tmp_path / "lake", "snapshots").num_rows > 0
    assert not list((tmp_path / "lake").rglob(".tmp-*"))


class _Wrapped:
    def __init__(self, inner: Any, **overrides: Any) -> None:
        self._inner, self._overrides = inner, overrides

    def __getattr__(self, name: str) -> Any:
        return self._overrides.get(name) or getattr(self._inner, name)


def test_retention_deletes_old_date_partitions_and_stale_temp_files(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    for dataset in ("snapshots", "alerts"):
        for date in ("2026-01-01", "2026-01-30", "2026-01-31"):
            (root / dataset / "cluster=c" / f"date={date}").mkdir(parents=True)
    stale = root / "snapshots" / "cluster=c" / "date=2026-01-31" / ".tmp-part-x.parquet"
    stale.write_bytes(b"half")
    os.utime(stale, (0, 0))
    now = time.mktime((2026, 1, 31, 12, 0, 0, 0, 0, 0)) - time.timezone
    lake = writer(tmp_path)
    deleted = prune(lake.fs, lake.root, 1, now)
    assert sorted(Path(d).name for d in deleted) == ["date=2026-01-01"] * 2
    assert sorted(p.name for p in (root / "snapshots" / "cluster=c").iterdir()) == [
        "date=2026-01-30",
        "date=2026-01-31",
    ]
    assert not stale.exists()


class FakePoller:
    """Synthetic polls of a group that stops consuming while records keep arriving."""

    def __init__(self, name: str, config: Any) -> None:
        self.t = T0
        self.end = 0

    def poll(self) -> ClusterSnapshot:
        self.t += 1
        self.end += 10
        return snapshot(self.t, [group("g", {TP: 0}, state="Empty", members=0)], {TP: self.end})

    def close(self) -> None:
        pass


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Any:
    """A 1 MiB tmpfs (needs root): disk full on demand."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_never_stops_alerting_and_the_lake_recovers(tmp_path: Path, tiny_disk: Path) -> None:
    filler = tiny_disk / "filler"
    with open(filler, "wb") as f:  # fill the disk
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    settings = load_settings(
        rules={"stopped": {"window_s": 3}},
        alerts={"group_wait_s": 0, "group_interval_s": 0},
        state_dir=tmp_path / "state",
        http={"enabled": False},
        lake={"enabled": True, "path": str(tiny_disk / "lake"), "max_buffer_rows": 12},
    )
    clusters = {"c": load_settings(clusters={"c": {"bootstrap_servers": ["127.0.0.1:1"]}}).clusters["c"]}
    daemon = Daemon(settings, clusters=clusters, notifiers={}, poller_factory=FakePoller)
    lake = daemon.lake
    assert lake is not None
    try:
        for _ in range(8):
            daemon.poll_cluster("c")
            lake.flush()
        assert {a.rule for a in daemon.book.alerts.values() if a.state == "firing"} == {"stopped"}
        assert lake.stats.write_failures == 8 and lake.stats.files_written == 0
        assert lake.stats.dropped_rows > 0 and lake.stats.buffered_rows <= 12  # bounded: the oldest polls dropped
        daemon.render_metrics()
        assert b"lagwatch_lake_write_failures_total 8" in daemon.metrics_body()
        filler.unlink()
        daemon.poll_cluster("c")
        assert lake.flush() and lake.stats.buffered_rows == 0
    finally:
        daemon.stop()
    snapshots = read(tiny_disk / "lake", "snapshots").to_pandas()
    polls = sorted(snapshots[snapshots.row_kind == "poll"].taken_at)
    assert polls == pytest.approx([T0 + i for i in range(10 - len(polls), 10)])  # the newest polls, once each
    assert 3 <= len(polls) < 9
    alerts = read(tiny_disk / "lake", "alerts").to_pandas()
    assert list(alerts.transition) == ["firing"] and list(alerts.rule) == ["stopped"]
    assert not list(tiny_disk.rglob(".tmp-*"))


def test_exact_clock_records_are_recorded_and_a_replay_reaches_the_same_expiry_alert(tmp_path: Path) -> None:
    """The __consumer_offsets records the daemon folds into its history go into the lake with the next poll, so a
    replay feeds its step the same: here they date a group's emptiness 400 s before lagwatch started, which brings
    the expiry warning forward from about 450 s after start to 50 s."""
    from lagwatch.lake.codec import polls_from_rows
    from lagwatch.offsets_topic import GroupMetadata, OffsetCommit
    from lagwatch.pipeline.backtest import RECORDED, Candidate, ClusterParams, replay

    rules = {"expiry": {"retention_minutes": 10}}
    alerts = {"group_wait_s": 0, "group_interval_s": 0}
    settings = load_settings(
        rules=rules,
        alerts=alerts,
        state_dir=tmp_path / "state",
        http={"enabled": False},
        lake={"enabled": True, "path": str(tmp_path / "lake")},
    )
    clusters = {"c": load_settings(clusters={"c": {"bootstrap_servers": ["127.0.0.1:1"]}}).clusters["c"]}

    class QuietPoller(FakePoller):  # an Empty group, caught up: only its offsets' expiry can raise anything
        def poll(self) -> ClusterSnapshot:
            self.t += 10
            return snapshot(self.t, [group("g", {TP: 5}, state="Empty", members=0)], {TP: 5})

    sinks: list[Any] = []

    class Reader:
        def __init__(self, name: str, config: Any, sink: Any) -> None:
            sinks.append(sink)

        def status(self) -> Any:
            from lagwatch.collect.offsets_reader import ReaderState, ReaderStatus

            return ReaderStatus(ReaderState.LIVE, 2, 0, None)

        def request_stop(self) -> None:
            pass

        def stop(self, timeout: float) -> None:
            pass

    daemon = Daemon(settings, clusters=clusters, notifiers={}, poller_factory=QuietPoller, reader_factory=Reader)
    empty_since_ms = int((T0 - 400) * 1000)
    records = [
        OffsetCommit("g", TP.topic, TP.partition, 5, None, "", empty_since_ms - 5000, None, 3),
        GroupMetadata("g", "consumer", 4, None, None, empty_since_ms, (), 3),
    ]
    try:
        sinks[0](records, True)
        for _ in range(10):
            daemon.poll_cluster("c")
        raised = {(a.rule, a.severity) for a in daemon.book.alerts.values() if a.state == "firing"}
        assert raised == {("expiry", "warning")}
    finally:
        daemon.stop()
    rows = read(tmp_path / "lake", "snapshots").to_pandas()
    assert list(rows[rows.row_kind == "record"].ordinal) == [1, 2]  # right after the first poll's row
    first = polls_from_rows("c", rows.to_dict("records"))[0]
    assert first.records == tuple(records) and first.records_caught_up
    params = ClusterParams(90.0, False, rules, alerts)
    recorded = [Candidate(RECORDED, None, None)]
    replayed = [r for r in replay("c", rows.to_dict("records"), recorded, params) if r["kind"] == "alert"]
    lake_alerts = read(tmp_path / "lake", "alerts").to_pandas()
    assert [(r["rule"], r["severity"], r["fired_at"]) for r in replayed] == [
        (r.rule, r.severity, r.fired_at) for r in lake_alerts.itertuples()
    ]
    without = rows[rows.row_kind != "record"].to_dict("records")  # what a lake without the records would replay
    assert [r for r in replay("c", without, recorded, params) if r["kind"] == "alert"] == []


def test_one_lake_setting_serves_pyarrow_and_spark() -> None:
    """The daemon and compact open the lake with pyarrow (s3://), Spark with Hadoop (s3a://): either spelling works
    for both, so the chart's one `pipeline.lake` value serves every job."""
    from lagwatch.pipeline.lake_read import spark_uri

    assert spark_uri("s3://bucket/lake") == spark_uri("s3a://bucket/lake") == "s3a://bucket/lake"
    assert spark_uri("gs://b/l") == "gs://b/l" and spark_uri("/data/lake") == "/data/lake"
    filesystem, root = __import__("lagwatch.lake.writer", fromlist=["open_filesystem"]).open_filesystem(
        "s3a://bucket/lake?region=eu-west-1"  # a region given: nothing is asked of the network
    )
    assert type(filesystem).__name__ == "S3FileSystem" and root == "bucket/lake"


def test_the_recorded_configuration_is_replayed_as_it_was_in_force_at_each_time(tmp_path: Path) -> None:
    """The daemon ran with a lag warning at 50 records, then was restarted with 5,000. `recorded` replayed the
    whole range under the last configuration: the alert the daemon raised and resolved in the first half was
    never there. Each configuration now applies from its daemon start on."""
    from lagwatch.pipeline.backtest import RECORDED, Candidate, ClusterParams, replay

    alerts = {"group_wait_s": 0, "group_interval_s": 0}
    low = {"lag": {"warning": {"offsets": 50}, "critical": {"offsets": 10**8}, "for_s": 0}}
    high = {"lag": {"warning": {"offsets": 5000}, "critical": {"offsets": 10**8}, "for_s": 0}}
    writer = LakeWriter(LakeConfig(enabled=True, path=str(tmp_path / "lake")))
    daemon = Pipeline(low, alerts)
    for i in range(60):
        t = T0 + i * 10
        snap = snapshot(t, [group("g", {TP: 0})], {TP: 1000})  # 1,000 behind throughout
        writer.record(snap, daemon.step(snap), daemon.book)
    writer.flush()
    rows = read(tmp_path / "lake", "snapshots").to_pandas().to_dict("records")
    timeline = [
        ClusterParams(90.0, False, low, alerts, recorded_at=T0 - 1),
        ClusterParams(90.0, False, high, alerts, recorded_at=T0 + 300),  # restarted with 5,000
    ]
    replayed = [r for r in replay("c", rows, [Candidate(RECORDED, None, None)], timeline) if r["kind"] == "alert"]
    assert [(r["rule"], r["fired_at"], r["resolved_at"]) for r in replayed] == [("lag", T0, T0 + 300)]
    only_last = [r for r in replay("c", rows, [Candidate(RECORDED, None, None)], timeline[1:]) if r["kind"] == "alert"]
    assert only_last == []  # what the last configuration alone gives


def test_a_replayed_restart_with_new_labels_goes_on_with_the_incident_as_the_daemon_does(tmp_path: Path) -> None:
    """The daemon restarted with `rules.labels` added carries its incidents on under the new labels (the old ones
    end in the same update); the replay resolved the incident and fired a new one after its `for`."""
    from lagwatch.pipeline.backtest import RECORDED, Candidate, ClusterParams, replay

    alerts = {"group_wait_s": 0, "group_interval_s": 0}
    rules = {"lag": {"warning": {"offsets": 50}, "critical": {"offsets": 10**8}, "for_s": 60}}
    labelled = {**rules, "labels": {"team": "payments"}}
    writer = LakeWriter(LakeConfig(enabled=True, path=str(tmp_path / "lake")))
    daemon = Pipeline(rules, alerts)
    for i in range(60):
        snap = snapshot(T0 + i * 10, [group("g", {TP: 0})], {TP: 1000})
        writer.record(snap, daemon.step(snap), daemon.book)
    writer.flush()
    rows = read(tmp_path / "lake", "snapshots").to_pandas().to_dict("records")
    timeline = [
        ClusterParams(90.0, False, rules, alerts, recorded_at=T0 - 1),
        ClusterParams(90.0, False, labelled, alerts, recorded_at=T0 + 300),
    ]
    out = replay("c", rows, [Candidate(RECORDED, None, None)], timeline)
    notes = [(r["fired_at"] - T0, r["notification_kind"]) for r in out if r["kind"] == "notification"]
    assert notes == [(60, "firing"), (300, "update")], notes  # not resolved at 300, then firing again at 360
    fired = sorted((r["labels_json"], r["fired_at"] - T0) for r in out if r["kind"] == "alert")
    assert fired == [('{"cluster": "c", "group": "g", "team": "payments", "topic": "orders"}', 60), (
        '{"cluster": "c", "group": "g", "topic": "orders"}', 60)]  # fmt: skip


def test_a_new_lake_is_delta_tables_that_read_back_equal(tmp_path: Path) -> None:
    """Delta Lake, appended by delta-rs: one table per dataset, partitioned by cluster and date, every poll back
    equal; a restarted daemon (another writer) appends to the same tables; retention deletes whole dates."""
    from deltalake import DeltaTable

    from lagwatch.lake.writer import prune_delta

    polls = [rich_snapshot(T0), ClusterSnapshot("c", T0 + 1, 5.0, error="timed out", error_kind="timeout")]
    p = Pipeline()
    lake = writer(tmp_path)
    lake.record_config("c", {"lag": {}}, {"group_wait_s": 0}, 90.0, False, 30.0, p.book)
    for s in polls:
        lake.record(s, p.step(s), p.book)
    assert lake.flush() and lake.format == "delta"
    restarted = writer(tmp_path)
    later = rich_snapshot(T0 + 86400)  # the next day
    restarted.record(later, p.step(later), p.book)
    assert restarted.flush() and restarted.format == "delta"
    table = DeltaTable(str(tmp_path / "lake" / "snapshots"))
    assert table.metadata().partition_columns == ["cluster", "date"] and table.version() == 1
    rows = pa.table(table.to_pyarrow_dataset().to_table()).to_pandas().to_dict("records")
    assert codec.snapshots_from_rows("c", rows) == [*polls, later]
    assert table.history(1)[0]["lagwatch.schema_version"] == str(codec.SCHEMA_VERSION)
    assert DeltaTable(str(tmp_path / "lake" / "config")).to_pyarrow_dataset().count_rows() == 1
    assert prune_delta(str(tmp_path / "lake"), str(tmp_path / "lake"), None, 1, T0 + 86400 * 2) > 0
    dates = set(
        DeltaTable(str(tmp_path / "lake" / "snapshots")).to_pyarrow_dataset().to_table().column("date").to_pylist()
    )
    assert dates == {codec.date_of(T0 + 86400)}


def test_a_parquet_lake_written_before_delta_is_kept_and_read_as_it_is(tmp_path: Path) -> None:
    p = Pipeline()
    old = writer(tmp_path, format="parquet")
    s = rich_snapshot(T0)
    old.record(s, p.step(s), p.book)
    assert old.flush()
    upgraded = writer(tmp_path)  # lake.format auto, as after an upgrade
    s2 = rich_snapshot(T0 + 1)
    upgraded.record(s2, p.step(s2), p.book)
    assert upgraded.flush() and upgraded.format == "parquet"
    assert not (tmp_path / "lake" / "snapshots" / "_delta_log").exists()
    rows = read(tmp_path / "lake", "snapshots").to_pandas().to_dict("records")
    assert codec.snapshots_from_rows("c", rows) == [s, s2]


def test_compacting_a_delta_lake_while_the_daemon_appends_loses_and_doubles_no_row(tmp_path: Path) -> None:
    """`compact` (OPTIMIZE, VACUUM) runs as a CronJob beside the daemon: its commits and the daemon's appends race
    through the Delta log. Every poll appended while compactions ran comes back once."""
    import threading

    from deltalake import DeltaTable

    from lagwatch.pipeline.compact import compact_lake

    p = Pipeline()
    lake = writer(tmp_path)
    lake.record_config("c", {"lag": {}}, {"group_wait_s": 0}, 90.0, False, 30.0, p.book)
    polls = [rich_snapshot(T0 + 30 * i) for i in range(60)]
    done = threading.Event()
    compactions: list[int] = []
    errors: list[BaseException] = []

    def compact_all_the_while() -> None:
        try:
            while not done.is_set():
                summary = compact_lake(str(tmp_path / "lake"), "all", 0, say=lambda _: None, clock=lambda: T0 + 86400)
                compactions.append(summary.files_before)
        except BaseException as e:  # a failed compaction is a failed test, not a silent thread
            errors.append(e)

    compactor = threading.Thread(target=compact_all_the_while)
    for i, s in enumerate(polls):
        lake.record(s, p.step(s), p.book)
        assert lake.flush()  # a commit per poll: many small files for the compactions to merge
        if i == 5:
            compactor.start()
    done.set()
    compactor.join()
    assert not errors, errors
    assert len(compactions) >= 2 and any(compactions), compactions  # they ran, and merged files
    table = DeltaTable(str(tmp_path / "lake" / "snapshots"))
    rows = pa.table(table.to_pyarrow_dataset().to_table()).to_pandas().to_dict("records")
    assert codec.snapshots_from_rows("c", rows) == polls
