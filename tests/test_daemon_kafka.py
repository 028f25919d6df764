"""The daemon against a real broker: every rule end to end, on real groups and real traffic."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from lagwatch.config import ClusterConfig, NameFilter, load_settings
from lagwatch.daemon import Daemon
from tests import kafka_scenario
from tests.conftest import unique, wait_for
from tests.live import Background, Recorder, commit

pytestmark = pytest.mark.kafka

LOOPBACK = {"host": "127.0.0.1", "port": 0}
FAST_RULES = {
    "lag": {"warning": {"offsets": 10**9}, "critical": {"offsets": 10**9}},
    "stalled": {"window_s": 5},
    "stopped": {"window_s": 4},
    "falling_behind": {"window_s": 6},
    "rewind": {"window_s": 60},
    "expiry": {"enabled": False},
    "rate_window_s": 6,
}


def daemon_for(bootstrap: str, prefix: str, state_dir: Path, recorder: Recorder, rules: dict | None = None) -> Daemon:
    settings = load_settings(
        rules=rules or FAST_RULES, alerts={"group_wait_s": 0, "group_interval_s": 1}, state_dir=state_dir, http=LOOPBACK
    )
    cluster = ClusterConfig(
        bootstrap_servers=[bootstrap],
        poll_interval_s=1,
        request_timeout_s=5,
        groups=NameFilter(include=[f"{prefix}-.*"]),
    )
    return Daemon(settings, clusters={"test": cluster}, notifiers={"record": recorder})


def firing_rules(daemon: Daemon, group: str) -> set[str]:
    with daemon.book_lock:
        return {a.rule for a in daemon.book.alerts.values() if a.group == group and a.state == "firing"}


def test_every_rule_end_to_end(bootstrap: str, tmp_path: Path) -> None:
    prefix = unique("rules")
    busy, quiet, audit = f"{prefix}-busy", f"{prefix}-quiet", f"{prefix}-audit"
    for t in (busy, quiet, audit):
        kafka_scenario.create_topic(bootstrap, t, 1)
    kafka_scenario.produce(bootstrap, busy, {0: 50})
    kafka_scenario.produce(bootstrap, quiet, {0: 10})
    kafka_scenario.produce(bootstrap, audit, {0: 30})
    g = {name: f"{prefix}-{name}" for name in ("stopped", "stalled", "slow", "quiet", "rewind", "below")}

    # Stopped: read a little, committed, left.
    c = kafka_scenario.subscribed_consumer(bootstrap, g["stopped"], [busy])
    commit(c, busy, 10)
    c.close()
    # Stalled: stays a member, never commits again.
    stalled = kafka_scenario.subscribed_consumer(bootstrap, g["stalled"], [busy])
    commit(stalled, busy, 20)
    # Quiet and caught up: a member on a topic nobody writes to.
    quiet_consumer = kafka_scenario.subscribed_consumer(bootstrap, g["quiet"], [quiet])
    commit(quiet_consumer, quiet, 10)
    # Committed below the log start.
    c = kafka_scenario.assigned_consumer(bootstrap, g["below"], [TopicPartition(audit, 0)])
    commit(c, audit, 5)
    c.close()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.delete_records({TopicPartition(audit, 0): 20})
    admin.close()
    # Rewind: an assign() group that moves its offset backwards while lagwatch watches.
    rewinder = kafka_scenario.assigned_consumer(bootstrap, g["rewind"], [TopicPartition(quiet, 0)])
    commit(rewinder, quiet, 8)

    traffic = Background()
    traffic.produce(bootstrap, busy, 20)
    traffic.slow_consumer(bootstrap, g["slow"], busy, 5)
    recorder = Recorder()
    daemon = daemon_for(bootstrap, prefix, tmp_path / "state", recorder).start()
    try:
        time.sleep(3)
        commit(rewinder, quiet, 2)
        expected = {
            "stopped": {"stopped"},
            "stalled": {"stalled"},
            "slow": {"falling_behind"},
            "rewind": {"rewind"},
            "below": {"below_log_start"},
        }
        wait_for(
            lambda: all(want <= firing_rules(daemon, g[name]) for name, want in expected.items()),
            timeout=40,
            interval=1,
            what="every rule to fire",
        )
        for name, want in expected.items():
            assert firing_rules(daemon, g[name]) == want, (name, firing_rules(daemon, g[name]))
        assert firing_rules(daemon, g["quiet"]) == set()
        assert recorder.kinds(g["quiet"]) == []
        wait_for(lambda: all(recorder.kinds(g[n]) for n in expected), timeout=10, what="notifications")
        for name in expected:
            firsts = [k for k, _ in recorder.kinds(g[name]) if k == "firing"]
            assert firsts == ["firing"], (name, recorder.kinds(g[name]))
    finally:
        daemon.stop()
        traffic.stop()
        stalled.close()
        quiet_consumer.close()
        rewinder.close()


def test_offset_expiry_warned_before_the_broker_deletes_then_reported_expired(tmp_path: Path) -> None:
    """A broker with a 1-minute offsets.retention.minutes: lagwatch warns (75%), goes critical (90%), and then
    reports the offsets expired once the broker has deleted them."""
    from lagwatch.devbroker import LocalBroker
    from tests.conftest import KAFKA_VERSION

    settings = {"offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "2000"}
    with LocalBroker(kafka_version=KAFKA_VERSION, settings=settings) as broker:
        prefix = unique("exp")
        topic, group = f"{prefix}-t", f"{prefix}-g"
        kafka_scenario.create_topic(broker.bootstrap, topic, 1)
        kafka_scenario.produce(broker.bootstrap, topic, {0: 20})
        consumer = kafka_scenario.subscribed_consumer(broker.bootstrap, group, [topic])
        commit(consumer, topic, 5)
        recorder = Recorder()
        rules = {"lag": {"enabled": False}, "stopped": {"enabled": False}}
        daemon = daemon_for(broker.bootstrap, prefix, tmp_path / "state", recorder, rules).start()
        try:
            time.sleep(2.5)  # lagwatch sees the group Stable, so it will see the moment it becomes Empty
            consumer.close()
            empty_at = time.time()
            wait_for(
                lambda: any(a.rule == "expiry" for a in daemon.book.alerts.values()),
                timeout=70,
                interval=0.5,
                what="expiry warning",
            )
            warned_at = time.time()
            (alert,) = [a for a in daemon.book.alerts.values() if a.rule == "expiry"]
            assert alert.severity == "warning" and alert.details["observed"] is True
            assert abs(float(alert.details["expires_at"]) - (empty_at + 60)) < 3  # type: ignore[arg-type]
            assert 44 <= warned_at - empty_at < 50 and "'latest' skips 15 unconsumed records" in alert.summary
            wait_for(
                lambda: firing_rules(daemon, group) == {"expiry"} and alert.severity == "critical",
                timeout=15,
                what="critical expiry",
            )
            wait_for(lambda: "expired" in firing_rules(daemon, group), timeout=40, interval=0.5, what="expired")
            expired_at = time.time()
            assert expired_at - empty_at >= 59, "reported expired before the broker could have deleted the offsets"
            (gone,) = [a for a in daemon.book.alerts.values() if a.rule == "expired"]
            assert gone.details["group_gone"] is True and "expired" in gone.summary
            wait_for(lambda: any("expired" in rules for _, rules in recorder.kinds(group)), timeout=10, what="notice")
            kinds = recorder.kinds(group)
            first_expiry = next(i for i, (_, r) in enumerate(kinds) if "expiry" in r)
            first_expired = next(i for i, (_, r) in enumerate(kinds) if "expired" in r)
            assert first_expiry < first_expired
        finally:
            daemon.stop()


def test_broker_outage_one_cluster_alert_no_lag_alerts_then_recovery(tmp_path: Path) -> None:
    from lagwatch.devbroker import LocalBroker
    from tests.conftest import KAFKA_VERSION

    with LocalBroker(kafka_version=KAFKA_VERSION) as broker:
        prefix = unique("out")
        _, group = kafka_scenario.stopped_group(broker.bootstrap, prefix, {0: 30}, {0: 10})
        recorder = Recorder()
        rules = FAST_RULES | {"cluster_unreachable": {"for_s": 2}}
        daemon = daemon_for(broker.bootstrap, prefix, tmp_path / "state", recorder, rules).start()
        try:
            wait_for(lambda: firing_rules(daemon, group) == {"stopped"}, timeout=20, what="stopped group alert")
            wait_for(lambda: recorder.kinds(group), timeout=5, what="its notification")
            before = list(recorder.kinds(group))
            broker.pause()
            wait_for(lambda: firing_rules(daemon, None) == {"cluster_unreachable"}, timeout=30, what="cluster alert")  # type: ignore[arg-type]
            time.sleep(4)
            assert firing_rules(daemon, group) == {"stopped"}  # frozen: neither resolved nor re-fired
            broker.start()
            wait_for(lambda: not firing_rules(daemon, None), timeout=60, what="recovery")  # type: ignore[arg-type]
            time.sleep(3)
            assert firing_rules(daemon, group) == {"stopped"}
            assert recorder.kinds(group) == before  # nothing said about the group through the outage
            cluster_notes = [n.kind for n in recorder.sent if n.group_labels.get("group") == ""]
            assert cluster_notes == ["firing", "resolved"]
        finally:
            daemon.stop()


def test_sigkill_mid_incident_then_restart_sends_no_second_firing(bootstrap: str, tmp_path: Path) -> None:
    import json
    import os
    import signal
    import subprocess
    import sys

    prefix = unique("kill")
    _, group = kafka_scenario.stopped_group(bootstrap, prefix, {0: 30}, {0: 10})
    config = tmp_path / "lagwatch.yaml"
    config.write_text(
        json.dumps(
            {
                "state_dir": str(tmp_path / "state"),
                "clusters": {
                    "test": {
                        "bootstrap_servers": [bootstrap],
                        "poll_interval_s": 1,
                        "groups": {"include": [f"{prefix}-.*"]},
                    }
                },
                "rules": FAST_RULES,
                "alerts": {"group_wait_s": 0, "group_interval_s": 1},
                "http": LOOPBACK,
            }
        )
    )

    def run(log: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "lagwatch", "run", "--config", str(config), "--log-format", "json"],
            stdout=subprocess.DEVNULL,
            stderr=open(log, "wb"),
        )

    def firing_lines(log: Path) -> list[dict]:
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
        return [x for x in lines if x.get("kind") == "firing" and x.get("group", {}).get("group") == group]

    first = run(tmp_path / "first.log")
    try:
        wait_for(lambda: firing_lines(tmp_path / "first.log"), timeout=30, what="the firing notification")
        time.sleep(1)
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    second = run(tmp_path / "second.log")
    try:
        wait_for(lambda: '"poll"' in (tmp_path / "second.log").read_text(), timeout=20, what="a poll after restart")
        time.sleep(4)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0
    assert len(firing_lines(tmp_path / "first.log")) == 1
    assert firing_lines(tmp_path / "second.log") == []
    assert '"lagwatch stopped"' in (tmp_path / "second.log").read_text()


def test_slow_cluster_never_delays_another_and_skipped_polls_are_counted(bootstrap: str, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on: every poll of that cluster waits out its timeout
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    settings = load_settings(rules=FAST_RULES, state_dir=tmp_path / "state", http=LOOPBACK)
    clusters = {
        "healthy": ClusterConfig(
            bootstrap_servers=[bootstrap], poll_interval_s=1, groups=NameFilter(include=["none-.*"])
        ),
        "dead": ClusterConfig(bootstrap_servers=[dead], poll_interval_s=1, request_timeout_s=3),
    }
    daemon = Daemon(settings, clusters=clusters, notifiers={}).start()
    try:
        time.sleep(8)
    finally:
        daemon.stop()
    healthy, dead_rt = daemon.clusters["healthy"], daemon.clusters["dead"]
    assert healthy.polls >= 6 and healthy.failed_polls == 0
    assert 1 <= dead_rt.polls <= 4 and dead_rt.failed_polls == dead_rt.polls
    assert dead_rt.skipped_polls + dead_rt.missed_polls >= 3
    assert dead_rt.latest is not None and dead_rt.latest.error_kind == "unreachable"


def test_history_survives_a_restart_so_lag_seconds_are_known_at_once(bootstrap: str, tmp_path: Path) -> None:
    prefix = unique("hist")
    topic, group = f"{prefix}-t", f"{prefix}-g"
    kafka_scenario.create_topic(bootstrap, topic, 1)
    c = kafka_scenario.assigned_consumer(bootstrap, group, [TopicPartition(topic, 0)])
    kafka_scenario.produce(bootstrap, topic, {0: 5})
    commit(c, topic, 5)
    c.close()
    first = daemon_for(bootstrap, prefix, tmp_path / "state", Recorder()).start()
    try:
        time.sleep(2.5)
        kafka_scenario.produce(bootstrap, topic, {0: 10})  # records 5.. arrive now; the group stays at 5
        time.sleep(2.5)
    finally:
        first.stop()
    produced_at = time.time() - 2.5
    second = daemon_for(bootstrap, prefix, tmp_path / "state", Recorder())
    second.poll_cluster("test")  # one poll, straight after the restart
    evaluation = second.clusters["test"].evaluation
    second.stop()
    assert evaluation is not None
    measure = evaluation.measures[group]
    assert measure.lag.sum_lag == 10
    assert measure.max_lag_seconds is not None and abs(measure.max_lag_seconds - (time.time() - produced_at)) < 2.5
