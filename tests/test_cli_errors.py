"""Bad input and unreachable clusters: one line on stderr, the right exit code, never a traceback."""

from __future__ import annotations

import socket

from tests.conftest import run_lagwatch


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_cluster_is_one_line_exit_1() -> None:
    done = run_lagwatch("check", "--bootstrap-server", f"127.0.0.1:{_closed_port()}", "--timeout", "2")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "unreachable" in lines[0], done.stderr


def test_bad_bootstrap_and_regex_are_config_errors() -> None:
    done = run_lagwatch("check", "--bootstrap-server", "no-port-here")
    assert done.returncode == 2 and "--bootstrap-server" in done.stderr and "Traceback" not in done.stderr
    done = run_lagwatch("check", "--bootstrap-server", "127.0.0.1:9", "--group", "(")
    assert done.returncode == 2 and "--group: invalid regex" in done.stderr


def test_missing_java_says_what_to_install() -> None:
    done = run_lagwatch("dev-broker", "--fetch-only", env={"PATH": "/nonexistent"})
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        == "lagwatch: java not found on PATH: install Java 17 (apt-get install openjdk-17-jre-headless)"
    )
