"""Fetches Apache Kafka's jars with Maven into a per-version cache, and runs Kafka's own tools from them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import TextIO

from lagwatch.errors import DevBrokerError, ToolMissingError

DEFAULT_KAFKA_VERSION = "4.4.0"  # the newest release whose jars resolve from Maven Central (2026-11)

# Kafka 4 logs through log4j2; 3.x through reload4j. Without a binding the broker logs nothing at all.
_LOG4J2 = """    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
      <version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId>
      <version>2.24.3</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>2.0.17</version></dependency>"""
_RELOAD4J = """    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId>
      <version>1.7.36</version></dependency>"""

_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")


def kafka_major(version: str) -> int:
    return int(version.split(".", 1)[0])


def cache_root() -> Path:
    base = os.environ.get("LAGWATCH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lagwatch"
    )
    return Path(base)


def require_tool(name: str, install_hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ToolMissingError(f"{name} not found on PATH: install {install_hint}")
    return path


def _render_pom(version: str) -> str:
    template = resources.files("lagwatch.devbroker").joinpath("pom.xml").read_text()
    logging_deps = _LOG4J2 if kafka_major(version) >= 4 else _RELOAD4J
    return template.replace("@KAFKA_VERSION@", version).replace("@LOGGING_DEPENDENCIES@", logging_deps)


def ensure_kafka_jars(version: str = DEFAULT_KAFKA_VERSION, progress: TextIO | None = sys.stderr) -> Path:
    """Returns the folder with every jar of Kafka `version`; downloads them with Maven on first use."""
    if not _VERSION_RE.match(version):
        raise DevBrokerError(f"kafka version {version!r} is not of the form X.Y.Z")
    require_tool("java", "Java 17 (apt-get install openjdk-17-jre-headless)")
    libs = cache_root() / "kafka" / version / "libs"
    done_marker = libs.parent / ".complete"
    if done_marker.exists():
        return libs
    mvn = require_tool("mvn", "Maven (apt-get install maven)")
    work = libs.parent
    if libs.exists():
        shutil.rmtree(libs)
    work.mkdir(parents=True, exist_ok=True)
    (work / "pom.xml").write_text(_render_pom(version))
    cmd = [
        mvn,
        "-B",
        "-f",
        str(work / "pom.xml"),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={libs}",
        "-DincludeScope=runtime",
    ]
    _say(progress, f"fetching Apache Kafka {version} jars from Maven Central into {libs}")
    # A session of its own: a Ctrl-C in the terminal reaches lagwatch, which stops Maven itself (killed by it,
    # Maven's failure was reported instead of the stop).
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert proc.stdout is not None
    tail: list[str] = []
    downloaded = 0
    try:
        for line in proc.stdout:
            tail = [*tail[-20:], line.rstrip()]
            if "Downloaded from" in line:
                downloaded += 1
                if downloaded % 10 == 0:
                    _say(progress, f"  ... {downloaded} files downloaded")
    except BaseException:  # interrupted (lagwatch run's StartupInterrupted): Maven goes too
        proc.kill()
        proc.wait()
        raise
    if proc.wait() != 0:
        missing = next((t for t in tail if "Could not resolve" in t or "not found" in t), None)
        raise DevBrokerError(f"maven could not fetch Kafka {version}: {missing or tail[-1] if tail else 'no output'}")
    jar_count = len(list(libs.glob("*.jar")))
    done_marker.write_text(f"{jar_count}\n")
    _say(progress, f"Apache Kafka {version}: {jar_count} jars ready ({downloaded} files downloaded)")
    return libs


def _say(stream: TextIO | None, message: str) -> None:
    if stream is not None:
        print(message, file=stream, flush=True)


def java_command(libs: Path, main_class: str, *args: str, heap: str = "256m") -> list[str]:
    return ["java", f"-Xmx{heap}", "-cp", f"{libs}/*", main_class, *args]


def run_kafka_tool(libs: Path, main_class: str, *args: str, timeout: float = 120) -> str:
    """Runs one of Kafka's own command-line tools and returns its standard output."""
    env = {**os.environ, "KAFKA_LOG4J_OPTS": ""}
    done = subprocess.run(
        java_command(libs, main_class, *args), capture_output=True, text=True, timeout=timeout, env=env
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise DevBrokerError(f"{main_class.rsplit('.', 1)[-1]} failed: {last}")
    return done.stdout
