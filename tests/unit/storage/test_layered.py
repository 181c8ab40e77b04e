"""storage.layered.Layered against a dict: the same answers and the same order after any changes,
and a version, once derived from, never changes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.layered import Layered
from tests.conftest import examples

KEYS = st.integers(0, 40)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, st.integers()),
        st.tuples(st.just("pop"), KEYS, st.just(0)),
        st.tuples(st.just("derive"), st.just(0), st.just(0)),
    ),
    max_size=400,
)


def _same(layered: Layered[int, int], expected: dict[int, int]) -> None:
    assert list(layered.items()) == list(expected.items())
    assert list(layered) == list(expected)
    assert list(layered.values()) == list(expected.values())
    assert len(layered) == len(expected) == len(layered.values())
    for key in range(42):
        assert layered.get(key) == expected.get(key)
        assert (key in layered) == (key in expected)


@settings(max_examples=examples(300), deadline=None)
@given(start=st.dictionaries(KEYS, st.integers(), max_size=30), ops=OPS)
def test_a_layered_map_answers_as_a_dict_and_its_old_versions_stay(
    start: dict[int, int], ops: list[tuple[str, int, int]]
) -> None:
    current: Layered[int, int] = Layered(dict(start))
    expected = dict(start)
    frozen: list[tuple[Layered[int, int], dict[int, int]]] = []
    for op, key, value in ops:
        if op == "set":
            current[key] = value
            expected[key] = value
        elif op == "pop":
            assert current.pop(key, None) == expected.pop(key, None)
        else:
            frozen.append((current, dict(expected)))
            current = current.derive()
        _same(current, expected)
    for version, then in frozen:
        _same(version, then)


def test_many_changes_are_folded_into_a_new_base() -> None:
    first: Layered[int, int] = Layered({i: i for i in range(100)})
    version = first
    for i in range(100, 400):
        version = version.derive()
        version[i] = i
        del version[i - 100]
    assert list(version) == list(range(300, 400))
    assert len(version._over) + len(version._tail) <= 64 + 1  # folded on the way
    assert list(first) == list(range(100))
