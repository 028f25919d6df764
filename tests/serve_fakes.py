"""A daemon without Kafka for the HTTP tests: a poller that returns synthetic snapshots, alerts put in its book."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from lagwatch.alerts import Alert, Notification, NotificationKind, Severity
from lagwatch.config import ClusterConfig, load_settings
from lagwatch.daemon import Daemon
from lagwatch.model import ClusterSnapshot
from tests.synthetic import TP, group, snapshot

CLUSTER = "c"  # the synthetic snapshots are of cluster "c"
SLASHED_GROUP = "team/orders"  # a group id with a slash: the API must reach it


class FakePoller:
    """Two groups with lag; or, with `fail`, a cluster that cannot be reached. Counts its polls."""

    def __init__(self, name: str, config: ClusterConfig, fail: bool = False) -> None:
        self.fail = fail
        self.polls = 0
        self.lock = threading.Lock()

    def poll(self) -> ClusterSnapshot:
        with self.lock:
            self.polls += 1
        if self.fail:
            return snapshot(time.time(), [], {}, error="connection refused")
        return snapshot(
            time.time(), [group("g1", committed={TP: 10}), group(SLASHED_GROUP, committed={TP: 45})], {TP: 50}
        )

    def close(self) -> None:
        pass


def make_daemon(
    state_dir: Path,
    http: dict[str, Any] | None = None,
    notifiers: dict[str, Any] | None = None,
    fail: bool = False,
    **settings: Any,
) -> Daemon:
    config = load_settings(state_dir=state_dir, http={"host": "127.0.0.1", "port": 0, **(http or {})}, **settings)
    return Daemon(
        config,
        clusters={CLUSTER: ClusterConfig(bootstrap_servers=["127.0.0.1:9"], poll_interval_s=1)},
        notifiers=notifiers or {},
        poller_factory=lambda name, cfg: FakePoller(name, cfg, fail=fail),
        reader_factory=None,
    )


def put_alert(daemon: Daemon, group_id: str, rule: str = "stopped", state: str = "firing") -> Alert:
    now = time.time()
    alert = Alert(
        key=f"{CLUSTER}/{group_id}/{rule}",
        rule=rule,
        severity="critical",
        cluster=CLUSTER,
        group=group_id,
        labels={"cluster": CLUSTER, "group": group_id},
        summary=f"{group_id} stopped",
        details={"lag": 40},
        runbook_url=None,
        for_s=0,
        state=state,
        started_at=now - 60,
        updated_at=now,
        fired_at=now - 30 if state == "firing" else None,
    )
    with daemon.book_lock:
        daemon.book.alerts[alert.key] = alert
    return alert


def notification(n: int = 0) -> Notification:
    return Notification(
        id=f"n{n}",
        group_key=f"{CLUSTER}/g1",
        group_labels={"cluster": CLUSTER, "group": "g1"},
        kind=NotificationKind.FIRING,
        severity=Severity.CRITICAL,
        created_at=time.time(),
        alerts=(),
    )
