"""Build once, then find, the test-only virtualenv that holds the real OpenZiti Python SDK.

The venv lives in ``<repo>/.venv-zsdk/`` (gitignored) and is made with the interpreter that runs
the tests (``sys.executable -m venv``). It holds only ``openziti==0.6.0`` installed from its
manylinux wheel (``--only-binary=:all:``): plain ``openziti`` resolves to an sdist whose build
downloads the C SDK from GitHub, which fails offline (docs/api.md §13).

A marker file inside the venv records what it was built from (requirement, pip arguments,
interpreter); a venv whose marker differs, or whose python cannot import ``openziti``, is rebuilt.
Builds are serialised with an ``flock`` on ``.venv-zsdk.lock`` and happen in a temporary
sibling directory that is renamed into place only once complete, so a killed or concurrent build
never leaves a half-built ``.venv-zsdk/`` behind.

``python -m tests.e2e.sdk.sdk_venv`` builds it ahead of time and prints the interpreter's path.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DRIVERS = Path(__file__).resolve().parent

REQUIREMENT = "openziti==0.6.0"
PIP_ARGS = ("install", "--only-binary=:all:", "--no-input", REQUIREMENT)
SKIP_ENV = "TRELLIS_SKIP_SDK_E2E"

VENV_DIR = ROOT / ".venv-zsdk"
LOCK_PATH = ROOT / ".venv-zsdk.lock"
TMP_PREFIX = ".venv-zsdk.tmp-"
MARKER_NAME = "trellis-zsdk.json"

VENV_TIMEOUT = 120.0
PIP_TIMEOUT = 600.0
CHECK_TIMEOUT = 60.0
LOCK_TIMEOUT = PIP_TIMEOUT + VENV_TIMEOUT + 2 * CHECK_TIMEOUT + 60.0

_CLEARED = ("PYTHONPATH", "PYTHONHOME", "PIP_USER", "PIP_REQUIRE_VIRTUALENV", "ZITI_IDENTITIES")


class SdkVenvError(RuntimeError):
    """The SDK venv could not be built or used; the message says why and how to opt out."""


def marker() -> dict[str, object]:
    """What a usable venv must have been built from."""
    return {
        "requirement": REQUIREMENT,
        "pip_args": list(PIP_ARGS),
        "python": ".".join(str(part) for part in sys.version_info[:2]),
        "base_prefix": os.path.realpath(sys.base_prefix),
    }


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for the SDK venv's processes: ours without variables that would leak in."""
    env = {key: value for key, value in os.environ.items() if key not in _CLEARED}
    env.update(extra)
    return env


def _check(venv: Path) -> str | None:
    """None if ``venv`` is complete and was built from :func:`marker`, else why not."""
    try:
        recorded = json.loads((venv / MARKER_NAME).read_text())
    except (OSError, ValueError) as exc:
        return f"no valid marker ({exc})"
    if recorded != marker():
        return f"marker {recorded} differs from {marker()}"
    python = python_of(venv)
    try:
        done = subprocess.run(
            [str(python), "-c", "import openziti.zitilib as z; print(z.version())"],
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python} does not run: {exc}"
    if done.returncode != 0:
        return f"{python} cannot import openziti: {done.stderr.strip()[-2000:]}"
    return None


@contextmanager
def build_lock(path: Path, timeout: float, error: type[Exception]) -> Iterator[None]:
    """Hold the build lock ``path`` (an ``flock``, released by the kernel if the holder dies);
    ``error`` when another process holds it for over ``timeout`` seconds."""
    with path.open("a") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise error(f"another process held {path} for over {timeout:.0f} s") from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _locked() -> AbstractContextManager[None]:
    return build_lock(LOCK_PATH, LOCK_TIMEOUT, SdkVenvError)


def _run(argv: list[str], what: str, timeout: float) -> None:
    try:
        done = subprocess.run(
            argv,
            env=clean_env(PIP_DISABLE_PIP_VERSION_CHECK="1"),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise SdkVenvError(f"could not {what}: `{' '.join(argv)}` ran over {timeout:.0f} s") from exc
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-4000:]
        raise SdkVenvError(f"could not {what}: `{' '.join(argv)}` exited {done.returncode}\n{output}")


def _remove_leftovers() -> None:
    """Temporary build directories of builds that died (only called while holding the lock)."""
    for stale in ROOT.glob(TMP_PREFIX + "*"):
        shutil.rmtree(stale, ignore_errors=True)


def _build() -> None:
    """Build into a temporary sibling, then swap it in (the caller holds the lock)."""
    _remove_leftovers()
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=ROOT))
    tmp.chmod(0o755)  # mkdtemp makes it private; a venv is normally world-readable
    try:
        _run([sys.executable, "-m", "venv", str(tmp)], "create a virtualenv", VENV_TIMEOUT)
        _run(
            [str(python_of(tmp)), "-m", "pip", *PIP_ARGS],
            f"install {REQUIREMENT} from the package index (is it reachable? CI has PyPI)",
            PIP_TIMEOUT,
        )
        (tmp / MARKER_NAME).write_text(json.dumps(marker(), indent=2) + "\n")
        problem = _check(tmp)
        if problem is not None:
            raise SdkVenvError(f"the freshly built venv is not usable: {problem}")
        if VENV_DIR.exists() or VENV_DIR.is_symlink():
            old = ROOT / f"{TMP_PREFIX}old-{os.getpid()}"
            os.rename(VENV_DIR, old)
            shutil.rmtree(old, ignore_errors=True)
        os.rename(tmp, VENV_DIR)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def ensure_sdk_python() -> Path:
    """The SDK venv's python, building ``.venv-zsdk/`` first if it is missing or stale.

    Raises :class:`SdkVenvError` (with pip's output) if it cannot be built.
    """
    if _check(VENV_DIR) is None:
        return python_of(VENV_DIR)
    try:
        with _locked():
            if _check(VENV_DIR) is not None:  # nobody built it while we waited for the lock
                _build()
            problem = _check(VENV_DIR)
            if problem is not None:
                raise SdkVenvError(f"{VENV_DIR} is not usable after the build: {problem}")
    except SdkVenvError as exc:
        raise SdkVenvError(
            f"{exc}\n\nThe real-SDK e2e tests need `pip install --only-binary=:all: {REQUIREMENT}` "
            f"into {VENV_DIR}; set {SKIP_ENV}=1 to skip them deliberately."
        ) from None
    return python_of(VENV_DIR)


if __name__ == "__main__":
    started = time.monotonic()
    print(ensure_sdk_python(), f"({time.monotonic() - started:.1f} s)")
