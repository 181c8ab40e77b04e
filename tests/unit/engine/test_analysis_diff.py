"""The access diff's two ways of reading ``after`` agree, and its bound (docs/analysis.md §3).

:func:`~engine.analysis.diff.compare_changes` compares a batch of only policy changes through a
:class:`~engine.analysis.diff.PolicyOverlay` (no fork of the graph) and any other batch on a fork.
On random networks and random batches (the strategies of ``test_analysis_oracle``), the overlay's
diff, every list and every per-policy and per-identity figure, equals the fork's, and the fork's
pairs equal the brute-force oracle's; the graph is left as it was. A diff of more pairs than the
caller's limit is refused before anything is listed; a listing cut at any length is the start of
each whole list, with its exact length.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.analysis.diff import (
    DiffTooLargeError,
    PolicyOverlay,
    access_diff,
    compare,
    compare_changes,
    touched_by,
)
from engine.managers.access import apply_changes
from engine.policy import EDGE_ROUTER, EDGE_ROUTER_POLICY, IDENTITY, SERVICE, SERVICE_POLICY, PolicyGraph
from engine.policy.bitset import select, slots
from tests.unit.engine.test_analysis_guardrails_oracle import apply, changes, last_per_key
from tests.unit.engine.test_analysis_oracle import SETTINGS, batches, grants, grants_of, networks
from tests.unit.engine.test_policy_oracle import Oracle, rebuild


@SETTINGS
@given(oracle=networks(), data=st.data())
def test_the_overlay_diff_equals_the_fork_diff(oracle: Oracle, data: st.DataObject) -> None:
    graph = rebuild(oracle)
    batch = last_per_key([item for item in data.draw(batches(oracle)) if item[0] == "policy"])
    store_changes = changes(batch)
    assert PolicyOverlay.suits(store_changes)
    untouched = grants(oracle)

    overlay = compare_changes(graph, store_changes).diff()
    fork = graph.copy()
    apply_changes(fork, store_changes)
    forked = access_diff(graph, fork, touched_by(store_changes))

    assert overlay == forked
    after = oracle.copy()
    apply(after, batch)
    expected = grants(after)
    assert set(forked.services_added) == expected[0] - untouched[0]
    assert set(forked.services_removed) == untouched[0] - expected[0]
    assert set(forked.routers_added) == expected[1] - untouched[1]
    assert grants_of(graph, oracle) == untouched


def _network(identities: int, services: int) -> PolicyGraph:
    graph = PolicyGraph()
    for n in range(identities):
        graph.upsert_entity(IDENTITY, f"i{n}", ["staff"])
    for n in range(services):
        graph.upsert_entity(SERVICE, f"s{n}", ["app"])
    return graph


def test_a_diff_past_the_limit_is_refused_before_it_is_listed() -> None:
    before = _network(30, 10)
    after = before.copy()
    after.upsert_policy(
        SERVICE_POLICY, "p", semantic="AnyOf", type="Dial", identity_roles=["#all"], service_roles=["#app"]
    )
    touched = {SERVICE_POLICY: {"p"}}

    assert len(access_diff(before, after, touched, limit=300).services_added) == 300
    with pytest.raises(DiffTooLargeError) as refused:
        access_diff(before, after, touched, limit=299)
    assert refused.value.field == "items"
    assert refused.value.count == 300
    assert "300 access pairs" in (refused.value.reason or "")


def test_a_cut_listing_is_the_start_of_each_whole_list() -> None:
    """Each list is cut on its own: an identity with no entry in one list does not use up that
    list's room (here the only router pair belongs to the last identity)."""
    before = _network(4, 3)
    before.upsert_entity(EDGE_ROUTER, "r0", ["edge"])
    before.upsert_entity(IDENTITY, "i3", ["staff", "far"])
    after = before.copy()
    after.upsert_policy(
        SERVICE_POLICY, "p", semantic="AnyOf", type="Dial", identity_roles=["#staff"], service_roles=["#app"]
    )
    after.upsert_policy(
        SERVICE_POLICY, "q", semantic="AnyOf", type="Bind", identity_roles=["@i1"], service_roles=["@s1"]
    )
    after.upsert_policy(
        EDGE_ROUTER_POLICY, "e", semantic="AnyOf", identity_roles=["#far"], edge_router_roles=["#all"]
    )
    touched = {SERVICE_POLICY: {"p", "q"}, EDGE_ROUTER_POLICY: {"e"}}
    whole = access_diff(before, after, touched)
    assert whole.routers_added == [("i3", "r0")]

    for listed in range(1, 14):
        cut = compare(before, after, touched).diff(listed=listed)
        for name in ("services_added", "services_removed", "routers_added", "routers_removed", "identities"):
            assert getattr(cut, name) == getattr(whole, name)[:listed], (listed, name)
            assert cut.total(name) == len(getattr(whole, name)), (listed, name)
        assert cut.policies == whole.policies


@given(
    st.integers(min_value=1, max_value=5000),
    st.floats(min_value=0, max_value=1),
    st.randoms(use_true_random=False),
)
@settings(deadline=None)  # no time limit: a busy machine took 389 ms for a case that takes 22
def test_bitsets_list_their_slots_whatever_their_density(width: int, density: float, rng: Any) -> None:
    """The analyses list ids through these two: every width and density gives the plain answer."""
    members = [n for n in range(width) if rng.random() < density]
    bits = sum(1 << m for m in members)
    values = [f"v{n}" for n in range(width)]
    assert slots(bits) == members
    assert select(bits, values) == [values[m] for m in members]
