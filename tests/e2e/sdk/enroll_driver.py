"""Enroll with the real OpenZiti SDK; run by the SDK venv's python, never imported by pytest.

Usage: ``enroll_driver.py <jwt-file> <identity-out.json>``. Prints one result line:
``ENROLLED <ztAPI> <id keys>`` (exit 0, identity JSON written) or ``ENROLL_FAILED <error>``
(exit 2). The C SDK logs to stderr (``ZITI_LOG``). The process ends with ``os._exit`` because
the SDK's shutdown can hang (docs/api.md §13).
"""

from __future__ import annotations

import json
import os
import sys

import openziti  # type: ignore[import-not-found]  # only installed in .venv-zsdk


def main() -> int:
    jwt_path, out_path = sys.argv[1], sys.argv[2]
    with open(jwt_path, encoding="utf-8") as source:
        token = source.read().strip()
    print("SDK", openziti.zitilib.version(), flush=True)
    try:
        identity = openziti.enroll(token)
    except Exception as exc:  # the wrapper raises RuntimeError(<C SDK error text>)
        print("ENROLL_FAILED", repr(exc), flush=True)
        return 2
    with open(out_path, "w", encoding="utf-8") as sink:
        sink.write(identity)
    parsed = json.loads(identity)
    print("ENROLLED", parsed.get("ztAPI"), sorted(parsed.get("id") or {}), flush=True)
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except BaseException as exc:
        print("DRIVER_ERROR", repr(exc), flush=True)
        code = 3
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
