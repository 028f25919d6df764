"""Notifier configuration. Tokens and webhook URLs are secrets (SecretStr): never logged, printed or exported."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from lagwatch.matchers import check_matchers
from lagwatch.names import differ_not_only_in_case


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Route(_Strict):
    """Which alerts a notifier takes: at least `min_severity`, and labels matching `matchers` (`rule` and `severity`
    count as labels). The alert book applies it, as the notifier's `alerts.book.Receiver`."""

    min_severity: Literal["info", "warning", "critical"] = "info"
    matchers: dict[str, str] = Field(default_factory=dict)

    _matchers = field_validator("matchers")(check_matchers)


class NotifierCommon(_Strict):
    enabled: bool = True
    route: Route = Field(default_factory=Route)
    timeout_s: float = Field(default=10.0, gt=0, le=120)


class SlackConfig(NotifierCommon):
    token: SecretStr  # bot token (xoxb-...), from the environment or the secrets directory
    base_url: str = "https://slack.com/api/"
    default_channel: str
    channel_label: str | None = "slack_channel"  # an alert label naming its channel (set by rule overrides)
    channels_by_label: dict[str, dict[str, str]] = Field(default_factory=dict)  # e.g. {team: {payments: "#pay"}}
    rule_channels: dict[str, str] = Field(default_factory=dict)  # e.g. {expiry: "#kafka-platform"}
    grafana_url: str | None = None  # template with {cluster} and {group}


def _http_url(url: SecretStr | str) -> SecretStr | str:
    """An http(s) URL with a host; the reason names no part of it (it may hold a token)."""
    parts = urlsplit(url.get_secret_value() if isinstance(url, SecretStr) else url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    return url


class SlackWebhookConfig(NotifierCommon):
    url: SecretStr
    grafana_url: str | None = None

    _url = field_validator("url")(_http_url)


class WebhookConfig(NotifierCommon):
    # Often no secret (Alertmanager's), so it may stay in the chart's values; but some carry tokens in their path or
    # query (Teams, Google Chat): kept out of the logs all the same (logs.secret_values). Without a scheme it
    # reached the log, with a traceback, at every retry.
    url: str
    bearer_token: SecretStr | None = None
    format: Literal["lagwatch", "alertmanager"] = "lagwatch"  # alertmanager: POST {url}/api/v2/alerts

    _url = field_validator("url")(_http_url)


class LogNotifierConfig(_Strict):
    enabled: bool = True
    route: Route = Field(default_factory=Route)


# An undelivered notification older than this is dropped (with a log line and a counter). Six hours: longer than
# the default repeat interval (4 h), so a group that still fires has a newer notification queued behind it by then;
# short enough that, after a long outage or downtime, the on-call is not paged with the night's stale news.
DEFAULT_MAX_AGE_S = 6 * 3600.0


class NotifiersConfig(_Strict):
    max_age_s: float = Field(default=DEFAULT_MAX_AGE_S, ge=60, le=7 * 86400)
    log: LogNotifierConfig = Field(default_factory=LogNotifierConfig)
    slack: SlackConfig | None = None
    slack_webhook: SlackWebhookConfig | None = None
    webhooks: dict[str, WebhookConfig] = Field(default_factory=dict)

    _case = field_validator("webhooks", mode="before")(differ_not_only_in_case)
