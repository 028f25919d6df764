"""A poll's group snapshots built from its coordinators' answers, and the loops of a poll over every
group-partition (the partitions to ask about, the short tails of idle logs).

Apart from the requests (lagwatch.collect.poll), so that setup.py can compile it: at 1M group-partitions (100,000
groups on one broker) these loops took about 0.45 s of each poll on the polling thread (bench/README.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from lagwatch.collect.group_describes import DescribedGroup
from lagwatch.collect.list_groups_answer import ListedGroup
from lagwatch.collect.wire import GroupAnswers, error_text
from lagwatch.model import CommittedOffset, GroupKind, GroupSnapshot, TopicPartition


def classify(protocol_type: str, group_type: str | None) -> GroupKind:
    if group_type == "consumer":
        return GroupKind.CONSUMER
    if group_type == "streams":
        return GroupKind.STREAMS
    if group_type == "share":
        return GroupKind.SHARE
    if protocol_type == "consumer":
        return GroupKind.CLASSIC
    if protocol_type == "":
        return GroupKind.SIMPLE
    return GroupKind.OTHER


def group_snapshots(
    listed: Iterable[ListedGroup], answers: GroupAnswers, coordinators: Mapping[str, int]
) -> tuple[GroupSnapshot, ...]:
    """Each listed group as its coordinator described it, with its committed offsets, in the order given."""
    described_of, errors, committed_of, shares = (
        answers.described,
        answers.errors,
        answers.committed,
        answers.share_offsets,
    )
    out: list[GroupSnapshot] = []
    for listed_group in listed:
        group_id = listed_group.group_id
        described: DescribedGroup | None = described_of.get(group_id)
        error = errors.get(group_id)
        protocol_type = described.protocol_type if described is not None else listed_group.protocol_type
        state = (described.state if described is not None else None) or listed_group.state or "Unknown"
        kind = classify(protocol_type, listed_group.group_type)
        if listed_group.group_type is None and described is None and error is not None:
            kind = GroupKind.UNKNOWN
        committed: Mapping[TopicPartition, CommittedOffset] | None = committed_of.get(group_id)
        out.append(
            GroupSnapshot(
                group_id,
                state,
                protocol_type,
                kind,
                coordinators.get(group_id),
                described.members if described is not None else (),
                committed if committed is not None else {},
                error_text(error) if error is not None else None,
                shares.get(group_id) or {},
            )
        )
    return tuple(out)


def partitions_of(groups: Iterable[GroupSnapshot]) -> set[TopicPartition]:
    """Every partition a group is committed on, assigned or has a share-partition of."""
    seen: set[TopicPartition] = set()
    for g in groups:
        seen.update(g.committed)
        if g.members:
            seen.update(g.member_of())
        if g.share_offsets:
            seen.update(g.share_offsets)
    return seen


def short_tails(
    groups: Iterable[GroupSnapshot], idle: Mapping[TopicPartition, int], most: int
) -> dict[TopicPartition, int]:
    """Per partition of an idle log (its end in `idle`): the lowest offset a group is committed at fewer than
    `most` records below the end (0 < end - offset <= most)."""
    short: dict[TopicPartition, int] = {}
    for g in groups:
        for tp, committed in g.committed.items():
            end = idle.get(tp)
            if end is None:
                continue
            offset = committed.offset
            if 0 < end - offset <= most and offset < short.get(tp, end):
                short[tp] = offset
    return short
