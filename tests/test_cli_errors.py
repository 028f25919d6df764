"""Bad input and unreachable clusters: one line on stderr, the right exit code, never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

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


# The daemon's image has the venv without the spark extra: the CLI (whose parser imports every pipeline job's module)
# must start without pyarrow, pandas, numpy, pyspark or matplotlib.
WITHOUT_SPARK_EXTRA = (
    "import sys\n"
    "class NoSparkExtra:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('pyarrow', 'pandas', 'numpy', 'pyspark', 'matplotlib'):\n"
    "            raise ImportError(f'No module named {name!r}')\n"
    "sys.meta_path.insert(0, NoSparkExtra())\n"
    "from lagwatch.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.parametrize("args", [["--version"], ["validate", "--help"], ["pipeline", "offsets-topic", "--help"]])
def test_the_cli_starts_without_the_spark_extra(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_SPARK_EXTRA, *args], capture_output=True, text=True)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    "job",
    [
        ["backtest", "--lake", "{tmp}/lake", "--output", "{tmp}/out"],
        ["report", "--lake", "{tmp}/lake", "--out", "{tmp}/out"],
        ["offsets-topic", "--bootstrap-server", "127.0.0.1:9", "--out", "{tmp}/out"],
    ],
)
def test_a_master_spark_would_not_take_is_one_line_before_anything_starts(job: list[str], tmp_path: Path) -> None:
    """It failed only once the JVM had started: exit 1, a Java stack trace, and a last line that said the Java
    gateway exited, not why (and offsets-topic asked the cluster first, and made its output directory)."""
    (tmp_path / "lake" / "snapshots").mkdir(parents=True)
    done = run_lagwatch("pipeline", *(a.format(tmp=tmp_path) for a in job), "--master", "garbage")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--master: 'garbage' is not a Spark master" in lines[0], done.stderr
    assert not (tmp_path / "out").exists()


def test_check_timeout_applies_to_a_config_file_too(tmp_path: Path) -> None:
    """`check --config F --timeout 2` waited the config's 30 s on a broker that never answers: --timeout was
    silently ignored with --config."""
    import time

    with socket.socket() as silent:  # accepts connections, answers nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        config = tmp_path / "c.yaml"
        port = silent.getsockname()[1]
        config.write_text(f"clusters: {{x: {{bootstrap_servers: '127.0.0.1:{port}', request_timeout_s: 30}}}}\n")
        started = time.monotonic()
        done = run_lagwatch("check", "--config", str(config), "--timeout", "2")
        took = time.monotonic() - started
    assert done.returncode == 1 and "unreachable" in done.stderr, done.stderr
    assert took < 10, took
    bad = run_lagwatch("check", "--config", str(config), "--timeout", "0")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("lagwatch: config error: --timeout")


def test_an_unreachable_cluster_says_what_one_look_at_the_server_tells() -> None:
    """A refused port, a name that does not resolve and a port that speaks no Kafka all said "no broker answered"
    alike, after the whole timeout each."""
    refused = run_lagwatch("check", "--bootstrap-server", f"127.0.0.1:{_closed_port()}", "--timeout", "2")
    assert "connection refused" in refused.stderr, refused.stderr
    unresolved = run_lagwatch("check", "--bootstrap-server", "no-such-host.invalid:9092", "--timeout", "2")
    assert "host name does not resolve" in unresolved.stderr, unresolved.stderr
    with socket.socket() as silent:  # takes the connection, answers nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        other = run_lagwatch("check", "--bootstrap-server", f"127.0.0.1:{silent.getsockname()[1]}", "--timeout", "2")
    assert "takes connections but gave no Kafka answer" in other.stderr, other.stderr
    for done in (refused, unresolved, other):
        assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1
