"""The Swagger 2.0 document of what Trellis implements, generated from its routes and schemas.

Served at ``/specs/{id}/spec`` and ``{base}/swagger.json``. Paths come from the routes that are
actually registered; request bodies from the pydantic models the resources read. A resource
names its body models in ``body_models`` (``{"post": Model}``, keyed by verb or
``verb_suffix``), or through its ``family``.
"""

from __future__ import annotations

import re
from typing import Any

from api.controller import CLIENT_BASE, FABRIC_BASE, MANAGEMENT_BASE, Controller
from api.middleware import NONE
from api.resources import has_responder
from api.routing import Route

_VERBS = ("get", "post", "put", "patch", "delete")
_PARAM = re.compile(r"{(\w+)}")

_TITLES = {
    "client": "Ziti Edge Client",
    "management": "Ziti Edge Management",
    "fabric": "Ziti Fabric",
    "analysis": "Trellis Access Analysis",
}
_BASES = {
    "client": CLIENT_BASE,
    "management": MANAGEMENT_BASE,
    "fabric": FABRIC_BASE,
    "analysis": "/analysis/v1",
}


def _body_models(resource: Any) -> dict[str, Any]:
    models = dict(getattr(resource, "body_models", {}) or {})
    family = getattr(resource, "family", None)
    if family is not None:
        kind = type(resource).__name__
        if kind.endswith("Collection") and family.create_model is not None:
            models.setdefault("post", family.create_model)
        if kind.endswith("Item"):
            if family.update_model is not None:
                models.setdefault("put", family.update_model)
            if family.patch_model is not None:
                models.setdefault("patch", family.patch_model)
    return models


def _swagger_bounds(schema: Any) -> Any:
    """``schema`` with JSON Schema's numeric ``exclusiveMinimum``/``exclusiveMaximum`` (what
    pydantic writes for ``gt``/``lt``) in Swagger 2.0's form: ``minimum``/``maximum`` and a
    boolean, as Swagger 2.0 tools (schemathesis among them) require."""
    if isinstance(schema, list):
        return [_swagger_bounds(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _swagger_bounds(value) for key, value in schema.items()}
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = out.get(exclusive)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[bound] = value
            out[exclusive] = True
    return out


def _schema_ref(model: Any, definitions: dict[str, Any]) -> dict[str, Any]:
    schema = _swagger_bounds(model.model_json_schema(by_alias=True, ref_template="#/definitions/{model}"))
    for name, sub in schema.pop("$defs", {}).items():
        definitions[name] = sub
    definitions[model.__name__] = schema
    return {"$ref": f"#/definitions/{model.__name__}"}


def _operation(
    api: str, template: str, verb: str, resource: Any, suffix: str | None, definitions: dict[str, Any]
) -> dict[str, Any]:
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "type": "string"} for name in _PARAM.findall(template)
    ]
    is_list = verb == "get" and not template.endswith("}") and type(resource).__name__.endswith("Collection")
    if is_list:
        params += [
            {"name": "limit", "in": "query", "type": "integer"},
            {"name": "offset", "in": "query", "type": "integer"},
            {"name": "filter", "in": "query", "type": "string"},
        ]
    key = verb if suffix is None else f"{verb}_{suffix}"
    model = _body_models(resource).get(key)
    if model is not None:
        params.append(
            {"name": "body", "in": "body", "required": True, "schema": _schema_ref(model, definitions)}
        )
    responder = getattr(resource, f"on_{key}")
    doc = (responder.__doc__ or type(resource).__doc__ or "").strip().splitlines()
    op: dict[str, Any] = {
        "operationId": f"{key}{_camel(template)}",
        "summary": doc[0] if doc else f"{verb.upper()} {template}",
        "parameters": params,
        "responses": {
            _success(verb, template, resource): {"description": "success"},
            "400": {"description": "bad request"},
            "401": {"description": "unauthorized"},
            "404": {"description": "not found"},
            **getattr(resource, "responses", {}),
        },
    }
    if getattr(resource, "auth", "admin") != NONE:
        op["security"] = [{"ztSession": []}]
    else:
        op["security"] = []
    # what a resource declares of its own for this operation: more parameters, media types
    extra = dict(getattr(resource, "operation_spec", {}).get(key, {}))
    params.extend(extra.pop("parameters", []))
    op.update(extra)
    return op


def _success(verb: str, template: str, resource: Any) -> str:
    creates = verb == "post" and type(resource).__name__.endswith("Collection")
    return "201" if creates else "200"


def _camel(template: str) -> str:
    words = re.split(r"[/\-{}.]+", template)
    return "".join(w[:1].upper() + w[1:] for w in words if w)


def build_spec(ctrl: Controller, api: str, routes: list[Route]) -> dict[str, Any]:
    """The Swagger 2.0 document of ``api`` ("client", "management" or "fabric") from its ``routes``."""
    paths: dict[str, dict[str, Any]] = {}
    definitions: dict[str, Any] = {}
    for route_api, template, resource, suffix in routes:
        if route_api != api:
            continue
        for verb in _VERBS:
            name = f"on_{verb}" if suffix is None else f"on_{verb}_{suffix}"
            if has_responder(resource, name):
                paths.setdefault(template or "/", {})[verb] = _operation(
                    api, template, verb, resource, suffix, definitions
                )
    return {
        "swagger": "2.0",
        "info": {"title": _TITLES[api], "version": ctrl.version_trellis},
        "basePath": _BASES[api],
        "schemes": ["https"],
        "consumes": ["application/json"],
        "produces": ["application/json"],
        "securityDefinitions": {"ztSession": {"type": "apiKey", "in": "header", "name": "zt-session"}},
        "paths": dict(sorted(paths.items())),
        "definitions": dict(sorted(definitions.items())),
    }
