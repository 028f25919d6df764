"""The alert book: every alert, what each receiver was told, silences and storms; and `due`, which turns them into
notifications. Pure: `apply` and `due` take the time from their caller; persistence is plain JSON-able rows.

Notifications go per alert group (labels in `group_by`) and per receiver, as Alertmanager's pipeline:
route (a receiver takes the alerts its route accepts) -> silence and inhibition (lagwatch.alerts.muting) ->
per-receiver dedup and timing (lagwatch.alerts.nflog) -> the outbox; storms of new groups become one summary
(lagwatch.alerts.storms). An alert that drops below a receiver's route (a critical that becomes a warning, for a
pager taking criticals) is resolved for that receiver. The states of the alerts themselves: lagwatch.alerts.lifecycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lagwatch.alerts import lifecycle, muting, nflog
from lagwatch.alerts.groups import AlertGroup, group_key, load_group
from lagwatch.alerts.muting import Inhibitor, Silence
from lagwatch.alerts.nflog import NotificationLog
from lagwatch.alerts.records import EVERYONE, Alert, AlertState, Notification, NotificationKind, Receiver
from lagwatch.alerts.settings import AlertsConfig
from lagwatch.alerts.storms import Storm, StormDesk, storm_key
from lagwatch.model import Finding, Severity, from_row

_NONE: frozenset[str] = frozenset()


@dataclass
class AlertBook:
    config: AlertsConfig
    alerts: dict[str, Alert] = field(default_factory=dict)
    groups: dict[str, AlertGroup] = field(default_factory=dict)
    silences: list[Silence] = field(default_factory=list)
    sequence: int = 0
    receivers: tuple[Receiver, ...] = EVERYONE
    storms: dict[str, Storm] = field(default_factory=dict)
    # Alert key -> its group key (a cache: the group_by labels are part of the key; not saved).
    _group_keys: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    # What each receiver has and will have (over `groups`; what is in flight is rebuilt from the outbox at a start).
    log: NotificationLog = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.log = NotificationLog(self.groups)

    # -- alert states (lagwatch.alerts.lifecycle) ------------------------------------------------------------------

    def active_severities(self, cluster: str) -> dict[str, str]:
        return lifecycle.active_severities(self.alerts, cluster)

    def apply(
        self,
        cluster: str,
        findings: Iterable[Finding],
        frozen_groups: frozenset[str] | None,
        now: float,
        held: frozenset[str] = frozenset(),
        partial: frozenset[tuple[str, str | None]] = frozenset(),
    ) -> None:
        lifecycle.apply(self.alerts, cluster, findings, frozen_groups, now, self._still_told, held, partial)

    def forget_pending(self, cluster: str) -> None:
        lifecycle.forget_pending(self.alerts, cluster, self._still_told)

    def relabel(self, labels_of: Callable[[Alert], tuple[Mapping[str, str], str]], now: float) -> int:
        return lifecycle.relabel(self.alerts, labels_of, now, self._still_told)

    def resolve_cluster(self, cluster: str, now: float) -> int:
        return lifecycle.resolve_cluster(self.alerts, cluster, now, self._still_told)

    def _still_told(self, alert: Alert) -> bool:
        gkey = self._group_keys.get(alert.key) or self.group_key(alert)[0]
        return self.log.told_anyone(self.groups.get(gkey), alert.key)

    def group_key(self, alert: Alert) -> tuple[str, dict[str, str]]:
        return group_key(self.config.group_by, alert)

    # -- muting (lagwatch.alerts.muting) -----------------------------------------------------------------------

    def silenced(self, alert: Alert, now: float) -> Silence | None:
        return muting.silenced(self.silences, alert, now)

    def load_config_silences(self) -> None:
        self.silences = [s for s in self.silences if s.created_by != "config"] + muting.config_silences(self.config)

    # -- notifications -------------------------------------------------------------------------------------------

    def _next_id(self) -> str:
        self.sequence += 1
        return f"{self.sequence:08d}"

    def _storms(self) -> StormDesk:
        return StormDesk(self.config, self.storms, self.groups, self.alerts, self._next_id, self.log)

    def due(self, now: float) -> list[Notification]:
        """Notifications to send now, each for one receiver. Their effect is recorded at once (they go to the
        outbox in the same save)."""
        self.silences = muting.without_ended(self.silences, now)
        inhibitors: list[Inhibitor] = (
            muting.inhibitors(
                self.config.inhibit_rules, [a for a in self.alerts.values() if a.state == AlertState.FIRING]
            )
            if self.config.inhibit_rules
            else []
        )
        by_group = self._alerts_by_group()
        desk = self._storms()
        out: list[Notification] = []
        starting: dict[tuple[str, str], list[tuple[AlertGroup, list[Alert]]]] = {}  # (receiver, cluster) -> firsts
        silences = self.silences
        repeat_interval_s = self.config.repeat_interval_s
        # Per receiver: whether its route takes every alert (no matchers, no least severity), so that the alerts
        # firing for it are those live, not asked one by one (at 100,000 alerting groups, at every poll).
        routes = [
            (receiver, not receiver.matchers and receiver.min_severity == Severity.INFO) for receiver in self.receivers
        ]
        for gkey, group in list(self.groups.items()):
            alerts = by_group.get(gkey, [])
            live = [
                a
                for a in alerts
                if a.state == AlertState.FIRING
                and (not silences or muting.silenced(silences, a, now) is None)
                and (not inhibitors or not muting.inhibited(a, inhibitors))
            ]
            live_keys = {a.key for a in live}
            # Firing but silenced or inhibited: a receiver told of one keeps it while nothing is sent (no news while
            # it is muted), so that its end is still told, and an alert still firing when the silence expires goes
            # on in the message the receiver has (forgotten, it came back as a new incident in a new Slack message,
            # the old one left red). A receiver not routed the inhibiting alert was never told the resolve at all.
            muted = (
                {a.key for a in alerts if a.state == AlertState.FIRING and a.key not in live_keys}
                if len(live) < len(alerts)
                else _NONE
            )
            for receiver, takes_all in routes:
                r = receiver.name
                told = self.log.told(group, r)
                firing = live if takes_all else [a for a in live if receiver.accepts(a)]
                current = {a.key: a.severity for a in firing}
                if told == current and (not current or now - (group.last_notified(r) or 0.0) < repeat_interval_s):
                    # The steady state: the receiver has, or will have, what fires for it now, and no repeat is
                    # due. What follows decides nothing then (nothing ended, nothing new), and took a third of
                    # `due` at 100,000 alerting groups with a receiver.
                    continue
                # Announced, and now resolved, or still firing but below this receiver's route, or resolved and
                # then pending again (its condition back, its `for` not yet over): all of them ended for the
                # receiver, which is owed a "resolved" (a pending alert is not firing, as in Alertmanager).
                left = [
                    a
                    for a in alerts
                    if a.key in told and a.key not in current and (a.state != AlertState.FIRING or a.key in live_keys)
                ]
                moved = self._regrouped(gkey, told, alerts) if len(told) > len(left) + len(current) else ()
                if (
                    moved
                ):  # ended here, going on in another group: told so, not dropped quietly (its message stayed red)
                    left += moved
                kind = nflog.kind_due(self.config, told, group.last_notified(r), firing, current, left, now)
                if kind is None:
                    # What else the receiver was told of is gone from the book: it leaves quietly.
                    gone = {a.key for a in left}
                    for k in [k for k in told if k not in current and k not in gone and k not in muted]:
                        del told[k]
                    continue
                if kind == NotificationKind.FIRING and not told and receiver.storms:
                    cluster = next((a.cluster for a in firing), group.labels.get("cluster", ""))
                    starting.setdefault((r, cluster), []).append((group, firing))
                    continue
                if (
                    group.storm_of(r) is not None
                ):  # announced in a storm summary: followed quietly, the storm says the rest
                    self.log.quietly(group, r, current, now)
                    continue
                # A notification shows what is live: muted alerts leave the receiver's view with it, told as ended
                # (marked muted): left out without a word, a receiver that keeps alerts by key (a webhook, an
                # Alertmanager until its endsAt, 6 h) had them firing long after they ended. When their mute ends,
                # they are news again: an update, or a new incident after a "resolved".
                hushed = [a for a in alerts if a.key in muted and a.key in told] if muted else []
                regrouped = frozenset(a.key for a in moved)
                n = nflog.compose(self._next_id(), group, r, told, kind, firing, left, now, hushed, regrouped)
                out.append(n)
                self.log.decided(group, r, n.id, current, now)
        for (r, cluster), firsts in starting.items():
            if storm_key(r, cluster) in self.storms or len(firsts) > self.config.storm_threshold:
                out += desk.joined(r, cluster, firsts, now)
                continue
            for group, firing in firsts:
                n = nflog.compose(self._next_id(), group, r, {}, NotificationKind.FIRING, firing, [], now)
                out.append(n)
                self.log.decided(group, r, n.id, {a.key: a.severity for a in firing}, now)
        out += desk.due(now)
        self._let_go(by_group)
        return out

    def _regrouped(self, gkey: str, told: dict[str, Severity], alerts: list[Alert]) -> list[Alert]:
        """Alerts the receiver was told of in this group that are in the book under another group now: `group_by`
        changed between two runs (the labels of an alert never change while it lives: a change makes a new one)."""
        own = {a.key for a in alerts}
        group_keys = self._group_keys
        return [self.alerts[k] for k in told if k not in own and k in self.alerts and group_keys.get(k, gkey) != gkey]

    def _alerts_by_group(self) -> dict[str, list[Alert]]:
        """The book's alerts by alert group; groups new since the last `due` are made."""
        by_group: dict[str, list[Alert]] = {}
        group_keys, groups = self._group_keys, self.groups
        if len(group_keys) > 2 * len(self.alerts) + 1000:  # alerts gone since: their keys go too
            self._group_keys = group_keys = {k: g for k, g in group_keys.items() if k in self.alerts}
        for alert in self.alerts.values():
            # An alert's labels are part of its key: its group key is worked out once, not at every poll.
            gkey = group_keys.get(alert.key)
            if gkey is None or gkey not in groups:
                gkey, labels = self.group_key(alert)
                group_keys[alert.key] = gkey
                if gkey not in groups:
                    groups[gkey] = AlertGroup(gkey, labels)
            alerts = by_group.get(gkey)
            if alerts is None:
                by_group[gkey] = [alert]
            else:
                alerts.append(alert)
        return by_group

    def _let_go(self, by_group: dict[str, list[Alert]]) -> None:
        """Resolved alerts are done once their end was decided for every receiver that saw them, or if none ever
        did; a group goes once nothing is left to tell anyone and nothing of it is still to be delivered."""
        log = self.log
        resolved = AlertState.RESOLVED
        for gkey, group in list(self.groups.items()):
            alerts = by_group.get(gkey, [])
            if alerts and not any(a.state == resolved for a in alerts):
                continue  # none resolved: none to let go, and the group keeps its alerts (most groups, most polls)
            needed = log.needed(group)
            for a in alerts:
                if a.state == AlertState.RESOLVED and a.key not in needed:
                    self.alerts.pop(a.key, None)
            if not needed and not any(a.key in self.alerts for a in alerts) and not log.busy(group):
                del self.groups[gkey]

    def delivered(self, n: Notification) -> tuple[str, AlertGroup | None] | None:
        """`n` reached its receiver (lagwatch.alerts.nflog): (the group's key, the group as its row is to be saved,
        None once it is let go), or None if no saved memory changed. A group whose last "resolved" arrived, with
        nothing left in flight, is let go now (the next `due` makes it again if it has alerts: its memory is
        empty either way)."""
        if n.storm is not None:
            storm = self.storms.get(n.group_key)
            if storm is not None:
                storm.told = True  # its message exists: its end is owed
            return None
        group = self.log.delivered(n)
        if group is None:
            return None
        if not self.log.busy(group) and not self.log.needed(group):
            self.groups.pop(group.key, None)
            return group.key, None
        return group.key, group

    def undelivered(self, dropped: Sequence[Notification]) -> None:
        """Notifications of one receiver and one alert group (or storm), oldest first, that it will never get: the
        first refused for good or grown too old, the others queued behind it and decided on what it said. They
        leave the log's queue, so the receiver's view is again what it has: alerts announced for the first time
        in them are not its (no "resolved" for a firing that never arrived), an escalation it never got is not,
        and alerts announced as ended are still its, so their "resolved" is sent again (a resolve dropped as too
        old, after a long outage, left the receiver's message firing for good). The next `due` decides afresh
        from there, once group_interval is over (not at once)."""
        if not dropped:
            return
        first = dropped[0]
        if first.storm is None:
            self.log.undelivered(dropped, self.alerts)
        else:
            storm = self.storms.get(first.group_key)
            if storm is not None:
                storm.announced = {}  # nothing of it arrived: every group is news for the summary after group_interval
            elif any(n.kind == NotificationKind.RESOLVED for n in dropped):
                # Its end never arrived (too old after an outage): the storm is back, empty, so that its end is
                # told again at the next `due` (its message stayed red for good).
                last = dropped[-1]
                self.storms[first.group_key] = Storm(
                    first.group_key, first.receiver, first.storm.cluster, last_notified_at=last.created_at, told=True
                )
        last = dropped[-1]
        group = self.groups.get(last.group_key)
        if group is not None:  # group_interval counts from the last decision, as if it had been sent
            group.set_last_notified(last.receiver, last.created_at)

    def undelivered_raw(self, receiver: str, group_key: str, alerts: Iterable[Any]) -> None:
        """A queued notification whose row could not be read at a start (what can be read of its alerts): it is in
        no queue, so the receiver's view is what it has; alerts it told as ended that the book let go come back."""
        group = self.groups.get(group_key)
        if group is not None:
            nflog.restore_resolved(self.alerts, self.log.told(group, receiver), nflog.records_of_row(alerts))

    # -- persistence (rows in the state database: see lagwatch/state/db.py) ---------------------------------

    @classmethod
    def from_json(
        cls,
        config: AlertsConfig,
        raw: dict[str, Any],
        receivers: tuple[Receiver, ...] = EVERYONE,
        rejected: list[tuple[str, str, str]] | None = None,
    ) -> AlertBook:
        """Restores a saved book row by row. A row of another shape (a newer lagwatch, a hand edit) is skipped and
        reported in `rejected` as (table, key, why), so the caller can set it aside; the other rows load."""
        book = cls(config=config, sequence=int(raw.get("sequence", 0)), receivers=receivers)

        def load(table: str, row: Any, make: Any) -> Any:
            try:
                return make(row)
            except (KeyError, TypeError, ValueError, AttributeError, StopIteration) as e:
                key = str(row.get("key", row.get("id"))) if isinstance(row, dict) else repr(row)[:80]
                if rejected is not None:
                    rejected.append((table, key, f"{type(e).__name__}: {e}"))
                return None

        for row in raw.get("alerts", []):
            alert = load("alerts", row, lambda a: from_row(Alert, a))
            if alert is not None:
                book.alerts[alert.key] = alert
        for row in raw.get("groups", []):
            group = load("alert_groups", row, lambda g: load_group(g, receivers))
            if group is not None:
                book.groups[group.key] = group
        names = {r.name for r in receivers}
        for row in raw.get("storms", []):
            # A storm saved before `announced` was kept: its members were all in its last summary.
            # One saved before `told` was kept had its first summary decided, and most likely delivered.
            storm = load(
                "storms",
                row,
                lambda st: from_row(
                    Storm,
                    {"announced": dict(st.get("members") or {}), "told": bool(st.get("last_notified_at")), **st},
                ),
            )
            if storm is not None and storm.receiver in names:  # a receiver no longer configured: let go
                book.storms[storm.key] = storm
        for row in raw.get("silences", []):
            silence = load("silences", row, muting.load_silence)
            if silence is not None:
                book.silences.append(silence)
        return book
