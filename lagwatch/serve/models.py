"""The HTTP API's request and response bodies. The OpenAPI document is generated from these models, and every
response is validated against its model before it leaves: the document cannot drift from what is served."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from lagwatch.alerts import SilenceConfig
from lagwatch.lag.offsets import LagState
from lagwatch.model import GroupKind
from lagwatch.rules.settings import Severity

CONFIG_SILENCE_CREATOR = "config"  # created_by of silences loaded from the configuration file (ids "config-<n>")
CONFIG_SILENCE_ID_PREFIX = "config-"


def _finite_or_none(value: Any) -> Any:
    # A rate or ETA can be infinite or undefined; JSON has no Infinity nor NaN, and a client wants null then.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


Number = Annotated[float | None, BeforeValidator(_finite_or_none)]


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Error(_Out):
    error: str = Field(description="what is wrong; a bad field is named first, as `field: why`")


class Health(_Out):
    status: Literal["ok", "failing"]
    problems: list[str] | None = Field(
        default=None, description="only when failing: the poll scheduler or the notifier supervisor stopped"
    )


class Readiness(_Out):
    ready: bool
    waiting_for: list[str] = Field(description="clusters without a successful poll yet")
    problems: list[str] | None = Field(default=None, description="only when something besides polls is wrong")
    notes: list[str] | None = Field(
        default=None, description="what the operator should know that does not keep lagwatch from working"
    )


class PollError(_Out):
    kind: str | None
    detail: str | None


class ExactClocks(_Out):
    state: str = Field(description="off, starting, catching_up, live, denied or failed")
    records: int
    undecodable: int
    error: str | None


class Cluster(_Out):
    name: str
    up: bool
    last_poll: Number
    last_success: Number
    poll_duration_s: Number
    groups: int | None
    error: PollError | None
    polls: int
    failed_polls: int
    skipped_polls: int
    exact_clocks: ExactClocks
    unwatched_groups: dict[str, int] = Field(
        description="groups the filter takes that lagwatch cannot watch on this cluster, by group type (share "
        "groups where the brokers cannot describe them)"
    )
    blind_spots: dict[str, str] = Field(
        description="what lagwatch cannot see on this cluster, and why (share_lag: brokers before Kafka 4.2 report "
        "no share-group lag)"
    )


class GroupSummary(_Out):
    cluster: str
    group: str
    state: str
    kind: GroupKind
    members: int
    error: str | None
    lag: int | None
    max_lag: int | None
    max_lag_seconds: Number
    lag_seconds_estimated: bool | None
    eta_s: Number
    falling_behind: bool | None
    production_rate: Number
    consumption_rate: Number
    offsets_expire_at: Number


class Partition(_Out):
    topic: str
    partition: int
    committed_offset: int | None
    log_start_offset: int | None
    log_end_offset: int | None
    lag: int | None
    lag_state: LagState
    lag_seconds: Number
    lag_seconds_estimated: bool
    lag_seconds_exact: bool
    member_id: str | None
    client_id: str | None
    host: str | None


class Alert(_Out):
    rule: str
    severity: Severity
    state: Literal["pending", "firing", "resolved"]
    labels: dict[str, str]
    summary: str
    details: dict[str, Any]
    started_at: float
    fired_at: Number
    resolved_at: Number
    runbook_url: str | None
    silenced_by: str | None = Field(description="id of the silence that mutes it")


class SharePartition(_Out):
    topic: str
    partition: int
    start_offset: int | None = Field(description="the share-partition start offset (SPSO); null: never fetched")
    log_start: int | None
    log_end: int | None
    lag: int | None
    lag_source: Literal["broker", "estimated"] | None = Field(
        description="broker: the broker's lag (Kafka 4.2+, KIP-1226); estimated: log end - start offset, an upper "
        "bound (Kafka 4.1 reports no lag)"
    )
    members: int


class GroupDetail(GroupSummary):
    partitions: list[Partition]
    share_partitions: list[SharePartition] | None = Field(
        description="a share group's share-partitions, as `kafka-share-groups --describe --offsets` lists them; "
        "null for other groups. `partitions` holds its lag as for any group"
    )
    alerts: list[Alert]


class Silence(_Out):
    id: str
    matchers: dict[str, str]
    starts_at: Number
    ends_at: float
    comment: str
    created_by: str


class SilenceCreate(SilenceConfig):
    """A silence made through the API. Unknown fields are refused (422 naming the field); matchers are RE2
    regexes checked like those of the configuration file."""

    created_by: str = Field(default="api", min_length=1, max_length=100)

    @field_validator("created_by")
    @classmethod
    def _not_config(cls, value: str) -> str:
        # Silences of the configuration file are replaced from it at every start and cannot be deleted through
        # the API: one posing as such would outlive its delete, then vanish at the next restart.
        if value.strip().lower() == CONFIG_SILENCE_CREATOR:
            raise ValueError(f"{CONFIG_SILENCE_CREATOR!r} is reserved for silences of the configuration file")
        return value
