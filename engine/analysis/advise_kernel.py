"""The compiled inner loops of the bulk advice (:mod:`engine.analysis.advise_bulk`), with numba.

At tier L the whole network is 250 million (identity, service) pairs. Found with numpy passes, a
block of a million pairs cost about 0.45 s of one core, mostly in the temporaries those passes
lay out (every (entity, policy, member) triple, a dense grid of cells, the routers gathered word
by word). Here one loop visits each triple once and each pair once:

- :func:`block_pairs`: for each entity of a block, its policies' members counted in a per-member
  counter, each count linked to the policy counted (a chain per member); the members counted, in
  rank order, are its pairs. A pair counted once is coded by that policy's slot; counted more, by
  its set of granting policies (its chain), numbered in the block by an exact hash table. Common and online-common routers are popcounts of the two entities'
  router words. An entity with no pair gets a row of its own (other side -1).
- :func:`render_lists`: a block's sets of policies as the JSON text of a list of names, each set's
  kept slots in a given order: the bytes and offsets of an Arrow string array.

Everything is integer arithmetic on arrays; the functions hold no GIL, so two blocks are computed
at once on two threads. Compiled on first use and cached beside this file (or in numba's
user-wide cache where that is not writable).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

__all__ = ["block_pairs", "render_lists"]

_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)
#: An Arrow string array's most bytes (32-bit offsets).
_TEXT_LIMIT = 2**31 - 1
_S1, _S2, _S4, _S56 = np.uint64(1), np.uint64(2), np.uint64(4), np.uint64(56)

# A pair's error bits (as advise_bulk's): no identity routers, no service routers, no common
# router, all common routers offline.
_E_MINE, _E_THEIRS, _E_COMMON, _E_OFFLINE = 1, 2, 4, 8


@njit(inline="always")
def _popcount(x: Any) -> Any:
    """The set bits of a uint64, as an int64 (LLVM makes this one ``popcnt`` where the CPU has
    it)."""
    x = x - ((x >> _S1) & _M1)
    x = (x & _M2) + ((x >> _S2) & _M2)
    x = (x + (x >> _S4)) & _M4
    return np.int64((x * _H01) >> _S56)


@njit(inline="always")
def _grow(array: Any, size: int) -> Any:
    if size <= len(array):
        return array
    bigger = np.empty(max(size, 2 * len(array)), array.dtype)
    bigger[: len(array)] = array
    return bigger


@njit(nogil=True, cache=True)
def block_pairs(
    start: int,
    end: int,
    major_ptr: Any,
    major_policies: Any,
    member_ptr: Any,
    member_ranks: Any,
    major_words: Any,
    minor_words: Any,
    online_words: Any,
    has_online: bool,
    major_router_counts: Any,
    minor_router_counts: Any,
    by_service: bool,
    policy_count: int,
    slot_keys: Any,
    capacity: int,
) -> Any:
    """The advice rows of the entities ``start``-``end`` (ranks of the walking kind), in order.

    ``major_ptr``/``major_policies``: each entity's granting policy slots (CSR, ascending); ``member_ptr``/``member_ranks``: each policy's members of the
    other kind (CSR, ascending ranks); ``*_words``: (entities, words) uint64 router bits;
    ``slot_keys``: a random uint64 per slot (a set's hash is its slots' sum); ``capacity``: at
    least the rows (each entity's members with repeats, plus one).

    Returns (rows, major, minor, common, online, code, errors, sets): per row the two ranks (minor
    -1: an entity with no pair), the common and online-common router counts, the grant code (a
    slot, or ``policy_count`` + the row of ``sets``: the block's distinct sets, slots ascending,
    -1 padded; -1 for no pair) and the error bits."""
    other = minor_words.shape[0]
    words = major_words.shape[1]
    out_major = np.empty(capacity, np.int64)
    out_minor = np.empty(capacity, np.int64)
    out_common = np.empty(capacity, np.int32)
    out_online = np.zeros(capacity if has_online else 0, np.int32)
    out_code = np.empty(capacity, np.int64)
    out_errors = np.empty(capacity, np.int8)
    counts = np.zeros(max(other, 1), np.int32)
    last = np.empty(max(other, 1), np.int64)
    widest = 1
    chained = 1
    for entity in range(start, end):
        widest = max(widest, major_ptr[entity + 1] - major_ptr[entity])
        links = 0
        for k in range(major_ptr[entity], major_ptr[entity + 1]):
            policy = major_policies[k]
            links += member_ptr[policy + 1] - member_ptr[policy]
        chained = max(chained, links)
    found = np.empty(widest, np.int64)
    link_policy = np.empty(chained, np.int64)
    link_previous = np.empty(chained, np.int64)
    # the block's distinct sets: slots (CSR), key; an open-addressing table of set numbers
    set_ptr = np.zeros(1025, np.int64)
    set_slots = np.empty(4096, np.int64)
    set_keys = np.empty(1024, np.uint64)
    sets = 0
    table_size = 1 << 12
    table = np.full(table_size, -1, np.int64)
    width = 0
    rows = 0
    for entity in range(start, end):
        low, high = major_ptr[entity], major_ptr[entity + 1]
        first, final = other, -1
        links = 0
        for k in range(low, high):
            policy = major_policies[k]
            a, b = member_ptr[policy], member_ptr[policy + 1]
            if b > a:
                first = min(first, member_ranks[a])
                final = max(final, member_ranks[b - 1])
            for j in range(a, b):
                member = member_ranks[j]
                # each member's policies, a chain of links (the last first)
                link_policy[links] = policy
                link_previous[links] = last[member] if counts[member] else -1
                last[member] = links
                counts[member] += 1
                links += 1
        mine = major_router_counts[entity]
        paired = False
        for member in range(first, final + 1):
            count = counts[member]
            if count == 0:
                continue
            counts[member] = 0
            paired = True
            if count == 1:
                code = link_policy[last[member]]
            else:
                # the granting policies, from the member's chain (descending): ascending
                size = count
                key = np.uint64(0)
                link = last[member]
                for q in range(size - 1, -1, -1):
                    policy = link_policy[link]
                    found[q] = policy
                    key += slot_keys[policy]
                    link = link_previous[link]
                mask = table_size - 1
                at = np.int64(key & np.uint64(mask))
                while True:
                    number = table[at]
                    if number < 0:
                        number = sets
                        set_ptr = _grow(set_ptr, sets + 2)
                        set_keys = _grow(set_keys, sets + 1)
                        set_slots = _grow(set_slots, set_ptr[sets] + size)
                        base = set_ptr[sets]
                        for q in range(size):
                            set_slots[base + q] = found[q]
                        set_ptr[sets + 1] = base + size
                        set_keys[sets] = key
                        table[at] = number
                        sets += 1
                        width = max(width, size)
                        if 2 * sets > table_size:
                            table_size *= 2
                            table = np.full(table_size, -1, np.int64)
                            mask = table_size - 1
                            for n in range(sets):
                                place = np.int64(set_keys[n] & np.uint64(mask))
                                while table[place] >= 0:
                                    place = (place + 1) & mask
                                table[place] = n
                        break
                    if set_keys[number] == key and set_ptr[number + 1] - set_ptr[number] == size:
                        base = set_ptr[number]
                        same = True
                        for q in range(size):
                            if set_slots[base + q] != found[q]:
                                same = False
                                break
                        if same:
                            break
                    at = (at + 1) & mask
                code = policy_count + number
            common = 0
            online = 0
            for w in range(words):
                both = major_words[entity, w] & minor_words[member, w]
                common += _popcount(both)
                if has_online:
                    online += _popcount(both & online_words[w])
            theirs = minor_router_counts[member]
            identity_count, service_count = (theirs, mine) if by_service else (mine, theirs)
            errors = 0
            if identity_count == 0:
                errors |= _E_MINE
            if service_count == 0:
                errors |= _E_THEIRS
            if identity_count > 0 and service_count > 0:
                if common == 0:
                    errors |= _E_COMMON
                elif has_online and online == 0:
                    errors |= _E_OFFLINE
            out_major[rows] = entity
            out_minor[rows] = member
            out_common[rows] = common
            if has_online:
                out_online[rows] = online
            out_code[rows] = code
            out_errors[rows] = errors
            rows += 1
        if not paired:
            out_major[rows] = entity
            out_minor[rows] = -1
            out_common[rows] = 0
            out_code[rows] = -1
            out_errors[rows] = 0
            rows += 1
    matrix = np.full((sets, width), -1, np.int64)
    for n in range(sets):
        for q in range(set_ptr[n], set_ptr[n + 1]):
            matrix[n, q - set_ptr[n]] = set_slots[q]
    return (
        rows,
        out_major[:rows],
        out_minor[:rows],
        out_common[:rows],
        out_online[:rows] if has_online else out_online,
        out_code[:rows],
        out_errors[:rows],
        matrix,
    )


@njit(nogil=True, cache=True)
def render_lists(sets: Any, order: Any, kept: Any, pieces: Any, piece_ptr: Any, left: int, right: int) -> Any:
    """Each set (a row of slots, -1 padded) as text: ``left``, the pieces of its slots with
    ``kept[slot]``, in ascending ``order[slot]``, joined by ``", "``, then ``right`` (bytes).

    ``pieces``/``piece_ptr``: each slot's piece (UTF-8 bytes, CSR). Returns the texts' offsets
    (int32, one more than the sets) and bytes: an Arrow string array's buffers."""
    count, width = sets.shape
    offsets = np.zeros(count + 1, np.int32)
    chosen = np.empty(max(width, 1), np.int64)
    total = 0
    for n in range(count):
        size = 0
        for q in range(width):
            slot = sets[n, q]
            if slot >= 0 and kept[slot]:
                chosen[size] = slot
                size += 1
        total += 2 + max(size - 1, 0) * 2
        for q in range(size):
            total += piece_ptr[chosen[q] + 1] - piece_ptr[chosen[q]]
        if total > _TEXT_LIMIT:
            raise ValueError("the texts of a block's policy sets pass 2 GiB")
        offsets[n + 1] = total
    data = np.empty(total, np.uint8)
    at = 0
    for n in range(count):
        size = 0
        for q in range(width):
            slot = sets[n, q]
            if slot >= 0 and kept[slot]:
                # insertion by order (sets are short)
                place = size
                while place > 0 and order[chosen[place - 1]] > order[slot]:
                    chosen[place] = chosen[place - 1]
                    place -= 1
                chosen[place] = slot
                size += 1
        data[at] = left
        at += 1
        for q in range(size):
            if q:
                data[at] = 44  # ","
                data[at + 1] = 32  # " "
                at += 2
            slot = chosen[q]
            for b in range(piece_ptr[slot], piece_ptr[slot + 1]):
                data[at] = pieces[b]
                at += 1
        data[at] = right
        at += 1
    return offsets, data
