"""The alert side's typed contracts: an alert as the book keeps it, and a notification as notifiers, the outbox, the
lake and the backtest receive it (frozen records, never dicts). Their JSON is what the state database and the outbox
have always saved."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from lagwatch.matchers import full_match
from lagwatch.model import Severity, from_row


class AlertState(StrEnum):
    PENDING = "pending"  # its condition holds, its `for` not yet over: never announced
    FIRING = "firing"
    RESOLVED = "resolved"


class NotificationKind(StrEnum):
    FIRING = "firing"  # a group's first announcement (or a storm's)
    UPDATE = "update"  # alerts joined, escalated, eased or ended since the last one
    REPEAT = "repeat"  # nothing changed for repeat_interval
    RESOLVED = "resolved"  # every alert of the group has ended


# A notification's severity when none of its alerts fires any more, as its JSON and its renderers say it.
RESOLVED_SEVERITY = "resolved"


def for_elapsed(started_at: float, for_s: float, now: float) -> bool:
    """Whether a condition that began at `started_at` has held for `for_s`. Poll times jitter by milliseconds: a
    `for` of 20 s seen at polls 19.9998 s apart has held, not one poll short (5% of `for`, at most 1 s)."""
    return now - started_at >= for_s - min(1.0, 0.05 * for_s)


@dataclass(slots=True)
class _AlertFields:
    """An alert's fields (`Alert`: the class is split so that `vars(alert)` can stay what it was)."""

    key: str
    rule: str
    severity: Severity
    cluster: str
    group: str | None
    # Read-only: the rules' resolver's mapping, shared by every alert of one (cluster, group, topic). A copy per
    # alert was 215 bytes each (4.3 MB at 100k group-partitions in a storm).
    labels: Mapping[str, str]
    summary: str
    details: Mapping[str, Any]  # read-only; plain() or dict() where it leaves the process
    runbook_url: str | None
    for_s: float
    state: AlertState
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

    @property
    def lag(self) -> int:
        lag = self.details.get("lag")
        return lag if isinstance(lag, int) and not isinstance(lag, bool) else 0


class Alert(_AlertFields):
    """An alert as the book keeps it, changed in place at every poll (hundreds of thousands: no copies). Slotted:
    an instance dict was 200 of its 256 bytes (20,000 alerts at 100k group-partitions in a storm). `vars(alert)`
    still gives its fields as a dict, labels and details as plain dicts: the state database saves that."""

    __slots__ = ()

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        return _plain_fields(self)


ALERT_FIELDS = tuple(f.name for f in fields(Alert))


def _plain_fields(alert: _AlertFields) -> dict[str, Any]:
    """An alert's fields in their order, labels and details as dicts (what `vars` gave of a plain object)."""
    out = {name: getattr(alert, name) for name in ALERT_FIELDS}
    out["labels"], out["details"] = plain(alert.labels), plain(alert.details)
    return out


def plain(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """`mapping` as a plain dict, for JSON: itself if it is one. Details held compactly (a lag alert's) are
    built here, where they leave the process."""
    return mapping if type(mapping) is dict else dict(mapping)


@dataclass(frozen=True, slots=True)
class AlertRecord:
    """An alert as one notification tells it to one receiver: a copy, frozen, of the book's alert at that moment,
    with what the receiver had of it before."""

    key: str
    rule: str
    severity: Severity
    cluster: str
    group: str | None
    labels: Mapping[str, str]
    summary: str
    details: Mapping[str, Any]
    runbook_url: str | None
    for_s: float
    state: AlertState
    started_at: float
    updated_at: float
    fired_at: float | None = None
    resolved_at: float | None = None
    keep_firing_for_s: float = 0.0
    # Firing, and news to this receiver: had the notification never arrived, the receiver never had the alert.
    first_told: bool = False
    # Firing at another severity than the receiver was told: the alert of that severity has ended.
    previous_severity: Severity | None = None
    # Told as ended because it is silenced or inhibited, not because its condition is gone.
    muted: bool = False
    # Told as ended here because it now belongs to another alert group (`alerts.group_by` changed between two
    # runs): it goes on there, in a notification of its own.
    regrouped: bool = False

    @classmethod
    def of(cls, alert: Alert, **changes: Any) -> AlertRecord:
        """A copy of the book's `alert` (labels and details copied: the book changes its own in place)."""
        fields = {name: getattr(alert, name) for name in ALERT_FIELDS}
        return cls(**{**fields, "labels": dict(alert.labels), "details": dict(alert.details), **changes})

    @property
    def lag(self) -> int:
        lag = self.details.get("lag")
        return lag if isinstance(lag, int) and not isinstance(lag, bool) else 0

    def to_json(self) -> dict[str, Any]:
        """The alert's fields, and `first_told`, `previous_severity` and `muted` only when they say something."""
        out = {name: getattr(self, name) for name in ALERT_FIELDS}
        out["labels"], out["details"] = dict(self.labels), dict(self.details)
        if self.first_told:
            out["first_told"] = True
        if self.previous_severity is not None:
            out["previous_severity"] = self.previous_severity
        if self.muted:
            out["muted"] = True
        if self.regrouped:
            out["regrouped"] = True
        return out

    @classmethod
    def from_json(cls, raw: Any) -> AlertRecord:
        return from_row(cls, raw)


@dataclass(frozen=True, slots=True)
class StormSummary:
    """What a storm summary says: the cluster, how many groups fire, alerts by rule, the worst groups."""

    cluster: str
    groups_firing: int
    alerts_by_rule: Mapping[str, int]
    worst_groups: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "groups_firing": self.groups_firing,
            "alerts_by_rule": dict(self.alerts_by_rule),
            "worst_groups": list(self.worst_groups),
        }

    @classmethod
    def from_json(cls, raw: Any) -> StormSummary:
        if not isinstance(raw, dict):
            raise TypeError(f"storm: a {type(raw).__name__}, not an object")
        by_rule = raw.get("alerts_by_rule")
        if not isinstance(by_rule, dict) or not all(isinstance(v, int) for v in by_rule.values()):
            raise TypeError("storm: alerts_by_rule is not an object of counts")
        return from_row(cls, {**raw, "alerts_by_rule": dict(by_rule), "worst_groups": tuple(raw["worst_groups"])})


@dataclass(frozen=True, slots=True)
class Notification:
    """One message for one receiver about one alert group (or one storm of a cluster's groups)."""

    id: str
    group_key: str
    group_labels: Mapping[str, str]
    kind: NotificationKind
    severity: Severity | None  # the worst of its firing alerts; None when none fires (said "resolved")
    created_at: float
    alerts: tuple[AlertRecord, ...]  # the group's firing alerts, then those ended since the last one
    receiver: str = "default"
    storm: StormSummary | None = None

    @property
    def firing(self) -> list[AlertRecord]:
        return [a for a in self.alerts if a.state == AlertState.FIRING]

    @property
    def severity_text(self) -> str:
        """Its severity as said to people and in its JSON: "resolved" when nothing fires."""
        return self.severity if self.severity is not None else RESOLVED_SEVERITY

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "group_key": self.group_key,
            "group_labels": dict(self.group_labels),
            "kind": self.kind,
            "severity": self.severity_text,
            "created_at": self.created_at,
            "alerts": [a.to_json() for a in self.alerts],
            "receiver": self.receiver,
            "storm": None if self.storm is None else self.storm.to_json(),
        }

    @classmethod
    def from_json(cls, raw: Any) -> Notification:
        if not isinstance(raw, dict):
            raise TypeError(f"a {type(raw).__name__}, not an object")
        alerts = raw["alerts"]
        if not isinstance(alerts, list | tuple):
            raise TypeError("alerts is not a list")
        severity = raw.get("severity")
        storm = raw.get("storm")
        return from_row(
            cls,
            {
                **raw,
                "severity": None if severity == RESOLVED_SEVERITY else severity,
                "alerts": tuple(AlertRecord.from_json(a) for a in alerts),
                "storm": None if storm is None else StormSummary.from_json(storm),
            },
        )


@dataclass(frozen=True)
class Receiver:
    """A notifier as the lifecycle sees it: which alerts its route takes (at least `min_severity`, labels matching
    `matchers`, regexes on the whole value; `rule` and `severity` count as labels)."""

    name: str
    min_severity: Severity = Severity.INFO
    matchers: tuple[tuple[str, str], ...] = ()
    # Storm summaries are for people; a receiver that groups alerts itself (Alertmanager) gets every group.
    storms: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "min_severity", Severity(self.min_severity))  # a route's setting, as text

    def accepts(self, alert: Alert) -> bool:
        if alert.severity.rank < self.min_severity.rank:
            return False
        return not self.matchers or alert.matches(self.matchers)


EVERYONE = (Receiver("default"),)
