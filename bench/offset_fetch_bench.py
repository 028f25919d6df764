"""Decoding the poll's two big answers into lagwatch's records, kafka-python's decoder followed by the records
built from its objects (as lagwatch did) against lagwatch's own decoders, on a real broker's answers, side by
side in one run: one OffsetFetch v8 answer (every group of a coordinator, `lagwatch/collect/offset_fetch.py`) and
one DescribeGroups v5-6 answer (`lagwatch/collect/describe_groups.py`).

Starts a local Kafka (or uses --bootstrap, on which bench/daemon_step_bench.py or this bench created the groups),
creates G groups x P partitions, fetches the answers, checks that both ways give the same records and errors for
every group, then times each way --repeat times with the garbage collector off (its pauses depend on the rest of
the heap, not on the decoder) and prints the medians.

    python bench/offset_fetch_bench.py --groups 10000 --partitions 10
"""

from __future__ import annotations

import argparse
import gc
import io
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer import OffsetFetchResponse

from lagwatch.collect.describe_groups import DECODERS
from lagwatch.collect.offset_fetch import _Decoder
from lagwatch.collect.wire import GroupAnswers, Wire, _classic_group, _describe_handler, _offset_fetch_handler
from lagwatch.config import ClusterConfig


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fetch_answers(bootstrap: str) -> tuple[bytes, bytes, int, list[str]]:
    """The raw bodies (headers stripped) of one OffsetFetch v8 answer and one DescribeGroups answer (the highest
    version both sides decode) for every group on the broker, asked with kafka-python's own request classes."""
    from kafka.protocol.consumer import OffsetFetchRequest

    from lagwatch.collect import ClusterPoller

    poller = ClusterPoller("bench", ClusterConfig(bootstrap_servers=[bootstrap], exact_clocks=False))
    try:
        snapshot = poller.poll()
        group_ids = sorted(g.group_id for g in snapshot.groups)
        coordinator = poller._coordinators[group_ids[0]]
        wire = Wire(poller._admin, 60000)
        groups = [OffsetFetchRequest.OffsetFetchRequestGroup(group_id=g, topics=None) for g in group_ids]
        fetch = OffsetFetchRequest(groups=groups, min_version=8, max_version=8)
        describe = DescribeGroupsRequest(groups=group_ids, min_version=5, max_version=max(DECODERS))

        async def both() -> list[Any]:
            return await wire._send_all([(coordinator, fetch), (coordinator, describe)])

        fetched, described = wire.run(both)
        fetched._header = described._header = None
        version = described.API_VERSION
        return bytes(fetched.encode(version=8)), bytes(described.encode(version=version)), version, group_ids
    finally:
        poller.close()


def time_both(repeat: int, ways: dict[str, Any]) -> None:
    times: dict[str, list[float]] = {name: [] for name in ways}
    gc.disable()
    try:
        for i in range(repeat):
            for name, way in ways.items():
                t0 = time.perf_counter()
                way()
                times[name].append(time.perf_counter() - t0)
            say(f"  round {i + 1}/{repeat}")
    finally:
        gc.enable()
    for name, values in times.items():
        print(f"  {name:<24} median {statistics.median(values) * 1000:7.1f} ms  ({repeat} runs, GC off)")


def offset_fetch(data: bytes, group_ids: list[str], ours: bool) -> GroupAnswers:
    answers = GroupAnswers()
    response = _Decoder.decode(io.BytesIO(data)) if ours else OffsetFetchResponse.decode(memoryview(data), version=8)
    _offset_fetch_handler(group_ids, answers)(response)
    return answers


def describe_groups(data: bytes, version: int, group_ids: list[str], ours: bool) -> GroupAnswers:
    answers = GroupAnswers()
    response = (
        DECODERS[version].decode(io.BytesIO(data))
        if ours
        else DescribeGroupsResponse.decode(memoryview(data), version=version)
    )
    _describe_handler(group_ids, answers, _classic_group)(response)
    return answers


def measure(bootstrap: str, repeat: int) -> None:
    fetched, described, version, group_ids = fetch_answers(bootstrap)
    answers = (
        (f"OffsetFetch v8 answer: {len(fetched):,} bytes", lambda ours: offset_fetch(fetched, group_ids, ours)),
        (
            f"DescribeGroups v{version} answer: {len(described):,} bytes",
            lambda ours: describe_groups(described, version, group_ids, ours),
        ),
    )
    for title, decode in answers:
        theirs, ours = decode(False), decode(True)
        partitions = sum(len(c) for c in ours.committed.values())
        same = (theirs.committed, theirs.described, theirs.errors.keys()) == (
            ours.committed,
            ours.described,
            ours.errors.keys(),
        )
        print(f"\none {title}, {len(group_ids):,} groups, {partitions:,} committed partitions")
        print(f"  both decoders give the same records and errors: {same}")
        if not same:
            raise SystemExit("the decoders disagree")
        time_both(
            repeat,
            {"kafka-python + records": partial(decode, False), "lagwatch's decoder": partial(decode, True)},
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=10000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--bootstrap", help="a running Kafka on which the groups exist already")
    args = parser.parse_args()
    if args.bootstrap:
        measure(args.bootstrap, args.repeat)
        return
    from poll_bench import create_groups

    from lagwatch.devbroker import LocalBroker

    with LocalBroker(heap="1g") as broker:
        say(f"{args.groups} groups x {args.partitions} partitions on Kafka at {broker.bootstrap}: creating ...")
        create_groups(broker.bootstrap, "o", args.groups, args.partitions)
        measure(broker.bootstrap, args.repeat)


if __name__ == "__main__":
    main()
