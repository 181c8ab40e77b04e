"""The config types every OpenZiti controller ships with, and their JSON schemas.

Ids are OpenZiti's own (SDKs and tunnelers ask for ``g7cIWbcGg``/``NH5p4FpGR`` by id), so a client
built against OpenZiti finds the same types here. The schemas state the same rules as OpenZiti's
(draft-07 keywords, ``#/definitions`` references); they are composed from small helpers below.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

Schema = dict[str, Any]

UINT16_MAX = 65535
INT32_MAX = 2147483647


@dataclass(frozen=True)
class BuiltinConfigType:
    id: str
    name: str
    schema: Schema
    target: str = "service"

    @functools.cached_property
    def schema_text(self) -> str:
        """The schema as JSON text: what each new database's copy is made from."""
        return json.dumps(self.schema)


def ref(name: str, description: str | None = None) -> Schema:
    out: Schema = {"$ref": f"#/definitions/{name}"}
    if description:
        out["description"] = description
    return out


def obj(properties: Schema, required: list[str] | None = None, **extra: Any) -> Schema:
    """A closed object (no properties beyond ``properties``)."""
    out: Schema = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        out["required"] = required
    out.update(extra)
    return out


def non_empty_set_of(definition: str, description: str | None = None) -> Schema:
    """A non-empty array of distinct items, each matching ``#/definitions/<definition>``."""
    out: Schema = {"allOf": [ref("inhabitedSet"), {"items": ref(definition)}]}
    if description:
        out["description"] = description
    return out


def int_range(low: int, high: int | None = None, description: str | None = None) -> Schema:
    out: Schema = {"type": "integer", "minimum": low}
    if high is not None:
        out["maximum"] = high
    if description:
        out["description"] = description
    return out


# -- health checks (ziti-tunneler-server.v1, host.v1, host.v2) ----------------------------------
HEALTH_DEFINITIONS: Schema = {
    "duration": {"type": "string", "pattern": "[0-9]+(h|m|s|ms)"},
    "method": {"type": "string", "enum": ["GET", "POST", "PUT", "PATCH"]},
    "action": obj(
        {
            "trigger": {"type": "string", "enum": ["fail", "pass", "change"]},
            "consecutiveEvents": int_range(0, UINT16_MAX),
            "duration": ref("duration"),
            "action": {
                "type": "string",
                "pattern": "(mark (un)?healthy|increase cost [0-9]+|decrease cost [0-9]+|send event)",
            },
        },
        ["trigger", "action"],
    ),
    "actionList": {"type": "array", "items": ref("action"), "minItems": 1, "maxItems": 20},
    "portCheck": obj(
        {
            "interval": ref("duration"),
            "timeout": ref("duration"),
            "address": {"type": "string"},
            "actions": ref("actionList"),
        },
        ["interval", "timeout", "address"],
    ),
    "httpCheck": obj(
        {
            "url": {"type": "string"},
            "method": ref("method"),
            "body": {"type": "string"},
            "interval": ref("duration"),
            "timeout": ref("duration"),
            "actions": ref("actionList"),
            "expectStatus": int_range(100, 599),
            "expectInBody": {"type": "string"},
        },
        ["interval", "timeout", "url"],
    ),
    "portCheckList": {"type": "array", "items": ref("portCheck")},
    "httpCheckList": {"type": "array", "items": ref("httpCheck")},
}
HEALTH_PROPERTIES: Schema = {"portChecks": ref("portCheckList"), "httpChecks": ref("httpCheckList")}

# -- tunnel addresses, ports, protocols (intercept.v1, host.v1, host.v2) ------------------------
_ADDRESS_NOTE = (
    "Any intercept address: an IP address, a CIDR, a wildcard domain or a host name. Clients decide "
    "which kind an address is; anything that is not a valid IP, CIDR or wildcard is a DNS name."
)


def _translation(fmt: str, max_prefix: int) -> Schema:
    return obj(
        {
            "from": {"type": "string", "format": fmt},
            "to": {"type": "string", "format": fmt},
            "prefixLength": int_range(0, max_prefix),
        }
    )


TUNNEL_DEFINITIONS: Schema = {
    "dialAddress": {"type": "string", "format": "idn-hostname", "not": {"pattern": "^$"}},
    "listenAddress": {
        "type": "string",
        "format": "idn-hostname",
        "not": {"pattern": "^$"},
        "description": _ADDRESS_NOTE,
    },
    "inhabitedSet": {"type": "array", "minItems": 1, "uniqueItems": True},
    "portNumber": int_range(0, UINT16_MAX),
    "portRange": obj({"low": ref("portNumber"), "high": ref("portNumber")}, ["low", "high"]),
    "protocolName": {"type": "string", "enum": ["tcp", "udp"]},
    "timeoutSeconds": int_range(0, INT32_MAX),
    "proxyType": {"type": "string", "enum": ["http"], "description": "supported proxy types"},
    "proxyConfiguration": {
        "type": "object",
        "required": ["type", "address"],
        "properties": {
            "type": ref("proxyType", "The type of the proxy being used"),
            "address": {"type": "string", "description": "The address of the proxy in host:port format"},
        },
    },
    "ipv4AddressTranslation": _translation("ipv4", 32),
    "ipv6AddressTranslation": _translation("ipv6", 128),
    "addressTranslation": {"oneOf": [ref("ipv4AddressTranslation"), ref("ipv6AddressTranslation")]},
}

LISTEN_OPTIONS: Schema = obj(
    {
        "connectTimeoutSeconds": {
            **ref("timeoutSeconds", "Deprecated: use connectTimeout. Defaults to 5."),
            "deprecated": True,
        },
        "connectTimeout": ref("duration", "Timeout of outbound connections, default '5s'."),
        "maxConnections": int_range(1, description="defaults to 3"),
        "identity": {
            "type": "string",
            "description": "Bind the hosting terminator with this identity; '$tunneler_id.name' and "
            "'$tunneler_id.tag[tagName]' resolve against the hosting tunneler's identity.",
        },
        "bindUsingEdgeIdentity": {
            "type": "boolean",
            "description": "Same as identity='$tunneler_id.name'.",
        },
        "cost": int_range(0, UINT16_MAX, "defaults to 0"),
        "precedence": {
            "type": "string",
            "enum": ["default", "required", "failed"],
            "description": "defaults to 'default'",
        },
    }
)

DIAL_OPTIONS: Schema = obj(
    {
        "identity": {
            "type": "string",
            "description": "Dial the terminator of this identity; '$dst_protocol', '$dst_ip' and "
            "'$dst_port' resolve to the intercepted destination.",
        },
        "connectTimeoutSeconds": ref(
            "timeoutSeconds", "5 without dialOptions, 15 when dialOptions are given without it"
        ),
    }
)


def _forward_flag(what: str) -> Schema:
    return {
        "type": "boolean",
        "enum": [True],
        "description": f"Dial the {what} the client tunneler intercepted (excludes the fixed {what}).",
    }


def _either(flag: str, allowed: str, fixed: str) -> Schema:
    """``flag: true`` requires the ``allowed`` list; otherwise the ``fixed`` value is required."""
    return {
        "if": {"properties": {flag: {"const": True}}, "required": [flag]},
        "then": {"required": [allowed]},
        "else": {"required": [fixed]},
    }


#: host.v1 without ``$id`` and ``definitions`` (host.v2 reuses it for each terminator).
HOST_TERMINATOR: Schema = obj(
    {
        **HEALTH_PROPERTIES,
        "protocol": ref("protocolName", "Dial this protocol."),
        "forwardProtocol": _forward_flag("protocol"),
        "allowedProtocols": non_empty_set_of("protocolName", "Protocols that may be forwarded"),
        "address": ref("dialAddress", "Dial this IP address or host name."),
        "forwardAddress": _forward_flag("address"),
        "allowedAddresses": non_empty_set_of("listenAddress", "Addresses that may be forwarded"),
        "forwardAddressTranslations": non_empty_set_of(
            "addressTranslation", "Translate forwarded addresses by this table"
        ),
        "port": ref("portNumber", "Dial this port."),
        "forwardPort": _forward_flag("port"),
        "allowedPortRanges": non_empty_set_of("portRange", "Ports that may be forwarded"),
        "allowedSourceAddresses": non_empty_set_of(
            "listenAddress", "Source addresses the hosting tunneler routes locally so binds succeed"
        ),
        "proxy": ref("proxyConfiguration", "Send outgoing connections through this proxy"),
        "listenOptions": LISTEN_OPTIONS,
    },
    allOf=[
        _either("forwardProtocol", "allowedProtocols", "protocol"),
        _either("forwardAddress", "allowedAddresses", "address"),
        _either("forwardPort", "allowedPortRanges", "port"),
    ],
)

HOST_DEFINITIONS: Schema = {**HEALTH_DEFINITIONS, **TUNNEL_DEFINITIONS}

INTERCEPT_V1: Schema = {
    "$id": "http://edge.openziti.org/schemas/intercept.v1.config.json",
    "definitions": TUNNEL_DEFINITIONS,
    **obj(
        {
            "dialOptions": DIAL_OPTIONS,
            "protocols": non_empty_set_of("protocolName"),
            "addresses": non_empty_set_of("listenAddress"),
            "portRanges": non_empty_set_of("portRange"),
            "sourceIp": {
                "type": "string",
                "description": "Source IP (and optional :port) to present when the hosting tunneler "
                "egresses the connection; may use $tunneler_id.name, $tunneler_id.tag[name], $src_ip, "
                "$src_port and $dst_port.",
            },
            "allowedSourceAddresses": non_empty_set_of(
                "listenAddress", "Source IPs/CIDRs that may be intercepted (all when absent)"
            ),
        },
        ["protocols", "addresses", "portRanges"],
    ),
}

HOST_V1: Schema = {
    "$id": "http://ziti-edge.netfoundry.io/schemas/host.v1.schema.json",
    "definitions": HOST_DEFINITIONS,
    **HOST_TERMINATOR,
}

HOST_V2: Schema = {
    "$id": "http://ziti-edge.netfoundry.io/schemas/host.v2.schema.json",
    "definitions": {
        **HOST_DEFINITIONS,
        "terminator": HOST_TERMINATOR,
        "terminatorList": {"type": "array", "minItems": 1, "items": ref("terminator")},
    },
    **obj({"terminators": ref("terminatorList")}, ["terminators"]),
}

TUNNELER_CLIENT_V1: Schema = {
    "$id": "http://edge.openziti.org/schemas/ziti-tunneler-client.v1.config.json",
    **obj({"hostname": {"type": "string"}, "port": int_range(0, UINT16_MAX)}, ["hostname", "port"]),
}

TUNNELER_SERVER_V1: Schema = {
    "$id": "http://edge.openziti.org/schemas/ziti-tunneler-server.v1.config.json",
    "definitions": HEALTH_DEFINITIONS,
    **obj(
        {
            "protocol": {"type": ["string", "null"], "enum": ["tcp", "udp"]},
            "hostname": {"type": "string"},
            "port": int_range(0, UINT16_MAX),
            **HEALTH_PROPERTIES,
        },
        ["hostname", "port"],
    ),
}

PROXY_V1: Schema = {
    "$id": "https://netfoundry.io/schemas/proxy.v1.config.json",
    "definitions": {
        "protocol": {"type": "string", "enum": ["tcp", "udp"], "description": "Network protocol"}
    },
    **obj(
        {
            "port": {
                "type": "number",
                "minimum": 1,
                "maximum": UINT16_MAX,
                "description": "The port to listen on",
            },
            "protocols": {"type": "array", "minItems": 1, "items": ref("protocol")},
            "binding": {"type": "string"},
        },
        ["port", "protocols"],
    ),
}

INTERFACES_V1: Schema = {
    "$id": "https://netfoundry.io/schemas/interfaces.v1.config.json",
    "definitions": HEALTH_DEFINITIONS,
    **obj({"interfaces": {"type": "array", "items": {"type": "string"}}}, ["interfaces"]),
}

BUILTIN_CONFIG_TYPES: tuple[BuiltinConfigType, ...] = (
    BuiltinConfigType("f2dd2df0-9c04-4b84-a91e-71437ac229f1", "ziti-tunneler-client.v1", TUNNELER_CLIENT_V1),
    BuiltinConfigType("cea49285-6c07-42cf-9f52-09a9b115c783", "ziti-tunneler-server.v1", TUNNELER_SERVER_V1),
    BuiltinConfigType("g7cIWbcGg", "intercept.v1", INTERCEPT_V1),
    BuiltinConfigType("NH5p4FpGR", "host.v1", HOST_V1),
    BuiltinConfigType("host.v2", "host.v2", HOST_V2),
    BuiltinConfigType("interfaces.v1", "interfaces.v1", INTERFACES_V1),
    BuiltinConfigType("proxy.v1", "proxy.v1", PROXY_V1),
)

INTERCEPT_V1_ID = "g7cIWbcGg"
HOST_V1_ID = "NH5p4FpGR"
