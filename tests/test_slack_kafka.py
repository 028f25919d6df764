"""End to end: a real consumer group, the daemon, and a Slack-compatible server. Firing posts one message; a
daemon restart in the middle sends nothing twice; the resolution updates that same message and replies in its
thread."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka import TopicPartition

from lagwatch.config import ClusterConfig, NameFilter, load_settings
from lagwatch.daemon import Daemon
from tests import kafka_scenario
from tests.conftest import unique, wait_for
from tests.fake_slack import FakeSlack

pytestmark = pytest.mark.kafka


def test_slack_firing_restart_resolved_in_thread(
    bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slack = FakeSlack().start()
    topic, group = kafka_scenario.stopped_group(bootstrap, unique("slk"), {0: 30}, {0: 10})
    monkeypatch.setenv("LAGWATCH_NOTIFIERS__SLACK__TOKEN", slack.token)
    settings = load_settings(
        state_dir=tmp_path / "state",
        http={"enabled": False},
        rules={"stopped": {"window_s": 1}, "expiry": {"enabled": False}},
        alerts={"group_wait_s": 0, "group_interval_s": 1},
        notifiers={
            "log": {"enabled": False},
            "slack": {
                "base_url": slack.base_url,
                "default_channel": "#kafka",
                "grafana_url": "https://grafana.example/d/x?var-group={group}",
            },
        },
    )
    cluster = {
        "test": ClusterConfig(bootstrap_servers=[bootstrap], poll_interval_s=1, groups=NameFilter(include=[group]))
    }
    try:
        first = Daemon(settings, clusters=cluster).start()
        try:
            wait_for(lambda: slack.delivered("chat.postMessage"), timeout=30, what="the firing message")
        finally:
            first.stop()
        (post,) = slack.delivered("chat.postMessage")
        assert post.args["channel"] == "#kafka" and "stopped" in post.args["text"] and group in post.args["text"]
        assert "var-group=" + group in str(post.args["blocks"])

        second = Daemon(settings, clusters=cluster).start()  # same state directory
        try:
            c = kafka_scenario.assigned_consumer(bootstrap, group, [TopicPartition(topic, 0)])
            kafka_scenario.commit(c, {TopicPartition(topic, 0): 30})  # caught up: the alert resolves
            c.close()
            wait_for(
                lambda: [x for x in slack.delivered("chat.postMessage") if x.args.get("thread_ts")],
                timeout=30,
                what="the resolution in the thread",
            )
        finally:
            second.stop()
        posts = slack.delivered("chat.postMessage")
        assert [p.args.get("thread_ts") for p in posts] == [None, "1700000000.000001"]  # no second firing message
        (update,) = slack.delivered("chat.update")
        assert update.args["ts"] == "1700000000.000001" and update.args["text"].startswith("[RESOLVED]")
    finally:
        slack.stop()


def test_a_slow_slack_never_delays_the_polls(bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slack = FakeSlack(delay_s=3.0).start()  # every Slack call takes 3 s
    _, group = kafka_scenario.stopped_group(bootstrap, unique("slow"), {0: 30}, {0: 1}, assign=True)
    monkeypatch.setenv("LAGWATCH_NOTIFIERS__SLACK__TOKEN", slack.token)
    settings = load_settings(
        state_dir=tmp_path / "state",
        http={"enabled": False},
        rules={"below_log_start": {"enabled": True}, "lag": {"warning": {"offsets": 5}, "for_s": 0}},
        alerts={"group_wait_s": 0},
        notifiers={"log": {"enabled": False}, "slack": {"base_url": slack.base_url, "default_channel": "#kafka"}},
    )
    cluster = {
        "test": ClusterConfig(bootstrap_servers=[bootstrap], poll_interval_s=1, groups=NameFilter(include=[group]))
    }
    daemon = Daemon(settings, clusters=cluster).start()
    try:
        wait_for(lambda: slack.calls, timeout=20, what="a Slack call under way")
        polls_before = daemon.clusters["test"].polls
        import time

        time.sleep(2.5)  # the Slack call is still answering
        assert daemon.clusters["test"].polls - polls_before >= 2
        wait_for(lambda: daemon.outbox.pending() == 0, timeout=30, what="the slow delivery to finish")
        assert len(slack.delivered("chat.postMessage")) == 1
    finally:
        daemon.stop()
        slack.stop()
