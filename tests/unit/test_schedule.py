"""tests/schedule.py: the long tests are spread over the head of each worksteal share."""

from __future__ import annotations

from tests.schedule import arrange

LONG = {"a::1": 80.0, "a::2": 5.0, "b::1": 60.0, "c::1": 50.0, "d::1": 30.0, "e::1": 20.0}


def _shares(items: list[str], workers: int) -> list[list[str]]:
    """What pytest-xdist's worksteal first hands each process: equal contiguous parts."""
    shares, left, start = [], len(items), 0
    for share in range(workers):
        size = left // (workers - share)
        shares.append(items[start : start + size])
        left -= size
        start += size
    return shares


def test_each_share_starts_with_long_tests_of_about_equal_sum() -> None:
    short = [f"s{n}::t" for n in range(30)]
    items = short[:10] + list(LONG) + short[10:]
    arranged = arrange(items, 3, LONG.get, lambda item: item.split("::")[0])

    assert sorted(arranged) == sorted(items)
    shares = _shares(arranged, 3)
    heads = [[i for i in share if i in LONG] for share in shares]
    assert heads == [["a::1", "a::2"], ["b::1", "e::1"], ["c::1", "d::1"]]  # 85, 80, 80
    for share, head in zip(shares, heads, strict=True):
        assert share[: len(head)] == head
    assert [i for i in arranged if i not in LONG] == short  # the short ones keep their order


def test_one_process_runs_the_long_tests_first() -> None:
    items = ["x::1", "a::1", "y::1", "b::1"]
    assert arrange(items, 1, LONG.get, lambda item: item.split("::")[0]) == ["a::1", "b::1", "x::1", "y::1"]


def test_more_long_tests_than_a_share_holds_stay_whole() -> None:
    items = list(LONG)
    arranged = arrange(items, 4, LONG.get, lambda item: item.split("::")[0])
    assert sorted(arranged) == sorted(items)
