"""History saves on the daemon's history writer: the capture waits for a step under way (it reads the history as a
step left it), and what a restart loads is said in one log line per cluster."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from lagwatch.config import ClusterConfig, load_settings
from lagwatch.daemon import Daemon
from lagwatch.model import ClusterSnapshot, TopicPartition
from tests.synthetic import group, snapshot

GROUPS, PARTITIONS = 30, 4


class Polls:
    def __init__(self) -> None:
        self.tps = [TopicPartition("orders", p) for p in range(PARTITIONS)]
        self.t = time.time() - 600

    def poll(self) -> ClusterSnapshot:
        self.t += 30
        groups = [group(f"g{i}", committed=dict.fromkeys(self.tps, 100 - i)) for i in range(GROUPS)]
        return snapshot(self.t, groups, dict.fromkeys(self.tps, 100))

    def close(self) -> None:
        pass


def _daemon(state: Path) -> Daemon:
    cfg = ClusterConfig(bootstrap_servers=["127.0.0.1:9"], poll_interval_s=30)
    polls = Polls()
    return Daemon(
        load_settings(state_dir=state, http={"enabled": False}, history_save_interval_s=3600),
        clusters={"a": cfg},
        notifiers={},
        poller_factory=lambda name, _: polls,
        reader_factory=None,
    )


def test_a_history_save_waits_for_the_step_under_way_and_keeps_its_poll(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path)
    runtime = daemon.clusters["a"]
    daemon.poll_cluster("a")  # saves its history: the first save is due at once
    assert runtime.history_write is not None
    runtime.history_write.result(timeout=10)
    step = daemon.pipelines["a"].step

    def save_during_step(snap: ClusterSnapshot) -> Any:
        daemon.save_history(runtime)  # as at the interval, while this step holds the cluster's lock
        time.sleep(0.3)  # long enough for a capture that did not wait to have run
        return step(snap)

    daemon.pipelines["a"].step = save_during_step  # type: ignore[method-assign]
    daemon.poll_cluster("a")
    runtime.history_write.result(timeout=10)
    saved = next(iter(daemon.store.read_history("a")))
    assert saved["polls"] == 2 and len(saved["groups"]) == GROUPS
    daemon.stop()


def test_a_restart_says_how_much_history_it_loaded(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    daemon = _daemon(tmp_path)
    for _ in range(3):
        daemon.poll_cluster("a")
    daemon.stop()  # saves the history
    with caplog.at_level(logging.INFO, logger="lagwatch"):
        again = _daemon(tmp_path)
    (loaded,) = [r for r in caplog.records if r.getMessage() == "history loaded"]
    assert (loaded.cluster, loaded.groups, loaded.group_partitions, loaded.polls) == (  # type: ignore[attr-defined]
        "a",
        GROUPS,
        GROUPS * PARTITIONS,
        3,
    )
    assert again.clusters["a"].history.polls == 3
    again.store.close()
