"""History saves on the daemon's history writer: the capture waits for a step under way (it reads the history as a
step left it), and what a restart loads is said in one log line per cluster."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lagwatch.clock import SteadyClock
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


def _daemon(state: Path, clock: Callable[[], float] | None = None) -> Daemon:
    cfg = ClusterConfig(bootstrap_servers=["127.0.0.1:9"], poll_interval_s=30)
    polls = Polls()
    return Daemon(
        load_settings(state_dir=state, http={"enabled": False}, history_save_interval_s=3600),
        clusters={"a": cfg},
        notifiers={},
        clock=clock,
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


def test_a_restart_under_a_host_clock_set_back_still_dates_after_the_saved_polls(tmp_path: Path) -> None:
    """The host clock set back 200 s while lagwatch was down: its clock starts after the last saved poll (the pure
    step would hold every poll dated before it), says so in a metric, and goes forward from there."""
    daemon = _daemon(tmp_path)
    for _ in range(3):
        daemon.poll_cluster("a")
    daemon.stop()
    last = daemon.clusters["a"].history.last_ok_poll
    assert last is not None
    offset = time.time() - (last - 200)  # the host's clock now reads 200 s before the last saved poll
    clock = SteadyClock(lambda: time.time() - offset, time.monotonic)
    again = _daemon(tmp_path, clock)
    assert again.clock is clock and last < clock() < clock()
    assert clock.steps_back == 1 and 199 < clock.ahead_s <= 200.1
    again.render_metrics()
    body = again.metrics_body().decode()
    assert "\nlagwatch_clock_steps_back_total 1\n" in body
    (ahead,) = [line.split()[1] for line in body.splitlines() if line.startswith("lagwatch_clock_ahead_seconds ")]
    assert 195 < float(ahead) <= 200.1
    again.stop()


def test_a_poll_that_returns_after_the_stop_takes_nothing_and_raises_nothing(tmp_path: Path) -> None:
    """A stop while a poll waits on the broker (past the stop's grace): the poll came back after the state
    database was closed, stepped, and raised "state database is closed" (a traceback in `lagwatch run`'s log at
    every such stop). It now takes nothing: the stop saved the state as it was."""
    import threading

    started, release = threading.Event(), threading.Event()

    class SlowPolls(Polls):
        def poll(self) -> ClusterSnapshot:
            started.set()
            release.wait(10)
            return super().poll()

    slow = SlowPolls()
    daemon = Daemon(
        load_settings(state_dir=tmp_path, http={"enabled": False}),
        clusters={"a": ClusterConfig(bootstrap_servers=["127.0.0.1:9"], poll_interval_s=30)},
        notifiers={},
        poller_factory=lambda name, _: slow,
        reader_factory=None,
    )
    raised: list[BaseException] = []

    def poll() -> None:
        try:
            daemon.poll_cluster("a")
        except BaseException as e:
            raised.append(e)

    thread = threading.Thread(target=poll)
    thread.start()
    assert started.wait(5)
    daemon.stop(grace_s=0.2)  # the poll is still under way: the stop goes on after its grace
    release.set()
    thread.join(10)
    assert raised == [] and daemon.clusters["a"].polls == 0


def test_a_held_poll_leaves_the_last_figures_to_the_exporter(tmp_path: Path) -> None:
    """A poll dated an hour before the last (a large host clock step back) is held by the step; its empty
    evaluation blanked every lag series, and the lag alerts Prometheus evaluates on them resolved for the hour."""
    daemon = _daemon(tmp_path)
    polls = daemon.clusters["a"].poller
    for _ in range(3):
        daemon.poll_cluster("a")
    before = daemon.metrics_body().decode()
    assert "lagwatch_group_topic_lag{" in before
    polls.t -= 3600  # the next poll is dated an hour earlier
    daemon.poll_cluster("a")
    after = daemon.metrics_body().decode()
    assert after.count("lagwatch_group_topic_lag{") == before.count("lagwatch_group_topic_lag{")
    assert daemon.clusters["a"].history.blind  # and the held span is a blind spell
    daemon.stop()
