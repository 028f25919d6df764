"""The alert lifecycle: findings + what was already known + now -> alert states and notifications to send.

Pure: `apply` and `due` take the time from their caller; persistence is plain JSON-able data.

  finding first seen            -> pending (firing at once when the rule has no `for`)
  pending for `for` seconds     -> firing
  finding gone, was pending     -> dropped silently: never announced, so never "resolved"
  finding gone, was firing      -> resolved
  alerts of a frozen scope (cluster down, group unreadable) neither fire nor resolve; pending ones are dropped,
  so that after the outage their `for` counts fresh evidence only
  held alerts (a rule could not judge its window) neither fire nor resolve; pending ones restart their `for`

Notifications go per alert group (labels in `group_by`) and per receiver, as Alertmanager's pipeline:
route (a receiver takes the alerts its route accepts) -> silence and inhibition -> per-receiver dedup (each receiver
remembers what it was told, so it never gets a "resolved" for an alert it never saw) -> the outbox. Per receiver:
the first after `group_wait`, changes at most every `group_interval`, an unchanged firing group again after
`repeat_interval`, and a last one when all resolved. An alert that drops below a receiver's route (a critical that
becomes a warning, for a pager taking criticals) is resolved for that receiver.

Storms: when more than `storm_threshold` alert groups of one cluster would start firing for a receiver at once, it
gets one summary for the cluster instead (counts by rule, the worst groups), and an update when the storm ends; the
groups are tracked and resolve one by one as always (API, metrics), quietly for that receiver.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, NamedTuple

from lagwatch.alerts.settings import AlertsConfig
from lagwatch.matchers import compile_pattern, full_match
from lagwatch.model import Finding, from_row, key_part

_RANK = {"info": 0, "warning": 1, "critical": 2}
SILENCE_KEPT_S = 3600.0  # an API silence is let go this long after it ended
_NONE: frozenset[str] = frozenset()


def _as_dict(alert: Alert) -> dict[str, Any]:
    """A notification's copy of an alert (dataclasses.asdict copies deeply and costs 10x more)."""
    return {**vars(alert), "labels": dict(alert.labels), "details": dict(alert.details)}


def _lag_of(alert: Alert) -> int:
    lag = alert.details.get("lag")
    return lag if isinstance(lag, int) else 0


def for_elapsed(started_at: float, for_s: float, now: float) -> bool:
    """Whether a condition that began at `started_at` has held for `for_s`. Poll times jitter by milliseconds: a
    `for` of 20 s seen at polls 19.9998 s apart has held, not one poll short (5% of `for`, at most 1 s)."""
    return now - started_at >= for_s - min(1.0, 0.05 * for_s)


@dataclass
class Alert:
    key: str
    rule: str
    severity: str
    cluster: str
    group: str | None
    labels: dict[str, str]
    summary: str
    details: dict[str, Any]
    runbook_url: str | None
    for_s: float
    state: str  # pending | firing | resolved
    started_at: float
    updated_at: float
    fired_at: float | None = None
    resolved_at: float | None = None
    # Its rule's keep_firing_for_s: once firing, it resolves only after its condition was not found for this long
    # (`updated_at` is when it was last found).
    keep_firing_for_s: float = 0.0

    def matches(self, matchers: Iterable[tuple[str, str]]) -> bool:
        """Every (label, regex) full-matches the label's value; `rule` and `severity` count as labels, over any
        labels of those names; a missing label is "". Silences, routes and inhibition all match alerts so. No dict
        of the labels is built: inhibition asks it of every firing alert at every poll (20,000 in a storm)."""
        labels = self.labels
        for label, pattern in matchers:
            value = self.rule if label == "rule" else self.severity if label == "severity" else labels.get(label, "")
            if not full_match(pattern, value):
                return False
        return True


@dataclass
class Silence:
    id: str
    matchers: dict[str, str]
    ends_at: float
    starts_at: float | None = None
    comment: str = ""
    created_by: str = "config"

    def active(self, now: float) -> bool:
        return (self.starts_at is None or self.starts_at <= now) and now < self.ends_at


@dataclass(frozen=True)
class Receiver:
    """A notifier as the lifecycle sees it: which alerts its route takes (at least `min_severity`, labels matching
    `matchers`, regexes on the whole value; `rule` and `severity` count as labels)."""

    name: str
    min_severity: str = "info"
    matchers: tuple[tuple[str, str], ...] = ()
    # Storm summaries are for people; a receiver that groups alerts itself (Alertmanager) gets every group.
    storms: bool = True

    def accepts(self, alert: Alert) -> bool:
        if _RANK.get(alert.severity, 0) < _RANK.get(self.min_severity, 0):
            return False
        return not self.matchers or alert.matches(self.matchers)


EVERYONE = (Receiver("default"),)
_ALERT_FIELDS = tuple(f.name for f in fields(Alert))


@dataclass
class AlertGroup:
    key: str
    labels: dict[str, str]
    # Per receiver: alert key -> severity, as last announced to it, and when.
    notified: dict[str, dict[str, str]] = field(default_factory=dict)
    last_notified_at: dict[str, float] = field(default_factory=dict)
    storm: dict[str, str] = field(default_factory=dict)  # receiver -> storm key: announced in a storm summary


@dataclass
class Storm:
    """Alert groups of one cluster announced to one receiver as a single summary."""

    key: str
    receiver: str
    cluster: str
    members: dict[str, str] = field(default_factory=dict)  # group key -> its worst severity now
    last_notified_at: float = 0.0
    # The members as the last summary told them: a group new or worse since is news for the next summary.
    announced: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Notification:
    id: str
    group_key: str
    group_labels: dict[str, str]
    kind: str  # firing | update | repeat | resolved
    severity: str
    created_at: float
    alerts: tuple[dict[str, Any], ...]  # the group's firing alerts, then those resolved since the last one
    receiver: str = "default"
    storm: dict[str, Any] | None = None  # a storm summary: cluster, groups firing, counts by rule, worst groups

    @property
    def firing(self) -> list[dict[str, Any]]:
        return [a for a in self.alerts if a["state"] == "firing"]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "alerts": list(self.alerts)}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Notification:
        return from_row(cls, {**raw, "alerts": tuple(raw["alerts"])})


class Inhibitor(NamedTuple):
    """An inhibit rule with firing sources, as `due` asks it of each firing alert."""

    target: tuple[tuple[str, str], ...]
    equal: tuple[str, ...]
    sources: dict[tuple[str, ...], set[str]]  # values of the `equal` labels -> keys of the firing sources


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

    # -- alert states -------------------------------------------------------------------------------------------

    def active_severities(self, cluster: str) -> dict[str, str]:
        """Severity of each firing alert of `cluster`, and "pending" for each pending one: rules with hysteresis
        hold only what has fired (a pending alert's condition must hold in full for its whole `for`), and rules
        can hold both when they cannot judge."""
        return {
            a.key: a.severity if a.state == "firing" else "pending"
            for a in self.alerts.values()
            if a.cluster == cluster and a.state != "resolved"
        }

    def apply(
        self,
        cluster: str,
        findings: Iterable[Finding],
        frozen_groups: frozenset[str] | None,
        now: float,
        held: frozenset[str] = frozenset(),
        partial: frozenset[tuple[str, str | None]] = frozenset(),
    ) -> None:
        """`partial`: (group, topic) read only in part this time, topic None for the group's own alerts; their
        alerts not found stay exactly as they are, and so do those found at a lower severity: what the rest says
        may raise them, never lower them (one poll without a partition's commit eased a critical lag to warning,
        and the next raised it again: two false updates)."""
        seen = set()
        for f in findings:
            key = f.key
            seen.add(key)
            alert = self.alerts.get(key)
            if (
                partial
                and alert is not None
                and alert.state == "firing"
                and (f.group, f.labels.get("topic")) in partial
                and _RANK.get(f.severity, 0) < _RANK.get(alert.severity, 0)
            ):
                continue
            if alert is None or alert.state == "resolved":
                alert = Alert(
                    key=key,
                    rule=f.rule,
                    severity=f.severity,
                    cluster=f.cluster,
                    group=f.group,
                    labels=dict(f.labels),
                    summary=f.summary,
                    details=dict(f.details),
                    runbook_url=f.runbook_url,
                    for_s=f.for_s,
                    state="pending",
                    started_at=now,
                    updated_at=now,
                    keep_firing_for_s=f.keep_firing_for_s,
                )
                self.alerts[key] = alert
            else:
                alert.severity, alert.summary, alert.details = f.severity, f.summary, dict(f.details)
                if alert.labels != f.labels:  # nearly always the same: no new dict per alert at every poll
                    alert.labels = dict(f.labels)
                alert.for_s, alert.runbook_url, alert.updated_at = f.for_s, f.runbook_url, now
                alert.keep_firing_for_s = f.keep_firing_for_s
            if alert.state == "pending" and for_elapsed(alert.started_at, alert.for_s, now):
                alert.state, alert.fired_at = "firing", now
        for key, alert in list(self.alerts.items()):
            if alert.cluster != cluster or key in seen or alert.state == "resolved":
                continue
            if partial and (alert.group, alert.labels.get("topic")) in partial:
                continue
            frozen = (frozen_groups is None and alert.rule != "cluster_unreachable") or (
                frozen_groups is not None and alert.group in frozen_groups
            )
            if frozen:
                # Nothing is known of this scope now. A group that could not be read drops its pending alerts (never
                # announced): its condition must hold for its whole `for` again, on fresh evidence. A failed poll
                # of the whole cluster keeps them as they are: one failed poll in three dropped them all, and
                # nothing ever fired; after a real outage (a blind spell), forget_pending drops them.
                if alert.state == "pending" and frozen_groups is not None:
                    self._drop_pending(alert, now)
                continue
            if key in held:
                if alert.state == "pending":
                    alert.started_at = now
                continue
            if alert.state == "pending":
                self._drop_pending(alert, now)
            elif now - alert.updated_at < alert.keep_firing_for_s:
                continue  # its condition comes and goes: one incident (Prometheus's keep_firing_for)
            else:
                alert.state, alert.resolved_at, alert.updated_at = "resolved", now, now

    def forget_pending(self, cluster: str) -> None:
        """After a blind spell (lagwatch down, polls skipped): pending alerts of `cluster` start over."""
        for alert in [a for a in self.alerts.values() if a.cluster == cluster and a.state == "pending"]:
            self._drop_pending(alert, alert.updated_at)

    def _drop_pending(self, alert: Alert, now: float) -> None:
        """A pending alert that goes away was never announced, and is forgotten; unless a receiver still has it
        as firing (it fired, resolved within group_interval, and came back pending before that receiver was told
        of the resolve): then it is resolved, and that receiver gets its "resolved"."""
        gkey = self._group_keys.get(alert.key) or self.group_key(alert)[0]
        group = self.groups.get(gkey)
        if group is not None and any(alert.key in told for told in group.notified.values()):
            alert.state, alert.resolved_at, alert.updated_at = "resolved", now, now
        else:
            del self.alerts[alert.key]

    # -- notifications ------------------------------------------------------------------------------------------

    def relabel(self, labels_of: Callable[[Alert], tuple[Mapping[str, str], str]], now: float) -> int:
        """Alerts whose labels the configuration now gives otherwise (a routing label added by an override, or
        `rules.labels` changed between two runs): the labels are part of an alert's key, so at the restart the
        alert under its old labels resolved, and the incident fired again under the new ones only after its `for`,
        its hysteresis lost (a lag between the resolve ratio and the threshold never paged again). Now the old
        labels end at once (each receiver told of them gets their "resolved", as Alertmanager ends a label set),
        and an alert under the new ones goes on from where the old one was: firing at once, at its severity.
        `labels_of` answers (labels, key suffix), as the rules' resolver does. Returns how many alerts moved."""
        moved = 0
        for key, alert in list(self.alerts.items()):
            if alert.state == "resolved":
                continue  # its end is told under the labels its receivers have
            labels, suffix = labels_of(alert)
            new_key = alert.rule + suffix
            there = self.alerts.get(new_key)
            if new_key == key or (there is not None and there.state != "resolved"):
                continue  # a resolved one there is these labels' end still owed (labels changed back): it goes on
            self.alerts[new_key] = replace(alert, key=new_key, labels=dict(labels), updated_at=now)
            if alert.state == "pending":
                self._drop_pending(alert, now)
            else:
                alert.state, alert.resolved_at, alert.updated_at = "resolved", now, now
            moved += 1
        return moved

    def group_key(self, alert: Alert) -> tuple[str, dict[str, str]]:
        # `rule` as routes and silences take it (Alertmanager's alertname): not a label, it grouped nothing.
        labels = {name: alert.rule if name == "rule" else alert.labels.get(name, "") for name in self.config.group_by}
        return "|".join(f"{key_part(k)}={key_part(v)}" for k, v in labels.items()), labels

    def silenced(self, alert: Alert, now: float) -> Silence | None:
        if not self.silences:  # asked for every firing alert at every poll: no labels built for nothing
            return None
        return next((s for s in self.silences if s.active(now) and alert.matches(s.matchers.items())), None)

    def inhibitors(self, firing: list[Alert]) -> list[Inhibitor]:
        """Per inhibit rule with a firing source, those sources by their values of its `equal` labels. Built once
        per `due`: looking a target up is then one dict access, not a pass over every firing alert (at 1,000
        firing groups the pairwise check took 10-15 s a poll)."""
        index: list[Inhibitor] = []
        for rule in self.config.inhibit_rules:
            by_equal: dict[tuple[str, ...], set[str]] = {}
            matchers = tuple(rule.source.items())
            for source in firing:
                if source.matches(matchers):
                    labels = source.labels
                    values = tuple([labels.get(name, "") for name in rule.equal])
                    by_equal.setdefault(values, set()).add(source.key)
            if by_equal:  # a rule without a firing source inhibits nothing: not asked of every alert
                index.append(Inhibitor(tuple(rule.target.items()), tuple(rule.equal), by_equal))
        return index

    def inhibited(self, alert: Alert, inhibitors: list[Inhibitor]) -> bool:
        """Whether another firing alert inhibits this one (Alertmanager's inhibition: one story per incident)."""
        for target, equal, by_equal in inhibitors:
            # The target first: most alerts are not one (a memoised match), and then no tuple of labels is built.
            if not alert.matches(target):
                continue
            labels = alert.labels
            sources = by_equal.get(tuple([labels.get(name, "") for name in equal]))
            if sources and (len(sources) > 1 or alert.key not in sources):
                return True
        return False

    def due(self, now: float) -> list[Notification]:
        """Notifications to send now, each for one receiver. Their effect is recorded at once (they go to the
        outbox in the same save)."""
        if self.silences and any(s.created_by != "config" and s.ends_at < now - SILENCE_KEPT_S for s in self.silences):
            # Ended API silences go (the API lists active and future ones only: nobody could find their ids to
            # delete them, and the book and the state database kept them for good).
            self.silences = [s for s in self.silences if s.created_by == "config" or s.ends_at >= now - SILENCE_KEPT_S]
        inhibitors = (
            self.inhibitors([a for a in self.alerts.values() if a.state == "firing"])
            if self.config.inhibit_rules
            else []
        )
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
        out: list[Notification] = []
        starting: dict[tuple[str, str], list[tuple[AlertGroup, list[Alert]]]] = {}  # (receiver, cluster) -> firsts
        for gkey, group in list(self.groups.items()):
            alerts = by_group.get(gkey, [])
            live = [
                a
                for a in alerts
                if a.state == "firing" and self.silenced(a, now) is None and not self.inhibited(a, inhibitors)
            ]
            live_keys = {a.key for a in live}
            # Firing but silenced or inhibited: a receiver told of one keeps it while nothing is sent (no news while
            # it is muted), so that its end is still told, and an alert still firing when the silence expires goes
            # on in the message the receiver has (forgotten, it came back as a new incident in a new Slack message,
            # the old one left red). A receiver not routed the inhibiting alert was never told the resolve at all.
            muted = (
                {a.key for a in alerts if a.state == "firing" and a.key not in live_keys}
                if len(live) < len(alerts)
                else _NONE
            )
            for receiver in self.receivers:
                r = receiver.name
                told = group.notified.get(r, {})
                firing = [a for a in live if receiver.accepts(a)]
                current = {a.key: a.severity for a in firing}
                # Announced, and now resolved, or still firing but below this receiver's route, or resolved and
                # then pending again (its condition back, its `for` not yet over): all of them ended for the
                # receiver, which is owed a "resolved" (a pending alert is not firing, as in Alertmanager).
                left = [
                    a
                    for a in alerts
                    if a.key in told and a.key not in current and (a.state != "firing" or a.key in live_keys)
                ]
                kind = self._kind(told, group.last_notified_at.get(r), firing, current, left, now)
                if kind is None:
                    # What else the receiver was told of is gone from the book: it leaves quietly.
                    gone = {a.key for a in left}
                    for k in [k for k in told if k not in current and k not in gone and k not in muted]:
                        del told[k]
                    continue
                if kind == "firing" and not told and receiver.storms:
                    cluster = next((a.cluster for a in firing), group.labels.get("cluster", ""))
                    starting.setdefault((r, cluster), []).append((group, firing))
                    continue
                if r in group.storm:  # announced in a storm summary: followed quietly, the storm says the rest
                    self._record(group, r, current, now)
                    continue
                # A notification shows what is live: muted alerts leave the receiver's view with it, told as ended
                # (marked muted): left out without a word, a receiver that keeps alerts by key (a webhook, an
                # Alertmanager until its endsAt, 6 h) had them firing long after they ended. When their mute ends,
                # they are news again: an update, or a new incident after a "resolved".
                hushed = [a for a in alerts if a.key in muted and a.key in told] if muted else []
                out.append(self._notify(group, r, kind, firing, left, now, hushed))
                self._record(group, r, current, now)
        for (r, cluster), firsts in starting.items():
            storm = self.storms.get(f"storm|{r}|{cluster}")
            if storm is not None or len(firsts) > self.config.storm_threshold:
                out += self._storm_joined(r, cluster, firsts, now)
                continue
            for group, firing in firsts:
                out.append(self._notify(group, r, "firing", firing, [], now))
                self._record(group, r, {a.key: a.severity for a in firing}, now)
        out += self._storms_due(now)
        for gkey, group in list(self.groups.items()):
            alerts = by_group.get(gkey, [])
            needed = {k for told in group.notified.values() for k in told}
            # Resolved alerts are done once every receiver that saw them was told, or if none ever did.
            for a in alerts:
                if a.state == "resolved" and a.key not in needed:
                    self.alerts.pop(a.key, None)
            if not needed and not any(a.key in self.alerts for a in alerts):
                del self.groups[gkey]
        return out

    def undelivered(self, dropped: Sequence[Notification]) -> None:
        """Notifications of one receiver and one alert group (or storm), oldest first, that it will never get: the
        first refused for good or grown too old, the others queued behind it and decided on what it said. What
        the receiver was told goes back, newest first, to what it had before the first of them: alerts announced
        for the first time are taken out (no "resolved" for a firing that never arrived: one queued behind it was
        delivered), an escalation goes back to the severity told before, and alerts announced as ended are the
        receiver's again, so their "resolved" is sent again (a resolve dropped as too old, after a long outage,
        left the receiver's message firing for good). The next `due` decides afresh from there, once
        group_interval is over (not at once). Alertmanager logs a notification only once it is sent."""
        if not dropped:
            return
        for n in reversed(dropped):
            if n.storm is None:
                self._undo(n.receiver, n.group_key, n.group_labels, n.alerts)
                continue
            storm = self.storms.get(n.group_key)
            if storm is not None:
                storm.announced = {}  # nothing of it arrived: every group is news for the summary after group_interval
        last = dropped[-1]
        group = self.groups.get(last.group_key)
        if group is not None:  # group_interval counts from the last decision, as if it had been sent
            group.last_notified_at[last.receiver] = last.created_at

    def undelivered_raw(self, receiver: str, group_key: str, created_at: float, alerts: Iterable[Any]) -> None:
        """`undelivered` of one notification from its parts, as read from a row that may be damaged (what cannot
        be read is left as it is), and only if it is still the last one the group gave that receiver."""
        group = self.groups.get(group_key)
        if group is None or group.last_notified_at.get(receiver) != created_at:
            return  # gone, or a later notification of the group has since superseded this one
        self._undo(receiver, group_key, group.labels, alerts)

    def _undo(self, receiver: str, group_key: str, labels: Mapping[str, str], alerts: Iterable[Any]) -> None:
        """What the receiver was told goes back to what it had before a notification of these `alerts`."""
        group = self.groups.get(group_key)
        if group is None:  # let go once its last "resolved" was decided: back, to resolve again
            group = self.groups[group_key] = AlertGroup(group_key, dict(labels))
        told = group.notified.setdefault(receiver, {})
        for a in alerts:
            if not isinstance(a, dict) or not isinstance(a.get("key"), str):
                continue
            key, severity = a["key"], a.get("severity")
            if a.get("state") == "firing":
                if a.get("first_told"):
                    told.pop(key, None)
                elif isinstance(a.get("previous_severity"), str):
                    told[key] = a["previous_severity"]
            elif a.get("state") == "resolved" and isinstance(severity, str):
                told[key] = severity  # it still has it as firing: the resolve is owed again
                if key not in self.alerts:  # let go once the resolve was queued: back, to be resolved again
                    with contextlib.suppress(TypeError, ValueError):
                        self.alerts[key] = Alert(**{f: a[f] for f in _ALERT_FIELDS if f in a})
        if not told:  # last_notified_at stays: the group is announced again after group_interval, not at once
            group.notified.pop(receiver, None)

    def _record(self, group: AlertGroup, receiver: str, current: dict[str, str], now: float) -> None:
        if current:
            group.notified[receiver], group.last_notified_at[receiver] = current, now
        else:
            group.notified.pop(receiver, None)
            group.last_notified_at.pop(receiver, None)
            group.storm.pop(receiver, None)

    def _kind(
        self,
        told: dict[str, str],
        last_at: float | None,
        firing: list[Alert],
        current: dict[str, str],
        left: list[Alert],
        now: float,
    ) -> str | None:
        cfg = self.config
        if not told:
            if last_at is not None and now - last_at < cfg.group_interval_s:
                return None  # its last announcement never arrived (undelivered): not at every poll
            if firing and now - min(now if a.fired_at is None else a.fired_at for a in firing) >= cfg.group_wait_s:
                return "firing"
            return None
        since_last = now - (last_at or 0.0)
        gone = {a.key for a in left}
        announced = {k: s for k, s in told.items() if k in current or k in gone}
        if current != announced or left:
            if since_last < cfg.group_interval_s:
                return None
            if not current:
                if cfg.send_resolved:
                    return "resolved"
                told.clear()
                return None
            return "update"
        if current and since_last >= cfg.repeat_interval_s:
            return "repeat"
        return None

    def _notify(
        self,
        group: AlertGroup,
        receiver: str,
        kind: str,
        firing: list[Alert],
        left: list[Alert],
        now: float,
        muted: Sequence[Alert] = (),
    ) -> Notification:
        self.sequence += 1
        hushed = {a.key for a in muted}
        told = group.notified.get(receiver, {})  # before this notification is recorded
        # Ended for this receiver now, if not before (a pending alert, or one below its route, has no resolved_at),
        # at the severity it was told: a receiver that knows alerts by their severity (Alertmanager's labels) ends
        # the one it has. Muted ones (silenced, inhibited) end for it too, marked so.
        resolved = [
            {
                **_as_dict(a),
                "state": "resolved",
                "severity": told.get(a.key, a.severity),
                "resolved_at": a.resolved_at if a.state == "resolved" else now,
                **({"muted": True} if a.key in hushed else {}),
            }
            for a in sorted([*left, *muted], key=lambda a: a.key)
        ]
        alerts = []
        for a in sorted(firing, key=lambda a: (-_RANK.get(a.severity, 0), a.key)):
            entry = _as_dict(a)
            before = told.get(a.key)
            if before is None:
                entry["first_told"] = True  # if it never arrives, the receiver never had this alert (undelivered)
            elif before != a.severity:
                entry["previous_severity"] = before  # escalated or eased since it was told: that one has ended
            alerts.append(entry)
        alerts += resolved
        severity = max((a.severity for a in firing), key=lambda s: _RANK.get(s, 0), default="resolved")
        return Notification(
            id=f"{self.sequence:08d}",
            group_key=group.key,
            group_labels=dict(group.labels),
            kind=kind,
            severity=severity,
            created_at=now,
            alerts=tuple(alerts),
            receiver=receiver,
        )

    # -- storms ---------------------------------------------------------------------------------------------------

    def _storm_joined(
        self, receiver: str, cluster: str, firsts: list[tuple[AlertGroup, list[Alert]]], now: float
    ) -> list[Notification]:
        key = f"storm|{receiver}|{cluster}"
        storm = self.storms.get(key)
        kind = "update" if storm is not None else "firing"
        if storm is None:
            storm = self.storms[key] = Storm(key, receiver, cluster)
        for group, firing in firsts:
            storm.members[group.key] = max((a.severity for a in firing), key=lambda s: _RANK.get(s, 0))
            group.storm[receiver] = key
            self._record(group, receiver, {a.key: a.severity for a in firing}, now)
        if kind == "update" and now - storm.last_notified_at < self.config.group_interval_s:
            return []  # joined quietly: the summary after group_interval counts them (_storms_due)
        return [self._storm_summary(storm, kind, now)]

    def _storms_due(self, now: float) -> list[Notification]:
        """Each storm's members as they are now (groups resolved leave, a group's worst severity follows its
        alerts); then its summary when due: "update" once group_interval is over if a group joined or got worse
        since the last summary, "repeat" after repeat_interval, "resolved" when the last group has left."""
        out = []
        cfg = self.config
        for key, storm in list(self.storms.items()):
            still = {}
            for g in storm.members:
                group = self.groups.get(g)
                if group is None or group.storm.get(storm.receiver) != key:
                    continue
                told = group.notified.get(storm.receiver, {})
                still[g] = max(told.values(), key=lambda s: _RANK.get(s, 0), default=storm.members[g])
            storm.members = still
            if not still:
                del self.storms[key]
                if cfg.send_resolved:
                    out.append(self._storm_summary(storm, "resolved", now))
                continue
            since_last = now - storm.last_notified_at
            announced = storm.announced
            news = any(
                g not in announced or _RANK.get(s, 0) > _RANK.get(announced[g], 0) for g, s in still.items()
            )  # a group joined or got worse (groups that resolve leave quietly: the storm's end says it)
            if news and since_last >= cfg.group_interval_s:
                out.append(self._storm_summary(storm, "update", now))
            elif since_last >= cfg.repeat_interval_s:
                out.append(self._storm_summary(storm, "repeat", now))
        return out

    def _storm_summary(self, storm: Storm, kind: str, now: float) -> Notification:
        self.sequence += 1
        storm.last_notified_at, storm.announced = now, dict(storm.members)
        members = [self.groups[g] for g in storm.members if g in self.groups]
        alerts = [self.alerts[k] for g in members for k in g.notified.get(storm.receiver, {}) if k in self.alerts]
        by_rule: dict[str, int] = {}
        for a in alerts:
            by_rule[a.rule] = by_rule.get(a.rule, 0) + 1
        worst = sorted(alerts, key=lambda a: (-_RANK.get(a.severity, 0), -_lag_of(a), a.key))[:10]
        severity = max(storm.members.values(), key=lambda s: _RANK.get(s, 0), default="resolved")
        return Notification(
            id=f"{self.sequence:08d}",
            group_key=storm.key,
            group_labels={"cluster": storm.cluster, "group": ""},
            kind=kind,
            severity=severity if kind != "resolved" else "resolved",
            created_at=now,
            alerts=tuple(_as_dict(a) for a in worst),
            receiver=storm.receiver,
            storm={
                "cluster": storm.cluster,
                "groups_firing": len(members),
                "alerts_by_rule": dict(sorted(by_rule.items())),
                "worst_groups": sorted({a.group or "" for a in worst}),
            },
        )

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
            group = load("alert_groups", row, lambda g: _group(g, receivers))
            if group is not None:
                book.groups[group.key] = group
        names = {r.name for r in receivers}
        for row in raw.get("storms", []):
            # A storm saved before `announced` was kept: its members were all in its last summary.
            storm = load("storms", row, lambda st: from_row(Storm, {"announced": dict(st.get("members") or {}), **st}))
            if storm is not None and storm.receiver in names:  # a receiver no longer configured: let go
                book.storms[storm.key] = storm
        for row in raw.get("silences", []):
            silence = load("silences", row, _silence)
            if silence is not None:
                book.silences.append(silence)
        return book

    def load_config_silences(self) -> None:
        self.silences = [s for s in self.silences if s.created_by != "config"]
        for i, s in enumerate(self.config.silences):
            self.silences.append(
                Silence(
                    id=f"config-{i}",
                    matchers=dict(s.matchers),
                    ends_at=s.ends_at.timestamp(),
                    starts_at=s.starts_at.timestamp() if s.starts_at else None,
                    comment=s.comment,
                )
            )


def _group(raw: dict[str, Any], receivers: tuple[Receiver, ...]) -> AlertGroup:
    g = dict(raw)
    g.pop("refs", None)
    notified = g.get("notified") or {}
    if notified and isinstance(next(iter(notified.values())), str):
        # Written before receivers had their own memory: every receiver was told the same.
        g["notified"] = {r.name: dict(notified) for r in receivers}
        g["last_notified_at"] = {r.name: g.get("last_notified_at") or 0.0 for r in receivers}
    elif not isinstance(g.get("last_notified_at", {}), dict):
        g["last_notified_at"] = {}
    # What receivers no longer configured (removed, or disabled) were told is let go: it would keep every alert
    # they saw, resolved or not, in the book for ever, and send them stale resolves were they enabled again.
    names = {r.name for r in receivers}
    for memory in ("notified", "last_notified_at", "storm"):
        if isinstance(g.get(memory), dict):
            g[memory] = {r: v for r, v in g[memory].items() if r in names}
    return from_row(AlertGroup, g)


def _silence(raw: Any) -> Silence:
    """A saved silence whose every matcher still compiles (one that did not failed every poll after it)."""
    silence = from_row(Silence, raw)
    for label, pattern in silence.matchers.items():
        try:
            compile_pattern(pattern)
        except ValueError as e:
            raise ValueError(f"matcher {label}={pattern!r}: {e}") from None
    return silence
