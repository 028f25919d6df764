"""Configuration: YAML, environment and secret files; errors that name the field; secrets never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from lagwatch.collect.client import admin_client_options
from lagwatch.config import load_settings
from lagwatch.errors import ConfigError
from tests.conftest import run_lagwatch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "config" / "lagwatch.example.yaml"
SASL_YAML = """
clusters:
  prod:
    bootstrap_servers: "a:9093,b:9093"
    security:
      protocol: SASL_SSL
      sasl: {mechanism: SCRAM-SHA-512, username: lagwatch}
"""


def test_example_config_validates() -> None:
    env = {"LAGWATCH_CLUSTERS__PROD__SECURITY__SASL__PASSWORD": "x", "LAGWATCH_NOTIFIERS__SLACK__TOKEN": "xoxb-x"}
    done = run_lagwatch("validate", "--config", str(EXAMPLE), env=env)
    assert done.returncode == 0, done.stderr
    assert "valid, 2 cluster(s)" in done.stdout and "SASL_SSL/SCRAM-SHA-512" in done.stdout


def test_every_problem_is_one_line_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        """
clusters:
  prod:
    bootstrap_servers: [kafka-0]
    groups: {include: ["("]}
    poll_interval_s: 0
    colour: blue
  "bad name!":
    bootstrap_servers: [a:1]
"""
    )
    done = run_lagwatch("validate", "--config", str(bad))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert all(ln.startswith("lagwatch: config error: ") for ln in lines)
    text = "\n".join(lines)
    for field in (
        "clusters.prod.bootstrap_servers",
        "clusters.prod.groups.include",
        "clusters.prod.poll_interval_s",
        "clusters.prod.colour: unknown field",
    ):
        assert field in text, text


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("clusters:\n  prod: [unclosed\n")
    done = run_lagwatch("validate", "--config", str(broken))
    assert done.returncode == 2 and "invalid YAML" in done.stderr and "broken.yaml:" in done.stderr
    done = run_lagwatch("validate", "--config", str(tmp_path / "nope.yaml"))
    assert done.returncode == 2 and "no such file" in done.stderr
    # A directory or a device was called "no such file" too.
    done = run_lagwatch("validate", "--config", str(tmp_path))
    assert done.returncode == 2 and "is a directory, not a file" in done.stderr, done.stderr
    done = run_lagwatch("validate", "--config", "/dev/null")
    assert done.returncode == 2 and "is not a regular file" in done.stderr, done.stderr
    ca = tmp_path / "ca.yaml"
    ca.write_text(f"clusters: {{x: {{bootstrap_servers: 'h:1', security: {{tls: {{ca_file: '{tmp_path}'}}}}}}}}\n")
    done = run_lagwatch("validate", "--config", str(ca))
    assert done.returncode == 2 and "ca_file: " in done.stderr and "is a directory" in done.stderr, done.stderr


def test_sasl_password_required(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(SASL_YAML)
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    assert e.value.problems == ["clusters.prod.security.sasl: SCRAM-SHA-512 needs username and password"]


def test_env_overrides_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(SASL_YAML)
    monkeypatch.setenv("LAGWATCH_CLUSTERS__PROD__SECURITY__SASL__PASSWORD", "from-env")
    monkeypatch.setenv("LAGWATCH_CLUSTERS__PROD__POLL_INTERVAL_S", "12")
    settings = load_settings(path)
    prod = settings.clusters["prod"]
    assert prod.poll_interval_s == 12 and prod.bootstrap_servers == ["a:9093", "b:9093"]
    assert prod.security.sasl is not None and prod.security.sasl.username == "lagwatch"
    assert prod.security.sasl.password is not None and prod.security.sasl.password.get_secret_value() == "from-env"


def test_secret_files_and_secrets_never_shown(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(SASL_YAML)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "clusters__prod__security__sasl__password").write_text("hunter2-file-secret")
    settings = load_settings(path, secrets_dir=secrets)
    sasl = settings.clusters["prod"].security.sasl
    assert sasl is not None and sasl.password is not None
    assert sasl.password.get_secret_value() == "hunter2-file-secret"
    assert "hunter2" not in repr(settings) and "hunter2" not in settings.model_dump_json()
    assert admin_client_options("prod", settings.clusters["prod"])["sasl_plain_password"] == "hunter2-file-secret"

    done = run_lagwatch("validate", "--config", str(path), env={"LAGWATCH_SECRETS_DIR": str(secrets)})
    assert done.returncode == 0, done.stderr
    assert "hunter2" not in done.stdout + done.stderr
    # An unreachable SASL cluster: the error line names the cluster, never the password.
    path.write_text(SASL_YAML.replace('"a:9093,b:9093"', '"127.0.0.1:9"\n    request_timeout_s: 3'))
    done = run_lagwatch("check", "--config", str(path), env={"LAGWATCH_SECRETS_DIR": str(secrets)}, timeout=90)
    assert done.returncode == 1 and "cluster 'prod'" in done.stderr
    assert "hunter2" not in done.stdout + done.stderr


def _validate(tmp_path: Path, yaml_text: str, env: dict[str, str] | None = None, *args: str) -> tuple[int, str]:
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    done = run_lagwatch("validate", "--config", str(path), *args, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stderr


def test_infinite_windows_thresholds_and_times_are_refused_naming_the_field(tmp_path: Path) -> None:
    """`.inf` passed `validate` in the rules, alerts and notifiers (only the top level refused it), then `run` died
    of an OverflowError sizing the history."""
    base = "clusters: {prod: {bootstrap_servers: [a:1]}}\n"
    for extra, field in (
        ("rules: {stalled: {window_s: .inf}}", "rules.stalled.window_s"),
        ("rules: {rate_window_s: .inf}", "rules.rate_window_s"),
        ("rules: {lag: {for_s: .nan}}", "rules.lag.for_s"),
        ("alerts: {repeat_interval_s: .inf}", "alerts.repeat_interval_s"),
        ("rules: {overrides: [{rules: {stopped: {window_s: .inf}}}]}", "rules"),
    ):
        code, err = _validate(tmp_path, base + extra)
        assert code == 2 and field in err, (extra, err)
    code, err = _validate(tmp_path, base, {"LAGWATCH_RULES__RATE_WINDOW_S": "inf"})
    assert code == 2 and "rules.rate_window_s" in err


def test_a_misspelt_variable_and_a_name_in_capitals_are_clear_errors(tmp_path: Path) -> None:
    """LAGWATCH_CLUSTER__... (one letter short) was read by nothing, silently: no cluster, so the demo started.
    And a secret for cluster `Prod` from the environment made a second cluster `prod`, reported only as missing
    its bootstrap servers."""
    code, err = _validate(tmp_path, "{}\n", {"LAGWATCH_CLUSTER__PROD__BOOTSTRAP_SERVERS": '["a:1"]'})
    assert code == 2 and "LAGWATCH_CLUSTER__PROD__BOOTSTRAP_SERVERS: no such setting ('cluster'" in err
    prod = "clusters: {Prod: {bootstrap_servers: [a:1], security: {protocol: SASL_PLAINTEXT, sasl: {mechanism: PLAIN, username: u}}}}\n"
    code, err = _validate(tmp_path, prod, {"LAGWATCH_CLUSTERS__PROD__SECURITY__SASL__PASSWORD": "pw-Secret-1"})
    assert code == 2 and "'Prod' and 'prod' differ only in case" in err and "pw-Secret-1" not in err
    hooks = "clusters: {prod: {bootstrap_servers: [a:1]}}\nnotifiers: {webhooks: {PagerDuty: {url: 'http://h/x'}}}\n"
    code, err = _validate(tmp_path, hooks, {"LAGWATCH_NOTIFIERS__WEBHOOKS__PAGERDUTY__BEARER_TOKEN": "tok-Secret-2"})
    assert code == 2 and "differ only in case" in err


def test_odd_files_are_one_line_errors_and_yaml_merge_keys_work(tmp_path: Path) -> None:
    """A secrets file that is not UTF-8 and YAML nested 500 deep gave tracebacks; YAML's merge key `<<:` (a plain
    way to share settings between clusters) was refused by the duplicate-key check."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "clusters__prod__security__sasl__password").write_bytes(b"\xff\xfe bad")
    path = tmp_path / "c.yaml"
    path.write_text(SASL_YAML)
    done = run_lagwatch("validate", "--config", str(path), env={"LAGWATCH_SECRETS_DIR": str(secrets)})
    assert done.returncode == 2 and "secrets_dir: a file in it is not UTF-8 text" in done.stderr, done.stderr
    code, err = _validate(tmp_path, "a: " + "[" * 500 + "]" * 500 + "\n")
    assert code == 2 and "nested too deeply" in err, err
    merged = """
clusters:
  prod: &base {bootstrap_servers: [a:1], poll_interval_s: 15}
  staging: {<<: *base, bootstrap_servers: [b:1]}
"""
    path.write_text(merged)
    settings = load_settings(path)
    assert settings.clusters["staging"].poll_interval_s == 15 and settings.clusters["staging"].bootstrap_servers == [
        "b:1"
    ]
    dupe = "clusters:\n  prod: {bootstrap_servers: [a:1]}\n  prod: {bootstrap_servers: [b:1]}\n"
    code, err = _validate(tmp_path, dupe)
    assert code == 2 and "duplicate key 'prod'" in err  # the duplicate-key check still holds


def test_a_webhook_url_is_a_secret_and_must_be_http(tmp_path: Path) -> None:
    """Webhook URLs carry tokens (in their path, their query): one without a scheme was accepted, and reached the
    log with a traceback at every retry. It is an http(s) URL, and a secret like the Slack webhook's."""
    url = "hooks.example/services/T0/B0/Tok3n-Secret"
    code, err = _validate(
        tmp_path,
        f"clusters: {{prod: {{bootstrap_servers: [a:1]}}}}\nnotifiers: {{webhooks: {{ops: {{url: '{url}'}}}}}}\n",
    )
    assert code == 2 and "notifiers.webhooks.ops.url: must be an http:// or https:// URL with a host" in err
    assert "Tok3n" not in err
    from lagwatch import logs

    settings = load_settings(
        clusters={"prod": {"bootstrap_servers": ["a:1"]}},
        notifiers={"webhooks": {"ops": {"url": "https://" + url}}},
    )
    assert "https://" + url in logs.secret_values(settings)


@pytest.mark.parametrize(
    ("value", "servers"),
    [
        ("k1:9092,k2:9092", ["k1:9092", "k2:9092"]),
        ("k1:9092", ["k1:9092"]),
        ('["k1:9092", "k2:9092"]', ["k1:9092", "k2:9092"]),
    ],
)
def test_bootstrap_servers_from_the_environment_as_documented(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, servers: list[str]
) -> None:
    """A comma-separated string (the README's form) from the environment was taken for JSON and refused, naming
    neither the variable nor the field; a JSON list still works."""
    config = tmp_path / "c.yaml"
    config.write_text("clusters: {prod: {bootstrap_servers: ['a:1']}}\n")
    monkeypatch.setenv("LAGWATCH_CLUSTERS__PROD__BOOTSTRAP_SERVERS", value)
    assert load_settings(config).clusters["prod"].bootstrap_servers == servers


def test_a_misspelt_secret_file_is_an_error_like_a_misspelt_variable(tmp_path: Path) -> None:
    """`notifers__slack__token` in the secrets directory was ignored without a word (Slack then had no token, or the
    demo started); the same name as a variable is an error. Kubernetes' own entries are not settings."""
    from lagwatch.errors import ConfigError

    path = tmp_path / "c.yaml"
    path.write_text(SASL_YAML)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "clusters__prod__security__sasl__password").write_text("pw")
    (secrets / "..data").mkdir()  # as a mounted Secret has
    assert load_settings(path, secrets_dir=secrets).clusters["prod"].security.sasl is not None
    (secrets / "notifers__slack__token").write_text("xoxb-1")
    with pytest.raises(ConfigError, match="secrets_dir: notifers__slack__token: no such setting"):
        load_settings(path, secrets_dir=secrets)
