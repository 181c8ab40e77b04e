"""OpenZiti's upstream Swagger 2.0 specs (``../shared/spec/{client,management}.yml``) as the JSON
schemathesis is pointed at, with the fix-ups they need (docs/api.md §13).

The YAML files are go-swagger's flattened output, copied unchanged. Two kinds of change are made,
each below with the reason:

- numbers: every ``!!float`` in these files is an integer of the source spec that go-swagger's
  flatten re-serialised as a float: length, item-count and property-count bounds
  (``maxLength: !!float 255``, which JSON Schema requires to be integers: schemathesis rejects
  ``255.0``), the ``minimum``/``maximum`` of ``type: integer`` fields (``cost``, ``mtu``), and
  example values of integer fields (``cost: !!float 0``). All of them become ints; a
  non-integral float would be kept (there is none).
- spec quirks: places where the spec describes answers that OpenZiti's own controller does not
  give (its generated Go models differ from the spec), so that a faithful answer fails the schema
  check. Each fix-up checks that what it fixes is there, so a newer spec that no longer has the
  quirk fails here and the fix-up can be dropped.

Trellis's own deviations are not fixed up here: they are listed, with reasons, in ``baseline.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

#: The two APIs fuzzed, by the spec file's stem.
APIS = ("client", "management")

Json = Any


#: libyaml's parser when PyYAML was built with it: four times faster on the 1.3 MB management spec,
#: which several tests load.
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeLoader):  # type: ignore[misc]
    """PyYAML's safe loader less the implicit timestamp: an unquoted date stays the string it is
    in the spec (JSON has no dates; ``default=str`` would rewrite ``2020-03-09T19:04:21Z``)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _SafeLoader.yaml_implicit_resolvers.items()
}


def load_yaml(path: Path) -> dict[str, Json]:
    with path.open(encoding="utf-8") as handle:
        document = yaml.load(handle, Loader=_Loader)
    if not isinstance(document, dict):
        raise ValueError(f"{path}: not a mapping")
    return document


def integral_numbers(node: Json) -> Json:
    """``node`` with every integral float turned into an int (see the module docstring)."""
    if isinstance(node, dict):
        out: dict[str, Json] = {}
        for key, value in node.items():
            if not isinstance(key, str):
                raise ValueError(f"non-string key {key!r}: YAML 1.1 read a key as another type")
            out[key] = integral_numbers(value)
        return out
    if isinstance(node, list):
        return [integral_numbers(item) for item in node]
    if isinstance(node, float) and node.is_integer():
        return int(node)
    return node


# -- spec quirks --------------------------------------------------------------------------------------
def _definition(spec: dict[str, Json], name: str) -> dict[str, Json]:
    definitions: dict[str, Json] = spec["definitions"]
    if name not in definitions:
        raise KeyError(f"spec fix-up: definitions.{name} is gone from the spec")
    found: dict[str, Json] = definitions[name]
    return found


def _block_with(model: dict[str, Json], key: str) -> dict[str, Json]:
    """The ``allOf`` member of ``model`` (or the model itself) that has ``key``."""
    for block in [model, *model.get("allOf", [])]:
        if key in block:
            found: dict[str, Json] = block
            return found
    raise KeyError(f"spec fix-up: no block with {key!r}")


def _relative_link_hrefs(spec: dict[str, Json]) -> None:
    # link.href is `format: uri`, but OpenZiti (and so Trellis) writes relative references
    # ("./services/<id>"), which are not RFC 3986 URIs (no scheme): every `_links` fails.
    href = _definition(spec, "link")["properties"]["href"]
    assert href.get("format") == "uri", href
    href["format"] = "uri-reference"


def _service_config_any_json(spec: dict[str, Json]) -> None:
    # serviceDetail.config is "config type name -> config data", declared as a map of maps of
    # objects; the data is whatever the config type's JSON schema allows (intercept.v1 has arrays
    # of strings and numbers), and OpenZiti's Go model is map[string]map[string]interface{}.
    config = _block_with(_definition(spec, "serviceDetail"), "properties")["properties"]["config"]
    inner = config["additionalProperties"]
    assert inner["additionalProperties"] == {"type": "object"}, inner
    inner["additionalProperties"] = {}


def _sub_tags_any_json(spec: dict[str, Json]) -> None:
    # subTags (a tag value nested in tags) is declared `type: object`, but tags are free JSON
    # (strings, numbers, booleans, null): OpenZiti's Go type is map[string]interface{}.
    sub_tags = _definition(spec, "subTags")
    assert sub_tags["additionalProperties"] == {"type": "object"}, sub_tags
    sub_tags["additionalProperties"] = {}


def _required_without_property(spec: dict[str, Json], model: str, names: tuple[str, ...]) -> None:
    block = _block_with(_definition(spec, model), "required")
    missing = [name for name in names if name in block["required"] and name not in block["properties"]]
    assert missing == list(names), (model, block["required"])
    block["required"] = [name for name in block["required"] if name not in names]


def _api_session_cached_updated_at(spec: dict[str, Json]) -> None:
    # apiSessionDetail requires `cachedUpdatedAt`, a name with no property (the model has
    # `cachedLastActivityAt`); OpenZiti's generated Go model has no such field and never sends it.
    _required_without_property(spec, "apiSessionDetail", ("cachedUpdatedAt",))


def _edge_router_version_fields(spec: dict[str, Json]) -> None:
    # edgeRouterDetail requires os, version, arch, buildDate and revision, which have no property:
    # they live in the nested `versionInfo`, and OpenZiti's Go model has no top-level fields.
    _required_without_property(spec, "edgeRouterDetail", ("os", "version", "arch", "buildDate", "revision"))


def _nullable(spec: dict[str, Json], model: str, names: tuple[str, ...]) -> None:
    properties = _block_with(_definition(spec, model), "properties")["properties"]
    for name in names:
        assert name in properties, (model, name)
        assert not properties[name].get("x-nullable"), (model, name)
        properties[name]["x-nullable"] = True


def _router_fingerprint_null(spec: dict[str, Json]) -> None:
    # routerDetail.fingerprint is a required string, but a transit router that has not enrolled has
    # none: OpenZiti's MapTransitRouterToRestModel passes the model's *string, so the answer is null.
    _nullable(spec, "routerDetail", ("fingerprint",))


def _signer_optional_strings_null(spec: dict[str, Json]) -> None:
    # externalJwtSignerDetail requires these strings, but they are optional on create and OpenZiti's
    # MapExternalJwtSignerToRestModel passes the model's *string fields: unset ones are null.
    _nullable(
        spec,
        "externalJwtSignerDetail",
        ("audience", "claimsProperty", "clientId", "externalAuthUrl", "fingerprint", "kid"),
    )


def _client_signer_auth_url_null(spec: dict[str, Json]) -> None:
    # The client API's signer view: externalAuthUrl is the same optional *string (null when unset).
    _nullable(spec, "clientExternalJwtSignerDetail", ("externalAuthUrl",))


def _integrity_check_times_null(spec: dict[str, Json]) -> None:
    # dataIntegrityCheckDetails requires error, startTime and endTime, but before a first check (and
    # without an error) OpenZiti's GetCheckProgress passes nil pointers for them: null.
    _nullable(spec, "dataIntegrityCheckDetails", ("error", "startTime", "endTime"))


def _edge_router_serp_list(spec: dict[str, Json]) -> None:
    # GET /edge-routers/{id}/service-edge-router-policies lists service edge router policies (as
    # /services/{id}/service-edge-router-policies does: OpenZiti's handler maps them with
    # MapServiceEdgeRouterPolicyToRestEntity), but the spec names the service policies' envelope.
    answer = spec["paths"]["/edge-routers/{id}/service-edge-router-policies"]["get"]["responses"]["200"]
    assert answer["schema"] == {"$ref": "#/definitions/listServicePoliciesEnvelope"}, answer["schema"]
    answer["schema"] = {"$ref": "#/definitions/listServiceEdgeRouterPoliciesEnvelope"}


Fixup = Callable[[dict[str, Json]], None]
#: Per API, the fix-ups applied after the numbers are made integral.
FIXUPS: dict[str, tuple[Fixup, ...]] = {
    "client": (
        _relative_link_hrefs,
        _service_config_any_json,
        _sub_tags_any_json,
        _api_session_cached_updated_at,
        _client_signer_auth_url_null,
    ),
    "management": (
        _relative_link_hrefs,
        _service_config_any_json,
        _sub_tags_any_json,
        _api_session_cached_updated_at,
        _edge_router_version_fields,
        _router_fingerprint_null,
        _signer_optional_strings_null,
        _integrity_check_times_null,
        _edge_router_serp_list,
    ),
}


def converted(spec_dir: Path, api: str) -> dict[str, Json]:
    """The spec of ``api`` (see :data:`APIS`), made integral and fixed up."""
    spec: dict[str, Json] = integral_numbers(load_yaml(spec_dir / f"{api}.yml"))
    for fix in FIXUPS[api]:
        fix(spec)
    return spec


def write_json(spec_dir: Path, api: str, out_dir: Path) -> Path:
    """:func:`converted` written to ``out_dir/<api>.json``; its path."""
    target = out_dir / f"{api}.json"
    target.write_text(json.dumps(converted(spec_dir, api)), encoding="utf-8")
    return target


def floats(node: Json, where: str = "") -> list[str]:
    """Where ``node`` still holds a float (for the conversion's own test)."""
    if isinstance(node, dict):
        return [hit for key, value in node.items() for hit in floats(value, f"{where}/{key}")]
    if isinstance(node, list):
        return [hit for i, value in enumerate(node) for hit in floats(value, f"{where}/{i}")]
    return [where] if isinstance(node, float) else []
