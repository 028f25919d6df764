"""The configuration changed between two runs, on the same state: what a restart does with what it saved.

Found by testing `lagwatch run` on a real broker: a removed or renamed cluster's alerts were repeated for good, and
a narrowed group or topic filter paged every group it left out as `expired`."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from lagwatch.config import ClusterConfig, NameFilter, load_settings
from lagwatch.daemon import Daemon
from lagwatch.model import ClusterSnapshot, TopicPartition
from tests.conftest import wait_for
from tests.live import Recorder
from tests.synthetic import TP, group, snapshot

OTHER = TopicPartition("audit", 0)


class Polls:
    """Groups as the broker has them; the daemon's filters decide what a poll reads (ClusterPoller filters so)."""

    def __init__(self, name: str, config: ClusterConfig) -> None:
        self.name, self.config = name, config
        self.t = time.time() - 3600

    def poll(self) -> ClusterSnapshot:
        self.t += 30
        groups = [
            group("stuck", committed={TP: 10}, state="Empty", members=0),  # lags 490, no consumer: `stopped`
            group("batch", committed={TP: 500}, state="Empty", members=0),
            group("two-topics", committed={TP: 500, OTHER: 40}, state="Empty", members=0),
        ]
        watched = [
            dataclasses.replace(
                g, committed={tp: c for tp, c in g.committed.items() if self.config.topics.matches(tp.topic)}
            )
            for g in groups
            if self.config.groups.matches(g.group_id) or g.group_id in self.config.checkpoint_consumers
        ]
        ends = {tp: e for tp, e in {TP: 500, OTHER: 40}.items() if self.config.topics.matches(tp.topic)}
        return dataclasses.replace(snapshot(self.t, watched, ends), cluster=self.name)

    def close(self) -> None:
        pass


def _daemon(state: Path, clusters: dict[str, ClusterConfig], recorder: Recorder) -> Daemon:
    settings = load_settings(
        state_dir=state,
        http={"enabled": False},
        rules={"stopped": {"window_s": 60}, "lag": {"enabled": False}},
        alerts={"group_wait_s": 0, "group_interval_s": 0, "repeat_interval_s": 60},
    )
    return Daemon(
        settings,
        clusters=clusters,
        notifiers={"record": recorder},
        poller_factory=Polls,
        reader_factory=None,
    )


def _config(**filters: Any) -> ClusterConfig:
    return ClusterConfig(bootstrap_servers=["127.0.0.1:9"], poll_interval_s=30, **filters)


def _run(daemon: Daemon, cluster: str, polls: int) -> None:
    for _ in range(polls):
        daemon.poll_cluster(cluster)
        wait_for(lambda: daemon.outbox.pending() == 0, timeout=10, what="the notifications' delivery")


def test_a_removed_or_renamed_clusters_alerts_resolve_at_the_restart(tmp_path: Path) -> None:
    """Nothing but that cluster's polls ever resolved them: they were repeated for good (and, renamed, beside the
    new name's own). They resolve when the daemon starts without the cluster, with one log line."""
    first = Recorder()
    daemon = _daemon(tmp_path, {"old": _config()}, first)
    daemon.dispatcher.start()
    _run(daemon, "old", 5)
    assert ("firing", ("stopped",)) in first.kinds("stuck")
    daemon.stop()
    second = Recorder()
    again = _daemon(tmp_path, {"new": _config()}, second)
    again.dispatcher.start()
    _run(again, "new", 5)
    again.stop()
    old = [(n.kind, n.group_labels["cluster"]) for n in second.sent if n.group_labels.get("group") == "stuck"]
    assert old[0] == ("resolved", "old") and ("repeat", "old") not in old
    assert not [a for a in again.book.alerts.values() if a.cluster == "old"]


def test_a_narrowed_filter_pages_nothing_about_what_it_leaves_out(tmp_path: Path) -> None:
    """Groups and topics the new filters leave out were missing from the next poll, read as deleted or expired:
    each paged `expired` for an hour. Their history is let go at the restart."""
    first = Recorder()
    daemon = _daemon(tmp_path, {"c": _config()}, first)
    daemon.dispatcher.start()
    _run(daemon, "c", 3)
    daemon.stop()
    second = Recorder()
    narrowed = _config(groups=NameFilter(exclude=["batch"]), topics=NameFilter(exclude=["audit"]))
    again = _daemon(tmp_path, {"c": narrowed}, second)
    again.dispatcher.start()
    _run(again, "c", 5)
    again.stop()
    assert [n for n in second.sent for a in n.alerts if a.rule == "expired"] == []


def test_a_label_added_by_an_override_carries_the_firing_alert_on(tmp_path: Path) -> None:
    """Labels are part of an alert's key: an override that added a routing label (team) resolved the firing alert
    at the restart and fired it again as a new incident only after its `for` (a lag between the resolve ratio and
    its threshold never paged again). Now the old labels end and the alert goes on under the new ones at once: one
    update, in the same message, and the incident's end later."""
    first = Recorder()
    daemon = _daemon(tmp_path, {"c": _config()}, first)
    daemon.dispatcher.start()
    _run(daemon, "c", 5)
    daemon.stop()
    assert first.kinds("stuck") == [("firing", ("stopped",))]
    second = Recorder()
    settings = load_settings(
        state_dir=tmp_path,
        http={"enabled": False},
        rules={
            "stopped": {"window_s": 60},
            "lag": {"enabled": False},
            "overrides": [{"match": {"group": "stuck"}, "labels": {"team": "payments"}}],
        },
        alerts={"group_wait_s": 0, "group_interval_s": 0, "repeat_interval_s": 3600},
    )
    again = Daemon(settings, {"c": _config()}, {"record": second}, poller_factory=Polls, reader_factory=None)
    again.dispatcher.start()
    _run(again, "c", 5)
    again.stop()
    (update,) = [n for n in second.sent if n.group_labels.get("group") == "stuck"]
    assert update.kind == "update" and update.alerts[0].fired_at == first.sent[0].alerts[0].fired_at
    assert [(a.state, a.labels.get("team")) for a in update.alerts] == [
        ("firing", "payments"),
        ("resolved", None),
    ]
    (alert,) = [a for a in again.book.alerts.values() if a.group == "stuck"]
    assert alert.state == "firing" and alert.labels["team"] == "payments"


def test_a_checkpoint_consumer_outside_the_groups_filter_keeps_its_history(tmp_path: Path) -> None:
    """Spark checkpoint consumers are polled whatever the groups filter says; the filter's clean-up at restart let
    go of their history every time (cadences learnt, evidence, rewinds)."""
    cfg = _config(
        groups=NameFilter(include=["two-.*"]),
        checkpoint_consumers={"stuck": {"location": str(tmp_path / "checkpoint")}},
    )
    daemon = _daemon(tmp_path, {"c": cfg}, Recorder())
    daemon.dispatcher.start()
    _run(daemon, "c", 3)
    daemon.stop()
    assert set(daemon.clusters["c"].history.groups) == {"stuck", "two-topics"}
    again = _daemon(tmp_path, {"c": cfg}, Recorder())
    assert set(again.clusters["c"].history.groups) == {"stuck", "two-topics"}
    again.stop()


class HungConsumer:
    """A group whose member stays but commits nothing while records keep coming: `stalled`. Polled at the
    cluster's own interval (the daemon's clock as its snapshots date it)."""

    start = time.time() - 7200

    def __init__(self, name: str, config: ClusterConfig) -> None:
        self.name, self.config = name, config
        self.t = HungConsumer.start

    def poll(self) -> ClusterSnapshot:
        self.t += self.config.poll_interval_s
        HungConsumer.start = self.t  # the next run goes on from here
        end = int(10 * (self.t - HungConsumer.origin))
        return dataclasses.replace(
            snapshot(self.t, [group("hung", committed={TP: 100})], {TP: 100 + end}), cluster=self.name
        )

    def close(self) -> None:
        pass

    origin = start


def test_a_restart_at_a_longer_poll_interval_does_not_resolve_a_firing_stall(tmp_path: Path) -> None:
    """Restarted with a poll interval three times as long, the rings were cut to the polls the new interval needs:
    the newest few, 5 s apart, no longer reaching back a window. `stalled` skipped the partition, its critical
    resolved, and it paged again a window later (seen on a real broker, 5 s -> 15 s). It is held until the polls
    cover the window again."""
    settings = load_settings(
        state_dir=tmp_path,
        http={"enabled": False},
        # Every window 90 s or less: the rings keep 2 minutes of polls (26 at 5 s, 10 at 15 s).
        rules={
            "stalled": {"window_s": 60},
            "stopped": {"window_s": 45},
            "falling_behind": {"window_s": 90},
            "no_commit": {"window_s": 60},
            "rate_window_s": 60,
            "lag": {"enabled": False},
        },
        alerts={"group_wait_s": 0, "group_interval_s": 0},
    )
    recorder = Recorder()
    for interval, polls in ((5.0, 40), (15.0, 20)):
        cluster = ClusterConfig(bootstrap_servers=["127.0.0.1:9"], poll_interval_s=interval, exact_clocks=False)
        daemon = Daemon(
            settings,
            clusters={"c": cluster},
            notifiers={"record": recorder},
            poller_factory=HungConsumer,
            reader_factory=None,
        )
        try:
            daemon.dispatcher.start()
            _run(daemon, "c", polls)
        finally:
            daemon.stop()
    assert recorder.kinds("hung") == [("firing", ("stalled",))]


class Growing:
    """One group without a consumer whose lag grows at every poll; caught up once `caught_up` is set."""

    caught_up = False

    def __init__(self, name: str, config: ClusterConfig) -> None:
        self.name = name

    def poll(self) -> ClusterSnapshot:
        Growing.t += 30
        end = int(Growing.t - Growing.start) + 100
        committed = end if Growing.caught_up else 10
        g = group("stuck", committed={TP: committed}, state="Empty", members=0)
        return dataclasses.replace(snapshot(Growing.t, [g], {TP: end}), cluster=self.name)

    def close(self) -> None:
        pass


def test_a_resolve_after_a_clean_restart_shows_the_summary_of_the_stop_not_of_the_firing(tmp_path: Path) -> None:
    """An alert's figures move at every poll and are not saved at each (20,000 row writes a poll): after a restart,
    its resolve showed the summary from when it fired, hours old. A clean stop saves them."""
    Growing.start = Growing.t = time.time() - 3600
    Growing.caught_up = False
    first = Recorder()
    daemon = _growing(tmp_path, first, polls=12)
    fired = next(n for n in first.sent if n.kind == "firing").alerts[0].summary
    (last,) = [a.summary for a in daemon.book.alerts.values() if a.rule == "stopped"]
    assert last != fired  # the lag grew after it fired
    Growing.caught_up = True
    second = Recorder()
    _growing(tmp_path, second, polls=2)
    (resolved,) = [n for n in second.sent if n.kind == "resolved"]
    assert [a.summary for a in resolved.alerts if a.rule == "stopped"] == [last]


def _growing(state: Path, recorder: Recorder, polls: int) -> Daemon:
    """A daemon on `state` polling the Growing group `polls` times, then stopped cleanly."""
    daemon = _daemon(state, {"c": _config()}, recorder)
    daemon.clusters["c"].poller = Growing("c", _config())
    daemon.dispatcher.start()
    _run(daemon, "c", polls)
    daemon.stop()
    return daemon
