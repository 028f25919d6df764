"""Wiring: the one module that knows every stage.

Each cluster has its own APScheduler job on its own worker thread:
    collect (poll) -> ClusterPipeline.step (history -> rules -> alert lifecycle) -> due -> outbox -> notify
A slow cluster delays only itself; notifiers run on their own thread. State is saved atomically after every
change of alerts or outbox, and history every `history_save_interval_s` and at shutdown.
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor as Executor
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from lagwatch import CORE, gc_policy, malloc_policy
from lagwatch.alerts import Alert, AlertBook, AlertState, Notification, Silence, restart
from lagwatch.clock import SteadyClock
from lagwatch.collect import ClusterPoller
from lagwatch.collect.offsets_reader import OffsetsTopicReader
from lagwatch.config import ClusterConfig, Settings
from lagwatch.history import ClusterHistory, compact_records
from lagwatch.notify import Dispatcher, Notifier, Outbox, WorkerHealth, build_notifiers, receivers_of
from lagwatch.notify.outbox import Delivery
from lagwatch.offsets_topic import Record
from lagwatch.rules import RuleResolver
from lagwatch.runtime import ClusterRuntime
from lagwatch.serve import health, metrics
from lagwatch.serve.http import HttpServer
from lagwatch.serve.settings import HttpConfig
from lagwatch.state import StateClosedError, StateStore
from lagwatch.step import ClusterPipeline

if TYPE_CHECKING:
    from lagwatch.lake.writer import LakeWriter

log = logging.getLogger("lagwatch.daemon")
TICK_S = 5.0  # how often alert groups are checked for due notifications between polls
# A stop fits Kubernetes' default 30-s grace period: all its waits together take at most STOP_BUDGET_S (what
# cannot be interrupted, a write to a frozen disk, is ended by `lagwatch run` at its hard limit).
STOP_BUDGET_S = 24.0
# At a stop, for notifier sends under way: a send cut short is sent again at the next start (or, for Slack,
# looked for first), so it is let finish when it can.
SEND_STOP_WAIT_S = 10.0
# At a stop, for the last history saves: 3-4 s at 1M group-partitions; a hung disk must not hold the stop.
HISTORY_STOP_WAIT_S = 12.0


# After a start from state older than the last run's: how far back Slack is searched for the message of an incident
# still firing (an incident open longer than this is announced again).
LOST_STATE_LOOKBACK_S = 7 * 86400.0


class Daemon:
    def __init__(
        self,
        settings: Settings,
        clusters: Mapping[str, ClusterConfig] | None = None,
        notifiers: Mapping[str, Notifier] | None = None,
        clock: Callable[[], float] | None = None,
        poller_factory: Callable[[str, ClusterConfig], Any] | None = None,
        reader_factory: Callable[..., Any] | None = OffsetsTopicReader,
    ) -> None:
        self.settings = settings
        # Never back, even when the host's clock is stepped back (lagwatch.clock); tests give their own.
        self.clock: Callable[[], float] = clock if clock is not None else SteadyClock()
        if poller_factory is None:
            poller_factory = partial(ClusterPoller, clock=self.clock)  # polls dated by the same clock
        self.store = StateStore(settings.state_dir).open()
        self.resolver = RuleResolver(settings.rules)
        self.book_lock = threading.RLock()
        # Set first thing at a stop: a poll or tick that comes back after it takes nothing further (the last save
        # is under way or done, and the state database closed: a poll that returned then raised on it).
        self._stopping = threading.Event()
        self.polls_under_way: list[str] = []  # clusters whose poll outlasted the stop's grace
        self.state_failures = 0  # saves the disk refused
        # Alert groups whose notification log a delivery changed, saved with the delivery's outbox rows.
        self._groups_unsaved: dict[str, Any] = {}
        self._state_owed = False  # the last save failed: memory is ahead of the disk
        # Compresses and writes the histories off the poll threads (zlib and SQLite let go of the GIL meanwhile).
        self.history_writer = Executor(max_workers=1, thread_name_prefix="history-writer")
        configured = build_notifiers(settings) if notifiers is None else {}
        self.notifiers: dict[str, Notifier] = (
            dict(notifiers) if notifiers is not None else {name: n for name, (n, _) in configured.items()}
        )
        self.routes = {name: route for name, (_, route) in configured.items()}
        cluster_configs = clusters if clusters is not None else settings.clusters
        self.book, self.outbox = self._load_alerts(cluster_configs)
        self.dispatcher = Dispatcher(
            self.outbox,
            self.notifiers,
            self.save_outbox,
            self.clock,
            max_age_s=settings.notifiers.max_age_s,
            given_up=self._undelivered,
            on_delivered=self._delivered,
        )
        self.clusters = {
            name: ClusterRuntime(name, cfg, poller_factory(name, cfg), self._load_history(name, cfg))
            for name, cfg in cluster_configs.items()
        }
        for runtime in self.clusters.values():
            remember = getattr(runtime.poller, "remember_groups", None)  # a test's stand-in poller may not
            if remember is not None:  # a group missing from the first ListGroups is asked of its coordinator
                remember({g: t.kind for g, t in runtime.history.groups.items() if t.gone_since is None})
            if reader_factory is not None and runtime.config.exact_clocks:
                runtime.offsets_reader = reader_factory(runtime.name, runtime.config, self._exact_clock_sink(runtime))
        self.pipelines = {
            name: ClusterPipeline.build(
                name,
                self.resolver,
                self.book,
                history=runtime.history,
                poll_interval_s=runtime.config.poll_interval_s,
                max_gap_s=runtime.config.max_gap_s,
                read_committed=runtime.config.read_committed,
                book_lock=self.book_lock,
            )
            for name, runtime in self.clusters.items()
        }
        self.scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(max_workers=len(self.clusters) + 1)},
            job_defaults={"coalesce": True, "max_instances": 1},
            timezone="UTC",
        )
        self.scheduler.add_listener(self._on_job_event, EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED | EVENT_JOB_ERROR)
        self.on_poll: list[Callable[[ClusterRuntime], None]] = []  # demo table, tests
        self._metrics = metrics.EMPTY
        self._cluster_series: dict[str, list[metrics.FamilyPart]] = {}  # each cluster's, from its last poll
        self._metrics_lock = threading.Lock()
        self.http: HttpServer | None = None
        self.lake = self._open_lake()

    # -- state ------------------------------------------------------------------------------------------------------

    def _load_alerts(self, clusters: Iterable[str]) -> tuple[AlertBook, Outbox]:
        """The alert book and the outbox as the last run left them (lagwatch.alerts.restart says what a start
        changes in them); here, what touches the disk, the notifiers and the log."""
        raw = self.store.read_alerts()
        if self.store.db.lost_state:
            # Messages of incidents the last run announced may be there: found and updated, not announced again.
            for notifier in self.notifiers.values():
                recover = getattr(notifier, "recover_messages_since", None)
                if recover is not None:
                    recover(self.clock() - LOST_STATE_LOOKBACK_S)
        odd: list[tuple[str, str, Any]] = []
        outbox = Outbox.from_json(raw.get("outbox"), odd)
        if self.store.db.unclean_stop or self.store.db.lost_state:
            self._doubt_deliveries(outbox)
        for key, why, _ in odd:  # only these: every other queued notification is still delivered
            log.error("queued notification of an unknown shape set aside", extra={"key": key, "error": why})
            self.store.db.set_aside("outbox", key, why)
        restored = restart.restore(
            self.settings.alerts,
            raw["book"],
            receivers_of(self.notifiers, self.routes),
            now=self.clock(),
            lost_state=self.store.db.lost_state,
            queued=[d.notification for d in outbox.deliveries],
            unread_queued=[q for _, _, row in odd if (q := restart.unread_queued(row)) is not None],
            labels_of=lambda a: self.resolver.labels(a.cluster, a.group, a.labels.get("topic")),
            clusters=clusters,
        )
        book = restored.book
        self.store.db.sequence_moved_at_start(book.sequence)
        for table, key, why in restored.rejected:
            # Never crash on it, never wipe the rest silently: kept aside for inspection.
            log.error("saved alert state of an unknown shape set aside", extra={"table": table, "key": key})
            self.store.db.set_aside(table, key, f"unknown shape: {why}")
        if restored.relabelled:  # the configuration's labels changed since they were saved: the incidents go on
            log.info(
                "alerts go on under the labels the configuration now gives them (the old labels resolve)",
                extra={"alerts": restored.relabelled},
            )
        for cluster, firing in restored.resolved_clusters.items():
            log.warning(
                "alerts of a cluster no longer configured resolved", extra={"cluster": cluster, "alerts": firing}
            )
        if book.alerts or outbox.deliveries:
            log.info(
                "alert state restored",
                extra={"alerts": len(book.alerts), "queued_notifications": len(outbox.deliveries)},
            )
        return book, outbox

    def _undelivered(self, delivery: Delivery) -> list[Notification]:
        """On a notifier's worker, a delivery given up (refused for good, or too old): it and those queued behind it
        in its lane leave the outbox, and the alert book undoes what they told its receiver, under the book's lock
        (no poll decides in between on what they said), saved at once (after a crash, the receiver was counted as
        told of them again)."""
        with self.book_lock:
            dropped = self.outbox.give_up(delivery)
            self.book.undelivered(dropped)
            self.save_alerts()
        return dropped

    def _doubt_deliveries(self, outbox: Outbox) -> None:
        """The last run was killed, or its saves were failing (a full disk), or this state is an older copy: a
        queued notification may have been delivered after the state on disk was saved, the delivery never
        recorded. Each is looked for before it is sent again, by the notifiers that can look (Slack); the others
        send it again, with its id."""
        doubted = 0
        for delivery in outbox.deliveries:
            if not delivery.in_flight and getattr(self.notifiers.get(delivery.notifier), "checks_duplicates", False):
                delivery.in_flight = True
                outbox.touch(delivery)
                doubted += 1
        if doubted:
            log.warning(
                "the last run did not stop cleanly: queued notifications it may have delivered are looked for "
                "before they are sent",
                extra={"notifications": doubted},
            )

    def save_alerts(self, figures: bool = False) -> None:
        """Saves what changed (with `figures`, the alerts' current summaries too: StateDatabase.save). A disk that
        refuses is counted and logged once per streak; alerting goes on from memory and the next save writes
        everything still owed."""
        with self.book_lock:
            try:
                self.store.save_alerts(self.book, self.outbox, figures)
                self._groups_unsaved = {}  # every group's row as it is now
            except (sqlite3.Error, OSError) as e:
                self.state_failures += 1
                if not self._state_owed:
                    log.error("saving the alert state failed; alerting goes on from memory", extra={"error": str(e)})
                self._state_owed = True
                return
            if self._state_owed:
                log.warning("alert state saved again", extra={"failed_saves": self.state_failures})
            self._state_owed = False

    def _delivered(self, delivery: Delivery, ref: dict[str, Any] | None) -> None:
        """On a notifier's worker, a delivery that succeeded: it leaves the outbox and the notification log records
        what its receiver now has, together (no poll decides in between on half of it); the worker's save then
        writes both in one transaction (save_outbox)."""
        with self.book_lock:
            self.outbox.done(delivery, ref)
            changed = self.book.delivered(delivery.notification)
            if changed is not None:
                self._groups_unsaved[changed[0]] = changed[1]

    def save_outbox(self) -> None:
        """After a delivery: the outbox rows, and the alert groups deliveries changed (the notifier workers count
        and retry failures). A crash before it: the notification is still queued, and the log says what its
        receiver will have once it is (Slack looks for it before sending it again)."""
        with self.book_lock:  # the groups' rows are written from the book's memory
            groups, self._groups_unsaved = self._groups_unsaved, {}
            try:
                self.store.save_alerts(None, self.outbox, groups=groups)
            except StateClosedError:  # a send that outlasted the stop's wait for it: a known outcome, not a failure
                log.warning(
                    "a notification's delivery ended after lagwatch stopped, and is not saved: the next start sends "
                    "it again (Slack looks for it first)"
                )
            except BaseException:
                self._groups_unsaved = {**groups, **self._groups_unsaved}  # written with the next save
                raise

    def _load_history(self, name: str, config: ClusterConfig) -> ClusterHistory:
        history = None
        for raw in self.store.read_history(name):
            try:
                history = ClusterHistory.from_json(raw)
                # What a restart starts from, and what its memory will be about (0.2 KB a group-partition).
                log.info(
                    "history loaded",
                    extra={
                        "cluster": name,
                        "groups": len(history.groups),
                        "group_partitions": sum(len(t.partitions) for t in history.groups.values()),
                        "partitions": len(history.log_ends),
                        "polls": history.polls,
                    },
                )
                break
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                log.error("history unreadable, trying the one saved before", extra={"cluster": name, "error": str(e)})
        if history is None:
            history = ClusterHistory(name)
        checkpoints = config.checkpoint_consumers  # polled whatever the groups filter says
        dropped = history.forget_unwatched(
            lambda g: g in checkpoints or config.groups.matches(g), config.topics.matches
        )
        if dropped:
            log.info(
                "history of groups and topics no longer watched let go",
                extra={"cluster": name, "group_partitions": dropped},
            )
        if isinstance(self.clock, SteadyClock) and history.last_ok_poll is not None:
            # Saved under a host clock since set back: the next polls must still come after the saved ones.
            self.clock.not_before(history.last_ok_poll)
        return history

    def save_history(self, runtime: ClusterRuntime, wait_s: float | None = None) -> None:
        """Hands the save to the history writer, which captures the history under the cluster's lock (between two
        of its steps), then compresses and writes it: the poll thread is done without it (the capture was 0.15 s
        of a 100k-group-partition step). A save still under way when the next one is due puts that one off to
        the next poll. `wait_s` (a stop): wait that long for the save under way and then for this one; a disk
        that hangs longer must not hold the stop."""
        deadline = time.monotonic() + (wait_s or 0.0)
        under_way = runtime.history_write
        if under_way is not None and not under_way.done() and (wait_s is None or not _wait(under_way, deadline)):
            hung = runtime.history_write_hung_s(time.monotonic())
            if hung is not None and not runtime.history_owed:  # once per streak; /readyz says so meanwhile
                runtime.history_owed = True
                log.error(
                    "saving history hangs (the disk neither answers nor fails)",
                    extra={"cluster": runtime.name, "seconds": round(hung)},
                )
            return
        runtime.history_saved_at = self.clock()  # a failure waits for the next interval, not the next poll
        runtime.history_write_started = time.monotonic()
        runtime.history_write = self.history_writer.submit(self._write_history, runtime)
        if wait_s is not None and not _wait(runtime.history_write, deadline):
            log.error("saving history at stop timed out; the previous save stays", extra={"cluster": runtime.name})

    def _write_history(self, runtime: ClusterRuntime) -> None:
        try:
            with runtime.lock:  # the history as one step left it: steps change it under this lock
                capture = runtime.history.capture()
            self.store.write_history(runtime.name, capture.to_json())
        except Exception as e:
            self.state_failures += 1
            if not runtime.history_owed:  # once per streak: a full disk fails this every interval
                # A disk's refusal is expected; anything else is a bug, logged with its traceback.
                expected = isinstance(e, sqlite3.Error | OSError)
                log.error(
                    "saving history failed; it stays in memory",
                    extra={"cluster": runtime.name, "error": str(e)},
                    exc_info=not expected,
                )
            runtime.history_owed = True
            return
        if runtime.history_owed:
            log.warning("history saved again", extra={"cluster": runtime.name})
        runtime.history_owed = False

    # -- the pipeline -----------------------------------------------------------------------------------------------

    def _exact_clock_sink(self, runtime: ClusterRuntime) -> Callable[[Sequence[Record], bool], None]:
        recording = self.settings.lake.enabled

        def sink(records: Sequence[Record], caught_up: bool) -> None:
            lead = self.clock.ahead_s if isinstance(self.clock, SteadyClock) else 0.0
            with runtime.lock:  # between two polls of the cluster, never during one
                runtime.history.observe_records(records, caught_up, lead)
                if recording:  # the lake records them with the next poll: the replay's step gets them alike
                    runtime.lake_records.extend(records)
                    runtime.lake_records_caught_up = runtime.lake_records_caught_up or caught_up

        return sink

    def poll_cluster(self, name: str) -> None:
        runtime = self.clusters[name]
        # `polling` is held for the whole poll and step: a stop waits for it (up to its grace).
        with runtime.polling, gc_policy.paused():  # what a poll leaves is frozen after it
            if not self._stopping.is_set():
                self._poll_cluster(name)

    def _poll_cluster(self, name: str) -> None:
        runtime = self.clusters[name]
        snapshot = runtime.poller.poll()
        if self._stopping.is_set():
            return  # a stop began while it ran: not taken (the stop saves what was before it)
        with runtime.lock:
            records, caught_up = runtime.take_lake_records()
            # A poll the step holds (dated before the last, after a large host clock step back) leaves the last
            # poll's figures to the exporter and the API: blanked, they resolved the lag alerts Prometheus
            # evaluates on them for as long as the step.
            held = self.pipelines[name].holds(snapshot)
            # The last evaluation is let go before the next is built: at 100k group-partitions, holding both
            # during the step was 35 MB more RSS for good (bench/README.md). The exporter keeps this cluster's
            # series from the last render, and the API waits on this lock for the pair (ClusterRuntime.published).
            if not held:
                runtime.evaluation = None
            evaluation = self.pipelines[name].step(snapshot)
            # Kept for the exporter and the API (measures, expiries), not the findings: the book holds what they
            # said, and at 10,000 alerting groups they are tens of MB, held through the next poll as well.
            if not held:
                runtime.latest, runtime.evaluation = snapshot, dataclasses.replace(evaluation, findings=())
        if self.lake is not None:  # only the records whose effect the replay needs (a few per key, not thousands)
            self.lake.record_poll(snapshot, evaluation, compact_records(records), caught_up)
        with self.book_lock:
            if self.lake is not None:  # before _flush: the transitions this step made, then notifications
                self.lake.record_transitions(snapshot, evaluation, self.book)
            if not self._stopping.is_set():  # else the stop's own last save keeps what this step changed
                self._flush(self.clock())
        for kind, count in runtime.unwatched_news(snapshot.unwatched_groups).items():
            log.warning(
                f"{count} {kind} group(s) on this cluster are not watched: lagwatch cannot read them here "
                f"(see /api/v1/clusters and lagwatch_groups_unwatched)",
                extra={"cluster": name, "group_type": kind, "groups": count},
            )
        for spot, why in runtime.blind_spot_news(snapshot.blind_spots).items():
            log.warning(
                f"on this cluster, {why} (see /api/v1/clusters and lagwatch_blind_spot)",
                extra={"cluster": name, "blind_spot": spot},
            )
        findings = len(evaluation.findings)
        runtime.polls += 1
        if snapshot.ok:
            runtime.last_success = snapshot.taken_at
        else:
            runtime.failed_polls += 1
        log.info(
            "poll" if snapshot.ok else "poll failed",
            extra={
                "cluster": name,
                "duration_ms": round(snapshot.duration_s * 1000, 1),
                "groups": len(snapshot.groups),
                "partitions": len(snapshot.partitions),
                "requests": sum(snapshot.requests.values()),
                "findings": findings,
                **({"error_kind": snapshot.error_kind, "error": snapshot.error} if not snapshot.ok else {}),
            },
        )
        self.render_metrics(name)
        if self.clock() - runtime.history_saved_at >= self.settings.history_save_interval_s:
            self.save_history(runtime)
        for callback in self.on_poll:
            callback(runtime)
        gc_policy.after_poll()
        malloc_policy.after_poll()

    def _open_lake(self) -> LakeWriter | None:
        """The lake writer (pyarrow is imported only when the lake is on), with the configuration in force."""
        if not self.settings.lake.enabled:
            return None
        from lagwatch.lake.writer import LakeWriter

        lake = LakeWriter(self.settings.lake, self.clock)
        rules, alerts = self.settings.rules.model_dump(mode="json"), self.settings.alerts.model_dump(mode="json")
        for name, runtime in self.clusters.items():
            lake.record_config(
                name,
                rules,
                alerts,
                runtime.history.max_gap_s,
                runtime.config.read_committed,
                runtime.config.poll_interval_s,
                self.book,
            )
        return lake

    def render_metrics(self, cluster: str | None = None) -> None:
        """Once per poll, so that a scrape (or two Prometheus replicas) costs nothing but sending bytes. A poll
        renders its own cluster's series (`cluster`); the other clusters' series are those of their last poll.
        Without `cluster`, every cluster's anew (at start)."""
        rendered = {
            name: metrics.render_cluster(rt) for name, rt in self.clusters.items() if cluster is None or name == cluster
        }
        # Two clusters' polls may end at once: each keeps the other's series, and the daemon-wide series (alerts,
        # notifications) are read under the same lock, so the last body assembled also has the newest of them.
        with self._metrics_lock:
            self._cluster_series.update(rendered)
            self._metrics = metrics.assemble(
                [self._cluster_series.get(name, ()) for name in self.clusters], self._render_daemon()
            )

    def _render_daemon(self) -> list[metrics.FamilyPart]:
        with self.book_lock:
            alerts = list(self.book.alerts.values())
        stats = {
            "queued": self.outbox.pending(),
            "delivered": self.dispatcher.delivered,
            "failed": self.dispatcher.failed_attempts,
            "state_save_failures": self.state_failures,
            "state_damage_found": len(self.store.db.damage),
            "state_rows_set_aside": self.store.db.rows_set_aside,
            "state_writable": int(not self.store.db.read_only and not self._state_owed),
            "collapsed": self.outbox.collapsed,
            **(
                {"clock_steps_back": self.clock.steps_back, "clock_ahead_seconds": self.clock.ahead_s}
                if isinstance(self.clock, SteadyClock)
                else {}
            ),
            **(
                {
                    "lake_write_failures": self.lake.stats.write_failures,
                    "lake_dropped_rows": self.lake.stats.dropped_rows,
                    "lake_buffered_rows": self.lake.stats.buffered_rows,
                }
                if self.lake is not None
                else {}
            ),
        }
        return metrics.render_daemon(alerts, stats)

    def metrics_body(self) -> bytes:
        """The per-poll body as text (a scrape without gzip, the tests)."""
        return self._metrics.plain()

    def metrics_gzip(self, tail: bytes) -> bytes:
        """The per-poll body and `tail` as one gzip stream, without decompressing the body."""
        return self._metrics.gzip_with(tail)

    def metrics_chunks(self, tail: bytes, gzip: bool) -> Iterator[bytes]:
        """The per-poll body and `tail`, gzipped or as text, a piece at a time (a scrape's answer)."""
        rendered = self._metrics
        return rendered.gzip_chunks(tail) if gzip else rendered.plain_chunks(tail)

    # -- what the HTTP side may ask (lagwatch.serve.service.Service) --------------------------------------------------

    @property
    def http_settings(self) -> HttpConfig:
        return self.settings.http

    def now(self) -> float:
        return self.clock()

    def runtimes(self) -> Mapping[str, ClusterRuntime]:
        return self.clusters

    def alerts(
        self, cluster: str | None = None, group: str | None = None, state: AlertState | None = None
    ) -> list[tuple[Alert, Silence | None]]:
        now = self.clock()
        with self.book_lock:
            return [
                (dataclasses.replace(a), self.book.silenced(a, now))
                for a in sorted(self.book.alerts.values(), key=lambda a: (a.cluster, a.group or "", a.rule))
                if (cluster is None or a.cluster == cluster) and (group is None or a.group == group)
                and (state is None or a.state == state)
            ]  # fmt: skip

    def silences(self, include_ended: bool = False) -> list[Silence]:
        now = self.clock()
        with self.book_lock:
            return [s for s in self.book.silences if include_ended or s.ends_at > now]

    def add_silence(self, silence: Silence) -> None:
        with self.book_lock:
            self.book.silences.append(silence)
            self.save_alerts()

    def delete_silence(self, silence_id: str) -> None:
        with self.book_lock:
            self.book.silences = [s for s in self.book.silences if s.id != silence_id]
            self.save_alerts()

    def scheduler_running(self) -> bool:
        return health.scheduler_running(self.scheduler)

    def notifiers_supervised(self) -> bool:
        return self.dispatcher.supervising

    def worker_health(self) -> dict[str, WorkerHealth]:
        return self.dispatcher.health()

    def state_owed(self) -> bool:
        return self._state_owed

    def state_notes(self) -> list[str]:
        return health.state_notes(self.store.db)

    def tick(self) -> None:
        """Sends notifications that came due without a poll (group_wait, group_interval, repeat_interval)."""
        with self.book_lock:
            if not self._stopping.is_set():
                self._flush(self.clock())

    def _flush(self, now: float) -> None:
        # The dispatcher takes deliveries under the outbox's lock: holding it until the state is on disk means a
        # crash can re-send from the saved outbox, never decide (and send) the same notification twice.
        with self.outbox.changed:
            notifications = self.book.due(now)
            for n in notifications:
                self.outbox.add([n], [n.receiver])
            # The database writes only the rows whose state changed: after most polls, nothing at all.
            self.save_alerts()

    def _on_job_event(self, event: JobExecutionEvent) -> None:
        runtime = self.clusters.get(event.job_id.removeprefix("poll:"))
        if event.code == EVENT_JOB_ERROR:
            log.error("job failed", extra={"job": event.job_id, "error": repr(event.exception)})
        elif runtime is not None and event.code == EVENT_JOB_MAX_INSTANCES:
            runtime.skipped_polls += 1
            log.warning("poll skipped: the previous one is still running", extra={"cluster": runtime.name})
        elif runtime is not None and event.code == EVENT_JOB_MISSED:
            runtime.missed_polls += 1
            log.warning("poll missed its start time", extra={"cluster": runtime.name})

    # -- lifecycle --------------------------------------------------------------------------------------------------

    def start(self) -> Daemon:
        self.render_metrics()
        if self.settings.http.enabled:
            self.http = HttpServer(self).start()
            log.info("http listening", extra={"address": self.http.address})
        self.dispatcher.start()
        if self.lake is not None:
            self.lake.start()
        for runtime in self.clusters.values():
            if runtime.offsets_reader is not None:
                runtime.offsets_reader.start()
        for name, runtime in self.clusters.items():
            interval = runtime.config.poll_interval_s
            self.scheduler.add_job(
                self.poll_cluster,
                "interval",
                args=[name],
                id=f"poll:{name}",
                seconds=interval,
                next_run_time=datetime.now(UTC),
                misfire_grace_time=max(1, int(interval / 2)),
            )
        self.scheduler.add_job(self.tick, "interval", id="tick", seconds=TICK_S)
        # Cycles are collected here, not by CPython's automatic full collections (lagwatch.gc_policy).
        self.scheduler.add_job(gc_policy.full_collection, "interval", id="gc", seconds=gc_policy.FULL_EVERY_S)
        self.scheduler.start()
        log.info(
            "lagwatch running",
            extra={"clusters": list(self.clusters), "notifiers": list(self.notifiers), "core": CORE},
        )
        return self

    def stop(self, grace_s: float = 5.0) -> None:
        """Stops polling, waits up to `grace_s` for polls under way, then saves everything; every wait within one
        budget (STOP_BUDGET_S), not one after the other (40 unreachable clusters' readers took 0.5 s each)."""
        budget_end = time.monotonic() + STOP_BUDGET_S

        def left(cap: float) -> float:
            return max(0.0, min(cap, budget_end - time.monotonic()))

        self._stopping.set()
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        for runtime in self.clusters.values():  # all asked at once, waited for below
            if runtime.offsets_reader is not None:
                runtime.offsets_reader.request_stop()
        http_stop = None
        if self.http is not None:  # a slow client may hold the server's shutdown for seconds: meanwhile, go on
            http_stop = threading.Thread(target=self.http.stop, name="lagwatch-http-stop", daemon=True)
            http_stop.start()
        deadline = time.monotonic() + left(grace_s)
        for name, runtime in self.clusters.items():
            if runtime.polling.acquire(timeout=max(0.0, deadline - time.monotonic())):
                runtime.polling.release()
            else:  # it takes nothing once stopping (poll_cluster); `lagwatch run` does not wait for it to return
                self.polls_under_way.append(name)
        self.dispatcher.stop(timeout=left(SEND_STOP_WAIT_S))
        # Asked to stop at the start: the polls' deadline for them all (they too may wait on brokers that never
        # answer), and half a second more at least for one that is just ending.
        readers_until = max(deadline, time.monotonic() + left(0.5))
        for runtime in self.clusters.values():
            if runtime.offsets_reader is not None:
                runtime.offsets_reader.stop(timeout=max(0.0, readers_until - time.monotonic()))
        saves_until = time.monotonic() + left(HISTORY_STOP_WAIT_S)  # one deadline for all clusters' last saves
        for runtime in self.clusters.values():
            self.save_history(runtime, wait_s=max(0.0, saves_until - time.monotonic()))
            runtime.poller.close()
        self.history_writer.shutdown(wait=False)
        self.save_alerts(figures=True)  # the summaries as they are now: a resolve after the restart shows them
        if self.lake is not None:
            self.lake.stop(timeout=left(10.0))
        if http_stop is not None:
            http_stop.join(left(5.0))
        self.store.close(clean=not self._state_owed)
        log.info("lagwatch stopped", extra={"queued_notifications": self.outbox.pending()})


def _wait(future: Future[None], deadline: float) -> bool:
    """Whether `future` finished by `deadline` (monotonic)."""
    try:
        future.result(timeout=max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        return False
    return True
