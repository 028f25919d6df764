"""Starts and stops one single-node KRaft Kafka broker on 127.0.0.1 from Maven Central jars."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import TextIO

from lagwatch.devbroker.jars import (
    DEFAULT_KAFKA_VERSION,
    ensure_kafka_jars,
    java_command,
    kafka_major,
)
from lagwatch.errors import DevBrokerError

# Internal topics need replication factor 1 on one node; the rebalance delay only slows tests down.
_BASE_SETTINGS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    "log.retention.check.interval.ms": "5000",
}


_PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"


_PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DevBrokerInputError(DevBrokerError):
    exit_code = 2  # the port or directory given


def _check_port_free(port: int) -> None:
    """The broker's port, said to be taken before it starts: another broker there answered as this one (the
    bootstrap printed, then 'exited unexpectedly'), and the bind failure was only in the broker's log."""
    if not 0 < port < 65536:
        raise DevBrokerInputError(f"--port {port}: not a TCP port (1-65535)")
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker binds: a port in TIME_WAIT is free
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            raise DevBrokerInputError(f"--port {port}: cannot listen on 127.0.0.1:{port}: {e.strerror}") from None


class LocalBroker:
    """One Kafka broker process. Use as a context manager, or start() and stop()."""

    def __init__(
        self,
        port: int = 0,
        kafka_version: str = DEFAULT_KAFKA_VERSION,
        data_dir: Path | None = None,
        settings: Mapping[str, str] | None = None,
        heap: str = "512m",
        progress: TextIO | None = sys.stderr,
        sasl_users: Mapping[str, str] | None = None,
    ) -> None:
        """`sasl_users` (user -> password) puts the client listener behind SASL/PLAIN; the first user is the
        broker's own (inter-broker) identity."""
        self.port = port or free_port()
        self.controller_port = free_port()
        self.kafka_version = kafka_version
        self._own_data_dir = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="lagwatch-kafka-"))
        self.settings = dict(settings or {})
        self.heap = heap
        self.progress = progress
        self.sasl_users = dict(sasl_users or {})
        self.libs: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "broker.log"

    @property
    def client_options(self) -> dict[str, str]:
        """kafka-python options to connect as the broker's own (super) user."""
        if not self.sasl_users:
            return {"bootstrap_servers": self.bootstrap}
        user, password = next(iter(self.sasl_users.items()))
        return {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": user,
            "sasl_plain_password": password,
        }

    def server_properties(self) -> dict[str, str]:
        props = dict(_BASE_SETTINGS)
        listener = "SASL_PLAINTEXT" if self.sasl_users else "PLAINTEXT"
        props["listeners"] = f"{listener}://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
        props["advertised.listeners"] = f"{listener}://127.0.0.1:{self.port}"
        if self.sasl_users:
            (admin, admin_password), *_ = self.sasl_users.items()
            users = " ".join(f'user_{u}="{p}"' for u, p in self.sasl_users.items())
            props.update(
                {
                    "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "inter.broker.listener.name": "SASL_PLAINTEXT",
                    "sasl.enabled.mechanisms": "PLAIN",
                    "sasl.mechanism.inter.broker.protocol": "PLAIN",
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                        f'{_PLAIN_LOGIN} username="{admin}" password="{admin_password}" {users};'
                    ),
                }
            )
        props["log.dirs"] = str(self.data_dir / "logs")
        if kafka_major(self.kafka_version) >= 4:
            props["controller.quorum.bootstrap.servers"] = f"127.0.0.1:{self.controller_port}"
        else:
            props["controller.quorum.voters"] = f"1@127.0.0.1:{self.controller_port}"
        props.update(self.settings)
        return props

    def _java(self, main_class: str, *args: str) -> list[str]:
        assert self.libs is not None
        cmd = java_command(self.libs, main_class, *args, heap=self.heap)
        log_opts = self._log_options()
        return [cmd[0], *log_opts, *cmd[1:]]

    def _log_options(self) -> list[str]:
        if kafka_major(self.kafka_version) >= 4:
            config = resources.files("lagwatch.devbroker").joinpath("log4j2.properties")
            return [f"-Dlog4j2.configurationFile={config}", f"-Dlagwatch.broker.log={self.log_file}"]
        config = resources.files("lagwatch.devbroker").joinpath("log4j.properties")
        return [f"-Dlog4j.configuration=file:{config}", f"-Dlagwatch.broker.log={self.log_file}"]

    def _format(self, props_file: Path) -> None:
        cluster_id = self._run_storage_tool("random-uuid").strip().splitlines()[-1]
        args = ["format", "-t", cluster_id, "-c", str(props_file), "--ignore-formatted"]
        if kafka_major(self.kafka_version) >= 4:
            args.append("--standalone")
        self._run_storage_tool(*args)

    def _run_storage_tool(self, *args: str) -> str:
        # A session of its own, as the broker's: a Ctrl-C reaches lagwatch, which stops the start-up (killed by it,
        # the tool's failure was reported instead of the stop).
        done = subprocess.run(
            self._java("kafka.tools.StorageTool", *args), capture_output=True, text=True, start_new_session=True
        )
        if done.returncode != 0:
            # The reason, not a Java stack trace's last frame (`--set log.retention.hours=abc` said "at kafka...").
            lines = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()
            reasons = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith(("at ", "..."))]
            raise DevBrokerError(f"kafka storage format failed: {(reasons or lines)[0][:300]}")
        return done.stdout

    def start(self, timeout: float = 90.0) -> LocalBroker:
        try:
            self._start(timeout)
        except BaseException:  # a failed or interrupted start (StartupInterrupted) leaves nothing behind
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        _check_port_free(self.port)
        self.libs = ensure_kafka_jars(self.kafka_version, self.progress)
        props_file = self.data_dir / "server.properties"
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            props_file.write_text("".join(f"{k}={v}\n" for k, v in self.server_properties().items()))
        except OSError as e:
            raise DevBrokerInputError(
                f"--data-dir {self.data_dir}: cannot keep the broker's data there: {e.strerror}"
            ) from None
        if not (self.data_dir / "logs" / "meta.properties").exists():
            self._format(props_file)
        env = {**os.environ, "KAFKA_HEAP_OPTS": ""}
        self._proc = subprocess.Popen(
            self._java("kafka.Kafka", str(props_file)),
            stdout=subprocess.DEVNULL,
            stderr=open(self.data_dir / "broker.stderr", "wb"),  # noqa: SIM115 - the child owns it
            env=env,
            start_new_session=True,  # a Ctrl-C in the terminal reaches lagwatch, which stops the broker itself
        )
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise DevBrokerError(f"kafka broker exited with code {self._proc.returncode}: {self._last_log_line()}")
            if self._answers_metadata():
                return
            time.sleep(0.3)
        self.stop()
        raise DevBrokerError(f"kafka broker did not accept requests within {timeout:.0f}s: {self._last_log_line()}")

    def _answers_metadata(self) -> bool:
        """True once the broker answers a real Metadata request (an open port alone is not enough)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                pass
        except OSError:
            return False
        from kafka import KafkaAdminClient  # the edge of the dev broker only

        try:
            admin = KafkaAdminClient(**self.client_options, bootstrap_timeout_ms=3000, request_timeout_ms=3000)
        except Exception:
            return False
        try:
            admin.describe_cluster()
            return True
        except Exception:
            return False
        finally:
            admin.close()

    def _last_log_line(self) -> str:
        for path in (self.data_dir / "broker.stderr", self.log_file):
            if path.exists():
                lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
                errors = [ln for ln in lines if "ERROR" in ln or "Exception" in ln]
                if errors or lines:
                    return (errors or lines)[-1][:300]
        return "no log output"

    def stop(self, timeout: float = 20.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._own_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        """At once, without waiting (an exit that cannot wait for `stop`): the process and its own data."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
        if self._own_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def pause(self) -> None:
        """Stops the process but keeps the data, so that start() brings the same broker back."""
        own, self._own_data_dir = self._own_data_dir, False
        try:
            self.stop()
        finally:
            self._own_data_dir = own

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
