"""Self-monitoring: is the daemon alive (/healthz), and is it ready to be relied on (/readyz)?

Alive: the scheduler that runs the polls is running, and so is the dispatcher's supervisor, which starts a dead
notifier worker thread again. Without it a dead worker means alerts decided but never sent: restarting the process is
the fix, so the liveness probe must fail. A worker that dies again and again is not a liveness problem: a new process
would die the same way on the same outbox, and polls would stop meanwhile.
Ready: every cluster had a successful poll, every notifier worker thread is alive, not dying again and again and
not failing at every turn of its loop, and no notifier worker keeps failing to save the state.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lagwatch.notify.dispatcher import PERSIST_RETRY_S, WorkerHealth
from lagwatch.runtime import ClusterRuntime

# A worker that owes a save tries again every PERSIST_RETRY_S: no new failure for this long ends the streak.
PERSIST_STREAK_QUIET_S = 3 * PERSIST_RETRY_S
# One failed save is a blip (the next one usually works); from the second in a row on, the state on disk is
# falling behind and a restart would lose what is only in memory.
PERSIST_STREAK_FAILING = 2


def scheduler_running(scheduler: Any) -> bool:
    """APScheduler's `running` only tells its state; its thread can still have died (a BaseException in it)."""
    thread = getattr(scheduler, "_thread", None)
    return bool(scheduler.running) and (thread is None or thread.is_alive())


def worker_problems(workers: Mapping[str, WorkerHealth]) -> list[str]:
    problems = []
    for name, h in sorted(workers.items()):
        if not h.alive:
            problems.append(f"notifier {name!r}: its worker thread is dead")
        elif h.keeps_dying:
            problems.append(f"notifier {name!r}: its worker thread keeps dying ({h.restarts} restarts)")
        elif h.failing_every_turn:
            problems.append(f"notifier {name!r}: its worker fails at every turn and delivers nothing ({h.last_error})")
    return problems


@dataclass
class _Streak:
    seen: int  # persist_failures when last looked at
    last_increase_at: float
    failures: int  # failures in the current streak


class PersistStreaks:
    """Which notifier workers keep failing to save the state.

    `WorkerHealth.persist_failures` counts failures since start, not the current streak: this watches the count
    between looks. The first look at a worker only takes its count as the baseline (old failures are not news).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._streaks: dict[str, _Streak] = {}

    def failing(self, workers: Mapping[str, WorkerHealth]) -> list[str]:
        now = self._clock()
        failing = []
        with self._lock:
            for name, health in sorted(workers.items()):
                streak = self._streaks.get(name)
                if streak is None:
                    self._streaks[name] = _Streak(health.persist_failures, float("-inf"), 0)
                    continue
                new_failures = health.persist_failures - streak.seen
                streak.seen = health.persist_failures
                if new_failures > 0:
                    if now - streak.last_increase_at > PERSIST_STREAK_QUIET_S:
                        streak.failures = 0
                    streak.failures += new_failures
                    streak.last_increase_at = now
                if (
                    now - streak.last_increase_at <= PERSIST_STREAK_QUIET_S
                    and streak.failures >= PERSIST_STREAK_FAILING
                ):
                    failing.append(name)
        return failing


def liveness_problems(scheduler_is_running: bool, supervising: bool) -> list[str]:
    problems = [] if scheduler_is_running else ["the poll scheduler is not running"]
    if not supervising:
        problems.append("the notifier supervisor is not running: a dead notifier worker stays dead")
    return problems


def readiness(
    clusters: Iterable[ClusterRuntime],
    workers: Mapping[str, WorkerHealth],
    streaks: PersistStreaks,
    state_owed: bool = False,
) -> tuple[list[str], list[str]]:
    """(clusters still waiting for a successful poll, other problems). `state_owed`: the last save of the alert
    state failed, so what is decided lives only in memory until the disk takes it again."""
    clusters = list(clusters)  # read twice below
    waiting = [rt.name for rt in clusters if rt.last_success is None]
    problems = worker_problems(workers)
    problems += [f"notifier {name!r}: saving the state keeps failing" for name in streaks.failing(workers)]
    if state_owed:
        problems.append("saving the alert state failed (disk full or read-only?); alerting goes on from memory")
    now = time.monotonic()
    for rt in clusters:
        hung = rt.history_write_hung_s(now)
        if hung is not None:
            problems.append(f"cluster {rt.name!r}: saving its history has not finished for {hung:.0f} s (a hung disk?)")
    return waiting, problems


def state_notes(db: Any) -> list[str]:
    """What was found wrong with the saved state at start, and what lagwatch went on from (StateDatabase)."""
    notes = [f"state damaged at start: {what}" for what in getattr(db, "damage", ())]
    if notes and getattr(db, "started_from", None):
        notes.append(f"started from {db.started_from}")
    set_aside = getattr(db, "rows_set_aside", 0)
    if set_aside:
        notes.append(f"{set_aside} saved row(s) of an unknown shape set aside (table set_aside of state.db)")
    if getattr(db, "read_only", False):
        notes.append("the state directory refuses writes: running from memory, saves are tried again")
    return notes
