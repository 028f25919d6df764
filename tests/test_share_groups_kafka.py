"""Share groups (KIP-932, Kafka 4.1+) on the real broker, with Kafka's own console share consumer and a small share
consumer (tests/clients/QueueWorker.java). lagwatch skipped them: `check` listed only the classic group beside a
share group that `kafka-share-groups` showed, and a work queue moved to a share group lost its alerts. They are
read with ShareGroupDescribe and DescribeShareGroupOffsets (one of each per coordinator, whatever their number, the
second on a connection of its own and in up to 4 parts past 200 groups),
shown as Kafka's tool shows them, and judged as queues: `stopped` when nobody consumes, `stalled` when members hold
records and deliver none."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from lagwatch.collect import ClusterPoller
from lagwatch.collect import wire as wire_module
from lagwatch.config import ClusterConfig, NameFilter, load_settings
from lagwatch.daemon import Daemon
from lagwatch.devbroker import run_kafka_tool
from lagwatch.model import ClusterSnapshot, GroupKind
from lagwatch.serve import views
from tests import kafka_scenario
from tests.conftest import KAFKA_VERSION, run_lagwatch, unique, wait_for
from tests.live import Background, Recorder, poll_until_paged, window_rules

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.skipif(
        tuple(int(x) for x in KAFKA_VERSION.split(".")[:2]) < (4, 1), reason="share groups need Kafka 4.1+"
    ),
]

LAG_REPORTED = tuple(int(x) for x in KAFKA_VERSION.split(".")[:2]) >= (4, 2)  # KIP-1226
EARLIEST = {"share.auto.offset.reset": "earliest"}


@pytest.fixture(scope="module")
def shares(bootstrap: str, kafka_libs: Path) -> str:
    kafka_scenario.enable_share_groups(kafka_libs, bootstrap, KAFKA_VERSION)
    return bootstrap


def _worker(
    libs: Path, bootstrap: str, group: str, topic: str, sleep_ms: int, hang_after: int = 0
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        kafka_scenario.queue_worker(libs, bootstrap, group, topic, sleep_ms, hang_after),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _wait_line(process: subprocess.Popen[str], word: str, timeout: float = 60) -> None:
    """Reads the worker's output until a line starting with `word` (on a thread: readline blocks)."""
    seen = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(word):
                seen.set()
                break

    threading.Thread(target=read, daemon=True).start()
    assert seen.wait(timeout), f"the share consumer never said {word!r}"


def _kafka_share_groups(libs: Path, bootstrap: str, group: str) -> dict[tuple[str, str, int], tuple[str, ...]]:
    """`kafka-share-groups --describe --offsets`: GROUP TOPIC PARTITION START-OFFSET LAG (no LAG before 4.2)."""
    out = run_kafka_tool(
        libs,
        "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
        *("--bootstrap-server", bootstrap, "--describe", "--offsets", "--group", group),
    )
    rows = [line.split() for line in out.splitlines() if line.startswith(group + " ")]
    return {(g, topic, int(partition)): tuple(rest) for g, topic, partition, *rest in rows}


def test_share_groups_are_read_with_kafkas_own_figures(
    shares: str, kafka_libs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrap = shares
    prefix = unique("share")
    topic = f"{prefix}-t"
    done, fresh, held, classic = (f"{prefix}-{name}" for name in ("done", "fresh", "held", "classic"))
    kafka_scenario.create_topic(bootstrap, topic, 3)
    kafka_scenario.produce(bootstrap, topic, {0: 400, 1: 350, 2: 250})
    for group in (done, held):
        kafka_scenario.group_config(bootstrap, group, EARLIEST)
    # Reads 700 records and leaves; `fresh` starts at the log end (the default) and never gets a record.
    kafka_scenario.console_share_consumer(kafka_libs, bootstrap, topic, done, "--max-messages", "700")
    kafka_scenario.console_share_consumer(kafka_libs, bootstrap, topic, fresh, "--timeout-ms", "3000")
    worker = _worker(kafka_libs, bootstrap, held, topic, sleep_ms=0, hang_after=25)  # holds what it took
    consumer = kafka_scenario.assigned_consumer(bootstrap, classic, [kafka_scenario.TopicPartition(topic, 0)])
    kafka_scenario.commit(consumer, {kafka_scenario.TopicPartition(topic, 0): 5})
    consumer.close()
    try:
        _wait_line(worker, "hung")
        kafka_scenario.produce(bootstrap, topic, {0: 30})
        config = ClusterConfig(bootstrap_servers=[bootstrap], groups=NameFilter(include=[f"{prefix}-.*"]))
        poller = ClusterPoller("share", config)
        try:
            snapshot: ClusterSnapshot = wait_for(
                lambda: (s := poller.poll()).ok and len(s.groups) == 4 and s, timeout=30, what="every group"
            )
            # The share offsets go on a second connection to the coordinator, in parts past a size: the same
            # answer in three parts as in one, from a connection closed with the poller's.
            monkeypatch.setattr(wire_module, "SHARE_OFFSETS_PART_MIN", 1)
            in_parts = poller.poll()
            side = dict(poller._admin._manager.lagwatch_side_connections)
        finally:
            poller.close()
        assert in_parts.requests["DescribeShareGroupOffsets"] == 3 and in_parts.requests["ShareGroupDescribe"] == 1
        assert len(side) == 1 and all(conn.closed for conn in side.values())
        for group_id in (done, fresh):
            (before,) = (g.share_offsets for g in snapshot.groups if g.group_id == group_id)
            (after,) = (g.share_offsets for g in in_parts.groups if g.group_id == group_id)
            assert after == before, group_id
        assert next(g for g in in_parts.groups if g.group_id == done).share_offsets
        kinds = {g.group_id: g.kind for g in snapshot.groups}
        assert kinds == {
            done: GroupKind.SHARE,
            fresh: GroupKind.SHARE,
            held: GroupKind.SHARE,
            classic: GroupKind.SIMPLE,
        }
        assert all(g.error is None for g in snapshot.groups)
        # One request of each per coordinator for the three share groups, which stay out of OffsetFetch.
        assert snapshot.requests["ShareGroupDescribe"] == 1 and snapshot.requests["DescribeShareGroupOffsets"] == 1
        assert snapshot.requests["OffsetFetch"] == 1
        (member,) = next(g for g in snapshot.groups if g.group_id == held).members
        assert sorted(member.assignment) == [(topic, 0), (topic, 1), (topic, 2)]
        assert member.client_id == f"queue-worker-{held}"
        if LAG_REPORTED:
            assert snapshot.blind_spots == {}
        else:
            assert set(snapshot.blind_spots) == {"share_lag"}

        # `check --output json` row by row against Kafka's own tool, for each share group.
        checked = run_lagwatch("check", "--bootstrap-server", bootstrap, "--group", f"{prefix}-.*", "--output", "json")
        assert checked.returncode == 0, checked.stderr
        ours: dict[tuple[str, str, int], tuple[str, ...]] = {}
        for row in json.loads(checked.stdout):
            if row["group_kind"] != "share":
                continue
            start = "-" if row["start_offset"] is None else str(row["start_offset"])
            if LAG_REPORTED:
                assert row["lag_source"] in ("broker", None)
                ours[(row["group"], row["topic"], row["partition"])] = (
                    start,
                    "-" if row["lag"] is None else str(row["lag"]),
                )
            else:  # Kafka 4.1's tool prints no LAG; lagwatch's is an upper bound, and says so
                assert row["lag_source"] in ("estimated", None)
                ours[(row["group"], row["topic"], row["partition"])] = (start,)
        theirs: dict[tuple[str, str, int], tuple[str, ...]] = {}
        for group in (done, fresh, held):
            theirs.update(_kafka_share_groups(kafka_libs, bootstrap, group))
        assert ours == theirs
        assert {key[0] for key in ours} >= {done, held}
        if LAG_REPORTED:
            # The 700 delivered and left: what waits is what the broker says where it says it, and the whole log of
            # a partition the console consumer never fetched from (no start offset, no lag: "-"), not log end -
            # start offset.
            rows = [r for r in json.loads(checked.stdout) if r["group"] == done]
            waiting = sum(r["lag"] if r["start_offset"] is not None else r["log_end_offset"] for r in rows)
            assert waiting == 1030 - 700, rows
        # Brokers that list share groups but lack their APIs (Kafka 4.0's early access): counted and said, no error.
        from lagwatch.collect import wire
        from lagwatch.collect.kip848 import ShareGroupDescribeRequest

        supports = wire.Wire.supports
        with monkeypatch.context() as patched:
            patched.setattr(
                wire.Wire,
                "supports",
                lambda self, cls, v=0: cls is not ShareGroupDescribeRequest and supports(self, cls, v),
            )
            early = ClusterPoller("early", config)
            try:
                older = early.poll()
            finally:
                early.close()
        assert older.ok and older.unwatched_groups == {"share": 3} and set(older.blind_spots) == {"share_groups"}
        assert [(g.group_id, g.error) for g in older.groups] == [(classic, None)]
        assert "ShareGroupDescribe" not in older.requests

        table = run_lagwatch("check", "--bootstrap-server", bootstrap, "--group", f"{prefix}-.*")
        assert table.returncode == 0, table.stderr
        assert "share groups:" in table.stdout and "START-OFFSET" in table.stdout
        assert ("(estimated)" in table.stdout) is not LAG_REPORTED
    finally:
        worker.kill()
        worker.wait(10)

    if not LAG_REPORTED:  # said once: in the log, /api/v1/clusters and a metric
        settings = load_settings(state_dir=tmp_path / "state", http={"enabled": False})
        daemon = Daemon(settings, clusters={"share": config}, notifiers={})
        records: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = records.append  # type: ignore[method-assign]
        logging.getLogger("lagwatch").addHandler(handler)
        try:
            for _ in range(3):
                daemon.poll_cluster("share")
            said = [r.getMessage() for r in records if "share groups' lag" in r.getMessage()]
            assert len(said) == 1
            assert "share_lag" in views.cluster_view(daemon.clusters["share"])["blind_spots"]
            daemon.render_metrics()
            body = daemon.metrics_body()
            assert b'lagwatch_blind_spot{cluster="share",what="share_lag"} 1' in body
            # No lag is known: none is said (a 0 was, for queues with a thousand records waiting).
            assert f'lagwatch_group_lag{{cluster="share",group="{done}"}}'.encode() not in body
            assert f'lagwatch_group_members{{cluster="share",group="{done}"}}'.encode() in body
            summary = next(g for g in views.group_summaries(daemon.clusters["share"]) or [] if g["group"] == done)
            assert summary["lag"] is None and summary["kind"] == "share"
        finally:
            logging.getLogger("lagwatch").removeHandler(handler)
            daemon.stop()


@pytest.mark.skipif(not LAG_REPORTED, reason="share-group lag is reported from Kafka 4.2 (KIP-1226)")
def test_a_dead_and_a_hung_queue_consumer_page_and_healthy_ones_do_not(
    shares: str, kafka_libs: Path, tmp_path: Path
) -> None:
    bootstrap = shares
    prefix = unique("queue")
    names = ("healthy", "idle", "hung", "dead")
    topics = {name: f"{prefix}-{name}-t" for name in names}
    groups = {name: f"{prefix}-{name}" for name in names}
    for name in names:
        kafka_scenario.create_topic(bootstrap, topics[name], 1)
        kafka_scenario.group_config(bootstrap, groups[name], {**EARLIEST, "share.record.lock.duration.ms": "5000"})
    kafka_scenario.produce(bootstrap, topics["idle"], {0: 20})
    kafka_scenario.produce(bootstrap, topics["hung"], {0: 200})
    kafka_scenario.produce(bootstrap, topics["dead"], {0: 2000})
    workers = {
        "healthy": _worker(kafka_libs, bootstrap, groups["healthy"], topics["healthy"], sleep_ms=0),
        "idle": _worker(kafka_libs, bootstrap, groups["idle"], topics["idle"], sleep_ms=0),
        "hung": _worker(kafka_libs, bootstrap, groups["hung"], topics["hung"], sleep_ms=0, hang_after=15),
        "dead": _worker(kafka_libs, bootstrap, groups["dead"], topics["dead"], sleep_ms=20),
    }
    traffic = Background()
    traffic.produce(bootstrap, topics["healthy"], 20)  # the healthy queue gets 20 records a second
    record = Recorder()
    settings = load_settings(
        state_dir=tmp_path / "state",
        http={"enabled": False},
        rules=window_rules(10),
        alerts={"group_wait_s": 0, "group_interval_s": 0},
    )
    config = ClusterConfig(bootstrap_servers=[bootstrap], groups=NameFilter(include=[f"{prefix}-.*"]))
    daemon = Daemon(settings, clusters={"queues": config}, notifiers={"record": record})
    daemon.dispatcher.start()
    try:
        _wait_line(workers["hung"], "hung")
        _wait_line(workers["dead"], "took")
        workers["dead"].send_signal(signal.SIGKILL)  # its member stays until its session times out (6 s here)
        workers["dead"].wait(10)
        # The hung consumer's records stay unknown (start offset and lag "-": Kafka persists nothing) until their
        # acquisition lock runs out (share.record.lock.duration.ms: 30 s by default, 5 s here); then the window.
        hung_and_dead = {n: groups[n] for n in ("hung", "dead")}
        paged_after = poll_until_paged(daemon, "queues", record, hung_and_dead, timeout=90)
        snapshot = daemon.clusters["queues"].latest
        assert snapshot is not None
        kinds = {g.group_id: (g.kind, len(g.members)) for g in snapshot.groups}
    finally:
        traffic.stop()
        daemon.stop()
        for worker in workers.values():
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)
    assert kinds[groups["healthy"]] == (GroupKind.SHARE, 1) and kinds[groups["dead"]] == (GroupKind.SHARE, 0)
    assert record.kinds(groups["hung"]) == [("firing", ("stalled",))]
    assert record.kinds(groups["dead"]) == [("firing", ("stopped",))]
    assert record.kinds(groups["healthy"]) == [] and record.kinds(groups["idle"]) == []
    # The dead one: the session's 6 s, the 10-s window, and a poll or two (polls take 1-3 s on two loaded cores).
    assert paged_after["dead"] < 6 + 10 + 8, paged_after
    assert paged_after["hung"] < 5 + 10 + 8, paged_after
