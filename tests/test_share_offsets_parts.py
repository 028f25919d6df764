"""A coordinator's DescribeShareGroupOffsets is sent in a few parts: the broker's time grows faster than the groups
one request asks for (bench/README.md), and the number of requests must stay fixed whatever the number of groups."""

from __future__ import annotations

import pytest

from lagwatch.collect.wire import SHARE_OFFSETS_PART_MIN, SHARE_OFFSETS_PARTS, _parts


@pytest.mark.parametrize("count", [1, 2, 99, 100, 199, 200, 399, 400, 1000, 1001, 25_000])
def test_parts_cover_every_group_once_in_a_fixed_number_of_requests(count: int) -> None:
    groups = [f"g{i}" for i in range(count)]
    parts = _parts(groups, SHARE_OFFSETS_PARTS, SHARE_OFFSETS_PART_MIN)
    assert [g for part in parts for g in part] == groups
    assert 1 <= len(parts) <= SHARE_OFFSETS_PARTS
    assert len(parts) == 1 or min(len(p) for p in parts) >= SHARE_OFFSETS_PART_MIN * 0.9
    assert max(len(p) for p in parts) - min(len(p) for p in parts) <= count // len(parts) // 10 + 1


def test_few_groups_stay_in_one_request() -> None:
    assert _parts(["a", "b", "c"], 4, 100) == [["a", "b", "c"]]
    assert len(_parts([str(i) for i in range(2 * 100)], 4, 100)) == 2
