"""Self-monitoring: /healthz turns 503 (saying why) when the scheduler or the notifier supervisor stops; /readyz when a
notifier worker is dead or keeps dying, or saving the state keeps failing; the notifier series of /metrics follow."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from lagwatch.alerts import Notification
from lagwatch.daemon import Daemon
from lagwatch.notify import dispatcher
from lagwatch.notify.dispatcher import WorkerHealth
from lagwatch.serve.app import create_app
from lagwatch.serve.health import PERSIST_STREAK_QUIET_S, PersistStreaks
from tests.conftest import wait_for
from tests.live import Recorder
from tests.serve_fakes import CLUSTER, make_daemon, notification


class WorkerKiller(BaseException):
    """Not an Exception: the dispatcher's worker does not catch it, so its thread dies (a bug of that kind)."""


class Fatal:
    name = "fatal"

    def send(self, n: Notification, ref: dict[str, Any] | None) -> dict[str, Any] | None:
        raise WorkerKiller("boom")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Daemon, TestClient]]:
    daemon = make_daemon(tmp_path, http={"enabled": False}, notifiers={"record": Recorder(), "fatal": Fatal()})
    daemon.start()
    app = create_app()
    app.state.service = daemon
    client = TestClient(app)
    wait_for(lambda: daemon.clusters[CLUSTER].last_success is not None, timeout=10, what="the first poll")
    yield daemon, client
    daemon.stop()


def test_a_worker_that_dies_every_time_is_restarted_with_backoff_unready_while_polls_go_on(
    running: tuple[Daemon, TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon, client = running
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"ready": True, "waiting_for": []}
    up = samples(client.get("/metrics").text)
    assert up[("lagwatch_notifier_up", (("notifier", "fatal"),))] == 1
    assert up[("lagwatch_notifier_worker_restarts_total", (("notifier", "fatal"),))] == 0
    assert up[("lagwatch_scheduler_up", ())] == 1

    monkeypatch.setattr(dispatcher, "RESTART_BACKOFF_FIRST_S", 0.5)
    monkeypatch.setattr(dispatcher, "BACKOFF_FIRST_S", 0.05)  # the killing delivery is due again at once
    daemon.outbox.add([notification()], ["fatal"])
    wait_for(lambda: daemon.dispatcher.health()["fatal"].keeps_dying, timeout=10, what="three deaths in a row")
    polls = daemon.clusters[CLUSTER].polls
    not_ready = client.get("/readyz")
    assert not_ready.status_code == 503
    (problem,) = not_ready.json()["problems"]
    assert problem.startswith("notifier 'fatal': its worker thread ")  # keeps dying, or dead until its restart
    assert client.get("/healthz").json() == {"status": "ok"}  # a new process would die the same way: no restart
    time.sleep(3.0)
    restarts = daemon.dispatcher.health()["fatal"].restarts
    # Backed off: restarts after 0, 0.5, 1, 2 s, 4 s... not hundreds in a hot loop.
    assert 3 <= restarts <= 5, restarts
    assert client.get("/readyz").status_code == 503
    assert daemon.clusters[CLUSTER].polls >= polls + 2  # the daemon polls on, once a second
    after = samples(client.get("/metrics").text)
    assert after[("lagwatch_notifier_worker_restarts_total", (("notifier", "fatal"),))] >= restarts
    assert after[("lagwatch_notifier_up", (("notifier", "record"),))] == 1
    assert after[("lagwatch_notifier_queued", (("notifier", "fatal"),))] == 1  # never delivered, never lost
    assert daemon.dispatcher.health()["record"].restarts == 0


def test_healthz_503_when_the_notifier_supervisor_died(
    running: tuple[Daemon, TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon, client = running

    def kill_supervisor() -> None:
        raise WorkerKiller("supervisor bug")

    monkeypatch.setattr(daemon.dispatcher, "supervise", kill_supervisor)
    monkeypatch.setattr(threading, "excepthook", lambda args: None)  # the dying thread's traceback is expected
    daemon.dispatcher.wake_supervisor()
    wait_for(lambda: not daemon.dispatcher.supervising, timeout=10, what="the supervisor to die")
    response = client.get("/healthz")
    assert response.status_code == 503 and response.json()["problems"] == [
        "the notifier supervisor is not running: a dead notifier worker stays dead"
    ]
    assert client.get("/readyz").status_code == 503


def test_healthz_503_when_the_scheduler_is_not_running(running: tuple[Daemon, TestClient]) -> None:
    daemon, client = running
    daemon.scheduler.shutdown(wait=True)
    response = client.get("/healthz")
    assert response.status_code == 503 and response.json()["problems"] == ["the poll scheduler is not running"]
    assert samples(client.get("/metrics").text)[("lagwatch_scheduler_up", ())] == 0


def test_readyz_503_while_saving_the_state_keeps_failing(
    running: tuple[Daemon, TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon, client = running
    now = [1000.0]
    client.app.state.persist_streaks = PersistStreaks(clock=lambda: now[0])  # type: ignore[attr-defined]
    assert client.get("/readyz").status_code == 200  # first look: the baseline
    recorder = daemon.notifiers["record"]
    assert isinstance(recorder, Recorder)

    def disk_full(*_: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(daemon.store, "save_alerts", disk_full)
    daemon.outbox.add([notification(1), notification(2)], ["record"])
    wait_for(lambda: daemon.dispatcher.health()["record"].persist_failures >= 2, timeout=10, what="failed saves")
    assert len(recorder.sent) == 2  # delivered from memory all the same
    response = client.get("/readyz")
    assert response.status_code == 503
    assert "notifier 'record': saving the state keeps failing" in response.json()["problems"]
    assert client.get("/healthz").status_code == 200  # alive: a restart would not fix a full disk
    metrics = samples(client.get("/metrics").text)
    assert metrics[("lagwatch_notifier_persist_failures_total", (("notifier", "record"),))] >= 2
    assert metrics[("lagwatch_notifier_delivered_total", (("notifier", "record"),))] == 2

    monkeypatch.undo()
    wait_for(  # the worker saves again within PERSIST_RETRY_S; then no new failure for the quiet time
        lambda: not daemon.dispatcher._workers["record"]._persist_owed, timeout=15, what="a good save"
    )
    now[0] += PERSIST_STREAK_QUIET_S + 1
    wait_for(  # the daemon's own save (every poll and tick) goes through again too
        lambda: client.get("/readyz").json() == {"ready": True, "waiting_for": []}, timeout=15, what="ready again"
    )


def test_readyz_503_until_a_cluster_had_a_successful_poll(tmp_path: Path) -> None:
    daemon = make_daemon(tmp_path, http={"enabled": False}, fail=True).start()
    try:
        app = create_app()
        app.state.service = daemon
        response = TestClient(app).get("/readyz")
        assert response.status_code == 503 and response.json() == {"ready": False, "waiting_for": [CLUSTER]}
    finally:
        daemon.stop()


def _health(persist_failures: int) -> dict[str, WorkerHealth]:
    return {
        "slack": WorkerHealth(
            notifier="slack",
            alive=True,
            restarts=0,
            keeps_dying=False,
            queued=0,
            delivered=0,
            retried=0,
            failed_permanent=0,
            dropped_expired=0,
            persist_failures=persist_failures,
            unexpected_errors=0,
            last_error=None,
            last_error_at=None,
        )
    }


def test_persist_streaks_a_blip_is_not_a_streak_old_failures_are_not_news() -> None:
    now = [0.0]
    streaks = PersistStreaks(clock=lambda: now[0])
    assert streaks.failing(_health(7)) == []  # baseline: 7 failures from long ago
    now[0] += 10
    assert streaks.failing(_health(8)) == []  # one failure: a blip
    now[0] += 5
    assert streaks.failing(_health(9)) == ["slack"]  # a second within the quiet time: a streak
    now[0] += 5
    assert streaks.failing(_health(9)) == ["slack"]  # no save since, but the streak may still go on
    now[0] += PERSIST_STREAK_QUIET_S
    assert streaks.failing(_health(9)) == []  # quiet long enough: saves work again
    now[0] += 60
    assert streaks.failing(_health(21)) == ["slack"]  # looked at rarely: many failures since


def test_a_history_save_that_hangs_is_said_in_readyz_and_the_log_once_and_polls_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that neither answers nor fails: the history writer waits, the poll thread does not; after
    HISTORY_WRITE_HUNG_S /readyz names it and one error line says so; when the disk answers, it is saved again."""
    from lagwatch import runtime as runtime_module

    monkeypatch.setattr(runtime_module, "HISTORY_WRITE_HUNG_S", 0.5)
    daemon = make_daemon(tmp_path, http={"enabled": False}, history_save_interval_s=0)
    disk = threading.Event()
    write = daemon.store.write_history

    def hanging(cluster: str, data: dict[str, Any]) -> None:
        disk.wait(30)
        write(cluster, data)

    monkeypatch.setattr(daemon.store, "write_history", hanging)
    app = create_app()
    app.state.service = daemon
    client = TestClient(app)
    try:
        daemon.poll_cluster(CLUSTER)  # its history save hangs
        started = time.monotonic()
        while time.monotonic() - started < 1.5:
            daemon.poll_cluster(CLUSTER)  # polls go on, their saves put off behind the hung one
        assert time.monotonic() - started < 5
        body = client.get("/readyz").json()
        assert any("saving its history has not finished" in p for p in body["problems"]), body
        hung = [
            r for r in caplog.records if r.getMessage() == "saving history hangs (the disk neither answers nor fails)"
        ]
        assert len(hung) == 1
        disk.set()
        wait_for(lambda: daemon.clusters[CLUSTER].history_write.done(), timeout=10)  # type: ignore[union-attr]
        daemon.poll_cluster(CLUSTER)
        body = client.get("/readyz").json()
        assert not any("history" in p for p in body.get("problems", [])), body
        assert any(r.getMessage() == "history saved again" for r in caplog.records)
    finally:
        disk.set()
        daemon.stop()


def test_the_daemon_sizes_its_history_to_its_rules(tmp_path: Path) -> None:
    """Each cluster's history keeps the polls its longest window needs at that cluster's poll interval."""
    from lagwatch.history import polls_to_keep

    daemon = make_daemon(tmp_path, rules={"falling_behind": {"window_s": 900}})
    try:
        assert daemon.clusters["c"].history.keep == polls_to_keep(900, 1) == 902
    finally:
        daemon.stop()
