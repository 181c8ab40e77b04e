"""File permissions for the data directory: everything the controller creates is private.

Used by the store (the database and its WAL) and by the CLI (the home, the PKI and its keys).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["restrict_umask", "tighten"]

#: Permission bits for group and other: none of them on anything the controller creates.
_SHARED_BITS = 0o077


def restrict_umask() -> None:
    """Make everything this process creates from now on private to its user (umask ``077``).

    Only tightens (bits already masked stay masked). DuckDB creates the WAL lazily, on the first
    write after each checkpoint (which deletes it), with the process umask: only the umask keeps
    it from ever being readable by others, even briefly.
    """
    previous = os.umask(_SHARED_BITS)
    os.umask(previous | _SHARED_BITS)


def tighten(path: Path) -> None:
    """Remove group and other permissions from ``path`` if it has any.

    Leaves alone what does not exist, a symlink, what someone else owns and a shared (sticky,
    ``/tmp``-like) directory.
    """
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.getuid() or mode & stat.S_ISVTX:
        return
    if mode & _SHARED_BITS:
        path.chmod(mode & ~_SHARED_BITS)
