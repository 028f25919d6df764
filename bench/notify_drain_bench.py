"""Issue #7: 10,000 notifications queued at once cost polls nothing, and drain at the notifiers' own rate limits.

One run, no Kafka: a Daemon (the daemon's own code: Daemon.poll_cluster, its outbox, its dispatcher with one worker
per notifier, the state database) is fed synthetic snapshots of G groups x 1 partition. All groups start lagging in
the same poll, so every group's first notification is queued at once, for two notifiers:

- `slack`: the real SlackNotifier (slack-sdk) against tests/fake_slack.py on loopback, which enforces a limit like
  Slack's chat.postMessage: about one message per second per channel (a token bucket per channel, `--burst`), and a
  429 with Retry-After when exceeded. The groups are routed to `--channels` channels by rule overrides (a
  `slack_channel` label, as a team would route them), so the drain's ceiling is channels x per-channel rate. At
  Slack's real 1/s per channel, 10,000 messages in one channel take ~3 hours: more channels (default 50, so 50
  messages/s in all) let the drain finish in minutes with the limit and lagwatch's pacing (1 s per channel) as
  they are. `--channel-rate R` runs the fake faster per channel and scales lagwatch's pacing (PACE_S = 1/R) with it.
- `webhook:bench`: the generic JSON webhook notifier against a plain receiver on loopback that answers at once
  (`--webhook-delay-s` to slow it): the fast receiver must not wait for the rate-limited one.

The receivers run in a child process, as remote servers would, so that the daemon's process is measured alone.

Phases, each poll timed (Daemon.poll_cluster wall time, one poll every `--poll-every` s in every phase):
  healthy   no alerts, empty outbox (after a first, untimed-in-the-medians poll that resolves the rule overrides)
  incident  the poll that queues every notification (G per notifier)
  firing    the same alerts, the queued deliveries set aside by the bench: the baseline for the next two
  queued    the deliveries put back, the dispatcher not started yet: the cost of the outbox's size alone
  draining  the dispatcher started; polls go on until both queues are empty, or `--max-drain-s` (then the time
            to drain the rest is extrapolated from the rate measured so far, and said to be)
  after     drained: the same alerts, an empty outbox again

At the end the receivers' own records are checked: every queued notification arrived exactly once (per Slack
message key, per webhook notification id), the drain rate per 10 s window, the 429s answered.

    python bench/notify_drain_bench.py                          # 10,000 groups, 50 channels at 1/s
    python bench/notify_drain_bench.py --groups 2000 --channels 20
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lagwatch.config import ClusterConfig, load_settings
from lagwatch.daemon import Daemon
from lagwatch.model import (
    BrokerSettings,
    ClusterSnapshot,
    CommittedOffset,
    GroupKind,
    GroupSnapshot,
    PartitionOffsets,
    TopicPartition,
)
from lagwatch.notify import Delivery, Outbox
from lagwatch.notify import slack as slack_module
from lagwatch.notify.settings import SlackConfig, WebhookConfig
from lagwatch.notify.slack import SlackNotifier
from lagwatch.notify.webhook import WebhookNotifier
from lagwatch.state import StateStore

GROUPS_PER_TOPIC = 10
LOG_END = 1_000_000
LAG = 5_000  # offsets behind once the incident starts (the lag rule's warning is at 100)
WINDOW_S = 10.0  # drain rate windows
SLACK, WEBHOOK = "slack", "webhook:bench"
OTHER_RULES = ("stalled", "stopped", "falling_behind", "rewind", "expiry", "expired", "below_log_start")


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the receivers, in a child process ---------------------------------------------------------------------------


class _WebhookReceiver:
    """Records the id of every lagwatch webhook body it receives, with the time (time.monotonic, system-wide)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.received: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)
                with receiver.lock:
                    receiver.received.append((time.monotonic(), str(body.get("id"))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"


def receivers_main(conn: Connection, channel_rate: float, burst: float, webhook_delay_s: float) -> None:
    from tests.fake_slack import FakeSlack

    fake = FakeSlack(post_rate_per_s=channel_rate, post_burst=burst).start()
    hook = _WebhookReceiver(webhook_delay_s)
    conn.send({"slack_url": fake.base_url, "token": fake.token, "webhook_url": hook.url})
    while True:
        command = conn.recv()
        if command == "counts":
            with fake._lock:
                posted = sum(1 for c in fake.calls if c.method == "chat.postMessage" and c.status == 200)
                limited = sum(1 for c in fake.calls if c.status == 429)
            with hook.lock:
                hooked = len(hook.received)
            conn.send((posted, limited, hooked))
        elif command == "report":
            with fake._lock:
                calls = [(c.method, c.at, c.status, c.error) for c in fake.calls]
                messages = [
                    (channel, m["metadata"]["event_payload"]["key"] if m.get("metadata") else None)
                    for channel, ms in fake.messages.items()
                    for m in ms
                ]
            with hook.lock:
                received = list(hook.received)
            conn.send({"calls": calls, "messages": messages, "webhook": received})
        else:
            fake.stop()
            hook.server.shutdown()
            conn.send("stopped")
            return


# -- the daemon's side -------------------------------------------------------------------------------------------


class IncidentPoller:
    """G groups, each on one partition (GROUPS_PER_TOPIC groups per single-partition topic). Healthy (committed at
    the log end) until `incident` is set; then every group is LAG behind, and stays so (no growth, no stall)."""

    def __init__(self, groups: int, interval: float) -> None:
        self.interval = interval
        self.t = time.time() - 7 * 86400  # synthetic time: one `interval` per poll, never ahead of the wall clock
        self.incident = False
        topics = (groups + GROUPS_PER_TOPIC - 1) // GROUPS_PER_TOPIC
        tps = [TopicPartition(f"t{t:05d}", 0) for t in range(topics)]
        self.partitions = {tp: PartitionOffsets(0, LOG_END) for tp in tps}

        def snapshots(committed: int) -> tuple[GroupSnapshot, ...]:
            return tuple(
                GroupSnapshot(
                    group_id=f"g{g:06d}",
                    state="Empty",
                    protocol_type="consumer",
                    kind=GroupKind.CLASSIC,
                    coordinator_id=1,
                    committed={tps[g // GROUPS_PER_TOPIC]: CommittedOffset(committed)},
                )
                for g in range(groups)
            )

        self.healthy, self.lagging = snapshots(LOG_END), snapshots(LOG_END - LAG)

    def poll(self) -> ClusterSnapshot:
        self.t += self.interval
        return ClusterSnapshot(
            cluster="bench",
            taken_at=self.t,
            duration_s=0.0,
            groups=self.lagging if self.incident else self.healthy,
            partitions=self.partitions,
            brokers=(BrokerSettings(1, 10080, 600000),),
        )

    def close(self) -> None:
        pass


def channel_overrides(channels: int) -> list[dict[str, Any]]:
    """Group g000123 goes to channel 123 % 100 % channels (by its last two digits): one override per channel."""
    out = []
    for c in range(channels):
        suffixes = "|".join(f"{s:02d}" for s in range(100) if s % channels == c)
        out.append({"match": {"group": rf"g\d{{4}}({suffixes})"}, "labels": {"slack_channel": f"#lag-{c:03d}"}})
    return out


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def timed(owner: Any, name: str, sink: list[tuple[str, float]]) -> None:
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            sink.append((name, time.perf_counter() - t0))

    setattr(owner, name, wrapper)


class Steps:
    """poll_cluster timed, with the time of its parts: the pipeline step, _flush (the outbox's lock and the state
    save) and the /metrics render."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.parts: list[tuple[str, float]] = []
        timed(daemon.pipelines["bench"], "step", self.parts)
        timed(daemon, "_flush", self.parts)
        timed(daemon, "render_metrics", self.parts)
        self.rows: list[dict[str, Any]] = []  # phase, at (monotonic), total, and each part

    def poll(self, phase: str) -> float:
        self.parts.clear()
        at = time.monotonic()
        t0 = time.perf_counter()
        self.daemon.poll_cluster("bench")
        total = time.perf_counter() - t0
        row: dict[str, Any] = {"phase": phase, "at": at, "total": total}
        for name, seconds in self.parts:
            row[name] = row.get(name, 0.0) + seconds
        self.rows.append(row)
        return total


def paced_polls(steps: Steps, phase: str, args: argparse.Namespace, note: str = "") -> None:
    """`args.steps` polls, one every `args.poll_every` s as while draining (back to back they time differently)."""
    for i in range(args.steps):
        started = time.monotonic()
        total = steps.poll(phase)
        say(f"  {phase} poll {i + 1}/{args.steps} {note}: {total:.3f} s")
        if i + 1 < args.steps:
            time.sleep(max(0.0, started + args.poll_every - time.monotonic()))


def queue_sizes(daemon: Daemon) -> tuple[int, int]:
    deliveries = list(daemon.outbox.deliveries)  # a copy without the lock: a sample, never blocking a worker
    counts = Counter(d.notifier for d in deliveries)
    return counts[SLACK], counts[WEBHOOK]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def set_aside(daemon: Daemon) -> list[Any]:
    """Takes every queued delivery out of the outbox (and the state database), untimed: the same alerts with an
    empty outbox, to compare with. `put_back` restores them as they were."""
    with daemon.outbox.changed:
        held, daemon.outbox.deliveries = daemon.outbox.deliveries, []
        daemon.save_alerts()
    return held


def put_back(daemon: Daemon, held: list[Any]) -> None:
    with daemon.outbox.changed:
        daemon.outbox.deliveries = held
        daemon.save_alerts()


def run(args: argparse.Namespace) -> None:
    if not 1 <= args.channels <= 100:
        raise SystemExit("--channels: 1 to 100")
    if args.channel_rate != 1.0:
        slack_module.PACE_S = 1.0 / args.channel_rate  # lagwatch's own pacing, scaled with the fake's limit
    limit = args.channels * args.channel_rate
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    receivers = ctx.Process(
        target=receivers_main, args=(child, args.channel_rate, args.burst, args.webhook_delay_s), daemon=True
    )
    receivers.start()
    addresses = parent.recv()
    say(
        f"receivers up (pid {receivers.pid}): fake Slack at {args.channel_rate:g} msg/s per channel, burst "
        f"{args.burst:g}, {args.channels} channels -> limit {limit:g} msg/s; webhook delay {args.webhook_delay_s} s"
    )
    state = tempfile.TemporaryDirectory()
    settings = load_settings(
        state_dir=Path(state.name),
        http={"enabled": False},
        rules={
            "lag": {"for_s": 0, "warning": {"offsets": 100}, "critical": {"offsets": 10**12}},
            **{rule: {"enabled": False} for rule in OTHER_RULES},
            "overrides": channel_overrides(args.channels),
        },
        # A storm threshold above the group count: one notification per group, not one summary for the cluster.
        alerts={"group_wait_s": 0, "storm_threshold": args.groups + 1},
        history_save_interval_s=86400,  # no history save inside the timed polls (daemon_step_bench times it)
    )
    slack_cfg = SlackConfig.model_validate(
        {"token": addresses["token"], "base_url": addresses["slack_url"], "default_channel": "#kafka"}
    )
    notifiers = {
        SLACK: SlackNotifier(SLACK, slack_cfg),
        WEBHOOK: WebhookNotifier(WEBHOOK, WebhookConfig(url=addresses["webhook_url"])),
    }
    poller = IncidentPoller(args.groups, 30.0)
    cluster = ClusterConfig(bootstrap_servers=["127.0.0.1:9"], poll_interval_s=30.0, exact_clocks=False)
    say(f"building the daemon: {args.groups:,} groups x 1 partition ...")
    daemon = Daemon(
        settings,
        clusters={"bench": cluster},
        notifiers=notifiers,
        poller_factory=lambda n, c: poller,
        reader_factory=None,
    )
    steps = Steps(daemon)
    rss: list[tuple[str, float]] = [("built", rss_mb())]

    first_s = steps.poll("first")
    say(f"  first poll (rule overrides resolved, history started): {first_s:.3f} s")
    paced_polls(steps, "healthy", args)
    rss.append(("healthy", rss_mb()))

    poller.incident = True
    incident_s = steps.poll("incident")
    queued = list(daemon.outbox.deliveries)
    firing = sum(1 for a in daemon.book.alerts.values() if a.state == "firing")
    say(f"  incident poll: {incident_s:.3f} s, {firing:,} alerts firing, {len(queued):,} deliveries queued")
    expected_slack = {f"{SLACK}|{d.notification.group_key}|{d.notification.id}" for d in queued if d.notifier == SLACK}
    expected_hook = {d.notification.id for d in queued if d.notifier == WEBHOOK}
    rss.append(("queued", rss_mb()))

    held = set_aside(daemon)
    paced_polls(steps, "firing", args, "(same alerts, outbox set aside)")
    put_back(daemon, held)
    paced_polls(steps, "queued", args, "(dispatcher not started)")

    say(f"draining: dispatcher started, a poll every {args.poll_every:g} s (at most {args.max_drain_s:g} s) ...")
    samples: list[tuple[float, int, int, float]] = []  # seconds since the start, queued slack, webhook, RSS MB
    daemon.dispatcher.start()
    start = time.monotonic()
    next_poll = start + args.poll_every / 2
    next_sample = start
    next_progress = start
    drained = False
    while True:
        now = time.monotonic()
        if now >= next_sample:
            q_slack, q_hook = queue_sizes(daemon)
            samples.append((now - start, q_slack, q_hook, rss_mb()))
            next_sample += 1.0
            if q_slack == 0 and q_hook == 0:
                drained = True
                break
            if now >= next_progress:
                parent.send("counts")
                posted, limited, hooked = parent.recv()
                say(
                    f"  {now - start:5.0f} s: queued slack {q_slack:,}, webhook {q_hook:,}; at the receivers: "
                    f"{posted:,} Slack posts, {limited:,} answered 429, {hooked:,} webhook bodies; "
                    f"RSS {samples[-1][3]:.0f} MB"
                )
                next_progress += 15.0
        if now - start > args.max_drain_s:
            break
        if now >= next_poll:
            q_slack, q_hook = queue_sizes(daemon)
            steps.poll("draining")
            steps.rows[-1].update(slack_queued=q_slack, webhook_queued=q_hook)
            next_poll += args.poll_every
        time.sleep(max(0.0, min(next_poll, next_sample) - time.monotonic()))
    drain_s = time.monotonic() - start
    say(f"  {'drained' if drained else 'stopped draining'} after {drain_s:.1f} s")
    rss.append(("drained" if drained else f"after {drain_s:.0f} s of draining", rss_mb()))
    health = daemon.dispatcher.health()
    if drained:
        paced_polls(steps, "after", args)
    daemon.stop()
    state.cleanup()
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    parent.send("report")
    report = parent.recv()
    parent.send("stop")
    parent.recv()
    receivers.join(10)

    print_report(args, steps, queued, first_s, incident_s, firing, samples, drained, rss, peak_rss, health)
    print_receivers(args, limit, report, expected_slack, expected_hook, start, drain_s)
    say("measuring the saves one delivery makes, against the queue's size ...")
    print_save_costs(queued, samples[-1][1:3] if not drained else None, limit)


def print_report(
    args: argparse.Namespace,
    steps: Steps,
    queued: list[Any],
    first_s: float,
    incident_s: float,
    firing: int,
    samples: list[tuple[float, int, int, float]],
    drained: bool,
    rss: list[tuple[str, float]],
    peak_rss: float,
    health: dict[str, Any],
) -> None:
    by_notifier = Counter(d.notifier for d in queued)
    print(f"\n{args.groups:,} groups x 1 partition; {firing:,} alerts firing after the incident poll")
    print(f"queued at once: {by_notifier[SLACK]:,} for {SLACK}, {by_notifier[WEBHOOK]:,} for {WEBHOOK}")
    print(
        f"first poll {first_s:.3f} s; incident poll (queues them all, one state-database transaction) {incident_s:.3f} s"
    )
    print(
        f"\npoll_cluster wall time, one poll every {args.poll_every:g} s: median (min-max) [polls]; "
        "medians of its parts: pipeline step / _flush / metrics render"
    )
    draining = [r for r in steps.rows if r["phase"] == "draining"]
    groups = [
        ("healthy: no alerts, outbox empty", [r for r in steps.rows if r["phase"] == "healthy"]),
        ("firing: all alerts firing, outbox empty", [r for r in steps.rows if r["phase"] == "firing"]),
        ("queued: same, all queued, not sending", [r for r in steps.rows if r["phase"] == "queued"]),
        ("draining: both notifiers sending", [r for r in draining if r["webhook_queued"] and r["slack_queued"]]),
        ("draining: Slack only (webhook done)", [r for r in draining if not r["webhook_queued"]]),
        ("draining: all", draining),
        ("after: drained, outbox empty", [r for r in steps.rows if r["phase"] == "after"]),
    ]
    for label, rows in groups:
        if not rows:
            print(f"  {label:<42} (no poll)")
            continue
        totals = [r["total"] for r in rows]
        parts = " / ".join(f"{median([r.get(k, 0.0) for r in rows]):.3f}" for k in ("step", "_flush", "render_metrics"))
        print(f"  {label:<42} {median(totals):.3f} s ({min(totals):.3f}-{max(totals):.3f}) [{len(rows)}]  {parts}")
    print("\noutbox while draining (s since the dispatcher started: queued for slack / webhook, RSS MB)")
    seen: set[int] = set()
    for t, q_slack, q_hook, mb in samples:
        bucket = int(t) // args.outbox_every
        if bucket in seen and (t, q_slack, q_hook, mb) != samples[-1]:
            continue
        seen.add(bucket)
        print(f"  {t:6.0f} s  {q_slack:>7,} / {q_hook:>7,}   {mb:5.0f} MB")
    print("\nRSS of the daemon's process: " + ", ".join(f"{name} {mb:.0f} MB" for name, mb in rss))
    print(f"  peak RSS {peak_rss:.0f} MB")
    print("\ndispatcher, per worker: delivered / retried / failed for good / expired / unexpected errors")
    for name, h in health.items():
        print(
            f"  {name:<14} {h.delivered:,} / {h.retried} / {h.failed_permanent} / {h.dropped_expired} / "
            f"{h.unexpected_errors}   last error: {h.last_error}"
        )


def rate_windows(times: list[float]) -> list[float]:
    """Messages per second in each whole WINDOW_S window from the first message to the last."""
    if len(times) < 2:
        return []
    first = times[0]
    whole = int((times[-1] - first) // WINDOW_S)
    counts = Counter(int((t - first) // WINDOW_S) for t in times)
    return [counts[w] / WINDOW_S for w in range(whole)]


def print_receivers(
    args: argparse.Namespace,
    limit: float,
    report: dict[str, Any],
    expected_slack: set[str],
    expected_hook: set[str],
    start: float,
    drain_s: float,
) -> None:
    calls = report["calls"]
    posts = sorted(at for method, at, status, _ in calls if method == "chat.postMessage" and status == 200)
    limited = sorted(at for _, at, status, _ in calls if status == 429)
    statuses = Counter(f"{method} {status}{' ' + error if error else ''}" for method, _, status, error in calls)
    keys = Counter(key for _, key in report["messages"])
    per_channel = Counter(channel for channel, _ in report["messages"])
    hook_ids = Counter(i for _, i in report["webhook"])
    hook_times = sorted(at for at, _ in report["webhook"])
    print("\nat the fake Slack (its own records)")
    print(f"  calls: {dict(statuses)}")
    if posts:
        span = posts[-1] - posts[0]
        print(
            f"  {len(posts):,} messages, the last {posts[-1] - start:.1f} s after the dispatcher started; "
            f"overall {(len(posts) - 1) / span if span > 0 else float('nan'):.1f} msg/s"
        )
    windows = rate_windows(posts)
    if windows:
        print(
            f"  drain rate per {WINDOW_S:g} s window: median {median(windows):.1f} msg/s (min {min(windows):.1f}, "
            f"max {max(windows):.1f}, {len(windows)} windows); the limit: {limit:g} msg/s "
            f"({args.channels} channels x {args.channel_rate:g}/s, burst {args.burst:g})"
        )
    print(
        f"  answered 429 with Retry-After: {len(limited):,} ({len(limited) / max(1, len(posts)) * 100:.1f}% of "
        f"the messages posted)"
    )
    print(
        f"  channels: {len(per_channel)}, {min(per_channel.values(), default=0)}-"
        f"{max(per_channel.values(), default=0)} messages each"
    )
    print(
        f"  per message key: {len(expected_slack):,} queued, {len(set(keys) & expected_slack):,} posted, "
        f"{sum(1 for n in keys.values() if n > 1)} posted more than once, {len(expected_slack - set(keys)):,} "
        f"not posted, {len(set(keys) - expected_slack)} never queued"
    )
    print("\nat the webhook receiver")
    if hook_times:
        span = hook_times[-1] - hook_times[0]
        print(
            f"  {len(hook_times):,} bodies, the last {hook_times[-1] - start:.1f} s after the dispatcher started; "
            f"overall {(len(hook_times) - 1) / span if span > 0 else float('nan'):.1f} bodies/s"
        )
    print(
        f"  per notification id: {len(expected_hook):,} queued, {len(set(hook_ids) & expected_hook):,} received, "
        f"{sum(1 for n in hook_ids.values() if n > 1)} received more than once, "
        f"{len(expected_hook - set(hook_ids)):,} not received"
    )
    if posts and hook_times and len(hook_times) >= len(expected_hook):
        end = hook_times[-1]
        during = [w for i, w in enumerate(windows) if posts[0] + (i + 1) * WINDOW_S <= end]
        later = [w for i, w in enumerate(windows) if posts[0] + i * WINDOW_S >= end]
        rates = f"; Slack's median rate while the webhook drained {median(during):.1f} msg/s" if during else ""
        if later:
            rates += f", after it {median(later):.1f} msg/s"
        print(f"  the webhook was done {end - start:.1f} s after the start, Slack {posts[-1] - start:.1f} s{rates}")
    elif drain_s:
        print(f"  the webhook had not drained either when the bench stopped draining ({drain_s:.0f} s)")


def delivery_cost(queued: list[Any], size: int, refs: int, saves: int, repeat: int = 15) -> float:
    """Seconds of lagwatch's own work for one delivery with `size` deliveries queued and `refs` message references
    kept, as a worker does it (a fresh state database, one thread, no HTTP): `saves` - 1 saves before the send
    (the Slack worker marks it in flight), Outbox.done, one save after. The median of `repeat` deliveries."""
    with tempfile.TemporaryDirectory() as directory:
        store = StateStore(Path(directory)).open()
        notes = [d.notification for d in queued]
        outbox = Outbox(deliveries=[Delivery(notes[i % len(notes)], SLACK) for i in range(size + repeat)])
        outbox.refs = {f"{SLACK}|ref{i}": {"channel": "C123456", "ts": f"1700000000.{i:06d}"} for i in range(refs)}
        store.save_alerts(None, outbox)  # every row written once, as the incident poll did
        times = []
        for _ in range(repeat):
            delivery = outbox.deliveries[0]
            t0 = time.perf_counter()
            for _ in range(saves - 1):
                delivery.in_flight = True
                store.save_alerts(None, outbox)
            outbox.done(delivery, None)
            store.save_alerts(None, outbox)
            times.append(time.perf_counter() - t0)
        store.close()
    return statistics.median(times)


def print_save_costs(queued: list[Any], left: tuple[int, int] | None, limit: float) -> None:
    """Why the drain goes as it does: a delivery's saves cost in proportion to the queue (and to the references
    kept). Measured apart; when the bench stopped before the end, the rest of the drain is estimated from them."""
    sizes = sorted({len(queued), len(queued) // 2, len(queued) // 10, 100})
    print("\nlagwatch's own work per delivery against the queue's size (measured apart: no HTTP, no poll beside it)")
    print("  queued   refs   Slack (2 saves + done)   webhook (1 save + done)")
    slack_cost: dict[int, float] = {}
    for size in reversed(sizes):
        slack_cost[size] = delivery_cost(queued, size, 0, 2)
        hook = delivery_cost(queued, size, 0, 1)
        print(f"  {size:>7,} {0:>6,}   {slack_cost[size] * 1000:10.1f} ms {hook * 1000:22.1f} ms")
    refs = len(queued) // 2
    with_refs = delivery_cost(queued, 100, refs, 2)
    print(f"  {100:>7,} {refs:>6,}   {with_refs * 1000:10.1f} ms   (the references of {refs:,} Slack messages kept)")
    if left is None:
        return
    # Seconds per save as a + b x queued + c x refs, from the figures above (two saves per Slack delivery).
    big, small = max(slack_cost), min(slack_cost)
    per_entry = (slack_cost[big] - slack_cost[small]) / (big - small) / 2
    base = max(0.0, slack_cost[small] / 2 - per_entry * small)
    per_ref = max(0.0, (with_refs - slack_cost[small]) / refs / 2)
    s_left, h_left = left
    q, r, seconds = s_left + h_left, len(queued) // 2 - s_left, 0.0
    while s_left or h_left:  # both workers share one interpreter: their saves add up; in proportion to what is left
        if s_left and (not h_left or s_left * 2 >= h_left):
            seconds += 2 * (base + per_entry * q + per_ref * r)
            s_left, r = s_left - 1, r + 1
        else:
            seconds += base + per_entry * q + per_ref * r
            h_left -= 1
        q -= 1
    print(
        f"  not drained: {left[0] + left[1]:,} deliveries were left. Their saves alone, at these costs, take "
        f"~{seconds / 60:.1f} min more (an extrapolation, and a lower bound: no HTTP, no poll, no other load); "
        f"the Slack limit alone would take {left[0] / limit / 60:.1f} min"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--channels", type=int, default=50, help="Slack channels the groups are routed to (1-100)")
    parser.add_argument("--channel-rate", type=float, default=1.0, help="fake Slack: posts/s per channel")
    parser.add_argument("--burst", type=float, default=1.0, help="fake Slack: posts at once per channel")
    parser.add_argument("--webhook-delay-s", type=float, default=0.0, help="the webhook receiver's answer time")
    parser.add_argument("--steps", type=int, default=5, help="timed polls in each phase but draining")
    parser.add_argument("--poll-every", type=float, default=10.0, help="seconds between two polls (all phases)")
    parser.add_argument("--max-drain-s", type=float, default=300.0, help="then stop, and extrapolate the rest")
    parser.add_argument("--outbox-every", type=int, default=20, help="seconds between the outbox lines printed")
    args = parser.parse_args()
    say(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
    run(args)
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
