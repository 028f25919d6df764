"""Command line: run, check, validate, dev-broker, pipeline (the Spark jobs). Errors become one line on stderr and a non-zero exit."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from pydantic import ValidationError

from lagwatch import CORE, __version__, gc_policy, logs, malloc_policy
from lagwatch.config import (
    ClusterConfig,
    NameFilter,
    Settings,
    check_poll_interval,
    check_request_timeout,
    load_settings,
)
from lagwatch.errors import ConfigError, exit_code_of
from lagwatch.matchers import check_pattern


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logs.configure("WARNING", "text")  # `run` reconfigures from its settings
    return exit_code_of(lambda: args.func(args))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lagwatch", description="Kafka consumer-lag monitoring and alerting")
    parser.add_argument("--version", action="version", version=f"lagwatch {__version__}, core: {CORE}")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="watch the configured clusters; without any, a local Kafka with demo traffic")
    run.add_argument("--config", type=Path, help="YAML configuration file")
    run.add_argument("--interval", type=float, default=None, help="seconds between polls (overrides config)")
    run.add_argument("--log-level", default=None, choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    run.add_argument("--log-format", default=None, choices=["auto", "json", "text"])
    run.add_argument("--table", action="store_true", help="also print the lag table after every poll")
    run.set_defaults(func=_cmd_run)

    check = sub.add_parser("check", help="poll once and print consumer lag")
    target = check.add_mutually_exclusive_group(required=True)
    target.add_argument("--bootstrap-server", help="HOST:PORT[,HOST:PORT...] of a PLAINTEXT cluster")
    target.add_argument("--config", type=Path, help="YAML configuration file (every cluster in it)")
    check.add_argument("--group", help="regex the group id must match (whole id)")
    check.add_argument("--output", choices=["table", "json"], default="table")
    check.add_argument(
        "--timeout", type=float, help="request timeout in seconds (default 15; with --config, the clusters' own)"
    )
    check.set_defaults(func=_cmd_check)

    validate = sub.add_parser("validate", help="check a configuration file and summarise it")
    validate.add_argument("--config", type=Path, required=True)
    validate.set_defaults(func=_cmd_validate)

    notify = sub.add_parser("notify-test", help="send a sample alert through the configured notifiers")
    notify.add_argument("--config", type=Path, required=True)
    notify.add_argument("--notifier", help="only this one (log, slack, slack_webhook, webhook:NAME)")
    notify.set_defaults(func=_cmd_notify_test)

    broker = sub.add_parser("dev-broker", help="run a local single-node Apache Kafka (KRaft) on 127.0.0.1")
    broker.add_argument("--port", type=int, default=9092)
    broker.add_argument(
        "--kafka-version", default=None, help="Apache Kafka version (default 4.4.0), e.g. 4.1.2 or 3.9.2"
    )
    broker.add_argument("--data-dir", type=Path, help="keep the broker's data here (default: a temp dir)")
    broker.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a broker setting")
    broker.add_argument("--fetch-only", action="store_true", help="download the jars, then exit")
    broker.set_defaults(func=_cmd_dev_broker)

    from lagwatch.pipeline.jobs import add_pipeline_parser

    add_pipeline_parser(sub)
    return parser


def _cmd_validate(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    print(f"{args.config}: valid, {len(settings.clusters)} cluster(s)")
    for name, c in settings.clusters.items():
        auth = c.security.protocol + (f"/{c.security.sasl.mechanism}" if c.security.sasl else "")
        print(
            f"  {name}: {','.join(c.bootstrap_servers)} ({auth}), poll every {c.poll_interval_s:g}s, "
            f"groups {c.groups.include} minus {c.groups.exclude}"
        )
    return 0


def _check_targets(args: argparse.Namespace) -> dict[str, ClusterConfig]:
    timeout = 15.0 if args.timeout is None else args.timeout
    if args.config is not None:
        clusters = dict(load_settings(args.config).clusters)
        if not clusters:
            raise ConfigError(["clusters: no cluster configured"])
        if args.timeout is not None:  # it was ignored: a check took the config's 30 s where 2 were asked for
            try:
                check_request_timeout(timeout)
            except ValueError as e:
                raise ConfigError([f"--timeout: {e}"]) from None
            clusters = {n: c.model_copy(update={"request_timeout_s": timeout}) for n, c in clusters.items()}
    else:
        try:
            clusters = {"default": ClusterConfig(bootstrap_servers=args.bootstrap_server, request_timeout_s=timeout)}
        except ValidationError as e:
            # Named by the option the field came from (a --timeout of 0 was reported as --bootstrap-server's).
            options = {"request_timeout_s": "--timeout", "bootstrap_servers": "--bootstrap-server"}
            raise ConfigError(
                [f"{options.get(str(err['loc'][0]), '--bootstrap-server')}: {err['msg']}" for err in e.errors()]
            ) from None
        except Exception as e:
            raise ConfigError([f"--bootstrap-server: {_first_error(e)}"]) from None
    if args.group:
        try:
            check_pattern(args.group)
        except ValueError as e:
            raise ConfigError([f"--group: {e}"]) from None
        clusters = {
            n: c.model_copy(update={"groups": NameFilter(include=[args.group], exclude=c.groups.exclude)})
            for n, c in clusters.items()
        }
    return clusters


def _first_error(error: Exception) -> str:
    errors = getattr(error, "errors", None)
    if callable(errors):
        return str(errors()[0]["msg"]).removeprefix("Value error, ")
    return str(error)


def _cmd_check(args: argparse.Namespace) -> int:
    from lagwatch.check import lags_of, render_json, render_table
    from lagwatch.collect import ClusterPoller

    results = []
    failed = False
    for name, cluster in _check_targets(args).items():
        poller = ClusterPoller(name, cluster)
        try:
            snapshot = poller.poll()
        finally:
            poller.close()
        if not snapshot.ok:
            print(f"lagwatch: cluster {name!r}: {snapshot.error_kind}: {snapshot.error}", file=sys.stderr)
            failed = True
            continue
        for g in snapshot.groups:
            if g.error:
                print(f"lagwatch: cluster {name!r} group {g.group_id!r}: {g.error}", file=sys.stderr)
                failed = True
        results.append((snapshot, lags_of(snapshot, cluster.read_committed)))
    if args.output == "json":
        print(render_json(results))
    else:
        print("\n\n".join(render_table(s, g) for s, g in results))
    return 1 if failed else 0


def _cmd_notify_test(args: argparse.Namespace) -> int:
    import time

    from lagwatch.alerts import AlertBook
    from lagwatch.model import Finding, Severity
    from lagwatch.notify import build_notifiers

    settings = load_settings(args.config)
    logs.configure("INFO", "text", secrets=logs.secret_values(settings))
    notifiers = build_notifiers(settings)
    if args.notifier:
        if args.notifier not in notifiers:
            raise ConfigError(
                [f"--notifier: {args.notifier!r} is not configured (configured: {', '.join(notifiers) or 'none'})"]
            )
        notifiers = {args.notifier: notifiers[args.notifier]}
    if not notifiers:  # it printed nothing and exited 0: as if every notifier had worked
        raise ConfigError(["notifiers: none is configured (or every one is disabled): nothing to test"])
    book = AlertBook(settings.alerts.model_copy(update={"group_wait_s": 0}))
    labels = {"cluster": "notify-test", "group": "lagwatch-notify-test", "topic": "example"}
    sample = Finding(
        "lag",
        Severity.WARNING,
        "notify-test",
        "lagwatch-notify-test",
        labels,
        "this is a test notification from lagwatch notify-test: nothing is wrong",
        {"lag": 1234, "lag_seconds": 95.0, "eta_s": 600.0},
    )
    now = time.time()
    book.apply("notify-test", [sample], frozenset(), now)
    (notification,) = book.due(now)
    failed = 0
    for name, (notifier, _) in notifiers.items():
        try:
            notifier.send(notification, None)
            print(f"{name}: sent")
        except Exception as e:
            failed += 1
            print(f"lagwatch: {name}: not sent: {e}", file=sys.stderr)
    return 1 if failed else 0


def _cmd_dev_broker(args: argparse.Namespace) -> int:
    from lagwatch.devbroker import DEFAULT_KAFKA_VERSION, LocalBroker, ensure_kafka_jars

    version = args.kafka_version or DEFAULT_KAFKA_VERSION
    if args.fetch_only:
        print(f"kafka_jars={ensure_kafka_jars(version)}")
        return 0
    settings = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError([f"--set: {item!r} is not KEY=VALUE"])
        settings[key.strip()] = value.strip()
    broker = LocalBroker(port=args.port, kafka_version=version, data_dir=args.data_dir, settings=settings)
    stop = threading.Event()
    signals = _on_signals(stop)
    signals.on_hard_exit.append(broker.kill)
    try:
        signals.interruptible = True
        broker.start()
        signals.interruptible = False
    except StartupInterrupted:
        print("lagwatch: stopped while the broker was starting", file=sys.stderr, flush=True)
        return 0  # start() stopped what it had started
    try:
        print(f"bootstrap={broker.bootstrap}", flush=True)
        print(f"kafka {version} running, log in {broker.log_file}; Ctrl-C stops it", file=sys.stderr)
        while not stop.wait(1.0):
            if not broker.running:
                print("lagwatch: kafka broker exited unexpectedly", file=sys.stderr)
                return 1
    finally:
        broker.stop()
    return 0


class StartupInterrupted(BaseException):
    """A stop asked for while the demo starts (its jars, its broker): raised in the main thread, which unwinds what
    was started. A BaseException, as KeyboardInterrupt: nothing on the way catches it as an error."""


class _Signals:
    """The first SIGTERM or SIGINT stops cleanly; a second one, while that stop is under way, exits at once, after
    `on_hard_exit` (the demo's broker is killed then: it runs in a session of its own, and was left running).
    While `interruptible`, the first one interrupts the start-up instead of waiting for its end (a first start
    fetches Kafka's jars for minutes, and Ctrl-C did nothing until the demo was up)."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.interruptible = False
        self.on_hard_exit: list[Callable[[], None]] = []

    def install(self) -> _Signals:
        signal.signal(signal.SIGINT, self._handler)
        signal.signal(signal.SIGTERM, self._handler)
        return self

    def hard_exit(self, code: int) -> NoReturn:
        for callback in self.on_hard_exit:
            with contextlib.suppress(Exception):
                callback()
        os._exit(code)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.stop.is_set():
            os.write(2, b"lagwatch: second signal during the stop: exiting now, without waiting for it\n")
            self.hard_exit(1)
        self.stop.set()
        if self.interruptible:
            self.interruptible = False
            raise StartupInterrupted


def _on_signals(stop: threading.Event) -> _Signals:
    return _Signals(stop).install()


def _cmd_run(args: argparse.Namespace) -> int:
    from lagwatch.daemon import Daemon

    if args.interval is not None:
        try:
            check_poll_interval(args.interval)
        except ValueError as e:
            raise ConfigError([f"--interval: {e}"]) from None
    settings: Settings = load_settings(args.config) if args.config else load_settings()
    logs.configure(
        args.log_level or settings.log_level,
        args.log_format or settings.log_format,
        secrets=logs.secret_values(settings),
    )
    malloc_policy.configure()  # before the saved state is loaded: its buffers are the first large ones
    stop = threading.Event()
    signals = _on_signals(stop)
    with ExitStack() as cleanup:
        if not settings.clusters:
            from lagwatch.devbroker.demo import start_demo

            try:
                signals.interruptible = True
                settings = start_demo(settings, cleanup, signals.on_hard_exit)
                signals.interruptible = False
            except StartupInterrupted:
                print("lagwatch: stopped while the demo was starting", file=sys.stderr, flush=True)
                return 0  # the ExitStack stops what was started
        if args.interval is not None:
            clusters = {
                n: c.model_copy(update={"poll_interval_s": args.interval}) for n, c in settings.clusters.items()
            }
            settings = settings.model_copy(update={"clusters": clusters})
        daemon = Daemon(settings)
        gc_policy.configure()  # after the saved state is loaded: it is never scanned again
        daemon.start()
        if args.table:
            daemon.on_poll.append(_print_table)
        try:
            stop.wait()
        finally:
            watchdog = threading.Timer(STOP_HARD_LIMIT_S, _stop_overran, [signals])
            watchdog.daemon = True
            watchdog.start()
            daemon.stop()
    watchdog.cancel()
    _exit_now(daemon.polls_under_way)
    return 0  # not reached


# What the stop may take in all before `lagwatch run` exits without it: a write that never ends (a frozen disk under
# the state database, a lake target that does not answer) held the stop until it ended (88 s), past Kubernetes'
# 30-s grace period. The daemon's own waits end sooner (daemon.STOP_BUDGET_S); what was saved last stands (SQLite's
# transactions are whole or absent, as after a SIGKILL).
STOP_HARD_LIMIT_S = 28.0


def _stop_overran(signals: _Signals) -> None:
    import logging

    logging.getLogger("lagwatch").error(
        "the stop did not end in time (a write to a disk or a target that does not answer): exiting without it; "
        "the state saved last stands",
        extra={"waited_s": STOP_HARD_LIMIT_S},
    )
    logging.shutdown()
    signals.hard_exit(1)


def _exit_now(polls_under_way: list[str]) -> None:
    """Everything is saved and closed: exit now. A thread may still be inside a call, and the interpreter's exit
    waited for it: a poll waiting out `request_timeout_s` on a broker that never answers (58 s at 60 s), a lake
    write to an object store that never answers (93 s), past Kubernetes' 30-s grace period and into its SIGKILL."""
    import logging

    if polls_under_way:
        logging.getLogger("lagwatch").info(
            "exiting without waiting for polls under way", extra={"clusters": polls_under_way}
        )
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _print_table(runtime: Any) -> None:
    from lagwatch.check import lags_of, render_table

    if runtime.latest is not None and runtime.latest.ok:
        print(render_table(runtime.latest, lags_of(runtime.latest, runtime.config.read_committed)) + "\n", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
