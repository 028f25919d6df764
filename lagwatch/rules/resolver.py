"""The rules in force for one (cluster, group, topic), and the labels of its alerts: looked up for every group and
topic at every poll, and compiled with the rules (setup.py): interpreted, its lookups were a tenth of the rules' time
at 1M group-partitions (bench/README.md)."""

from __future__ import annotations

from collections.abc import Mapping

from mypy_extensions import mypyc_attr

from lagwatch.model import alert_key
from lagwatch.rules.settings import RulesConfig, RuleSet, merge_rules

_CACHE_LIMIT = 100_000


@mypyc_attr(acyclic=True)  # holds no reference back to itself: no GC header, never traversed (bench/README.md)
class Resolved:
    """What the resolver keeps of one (cluster, group, topic): its rules (shared by every combination the same
    overrides match), and once asked for, its alert labels and their part of alert_key. One entry in one dict: two
    caches (a key tuple, a dict slot and a tuple each, and a MappingProxyType) were 8 MB at 100k group-partitions,
    80 MB at 1M (bench/daemon_step_bench.py: 20,000 / 200,000 combinations)."""

    __slots__ = ("key", "labels", "rules")

    def __init__(self, rules: tuple[RuleSet, dict[str, str]]) -> None:
        self.rules = rules
        self.labels: Mapping[str, str] | None = None
        self.key = ""


class RuleResolver:
    """The rules in force for one (cluster, group, topic), computed once per combination."""

    def __init__(self, config: RulesConfig) -> None:
        self.config = config
        self._cache: dict[tuple[str, str | None, str | None], Resolved] = {}
        self._by_overrides: dict[tuple[int, ...], tuple[RuleSet, dict[str, str]]] = {}
        # The combinations each cluster's last evaluation asked for (expect): the cache holds at least twice
        # their sum before it is cleared. A fixed 100,000 was less than one poll's at 1M group-partitions
        # (100,000 groups, each asking for itself and its topic), so the cache was cleared and built again
        # over and over at every poll (7% of a step, bench/daemon_step_bench.py).
        self._expected: dict[str, int] = {}
        self._limit = _CACHE_LIMIT

    def expect(self, cluster: str, combinations: int) -> None:
        """How many (group, topic) combinations an evaluation of `cluster` asks for: the cache keeps room for
        them (groups and topics that come and go still never grow it without bound)."""
        if self._expected.get(cluster) != combinations:
            self._expected[cluster] = combinations
            self._limit = max(_CACHE_LIMIT, 2 * sum(self._expected.values()))

    def entry(self, cluster: str, group: str | None, topic: str | None) -> Resolved:
        """What is kept of (cluster, group, topic): its rules, and its labels once `entry_labels` asked."""
        key = (cluster, group, topic)
        entry = self._cache.get(key)
        if entry is None:
            if len(self._cache) >= self._limit:
                self._cache.clear()  # groups and topics come and go: never let the cache grow without bound
            matching = tuple(
                i for i, override in enumerate(self.config.overrides) if override.match.matches(cluster, group, topic)
            )
            # The same overrides give the same rules: one RuleSet per combination, shared by every group it
            # applies to (a RuleSet per group cost 200 MB at 10,000 groups).
            if matching not in self._by_overrides:
                merged = self.config.base()
                labels = dict(self.config.labels)
                for i in matching:
                    merged = merge_rules(merged, self.config.overrides[i].rules)
                    labels.update(self.config.overrides[i].labels)
                self._by_overrides[matching] = (RuleSet.model_validate(merged), labels)
            entry = self._cache[key] = Resolved(self._by_overrides[matching])
        return entry

    def resolve(
        self, cluster: str, group: str | None = None, topic: str | None = None
    ) -> tuple[RuleSet, dict[str, str]]:
        return self.entry(cluster, group, topic).rules

    def labels(self, cluster: str, group: str | None, topic: str | None) -> tuple[Mapping[str, str], str]:
        """The labels of an alert about (cluster, group, topic): its route's, then cluster, group and topic; and
        their part of its alert_key. Kept across polls like the rules: rules ask for them for every group and topic
        at every poll (alert_key sorts and joins them), and every finding and alert of one shares them. Read-only
        (a plain dict: the alert book keeps it as the alerts' labels, and the state saves it as it is)."""
        return self.entry_labels(self.entry(cluster, group, topic), cluster, group, topic)

    def entry_labels(
        self, entry: Resolved, cluster: str, group: str | None, topic: str | None
    ) -> tuple[Mapping[str, str], str]:
        """`labels` of the entry of (cluster, group, topic), when the caller has it already."""
        found = entry.labels
        if found is None:
            _, route = entry.rules
            labels = {**route, "cluster": cluster}
            if group is not None:
                labels["group"] = group
            if topic is not None:
                labels["topic"] = topic
            found = entry.labels = labels
            entry.key = alert_key("", labels)
        return found, entry.key
