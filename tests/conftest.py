"""One real Kafka broker per test session (or LAGWATCH_TEST_BOOTSTRAP), and helpers that make real traffic."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lagwatch.devbroker import DEFAULT_KAFKA_VERSION, LocalBroker, ensure_kafka_jars

KAFKA_VERSION = os.environ.get("LAGWATCH_TEST_KAFKA_VERSION", DEFAULT_KAFKA_VERSION)


@pytest.fixture(scope="session")
def kafka_libs() -> Path:
    return ensure_kafka_jars(KAFKA_VERSION)


@pytest.fixture(scope="session")
def bootstrap(kafka_libs: Path) -> Iterator[str]:
    external = os.environ.get("LAGWATCH_TEST_BOOTSTRAP")
    if external:
        yield external
        return
    with LocalBroker(kafka_version=KAFKA_VERSION, settings=TEST_BROKER_SETTINGS) as broker:
        yield broker.bootstrap


# A share consumer killed leaves its group once its session times out: 45 s at the least by default, 6 s here; the
# records a hung one holds are known to Kafka once their acquisition lock runs out: 15 s at the least, 5 s here
# (brokers that have no share groups ignore these).
TEST_BROKER_SETTINGS = {
    # A streams group may ask for as short a session (its group config streams.session.timeout.ms); the default
    # stays 45 s, which the tests comparing figures with Kafka's tool after a SIGKILL count on.
    "group.streams.min.session.timeout.ms": "6000",
    "group.streams.min.heartbeat.interval.ms": "1000",
    "group.share.min.record.lock.duration.ms": "5000",
    "group.share.min.session.timeout.ms": "6000",
    "group.share.session.timeout.ms": "6000",
    "group.share.min.heartbeat.interval.ms": "1000",
    "group.share.heartbeat.interval.ms": "2000",
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def run_lagwatch(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lagwatch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.2, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture(scope="session")
def spark_jars() -> Path:
    """The S3 and Delta Lake connectors the pipeline image bakes in, for this run's Spark sessions and the jobs it
    starts (LAGWATCH_SPARK_JARS): fetched with Maven once."""
    from tests.spark_jars import ensure_spark_jars

    jars = ensure_spark_jars()
    os.environ["LAGWATCH_SPARK_JARS"] = str(jars)
    return jars


@pytest.fixture(scope="session")
def spark(spark_jars: Path):  # type: ignore[no-untyped-def]
    """One local[2] SparkSession for the whole run (5-15 s to start), with Spark's Kafka and Delta connectors."""
    from lagwatch.pipeline.session import spark_session

    session = spark_session("local[2]", "lagwatch-tests", delta=True)
    yield session
    session.stop()


# `make test`'s two workers (`--dist loadfile`): a test file whole on one worker, except the files that run Spark,
# all on one worker, one after another, while the other worker runs the broker scenarios, which wait on real time.
# Most of the run's CPU is Spark's JVM (56% of it, sampled 2026-11-28): two Spark files at once, one on each
# worker, slowed each other on 2 cores, then both workers waited on real time together.
SPARK_SCOPE = "spark"
# The files that take longest, measured on 2026-11-28 (seconds on one worker): given out first, so that neither
# worker is left alone with one of them at the end. Only the order depends on this list, never what runs.
LONGEST_FIRST = (
    "tests/test_false_pages_kafka.py",  # 346 s
    "tests/test_daemon_kafka.py",  # 148 s
    "tests/test_share_groups_kafka.py",  # 77 s
    "tests/test_streams_groups_kafka.py",  # 70 s
    "tests/test_lake_s3.py",  # 42 s
    "tests/test_stop.py",  # 38 s
    "tests/test_slack.py",  # 36 s
)


def _spark_files() -> frozenset[str]:
    """The test files with a test marked `spark` (read from their text: the controller collects no items)."""
    here = Path(__file__).parent
    return frozenset(
        f"tests/{path.name}" for path in here.glob("test_*.py") if "mark.spark" in path.read_text(encoding="utf-8")
    )


def _schedule_rank(path: str, spark_files: frozenset[str]) -> int:
    if path in spark_files:
        return 0
    return 1 + LONGEST_FIRST.index(path) if path in LONGEST_FIRST else 1 + len(LONGEST_FIRST)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `--dist loadfile`: the Spark files are one unit of work, the others a unit per file, given out in
    the order the workers collected them (pytest_collection_modifyitems below: Spark's first, then the longest)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    spark_files = _spark_files()

    class SparkApart(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SPARK_SCOPE if path in spark_files else path

    config.option.loadscopereorder = False  # xdist's own order is by the number of tests in a unit
    return SparkApart(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`make test` runs the tests on two pytest-xdist workers, which schedule by node id and run only the first
    of items that share one. schemathesis gives every API operation's test the same node id (its name has the
    operation), so 10 of the 11 fuzzed operations went unrun: such items get the node id their name implies,
    and a collection with a duplicate left stops the run rather than passing with tests missing.

    The files are then ordered for the workers (see SPARK_SCOPE); tests keep their order within a file."""
    seen: dict[str, int] = {}
    for item in items:
        seen[item.nodeid] = seen.get(item.nodeid, 0) + 1
    for item in items:
        if seen[item.nodeid] > 1 and item.parent is not None:
            item._id = item.parent.id.child(item.name)  # what pytest gives an item whose id is not set
    nodeids = [item.nodeid for item in items]
    if len(set(nodeids)) != len(nodeids):
        duplicates = sorted({n for n in nodeids if nodeids.count(n) > 1})
        raise pytest.UsageError(f"tests share a node id (xdist would run only one): {duplicates[:3]}")
    spark_files = _spark_files()
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (_schedule_rank(item.nodeid.split("::", 1)[0], spark_files), order[id(item)]))


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real S3-compatible server (SeaweedFS) for the run; tests that kill or freeze a store start their own."""
    from tests.s3_server import S3Server, weed_binary

    binary = weed_binary()
    if binary is None:
        pytest.skip("SeaweedFS not built (make test-deps builds it: deploy/tools/install-seaweedfs.sh)")
    server = S3Server(binary, tmp_path_factory.mktemp("seaweedfs")).start()
    yield server
    server.remove()
