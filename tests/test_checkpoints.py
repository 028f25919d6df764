"""Reading a Structured Streaming checkpoint: the latest committed batch's end offsets, whatever else is there."""

from __future__ import annotations

import json
from pathlib import Path

from lagwatch.collect.checkpoints import checkpoint_group, committed_offsets
from lagwatch.config import CheckpointConsumerConfig
from lagwatch.model import GroupKind, TopicPartition


def write_batch(root: Path, batch: int, sources: list[str], committed: bool = True) -> None:
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "commits").mkdir(parents=True, exist_ok=True)
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1_700_000_000_000, "conf": {}})
    (root / "offsets" / str(batch)).write_text("\n".join(["v1", meta, *sources]))
    if committed:
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_latest_committed_batch_wins_over_planned_and_temporary_files(tmp_path: Path) -> None:
    write_batch(tmp_path, 0, ['{"orders":{"0":10,"1":12}}'])
    write_batch(tmp_path, 1, ['{"orders":{"0":20,"1":25}}'])
    write_batch(tmp_path, 2, ['{"orders":{"0":99,"1":99}}'], committed=False)  # planned, not done
    (tmp_path / "commits" / ".2.8f3a.tmp").write_text("v1")
    (tmp_path / "commits" / "1.crc").write_text("x")
    assert committed_offsets(str(tmp_path)) == {TopicPartition("orders", 0): 20, TopicPartition("orders", 1): 25}


def test_several_sources_and_non_kafka_lines(tmp_path: Path) -> None:
    write_batch(tmp_path, 3, ['{"a":{"0":5}}', "-", '{"logOffset":7}', '{"b":{"2":9}}'])
    assert committed_offsets(f"file://{tmp_path}") == {TopicPartition("a", 0): 5, TopicPartition("b", 2): 9}


def test_no_batch_yet_and_missing_or_damaged_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "commits").mkdir()
    assert committed_offsets(str(tmp_path)) is None
    group = checkpoint_group("etl", CheckpointConsumerConfig(location=str(tmp_path)))
    assert group.kind is GroupKind.CHECKPOINT and group.error is None and not group.committed
    missing = checkpoint_group("etl", CheckpointConsumerConfig(location=str(tmp_path / "nope")))
    assert missing.error is not None and "not a Structured Streaming checkpoint" in missing.error
    write_batch(tmp_path / "bad", 0, [])
    (tmp_path / "bad" / "offsets" / "0").write_text("garbage")
    damaged = checkpoint_group("etl", CheckpointConsumerConfig(location=str(tmp_path / "bad")))
    assert damaged.error is not None and "not an offset log entry" in damaged.error
