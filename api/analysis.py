"""``/analysis/v1``: Trellis's access analysis API (docs/analysis.md), for administrators.

Not OpenZiti's: a root of its own (never under ``/edge``), with the management API's
authentication (``zt-session`` or an OIDC bearer token of an admin's API session), envelopes and
errors. Served:

- ``GET /revision``: the revision the controller is at;
- ``GET /identities/{id}/services/{serviceId}?type=Dial|Bind``: why an identity may or may not
  Dial (Bind) a service: the granting paths, routers, posture, and the nearest misses;
- ``GET /identities/{id}/edge-routers/{edgeRouterId}``: the same for an identity and a router;
- ``POST /what-if``: the access diff a batch of management writes would make; nothing is written;
- ``POST /apply``: the batch committed whole if nothing access-relevant changed since the
  revision of its what-if, else 409 with the diff since then;
- ``/guardrails`` (CRUD) and ``/guardrail-violations`` (list, read, delete): the invariants every
  write is checked against, and what those in ``report`` mode let through;
- ``GET /swagger.json``: this API's Swagger 2.0 document.

A batch item's ``body`` is read by the management API's own models and field rules, so a bad item
gets the 400 the management API gives, its ``cause.field`` prefixed with ``items[<index>]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import falcon
import orjson
from pydantic import ValidationError

from api.analysis_findings import mount_findings
from api.analysis_sql import mount_sql
from api.analysis_stream import mount_stream
from api.errors import envelope, field_error_from_validation
from api.http import LOOP_READS, ok, read_model
from api.middleware import ADMIN, NONE
from api.resources import Family, FamilyCollection, FamilyItem
from api.routing import ANALYSIS_BASE, Route, Routes
from api.schemas.analysis import (
    BATCH_KINDS,
    GUARDRAIL_SYMBOLS,
    PAIR_LIMIT,
    PATHS,
    VIOLATION_SYMBOLS,
    ApplyRequest,
    BatchItem,
    GuardrailCreate,
    GuardrailPatch,
    GuardrailUpdate,
    WhatIfRequest,
    render_guardrail,
    render_router_explanation,
    render_service_explanation,
    render_verdicts,
    render_violation,
)
from api.schemas.identities import IdentityCreate, enrollment_request
from api.schemas.posture_checks import MODELS, type_details
from api.wire import WireModel
from engine.analysis import AccessDiff, AnalysisManager, Operation, StaleRevisionError, analysis_for
from engine.analysis.manager import CLASSES, at_item
from engine.errors import ControllerError, FieldError, NotFoundError
from engine.managers.posture_checks import DETAILS_PATCH, check_type_id

#: The 409 of a stale apply: OpenZiti has no such error; the code is Trellis's.
STALE_CODE = "ACCESS_CHANGED"
STALE_MESSAGE = "access-relevant changes were applied since the revision of the what-if"


class _Names:
    """Entity and policy names for the answers, read from the store."""

    def __init__(self, analysis: AnalysisManager) -> None:
        self.store = analysis.store

    def with_created(self, created: Any) -> Callable[[str, str], str]:
        """These names, and those of the entities a batch created (not in the store), read from
        one view of the store (a diff names up to 10,000 identities)."""
        made = {c.id: c.name for c in created}
        view = self.store.view()

        def name(kind: str, entity_id: str) -> str:
            found: str | None = made.get(entity_id)
            if found:
                return found
            cls = CLASSES.get(kind)
            entity = view.get(cls, entity_id) if cls is not None else None
            return str(getattr(entity, "name", "") or "")

        return name

    def __call__(self, kind: str, entity_id: str) -> str:
        cls = CLASSES.get(kind)
        entity = self.store.get(cls, entity_id) if cls is not None else None
        return str(getattr(entity, "name", "") or "")


class Revision:
    """The revision the controller is at: what a what-if computed now would carry."""

    auth = ADMIN
    loop_methods = LOOP_READS

    def __init__(self, analysis: AnalysisManager) -> None:
        self.analysis = analysis

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """The controller's current revision."""
        ok(resp, {"revision": self.analysis.revision()})


class ExplainService:
    """Why an identity may, or may not, Dial or Bind a service."""

    auth = ADMIN

    def __init__(self, analysis: AnalysisManager) -> None:
        self.analysis = analysis
        self.names = _Names(analysis)

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str, service_id: str) -> None:
        """Explain an identity's Dial (or Bind, ``type=Bind``) access to a service."""
        policy_type = req.get_param("type") or "Dial"
        revision, answer = self.analysis.explain_service(id, service_id, policy_type)
        ok(resp, render_service_explanation(revision, answer, self.names))


class ExplainRouter:
    """Why an identity may, or may not, use an edge router."""

    auth = ADMIN

    def __init__(self, analysis: AnalysisManager) -> None:
        self.analysis = analysis
        self.names = _Names(analysis)

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str, edge_router_id: str) -> None:
        """Explain an identity's access to an edge router."""
        revision, answer = self.analysis.explain_router(id, edge_router_id)
        ok(resp, render_router_explanation(revision, answer, self.names))


class Batches:
    """Turns batch items into operations with the management API's own models and rules."""

    def __init__(self, routes: Routes) -> None:
        self.settings = routes.managers.enrollment_settings
        self.families: dict[str, Any] = {}
        for api, template, resource, _ in routes.table:
            family = getattr(resource, "family", None)
            kind = template.lstrip("/")
            if api == "management" and family is not None and kind in BATCH_KINDS:
                self.families[kind] = family

    def operations(self, items: list[BatchItem]) -> list[Operation]:
        out = []
        for index, item in enumerate(items):
            try:
                out.append(self._operation(item))
            except ControllerError as ex:
                raise at_item(ex, index) from None
        return out

    def _operation(self, item: BatchItem) -> Operation:
        manager_kind = BATCH_KINDS[item.kind]
        if item.op == "create":
            if item.id is not None:
                raise FieldError("id", "a create takes no id: the controller gives one", item.id)
        elif not item.id:
            raise FieldError("id", f"an {item.op} needs the id of the entity", item.id)
        if item.op != "delete" and item.body is None:
            raise FieldError("body", f"a {item.op} needs the body the management API takes")
        entity_id = item.id or ""
        if item.op == "delete":
            return Operation(manager_kind, "delete", entity_id, lambda m: m.delete(entity_id))
        assert item.body is not None
        data = orjson.dumps(item.body)
        if item.kind == "posture-checks":
            return Operation(
                manager_kind, item.op, item.id, _posture_check(item.op, entity_id, item.body, data)
            )
        family = self.families[item.kind]
        model_type = {
            "create": family.create_model,
            "update": family.update_model,
            "patch": family.patch_model,
        }[item.op]
        model = _validate(model_type, data)
        fields = family.fields(model, item.op)
        if item.op == "create":
            if isinstance(model, IdentityCreate):
                enrollment = enrollment_request(model)
                settings = self.settings
                return Operation(
                    manager_kind,
                    "create",
                    None,
                    lambda m: m.create_with_enrollments(fields, enrollment, settings).id,
                )
            return Operation(manager_kind, "create", None, lambda m: m.create(fields).id)

        def update(m: Any) -> None:
            m.update(entity_id, fields)

        return Operation(manager_kind, item.op, entity_id, update)


def _validate(model: type[WireModel], data: bytes) -> Any:
    try:
        return model.model_validate_json(data)
    except ValidationError as ex:
        raise field_error_from_validation(ex) from None


def _posture_check(op: str, entity_id: str, doc: dict[str, Any], data: bytes) -> Callable[[Any], str | None]:
    """A posture check write, read as ``/posture-checks`` reads it (the model depends on the type,
    which a replace may take from the stored check)."""

    def type_of(required: bool) -> str | None:
        if doc.get("typeId") is None:
            if required:
                raise FieldError("typeId", "typeId in body is required")
            return None
        return check_type_id(doc["typeId"])

    def run(manager: Any) -> str | None:
        if op == "create":
            type_id = type_of(True)
            assert type_id is not None
            model = _validate(MODELS[type_id][0], data)
        elif op == "update":
            current = manager.require(entity_id)
            type_id = type_of(False) or current.type_id
            model = _validate(MODELS[type_id][1], data)
        else:
            manager.require(entity_id)
            type_id = type_of(True)
            assert type_id is not None
            model = _validate(MODELS[type_id][2], data)
            fields: dict[str, Any] = {
                name: getattr(model, name)
                for name in ("name", "role_attributes", "tags")
                if name in model.model_fields_set and getattr(model, name) is not None
            }
            fields["type_id"] = type_id
            fields[DETAILS_PATCH] = type_details(model, type_id, only_set=True)
            manager.update(entity_id, fields)
            return None
        fields = {
            "name": model.name,
            "type_id": type_id,
            "role_attributes": list(model.role_attributes or []),
            "tags": dict(model.tags or {}),
            "details": type_details(model, type_id),
        }
        if op == "create":
            return str(manager.create(fields).id)
        manager.update(entity_id, fields)
        return None

    return run


def render_diff(diff: AccessDiff, name: Callable[[str, str], str]) -> dict[str, Any]:
    """An access diff in wire form: each list cut at :data:`PAIR_LIMIT` (the engine lists no
    more: ``AccessManager.what_if``'s ``listed``), the counts exact (``AccessDiff.total``)."""
    pairs = ("services_added", "services_removed", "routers_added", "routers_removed")

    def services(found: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
        return [{"identityId": i, "serviceId": s, "type": t} for i, s, t in found[:PAIR_LIMIT]]

    def routers(found: list[tuple[str, str]]) -> list[dict[str, Any]]:
        return [{"identityId": i, "edgeRouterId": r} for i, r in found[:PAIR_LIMIT]]

    return {
        "summary": {
            "servicesAdded": diff.total("services_added"),
            "servicesRemoved": diff.total("services_removed"),
            "routersAdded": diff.total("routers_added"),
            "routersRemoved": diff.total("routers_removed"),
            "identities": diff.total("identities"),
            "policies": len(diff.policies),
        },
        "truncated": any(diff.total(p) > PAIR_LIMIT for p in pairs),
        "services": {"added": services(diff.services_added), "removed": services(diff.services_removed)},
        "routers": {"added": routers(diff.routers_added), "removed": routers(diff.routers_removed)},
        "policies": [
            {
                "kind": PATHS[p.kind],
                "id": p.id,
                "name": name(p.kind, p.id),
                "change": p.change,
                "linksAdded": p.links_added,
                "linksRemoved": p.links_removed,
                "accessAdded": p.access_added,
                "accessRemoved": p.access_removed,
            }
            for p in diff.policies[:PAIR_LIMIT]
        ],
        "identities": [
            {
                "id": c.id,
                "name": name("identity", c.id),
                "dialAdded": c.dial_added[:PAIR_LIMIT],
                "dialRemoved": c.dial_removed[:PAIR_LIMIT],
                "bindAdded": c.bind_added[:PAIR_LIMIT],
                "bindRemoved": c.bind_removed[:PAIR_LIMIT],
                "routersAdded": c.routers_added[:PAIR_LIMIT],
                "routersRemoved": c.routers_removed[:PAIR_LIMIT],
            }
            for c in diff.identities[:PAIR_LIMIT]
        ],
    }


def _created(created: Any) -> list[dict[str, Any]]:
    return [{"index": c.index, "kind": _path(c.kind), "id": c.id, "name": c.name} for c in created]


def _path(manager_kind: str) -> str:
    return next(path for path, kind in BATCH_KINDS.items() if kind == manager_kind)


class WhatIf:
    """The access diff a batch of management writes would make; nothing is written."""

    auth = ADMIN
    body_models = {"post": WhatIfRequest}
    responses = {"409": {"description": "the batch conflicts"}}

    def __init__(self, analysis: AnalysisManager, batches: Batches) -> None:
        self.analysis = analysis
        self.batches = batches
        self.names = _Names(analysis)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Evaluate a batch of writes: the exact access diff, at the current revision."""
        request = read_model(req, WhatIfRequest)
        answer = self.analysis.what_if(self.batches.operations(request.items), PAIR_LIMIT)
        ok(
            resp,
            {
                "revision": answer.revision,
                "changes": answer.changes,
                "created": _created(answer.created),
                **render_diff(answer.diff, self.names.with_created(answer.created)),
                "guardrails": render_verdicts(answer.guardrails),
            },
        )


class Apply:
    """Commit a batch of management writes if nothing access-relevant changed since its what-if."""

    auth = ADMIN
    body_models = {"post": ApplyRequest}
    responses = {"409": {"description": "access changed since the revision"}}

    def __init__(self, analysis: AnalysisManager, batches: Batches) -> None:
        self.analysis = analysis
        self.batches = batches
        self.names = _Names(analysis)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Apply a batch of writes atomically if access is as it was at ``revision``."""
        request = read_model(req, ApplyRequest)
        operations = self.batches.operations(request.items)
        try:
            answer = self.analysis.apply(operations, request.revision, PAIR_LIMIT)
        except StaleRevisionError as ex:
            cause: dict[str, Any] = {
                "reason": ex.reason,
                "field": "revision",
                "value": str(ex.revision),
                "revision": ex.revision,
                "currentRevision": ex.current,
            }
            if ex.diff is not None:
                cause["changes"] = render_diff(ex.diff, self.names)
            resp.status = falcon.HTTP_409
            resp.media = envelope(
                STALE_CODE, STALE_MESSAGE, str(getattr(req.context, "request_id", "")), cause
            )
            return
        ok(
            resp,
            {
                "revision": answer.revision,
                "appliedRevision": answer.applied_revision,
                "changes": answer.changes,
                "created": _created(answer.created),
                **render_diff(answer.diff, self.names.with_created(answer.created)),
            },
        )


class Swagger:
    """This API's Swagger 2.0 document, generated from its routes as the other APIs' are."""

    auth = NONE

    def __init__(self, ctrl: Any, table: list[Route]) -> None:
        self.ctrl = ctrl
        self.table = table

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """The Swagger 2.0 document of ``/analysis/v1``."""
        from api.spec import build_spec

        resp.media = build_spec(self.ctrl, "analysis", self.table)


class NotServed:
    """Every other path under ``/analysis/v1``: 404, to anyone."""

    auth = NONE

    def on_get(self, req: falcon.Request, resp: falcon.Response, rest: str = "") -> None:
        raise NotFoundError(f"{req.method} {req.path} is not an operation of {ANALYSIS_BASE}")

    on_post = on_put = on_patch = on_delete = on_head = on_get


def register(routes: Routes) -> None:
    """Mount ``/analysis/v1`` (after the management API: batch items use its families)."""
    analysis = analysis_for(routes.managers)
    batches = Batches(routes)
    table: list[Route] = []

    def mount(template: str, resource: Any) -> None:
        # raw: the analysis API is not OpenZiti's, and stays out of the operations' table
        routes.raw(ANALYSIS_BASE + template, resource)
        table.append(("analysis", template, resource, None))

    mount("/revision", Revision(analysis))
    mount("/identities/{id}/services/{service_id}", ExplainService(analysis))
    mount("/identities/{id}/edge-routers/{edge_router_id}", ExplainRouter(analysis))
    mount("/what-if", WhatIf(analysis, batches))
    mount("/apply", Apply(analysis, batches))
    mount_findings(routes, analysis, mount)  # findings, archive rules, advice, access tests
    mount_sql(routes, analysis, mount)  # SQL over access: /query, /export (docs/analysis.md §13)
    mount_stream(routes, analysis, mount)  # the access-change stream
    guardrails = Family(
        entity="guardrails",
        manager=analysis.guardrails,
        render=render_guardrail,
        symbols=GUARDRAIL_SYMBOLS,
        create_model=GuardrailCreate,
        update_model=GuardrailUpdate,
        patch_model=GuardrailPatch,
    )
    mount("/guardrails", FamilyCollection(guardrails))
    mount("/guardrails/{id}", FamilyItem(guardrails))
    violations = Family(
        entity="guardrail-violations",
        manager=analysis.violations,
        render=render_violation,
        symbols=VIOLATION_SYMBOLS,
    )
    mount("/guardrail-violations", FamilyCollection(violations))
    mount("/guardrail-violations/{id}", FamilyItem(violations))
    mount("/swagger.json", Swagger(routes.ctrl, table))
    not_served = NotServed()
    routes.raw(ANALYSIS_BASE, not_served)
    routes.raw(ANALYSIS_BASE + "/{rest:path}", not_served)
