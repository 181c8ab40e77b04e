"""``trellis explain``, ``trellis what-if`` and ``trellis check`` (docs/analysis.md §11).

``explain`` and ``what-if`` talk to a running controller's ``/analysis/v1``: its URL from
``--controller`` (else ``TRELLIS_CONTROLLER``, else ``https://`` and ``TRELLIS_BIND``, else
``https://127.0.0.1:1280``), trusting ``--ca`` (else the home's ``pki/ca-bundle.pem``,
``TRELLIS_HOME`` or ``.trellis``), as an administrator: ``--token`` (else ``TRELLIS_TOKEN``), or a
password login as ``--username`` (``admin`` by default) with the password of
``TRELLIS_ADMIN_PASSWORD_FILE`` or ``TRELLIS_ADMIN_PASSWORD``, as the README's tour does.
Identities, services and routers are named by name or by id.

``check --no-new-access BASE HEAD`` reads no controller: BASE is a database snapshot file, HEAD
another one or a what-if batch file (JSON or YAML, ``{"items": [...]}``, applied to BASE's policy
graph as role and attribute changes); it lists every (identity, service, type) and (identity,
router) pair HEAD grants that BASE does not, and exits 1 if there is one: the CI gate for
policy-as-code.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, TextIO

MGMT = "/edge/management/v1"
ANALYSIS = "/analysis/v1"
COMMANDS = ("explain", "what-if", "check")


class CliError(Exception):
    """A refusal: one line on stderr, exit status 2."""


class Refused(Exception):
    """The controller answered an error (4xx) worth showing whole."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


class Client:
    """A running controller, logged in as an administrator."""

    def __init__(self, args: argparse.Namespace) -> None:
        environ = os.environ
        bind = environ.get("TRELLIS_BIND")
        self.url = (
            args.controller or environ.get("TRELLIS_CONTROLLER") or (f"https://{bind}" if bind else "")
        ) or "https://127.0.0.1:1280"
        self.url = self.url.rstrip("/")
        ca = args.ca or Path(environ.get("TRELLIS_HOME") or ".trellis") / "pki" / "ca-bundle.pem"
        self.context = ssl.create_default_context(cafile=str(ca) if Path(ca).is_file() else None)
        self.token = args.token or environ.get("TRELLIS_TOKEN") or self._login(args.username)

    def _password(self) -> str:
        path = os.environ.get("TRELLIS_ADMIN_PASSWORD_FILE")
        if path:
            try:
                return Path(path).read_text(encoding="utf-8").rstrip("\r\n")
            except OSError as ex:
                raise CliError(f"TRELLIS_ADMIN_PASSWORD_FILE {path}: {ex.strerror}") from None
        password = os.environ.get("TRELLIS_ADMIN_PASSWORD")
        if not password:
            raise CliError(
                "no credentials: give --token (or TRELLIS_TOKEN), or TRELLIS_ADMIN_PASSWORD(_FILE) to log in"
            )
        return password

    def _login(self, username: str) -> str:
        answer = self.call(
            "POST",
            f"{MGMT}/authenticate?method=password",
            {"username": username, "password": self._password()},
            token=False,
        )
        return str(answer["data"]["token"])

    def call(self, method: str, path: str, body: Any = None, *, token: bool = True) -> Any:
        headers = {"content-type": "application/json", "accept": "application/json"}
        if token:
            headers["zt-session"] = self.token
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=300) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as ex:
            raw = ex.read()
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = {"error": {"message": raw.decode(errors="replace")[:500]}}
            raise Refused(ex.code, parsed) from None
        except urllib.error.URLError as ex:
            raise CliError(f"{self.url}: {ex.reason}") from None

    def resolve(self, kind: str, value: str) -> str:
        """The id of the ``kind`` (``identities``, ...) named ``value`` (a name or an id)."""
        quoted = value.replace("\\", "\\\\").replace('"', '\\"')
        query = urllib.parse.urlencode({"filter": f'id = "{quoted}" or name = "{quoted}"', "limit": "2"})
        found = self.call("GET", f"{MGMT}/{kind}?{query}")["data"]
        exact = [e for e in found if e["id"] == value] or found
        if not exact:
            noun = {"identities": "identity", "services": "service", "edge-routers": "edge router"}[kind]
            raise CliError(f"no {noun} named {value!r}")
        return str(exact[0]["id"])


def _error_text(refused: Refused) -> str:
    error = refused.body.get("error", {}) if isinstance(refused.body, dict) else {}
    cause = error.get("cause") or {}
    detail = cause.get("reason") or cause.get("message") or ""
    return f"{refused.status} {error.get('code', '')}: {error.get('message', '')}" + (
        f" ({detail})" if detail else ""
    )


# -- explain ------------------------------------------------------------------------------------


def explain(args: argparse.Namespace, out: TextIO) -> int:
    client = Client(args)
    identity = client.resolve("identities", args.identity)
    if args.router:
        router = client.resolve("edge-routers", args.router)
        data = client.call("GET", f"{ANALYSIS}/identities/{identity}/edge-routers/{router}")["data"]
        target = f"edge router {args.router}"
    else:
        if not args.service:
            raise CliError("explain needs a SERVICE, or --router ROUTER")
        service = client.resolve("services", args.service)
        query = urllib.parse.urlencode({"type": args.type})
        data = client.call("GET", f"{ANALYSIS}/identities/{identity}/services/{service}?{query}")["data"]
        target = f"{args.type} service {args.service}"
    if args.json:
        print(json.dumps(data, indent=2), file=out)
        return 0 if data["allowed"] else 1
    verdict = "ALLOWED" if data["allowed"] else "DENIED"
    print(f"{verdict}: identity {args.identity}, {target} (revision {data['revision']})", file=out)
    print("checks: " + ", ".join(f"{k} {'ok' if v else 'NO'}" for k, v in data["checks"].items()), file=out)
    for grant in data.get("grants", []):
        print(f"  granted by {grant.get('policyName') or grant.get('policyId')}", file=out)
    for router in data.get("routers", []):
        print(
            f"  common router {router.get('name') or router.get('id')}: "
            f"{'online' if router.get('isOnline') else 'offline'}",
            file=out,
        )
    for miss in data.get("misses", []):
        print(f"  missing ({miss['cost']}): {miss['message']}", file=out)
    return 0 if data["allowed"] else 1


# -- what-if ------------------------------------------------------------------------------------


def read_batch(path: Path) -> dict[str, Any]:
    """A batch file: JSON, or YAML (``{"items": [...]}``, or the list of items alone)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as ex:
        raise CliError(f"{path}: {ex.strerror}") from None
    try:
        doc = json.loads(text)
    except ValueError:
        import yaml

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as ex:
            raise CliError(f"{path}: neither JSON nor YAML ({ex})") from None
    if isinstance(doc, list):
        doc = {"items": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        raise CliError(f'{path}: expected {{"items": [...]}}')
    return {"items": doc["items"]}


def _print_diff(data: dict[str, Any], out: TextIO) -> None:
    summary = data["summary"]
    print(
        f"services: +{summary['servicesAdded']} -{summary['servicesRemoved']}, "
        f"routers: +{summary['routersAdded']} -{summary['routersRemoved']}, "
        f"{summary['identities']} identities, {summary['policies']} policies changed",
        file=out,
    )
    for sign, key in (("+", "added"), ("-", "removed")):
        for pair in data["services"][key]:
            print(f"  {sign} {pair['identityId']} {pair['type']} {pair['serviceId']}", file=out)
        for pair in data["routers"][key]:
            print(f"  {sign} {pair['identityId']} router {pair['edgeRouterId']}", file=out)
    for guardrail in data.get("guardrails", []):
        print(
            f"  guardrail {guardrail['name']} ({guardrail['mode']}): {guardrail['count']} new violation(s)",
            file=out,
        )


def what_if(args: argparse.Namespace, out: TextIO) -> int:
    batch = read_batch(args.file)
    client = Client(args)
    try:
        data = client.call("POST", f"{ANALYSIS}/what-if", batch)["data"]
    except Refused as ex:
        print(f"trellis what-if: {_error_text(ex)}", file=sys.stderr)
        return 1
    print(f"what-if at revision {data['revision']}: {data['changes']} changes", file=out)
    _print_diff(data, out)
    if not args.apply:
        return 0
    try:
        applied = client.call("POST", f"{ANALYSIS}/apply", {**batch, "revision": data["revision"]})["data"]
    except Refused as ex:
        print(f"trellis what-if --apply: refused, nothing written: {_error_text(ex)}", file=sys.stderr)
        return 1
    print(f"applied: revision {applied['appliedRevision']}", file=out)
    return 0


# -- check --------------------------------------------------------------------------------------


def _graph_of_batch(base: Any, batch: dict[str, Any]) -> tuple[Any, dict[str, set[str]]]:
    """BASE's graph with a batch's role and attribute changes applied (offline: no validation,
    no follow-ups such as a tunneler-enabled router's identity), and what it touched."""
    from engine.policy import (
        EDGE_ROUTER,
        EDGE_ROUTER_POLICY,
        IDENTITY,
        POSTURE_CHECK,
        SERVICE,
        SERVICE_EDGE_ROUTER_POLICY,
        SERVICE_POLICY,
    )

    entity_kinds = {
        "identities": IDENTITY,
        "services": SERVICE,
        "edge-routers": EDGE_ROUTER,
        "posture-checks": POSTURE_CHECK,
    }
    policy_kinds = {
        "service-policies": SERVICE_POLICY,
        "edge-router-policies": EDGE_ROUTER_POLICY,
        "service-edge-router-policies": SERVICE_EDGE_ROUTER_POLICY,
    }
    graph = base.copy()
    touched: dict[str, set[str]] = {}
    for index, item in enumerate(batch["items"]):
        if not isinstance(item, dict):
            raise CliError(f"items[{index}]: not an object")
        op, kind, body = item.get("op"), item.get("kind"), item.get("body") or {}
        entity_id = item.get("id") or f"new-{index}"
        if kind in entity_kinds:
            engine_kind = entity_kinds[kind]
            if op == "delete":
                if graph.has_entity(engine_kind, entity_id):
                    graph.remove_entity(engine_kind, entity_id)
            else:
                attributes = body.get("roleAttributes")
                if attributes is None:
                    known = graph.has_entity(engine_kind, entity_id)
                    attributes = graph.entity_attributes(engine_kind, entity_id) if known else []
                graph.upsert_entity(engine_kind, entity_id, attributes)
        elif kind in policy_kinds:
            engine_kind = policy_kinds[kind]
            if op == "delete":
                if graph.has_policy(engine_kind, entity_id):
                    graph.remove_policy(engine_kind, entity_id)
            else:
                old = (
                    graph.policy(engine_kind, entity_id) if graph.has_policy(engine_kind, entity_id) else None
                )
                roles = dict(old.roles) if old is not None and op == "patch" else {}
                fields = {
                    "identityRoles": IDENTITY,
                    "serviceRoles": SERVICE,
                    "edgeRouterRoles": EDGE_ROUTER,
                    "postureCheckRoles": POSTURE_CHECK,
                }
                for wire, role_kind in fields.items():
                    if wire in body:
                        roles[role_kind] = tuple(body[wire] or ())
                semantic = body.get("semantic") or (old.semantic if old is not None else "AllOf")
                policy_type = body.get("type") or (old.type if old is not None else None)
                if engine_kind == SERVICE_POLICY and policy_type is None:
                    raise CliError(f"items[{index}]: a service policy needs a type")
                graph.upsert_policy(
                    engine_kind,
                    entity_id,
                    semantic=semantic,
                    type=policy_type,
                    identity_roles=roles.get(IDENTITY, ()),
                    service_roles=roles.get(SERVICE, ()),
                    edge_router_roles=roles.get(EDGE_ROUTER, ()),
                    posture_check_roles=roles.get(POSTURE_CHECK, ()),
                )
        else:
            raise CliError(f"items[{index}]: kind {kind!r} is not one a batch may write")
        touched.setdefault(entity_kinds.get(kind) or policy_kinds[kind], set()).add(entity_id)
    return graph, touched


def check(args: argparse.Namespace, out: TextIO) -> int:
    from controller.access_cli import CliError as SnapshotError
    from controller.access_cli import Snapshot
    from engine.analysis.diff import access_diff
    from engine.policy import IDENTITY, POLICY_KINDS

    if not args.no_new_access:
        raise CliError("say what to check: --no-new-access")
    try:
        base_snapshot = Snapshot(args.base)
        base = base_snapshot.graph()
        names = base_snapshot.names()
        if args.head.suffix.lower() in (".json", ".yaml", ".yml"):
            head, touched = _graph_of_batch(base, read_batch(args.head))
        else:
            head_snapshot = Snapshot(args.head)
            head = head_snapshot.graph()
            names = _either(head_snapshot.names(), names)
            touched = {}
            for graph in (base, head):
                for kind in (*POLICY_KINDS, IDENTITY, "service", "edge-router"):
                    ids = graph.policy_ids(kind) if kind in POLICY_KINDS else graph.entity_ids(kind)
                    touched.setdefault(kind, set()).update(ids)
    except SnapshotError as ex:
        raise CliError(str(ex)) from None
    diff = access_diff(base, head, touched)
    new = len(diff.services_added) + len(diff.routers_added)
    for identity_id, service_id, policy_type in diff.services_added:
        print(
            f"NEW {policy_type}: identity {names('identity', identity_id)} ({identity_id}) -> "
            f"service {names('service', service_id)} ({service_id})",
            file=out,
        )
    for identity_id, router_id in diff.routers_added:
        print(
            f"NEW router: identity {names('identity', identity_id)} ({identity_id}) -> "
            f"edge router {names('edge-router', router_id)} ({router_id})",
            file=out,
        )
    removed = len(diff.services_removed) + len(diff.routers_removed)
    print(f"{new} new access pair(s), {removed} removed", file=out)
    return 1 if new else 0


def _either(first: Any, second: Any) -> Any:
    def name(kind: str, entity_id: str) -> str:
        found = first(kind, entity_id)
        return str(found if found != entity_id else second(kind, entity_id))

    return name


# -- the commands ---------------------------------------------------------------------------------


def _connection(one: argparse.ArgumentParser) -> None:
    one.add_argument("--controller", help="the controller's URL (default: TRELLIS_CONTROLLER, TRELLIS_BIND)")
    one.add_argument("--ca", type=Path, help="the CA bundle to trust (default: the home's pki/ca-bundle.pem)")
    one.add_argument("--token", help="an admin's zt-session (default: TRELLIS_TOKEN, else a password login)")
    one.add_argument("--username", default="admin", help="who logs in with TRELLIS_ADMIN_PASSWORD(_FILE)")


def add_commands(sub: Any) -> None:
    """Add ``explain``, ``what-if`` and ``check`` to ``trellis``'s subcommands."""
    one = sub.add_parser("explain", help="why an identity may or may not reach a service or a router")
    one.add_argument("identity", help="the identity's name or id")
    one.add_argument("service", nargs="?", help="the service's name or id")
    one.add_argument("--type", choices=("Dial", "Bind"), default="Dial")
    one.add_argument("--router", help="explain an edge router instead (name or id)")
    one.add_argument("--json", action="store_true", help="the answer as the API gives it")
    _connection(one)
    one = sub.add_parser("what-if", help="the access diff of a batch of writes; --apply to make them")
    one.add_argument("file", type=Path, help="the batch (JSON or YAML)")
    one.add_argument("--apply", action="store_true", help="apply it if nothing changed since the what-if")
    _connection(one)
    one = sub.add_parser("check", help="exit 1 listing the access HEAD grants that BASE does not")
    one.add_argument("--no-new-access", action="store_true", help="fail on any new access pair")
    one.add_argument("base", type=Path, help="a database snapshot file")
    one.add_argument("head", type=Path, help="a database snapshot file, or a what-if batch (.json/.yaml)")


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int | None:
    """Run ``explain``, ``what-if`` or ``check``; None for any other command."""
    command = {"explain": explain, "what-if": what_if, "check": check}.get(args.command)
    if command is None:
        return None
    try:
        return command(args, out)
    except CliError as ex:
        print(f"trellis {args.command}: {ex}", file=sys.stderr)
        return 2
    except Refused as ex:
        print(f"trellis {args.command}: {_error_text(ex)}", file=sys.stderr)
        return 2
