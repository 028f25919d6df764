"""The lag rule's thresholds per group-topic, as the report draws and judges them: the daemon's own RuleResolver."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LagThresholds:
    """The lag rule of one group-topic, as the rules engine resolves it (None: not set / rule disabled)."""

    warning_offsets: int | None
    warning_seconds: float | None
    critical_offsets: int | None
    critical_seconds: float | None


def lag_thresholds(resolver: Any, cluster: str, group: str, topic: str) -> LagThresholds:
    rule = resolver.resolve(cluster, group, topic)[0].lag
    if not rule.enabled:
        return LagThresholds(None, None, None, None)
    return LagThresholds(rule.warning.offsets, rule.warning.seconds, rule.critical.offsets, rule.critical.seconds)


def thresholds_of(rules: Mapping[str, Any], cluster: str, group: str, topic: str) -> LagThresholds:
    """The lag rule's thresholds for one group-topic: the daemon's own RuleResolver, overrides and all."""
    from lagwatch.rules import RuleResolver, RulesConfig

    return lag_thresholds(RuleResolver(RulesConfig.model_validate(rules)), cluster, group, topic)
