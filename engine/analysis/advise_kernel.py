"""The compiled inner loops of the bulk advice (:mod:`engine.analysis.advise_bulk`), with numba.

At tier L the whole network is 250 million (identity, service) pairs. Found with numpy passes, a
block of a million pairs cost about 0.45 s of one core, mostly in the temporaries those passes
lay out (every (entity, policy, member) triple, a dense grid of cells, the routers gathered word
by word). Here one loop visits each triple once and each pair once:

- :func:`block_pairs`: for each entity of a block, its policies' members counted in a per-member
  counter, each count linked to the policy counted (a chain per member); the members counted, in
  rank order, are its pairs. A pair counted once is coded by that policy's slot; counted more, by
  its set of granting policies (its chain), numbered in the block by an exact hash table. Common
  and online-common routers are popcounts of the two entities' router words. An entity with no
  pair gets a row of its own (other side -1).
- :func:`grant_texts`: each grant (a policy, or a block's set of policies) as the JSON text of a
  list of names (its kept slots in a given order), each distinct text made once: the bytes and
  offsets of an Arrow string array, and each grant's index among them.
- :func:`advice_columns`: a block's rows as the buffers of the Parquet writer's columns
  (:mod:`api.advice_parquet`), every column in one pass.

Everything is integer arithmetic on arrays; the functions hold no GIL, so two blocks are computed
at once on two threads. Compiled on first use and cached beside this file (or in numba's
user-wide cache where that is not writable).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

__all__ = ["advice_columns", "block_pairs", "compiled", "grant_texts", "or_rows", "set_bits"]


def compiled(function: Callable[..., Any]) -> Any:
    """``function`` compiled on first use, without the GIL, and cached on disk: beside this file,
    else in numba's user-wide cache; uncached where neither can be written (numba refuses to
    cache without a place: every process then compiles it again)."""
    try:
        return njit(nogil=True, cache=True)(function)
    except RuntimeError:
        return njit(nogil=True)(function)


_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)
#: An Arrow string array's most bytes (32-bit offsets).
_TEXT_LIMIT = 2**31 - 1
#: The multiplier of a list's hash (odd, so no two short lists of small slots collide often).
_HASH = np.uint64(0x9E3779B97F4A7C15)
_S1, _S2, _S4, _S56 = np.uint64(1), np.uint64(2), np.uint64(4), np.uint64(56)

# A pair's error bits, as advise_bulk's errors_of reads them (not imported from there: it imports
# this module, inside its functions): no identity routers, no service routers, no common router,
# all common routers offline.
_E_MINE, _E_THEIRS, _E_COMMON, _E_OFFLINE = 1, 2, 4, 8


@njit(inline="always")
def _popcount(x: Any) -> Any:
    """The set bits of a uint64, as an int64 (LLVM makes this one ``popcnt`` where the CPU has
    it)."""
    x = x - ((x >> _S1) & _M1)
    x = (x & _M2) + ((x >> _S2) & _M2)
    x = (x + (x >> _S4)) & _M4
    return np.int64((x * _H01) >> _S56)


@compiled
def _table(keys: Any, count: int, size: int) -> Any:
    """An open-addressing table (``size`` a power of two) of the numbers of the ``count`` keys."""
    mask = size - 1
    table = np.full(size, -1, np.int32)
    for number in range(count):
        at = np.int64(keys[number] & np.uint64(mask))
        while table[at] >= 0:
            at = (at + 1) & mask
        table[at] = number
    return table


@njit(inline="always")
def _same(slots: Any, start: int, end: int, found: Any, size: int) -> bool:
    if end - start != size:
        return False
    for q in range(size):  # noqa: SIM110 - a loop numba compiles, not a generator
        if slots[start + q] != found[q]:
            return False
    return True


@njit(inline="always")
def _number(found: Any, size: int, key: Any, table: Any, ptr: Any, slots: Any, keys: Any, state: Any) -> Any:
    """The number of the set ``found[:size]`` (hash ``key``) in ``table`` (open addressing, with
    room for one more), numbered next (``state``: the count, the widest) if new."""
    mask = len(table) - 1
    at = np.int64(key & np.uint64(mask))
    while True:
        number = table[at]
        if number < 0:
            number = state[0]
            base = ptr[number]
            slots[base : base + size] = found[:size]
            ptr[number + 1] = base + size
            keys[number] = key
            table[at] = number
            state[0] = number + 1
            state[1] = max(state[1], size)
            return number
        if keys[number] == key and _same(slots, ptr[number], ptr[number + 1], found, size):
            return number
        at = (at + 1) & mask


@compiled
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

    ``major_ptr``/``major_policies``: each entity's granting policy slots (CSR, ascending);
    ``member_ptr``/``member_ranks``: each policy's members of the other kind (CSR, ascending
    ranks); ``*_words``: (entities, words) uint64 router bits; ``slot_keys``: a random uint64 per
    slot (a set's hash is its slots' sum); ``capacity``: at least the rows (each entity's members
    with repeats, at most the other kind, or one).

    Returns (major, minor, common, online, code, errors, sets): per row the two ranks
    (int32; minor -1: an entity with no pair), the common and online-common router counts
    (int32), the grant code (int32: a slot, or ``policy_count`` + the row of ``sets``, the block's
    distinct sets, slots ascending, -1 padded; -1 for no pair) and the error bits (int8)."""
    other = minor_words.shape[0]
    words = major_words.shape[1]
    out_major = np.empty(capacity, np.int32)
    out_minor = np.empty(capacity, np.int32)
    out_common = np.empty(capacity, np.int32)
    out_online = np.zeros(capacity if has_online else 0, np.int32)
    out_code = np.empty(capacity, np.int32)
    out_errors = np.empty(capacity, np.int8)
    counts = np.zeros(max(other, 1), np.int32)
    last = np.empty(max(other, 1), np.int32)
    widest = 1
    chained = 1
    linked = 0
    for entity in range(start, end):
        widest = max(widest, major_ptr[entity + 1] - major_ptr[entity])
        links = 0
        for k in range(major_ptr[entity], major_ptr[entity + 1]):
            policy = major_policies[k]
            links += member_ptr[policy + 1] - member_ptr[policy]
        chained = max(chained, links)
        linked += links
    found = np.empty(widest, np.int64)
    link_policy = np.empty(chained, np.int32)
    link_previous = np.empty(chained, np.int32)
    # the block's distinct sets (at most a set a row, their slots at most the links): slots
    # (CSR) and key; an open-addressing table of set numbers, at most half full
    set_ptr = np.zeros(capacity + 1, np.int64)
    set_slots = np.empty(linked, np.int64)
    set_keys = np.empty(capacity, np.uint64)
    state = np.zeros(2, np.int64)  # the sets numbered, the widest
    table = np.full(1 << 12, -1, np.int32)
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
                if 2 * (state[0] + 1) > len(table):
                    table = _table(set_keys, state[0], 2 * len(table))
                number = _number(found, size, key, table, set_ptr, set_slots, set_keys, state)
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
    sets, width = state[0], state[1]
    matrix = np.full((sets, width), -1, np.int64)
    for n in range(sets):
        for q in range(set_ptr[n], set_ptr[n + 1]):
            matrix[n, q - set_ptr[n]] = set_slots[q]
    return (
        out_major[:rows],
        out_minor[:rows],
        out_common[:rows],
        out_online[:rows] if has_online else out_online,
        out_code[:rows],
        out_errors[:rows],
        matrix,
    )


@compiled
def grant_texts(
    policy_count: int, sets: Any, order: Any, kept: Any, pieces: Any, piece_ptr: Any, left: int, right: int
) -> Any:
    """One field's text for each grant code + 1 (0: no policy; 1 + slot: that policy; past
    ``policy_count``: a row of ``sets``, slots ascending, -1 padded): ``left``, the pieces of its
    slots with ``kept[slot]`` in ascending ``order[slot]`` joined by ``", "``, ``right``.

    Each distinct text is made once (many sets share their Bind policies, their posture, ...):
    returns the grants' indices among the distinct texts (int32) and those texts as an Arrow
    string array's buffers (offsets int32, bytes). ``pieces``/``piece_ptr``: each slot's piece
    (UTF-8 bytes, CSR)."""
    count, width = sets.shape
    grants = policy_count + 1 + count
    index = np.empty(grants, np.int32)
    chosen = np.empty(max(width, 1), np.int64)
    # the distinct lists (CSR) and an open-addressing table of their numbers, at most half full
    size = 1
    while size < 2 * grants:
        size *= 2
    table = np.full(size, -1, np.int32)
    keys = np.empty(grants, np.uint64)
    list_ptr = np.zeros(grants + 1, np.int64)
    list_slots = np.empty(policy_count + count * max(width, 1), np.int64)
    state = np.zeros(2, np.int64)  # the lists numbered, the longest
    for g in range(grants):
        n = 0
        if g > policy_count:
            for q in range(width):
                slot = sets[g - policy_count - 1, q]
                if slot >= 0 and kept[slot]:
                    # insertion by order (a set is a few slots)
                    place = n
                    while place > 0 and order[chosen[place - 1]] > order[slot]:
                        chosen[place] = chosen[place - 1]
                        place -= 1
                    chosen[place] = slot
                    n += 1
        elif g > 0 and kept[g - 1]:
            chosen[0] = g - 1
            n = 1
        key = np.uint64(n)
        for q in range(n):
            key = key * _HASH + np.uint64(chosen[q] + 1)
        index[g] = _number(chosen, n, key, table, list_ptr, list_slots, keys, state)
    distinct = state[0]
    offsets = np.zeros(distinct + 1, np.int32)
    total = 0
    for number in range(distinct):
        start, end = list_ptr[number], list_ptr[number + 1]
        total += 2 + max(end - start - 1, 0) * 2
        for q in range(start, end):
            total += piece_ptr[list_slots[q] + 1] - piece_ptr[list_slots[q]]
        if total > _TEXT_LIMIT:
            raise ValueError("the texts of a block's policy sets pass 2 GiB")
        offsets[number + 1] = total
    data = np.empty(total, np.uint8)
    cursor = 0
    for number in range(distinct):
        data[cursor] = left
        cursor += 1
        for q in range(list_ptr[number], list_ptr[number + 1]):
            if q > list_ptr[number]:
                data[cursor] = 44  # ","
                data[cursor + 1] = 32  # " "
                cursor += 2
            slot = list_slots[q]
            for b in range(piece_ptr[slot], piece_ptr[slot + 1]):
                data[cursor] = pieces[b]
                cursor += 1
        data[cursor] = right
        cursor += 1
    return index, offsets, data


@njit(inline="always")
def _set_bit(bits: Any, row: int) -> None:
    bits[row >> 3] |= np.uint8(1 << (row & 7))


@compiled
def advice_columns(
    identity: Any,
    service: Any,
    common: Any,
    online: Any,
    has_online: bool,
    grant: Any,
    errors: Any,
    identity_router_counts: Any,
    service_router_counts: Any,
    identity_disabled: Any,
    dial_of: Any,
    bind_of: Any,
    text_maps: Any,
    counts: Any,
) -> Any:
    """A block's rows (:class:`~engine.analysis.advise_bulk.AdviceBlock`'s columns) as the
    columns of a Parquet advice row group (:mod:`api.advice_parquet`), in one pass.

    ``dial_of``/``bind_of``: per grant (code + 1; 0 no pair) whether it dials, binds;
    ``text_maps``: (3, grants) int32, per grant its index in each policy text dictionary;
    ``counts``: (4, rows), filled with the identity, service, common and online router counts
    (of the Parquet column's integer type). An error code past the 16 bits: 16 an identity with
    no service, 17 a service with no identity.

    Returns ``(ranks, lows, highs, valid, small, texts, flags)``: ``ranks`` (2, rows) int32, the
    identity's and the service's rank less the block's lowest of that side (the highest + 1 for a
    missing one), ``lows``/``highs`` those lowest and highest ranks; ``valid`` (3, bytes) the
    validity bitmaps of the identity, the service and the online count; ``small`` (3, rows) int8:
    status (0 OKAY, 1 ERROR), error code and problems (1: identity disabled); ``texts`` (3, rows)
    int32: the policy text indices; ``flags`` (2, bytes): the Dial and Bind bitmaps."""
    rows = len(identity)
    size = (rows + 7) >> 3
    lows = np.full(2, np.int64(2**62))
    highs = np.full(2, np.int64(-1))
    for row in range(rows):
        i, s = identity[row], service[row]
        if i >= 0:
            lows[0] = min(lows[0], i)
            highs[0] = max(highs[0], i)
        if s >= 0:
            lows[1] = min(lows[1], s)
            highs[1] = max(highs[1], s)
    for side in range(2):
        if highs[side] < 0:
            lows[side] = 0
    ranks = np.empty((2, rows), np.int32)
    valid = np.zeros((3, size), np.uint8)
    small = np.empty((3, rows), np.int8)
    texts = np.empty((3, rows), np.int32)
    flags = np.zeros((2, size), np.uint8)
    for row in range(rows):
        i, s = identity[row], service[row]
        real = i >= 0 and s >= 0
        if i >= 0:
            ranks[0, row] = i - lows[0]
            _set_bit(valid[0], row)
        else:
            ranks[0, row] = highs[0] - lows[0] + 1
        if s >= 0:
            ranks[1, row] = s - lows[1]
            _set_bit(valid[1], row)
        else:
            ranks[1, row] = highs[1] - lows[1] + 1
        code = errors[row]
        if s < 0:
            code = 16
        elif i < 0:
            code = 17
        small[0, row] = 1 if code else 0
        small[1, row] = code
        small[2, row] = 1 if real and identity_disabled[i] else 0
        counts[0, row] = identity_router_counts[i] if real else 0
        counts[1, row] = service_router_counts[s] if real else 0
        counts[2, row] = common[row]
        if has_online:
            counts[3, row] = online[row]
            if real:
                _set_bit(valid[2], row)
        else:
            counts[3, row] = 0
        g = grant[row] + 1
        if dial_of[g]:
            _set_bit(flags[0], row)
        if bind_of[g]:
            _set_bit(flags[1], row)
        for field in range(3):
            texts[field, row] = text_maps[field, g]
    return ranks, lows, highs, valid, small, texts, flags


@compiled
def set_bits(matrix: Any) -> Any:
    """Each row's set bits (a row: little-endian uint64 words), ascending: (lengths, slots)."""
    rows, words = matrix.shape
    lengths = np.zeros(rows, np.int64)
    for row in range(rows):
        total = 0
        for w in range(words):
            total += _popcount(matrix[row, w])
        lengths[row] = total
    out = np.empty(lengths.sum(), np.int64)
    at = 0
    for row in range(rows):
        for w in range(words):
            word = matrix[row, w]
            while word:
                low = word & (~word + _S1)
                out[at] = w * 64 + _popcount(low - _S1)
                at += 1
                word ^= low
    return lengths, out


@compiled
def or_rows(ptr: Any, items: Any, table: Any) -> Any:
    """Per row of a CSR (``ptr``, ``items``), the OR of the ``table`` rows its items name."""
    rows, words = len(ptr) - 1, table.shape[1]
    out = np.zeros((rows, words), np.uint64)
    for row in range(rows):
        for k in range(ptr[row], ptr[row + 1]):
            for w in range(words):
                out[row, w] |= table[items[k], w]
    return out
