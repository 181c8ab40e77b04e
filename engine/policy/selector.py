"""One policy role field, parsed, and the matching predicate of docs/policy.md §1.2.

A role list such as ``["#sales", "@I7"]`` becomes a :class:`Selector`: ``#`` entries are attribute
names (``#`` alone is the empty attribute ``""``), ``@`` entries are entity ids, and the attribute
``all`` (from ``#all``) selects every entity. Entries with neither prefix are ignored here; the API
rejects them before they reach the engine (``engine.roles`` does the validation).

The predicate, exactly as OpenZiti's ``evaluatePolicyAgainstEntity``: an entity with id ``E`` and
attributes ``A`` is selected iff

1. ``E`` is one of the ``@`` ids, or
2. ``#all`` is present, or
3. the semantic is AllOf (case-insensitive), there is at least one ``#`` attribute and all are in ``A``, or
4. the semantic is AnyOf (case-insensitive), there is at least one ``#`` attribute and any is in ``A``.

``@`` ids are therefore always OR'd in, and a list without ``#`` attributes never matches by attribute.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["ALL_OF", "ANY_OF", "EMPTY", "Selector", "normalize_semantic", "parse_roles"]

ALL_OF: Final = "allof"
ANY_OF: Final = "anyof"
Semantic = Literal["allof", "anyof", "none"]
"""A normalized semantic; ``none`` (an invalid semantic) matches by ``@id`` and ``#all`` only."""


def normalize_semantic(semantic: str) -> Semantic:
    """``AllOf``/``AnyOf`` compared case-insensitively; anything else matches no attribute."""
    folded = semantic.lower()
    if folded == ALL_OF:
        return "allof"
    if folded == ANY_OF:
        return "anyof"
    return "none"


@dataclass(frozen=True, slots=True)
class Selector:
    """A parsed role list: ``#all``, the ``#`` attributes and the ``@`` ids."""

    all: bool
    attributes: frozenset[str]
    ids: frozenset[str]

    @property
    def is_empty(self) -> bool:
        """Whether the selector can select nothing under any semantic."""
        return not self.all and not self.attributes and not self.ids

    def matches(self, semantic: Semantic, entity_id: str, attributes: frozenset[str]) -> bool:
        """The §1.2 predicate for one entity."""
        if self.all or entity_id in self.ids:
            return True
        if not self.attributes:
            return False
        if semantic == "allof":
            return self.attributes <= attributes
        if semantic == "anyof":
            return not self.attributes.isdisjoint(attributes)
        return False

    def matched_attributes(self, semantic: Semantic, attributes: frozenset[str]) -> frozenset[str]:
        """The role attributes through which an entity with ``attributes`` is selected (may be empty)."""
        if not self.attributes:
            return frozenset()
        if semantic == "allof":
            return self.attributes if self.attributes <= attributes else frozenset()
        if semantic == "anyof":
            return self.attributes & attributes
        return frozenset()


EMPTY: Final = Selector(False, frozenset(), frozenset())


def parse_roles(roles: Iterable[str]) -> Selector:
    """Split a role list into (``#all``, attributes, ids)."""
    attributes: set[str] = set()
    ids: set[str] = set()
    for role in roles:
        if role.startswith("#"):
            attributes.add(role[1:])
        elif role.startswith("@"):
            ids.add(role[1:])
    if not attributes and not ids:
        return EMPTY
    everything = "all" in attributes
    if everything:
        attributes.discard("all")
    return Selector(everything, frozenset(attributes), frozenset(ids))
