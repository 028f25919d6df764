"""EDGE: reads a cluster's `__consumer_offsets` once from the start, then tails it, on a thread of its own.

One consumer per cluster, with no group (nothing is committed, nothing rebalances), read_committed so that offsets
committed by aborted transactions never count. Every record is decoded by the pure core decoder and handed, in
batches, to `sink(records, caught_up)`; the daemon folds them into the cluster's history (exact commit times, the
moment each group became Empty). Where the principal may not read the topic (ACLs, managed services) the reader
says so once and stops: lagwatch then relies on what its polls see.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import kafka.errors as Errors
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from lagwatch.collect.client import admin_client_options
from lagwatch.config import ClusterConfig
from lagwatch.offsets_topic import Record, Undecodable, decode_record

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
BATCH_MAX = 20_000  # records per hand-over: bounds memory while catching up on a large topic
RETRY_S = 10.0  # after a failure other than a denial
DENIED_RETRY_S = 600.0  # ACLs change rarely; look again now and then

Sink = Callable[[Sequence[Record], bool], None]


class ReaderState(StrEnum):
    STARTING = "starting"
    CATCHING_UP = "catching_up"  # reading what the topic held at start; clocks not complete yet
    LIVE = "live"  # caught up once: every commit since is seen within about a second
    DENIED = "denied"  # not authorised to read the topic: polled clocks only
    FAILED = "failed"  # retrying after an error
    STOPPED = "stopped"


@dataclass(frozen=True)
class ReaderStatus:
    state: ReaderState
    records: int
    undecodable: int
    error: str | None


class OffsetsTopicReader:
    def __init__(
        self,
        name: str,
        config: ClusterConfig,
        sink: Sink,
        consumer_factory: Callable[..., Any] = KafkaConsumer,
    ) -> None:
        self.name = name
        self.config = config
        self._sink = sink
        self._consumer_factory = consumer_factory
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lagwatch-offsets-{name}", daemon=True)
        self._state = ReaderState.STARTING
        self._error: str | None = None
        self._records = 0
        self._undecodable = 0

    def status(self) -> ReaderStatus:
        return ReaderStatus(self._state, self._records, self._undecodable, self._error)

    def start(self) -> OffsetsTopicReader:
        self._thread.start()
        return self

    def request_stop(self) -> None:
        """Asks the thread to end, without waiting (a stop asks every cluster's reader at once)."""
        self._stop.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._state = ReaderState.STOPPED

    def _run(self) -> None:
        while not self._stop.is_set():
            consumer = None
            try:
                consumer = self._open()
                if consumer is not None:
                    self._read(consumer)
            except (Errors.TopicAuthorizationFailedError, Errors.AuthorizationError) as e:
                self._fail(ReaderState.DENIED, f"not authorised to read {OFFSETS_TOPIC}: {type(e).__name__}")
            except Exception as e:  # the thread must never die: report, then start over
                self._fail(ReaderState.FAILED, f"{type(e).__name__}: {e}"[:300])
            finally:
                if consumer is not None:
                    with contextlib.suppress(Exception):  # closing a broken consumer may fail too
                        consumer.close()
            self._stop.wait(DENIED_RETRY_S if self._state is ReaderState.DENIED else RETRY_S)

    def _fail(self, state: ReaderState, error: str) -> None:
        if (state, error) != (self._state, self._error):  # once per kind of failure, not once per retry
            level = logging.WARNING if state is ReaderState.DENIED else logging.ERROR
            log.log(
                level,
                "exact commit clocks unavailable: falling back to polled clocks",
                extra={"cluster": self.name, "error": error},
            )
        self._state, self._error = state, error

    def _open(self) -> Any:
        options = admin_client_options(self.name, self.config)
        options.pop("bootstrap_timeout_ms", None)
        timeout_ms = options["request_timeout_ms"]
        consumer = self._consumer_factory(
            **options,
            # KafkaConsumer requires idle timeout > request timeout > fetch wait: request_timeout_s of 540 and up
            # (and under 0.5) turned the exact clocks off with a KafkaConfigurationError.
            connections_max_idle_ms=max(540_000, timeout_ms + 60_000),
            fetch_max_wait_ms=min(500, timeout_ms // 2),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            exclude_internal_topics=False,
        )
        partitions = consumer.partitions_for_topic(OFFSETS_TOPIC)
        if not partitions:
            consumer.close()
            # A new cluster where no group has committed yet; not a failure.
            self._state, self._error = ReaderState.STARTING, f"{OFFSETS_TOPIC} does not exist yet"
            return None
        assigned = [KafkaTopicPartition(OFFSETS_TOPIC, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        return consumer

    def _read(self, consumer: Any) -> None:
        assigned = list(consumer.assignment())
        ends = consumer.end_offsets(assigned)
        caught_up = announced = False
        self._state, self._error = ReaderState.CATCHING_UP, None
        started = time.monotonic()
        while not self._stop.is_set():
            polled = consumer.poll(timeout_ms=500, max_records=BATCH_MAX)
            batch: list[Record] = []
            for records in polled.values():
                for r in records:
                    decoded = decode_record(r.key, r.value)
                    self._undecodable += isinstance(decoded, Undecodable)
                    batch.append(decoded)
            self._records += len(batch)
            if not caught_up:
                caught_up = all(consumer.position(tp) >= ends.get(tp, 0) for tp in assigned)
                if caught_up:
                    self._state = ReaderState.LIVE
                    log.info(
                        "exact commit clocks ready",
                        extra={
                            "cluster": self.name,
                            "records": self._records,
                            "seconds": round(time.monotonic() - started, 1),
                        },
                    )
            if batch or (caught_up and not announced):
                self._sink(batch, caught_up)
                announced = caught_up
