"""Benchmarks leave the committed results alone unless asked, and say what they fetch first.

``bench/results/`` is what the README cites: a run writes into ``bench/results/local/`` (which
git ignores) unless given ``--publish`` or ``--out``. wrk is fetched into the repository's cache
(announced first) and installed system-wide only with ``--install-wrk``: here ``apt-get`` and
``dpkg-deb`` are stand-ins on ``PATH`` that record how they were called and fail, so nothing is
fetched or installed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

import pytest

from bench import http, output
from bench.__main__ import main


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    output.add_output_arguments(parser, "x-<tier>.json")
    return parser.parse_args(argv)


def test_results_go_to_the_ignored_local_folder_unless_published_or_given() -> None:
    local = output.results_path(parse(), "x-S.json")
    published = output.results_path(parse("--publish"), "x-S.json")
    given = output.results_path(parse("--out", "/tmp/x.json"), "x-S.json")

    assert local == output.ROOT / "bench" / "results" / "local" / "x-S.json"
    assert published == output.ROOT / "bench" / "results" / "x-S.json"
    assert given == Path("/tmp/x.json")
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(local)], cwd=output.ROOT, capture_output=True, check=False
    )
    assert ignored.returncode == 0, "bench/results/local/ is not ignored by git"
    with pytest.raises(SystemExit):
        parse("--publish", "--out", "/tmp/x.json")


@pytest.mark.parametrize("command", ["writes", "http", "logins", "dataplane"])
def test_the_help_says_where_results_go(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])

    text = " ".join(capsys.readouterr().out.split())
    assert "bench/results/local/" in text
    assert "--publish" in text


@pytest.fixture
def stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``apt-get`` and ``dpkg-deb`` that log their arguments and fail; no wrk on ``PATH``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for tool in ("apt-get", "dpkg-deb"):
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\necho "refused by the test" >&2\nexit 100\n')
        script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    return log


def test_wrk_is_fetched_into_the_cache_announced_never_installed_unasked(
    stand_ins: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(http.WrkUnavailable, match="--install-wrk"):
        http.ensure_wrk(cache=tmp_path / "cache" / "wrk")

    calls = stand_ins.read_text().splitlines()
    said = capsys.readouterr().err
    assert calls == ["apt-get download wrk"]  # the first package refused: nothing more
    assert "apt-get download" in said
    assert "nothing is installed on the system" in said
    assert "install -y" not in said


@pytest.mark.skipif(os.geteuid() != 0, reason="apt-get install is only tried as root")
def test_wrk_is_installed_system_wide_only_when_asked_and_said_first(
    stand_ins: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(http.WrkUnavailable):
        http.ensure_wrk(cache=tmp_path / "cache" / "wrk", allow_system_install=True)

    calls = stand_ins.read_text().splitlines()
    said = capsys.readouterr().err
    assert calls[0] == "apt-get install -y wrk"
    assert "installing it system-wide (--install-wrk): apt-get install -y wrk" in said
