"""Build once, then find, OpenZiti's own ``ziti`` program (CLI, tunneler and router in one Go binary).

The binary is built from the Go module ``github.com/openziti/ziti`` at :data:`VERSION` (the
release whose controller API Trellis implements) with the machine's ``go``, into
the per-user cache ``~/.cache/trellis/ziti-v1.6.0/bin/ziti`` (``$XDG_CACHE_HOME`` if set), shared
by every clone on the machine. Go's own module and build caches are Go's per-user defaults
(``go env GOMODCACHE GOCACHE``), as any ``go build`` uses them: some 2.2 GB once built (modules
0.4 GB, build cache 1.8 GB), which ``go clean -cache -modcache`` frees. So the first clone on a
machine builds in minutes and every later one finds the binary ready. ``TRELLIS_ZITI_GO_DIR``
moves the binary's directory elsewhere.

Why not ``go install github.com/openziti/ziti/ziti@v1.6.0``: that command asks the module proxy
for the module's version list (to report deprecations), and the proxy reachable here refuses it
(403), so it fails before building anything. Instead ``go mod download`` fetches the exact
version and ``go build`` runs inside the downloaded module, with its own ``go.mod``/``go.sum``:
every dependency is checked against that ``go.sum``. The checksum database has no entry for
``github.com/openziti/ziti`` itself (its lookup answers 404 here), so that one module is listed in
``GONOSUMDB``; the proxy still serves it. The build runs under ``nice -n 19`` with ``-p=1``, so
it does not starve other work on a 2-core machine (5 to 9 minutes there, downloads included).

A marker file beside the binary records what it was built from (module, version, ``go
version``, cgo, GOFLAGS); a binary whose marker differs, or that does not run, is rebuilt. Builds are
serialised with an ``flock`` on ``build.lock`` in that directory and happen in a temporary directory that
is renamed into place only once complete, so a killed build never leaves a half-made ``bin/``.

``python -m tests.e2e.ziti_cli`` builds it ahead of time and prints the binary's path. Tests that
use it FAIL when it cannot be built; ``TRELLIS_SKIP_ZITI_E2E=1`` skips them on purpose.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.e2e.sdk.sdk_venv import build_lock

MODULE = "github.com/openziti/ziti"
VERSION = "v1.6.0"
PACKAGE = "./ziti"  # the command inside the module: github.com/openziti/ziti/ziti
SKIP_ENV = "TRELLIS_SKIP_ZITI_E2E"
DIR_ENV = "TRELLIS_ZITI_GO_DIR"


def _default_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "trellis" / f"ziti-{VERSION}"


GO_DIR = Path(os.environ.get(DIR_ENV) or _default_dir())
BIN_DIR = GO_DIR / "bin"
LOCK_PATH = GO_DIR / "build.lock"
TMP_PREFIX = "bin.tmp-"
MARKER_NAME = "trellis-ziti.json"
BINARY_NAME = "ziti"

#: Where the release's version strings go (OpenZiti's CI writes them into this file instead).
VERSION_PKG = f"{MODULE}/common/version"

GO_TIMEOUT = 60.0
DOWNLOAD_TIMEOUT = 900.0
BUILD_TIMEOUT = 2400.0
CHECK_TIMEOUT = 30.0
LOCK_TIMEOUT = DOWNLOAD_TIMEOUT + BUILD_TIMEOUT + 2 * CHECK_TIMEOUT + 60.0

#: Variables of ours that would change what go builds, or what the ziti processes read.
_CLEARED = (
    "GOFLAGS",
    "GOWORK",
    "GOOS",
    "GOARCH",
    "CGO_ENABLED",
    "GOPATH",
    "GOMODCACHE",
    "GOCACHE",
    "GOBIN",
    "GONOSUMDB",
    "GONOSUMCHECK",
    "GOPRIVATE",
    "GOINSECURE",
    "ZITI_CONFIG_DIR",
    "ZITI_CHECK_VERSION",
)


class ZitiCliError(RuntimeError):
    """The ziti binary could not be built or used; the message says why and how to opt out."""


def binary() -> Path:
    return BIN_DIR / BINARY_NAME


def clean_env(**extra: str) -> dict[str, str]:
    """Our environment without the variables that would leak into go or ziti, plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if key not in _CLEARED}
    env.update(extra)
    return env


def go_env() -> dict[str, str]:
    """The environment of every go command here: Go's own per-user caches, our flags."""
    return clean_env(
        GOWORK="off",
        # the checksum database has no entry for this module (404); its dependencies are still
        # checked against the go.sum it ships
        GONOSUMDB=MODULE,
        GOFLAGS="-mod=readonly -buildvcs=false -p=1",
        CGO_ENABLED="0",
    )


def _go_version() -> str:
    """``go version`` as the build would run it (GOTOOLCHAIN from our environment applies)."""
    go = shutil.which("go")
    if go is None:
        raise ZitiCliError("`go` is not on PATH: the Go toolchain is needed to build the ziti binary")
    try:
        done = subprocess.run(
            [go, "version"], env=go_env(), capture_output=True, text=True, timeout=GO_TIMEOUT, cwd=GO_DIR
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ZitiCliError(f"`go version` failed: {exc}") from None
    if done.returncode != 0:
        raise ZitiCliError(f"`go version` exited {done.returncode}: {(done.stdout + done.stderr).strip()}")
    return done.stdout.strip()


def marker(go_version: str) -> dict[str, object]:
    """What a usable binary must have been built from."""
    return {
        "module": f"{MODULE}@{VERSION}",
        "package": PACKAGE,
        "go": go_version,
        "goflags": go_env()["GOFLAGS"],
        "cgo": go_env()["CGO_ENABLED"],
    }


def _check(directory: Path, go_version: str) -> str | None:
    """None if ``directory`` holds a complete build made from :func:`marker`, else why not."""
    try:
        recorded = json.loads((directory / MARKER_NAME).read_text())
    except (OSError, ValueError) as exc:
        return f"no valid marker ({exc})"
    wanted = marker(go_version)
    if {key: recorded.get(key) for key in wanted} != wanted:
        return f"marker {recorded} differs from {wanted}"
    exe = directory / BINARY_NAME
    try:
        done = subprocess.run(
            [str(exe), "version"], env=clean_env(), capture_output=True, text=True, timeout=CHECK_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{exe} does not run: {exc}"
    if done.returncode != 0 or done.stdout.strip() != VERSION:
        return f"`{exe} version` exited {done.returncode} printing {(done.stdout + done.stderr).strip()!r}"
    return None


@contextmanager
def _locked() -> Iterator[None]:
    """Hold the build lock (an ``flock``, released by the kernel if the holder dies)."""
    GO_DIR.mkdir(parents=True, exist_ok=True)
    with build_lock(LOCK_PATH, LOCK_TIMEOUT, ZitiCliError):
        yield


def _run(argv: list[str], what: str, timeout: float, cwd: Path) -> str:
    """Run a go command (niced); its stdout, or :class:`ZitiCliError` with its output."""
    try:
        done = subprocess.run(
            ["nice", "-n", "19", *argv],
            env=go_env(),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise ZitiCliError(f"could not {what}: `{' '.join(argv)}` ran over {timeout:.0f} s") from exc
    except OSError as exc:
        raise ZitiCliError(f"could not {what}: `{' '.join(argv)}`: {exc}") from exc
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-4000:]
        raise ZitiCliError(f"could not {what}: `{' '.join(argv)}` exited {done.returncode}\n{output}")
    return done.stdout


def _download() -> dict[str, object]:
    """``go mod download -json`` of the release: its JSON (``Dir`` is the module's source)."""
    out = _run(
        ["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        f"download {MODULE}@{VERSION} from the Go module proxy (is it reachable?)",
        DOWNLOAD_TIMEOUT,
        GO_DIR,
    )
    try:
        info: dict[str, object] = json.loads(out)
    except ValueError as exc:
        raise ZitiCliError(f"`go mod download -json` printed no JSON ({exc}): {out[:2000]}") from None
    if info.get("Error"):
        raise ZitiCliError(f"could not download {MODULE}@{VERSION}: {info['Error']}")
    if not isinstance(info.get("Dir"), str) or not Path(str(info["Dir"])).is_dir():
        raise ZitiCliError(f"`go mod download` gave no module directory: {info}")
    return info


def _ldflags(info: dict[str, object]) -> str:
    """The version strings an official build carries (``ziti version`` prints the first)."""
    origin = info.get("Origin")
    revision = origin.get("Hash") if isinstance(origin, dict) else None
    try:  # the release's commit time, from the proxy's .info file
        built = str(json.loads(Path(str(info.get("Info"))).read_text()).get("Time") or "")
    except (OSError, ValueError):
        built = ""
    values = {
        "Version": VERSION,
        "Revision": str(revision or "unknown"),
        "BuildDate": built.replace("T", " ").removesuffix("Z"),
    }
    return " ".join(f"-X '{VERSION_PKG}.{name}={value}'" for name, value in values.items())


def _remove_leftovers() -> None:
    """Temporary directories of builds that died (only called while holding the lock)."""
    for stale in GO_DIR.glob(TMP_PREFIX + "*"):
        shutil.rmtree(stale, ignore_errors=True)


def _build(go_version: str) -> None:
    """Download and build into a temporary directory, then swap it in (the caller holds the lock)."""
    _remove_leftovers()
    info = _download()
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=GO_DIR))
    tmp.chmod(0o755)
    try:
        _run(
            ["go", "build", "-trimpath", "-ldflags", _ldflags(info), "-o", str(tmp / BINARY_NAME), PACKAGE],
            f"build {MODULE}/ziti at {VERSION} with {go_version}",
            BUILD_TIMEOUT,
            Path(str(info["Dir"])),
        )
        recorded = {**marker(go_version), "ldflags": _ldflags(info), "source": info.get("Origin")}
        (tmp / MARKER_NAME).write_text(json.dumps(recorded, indent=2) + "\n")
        problem = _check(tmp, go_version)
        if problem is not None:
            raise ZitiCliError(f"the freshly built ziti is not usable: {problem}")
        if BIN_DIR.exists() or BIN_DIR.is_symlink():
            old = GO_DIR / f"{TMP_PREFIX}old-{os.getpid()}"
            os.rename(BIN_DIR, old)
            shutil.rmtree(old, ignore_errors=True)
        os.rename(tmp, BIN_DIR)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def ensure_ziti() -> Path:
    """The ziti binary, building it into :data:`BIN_DIR` first if it is missing or stale.

    Raises :class:`ZitiCliError` (with go's output) if it cannot be built.
    """
    try:
        GO_DIR.mkdir(parents=True, exist_ok=True)
        go_version = _go_version()
        if _check(BIN_DIR, go_version) is None:
            return binary()
        with _locked():
            if _check(BIN_DIR, go_version) is not None:  # nobody built it while we waited
                _build(go_version)
            problem = _check(BIN_DIR, go_version)
            if problem is not None:
                raise ZitiCliError(f"{BIN_DIR} is not usable after the build: {problem}")
    except (ZitiCliError, OSError) as exc:
        raise ZitiCliError(
            f"{exc}\n\nThe ziti CLI e2e tests need {MODULE}@{VERSION} built with Go into {BIN_DIR} "
            f"(`python -m tests.e2e.ziti_cli`); set {SKIP_ENV}=1 to skip them deliberately."
        ) from None
    return binary()


if __name__ == "__main__":
    started = time.monotonic()
    print(ensure_ziti(), f"({time.monotonic() - started:.1f} s)")
