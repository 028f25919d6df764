"""End to end on the real broker: consumer groups with hostile ids (mentions, links, backticks, a newline that forges a
log line, ANSI escapes, a 2,500-character id) lag, the daemon pages them to a Slack-compatible server that refuses
what Slack refuses, and what arrives in Slack and in the text log is checked character by character."""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from kafka import TopicPartition

from lagwatch.config import ClusterConfig, NameFilter, load_settings
from lagwatch.daemon import Daemon
from lagwatch.logs import TextFormatter
from lagwatch.model import key_part
from lagwatch.serve.app import create_app
from tests import kafka_scenario
from tests.conftest import unique, wait_for
from tests.fake_slack import FakeSlack
from tests.test_hostile_names import assert_inert

pytestmark = pytest.mark.kafka

HOSTILE = [
    "<!channel> urgent",
    "<!here>",
    "<!subteam^S123|x>",
    "<https://evil.example|click here>",
    "a`b`c",
    "x" * 2500,
    "x\n12:00:00 ERROR   lagwatch stopped: disk full",
    "\x1b[31mred\x1b[0m\rback \u202eevil",
]


def test_hostile_group_ids_page_as_text_on_slack_and_in_the_log(
    bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = unique("hostile")
    topic = f"{prefix}-t"
    kafka_scenario.create_topic(bootstrap, topic, 1)
    kafka_scenario.produce(bootstrap, topic, {0: 30})
    groups = [f"{prefix}{name}" for name in HOSTILE]
    for group in groups:  # a simple group 20 records behind: `lag` pages it
        consumer = kafka_scenario.assigned_consumer(bootstrap, group, [TopicPartition(topic, 0)])
        kafka_scenario.commit(consumer, {TopicPartition(topic, 0): 10})
        consumer.close()

    slack = FakeSlack().start()
    monkeypatch.setenv("LAGWATCH_NOTIFIERS__SLACK__TOKEN", slack.token)
    text_log = io.StringIO()
    handler = logging.StreamHandler(text_log)
    handler.setFormatter(TextFormatter())
    logging.getLogger().addHandler(handler)
    settings = load_settings(
        state_dir=tmp_path / "state",
        http={"enabled": False},
        rules={"lag": {"warning": {"offsets": 5}, "for_s": 0}, "expiry": {"enabled": False}},
        alerts={"group_wait_s": 0, "group_interval_s": 1},
        notifiers={
            "log": {"enabled": True},
            "slack": {
                "base_url": slack.base_url,
                "default_channel": "#kafka",
                "grafana_url": "https://grafana.example/d/x?var-group={group}",
            },
        },
    )
    # The default filter's `.*` and one naming the prefix: both watch the id that holds a newline.
    cluster = ClusterConfig(
        bootstrap_servers=[bootstrap], poll_interval_s=1, groups=NameFilter(include=[f"{prefix}.*"])
    )
    daemon = Daemon(settings, clusters={"test": cluster}).start()
    try:
        wait_for(
            lambda: len(slack.delivered("chat.postMessage")) >= len(groups),
            timeout=60,
            what="a message for every hostile group",
        )
        client = TestClient(create_app(), raise_server_exceptions=False)
        client.app.state.service = daemon  # type: ignore[attr-defined]
        listed = {g["group"] for g in client.get("/api/v1/clusters/test/groups").json()}
        assert set(groups) <= listed
        for group in groups:
            answer = client.get(f"/api/v1/clusters/test/groups/{quote(group, safe='')}")
            assert answer.status_code == 200 and answer.json()["group"] == group
    finally:
        daemon.stop()
        logging.getLogger().removeHandler(handler)
        slack.stop()

    refused = [c for c in slack.calls if c.method == "chat.postMessage" and c.error]
    assert refused == []  # Slack took every message at the first try: none over its limits
    posts = [c for c in slack.delivered("chat.postMessage") if not c.args.get("thread_ts")]
    assert len(posts) == len(groups)
    for call in posts:
        metadata = call.args["metadata"]
        key = (json.loads(metadata) if isinstance(metadata, str) else metadata)["event_payload"]["key"]
        (group,) = [g for g in groups if f"|group={key_part(g)}|" in key]  # slack|cluster=..|group=..|id
        assert_inert(group, call.args["text"], call.args["blocks"])
    # The text log: one event a line, every line lagwatch's own, nothing raw for the terminal.
    lines = text_log.getvalue().splitlines()
    events = [line for line in lines if not line.startswith("    ")]
    assert events and all(re.match(r"\d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR|CRITICAL)\s", e) for e in events)
    assert not [line for line in lines if "lagwatch stopped: disk full" in line and line.startswith("12:00:00")]
    assert "\x1b" not in text_log.getvalue() and "\r" not in text_log.getvalue()
    assert "\\x1b[31mred" in text_log.getvalue()  # shown, escaped
