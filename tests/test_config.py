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
