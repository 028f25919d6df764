"""Demo traffic for the embedded default: a producer and consumer groups in every state lagwatch reports."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from tempfile import mkdtemp
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

ORDERS, PAYMENTS = "demo.orders", "demo.payments"
# Short retention on the demo broker, so that offset-expiry warnings (and then the expiry) show within minutes.
DEMO_RETENTION_MINUTES = 15


def start_demo(settings: Any, cleanup: ExitStack, on_hard_exit: list[Callable[[], None]] | None = None) -> Any:
    """No cluster configured: a local Apache Kafka with demo traffic, and rules tuned to show alerts quickly. The
    broker is killed by `on_hard_exit` (it runs in a session of its own: an exit without the stop left it running)."""
    import sys

    from lagwatch.config import ClusterConfig
    from lagwatch.devbroker import LocalBroker
    from lagwatch.errors import SPARK_EXTRA
    from lagwatch.lake.settings import lake_installed

    print("no cluster configured: starting a local Apache Kafka with demo traffic", file=sys.stderr, flush=True)
    broker = LocalBroker(
        settings={
            "offsets.retention.minutes": str(DEMO_RETENTION_MINUTES),
            "offsets.retention.check.interval.ms": "30000",
        }
    )
    if on_hard_exit is not None:
        on_hard_exit.append(broker.kill)
    cleanup.enter_context(broker)
    traffic = DemoTraffic(broker.bootstrap).start()
    cleanup.callback(traffic.stop)
    print(f"local kafka at {broker.bootstrap}; alerts go to the log", file=sys.stderr, flush=True)
    configured = settings.notifiers
    if configured.slack or configured.slack_webhook or configured.webhooks:
        # Configured notifiers are someone's real channels: the demo's made-up alerts paged them.
        print("lagwatch: the demo's alerts go to the log only, not to the configured notifiers", file=sys.stderr)
    demo_rules = {
        "lag": {
            "warning": {"offsets": 200, "seconds": None},
            "critical": {"offsets": 2000, "seconds": None},
            "for_s": 20,
        },
        "stopped": {"window_s": 30},
        "stalled": {"window_s": 60},
        "falling_behind": {"window_s": 60},
        "rate_window_s": 60,
    }
    base = settings.rules.model_dump()
    for name, values in demo_rules.items():
        base[name] = {**base[name], **values} if isinstance(values, dict) else values
    rules = type(settings.rules).model_validate(base)
    alerts = settings.alerts.model_copy(update={"group_wait_s": 5, "group_interval_s": 30})
    state_dir = Path(mkdtemp(prefix="lagwatch-demo-state-"))
    # The demo's state is of the demo's broker, gone with it: each run left a directory in /tmp.
    cleanup.callback(shutil.rmtree, state_dir, ignore_errors=True)
    if on_hard_exit is not None:
        on_hard_exit.append(lambda: shutil.rmtree(state_dir, ignore_errors=True))
    lake = lake_installed()
    if not lake:
        print(f"lagwatch: the demo records no lake: it needs pyarrow, of {SPARK_EXTRA}", file=sys.stderr, flush=True)
    return settings.model_copy(
        update={
            "clusters": {
                "local": ClusterConfig(bootstrap_servers=[broker.bootstrap], request_timeout_s=10, poll_interval_s=10)
            },
            "rules": rules,
            "alerts": alerts,
            "state_dir": state_dir,
            "http": settings.http.model_copy(update={"host": "127.0.0.1"}),
            "notifiers": type(settings.notifiers)(),  # the log only
            # The demo records its lake (./lake, or a local path configured; never a remote one, someone's real
            # lake), rolled every minute so files show up soon.
            "lake": settings.lake.model_copy(
                update={
                    "enabled": lake,
                    "roll_seconds": 60.0,
                    "path": settings.lake.path if "://" not in settings.lake.path else "lake",
                }
            ),
        }
    )


class DemoTraffic:
    """Threads that keep producing and consuming until stop(); each one a different kind of consumer."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> DemoTraffic:
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            existing = set(admin.list_topics())
            new = [NewTopic(t, n, 1) for t, n in ((ORDERS, 3), (PAYMENTS, 2)) if t not in existing]
            if new:
                admin.create_topics(new)
        finally:
            admin.close()
        for target in (self._produce, self._fast_consumer, self._slow_consumer, self._assigned_consumer):
            self._spawn(target)
        self._stopped_group()
        return self

    def _spawn(self, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=f"demo-{target.__name__}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _produce(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=50)
        n = 0
        while not self._stop.wait(0.05):  # ~20 orders/s, ~5 payments/s
            producer.send(ORDERS, f"order-{n}".encode())
            if n % 4 == 0:
                producer.send(PAYMENTS, f"payment-{n}".encode())
            n += 1
        producer.close()

    def _consumer(self, group: str, **options: Any) -> KafkaConsumer:
        return KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            client_id=group,
            **options,
        )

    def _fast_consumer(self) -> None:
        consumer = self._consumer("demo-fast")
        consumer.subscribe([ORDERS])
        while not self._stop.is_set():
            consumer.poll(500)
        consumer.close()

    def _slow_consumer(self) -> None:
        """Reads 10 records a second while 20 arrive: lag that keeps growing."""
        consumer = self._consumer("demo-slow", max_poll_records=5)
        consumer.subscribe([ORDERS])
        while not self._stop.wait(0.5):
            consumer.poll(200, max_records=5)
        consumer.close()

    def _assigned_consumer(self) -> None:
        """assign() and manual commits: a "simple" group that has no members as far as Kafka knows."""
        consumer = self._consumer("demo-assign", enable_auto_commit=False)
        consumer.assign([TopicPartition(PAYMENTS, 0)])
        while not self._stop.wait(1.0):
            if consumer.poll(200):
                consumer.commit()
        consumer.close()

    def _stopped_group(self) -> None:
        """Reads a few payments, commits and leaves: an Empty group whose lag grows and whose offsets will expire."""
        consumer = self._consumer("demo-stopped", enable_auto_commit=False)
        consumer.subscribe([PAYMENTS])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not consumer.poll(200):
            pass  # commit only once records were read, so that there is a position to commit
        consumer.commit()
        consumer.close()
