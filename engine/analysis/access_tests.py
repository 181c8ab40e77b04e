"""Access tests: expectations about who may reach what, checked against the policy
(docs/analysis.md §8, ``trellis test-access FILE``, ``POST /analysis/v1/access-tests``).

A test file (YAML for the CLI, the same structure as JSON for the API) is a list of
expectations, or a mapping with one key ``expectations`` holding that list. Each is a mapping
with one of these keys (entities are named by name or id):

- ``can_dial`` / ``cannot_dial`` / ``can_bind`` / ``cannot_bind``: ``{identity, service}``
  (``service`` may be a list: one expectation per service);
- ``reaches_router``: ``{identity, router}`` (``router`` may be a list);
- ``expected_access``: ``{identity, dial: [...], bind: [...]}``: exactly these services, no more
  and no fewer (a type left out is not checked).

``can_dial`` holds when the identity could open a Dial session as far as the policy decides: a
Dial service policy grants it, the identity and the service share an edge router (online or not:
session creation does not ask), and the identity is not disabled. Posture and which routers are
online change without a write and are left to explain (§2). ``cannot_dial`` holds when
``can_dial`` does not. ``reaches_router`` holds when an edge router policy gives the identity the
router. ``expected_access`` compares the services the identity is granted by service policies.

The report names every failure with why, and the **coverage**: the policies that no expectation
exercised (a policy is exercised when it grants a pair a ``can_*`` or ``expected_access``
expectation holds, gives a router of such a pair, or links a ``reaches_router`` pair).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.analysis.advise import Bits
from engine.errors import FieldError
from engine.policy import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    IDENTITY,
    POLICY_FIELDS,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
    PolicyGraph,
)
from engine.policy.bitset import select, slots

__all__ = ["KINDS", "AccessReport", "Expectation", "Outcome", "parse_expectations", "run_access_tests"]

KINDS = ("can_dial", "cannot_dial", "can_bind", "cannot_bind", "reaches_router", "expected_access")
#: The most expectations one run takes (one file, one request).
MAX_EXPECTATIONS = 100_000

Resolver = Callable[[str, str], str | None]
"""(engine kind, name or id) -> the id, or None when nothing has that name or id."""
Names = Callable[[str, str], str]


@dataclass(frozen=True)
class Expectation:
    """One expectation: its position in the file, kind, identity and target(s)."""

    index: int
    kind: str
    identity: str
    target: str = ""
    dial: tuple[str, ...] | None = None
    bind: tuple[str, ...] | None = None

    @property
    def label(self) -> str:
        if self.kind == "expected_access":
            return f"expected_access {self.identity}"
        return f"{self.kind} {self.identity} -> {self.target}"


@dataclass(frozen=True)
class Outcome:
    expectation: Expectation
    passed: bool
    message: str = ""


@dataclass
class AccessReport:
    """The outcome of every expectation and the policies none exercised."""

    outcomes: list[Outcome]
    policies: int
    #: (policy kind, id, name) of the policies no expectation exercised, sorted.
    unexercised: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.passed]

    @property
    def passed(self) -> bool:
        return not self.failures

    def coverage_line(self) -> str:
        exercised = self.policies - len(self.unexercised)
        line = f"coverage: {exercised}/{self.policies} policies exercised"
        if self.unexercised:
            line += "; not exercised: " + ", ".join(f"{name} ({kind})" for kind, _, name in self.unexercised)
        return line

    def text(self) -> str:
        """The report a person reads: each failure, a summary and the coverage line."""
        lines = [f"FAIL #{o.expectation.index + 1} {o.expectation.label}: {o.message}" for o in self.failures]
        failed = len(self.failures)
        lines.append(
            f"{len(self.outcomes) - failed} passed, {failed} failed of {len(self.outcomes)} expectations"
        )
        lines.append(self.coverage_line())
        return "\n".join(lines) + "\n"

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "total": len(self.outcomes),
            "failed": len(self.failures),
            "failures": [
                {
                    "index": o.expectation.index,
                    "kind": o.expectation.kind,
                    "identity": o.expectation.identity,
                    "target": o.expectation.target,
                    "message": o.message,
                }
                for o in self.failures
            ],
            "coverage": {
                "policies": self.policies,
                "exercised": self.policies - len(self.unexercised),
                "unexercised": [{"kind": k, "id": i, "name": n} for k, i, n in self.unexercised],
            },
            "report": self.text(),
        }


def _names(value: Any, where: str) -> list[str]:
    if isinstance(value, str) and value:
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return list(value)
    raise FieldError(where, "must be a name or id, or a list of them", value)


def parse_expectations(doc: Any) -> list[Expectation]:
    """The expectations of a parsed file (a list, or ``{"expectations": [...]}``); a bad shape
    is a :class:`FieldError` naming where (``expectations[3].service``)."""
    if isinstance(doc, dict) and set(doc) == {"expectations"}:
        doc = doc["expectations"]
    if not isinstance(doc, list):
        raise FieldError("expectations", "must be a list of expectations", type(doc).__name__)
    if len(doc) > MAX_EXPECTATIONS:
        raise FieldError("expectations", f"at most {MAX_EXPECTATIONS} expectations", len(doc))
    out: list[Expectation] = []
    for index, item in enumerate(doc):
        where = f"expectations[{index}]"
        if not isinstance(item, dict) or len(item) != 1:
            raise FieldError(where, f"must be a mapping with one of {', '.join(KINDS)}", str(item)[:200])
        ((kind, body),) = item.items()
        if kind not in KINDS:
            raise FieldError(where, f"must be one of {', '.join(KINDS)}", kind)
        if not isinstance(body, dict):
            raise FieldError(f"{where}.{kind}", "must be a mapping", str(body)[:200])
        identity = body.get("identity")
        if not isinstance(identity, str) or not identity:
            raise FieldError(f"{where}.identity", "is required: a name or id", identity)
        if kind == "expected_access":
            dial = body.get("dial")
            bind = body.get("bind")
            if dial is None and bind is None:
                raise FieldError(where, "expected_access needs dial or bind (lists of services)")
            for name, value in (("dial", dial), ("bind", bind)):
                if value is not None and not (
                    isinstance(value, list) and all(isinstance(v, str) and v for v in value)
                ):
                    raise FieldError(f"{where}.{name}", "must be a list of service names or ids", value)
            out.append(
                Expectation(
                    index,
                    kind,
                    identity,
                    dial=None if dial is None else tuple(dial),
                    bind=None if bind is None else tuple(bind),
                )
            )
            continue
        key = "router" if kind == "reaches_router" else "service"
        for target in _names(body.get(key), f"{where}.{key}"):
            out.append(Expectation(index, kind, identity, target))
    return out


def _plain(kind: str, value: str) -> str:
    return value


def run_access_tests(
    graph: PolicyGraph,
    expectations: Sequence[Expectation],
    *,
    resolve: Resolver,
    names: Names = _plain,
    disabled: Callable[[str], bool] = lambda _: False,
) -> AccessReport:
    """Check every expectation against the graph (see the module docstring)."""
    bits = Bits(graph)
    exercised: dict[str, int] = dict.fromkeys(POLICY_FIELDS, 0)
    outcomes: list[Outcome] = []
    sp_ids = bits.policy_tables[SERVICE_POLICY].ids

    def router_policies(identity_id: str, service_id: str, common: int) -> None:
        """Mark the router policies that give the pair's common routers."""
        i_slot = bits.identities.slot_of[identity_id]
        s_slot = bits.services.slot_of[service_id]
        erps = int(bits.erp_identity.effective_links(i_slot))
        serps = int(bits.serp_service.effective_links(s_slot))
        for slot in slots(erps):
            if bits.erp_router.member_bits(slot) & common:
                exercised[EDGE_ROUTER_POLICY] |= 1 << slot
        for slot in slots(serps):
            if bits.serp_router.member_bits(slot) & common:
                exercised[SERVICE_EDGE_ROUTER_POLICY] |= 1 << slot

    def pair(identity_id: str, service_id: str, policy_type: str) -> tuple[int, int]:
        i_slot = bits.identities.slot_of[identity_id]
        s_slot = bits.services.slot_of[service_id]
        mask = bits.dial if policy_type == "Dial" else bits.bind
        policies = (
            int(bits.sp_identity.effective_links(i_slot))
            & int(bits.sp_service.effective_links(s_slot))
            & mask
        )
        common = bits.identity_routers(identity_id) & bits.service_routers(service_id)
        return policies, common

    for expectation in expectations:
        identity_id = resolve(IDENTITY, expectation.identity)
        if identity_id is None or not graph.has_entity(IDENTITY, identity_id):
            outcomes.append(Outcome(expectation, False, f"no identity {expectation.identity!r}"))
            continue
        kind = expectation.kind
        if kind == "reaches_router":
            router_id = resolve(EDGE_ROUTER, expectation.target)
            if router_id is None or not graph.has_entity(EDGE_ROUTER, router_id):
                outcomes.append(Outcome(expectation, False, f"no edge router {expectation.target!r}"))
                continue
            r_slot = bits.routers.slot_of[router_id]
            i_slot = bits.identities.slot_of[identity_id]
            linking = int(bits.erp_identity.effective_links(i_slot)) & int(
                bits.erp_router.effective_links(r_slot)
            )
            if linking:
                exercised[EDGE_ROUTER_POLICY] |= linking
                outcomes.append(Outcome(expectation, True))
            else:
                outcomes.append(
                    Outcome(expectation, False, "no edge router policy gives the identity this router")
                )
            continue
        if kind == "expected_access":
            outcomes.append(
                _expected_access(bits, graph, expectation, identity_id, resolve, names, exercised)
            )
            continue
        service_id = resolve(SERVICE, expectation.target)
        if service_id is None or not graph.has_entity(SERVICE, service_id):
            outcomes.append(Outcome(expectation, False, f"no service {expectation.target!r}"))
            continue
        policy_type = "Dial" if kind.endswith("dial") else "Bind"
        policies, common = pair(identity_id, service_id, policy_type)
        is_disabled = disabled(identity_id)
        can = bool(policies) and bool(common) and not is_disabled
        if kind.startswith("can_"):
            if can:
                exercised[SERVICE_POLICY] |= policies
                router_policies(identity_id, service_id, common)
                outcomes.append(Outcome(expectation, True))
                continue
            why = []
            if not policies:
                why.append(f"no {policy_type} service policy grants it")
            else:
                exercised[SERVICE_POLICY] |= policies
            if not common:
                why.append("the identity and the service share no edge router")
            if is_disabled:
                why.append("the identity is disabled")
            outcomes.append(Outcome(expectation, False, "; ".join(why)))
        else:
            if not can:
                outcomes.append(Outcome(expectation, True))
                continue
            granting = sorted(names(SERVICE_POLICY, str(sp_ids[s])) for s in slots(policies))
            exercised[SERVICE_POLICY] |= policies
            outcomes.append(
                Outcome(
                    expectation,
                    False,
                    f"it may {policy_type}: granted by {', '.join(granting)}, with "
                    f"{common.bit_count()} common edge router(s)",
                )
            )
    unexercised: list[tuple[str, str, str]] = []
    total = 0
    for kind in POLICY_FIELDS:
        ids = bits.policy_tables[kind].ids
        for slot, policy_id in enumerate(ids):
            if policy_id is None:
                continue
            total += 1
            if not (exercised[kind] >> slot) & 1:
                unexercised.append((kind, policy_id, names(kind, policy_id)))
    unexercised.sort(key=lambda t: (t[0], t[2], t[1]))
    return AccessReport(outcomes, total, unexercised)


def _expected_access(
    bits: Bits,
    graph: PolicyGraph,
    expectation: Expectation,
    identity_id: str,
    resolve: Resolver,
    names: Names,
    exercised: dict[str, int],
) -> Outcome:
    i_slot = bits.identities.slot_of[identity_id]
    links = int(bits.sp_identity.effective_links(i_slot))
    problems: list[str] = []
    for policy_type, wanted in (("Dial", expectation.dial), ("Bind", expectation.bind)):
        if wanted is None:
            continue
        mask = bits.dial if policy_type == "Dial" else bits.bind
        policies = links & mask
        exercised[SERVICE_POLICY] |= policies
        granted = (
            set(select(int(bits.sp_service.union_of_members(policies)), bits.services.ids))
            if policies
            else set()
        )
        expected: set[str] = set()
        for target in wanted:
            service_id = resolve(SERVICE, target)
            if service_id is None or not graph.has_entity(SERVICE, service_id):
                problems.append(f"no service {target!r}")
            else:
                expected.add(service_id)
        extra = sorted(names(SERVICE, s) for s in granted - expected)
        missing = sorted(names(SERVICE, s) for s in expected - granted)
        if extra:
            problems.append(f"may also {policy_type} {', '.join(extra)}")
        if missing:
            problems.append(f"may not {policy_type} {', '.join(missing)}")
    if problems:
        return Outcome(expectation, False, "; ".join(problems))
    return Outcome(expectation, True)


def resolver_from(entities: Mapping[str, Mapping[str, str]]) -> Resolver:
    """A resolver over ``{engine kind: {name: id}}``: a name first, else the value as an id."""

    def resolve(kind: str, value: str) -> str | None:
        by_name = entities.get(kind, {})
        return by_name.get(value, value)

    return resolve
