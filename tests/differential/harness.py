"""Drive OpenZiti v1.6.0 and Trellis with the same requests and compare their answers.

A :class:`Step` is one request: method, path, body and who sends it, with ``{name}``
placeholders that each side fills from its own values (the admin's token, an id its answer to an
earlier step gave). Both sides run every step in the same order; their answers are compared as
:func:`compare` says and every difference is a :class:`Difference` with a stable key
(``step``, ``aspect``, ``where``): the deviation list in docs/api.md §15 names those keys.

What is compared, after normalising (ids, tokens and other values each side makes itself are
replaced by the name they were saved under, times by ``<time>``):

- the status, and for errors the ``error.code`` and ``error.cause.field``;
- the keys of the envelope and, recursively, of ``data`` (an object's keys; a list's items are
  compared by the union of their keys, so lists of different lengths still compare);
- with ``values=True`` (the default for single objects), the values of those keys too.
"""

from __future__ import annotations

import contextlib
import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import requests

#: RFC 3339 times as both servers write them.
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")

#: Keys whose values each server makes its own way (compared by type only).
VOLATILE_KEYS = frozenset(
    {
        "token",
        "jwt",
        "certPem",
        "fingerprint",
        "unverifiedCertPem",
        "unverifiedFingerprint",
        "enrollmentJwt",
        "enrollmentToken",
        "provisioningUrl",
        "recoveryCodes",
        "ipAddress",
        "version",
        "revision",
        "buildDate",
        "os",
        "arch",
        "apiVersions",
        "capabilities",
        "hostname",
        "supportedProtocols",
        "urls",
        "listenerAddresses",
        "ctrlChanListeners",
        "href",
        "cert",
        "ca",
        "serverCert",
        "expirationSeconds",
        "expiresAt",
        "expiresAtDuration",
        "expirationDuration",
        "cachedLastActivityAt",
        "lastActivityAt",
        "authenticatorId",
        "issuer",
        "audience",
    }
)


#: A list's symbols: compared one by one (``extra-symbol``, ``missing-symbol``), whatever the
#: step compares.
SYMBOLS = "meta.filterableFields"


class Side(Protocol):
    """A server the steps run against: Trellis's :class:`tests.e2e.server.Server` or
    :class:`tests.e2e.openziti.OpenZiti`."""

    def call(self, method: str, path: str, token: str | None = None, **kwargs: Any) -> requests.Response: ...


@dataclass
class Answer:
    status: int
    body: Any
    headers: Mapping[str, str]


@dataclass
class Step:
    """One request, run on both sides.

    ``who`` names the value (saved earlier) sent as ``zt-session``, or None for no token.
    ``save`` maps names to paths (``data.id``, ``data.enrollment.ott.token``) of values to keep
    from this side's answer. ``values`` compares values, not only keys; ``compare`` False runs
    the step without comparing (set-up whose answers are compared elsewhere). ``cert`` names a
    saved client certificate (a pair of file names) to present.
    """

    name: str
    method: str
    path: str
    who: str | None = "admin"
    body: Any = None
    params: Mapping[str, str] | None = None
    headers: Mapping[str, str] | None = None
    data: str | None = None
    save: Mapping[str, str] = field(default_factory=dict)
    values: bool = True
    compare: bool = True
    cert: str | None = None
    #: Run once the answers are in, on each side's answer: set-up that needs code (a CSR, TOTP).
    after: Callable[[Context, Answer], None] | None = None


@dataclass
class Context:
    """One side's values: saved names -> values, and the values it made -> their names."""

    side: Side
    label: str
    values: dict[str, Any] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)

    def keep(self, name: str, value: Any) -> None:
        self.values[name] = value
        if isinstance(value, str) and value and value not in self.names:
            self.names[value] = name

    def value(self, name: str) -> Any:
        """A saved value; one an earlier answer lacked is a marker (that answer's comparison shows why)."""
        return self.values.get(name, f"<no {name}>")

    def fill(self, template: Any) -> Any:
        if isinstance(template, str):
            whole = _PLACEHOLDER.fullmatch(template)
            if whole:
                return self.value(whole.group(1))
            return _PLACEHOLDER.sub(lambda m: str(self.value(m.group(1))), template)
        if isinstance(template, list):
            return [self.fill(t) for t in template]
        if isinstance(template, dict):
            return {self.fill(k): self.fill(v) for k, v in template.items()}
        return template


@dataclass(frozen=True)
class Difference:
    step: str
    aspect: str  # status, code, field, extra, missing, value, type, extra-symbol, missing-symbol
    where: str  # a dotted path in the answer ("" for the status)
    trellis: str
    openziti: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.step, self.aspect, self.where)

    def __str__(self) -> str:
        return f"{self.step} {self.aspect} {self.where}: trellis {self.trellis} | openziti {self.openziti}"


def dig(body: Any, path: str) -> Any:
    here = body
    for part in path.split("."):
        if isinstance(here, list):
            here = here[int(part)]
        elif isinstance(here, dict):
            here = here[part]
        else:
            raise KeyError(path)
    return here


def run(ctx: Context, step: Step) -> Answer:
    kwargs: dict[str, Any] = {}
    if step.body is not None:
        kwargs["json"] = ctx.fill(step.body)
    if step.data is not None:
        kwargs["data"] = ctx.fill(step.data)
    if step.params:
        kwargs["params"] = ctx.fill(dict(step.params))
    if step.headers:
        kwargs["headers"] = ctx.fill(dict(step.headers))
    if step.cert and step.cert in ctx.values:
        kwargs["cert"] = tuple(ctx.values[step.cert])
    token = ctx.values.get(step.who) if step.who else None
    response = ctx.side.call(step.method, ctx.fill(step.path), token, **kwargs)
    try:
        body = response.json() if response.content else None
    except ValueError:
        body = {"<text>": response.text[:200]}
    answer = Answer(response.status_code, body, response.headers)
    for name, path in step.save.items():
        with contextlib.suppress(KeyError, IndexError, ValueError, TypeError):
            ctx.keep(name, dig(body, path))  # else the comparison shows the answer that lacks it
    _learn_ids(ctx, step.name, body)
    if step.after is not None:
        step.after(ctx, answer)
    return answer


def _learn_ids(ctx: Context, step: str, body: Any) -> None:
    """Every ``id`` a side's answer shows gets a name, so that both sides' ids compare equal:
    ``<step>:<path>`` the first time it is seen."""

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            value = node.get("id")
            if isinstance(value, str) and value not in ctx.names:
                ctx.names[value] = f"{step}:{where}"
            for key, child in node.items():
                walk(child, f"{where}.{key}" if where else key)
        elif isinstance(node, list):
            for i, child in enumerate(node):
                walk(child, f"{where}.{i}")

    walk(body, "")


def _normal(ctx: Context, value: Any) -> Any:
    if isinstance(value, str):
        if value in ctx.names:
            return f"<{ctx.names[value]}>"
        if _TIME.match(value):
            return "<time>"
        for known, name in ctx.names.items():
            if len(known) >= 8 and known in value:
                value = value.replace(known, f"<{name}>")
        return value
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


def compare(
    step: Step, trellis: tuple[Context, Answer], openziti: tuple[Context, Answer]
) -> list[Difference]:
    (tctx, t), (octx, o) = trellis, openziti
    found: list[Difference] = []

    def differ(aspect: str, where: str, tv: Any, ov: Any) -> None:
        found.append(Difference(step.name, aspect, where, _show(tv), _show(ov)))

    if t.status != o.status:
        differ("status", "", t.status, o.status)
    terr = t.body.get("error") if isinstance(t.body, dict) else None
    oerr = o.body.get("error") if isinstance(o.body, dict) else None
    if isinstance(terr, dict) or isinstance(oerr, dict):
        terr = terr if isinstance(terr, dict) else {}
        oerr = oerr if isinstance(oerr, dict) else {}
        if terr.get("code") != oerr.get("code"):
            differ("code", "error.code", terr.get("code"), oerr.get("code"))
        tcause = terr.get("cause") if isinstance(terr.get("cause"), dict) else {}
        ocause = oerr.get("cause") if isinstance(oerr.get("cause"), dict) else {}
        if tcause.get("field") != ocause.get("field"):
            differ("field", "error.cause.field", tcause.get("field"), ocause.get("field"))
        return found  # the rest of an error's envelope (messages, causes) is each server's prose
    if t.status != o.status:
        return found

    def walk(tv: Any, ov: Any, where: str, values: bool, merged: bool = False) -> None:
        if isinstance(tv, dict) and isinstance(ov, dict):
            for key in sorted(set(tv) | set(ov)):
                here = f"{where}.{key}" if where else key
                if key not in ov:
                    differ("extra", here, tv[key], "-")
                elif key not in tv:
                    differ("missing", here, "-", ov[key])
                elif here == SYMBOLS and isinstance(tv[key], list) and isinstance(ov[key], list):
                    for symbol in sorted(set(map(str, tv[key])) ^ set(map(str, ov[key]))):
                        if symbol in tv[key]:
                            differ("extra-symbol", f"{here}.{symbol}", "filters on it", "-")
                        else:
                            differ("missing-symbol", f"{here}.{symbol}", "-", "filters on it")
                else:
                    walk(tv[key], ov[key], here, values and key not in VOLATILE_KEYS, merged)
            return
        if isinstance(tv, list) and isinstance(ov, list):
            tmerged, omerged = _merged_items(tv), _merged_items(ov)
            if tmerged is not None and omerged is not None:  # objects (or empty): their keys
                walk(tmerged, omerged, f"{where}[]", False, True)
                if values and len(tv) != len(ov):
                    differ("value", where, f"{len(tv)} items", f"{len(ov)} items")
            elif values and sorted(repr(_normal(tctx, x)) for x in tv) != sorted(
                repr(_normal(octx, x)) for x in ov
            ):  # scalars, in any order (role attributes, ...)
                differ("value", where, tv, ov)
            return
        if _kind(tv) != _kind(ov) and not (merged and (tv is None or ov is None)):
            differ("type", where, tv, ov)
            return
        if values and _normal(tctx, tv) != _normal(octx, ov):
            differ("value", where, tv, ov)

    walk(t.body, o.body, "", step.values)
    return found


def _merged_items(items: list[Any]) -> dict[str, Any] | None:
    """A list of objects as one object holding every key any item has, objects merged the same
    way and otherwise the first value that is not null."""
    if not items or not all(isinstance(i, dict) for i in items):
        return None if items else {}
    merged: dict[str, Any] = {}
    for item in items:
        for key, value in item.items():
            held = merged.get(key)
            if isinstance(held, dict) and isinstance(value, dict):
                merged[key] = _merged_items([held, value])
            elif held is None:
                merged[key] = value
    return merged


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


@dataclass(frozen=True)
class Allowed:
    """A row of the deviation list: ``step`` and ``where`` are shell patterns (``*``, ``?``)."""

    step: str
    aspect: str
    where: str
    reason: str

    def matches(self, difference: Difference) -> bool:
        return (
            _glob(self.step, difference.step)
            and self.aspect == difference.aspect
            and _glob(self.where, difference.where)
        )


def _glob(pattern: str, text: str) -> bool:
    return fnmatch.fnmatchcase(text, pattern)


def read_allowed(markdown: str, heading: str) -> list[Allowed]:
    """The rows of the table under ``heading`` (``| step | aspect | where | why |``)."""
    rows: list[Allowed] = []
    inside = False
    for line in markdown.splitlines():
        if line.startswith("#"):
            inside = line.strip().startswith(heading)
            continue
        if not inside or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or cells[0] in ("step", "") or set(cells[0]) <= {"-", ":"}:
            continue
        step, aspect, where = (c.strip("`") for c in cells[:3])
        rows.append(Allowed(step, aspect, where, cells[3]))
    return rows


def split(
    differences: Iterable[Difference], allowed: list[Allowed]
) -> tuple[list[Difference], list[Allowed]]:
    """The differences no row allows, and the rows that allowed nothing."""
    used: set[int] = set()
    unlisted: list[Difference] = []
    for difference in differences:
        hits = [i for i, row in enumerate(allowed) if row.matches(difference)]
        if hits:
            used.update(hits)
        else:
            unlisted.append(difference)
    return unlisted, [row for i, row in enumerate(allowed) if i not in used]
