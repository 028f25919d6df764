"""The false-page scenarios of test_false_pages.py, on a real broker with real clients and the real daemon: ordinary
situations must raise no notification at all, while the real problems are still caught in time.

Polls every second (every 3 s where the test needs a gap between polls), windows of a few seconds.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import CommitFailedError, RebalanceInProgressError
from kafka.structs import OffsetAndMetadata

from lagwatch.config import ClusterConfig, NameFilter, load_settings
from lagwatch.daemon import Daemon
from lagwatch.devbroker.jars import java_command
from lagwatch.runtime import ClusterRuntime
from tests import kafka_scenario
from tests.conftest import KAFKA_VERSION, unique, wait_for
from tests.live import Recorder, commit

pytestmark = pytest.mark.kafka

LOOPBACK = {"host": "127.0.0.1", "port": 0}
NEVER = {"offsets": 10**9}
WINDOWS: dict[str, Any] = {
    "stalled": {"window_s": 5},
    "stopped": {"window_s": 4},
    "falling_behind": {"window_s": 6},
    "rewind": {"window_s": 60},
    "rate_window_s": 6,
}
# Strict: a single record of lag pages at once. Caught-up groups must still say nothing.
STRICT = WINDOWS | {"lag": {"warning": {"offsets": 1}, "critical": NEVER, "for_s": 0}}


def watch(
    bootstrap: str,
    prefix: str,
    state_dir: Path,
    recorder: Recorder,
    rules: dict[str, Any],
    poll_interval_s: float = 1,
    also: tuple[str, ...] = (),
) -> Daemon:
    settings = load_settings(
        rules=rules, alerts={"group_wait_s": 0, "group_interval_s": 1}, state_dir=state_dir, http=LOOPBACK
    )
    cluster = ClusterConfig(
        bootstrap_servers=[bootstrap],
        poll_interval_s=poll_interval_s,
        request_timeout_s=5,
        groups=NameFilter(include=[f"{prefix}-.*", *also]),
    )
    return Daemon(settings, clusters={"test": cluster}, notifiers={"record": recorder})


class Polls:
    """What the daemon saw at each poll: (poll time, ok, {group: (state, members, summed lag)})."""

    def __init__(self, daemon: Daemon) -> None:
        self.seen: list[tuple[float, bool, dict[str, tuple[str, int, int]]]] = []
        self.lock = threading.Lock()
        daemon.on_poll.append(self.record)

    def record(self, runtime: ClusterRuntime) -> None:
        snapshot, evaluation = runtime.latest, runtime.evaluation
        assert snapshot is not None and evaluation is not None
        groups = {
            g.group_id: (g.state, len(g.members), evaluation.measures[g.group_id].lag.sum_lag)
            for g in snapshot.groups
            if g.group_id in evaluation.measures
        }
        with self.lock:
            self.seen.append((time.time(), snapshot.ok, groups))

    def count(self) -> int:
        with self.lock:
            return len(self.seen)

    def of(self, group: str) -> list[tuple[float, str, int, int]]:
        with self.lock:
            return [(t, *groups[group]) for t, _, groups in self.seen if group in groups]

    def last(self, group: str) -> tuple[float, str, int, int] | None:
        seen = self.of(group)
        return seen[-1] if seen else None


def said(recorder: Recorder, t0: float) -> str:
    """Everything lagwatch notified, for assertion messages."""
    with recorder.lock:
        sent = list(recorder.sent)
    lines = [
        f"+{n.created_at - t0:.1f}s {n.kind} group={n.group_labels.get('group')!r} {a.rule}/{a.state}/"
        f"{a.severity}: {a.summary} details={a.details}"
        for n in sent
        for a in n.alerts
    ]
    return "\n".join(lines) or "(nothing)"


def notified_rules(recorder: Recorder, group: str) -> set[str]:
    return {r for kind, rules in recorder.kinds(group) if kind != "resolved" for r in rules}


def cluster_notes(recorder: Recorder) -> list[str]:
    with recorder.lock:
        return [n.kind for n in recorder.sent if n.group_labels.get("group") == ""]


def drain(consumer: KafkaConsumer, timeout: float = 30) -> int:
    """Consumes every record up to the current log end of the consumer's assignment, then commits."""
    tps = consumer.assignment()
    ends = consumer.end_offsets(list(tps))
    n = 0
    deadline = time.monotonic() + timeout
    while any(consumer.position(tp) < ends[tp] for tp in tps):
        assert time.monotonic() < deadline, "could not consume to the log end"
        n += sum(len(batch) for batch in consumer.poll(200).values())
    consumer.commit()
    return n


class Member:
    """A real member of a classic group, on its own thread: polls, spends `processing_s` on each batch, commits
    after each batch. Reconnects with the Java client's backoff (1 s), as kafka-python's 30 s default would keep a
    healthy client away from a recovered broker for half a minute."""

    def __init__(self, bootstrap: str, group: str, topic: str, processing_s: float = 0.0) -> None:
        self.processing_s = processing_s
        self.consumed = 0
        self.commits = 0
        self.errors: list[str] = []
        self.stop_event = threading.Event()
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            metadata_max_age_ms=1000,  # see kafka_scenario.subscribed_consumer
            reconnect_backoff_max_ms=1000,
        )
        # Joining before the client has the topic's metadata can leave the member with no partitions for a while.
        wait_for(lambda: self.consumer.partitions_for_topic(topic), timeout=30, what=f"metadata of {topic}")
        self.consumer.subscribe([topic])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.consumer.assignment(), timeout=30, what=f"{group} assignment")

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                n = sum(len(batch) for batch in self.consumer.poll(200).values())
                if n:
                    time.sleep(self.processing_s)
                    self.consumer.commit()
                    self.consumed += n
                    self.commits += 1
            except Exception as e:  # the broker is down: keep going, as a real service does
                self.errors.append(repr(e))
                time.sleep(0.2)
        self.consumer.close()  # leaves the group

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(20)
        assert not self.thread.is_alive()


class Producer:
    """A steady producer on its own thread, `per_second` records to partition 0."""

    def __init__(self, bootstrap: str, topic: str, per_second: int) -> None:
        self.sent = 0
        self.errors: list[str] = []
        self.stop_event = threading.Event()
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, reconnect_backoff_max_ms=1000)
        self.thread = threading.Thread(target=self._run, args=(topic, per_second), daemon=True)
        self.thread.start()

    def _run(self, topic: str, per_second: int) -> None:
        while not self.stop_event.wait(1.0 / per_second):
            try:
                self.producer.send(topic, b"x", partition=0)
                self.sent += 1
            except Exception as e:
                self.errors.append(repr(e))
        self.producer.close(timeout=5)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(20)


def log_end(bootstrap: str, topic: str) -> int:
    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tp = KafkaTopicPartition(topic, 0)
        return int(c.end_offsets([tp])[tp])
    finally:
        c.close()


# -- ordinary situations: nothing ------------------------------------------------------------------------------------


def test_first_start_among_empty_caught_up_groups_is_silent(bootstrap: str, tmp_path: Path) -> None:
    prefix = unique("first")
    topic = f"{prefix}-t"
    kafka_scenario.create_topic(bootstrap, topic, 2)
    kafka_scenario.produce(bootstrap, topic, {0: 20, 1: 15})
    batches = [f"{prefix}-batch-{i}" for i in range(5)]
    for group in batches:  # batch jobs that consumed everything, committed and left: Empty classic groups
        c = kafka_scenario.subscribed_consumer(bootstrap, group, [topic])
        drain(c)
        c.close()
    simple = f"{prefix}-simple"  # assign() + commit: a simple group
    c = kafka_scenario.assigned_consumer(bootstrap, simple, [KafkaTopicPartition(topic, p) for p in (0, 1)])
    kafka_scenario.commit(c, {KafkaTopicPartition(topic, 0): 20, KafkaTopicPartition(topic, 1): 15})
    c.close()

    recorder = Recorder()
    t0 = time.time()
    daemon = watch(bootstrap, prefix, tmp_path / "state", recorder, STRICT)  # expiry on, Kafka's retention
    polls = Polls(daemon)
    daemon.start()
    try:
        wait_for(lambda: daemon.clusters["test"].exact_clocks()["state"] == "live", timeout=15, what="exact clocks")
        time.sleep(10)
    finally:
        daemon.stop()
    assert recorder.sent == [], said(recorder, t0)
    assert polls.count() >= 8 and all(ok for _, ok, _ in polls.seen)
    for group in [*batches, simple]:  # lagwatch did look at every one of them, all the time
        seen = polls.of(group)
        assert len(seen) == polls.count(), group
        assert {(state, members, lag) for _, state, members, lag in seen} == {("Empty", 0, 0)}, (group, seen[-1])


def test_short_job_between_two_polls_is_silent(bootstrap: str, tmp_path: Path) -> None:
    prefix = unique("short")
    topic, group = f"{prefix}-t", f"{prefix}-nightly"
    kafka_scenario.create_topic(bootstrap, topic, 1)
    kafka_scenario.produce(bootstrap, topic, {0: 40})
    recorder = Recorder()
    t0 = time.time()
    daemon = watch(bootstrap, prefix, tmp_path / "state", recorder, STRICT, poll_interval_s=3)
    polls = Polls(daemon)
    daemon.start()
    try:
        wait_for(lambda: polls.count() >= 1, timeout=15, what="a first poll")
        n = polls.count()
        wait_for(lambda: polls.count() > n, timeout=10, interval=0.05, what="a poll to just have ended")
        started = time.time()
        c = kafka_scenario.subscribed_consumer(bootstrap, group, [topic])
        consumed = drain(c)
        c.close()
        finished = time.time()
        time.sleep(10)
    finally:
        daemon.stop()
    assert consumed > 0
    assert recorder.sent == [], said(recorder, t0)
    seen = polls.of(group)
    during = [s for s in seen if started <= s[0] <= finished]
    assert seen and seen[-1][1:] == ("Empty", 0, 0), seen
    assert len(seen) >= 3, f"job took {finished - started:.1f}s; polls seeing the group: {seen}"
    assert len(during) <= 1, f"the job took {finished - started:.1f}s, too long to fall between polls: {during}"


def test_broker_outage_raises_only_the_cluster_alert(tmp_path: Path) -> None:
    """A 45 s outage while a producer and a healthy consumer run: one cluster alert, fired then resolved, and
    nothing at all about the group, neither during the outage nor while the backlog drains after it."""
    from lagwatch.devbroker import LocalBroker

    with LocalBroker(kafka_version=KAFKA_VERSION) as broker:
        prefix = unique("outage")
        topic, group = f"{prefix}-t", f"{prefix}-app"
        kafka_scenario.create_topic(broker.bootstrap, topic, 1)
        producer = Producer(broker.bootstrap, topic, 20)
        member = Member(broker.bootstrap, group, topic)
        recorder = Recorder()
        rules = WINDOWS | {
            "lag": {"warning": {"offsets": 500}, "critical": NEVER, "for_s": 10},
            "cluster_unreachable": {"for_s": 5},
        }
        t0 = time.time()
        daemon = watch(broker.bootstrap, prefix, tmp_path / "state", recorder, rules)
        polls = Polls(daemon)
        daemon.start()
        try:
            wait_for(lambda: member.commits >= 5 and len(polls.of(group)) >= 8, timeout=30, what="steady traffic")
            assert recorder.sent == [], said(recorder, t0)
            broker.pause()
            paused_at = time.time()
            wait_for(lambda: cluster_notes(recorder) == ["firing"], timeout=30, what="the cluster alert")
            time.sleep(max(0.0, paused_at + 45 - time.time()))
            consumed_before = member.consumed
            broker.start()
            wait_for(lambda: "resolved" in cluster_notes(recorder), timeout=60, what="the cluster alert to resolve")
            recovered_at = time.time()
            wait_for(lambda: member.consumed > consumed_before, timeout=30, what="the consumer to resume")
            time.sleep(20)
            end = log_end(broker.bootstrap, topic)
        finally:
            daemon.stop()
            producer.stop()
            member.stop()
        report = (
            said(recorder, t0)
            + f"\npaused at +{paused_at - t0:.1f}s, recovered at +{recovered_at - t0:.1f}s; what polls saw of the "
            f"group after the outage: {[(round(t - t0, 1), *rest) for t, *rest in polls.of(group) if t > paused_at]}"
        )
        assert cluster_notes(recorder) == ["firing", "resolved"], report
        assert recorder.kinds(group) == [], report
        assert recorder.sent[0].firing[0].rule == "cluster_unreachable", report
        # The scenario really happened: records produced through the outage, then drained by the consumer.
        last = polls.last(group)
        assert last is not None and last[1] == "Stable" and last[3] < 100, report
        assert end > 45 * 20 * 0.8 + 20 * 8, (end, producer.errors[:3])


def test_sparse_bursts_are_not_a_stall(bootstrap: str, tmp_path: Path) -> None:
    """Quiet for longer than the stalled window, then a burst that the consumer (busy a second on each batch)
    drains in a poll or two; three times."""
    prefix = unique("bursts")
    topic, group = f"{prefix}-t", f"{prefix}-app"
    kafka_scenario.create_topic(bootstrap, topic, 1)
    kafka_scenario.produce(bootstrap, topic, {0: 10})
    member = Member(bootstrap, group, topic, processing_s=1.0)
    recorder = Recorder()
    rules = WINDOWS | {"lag": {"warning": {"offsets": 100}, "critical": NEVER, "for_s": 5}}
    t0 = time.time()
    daemon = watch(bootstrap, prefix, tmp_path / "state", recorder, rules)
    polls = Polls(daemon)
    try:
        wait_for(lambda: member.consumed == 10, timeout=30, what="the member to catch up")
        daemon.start()
        drained_in = []
        for burst in range(1, 4):
            time.sleep(7)  # quiet, longer than the stalled window
            produced_at = time.time()
            kafka_scenario.produce(bootstrap, topic, {0: 300})
            wait_for(lambda b=burst: member.consumed == 10 + 300 * b, timeout=10, interval=0.05, what="the drain")
            drained_in.append(round(time.time() - produced_at, 1))
        time.sleep(7)
    finally:
        daemon.stop()
        member.stop()
    assert recorder.sent == [], said(recorder, t0) + f"\nbursts drained in {drained_in}s"
    # lagwatch did see the bursts waiting, and a member there, at some polls
    waiting = [(round(t - t0, 1), state, members, lag) for t, state, members, lag in polls.of(group) if lag >= 100]
    assert waiting and all(members == 1 for _, _, members, _ in waiting), polls.of(group)
    assert polls.last(group) is not None and polls.last(group)[3] == 0  # type: ignore[index]


# -- the real problems beside them: still caught ---------------------------------------------------------------------


def test_stopped_consumer_is_one_incident_stopped_and_lag(bootstrap: str, tmp_path: Path) -> None:
    prefix = unique("stop")
    topic, group = f"{prefix}-t", f"{prefix}-app"
    kafka_scenario.create_topic(bootstrap, topic, 1)
    producer = Producer(bootstrap, topic, 20)
    member = Member(bootstrap, group, topic)
    recorder = Recorder()
    rules = WINDOWS | {"lag": {"warning": {"offsets": 50}, "critical": NEVER, "for_s": 2}}
    t0 = time.time()
    daemon = watch(bootstrap, prefix, tmp_path / "state", recorder, rules)
    polls = Polls(daemon)
    daemon.start()
    try:
        wait_for(lambda: member.commits >= 5 and len(polls.of(group)) >= 5, timeout=30, what="a healthy consumer")
        assert recorder.sent == [], said(recorder, t0)
        member.stop()  # leaves the group with a little lag; production goes on
        left_at = time.time()
        wait_for(lambda: notified_rules(recorder, group) == {"stopped", "lag"}, timeout=20, what="stopped and lag")
        time.sleep(10)  # long enough for falling_behind (6 s) and stalled (5 s) to have had their say
    finally:
        daemon.stop()
        producer.stop()
        member.stop()
    report = said(recorder, t0) + f"\nleft at +{left_at - t0:.1f}s"
    assert notified_rules(recorder, group) == {"stopped", "lag"}, report
    firsts = [kind for kind, _ in recorder.kinds(group) if kind == "firing"]
    assert firsts == ["firing"], report  # one incident
    stopped_at = next(n.created_at for n in recorder.sent if any(a.rule == "stopped" for a in n.firing))
    # From the first poll that saw the group Empty: the broker takes its LeaveGroup a moment after the client
    # returns, more under load (measured from the client's return, 1 run in 3 took 6.8 s, the old code's too).
    empty_at = min(t for t, state, _, _ in polls.of(group) if state == "Empty")
    assert empty_at - left_at <= 3, report
    # The window, plus at most two polls, counted from the consumer's last commit: it commits as it closes, and
    # that commit can land at the first poll that saw the group Empty (`stopped` wants records waiting at an
    # unchanged commit for the whole window): a third poll.
    assert stopped_at - empty_at <= 4 + 3 * 1, report


def test_recommitting_simple_group_unwarned_while_a_left_group_is_warned_before_deletion(tmp_path: Path) -> None:
    """offsets.retention.minutes=1. A simple (assign) group commits the same offset every 5 s on a quiet topic: its
    offsets never expire, and only the commit records in __consumer_offsets show it. A classic group that left is
    warned, from its exact Empty time, before the broker deletes its offsets."""
    from lagwatch.devbroker import LocalBroker

    settings = {"offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "2000"}
    with LocalBroker(kafka_version=KAFKA_VERSION, settings=settings) as broker:
        b = broker.bootstrap
        prefix = unique("clocks")
        topic, simple, classic = f"{prefix}-t", f"{prefix}-simple", f"{prefix}-classic"
        kafka_scenario.create_topic(b, topic, 1)
        kafka_scenario.produce(b, topic, {0: 10})
        assigned = kafka_scenario.assigned_consumer(b, simple, [KafkaTopicPartition(topic, 0)])
        commit(assigned, topic, 10)
        recommits = [time.time()]
        stop = threading.Event()

        def recommit() -> None:
            while not stop.wait(5):
                commit(assigned, topic, 10)  # the same offset again
                recommits.append(time.time())

        member = kafka_scenario.subscribed_consumer(b, classic, [topic])
        drain(member)
        thread = threading.Thread(target=recommit, daemon=True)
        thread.start()
        recorder = Recorder()
        rules = WINDOWS | {"lag": {"enabled": False}}
        t0 = time.time()
        daemon = watch(b, prefix, tmp_path / "state", recorder, rules)
        polls = Polls(daemon)
        daemon.start()
        try:
            wait_for(lambda: daemon.clusters["test"].exact_clocks()["state"] == "live", timeout=20, what="live clocks")
            wait_for(lambda: polls.of(classic) and polls.of(classic)[-1][1] == "Stable", timeout=10, what="Stable")
            member.close()
            left_at = time.time()
            wait_for(
                lambda: any(a.rule == "expiry" and a.group == classic for a in list(daemon.book.alerts.values())),
                timeout=70,
                interval=0.5,
                what="expiry warning of the group that left",
            )
            warned_at = time.time()
            (alert,) = [a for a in list(daemon.book.alerts.values()) if a.rule == "expiry" and a.group == classic]
            severity, details = alert.severity, dict(alert.details)  # as first warned (it goes critical later)
            clocks = daemon.clusters["test"].exact_clocks()
            time.sleep(max(0.0, t0 + 72 - time.time()))
        finally:
            daemon.stop()
            stop.set()
            thread.join(10)
            assigned.close()
        report = said(recorder, t0) + f"\nclassic left at +{left_at - t0:.1f}s, warned at +{warned_at - t0:.1f}s"
        assert clocks["state"] == "live", clocks
        assert details["observed"] is True and severity == "warning", (alert.summary, details)
        assert 44 <= warned_at - left_at < 55, report  # 75% of the minute, and before the broker deletes them
        assert abs(float(details["expires_at"]) - (left_at + 60)) < 3, details
        assert any(r == ("expiry",) for _, r in recorder.kinds(classic)), report
        # The simple group: never warned, and its offsets really are kept by the broker all along.
        assert recorder.kinds(simple) == [], report
        assert not [a for a in daemon.book.alerts.values() if a.group == simple], report
        assert len(recommits) >= 14 and time.time() - t0 >= 70
        seen = polls.of(simple)
        assert len(seen) >= 65 and seen[-1][0] - seen[0][0] >= 65, len(seen)
        assert polls.count() == len(seen)  # its committed offsets were there at every poll


def test_a_member_that_never_commits_is_paged_and_one_that_commits_beside_it_is_not(
    bootstrap: str, kafka_libs: Path, tmp_path: Path
) -> None:
    """Two groups subscribed to a topic receiving records: one commits what it reads, the other reads and never
    commits (stuck before its first commit). The second has no committed offset, so no lag: it paged nothing
    at all. `no_commit` pages it once the window is covered, and resolves when it commits. Kafka's own console
    consumer, given no group, reads the same topic in a group it makes up and never commits in: not paged."""
    prefix = unique("nocommit")
    topic = f"{prefix}-t"
    kafka_scenario.create_topic(bootstrap, topic, 2)
    kafka_scenario.produce(bootstrap, topic, {0: 5, 1: 5})
    stuck = kafka_scenario.subscribed_consumer(bootstrap, f"{prefix}-stuck", [topic])
    healthy = kafka_scenario.subscribed_consumer(bootstrap, f"{prefix}-healthy", [topic])
    tool = "org.apache.kafka.tools.consumer.ConsoleConsumer"
    console = subprocess.Popen(
        java_command(kafka_libs, tool, "--bootstrap-server", bootstrap, "--topic", topic),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    recorder = Recorder()
    rules = WINDOWS | {"no_commit": {"window_s": 4}, "lag": {"warning": {"offsets": 1000}, "for_s": 0}}
    daemon = watch(bootstrap, prefix, tmp_path / "state", recorder, rules, also=("console-consumer-[0-9]+",))
    polls = Polls(daemon)
    try:
        daemon.start()
        deadline = time.time() + 60
        while time.time() < deadline and not recorder.kinds(f"{prefix}-stuck"):
            for p in (0, 1):
                producer.send(topic, b"x", partition=p)
            producer.flush()
            stuck.poll(200)  # reads, and heartbeats: a live member
            healthy.poll(200)
            # The test's consumer mid-rebalance (a busy machine, the console consumer joining): it commits at the
            # next turn, as an application does.
            with contextlib.suppress(RebalanceInProgressError, CommitFailedError):
                healthy.commit()
            time.sleep(0.3)
        assert recorder.kinds(f"{prefix}-stuck") == [("firing", ("no_commit",))]
        (alert,) = recorder.sent[0].alerts
        assert alert.labels["topic"] == topic and sorted(alert.details["partitions"]) == [0, 1]
        stuck.poll(200)
        stuck.commit()
        wait_for(lambda: len(recorder.kinds(f"{prefix}-stuck")) == 2, timeout=20, what="the resolve")
        assert recorder.kinds(f"{prefix}-stuck")[1][0] == "resolved"

        def console_watched_s() -> float:  # while it reads, a member of the group it made up, with no offset
            with polls.lock:
                seen = [
                    t for t, _, groups in polls.seen for g, v in groups.items() if g.startswith("console-") and v[1]
                ]
            return seen[-1] - seen[0] if seen else 0.0

        while console_watched_s() < 12:  # three windows, records arriving all the while
            assert time.time() < deadline + 60, "the console consumer never joined"
            producer.send(topic, b"x", partition=0)
            producer.flush()
            for consumer in (stuck, healthy):  # both consume and commit meanwhile
                consumer.poll(200)
                consumer.commit()
            time.sleep(0.3)
    finally:
        daemon.stop()
        producer.close()
        stuck.close()
        healthy.close()
        console.terminate()
        console.wait(30)
    assert recorder.kinds(f"{prefix}-healthy") == []
    assert [n for n in recorder.sent if n.group_labels.get("group", "").startswith("console-consumer-")] == []


def test_a_new_consumer_that_hangs_after_its_first_commit_is_paged_at_the_window_and_new_sinks_are_not(
    bootstrap: str, tmp_path: Path
) -> None:
    """Three groups made while lagwatch watches, records arriving all the while (a 10-s `stalled` window). One
    reads, commits at once and hangs while heartbeating (a deadlocked processing thread after a deploy): in its
    first hour, with no commit cadence learnt, it was paged at twice the window. It committed within half the
    window of its start: a prompt committer, paged at the window. Two sinks read all the while and commit every
    12 s and every 18 s (1.2 and 1.8 times the window) from their start: quiet."""
    prefix = unique("newhang")
    topic = f"{prefix}-t"
    kafka_scenario.create_topic(bootstrap, topic, 1)
    window = 10.0
    rules = {
        "stalled": {"window_s": window, "for_s": 0},
        "stopped": {"window_s": window},
        "falling_behind": {"enabled": False},
        "lag": {"warning": NEVER, "critical": NEVER},
    }
    recorder = Recorder()
    daemon = watch(bootstrap, prefix, tmp_path / "state", recorder, rules)
    stop = threading.Event()
    committed_at: dict[str, float] = {}
    consumers: list[KafkaConsumer] = []

    def consume(name: str, flush_every: float | None) -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=f"{prefix}-{name}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            max_poll_interval_ms=600_000,  # the hung one keeps heartbeating throughout the test
        )
        consumers.append(consumer)
        consumer.subscribe([topic])
        while not stop.is_set() and not consumer.poll(200):
            pass  # until assigned, and records read
        started = time.monotonic()
        if flush_every is None:
            consumer.commit()
            committed_at[name] = time.time()
            stop.wait()  # hung: its heartbeat thread alone runs
            return
        flushed = started
        while not stop.is_set():
            consumer.poll(200)
            if time.monotonic() - flushed >= flush_every:
                consumer.commit()
                flushed = time.monotonic()

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    threads = [
        threading.Thread(target=consume, args=args, daemon=True)
        for args in (("hung", None), ("sink12", 1.2 * window), ("sink18", 1.8 * window))
    ]
    try:
        daemon.start()
        wait_for(lambda: daemon.runtimes()["test"].latest is not None, timeout=20, what="a first poll")
        time.sleep(2)  # the groups are made under polls that saw them not there yet
        for t in threads:
            t.start()
        deadline = time.time() + 4 * 1.8 * window + 15
        while time.time() < deadline:
            producer.send(topic, b"x")
            time.sleep(0.1)
            if recorder.kinds(f"{prefix}-hung") and time.time() - committed_at["hung"] > 2.5 * 1.8 * window:
                break
    finally:
        stop.set()
        daemon.stop()
        producer.close()
        for t in threads:
            if t.is_alive():
                t.join(10)
        for consumer in consumers:
            consumer.close()
    hung = [n for n in recorder.sent if n.group_labels.get("group") == f"{prefix}-hung"]
    assert [(n.kind, [a.rule for a in n.alerts]) for n in hung][:1] == [("firing", ["stalled"])], hung
    paged_after = hung[0].created_at - committed_at["hung"]
    assert window <= paged_after <= window + 2 + 3, paged_after  # two 1-s polls, and 3 s of a loaded machine
    assert recorder.kinds(f"{prefix}-sink12") == [] and recorder.kinds(f"{prefix}-sink18") == []


def test_a_consumer_committing_its_partitions_in_turn_and_falling_behind_is_paged_within_two_polls(
    bootstrap: str, tmp_path: Path
) -> None:
    """A consumer of three partitions that reads half of what arrives and commits one partition at a time, in
    turn (its first commits a second apart): summed only over the partitions committed at every poll of the window,
    the window waited for the last one's first commit, and a dip of the partial sum restarted it (30-40 s late).
    Paged `falling_behind` within two polls of its window after its first commit; `lag` is out of the way."""
    prefix = unique("turns")
    topic = f"{prefix}-t"
    kafka_scenario.create_topic(bootstrap, topic, 3)
    window = 10.0
    rules = {
        "falling_behind": {"window_s": window, "for_s": 0},
        "stalled": {"window_s": 60},
        "stopped": {"window_s": 60},
        "lag": {"warning": NEVER, "critical": NEVER},
        "rate_window_s": window,
    }
    recorder = Recorder()
    daemon = watch(bootstrap, prefix, tmp_path / "state", recorder, rules)
    stop = threading.Event()
    first_commit: list[float] = []
    parts = [KafkaTopicPartition(topic, p) for p in range(3)]

    def produce() -> None:
        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        while not stop.wait(0.05):  # 20 a second on each partition
            for p in range(3):
                producer.send(topic, b"x", partition=p)
        producer.close()

    def consume() -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=f"{prefix}-g", auto_offset_reset="earliest", enable_auto_commit=False
        )
        consumer.subscribe([topic])
        turn = 0
        while not stop.wait(0.33):
            consumer.poll(200, max_records=10)  # 10 records a third of a second: half of the 60 arriving
            tp = parts[turn % 3]
            if tp in consumer.assignment():
                consumer.commit({tp: OffsetAndMetadata(consumer.position(tp), "", -1)})
                if not first_commit:
                    first_commit.append(time.time())
                turn += 1
        consumer.close()

    threads = [threading.Thread(target=f, daemon=True) for f in (produce, consume)]
    try:
        daemon.start()
        for t in threads:
            t.start()
        wait_for(lambda: recorder.kinds(f"{prefix}-g"), timeout=90, interval=0.5, what="falling_behind paged")
    finally:
        stop.set()
        daemon.stop()
        for t in threads:
            t.join(10)
    (paged, *_) = [n for n in recorder.sent if n.group_labels.get("group") == f"{prefix}-g"]
    assert [a.rule for a in paged.alerts] == ["falling_behind"]
    after = paged.created_at - first_commit[0]
    assert window <= after <= window + 2 + 3, after  # two 1-s polls, and 3 s of a loaded machine


def test_the_log_says_an_inhibited_alert_is_muted_and_tells_its_end_once(
    bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The log notifier is the demo's only one. A consumer falling behind (`falling_behind`) stops: `stopped`
    inhibits it. The log printed `falling_behind (resolved, warning)` while the incident went on, then `(firing)`
    again when the inhibition ended. It says muted; once a consumer is back and caught up, the end is told."""
    from lagwatch.notify import LogNotifier

    prefix = unique("muted")
    topic = f"{prefix}-t"
    group = f"{prefix}-g"
    kafka_scenario.create_topic(bootstrap, topic, 1)
    rules = {
        "falling_behind": {"window_s": 6, "for_s": 0},
        "stopped": {"window_s": 4},
        "stalled": {"window_s": 60},
        "lag": {"warning": NEVER, "critical": NEVER},
        "rate_window_s": 6,
    }
    settings = load_settings(
        rules=rules, alerts={"group_wait_s": 0, "group_interval_s": 1}, state_dir=tmp_path / "state", http=LOOPBACK
    )
    cluster = ClusterConfig(
        bootstrap_servers=[bootstrap], poll_interval_s=1, request_timeout_s=5, groups=NameFilter(include=[group])
    )
    daemon = Daemon(settings, clusters={"test": cluster}, notifiers={"log": LogNotifier()})
    stop_all, stop_slow = threading.Event(), threading.Event()

    def produce() -> None:
        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        while not stop_all.wait(0.05):
            producer.send(topic, b"x")
        producer.close()

    def consume(stop: threading.Event, per_poll: int) -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False
        )
        consumer.subscribe([topic])
        while not stop.wait(0.5):
            if consumer.poll(200, max_records=per_poll):
                consumer.commit()
        consumer.close()

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "lagwatch.alert" and group in r.getMessage()]

    caplog.set_level(logging.INFO, logger="lagwatch.alert")
    threads = [threading.Thread(target=produce, daemon=True), threading.Thread(target=consume, args=(stop_slow, 5))]
    try:
        daemon.start()
        for t in threads:
            t.start()
        wait_for(lambda: any("falling_behind (firing" in line for line in lines()), timeout=60, what="falling_behind")
        stop_slow.set()  # it leaves the group: Empty, its lag growing
        wait_for(lambda: any("stopped (firing" in line for line in lines()), timeout=60, what="stopped")
        told = lines()[-1]
        assert "falling_behind (muted" in told and "resolved" not in told.lower(), "\n".join(lines())
        back = threading.Thread(target=consume, args=(stop_all, 500))  # back, and it catches up
        back.start()
        threads.append(back)
        wait_for(lambda: lines()[-1].startswith("[RESOLVED"), timeout=60, what="the end told")
    finally:
        stop_all.set()
        stop_slow.set()
        daemon.stop()
        for t in threads:
            t.join(10)
    said = lines()
    assert not any("falling_behind (resolved" in line for line in said[:-1]), said  # its end told once, at the end
    assert sum(line.startswith("[FIRING") for line in said) == 1, said
