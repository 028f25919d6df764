"""EDGE: Spark Structured Streaming queries as consumers. Spark's Kafka source never commits offsets to Kafka: they
live in the query's checkpoint. lagwatch reads the offsets of the latest committed batch and presents the query as
a consumer group of kind `checkpoint`, so lag, lag in seconds, `stopped`, metrics and alerts work for it as for any
group.

A checkpoint directory holds `offsets/<batch>` (written when a batch is planned: its end offsets) and
`commits/<batch>` (written when it is done). Both start with a version line (`v1`), then a metadata JSON line, then
one line per source; for the Kafka source `{"topic":{"0":145,"1":148}}`. The newest batch in `commits/` is the one
whose end offsets were processed: those are the query's committed offsets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lagwatch.config import CheckpointConsumerConfig
from lagwatch.errors import SPARK_EXTRA
from lagwatch.model import CommittedOffset, GroupKind, GroupSnapshot, TopicPartition

STATE = "Checkpoint"


class CheckpointError(Exception):
    pass


class _Files:
    """A local directory, or any URI pyarrow's filesystems know (s3://, gs://, hdfs://, abfs://)."""

    def __init__(self, location: str) -> None:
        self.location = location.rstrip("/")
        self._fs: Any = None
        if "://" in location and not location.startswith("file://"):
            try:
                from pyarrow import fs
            except ImportError:
                raise CheckpointError(f"{location}: object storage needs pyarrow, of {SPARK_EXTRA}") from None
            self._fs, self._root = fs.FileSystem.from_uri(self.location)
        else:
            self._root = location.removeprefix("file://")

    def names(self, sub: str) -> list[str]:
        if self._fs is None:
            directory = Path(self._root) / sub
            if not directory.is_dir():
                raise CheckpointError(f"{self.location}: no {sub}/ directory (not a Structured Streaming checkpoint?)")
            return [p.name for p in directory.iterdir()]
        from pyarrow import fs

        infos = self._fs.get_file_info(fs.FileSelector(f"{self._root}/{sub}", allow_not_found=True))
        return [info.base_name for info in infos]

    def read(self, sub: str, name: str) -> str:
        if self._fs is None:
            return (Path(self._root) / sub / name).read_text()
        with self._fs.open_input_stream(f"{self._root}/{sub}/{name}") as stream:
            return bytes(stream.read()).decode()


def _latest_batch(files: _Files) -> int | None:
    # Temporary files (".3.<uuid>.tmp") and CRC files are skipped: only whole batch numbers count.
    batches = [int(n) for n in files.names("commits") if n.isdigit()]
    return max(batches) if batches else None


def committed_offsets(location: str) -> dict[TopicPartition, int] | None:
    """The end offsets of the latest committed batch; None when no batch has been committed yet."""
    files = _Files(location)
    try:
        batch = _latest_batch(files)
        if batch is None:
            return None
        lines = files.read("offsets", str(batch)).splitlines()
    except OSError as e:
        raise CheckpointError(f"{location}: {e.strerror or e}") from None
    if not lines or not lines[0].startswith("v"):
        raise CheckpointError(f"{location}: offsets/{batch} is not an offset log entry")
    offsets: dict[TopicPartition, int] = {}
    for line in lines[2:]:  # after the version and the batch metadata: one line per source
        try:
            source = json.loads(line)
        except ValueError:
            continue  # a source that is not Kafka (or "-": no offset yet)
        if not isinstance(source, dict):
            continue
        for topic, partitions in source.items():
            if not isinstance(partitions, dict):
                continue
            for partition, offset in partitions.items():
                if str(partition).lstrip("-").isdigit() and isinstance(offset, int) and offset >= 0:
                    offsets[TopicPartition(topic, int(partition))] = offset
    return offsets


def checkpoint_group(name: str, config: CheckpointConsumerConfig) -> GroupSnapshot:
    """One query as a group; an unreadable checkpoint is a group with `error` (its alerts freeze, one warning)."""
    try:
        offsets = committed_offsets(config.location)
    except CheckpointError as e:
        return GroupSnapshot(name, "Unknown", "", GroupKind.CHECKPOINT, None, error=str(e))
    committed = {tp: CommittedOffset(o) for tp, o in (offsets or {}).items()}
    return GroupSnapshot(name, STATE, "", GroupKind.CHECKPOINT, None, committed=committed)
