"""Alert groups: the alerts that share their `group_by` labels, with what each receiver has of them (its part of
the notification log, lagwatch.alerts.nflog), as the book keeps them and as the state database saves them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lagwatch.alerts.records import Alert, Receiver
from lagwatch.model import SEVERITY_OF, Severity, from_row, key_part


@dataclass(slots=True)
class ReceiverMemory:
    """What one receiver has of an alert group, and when it was last told."""

    receiver: str
    told: dict[str, Severity] | None = None  # alert key -> severity, as delivered to it (None: nothing)
    last_notified_at: float | None = None  # its last decision (None: its story ended, or none began)
    storm: str | None = None  # the storm whose summary announced the group to it

    def empty(self) -> bool:
        return self.told is None and self.last_notified_at is None and self.storm is None


@dataclass(slots=True)
class AlertGroupRow:
    """An alert group as the state database saves it (`vars(group)`): per receiver, alert key -> severity as last
    told to it, when, and the storm that announced it."""

    key: str
    labels: dict[str, str]
    notified: dict[str, dict[str, Severity]] = field(default_factory=dict)
    last_notified_at: dict[str, float] = field(default_factory=dict)
    storm: dict[str, str] = field(default_factory=dict)


class AlertGroup:
    """An alert group and each receiver's memory of it, one small record per receiver in a tuple: a dict per kind
    of memory (told, when, storm), each keyed by receiver, was 1,016 bytes a group with one receiver, this 560
    (100,000 groups in a storm at 1M group-partitions: 46 MB). `vars(group)` gives the saved shape
    (AlertGroupRow's fields)."""

    __slots__ = ("key", "labels", "memory")

    def __init__(
        self,
        key: str,
        labels: dict[str, str],
        notified: dict[str, dict[str, Severity]] | None = None,
        last_notified_at: dict[str, float] | None = None,
        storm: dict[str, str] | None = None,
    ) -> None:
        self.key = key
        self.labels = labels
        self.memory: tuple[ReceiverMemory, ...] = ()
        for r, told in (notified or {}).items():
            self._made(r).told = told
        for r, at in (last_notified_at or {}).items():
            self._made(r).last_notified_at = at
        for r, key_of_storm in (storm or {}).items():
            self._made(r).storm = key_of_storm

    def __repr__(self) -> str:
        return (
            f"AlertGroup({self.key!r}, {self.labels!r}, {self.notified!r}, {self.last_notified_at!r}, {self.storm!r})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AlertGroup) and vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment]  # mutable

    # -- one receiver's memory ----------------------------------------------------------------------------------

    def _of(self, receiver: str) -> ReceiverMemory | None:
        for m in self.memory:  # a few receivers at most: a scan, not a dict (184 bytes a group)
            if m.receiver == receiver:
                return m
        return None

    def _made(self, receiver: str) -> ReceiverMemory:
        m = self._of(receiver)
        if m is None:
            m = ReceiverMemory(receiver)
            self.memory = (*self.memory, m)
        return m

    def _tidy(self, m: ReceiverMemory) -> None:
        if m.empty():  # nothing left of the receiver: it leaves (as its keys left the dicts it was kept in)
            self.memory = tuple(x for x in self.memory if x is not m)

    def told(self, receiver: str) -> dict[str, Severity] | None:
        """What the receiver has of the group (the dict itself), None if nothing."""
        m = self._of(receiver)
        return None if m is None else m.told

    def set_told(self, receiver: str, told: dict[str, Severity] | None) -> None:
        """What the receiver has now (None: nothing)."""
        if told is not None:
            self._made(receiver).told = told
            return
        m = self._of(receiver)
        if m is not None:
            m.told = None
            self._tidy(m)

    def last_notified(self, receiver: str) -> float | None:
        m = self._of(receiver)
        return None if m is None else m.last_notified_at

    def set_last_notified(self, receiver: str, at: float) -> None:
        self._made(receiver).last_notified_at = at

    def storm_of(self, receiver: str) -> str | None:
        """The storm whose summary announced the group to the receiver (None: none)."""
        m = self._of(receiver)
        return None if m is None else m.storm

    def set_storm(self, receiver: str, storm: str) -> None:
        self._made(receiver).storm = storm

    def story_ended(self, receiver: str) -> None:
        """The receiver's story of the group ended: a new one starts after group_wait, outside any storm."""
        m = self._of(receiver)
        if m is not None:
            m.last_notified_at = None
            m.storm = None
            self._tidy(m)

    def told_receivers(self) -> list[str]:
        """The receivers that have something of the group, or had (their memory emptied, not let go)."""
        return [m.receiver for m in self.memory if m.told is not None]

    def anything_told(self) -> bool:
        """Whether some receiver has some alert of the group."""
        return any(m.told for m in self.memory)

    def fingerprint(self) -> int:
        """What identifies the group's saved row (every field of it), without encoding it: the state database
        compares it with what it wrote (encoding every group to see which changed took 0.44 s a poll at 100,000
        groups with one receiver, this 0.1 s)."""
        memory = tuple(
            (m.receiver, None if m.told is None else tuple(m.told.items()), m.last_notified_at, m.storm)
            for m in self.memory
        )
        return hash((self.key, tuple(self.labels.items()), memory))

    # -- the saved shape (AlertGroupRow) --------------------------------------------------------------------------

    @property
    def notified(self) -> dict[str, dict[str, Severity]]:
        """Per receiver, what it has (a new dict: change it through `set_told`)."""
        return {m.receiver: m.told for m in self.memory if m.told is not None}

    @property
    def last_notified_at(self) -> dict[str, float]:
        return {m.receiver: m.last_notified_at for m in self.memory if m.last_notified_at is not None}

    @property
    def storm(self) -> dict[str, str]:
        return {m.receiver: m.storm for m in self.memory if m.storm is not None}

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        return {
            "key": self.key,
            "labels": self.labels,
            "notified": self.notified,
            "last_notified_at": self.last_notified_at,
            "storm": self.storm,
        }


def group_key(group_by: Sequence[str], alert: Alert) -> tuple[str, dict[str, str]]:
    """The alert group an alert belongs to, by the `group_by` labels, as (key, labels)."""
    # `rule` as routes and silences take it (Alertmanager's alertname): not a label, it grouped nothing.
    labels = {name: alert.rule if name == "rule" else alert.labels.get(name, "") for name in group_by}
    return "|".join(f"{key_part(k)}={key_part(v)}" for k, v in labels.items()), labels


def group_of_row(row: AlertGroupRow) -> AlertGroup:
    return AlertGroup(row.key, row.labels, row.notified, row.last_notified_at, row.storm)


def load_group(raw: dict[str, Any], receivers: tuple[Receiver, ...]) -> AlertGroup:
    """A saved alert group, with what receivers no longer configured were told let go."""
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
    if isinstance(g.get("notified"), dict):  # severities as their enum (any other text: the row is set aside)
        g["notified"] = {
            r: {k: SEVERITY_OF.get(v, v) for k, v in told.items()} if isinstance(told, dict) else told
            for r, told in g["notified"].items()
        }
    return group_of_row(from_row(AlertGroupRow, g))
