"""SASL/PLAIN against a real broker: the password comes from a secret file or the environment, a wrong one is
reported as an authentication failure in one line, and no password is ever printed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from lagwatch.devbroker import LocalBroker
from tests.conftest import KAFKA_VERSION, run_lagwatch

pytestmark = pytest.mark.kafka
PASSWORD = "lw-Secret-5f3a9"


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[LocalBroker]:
    with LocalBroker(kafka_version=KAFKA_VERSION, sasl_users={"admin": "admin-Secret-77", "lagwatch": PASSWORD}) as b:
        admin = KafkaAdminClient(**b.client_options)
        admin.create_topics([NewTopic("secured", 1, 1)])
        admin.close()
        consumer = KafkaConsumer(**b.client_options, group_id="secured-group", enable_auto_commit=False)
        consumer.assign([TopicPartition("secured", 0)])
        consumer.commit({TopicPartition("secured", 0): OffsetAndMetadata(0, "", -1)})
        consumer.close()
        yield b


def _config(tmp_path: Path, bootstrap: str) -> Path:
    path = tmp_path / "sasl.yaml"
    path.write_text(
        f"""
clusters:
  secured:
    bootstrap_servers: [{bootstrap}]
    request_timeout_s: 5
    security:
      protocol: SASL_PLAINTEXT
      sasl: {{mechanism: PLAIN, username: lagwatch}}
"""
    )
    return path


def test_sasl_password_from_secret_file(sasl_broker: LocalBroker, tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "clusters__secured__security__sasl__password").write_text(PASSWORD)
    done = run_lagwatch(
        "check",
        "--config",
        str(_config(tmp_path, sasl_broker.bootstrap)),
        "--output",
        "json",
        env={"LAGWATCH_SECRETS_DIR": str(secrets)},
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [(r["cluster"], r["group"], r["lag"]) for r in rows] == [("secured", "secured-group", 0)]
    assert PASSWORD not in done.stdout + done.stderr


def test_wrong_password_is_an_auth_failure_in_one_line(sasl_broker: LocalBroker, tmp_path: Path) -> None:
    wrong = "not-the-Password-31"
    done = run_lagwatch(
        "check",
        "--config",
        str(_config(tmp_path, sasl_broker.bootstrap)),
        env={"LAGWATCH_CLUSTERS__SECURED__SECURITY__SASL__PASSWORD": wrong},
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cluster 'secured': auth_failed" in lines[0], done.stderr
    assert wrong not in done.stdout + done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(
    tuple(int(x) for x in KAFKA_VERSION.split(".")[:2]) < (4, 1), reason="DescribeShareGroupOffsets is Kafka 4.1's"
)
def test_the_second_connection_to_a_coordinator_logs_in_as_the_first(sasl_broker: LocalBroker) -> None:
    """Share groups' offsets are read on a second connection to their coordinator (lagwatch.collect.client's
    side_connection): it must log in with the cluster's own settings, or every share group of a SASL cluster would
    be unreadable."""
    from lagwatch.collect import ClusterPoller
    from lagwatch.collect.group_describes import OwnDescribeShareGroupOffsetsRequest
    from lagwatch.collect.wire import Wire
    from lagwatch.config import ClusterConfig

    config = ClusterConfig.model_validate(
        {
            "bootstrap_servers": [sasl_broker.bootstrap],
            "request_timeout_s": 5,
            "exact_clocks": False,
            "security": {
                "protocol": "SASL_PLAINTEXT",
                "sasl": {"mechanism": "PLAIN", "username": "lagwatch", "password": PASSWORD},
            },
        }
    )
    poller = ClusterPoller("secured", config)
    try:
        assert poller.poll().ok
        wire = Wire(poller._admin, 5000)
        (node,) = wire.broker_ids()
        (answer,) = wire.run(wire._send_all, [], [(node, OwnDescribeShareGroupOffsetsRequest(["no-such-share-group"]))])
        side = dict(poller._admin._manager.lagwatch_side_connections)
    finally:
        poller.close()
    assert not isinstance(answer, BaseException), answer
    assert [group_id for group_id, *_ in answer.groups] == [
        "no-such-share-group"
    ]  # answered, on a connection logged in
    assert list(side) == [node] and all(conn.closed for conn in side.values())
