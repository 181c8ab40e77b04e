"""The serving worker's malloc arenas (controller/worker.py: ``limit_malloc_arenas``)."""

from __future__ import annotations

import os

import pytest

from controller.worker import MALLOC_ARENAS, limit_malloc_arenas


def test_an_operators_malloc_arena_max_is_left_as_it_is() -> None:
    assert not limit_malloc_arenas(environ={"MALLOC_ARENA_MAX": "8"})


@pytest.mark.skipif(not hasattr(os, "confstr"), reason="no confstr: not glibc")
def test_the_worker_caps_glibcs_arenas_where_the_c_library_is_glibc() -> None:
    try:
        glibc = bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (OSError, ValueError):
        glibc = False
    if not glibc:
        pytest.skip("the C library is not glibc")

    assert limit_malloc_arenas(MALLOC_ARENAS, environ={})
