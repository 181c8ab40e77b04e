"""The order ``make test`` runs the tests in, so that its processes finish together.

pytest-xdist's ``worksteal`` hands each of its N processes one contiguous share of the collected
tests (the first gets the first ``len // N``, and so on) and later lets an idle process take the
back half of the longest queue that is left. A long test therefore runs where its share put it,
at the time its place in that share comes: with every ``slow`` test first in the collection
(as before), one process ran all of them, one after the other (some six minutes of the fuzz, the
soak, the crash and bench runs), while the other two ran out of short tests and stole.

:func:`arrange` puts the long tests at the head of the N shares instead, spread so that each
share's long tests add up to about the same time (longest first, each to the share with the least
so far), and the short tests after them in their collected order. A long test is one marked
``seconds`` (``@pytest.mark.seconds(80)``: about what it takes in ``make test``, with its set-up)
or ``slow`` (10 s unless it says). The tests of one
module that are slow go to the same share, as they often share a module's fixture (a server, a
cluster) that each process would otherwise build for itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

#: The estimate of a ``slow`` test whose marker gives none.
DEFAULT_SECONDS = 10.0


def arrange(
    items: Sequence[T], workers: int, estimate: Callable[[T], float | None], group: Callable[[T], str]
) -> list[T]:
    """``items`` reordered for ``workers`` processes: ``estimate`` is a long test's seconds (None
    for a short one), ``group`` its module."""
    if workers <= 1:
        return sorted(items, key=lambda item: estimate(item) is None)  # stable: long ones first
    groups: dict[str, list[T]] = {}
    short: list[T] = []
    for item in items:
        if estimate(item) is None:
            short.append(item)
        else:
            groups.setdefault(group(item), []).append(item)
    loads = [0.0] * workers
    heads: list[list[T]] = [[] for _ in range(workers)]
    weight = {name: sum(estimate(i) or 0.0 for i in members) for name, members in groups.items()}
    for name in sorted(groups, key=lambda n: -weight[n]):
        share = loads.index(min(loads))
        heads[share].extend(groups[name])
        loads[share] += weight[name]
    # worksteal's first shares: of what is left, an equal part to each process in turn
    arranged: list[T] = []
    left, taken = len(items), 0
    for share in range(workers):
        size = left // (workers - share)
        left -= size
        need = max(0, size - len(heads[share]))
        arranged.extend(heads[share])
        arranged.extend(short[taken : taken + need])
        taken += need
    arranged.extend(short[taken:])
    return arranged
