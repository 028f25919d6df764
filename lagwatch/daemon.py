"""Wiring: polls every cluster on its interval and reports what it sees.

For now this prints the lag table each poll; the scheduler, rules and alerts plug in here.
"""

from __future__ import annotations

import sys
import threading
from contextlib import ExitStack

from lagwatch.check import lags_of, render_table
from lagwatch.collect import ClusterPoller
from lagwatch.config import ClusterConfig, Settings

DEMO_INTERVAL_S = 10.0


def run_watch(settings: Settings, stop: threading.Event, interval: float | None = None) -> int:
    with ExitStack() as cleanup:
        clusters = dict(settings.clusters)
        if not clusters:
            clusters = {"local": _embedded_default(cleanup)}
            interval = interval or DEMO_INTERVAL_S
        pollers = {name: ClusterPoller(name, c) for name, c in clusters.items()}
        for poller in pollers.values():
            cleanup.callback(poller.close)
        wait = interval or min(c.poll_interval_s for c in clusters.values())
        while not stop.is_set():
            for name, poller in pollers.items():
                snapshot = poller.poll()
                if snapshot.ok:
                    print(render_table(snapshot, lags_of(snapshot, clusters[name].read_committed)), flush=True)
                else:
                    print(
                        f"cluster {name}: {snapshot.error_kind}: {snapshot.error}",
                        file=sys.stderr,
                        flush=True,
                    )
            print(flush=True)
            stop.wait(wait)
    return 0


def _embedded_default(cleanup: ExitStack) -> ClusterConfig:
    """No cluster configured: a local Apache Kafka with demo traffic, so there is something to watch."""
    from lagwatch.devbroker import LocalBroker
    from lagwatch.devbroker.demo import DemoTraffic

    print("no cluster configured: starting a local Apache Kafka with demo traffic", file=sys.stderr, flush=True)
    broker = cleanup.enter_context(LocalBroker())
    traffic = DemoTraffic(broker.bootstrap).start()
    cleanup.callback(traffic.stop)
    print(f"local kafka at {broker.bootstrap}", file=sys.stderr, flush=True)
    return ClusterConfig(bootstrap_servers=[broker.bootstrap], request_timeout_s=10)
