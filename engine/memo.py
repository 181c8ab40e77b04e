"""A memo of a pure function of immutable values, kept by the value object itself.

Entities (and the typed values read from them) are immutable: a change is a new object. So what
a pure function makes of one can be kept by the object's identity and reused until that object
is gone from the memo: :class:`PerObject` holds the object beside the answer (its ``id`` cannot be
reused meanwhile) and starts afresh once it holds ``kept`` of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class PerObject(Generic[K, V]):
    """``make(value)``, made once per value object (see the module docstring); thread-safe in
    that concurrent callers at worst make the same answer twice.

    ``make`` is given here, or per call to :meth:`get` when making the answer takes more than the
    value (what it takes must not change the answer while the value lives)."""

    __slots__ = ("_kept", "_make", "_most")

    def __init__(self, make: Callable[[K], V] | None, kept: int) -> None:
        self._make = make
        self._most = kept
        self._kept: dict[int, tuple[K, V]] = {}

    def __call__(self, value: K) -> V:
        if self._make is None:
            raise TypeError("this memo's answers are made by get(value, make)")
        return self.get(value, self._make)

    def get(self, value: K, make: Callable[[K], V]) -> V:
        """The answer kept for ``value``, else ``make(value)``, kept."""
        kept = self._kept.get(id(value))
        if kept is None or kept[0] is not value:
            kept = (value, make(value))
            if len(self._kept) >= self._most:
                self._kept.clear()
            self._kept[id(value)] = kept
        return kept[1]
