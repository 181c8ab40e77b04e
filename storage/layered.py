"""An insertion-ordered map whose successive versions share most of their entries.

The published state (:mod:`storage.state`) is never changed in place: each batch makes a new
version of every table it touches. Copying a table's dicts for that cost O(rows) per batch (at
tier L, ~1 ms a batch once 20k sessions were open: a tenth of a session's creation). A
:class:`Layered` map is a shared *base* dict plus the changes made since (values of base keys
replaced or deleted, keys added after them); :meth:`Layered.derive` copies only those changes,
and folds them into a new base once they are many (about 4·√n), so a batch costs O(√n) amortised
and a read one or two more dict lookups than a dict's.

It iterates like a dict: base keys in their order (a replaced value in its key's place), then the
added keys in the order they came; a key deleted and added again goes last. Only the version a
builder got from :meth:`derive` is changed, before it is published; a published one is read only.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from itertools import chain
from math import isqrt
from typing import Any, Generic, TypeVar, overload

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")

_MISSING: object = object()
_GONE: object = object()
#: Changes kept beside the base before :meth:`Layered.derive` folds them in: at least this many...
_MIN_CHANGES = 64
#: ... else this many times the square root of the base's size.
_CHANGES_PER_ROOT = 4


class Layered(Generic[K, V]):
    """A dict-like map; see the module docstring."""

    __slots__ = ("_base", "_gone", "_over", "_tail")

    def __init__(self, base: dict[K, V] | None = None) -> None:
        self._base: dict[K, V] = base if base is not None else {}
        #: base key -> its new value, or _GONE once deleted
        self._over: dict[K, object] = {}
        #: keys added after the base's (new, or deleted from the base and added again), in order
        self._tail: dict[K, V] = {}
        #: how many base keys are _GONE
        self._gone = 0

    # -- reads ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._base) - self._gone + len(self._tail)

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: D) -> V | D: ...
    def get(self, key: K, default: object = None) -> object:
        if self._tail:
            found = self._tail.get(key, _MISSING)
            if found is not _MISSING:
                return found
        if self._over:
            found = self._over.get(key, _MISSING)
            if found is not _MISSING:
                return default if found is _GONE else found
        return self._base.get(key, default)

    def __getitem__(self, key: K) -> V:
        found = self.get(key, _MISSING)
        if found is _MISSING:
            raise KeyError(key)
        return found  # type: ignore[return-value]

    def __contains__(self, key: object) -> bool:
        return self.get(key, _MISSING) is not _MISSING  # type: ignore[arg-type]

    def items(self) -> Iterator[tuple[K, V]]:
        over = self._over
        if over:
            for key, value in self._base.items():
                changed = over.get(key, _MISSING)
                if changed is _MISSING:
                    yield key, value
                elif changed is not _GONE:
                    yield key, changed  # type: ignore[misc]
        else:
            yield from self._base.items()
        yield from self._tail.items()

    def values(self) -> LayeredValues[V]:
        """The values, as a sized collection (like ``dict.values()``)."""
        return LayeredValues(self)

    def iter_values(self) -> Iterator[V]:
        if self._over:
            return (value for _, value in self.items())
        return chain(self._base.values(), self._tail.values())

    def __iter__(self) -> Iterator[K]:
        if self._over:
            return (key for key, _ in self.items())
        return chain(self._base, self._tail)

    # -- changes (only on a version from derive(), before it is published) ---------------------
    def __setitem__(self, key: K, value: V) -> None:
        tail = self._tail
        if key in tail or key not in self._base or self._over.get(key) is _GONE:
            tail[key] = value
        else:
            self._over[key] = value

    @overload
    def pop(self, key: K) -> V | None: ...
    @overload
    def pop(self, key: K, default: D) -> V | D: ...
    def pop(self, key: K, default: object = None) -> object:
        tail = self._tail
        if key in tail:
            return tail.pop(key)
        if key not in self._base:
            return default
        changed = self._over.get(key, _MISSING)
        if changed is _GONE:
            return default
        self._over[key] = _GONE
        self._gone += 1
        return self._base[key] if changed is _MISSING else changed

    def __delitem__(self, key: K) -> None:
        if self.pop(key, _MISSING) is _MISSING:
            raise KeyError(key)

    def derive(self) -> Layered[K, V]:
        """A new version to change, this one left as it is: the base shared and the changes
        since copied, or all folded into a new base once they are many."""
        other: Layered[K, V] = Layered.__new__(Layered)
        changes = len(self._over) + len(self._tail)
        if changes > max(_MIN_CHANGES, _CHANGES_PER_ROOT * isqrt(len(self._base))):
            other._base = dict(self.items())
            other._over = {}
            other._tail = {}
            other._gone = 0
        else:
            other._base = self._base
            other._over = self._over.copy()
            other._tail = self._tail.copy()
            other._gone = self._gone
        return other


class LayeredValues(Collection[V]):
    """A :class:`Layered` map's values: sized, iterated in the map's order."""

    __slots__ = ("_map",)

    def __init__(self, owner: Layered[Any, V]) -> None:
        self._map = owner

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[V]:
        return self._map.iter_values()

    def __contains__(self, value: object) -> bool:
        return any(v is value or v == value for v in self._map.iter_values())
