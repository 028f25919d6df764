"""Decoding one OffsetFetch v8 answer (every group of a coordinator) into lagwatch's records: kafka-python's
decoder followed by the records built from its objects (as lagwatch did), against lagwatch's own decoder
(`lagwatch/collect/offset_fetch.py`), on a real broker's answer, side by side in one run.

Starts a local Kafka (or uses --bootstrap, on which bench/daemon_step_bench.py or this bench created the groups),
creates G groups x P partitions, fetches the one answer, checks that both ways give the same committed offsets
and errors for every group, then times each way --repeat times with the garbage collector off (its pauses
depend on the rest of the heap, not on the decoder) and prints the medians.

    python bench/offset_fetch_bench.py --groups 10000 --partitions 10
"""

from __future__ import annotations

import argparse
import gc
import io
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka.protocol.consumer import OffsetFetchResponse

from lagwatch.collect.offset_fetch import _Decoder
from lagwatch.collect.wire import GroupAnswers, Wire, _offset_fetch_handler
from lagwatch.config import ClusterConfig


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fetch_answer(bootstrap: str) -> tuple[bytes, list[str]]:
    """The raw body of one OffsetFetch v8 answer for every group on the broker (its header stripped)."""
    from kafka.protocol.consumer import OffsetFetchRequest

    from lagwatch.collect import ClusterPoller

    poller = ClusterPoller("bench", ClusterConfig(bootstrap_servers=[bootstrap], exact_clocks=False))
    try:
        snapshot = poller.poll()
        group_ids = sorted(g.group_id for g in snapshot.groups)
        coordinator = poller._coordinators[group_ids[0]]
        wire = Wire(poller._admin, 60000)
        groups = [OffsetFetchRequest.OffsetFetchRequestGroup(group_id=g, topics=None) for g in group_ids]
        request = OffsetFetchRequest(groups=groups, min_version=8, max_version=8)  # kafka-python's own decoding

        async def one() -> Any:
            return (await wire._send_all([(coordinator, request)]))[0]

        response = wire.run(one)
        response._header = None
        return bytes(response.encode(version=8)), group_ids
    finally:
        poller.close()


def kafka_python_way(data: bytes, group_ids: list[str]) -> GroupAnswers:
    answers = GroupAnswers()
    _offset_fetch_handler(group_ids, answers)(OffsetFetchResponse.decode(memoryview(data), version=8))
    return answers


def lagwatch_way(data: bytes, group_ids: list[str]) -> GroupAnswers:
    answers = GroupAnswers()
    _offset_fetch_handler(group_ids, answers)(_Decoder.decode(io.BytesIO(data)))
    return answers


def measure(bootstrap: str, repeat: int) -> None:
    data, group_ids = fetch_answer(bootstrap)
    theirs, ours = kafka_python_way(data, group_ids), lagwatch_way(data, group_ids)
    partitions = sum(len(c) for c in ours.committed.values())
    same = theirs.committed == ours.committed and theirs.errors.keys() == ours.errors.keys()
    print(f"\none OffsetFetch v8 answer: {len(data):,} bytes, {len(group_ids):,} groups, {partitions:,} partitions")
    print(f"  both decoders give the same committed offsets and errors: {same}")
    if not same:
        raise SystemExit("the decoders disagree")
    times: dict[str, list[float]] = {"kafka-python + records": [], "lagwatch's decoder": []}
    gc.disable()
    try:
        for i in range(repeat):
            for name, way in (("kafka-python + records", kafka_python_way), ("lagwatch's decoder", lagwatch_way)):
                t0 = time.perf_counter()
                way(data, group_ids)
                times[name].append(time.perf_counter() - t0)
            say(f"  round {i + 1}/{repeat}")
    finally:
        gc.enable()
    for name, values in times.items():
        print(f"  {name:<24} median {statistics.median(values) * 1000:7.1f} ms  ({repeat} runs, GC off)")


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
