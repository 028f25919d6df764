"""What a rule gets to look at for one group: the poll, the history, the measures, the rules in force, `now`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lagwatch.history import ClusterHistory, GroupMeasure, GroupTrack
from lagwatch.model import SEVERITY_OF, ClusterSnapshot, Finding, GroupSnapshot
from lagwatch.rules.settings import RuleResolver, RuleSet


# Not frozen: a frozen dataclass sets each field through object.__setattr__, and one is built per group at every
# poll. Rules read it and never assign to it.
@dataclass(slots=True)
class GroupContext:
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
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def evidence_since(self) -> float | None:
        return self.history.evidence_start(self.group.group_id)

    def covered(self, window_s: float) -> bool:
        """Whether lagwatch watched this group without a blind spell for the whole of the last `window_s`."""
        since = self.evidence_since
        return since is not None and since <= self.now - window_s

    def hold(self, rule: str, topic: str | None = None) -> None:
        key = self._key(rule, topic)
        if key in self.active:  # only alerts that exist can be held; nothing to do for the rest
            self.held.add(key)

    @property
    def cluster(self) -> str:
        return self.snapshot.cluster

    def rules(self, topic: str | None = None) -> tuple[RuleSet, dict[str, str]]:
        if topic is None:
            return self.group_rules
        return self.resolver.resolve(self.snapshot.cluster, self.group.group_id, topic)

    def _labels_and_key(self, topic: str | None) -> tuple[Mapping[str, str], str]:
        """The labels of this group's alerts about `topic` and their part of alert_key (kept by the resolver)."""
        return self.resolver.labels(self.snapshot.cluster, self.group.group_id, topic)

    def _key(self, rule: str, topic: str | None) -> str:
        """alert_key(rule, the labels of its alerts about `topic`)."""
        return rule + self._labels_and_key(topic)[1]

    def active_severity(self, rule: str, topic: str | None = None) -> str | None:
        """Severity of the alert this rule would raise here if it fires already; "pending" if it is pending."""
        return self.active.get(self._key(rule, topic)) if self.active else None

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
        return Finding(
            rule=rule,
            severity=SEVERITY_OF[severity],  # the configuration's text as the enum (one dict access)
            cluster=self.cluster,
            group=self.group.group_id,
            labels=labels,
            summary=summary,
            details=details if details is not None else {},  # each rule builds its own: no copy
            for_s=for_s,
            runbook_url=runbook_url,
            key=rule + key_suffix,
            keep_firing_for_s=keep_firing_for_s,
        )
