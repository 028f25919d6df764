"""A Kafka cluster of more than one broker on loopback: the dev broker (broker and controller) and brokers that
join its quorum. Failovers only exist with more than one: coordinators and partition leaders moving, partitions
left without a leader when their only replica's broker dies."""

from __future__ import annotations

from pathlib import Path

from lagwatch.devbroker import LocalBroker


class JoiningBroker(LocalBroker):
    """A broker-only node (`process.roles=broker`) of `first`'s cluster: formatted with its cluster id, and
    voting nowhere (the quorum is `first`'s controller alone)."""

    def __init__(self, first: LocalBroker, node_id: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.first, self.node_id = first, node_id

    def server_properties(self) -> dict[str, str]:
        props = super().server_properties()
        props["process.roles"] = "broker"
        props["node.id"] = str(self.node_id)
        props["listeners"] = f"PLAINTEXT://127.0.0.1:{self.port}"
        props["controller.quorum.bootstrap.servers"] = f"127.0.0.1:{self.first.controller_port}"
        props.pop("controller.quorum.voters", None)
        return props

    def _format(self, props_file: Path) -> None:
        meta = (self.first.data_dir / "logs" / "meta.properties").read_text()
        cluster_id = next(line.split("=", 1)[1] for line in meta.splitlines() if line.startswith("cluster.id="))
        self._run_storage_tool("format", "-t", cluster_id, "-c", str(props_file), "--ignore-formatted")

    def kill_now(self) -> None:
        """SIGKILL, as a crashed machine: no controlled shutdown, its partitions and coordinators left behind."""
        assert self._proc is not None
        self._proc.kill()
        self._proc.wait()
