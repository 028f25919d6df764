"""How findings become notifications: grouping, timing, silences (Alertmanager's semantics)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lagwatch.matchers import check_matchers


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SilenceConfig(_Strict):
    """Alerts whose labels match every matcher (regex, whole value) are not notified until `ends_at`."""

    matchers: dict[str, str] = Field(min_length=1)
    ends_at: datetime
    starts_at: datetime | None = None
    comment: str = ""

    _matchers = field_validator("matchers")(check_matchers)

    @field_validator("ends_at", "starts_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("needs a time zone, e.g. 2026-12-01T00:00:00Z")
        return value


class InhibitRule(_Strict):
    """While an alert matching `source` fires, alerts matching `target` with the same values of the `equal` labels
    are not notified (Alertmanager's inhibition). Matchers cover the labels plus `rule` and `severity`."""

    source: dict[str, str] = Field(min_length=1)
    target: dict[str, str] = Field(min_length=1)
    equal: list[str] = Field(default_factory=lambda: ["cluster", "group"])

    _source = field_validator("source")(check_matchers)
    _target = field_validator("target")(check_matchers)


def _default_inhibitions() -> list[InhibitRule]:
    # A consumer that stopped is one incident: its lag grows and its commits stall as a consequence. One that hung
    # (stalled) falls behind as a consequence too.
    return [
        InhibitRule(source={"rule": "stopped"}, target={"rule": "falling_behind|stalled"}),
        InhibitRule(source={"rule": "stalled"}, target={"rule": "falling_behind"}),
    ]


class AlertsConfig(_Strict):
    group_by: list[str] = Field(default_factory=lambda: ["cluster", "group"])
    group_wait_s: float = Field(default=30.0, ge=0)  # wait before the first notification of a new group
    group_interval_s: float = Field(default=300.0, ge=0)  # least time between two notifications of a group
    repeat_interval_s: float = Field(default=14400.0, gt=0)  # re-send an unchanged firing group after this
    send_resolved: bool = True
    # More alert groups of one cluster than this starting to fire at once: one summary per receiver instead.
    storm_threshold: int = Field(default=20, ge=1)
    silences: list[SilenceConfig] = Field(default_factory=list)
    inhibit_rules: list[InhibitRule] = Field(default_factory=_default_inhibitions)

    @field_validator("group_by")
    @classmethod
    def _groupable(cls, names: list[str]) -> list[str]:
        if "severity" in names:  # an escalation would move the alert to another group, and strand the first
            raise ValueError("severity changes while an alert fires: it cannot group alerts")
        return names
