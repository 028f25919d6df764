"""Rule thresholds: global defaults, overridden per cluster / group / topic regex, with routing labels."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lagwatch.matchers import any_full_match, check_pattern, check_patterns, full_match

Severity = Literal["info", "warning", "critical"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Threshold(_Strict):
    """Lag over either figure crosses the threshold; an unset figure is not checked."""

    offsets: int | None = Field(default=None, gt=0)
    seconds: float | None = Field(default=None, gt=0)


class RuleCommon(_Strict):
    enabled: bool = True
    for_s: float = Field(default=0.0, ge=0, description="the condition must hold this long before the alert fires")
    keep_firing_for_s: float = Field(
        default=0.0,
        ge=0,
        description="a firing alert stays firing this long after its condition was last found (Prometheus's "
        "keep_firing_for): a condition that comes and goes is one incident, not a page at each return",
    )
    runbook_url: str | None = None


class LagRule(RuleCommon):
    warning: Threshold = Threshold(seconds=300)
    critical: Threshold = Threshold(seconds=1800)
    for_s: float = Field(default=120.0, ge=0)
    # Hysteresis: an alert that fired resolves only once lag drops below this fraction of its threshold.
    resolve_ratio: float = Field(default=0.8, gt=0, le=1)


class WindowRule(RuleCommon):
    severity: Severity = "warning"
    window_s: float = Field(default=300.0, gt=0)


class StalledRule(WindowRule):
    severity: Severity = "critical"
    learn_commit_interval: bool = Field(
        default=True,
        description="page a partition only once its records have waited more than twice its own commit cadence "
        "(learnt from polls: a sink that flushes every 6 minutes; waits over twice window_s are not learnt) when "
        "that is longer than window_s, and twice window_s until it is learnt in a group's first hour; false: "
        "window_s only",
    )


class NoCommitRule(WindowRule):
    """Members assigned a partition with records arriving over the whole window, and no committed offset there."""

    window_s: float = Field(default=600.0, gt=0)
    ignore_groups: tuple[str, ...] = Field(
        default=("console-consumer-[0-9]+",),
        description="groups (regexes, matched whole) whose consumers do not commit by design; the default is the "
        "group Kafka's console consumer makes up when it is given none, in which it never commits (a list given "
        "replaces it: keep it there)",
    )

    _compiles = field_validator("ignore_groups")(check_patterns)

    def ignores(self, group: str) -> bool:
        return any_full_match(self.ignore_groups, group)


class StoppedRule(WindowRule):
    severity: Severity = "critical"
    window_s: float = Field(default=120.0, gt=0)


class FallingBehindRule(WindowRule):
    window_s: float = Field(default=600.0, gt=0)


class RewindRule(WindowRule):
    """A finding that stays `window_s` after the committed offset moved backwards."""

    window_s: float = Field(default=900.0, gt=0)


class ExpiryRule(RuleCommon):
    warning_fraction: float = Field(default=0.75, gt=0, lt=1)
    critical_fraction: float = Field(default=0.9, gt=0, le=1)
    # Overrides offsets.retention.minutes as read from the brokers.
    retention_minutes: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> ExpiryRule:
        if self.critical_fraction < self.warning_fraction:
            raise ValueError("critical_fraction must not be below warning_fraction")
        return self


class SimpleRule(RuleCommon):
    severity: Severity = "critical"


class ClusterRule(RuleCommon):
    severity: Severity = "critical"
    for_s: float = Field(default=60.0, ge=0)


class RuleSet(_Strict):
    lag: LagRule = LagRule()
    stalled: StalledRule = StalledRule()
    stopped: StoppedRule = StoppedRule()
    no_commit: NoCommitRule = NoCommitRule()
    falling_behind: FallingBehindRule = FallingBehindRule()
    rewind: RewindRule = RewindRule()
    expiry: ExpiryRule = ExpiryRule()
    expired: SimpleRule = SimpleRule()
    # A slow consumer under retention falls below the log start, resets to it (auto.offset.reset), and falls below
    # again at the next deletion: one incident while records keep being lost (it paged at each deletion).
    below_log_start: SimpleRule = SimpleRule(keep_firing_for_s=900)
    cluster_unreachable: ClusterRule = ClusterRule()
    group_unreadable: ClusterRule = ClusterRule(severity="warning", for_s=300)
    # Rates and ETA are measured over this window.
    rate_window_s: float = Field(default=600.0, gt=0)


class Match(_Strict):
    cluster: str = ".*"
    group: str = ".*"
    topic: str = ".*"

    @model_validator(mode="after")
    def _compiles(self) -> Match:
        for name in ("cluster", "group", "topic"):
            try:
                check_pattern(getattr(self, name))
            except ValueError as e:
                raise ValueError(f"{name}: {e}") from None
        return self

    def matches(self, cluster: str, group: str | None, topic: str | None) -> bool:
        return (
            full_match(self.cluster, cluster)
            and (group is None or full_match(self.group, group))
            and (topic is None or full_match(self.topic, topic))
        )


class Override(_Strict):
    match: Match = Match()
    rules: dict[str, Any] = Field(default_factory=dict)  # partial RuleSet, merged over the defaults
    labels: dict[str, str] = Field(default_factory=dict)  # routing labels, e.g. team, slack_channel


class RulesConfig(RuleSet):
    labels: dict[str, str] = Field(default_factory=dict)  # added to every finding
    overrides: list[Override] = Field(default_factory=list)

    @model_validator(mode="after")
    def _overrides_valid(self) -> RulesConfig:
        for i, override in enumerate(self.overrides):
            try:
                RuleSet.model_validate(merge_rules(self.base(), override.rules))
            except ValidationError as e:
                err = e.errors()[0]
                where = ".".join(str(x) for x in err["loc"])
                raise ValueError(f"overrides.{i}.rules.{where}: {err['msg']}") from None
        return self

    def base(self) -> dict[str, Any]:
        return self.model_dump(exclude={"labels", "overrides"})

    def longest_stalled_window_s(self) -> float:
        """The longest `stalled.window_s` that learns commit cadences, in the defaults or any override."""
        windows = [self.stalled.window_s if self.stalled.learn_commit_interval else 0.0]
        for override in self.overrides:
            raw = override.rules.get("stalled")
            if isinstance(raw, dict) and raw.get("learn_commit_interval", True):
                windows.append(float(raw.get("window_s", 0)))
        return max(windows)

    def longest_history_s(self) -> float:
        """How far back the history's rings must reach: the longest window a rule reads, and twice the longest
        stalled window (the commit waits `stalled` learns are measured on them). The daemon and the backtest
        size their rings alike."""
        return max(self.longest_window_s(), 2 * self.longest_stalled_window_s())

    def longest_window_s(self) -> float:
        """The longest stretch of per-poll history any rule reads, in the defaults or any override: the history
        keeps enough polls for it."""
        windows = [self.rate_window_s, *(float(getattr(self, rule).window_s) for rule in _SAMPLE_WINDOW_RULES)]
        for override in self.overrides:
            windows.append(float(override.rules.get("rate_window_s", 0)))
            for rule in _SAMPLE_WINDOW_RULES:
                raw = override.rules.get(rule)
                if isinstance(raw, dict):
                    windows.append(float(raw.get("window_s", 0)))
        return max(windows)


# The rules that read the per-poll samples over their window (rewind keeps its own record of each move).
_SAMPLE_WINDOW_RULES = ("stalled", "stopped", "falling_behind", "no_commit")


def merge_rules(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_rules(merged[key], value)
        else:
            merged[key] = value
    return merged
