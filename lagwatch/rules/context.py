"""What a rule gets to look at for one group: the poll, the history, the measures, the rules in force, `now`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lagwatch.history import ClusterHistory, GroupMeasure, GroupTrack
from lagwatch.model import SEVERITY_OF, ClusterSnapshot, Finding, GroupSnapshot
from lagwatch.rules.resolver import Resolved, RuleResolver
from lagwatch.rules.settings import RuleSet

_new_tuple = tuple.__new__


class GroupContext:
    """Built once per group at every poll, read by the rules, never assigned to by them. A plain class with its own
    __init__, not a dataclass: compiled (setup.py), a dataclass keeps the dataclasses module's generated __init__,
    interpreted (and a frozen one sets each field through object.__setattr__)."""

    snapshot: ClusterSnapshot
    history: ClusterHistory
    group: GroupSnapshot
    measure: GroupMeasure
    track: GroupTrack | None
    resolver: RuleResolver
    now: float
    active: Mapping[str, str]  # key -> severity of each firing alert, "pending" for each pending one
    # Alert keys a rule could not judge this time (its window is not covered by unbroken observation): their
    # alerts neither fire nor resolve. Shared with the engine, which hands it to the alert book.
    held: set[str]
    group_rules: tuple[RuleSet, dict[str, str]]  # resolver.resolve(cluster, group): what rules() answers most
    memo: dict[str, Any]
    # The rules with an alert in `active`: holding or asking after an alert of any other rule needs no key (the
    # resolver's lookup of its labels, a cache miss at 1M group-partitions, for every group at every poll).
    active_rules: set[str]
    # What the resolver answered for the group's own alerts, and for the last topic asked about: the rules ask for
    # a group's one topic several times a poll, and each resolver lookup at 1M group-partitions (200,000 entries)
    # was a cache miss or two (bench/README.md).
    _group_labels: tuple[Mapping[str, str], str] | None
    _topic: str | None
    _topic_entry: Resolved | None
    _topic_labels: tuple[Mapping[str, str], str] | None

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        history: ClusterHistory,
        group: GroupSnapshot,
        measure: GroupMeasure,
        track: GroupTrack | None,
        resolver: RuleResolver,
        now: float,
        active: Mapping[str, str],
        held: set[str],
        group_rules: tuple[RuleSet, dict[str, str]],
        active_rules: set[str] | None = None,
    ) -> None:
        self.snapshot, self.history, self.group, self.measure, self.track = snapshot, history, group, measure, track
        self.resolver, self.now, self.active, self.held, self.group_rules = resolver, now, active, held, group_rules
        self.memo = {}
        self.active_rules = active_rules if active_rules is not None else rules_of(active)
        self._group_labels = None
        self._topic = None
        self._topic_entry = None
        self._topic_labels = None

    @property
    def evidence_since(self) -> float | None:
        return self.history.evidence_start(self.group.group_id)

    def covered(self, window_s: float) -> bool:
        """Whether lagwatch watched this group without a blind spell for the whole of the last `window_s`."""
        since = self.evidence_since
        return since is not None and since <= self.now - window_s

    def hold(self, rule: str, topic: str | None = None) -> None:
        if rule not in self.active_rules:
            return
        key = self._key(rule, topic)
        if key in self.active:  # only alerts that exist can be held; nothing to do for the rest
            self.held.add(key)

    @property
    def cluster(self) -> str:
        return self.snapshot.cluster

    def rules(self, topic: str | None = None) -> tuple[RuleSet, dict[str, str]]:
        if topic is None:
            return self.group_rules
        return self._entry(topic).rules

    def _labels_and_key(self, topic: str | None) -> tuple[Mapping[str, str], str]:
        """The labels of this group's alerts about `topic` and their part of alert_key (kept by the resolver)."""
        if topic is None:
            found = self._group_labels
            if found is None:
                found = self._group_labels = self.resolver.labels(self.snapshot.cluster, self.group.group_id, None)
            return found
        entry = self._entry(topic)
        found = self._topic_labels
        if found is None:
            cluster, group = self.snapshot.cluster, self.group.group_id
            found = self._topic_labels = self.resolver.entry_labels(entry, cluster, group, topic)
        return found

    def _entry(self, topic: str) -> Resolved:
        """The resolver's entry of (cluster, group, `topic`): one lookup for its rules and its labels."""
        entry = self._topic_entry
        if entry is None or topic != self._topic:
            entry = self._topic_entry = self.resolver.entry(self.snapshot.cluster, self.group.group_id, topic)
            self._topic, self._topic_labels = topic, None
        return entry

    def _key(self, rule: str, topic: str | None) -> str:
        """alert_key(rule, the labels of its alerts about `topic`)."""
        return rule + self._labels_and_key(topic)[1]

    def active_severity(self, rule: str, topic: str | None = None) -> str | None:
        """Severity of the alert this rule would raise here if it fires already; "pending" if it is pending."""
        return self.active.get(self._key(rule, topic)) if rule in self.active_rules else None

    def finding(
        self,
        rule: str,
        severity: str,
        summary: str,
        topic: str | None = None,
        details: Mapping[str, object] | None = None,
        for_s: float = 0.0,
        runbook_url: str | None = None,
    ) -> Finding:
        labels, key_suffix = self._labels_and_key(topic)
        # Every rule's own keep_firing_for_s, as resolved for this topic (overrides may set it on any rule).
        config = getattr(self.rules(topic)[0], rule, None)
        keep_firing_for_s = getattr(config, "keep_firing_for_s", 0.0)
        # Built as the tuple it is: Finding's own __new__ is interpreted, and takes its fields by keyword (a
        # finding per alerting group-topic at every poll, 100,000 at 1M group-partitions).
        fields = (
            rule,
            SEVERITY_OF[severity],  # the configuration's text as the enum (one dict access)
            self.snapshot.cluster,
            self.group.group_id,
            labels,
            summary,
            details if details is not None else {},  # each rule builds its own: no copy
            for_s,
            runbook_url,
            rule + key_suffix,
            keep_firing_for_s,
        )
        finding: Finding = _new_tuple(Finding, fields)
        return finding


def rules_of(active: Mapping[str, str]) -> set[str]:
    """The rules of the alerts `active` holds (an alert key is its rule, then "|" and its labels)."""
    return {key[: key.find("|")] for key in active}
