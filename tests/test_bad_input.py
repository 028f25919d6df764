"""Bad input on the command line and in the config: one line naming the field or option, exit 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_lagwatch

CLUSTER = "clusters:\n  prod:\n    bootstrap_servers: [127.0.0.1:9]\n"


def _one_config_error(done: object, *expected: str) -> None:
    assert done.returncode == 2, done
    stderr: str = done.stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lagwatch: config error: "), stderr
    for text in expected:
        assert text in lines[0], stderr


@pytest.mark.parametrize("interval", ["-5", "0", "1e-9", "nan", "inf", "1e400"])
def test_run_interval_is_checked_like_the_config(interval: str, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(CLUSTER)
    done = run_lagwatch("run", "--config", str(config), f"--interval={interval}", timeout=30)
    _one_config_error(done, "--interval: ")


def test_duplicate_yaml_keys_name_file_line_and_key(tmp_path: Path) -> None:
    config = tmp_path / "dup.yaml"
    config.write_text(CLUSTER + "  prod:\n    bootstrap_servers: [127.0.0.1:10]\n")
    _one_config_error(run_lagwatch("validate", "--config", str(config)), f"{config}:4: duplicate key 'prod'")


def test_non_utf8_yaml(tmp_path: Path) -> None:
    config = tmp_path / "latin1.yaml"
    config.write_bytes(CLUSTER.encode() + "    # café\n".encode("latin-1"))
    _one_config_error(run_lagwatch("validate", "--config", str(config)), f"{config}:4: not UTF-8")


@pytest.mark.parametrize("value", ["nan", ".nan", ".inf", "1e999999", "-.inf", "7" * 5000, "-" + "7" * 5000])
def test_nan_inf_and_huge_numbers_in_float_fields(value: str, tmp_path: Path) -> None:
    """A 5,000-digit integer is over Python's limit for int(str): a traceback from the YAML reader, in `validate`,
    `check` and `run` alike (and in the pipeline's jobs, which read the file too)."""
    config = tmp_path / "c.yaml"
    config.write_text(CLUSTER + f"    request_timeout_s: {value}\n")
    _one_config_error(run_lagwatch("validate", "--config", str(config)), "clusters.prod.request_timeout_s: ")
    if len(value) > 1000:
        config.write_text(CLUSTER + f"    poll_interval_s: 30\nhttp:\n  max_connections: {value}\n")
        for command in ("validate", "check"):
            _one_config_error(run_lagwatch(command, "--config", str(config)), "http.max_connections: ")


def test_complex_env_value_that_is_not_json(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(CLUSTER)
    done = run_lagwatch("validate", "--config", str(config), env={"LAGWATCH_CLUSTERS": "{bad"})
    _one_config_error(done, "clusters: ")
