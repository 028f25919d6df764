"""EDGE: the daemon's clock. Wall-clock seconds (alerts, history and notifications carry dates) that never go back.

Why not time.time(): when the host's clock was stepped back (an NTP correction after a VM came back, a clock set
by hand), every poll after it was dated before the last one. The history ignored them, the rules saw nothing new,
firing alerts resolved without a notification and a new incident paged an hour late (a helper's scenario, a 1 h
step back). Here a step back of up to MAX_SLEW_S is absorbed as NTP absorbs small ones: lagwatch's time keeps
moving forward, at 90 % of the real rate, until the host's clock has caught up with it (ten times the step: 50
minutes at most); durations measured meanwhile (rule windows, `for`) are at most 10 % longer in real time, and
times shown to the outside (Alertmanager's endsAt, a silence's end as the API checks it) at most MAX_SLEW_S ahead.

A larger step is not absorbed: lagwatch running ahead of the world for hours (ten days after a clock that booted
a day ahead was set right) refused short silences and told Alertmanager to end alerts hours late. lagwatch's time
goes back with the host's, says so at ERROR, and the pipeline step holds every poll dated before the last one it
took (alerts neither fire nor resolve) until the clock passes it. A step forward is followed at once (the history
sees a gap, as after lagwatch was down).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("lagwatch.clock")

SLEW = 0.1  # while ahead of the host's clock, lagwatch's runs this much slower
STEP_LOGGED_S = 1.0  # a step back larger than this is logged (smaller ones: ordinary NTP noise)
MAX_SLEW_S = 300.0  # the largest step back absorbed; a larger one is followed (see above)


class SteadyClock:
    """Call it for the time. `ahead_s`: how far ahead of the host's clock it is now (0 but after a step back)."""

    def __init__(self, wall: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._wall, self._monotonic = wall, monotonic
        self._lock = threading.Lock()  # polls, notifiers and the API read it from their own threads
        self._last = wall()
        self._last_monotonic = monotonic()
        self.ahead_s = 0.0
        self.steps_back = 0  # host clock steps back seen (a metric)

    def not_before(self, t: float) -> None:
        """Never answer earlier than `t` (at start: the newest time in the saved state, which a host clock set
        back since by up to MAX_SLEW_S must not put in the future; a larger step is followed, as in a run)."""
        with self._lock:
            wall = self._wall()
            if t > self._last and t - wall <= MAX_SLEW_S:
                self._note_step(t - wall)
                self._last, self.ahead_s = t, max(0.0, t - wall)
            elif t - wall > MAX_SLEW_S:
                self._note_step(t - wall)

    def __call__(self) -> float:
        with self._lock:
            wall, mono = self._wall(), self._monotonic()
            elapsed = mono - self._last_monotonic
            self._last_monotonic = mono
            floor = self._last + (elapsed if elapsed > 0 else 0.0) * (1 - SLEW)
            if wall >= floor:
                now = wall
            elif floor - wall > MAX_SLEW_S:  # too large to absorb: lagwatch is never further ahead than that
                self._note_step(floor - wall)
                now = wall
            else:
                if self.ahead_s <= STEP_LOGGED_S < floor - wall:  # a new step, not the slew of the last one
                    self._note_step(floor - wall)
                now = floor
            self._last = now
            self.ahead_s = now - wall
            return now

    def _note_step(self, ahead: float) -> None:
        if ahead > MAX_SLEW_S:
            self.steps_back += 1
            log.error(
                "the host clock stepped back further than lagwatch absorbs; lagwatch follows it, and polls dated "
                "before the last one taken are held (alerts neither fire nor resolve) until the clock passes it",
                extra={"seconds_behind": round(ahead, 3), "max_absorbed_s": MAX_SLEW_S},
            )
        elif ahead > STEP_LOGGED_S:
            self.steps_back += 1
            log.warning(
                "the host clock is behind lagwatch's (stepped back); lagwatch's time runs 10% slower until it "
                "has caught up",
                extra={"seconds_behind": round(ahead, 3), "catch_up_s": round(ahead / SLEW)},
            )
