"""Configuration: a YAML file, overridden by LAGWATCH_* environment variables and a secrets directory.

Clusters are keyed by name, so that `LAGWATCH_CLUSTERS__PROD__SECURITY__SASL__PASSWORD` (or a secret file
`clusters__prod__security__sasl__password`) can reach one cluster's field.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NestedSecretsSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    YamlConfigSettingsSource,
)

from lagwatch.alerts.settings import AlertsConfig
from lagwatch.errors import ConfigError
from lagwatch.lake.settings import LakeConfig
from lagwatch.matchers import any_full_match, check_patterns
from lagwatch.names import differ_not_only_in_case
from lagwatch.notify.settings import NotifiersConfig
from lagwatch.rules.settings import RulesConfig
from lagwatch.serve.settings import HttpConfig

_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class _Strict(BaseModel):
    # nan and inf are never a sensible setting (nan even passes range checks unnoticed in places).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class NameFilter(_Strict):
    """Regexes (RE2, see lagwatch.matchers) matched against the whole name; exclude wins over include."""

    include: list[str] = Field(default_factory=lambda: [".*"])
    exclude: list[str] = Field(default_factory=list)

    _compiles = field_validator("include", "exclude")(check_patterns)

    def matches(self, name: str) -> bool:
        if not self.exclude and self.include == [".*"]:
            # The default filter, asked per group at every poll (2 us a name through RE2's memo): `.*` matches
            # every name, a line feed included (lagwatch.matchers sets RE2's dot_nl, as Prometheus 3 does).
            return True
        return any_full_match(self.include, name) and not any_full_match(self.exclude, name)


def _no_name() -> NameFilter:
    return NameFilter(include=[])


class PartitionMetrics(_Strict):
    """Which group-partitions get series of their own on /metrics (committed offset, lag, lag in seconds, and their
    partitions' log start and end). None by default: group and topic series only, as KMinion and kafka-lag-exporter
    export by default (per partition, 10,000 groups of 10 partitions were 420,000 series a scrape). Opt in for the
    groups someone debugs, or for all (`groups: {include: [".*"]}`). The JSON API keeps every partition."""

    groups: NameFilter = Field(default_factory=_no_name)
    topics: NameFilter = Field(default_factory=NameFilter)  # of those groups, these topics

    @model_validator(mode="before")
    @classmethod
    def _groups_only(cls, value: Any) -> Any:
        # Before topics could be chosen, it was a filter of groups: `partition_metrics: {include: [...]}`.
        if isinstance(value, dict) and ("include" in value or "exclude" in value) and "groups" not in value:
            return {"groups": value}
        return value

    def matches(self, group: str, topic: str) -> bool:
        return self.groups.matches(group) and self.topics.matches(topic)


class TlsConfig(_Strict):
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    key_password: SecretStr | None = None
    check_hostname: bool = True

    @model_validator(mode="after")
    def _files_exist(self) -> TlsConfig:
        for name in ("ca_file", "cert_file", "key_file"):
            path = getattr(self, name)
            problem = None if path is None else file_problem(path)
            if problem is not None:
                raise ValueError(f"{name}: {problem}")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together")
        return self


SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI", "AWS_MSK_IAM"]


class SaslConfig(_Strict):
    mechanism: SaslMechanism
    username: str | None = None
    password: SecretStr | None = None
    kerberos_service_name: str = "kafka"
    kerberos_domain_name: str | None = None
    # OAUTHBEARER: "module:Class" of a kafka.sasl.oauth.AbstractTokenProvider subclass, built without arguments.
    oauth_token_provider: str | None = None

    @model_validator(mode="after")
    def _credentials(self) -> SaslConfig:
        if self.mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and (
            not self.username or self.password is None
        ):
            raise ValueError(f"{self.mechanism} needs username and password")
        if self.mechanism == "OAUTHBEARER" and not self.oauth_token_provider:
            raise ValueError("OAUTHBEARER needs oauth_token_provider ('module:Class')")
        return self


class SecurityConfig(_Strict):
    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    tls: TlsConfig | None = None
    sasl: SaslConfig | None = None

    @model_validator(mode="after")
    def _consistent(self) -> SecurityConfig:
        if self.protocol.startswith("SASL") and self.sasl is None:
            raise ValueError(f"protocol {self.protocol} needs a sasl section")
        if not self.protocol.startswith("SASL") and self.sasl is not None:
            raise ValueError(f"a sasl section needs protocol SASL_PLAINTEXT or SASL_SSL, not {self.protocol}")
        return self


class CheckpointConsumerConfig(_Strict):
    """A Spark Structured Streaming query reading this cluster: its checkpoint location (a local path, or s3://,
    gs://, hdfs://... through pyarrow's filesystems, credentials from their usual environment)."""

    location: str = Field(min_length=1)


class ClusterConfig(_Strict):
    # NoDecode: "k1:9092,k2:9092" from the environment was taken for JSON and refused (a JSON list still works).
    bootstrap_servers: Annotated[list[str], NoDecode] = Field(min_length=1)
    security: SecurityConfig = Field(default_factory=SecurityConfig)
    groups: NameFilter = Field(default_factory=NameFilter)
    topics: NameFilter = Field(default_factory=NameFilter)
    request_timeout_s: float = Field(default=30.0, gt=0, le=600)
    poll_interval_s: float = Field(default=30.0, ge=1, le=3600)
    # Lag against the last stable offset (read_committed consumers of transactional topics).
    read_committed: bool = False
    # Overrides what the brokers say for offsets.retention.minutes (e.g. when describe_configs is not allowed).
    offsets_retention_minutes: int | None = Field(default=None, gt=0)
    # Exact lag in seconds: for partitions lagging at least this many records, read the timestamp of the record at
    # the committed offset (one small Fetch per leader) instead of interpolating. Unset: off.
    exact_lag_seconds_above: int | None = Field(default=None, ge=1)
    exact_lag_seconds_max_partitions: int = Field(default=200, ge=1, le=10000)
    # Group-partitions with series of their own (the rest: group and topic series only). None by default.
    partition_metrics: PartitionMetrics = Field(default_factory=PartitionMetrics)
    # How often broker settings (offsets.retention.*) are read again.
    broker_settings_refresh_s: float = Field(default=3600.0, ge=0)
    # Read __consumer_offsets for exact commit and Empty-since times (expiry clocks). Needs Read on that topic;
    # where it is denied, lagwatch says so once and uses the clocks its polls see.
    exact_clocks: bool = True
    # Spark Structured Streaming queries, by the name they get as a consumer group.
    checkpoint_consumers: dict[str, CheckpointConsumerConfig] = Field(default_factory=dict)

    @property
    def max_gap_s(self) -> float:
        """Longer than this between two good polls, and lagwatch was blind (down, or its polls were skipped)."""
        return 2 * self.poll_interval_s + self.request_timeout_s

    @field_validator("bootstrap_servers", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value.strip().startswith("["):  # a JSON list, as complex settings take from the environment
                try:
                    return json.loads(value)
                except ValueError:
                    raise ValueError("not a JSON list of host:port") from None
            return [s.strip() for s in value.split(",") if s.strip()]
        return value

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_port(cls, servers: list[str]) -> list[str]:
        for s in servers:
            host, sep, port = s.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{s!r} is not host:port")
        return servers


def _seconds_like(field: str) -> TypeAdapter[float]:
    """A cluster setting's own bounds, for a CLI option that stands for it."""
    return TypeAdapter(Annotated[float, *ClusterConfig.model_fields[field].metadata, Field(allow_inf_nan=False)])


_POLL_INTERVAL = _seconds_like("poll_interval_s")
_REQUEST_TIMEOUT = _seconds_like("request_timeout_s")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="LAGWATCH_",
        env_nested_delimiter="__",
        secrets_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
    )

    clusters: dict[str, ClusterConfig] = Field(default_factory=dict)
    rules: RulesConfig = Field(default_factory=RulesConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    notifiers: NotifiersConfig = Field(default_factory=NotifiersConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    state_dir: Path = Path("state")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["auto", "json", "text"] = "auto"
    # History is written at most this often (and at shutdown); alert state on every change.
    history_save_interval_s: float = Field(default=60.0, ge=0)
    # The lag history lake: every poll, alert transition and the configuration in force, as Parquet.
    lake: LakeConfig = Field(default_factory=LakeConfig)

    _case = field_validator("clusters", mode="before")(differ_not_only_in_case)

    @field_validator("clusters")
    @classmethod
    def _names(cls, clusters: dict[str, ClusterConfig]) -> dict[str, ClusterConfig]:
        for name in clusters:
            if not re.match(_NAME_RE, name):
                raise ValueError(f"cluster name {name!r} must match {_NAME_RE}")
        return clusters

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Highest priority first: explicit arguments, environment, secret files, then the YAML file.
        # Secret files are named like the env vars without the prefix: clusters__prod__security__sasl__password.
        secrets = NestedSecretsSettingsSource(file_secret_settings, secrets_prefix="")
        return (init_settings, env_settings, secrets, _YamlSource(settings_cls))


def _unknown_variables() -> list[str]:
    """LAGWATCH_ variables shaped like a nested setting (with `__`) that name no setting: read nowhere, silently
    (LAGWATCH_CLUSTER__PROD__BOOTSTRAP_SERVERS, one letter short, left no cluster at all: the demo started)."""
    fields = {name.lower() for name in Settings.model_fields}
    out = []
    for variable in os.environ:
        head, sep, _ = variable.upper().removeprefix("LAGWATCH_").partition("__")
        if variable.upper().startswith("LAGWATCH_") and sep and head.lower() not in fields:
            out.append(f"{variable}: no such setting ({head.lower()!r}; the settings are {', '.join(sorted(fields))})")
    return out


def _unknown_secret_files(secrets_dir: Path) -> list[str]:
    """Files of the secrets directory shaped like a nested setting that name no setting: a misspelt one
    (notifers__slack__token) was ignored without a word, where the same variable is an error. Kubernetes' own
    entries (`..data`, dot-names) are not settings."""
    fields = {name.lower() for name in Settings.model_fields}
    out = []
    for entry in sorted(secrets_dir.iterdir()):
        head, sep, _ = entry.name.lower().partition("__")
        if not entry.name.startswith(".") and sep and head not in fields:
            out.append(
                f"secrets_dir: {entry.name}: no such setting ({head!r}; the settings are {', '.join(sorted(fields))})"
            )
    return out


def check_poll_interval(seconds: float) -> float:
    """The same bounds as `poll_interval_s` in the config (for `run --interval`); ValueError says why not."""
    return _checked(_POLL_INTERVAL, seconds)


def check_request_timeout(seconds: float) -> float:
    """The same bounds as `request_timeout_s` in the config (for `check --timeout`); ValueError says why not."""
    return _checked(_REQUEST_TIMEOUT, seconds)


def _checked(adapter: TypeAdapter[float], seconds: float) -> float:
    try:
        return float(adapter.validate_python(seconds))
    except ValidationError as e:
        raise ValueError(str(e.errors()[0]["msg"])) from None


def file_problem(path: Path) -> str | None:
    """Why `path` is not a file to read, or None (a directory or a pipe was called 'no such file')."""
    if path.is_file():
        return None
    if path.is_dir():
        return f"{str(path)!r} is a directory, not a file"
    if path.exists():
        return f"{str(path)!r} is not a regular file (a pipe or a device): give a file"
    return f"no such file {str(path)!r}"


def load_settings(config_file: Path | None = None, secrets_dir: Path | None = None, **overrides: Any) -> Settings:
    """Loads and validates everything; raises ConfigError with one line per problem, naming the field."""
    secrets_dir = secrets_dir or _env_path("LAGWATCH_SECRETS_DIR")
    extra: dict[str, Any] = {}
    if config_file is not None:
        problem = file_problem(config_file)
        if problem is not None:
            raise ConfigError([f"config: {problem}"])
        _check_yaml(config_file)
        extra["yaml_file"] = config_file
    if secrets_dir is not None:
        if not secrets_dir.is_dir():
            raise ConfigError([f"secrets_dir: no such directory {str(secrets_dir)!r}"])
        extra["secrets_dir"] = secrets_dir
    loaded_cls = type("LoadedSettings", (Settings,), {"model_config": {**Settings.model_config, **extra}})
    unknown = _unknown_variables() + (_unknown_secret_files(secrets_dir) if secrets_dir is not None else [])
    if unknown:
        raise ConfigError(unknown)
    try:
        return loaded_cls(**overrides)  # type: ignore[no-any-return]
    except ValidationError as e:
        raise ConfigError([_describe(err) for err in e.errors()]) from None
    except UnicodeDecodeError:  # a file of the secrets directory
        raise ConfigError(["secrets_dir: a file in it is not UTF-8 text"]) from None
    except RecursionError:
        raise ConfigError(["config: nested too deeply"]) from None
    except SettingsError as e:  # e.g. LAGWATCH_CLUSTERS='{bad': a complex field's env value must be JSON
        field = re.search(r'field "([^"]+)"', str(e))
        name = field.group(1) if field else "config"
        raise ConfigError(
            [f"{name}: invalid value from the environment or secrets (complex fields take JSON)"]
        ) from None


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's own rule, which PyYAML does not enforce: a key appears once per mapping. (Otherwise the last one wins
    silently, e.g. a second `prod:` cluster replacing the first.)"""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`: merged keys may be set again here
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, list | dict):
                continue  # unhashable: the constructor below reports it as PyYAML does
            if key in seen:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> Any:
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # over Python's 4,300-digit limit for int(str): beyond any float, so the field says why
            return float("-inf") if str(node.value).lstrip().startswith("-") else float("inf")


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _UniqueKeyLoader.construct_yaml_int)


class _YamlSource(YamlConfigSettingsSource):
    """pydantic-settings' YAML source, parsing with the loader above (its own yaml.safe_load raised ValueError)."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        with open(file_path, encoding=self.yaml_file_encoding) as f:
            return yaml.load(f, Loader=_UniqueKeyLoader) or {}


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int) -> None:
        self.key, self.line = key, line


def _check_yaml(path: Path) -> dict[str, Any] | None:
    """The config file's YAML, read as lagwatch reads it (duplicate keys refused, a number too long for Python an
    infinity that its field refuses), or a one-line ConfigError."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError([f"config: {path}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x})"]) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except RecursionError:
        raise ConfigError([f"config: {path}: nested too deeply"]) from None
    except _DuplicateKey as e:
        raise ConfigError([f"config: {path}:{e.line}: duplicate key {e.key!r}"]) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError([f"config: {where}: invalid YAML: {problem}"]) from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError([f"config: {path}: the top level must be a mapping"])
    return data


def _describe(error: Any) -> str:
    loc = ".".join(str(part) for part in error["loc"]) or "config"
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown field"
    return f"{loc}: {message}"
