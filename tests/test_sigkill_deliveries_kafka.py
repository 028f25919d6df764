"""SIGKILL during deliveries, again and again: every group's Slack message is posted exactly once.

lagwatch runs as a real process against the real broker, with a Slack-compatible server that answers slowly (so
kills land in the middle of posts) and sometimes acts and then answers after lagwatch's timeout. Each run is
killed with SIGKILL at a random moment; the next run restores the outbox, looks for posts whose outcome it does
not know, and carries on.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import kafka_scenario
from tests.conftest import unique, wait_for
from tests.fake_slack import FakeSlack

pytestmark = pytest.mark.kafka
GROUPS = 6


@pytest.fixture
def slow_slack() -> Iterator[FakeSlack]:
    fake = FakeSlack(delay_s=0.4).start()
    yield fake
    fake.stop()


def test_repeated_sigkill_during_deliveries_posts_each_message_once(
    bootstrap: str, tmp_path: Path, slow_slack: FakeSlack
) -> None:
    prefix = unique("killd")
    groups = [kafka_scenario.stopped_group(bootstrap, f"{prefix}-{i}", {0: 30}, {0: 10})[1] for i in range(GROUPS)]
    config = tmp_path / "lagwatch.yaml"
    config.write_text(
        json.dumps(
            {
                "state_dir": str(tmp_path / "state"),
                "clusters": kafka_scenario.one_cluster(bootstrap, prefix),
                "rules": {"lag": {"enabled": False}, "expiry": {"enabled": False}, "stopped": {"window_s": 2}},
                "alerts": {"group_wait_s": 0, "group_interval_s": 1, "storm_threshold": 100},
                "http": {"enabled": False},
                "notifiers": {
                    "log": {"enabled": False},
                    "slack": {"base_url": slow_slack.base_url, "default_channel": "#kafka", "timeout_s": 1},
                },
            }
        )
    )
    env = {**os.environ, "LAGWATCH_NOTIFIERS__SLACK__TOKEN": slow_slack.token}

    def run() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "lagwatch", "run", "--config", str(config), "--log-format", "json"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )

    def firing_posts() -> list[str]:
        posts = slow_slack.delivered("chat.postMessage")
        return [p.args["text"] for p in posts if not p.args.get("thread_ts")]

    rng = random.Random(7)
    kills = 0
    slow_slack.act_then_hang_next, slow_slack.hang_s = 2, 1.5  # two posts Slack makes but lagwatch never hears of
    deadline = time.monotonic() + 120
    while len(firing_posts()) < GROUPS and time.monotonic() < deadline:
        process = run()
        if kills < 5:
            # Once the first posts are under way, kill at a random moment inside the delivery phase.
            wait_for(lambda: slow_slack.calls, timeout=30, what="lagwatch to reach Slack")
            time.sleep(rng.uniform(0.2, 1.5))
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            kills += 1
            continue
        try:
            wait_for(lambda: len(firing_posts()) >= GROUPS, timeout=60, what="every group posted")
            time.sleep(3)  # anything still to come would come now
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(30) == 0
    assert kills == 5
    texts = firing_posts()
    per_group = {g: sum(f"/ {g} " in t for t in texts) for g in groups}
    assert per_group == dict.fromkeys(groups, 1), per_group  # each exactly once, despite 5 SIGKILLs
    lookups = [c for c in slow_slack.calls if c.method == "conversations.history"]
    assert lookups, "the runs after a kill should have looked for posts of unknown outcome"
