"""docs/policy.md §9 scenarios and §10 checklist items, at the engine level; explain and neighbourhood."""

from __future__ import annotations

import pytest

from engine.policy import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    IDENTITY,
    POSTURE_CHECK,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
    EntityRow,
    PolicyGraph,
    PolicyRow,
    explain,
    neighbourhood,
)

SP, ERP, SERP = SERVICE_POLICY, EDGE_ROUTER_POLICY, SERVICE_EDGE_ROUTER_POLICY


# -- builders ---------------------------------------------------------------------------------------


def s1_graph() -> PolicyGraph:
    """S1: services S1{s1}, S2{s1,s2}, S3{}; identities I1{i1}, I2{i1,i2}, I3{i2}; P1..P6 (Dial)."""
    graph = PolicyGraph()
    for entity_id, attributes in (("S1", ["s1"]), ("S2", ["s1", "s2"]), ("S3", [])):
        graph.upsert_entity(SERVICE, entity_id, attributes)
    for entity_id, attributes in (("I1", ["i1"]), ("I2", ["i1", "i2"]), ("I3", ["i2"])):
        graph.upsert_entity(IDENTITY, entity_id, attributes)
    policies = {
        "P1": ("AllOf", ["#s1"], ["#i1"]),
        "P2": ("AllOf", ["#s1", "@S3"], ["#i1", "@I3"]),
        "P3": ("AllOf", ["@S2", "@S3"], ["@I2", "@I3"]),
        "P4": ("AllOf", ["#all"], ["#all"]),
        "P5": ("AllOf", ["#s1", "#s2"], ["#i1", "#i2"]),
        "P6": ("AnyOf", ["#s1", "#s2"], ["#i1", "#i2"]),
    }
    for policy_id, (semantic, services, identities) in policies.items():
        graph.upsert_policy(
            SP, policy_id, semantic=semantic, type="Dial", service_roles=services, identity_roles=identities
        )
    return graph


def router_graph(
    policy_kind: str,
    other: str,
    other_entities: dict[str, list[str]],
    roles: dict[str, tuple[str, list[str], list[str]]],
) -> PolicyGraph:
    """ER1{e1}, ER2{e1,e2}, ER3{} plus ``other_entities`` and policies (semantic, router roles, other roles)."""
    graph = PolicyGraph()
    for entity_id, attributes in (("ER1", ["e1"]), ("ER2", ["e1", "e2"]), ("ER3", [])):
        graph.upsert_entity(EDGE_ROUTER, entity_id, attributes)
    for entity_id, attributes in other_entities.items():
        graph.upsert_entity(other, entity_id, attributes)  # type: ignore[arg-type]
    field = "identity_roles" if other == IDENTITY else "service_roles"
    for policy_id, (semantic, routers, others) in roles.items():
        graph.upsert_policy(
            policy_kind, policy_id, semantic=semantic, edge_router_roles=routers, **{field: others}
        )  # type: ignore[arg-type]
    return graph


S_ROUTER_POLICIES = {
    "P1": ("AllOf", ["#e1"], ["#x1"]),
    "P2": ("AllOf", ["#e1", "@ER3"], ["#x1", "@X3"]),
    "P3": ("AllOf", ["@ER2", "@ER3"], ["@X2", "@X3"]),
    "P5": ("AllOf", ["#e1", "#e2"], ["#x1", "#x2"]),
    "P6": ("AnyOf", ["#e1", "#e2"], ["#x1", "#x2"]),
}


# -- §9 S1 to S3 --------------------------------------------------------------------------------------


def test_s1_service_policies_resolve_as_openziti() -> None:
    """S1's table: @ids are OR'd in under AllOf, AllOf needs every attribute, AnyOf any."""
    graph = s1_graph()
    expected = {
        "P1": (["S1", "S2"], ["I1", "I2"]),
        "P2": (["S1", "S2", "S3"], ["I1", "I2", "I3"]),
        "P3": (["S2", "S3"], ["I2", "I3"]),
        "P4": (["S1", "S2", "S3"], ["I1", "I2", "I3"]),
        "P5": (["S2"], ["I2"]),
        "P6": (["S1", "S2"], ["I1", "I2", "I3"]),
    }
    for policy_id, (services, identities) in expected.items():
        assert graph.policy_members(SP, policy_id, SERVICE) == services
        assert graph.policy_members(SP, policy_id, IDENTITY) == identities


def test_s1_update_and_delete() -> None:
    """P1 updated to [#s1,#s2]/[#i2] selects S2 and I2,I3; after deleting P2, S3 has P3,P4 and I1 P4,P6."""
    graph = s1_graph()
    graph.upsert_policy(
        SP, "P1", semantic="AllOf", type="Dial", service_roles=["#s1", "#s2"], identity_roles=["#i2"]
    )
    assert graph.policy_members(SP, "P1", SERVICE) == ["S2"]
    assert graph.policy_members(SP, "P1", IDENTITY) == ["I2", "I3"]
    graph.remove_policy(SP, "P2")
    assert graph.policies_for_entity(SERVICE, "S3", SP) == ["P3", "P4"]
    assert graph.policies_for_entity(IDENTITY, "I1", SP) == ["P4", "P6"]


def test_s2_edge_router_policies() -> None:
    """S2: the same shapes for identities and edge routers."""
    identities = {"X1": ["x1"], "X2": ["x1", "x2"], "X3": ["x2"]}
    graph = router_graph(ERP, IDENTITY, identities, S_ROUTER_POLICIES)
    routers = {
        "P1": ["ER1", "ER2"],
        "P2": ["ER1", "ER2", "ER3"],
        "P3": ["ER2", "ER3"],
        "P5": ["ER2"],
        "P6": ["ER1", "ER2"],
    }
    for policy_id, members in routers.items():
        assert graph.policy_members(ERP, policy_id, EDGE_ROUTER) == members
    assert graph.policy_members(ERP, "P6", IDENTITY) == ["X1", "X2", "X3"]
    assert graph.edge_routers_for_identity("X3") == ["ER1", "ER2", "ER3"]
    assert graph.identities_for_edge_router("ER3") == ["X1", "X2", "X3"]  # via P2 and P3


def test_s3_service_edge_router_policies() -> None:
    """S3: services S1{s1}, S2{s1,s2}, S3{s2}; P1 updated to [#e1,#e2]/[#s2] gives ER2 and S2,S3."""
    services = {"X1": ["x1"], "X2": ["x1", "x2"], "X3": ["x2"]}
    graph = router_graph(SERP, SERVICE, services, S_ROUTER_POLICIES)
    expected = {
        "P1": (["ER1", "ER2"], ["X1", "X2"]),
        "P2": (["ER1", "ER2", "ER3"], ["X1", "X2", "X3"]),
        "P3": (["ER2", "ER3"], ["X2", "X3"]),
        "P5": (["ER2"], ["X2"]),
        "P6": (["ER1", "ER2"], ["X1", "X2", "X3"]),
    }
    for policy_id, (routers, members) in expected.items():
        assert graph.policy_members(SERP, policy_id, EDGE_ROUTER) == routers
        assert graph.policy_members(SERP, policy_id, SERVICE) == members
    graph.upsert_policy(SERP, "P1", semantic="AllOf", edge_router_roles=["#e1", "#e2"], service_roles=["#x2"])
    assert graph.policy_members(SERP, "P1", EDGE_ROUTER) == ["ER2"]
    assert graph.policy_members(SERP, "P1", SERVICE) == ["X2", "X3"]
    assert graph.services_for_edge_router("ER3") == ["X1", "X2", "X3"]  # via P2 and P3


# -- §9 S5 to S8 ------------------------------------------------------------------------------------


def test_s5_deleting_an_entity_unlinks_it_and_leaves_attribute_roles() -> None:
    """A deleted service leaves no links; #test keeps selecting a re-created service; @id stays until stripped."""
    graph = PolicyGraph()
    graph.upsert_entity(IDENTITY, "I", ["i"])
    graph.upsert_entity(SERVICE, "S", ["test"])
    graph.upsert_policy(
        SP, "P", semantic="AllOf", type="Dial", identity_roles=["@I"], service_roles=["#test"]
    )
    assert graph.permissions("I", "S") == {"Dial"}
    graph.remove_entity(SERVICE, "S")
    assert graph.policy_members(SP, "P", SERVICE) == []
    assert graph.services_for_identity("I") == []
    graph.upsert_entity(SERVICE, "S2", ["test"])
    assert graph.policy_members(SP, "P", SERVICE) == ["S2"]
    graph.remove_entity(IDENTITY, "I")
    assert graph.policy_members(SP, "P", IDENTITY) == []
    graph.upsert_entity(IDENTITY, "I", [])  # same id again: the unstripped @I matches it
    assert graph.policy_members(SP, "P", IDENTITY) == ["I"]
    graph.upsert_policy(SP, "P", semantic="AllOf", type="Dial", identity_roles=[], service_roles=["#test"])
    assert graph.policy_members(SP, "P", IDENTITY) == []


def test_at_id_roles_naming_missing_entities_match_once_created() -> None:
    """Policies written before their @id entities exist start matching on creation, in any order."""
    graph = PolicyGraph()
    graph.upsert_policy(ERP, "E", semantic="AnyOf", identity_roles=["@later"], edge_router_roles=["@r"])
    assert graph.policy_members(ERP, "E", IDENTITY) == []
    graph.upsert_entity(EDGE_ROUTER, "r", [])
    graph.upsert_entity(IDENTITY, "later", [])
    assert graph.edge_routers_for_identity("later") == ["r"]


def test_s6_every_permutation_of_attributes() -> None:
    """S6's shape: entities with every subset of attributes, nine policy shapes, checked against §1.2."""
    from itertools import combinations

    attributes = ["a", "b", "c", "d"]
    subsets = [list(c) for n in range(len(attributes) + 1) for c in combinations(attributes, n)]
    identities = [EntityRow(f"i{n}", tuple(s)) for n, s in enumerate(subsets)]
    services = [EntityRow(f"s{n}", tuple(s)) for n, s in enumerate(subsets)]
    shapes: list[tuple[str, list[str]]] = [
        ("AllOf", []),
        ("AllOf", ["#a"]),
        ("AllOf", ["#a", "#b", "#c"]),
        ("AllOf", ["@i1"]),
        ("AllOf", ["@i1", "@i2", "@i3"]),
        ("AllOf", ["#a", "@i1", "@i2", "@i3"]),
        ("AllOf", ["#all"]),
        ("AnyOf", ["#a"]),
        ("AnyOf", ["#a", "#b", "#c"]),
    ]
    policies = [
        PolicyRow(f"p{n}", semantic, "Dial", identity_roles=roles, service_roles=["#all"])
        for n, (semantic, roles) in enumerate(shapes)
    ]
    graph = PolicyGraph.build(identities=identities, services=services, service_policies=policies)
    for n, (semantic, roles) in enumerate(shapes):
        role_attributes = {r[1:] for r in roles if r.startswith("#")}
        ids = {r[1:] for r in roles if r.startswith("@")}
        expected = sorted(
            row.id
            for row in identities
            if row.id in ids
            or "all" in role_attributes
            or (semantic == "AllOf" and role_attributes and role_attributes <= set(row.attributes))
            or (semantic == "AnyOf" and role_attributes & set(row.attributes))
        )
        assert graph.policy_members(SP, f"p{n}", IDENTITY) == expected, shapes[n]
    for policy in policies:  # flip every type: the links move from Dial to Bind
        graph.upsert_policy(
            SP,
            policy.id,
            semantic=policy.semantic,
            type="Bind",
            identity_roles=policy.identity_roles,
            service_roles=["#all"],
        )
    assert graph.services_for_identity("i1", "Dial") == []
    assert graph.services_for_identity("i1", "Bind") == sorted(row.id for row in services)


def test_s7_tunneler_router_counts() -> None:
    """Router identity + system ERP (@id/@id) + an #all/#all ERP: own router linked twice, others once."""
    graph = PolicyGraph()
    for router in ("R1", "R2"):
        graph.upsert_entity(EDGE_ROUTER, router, [])
    graph.upsert_entity(IDENTITY, "R1", [])  # the router identity shares the router's id
    graph.upsert_policy(ERP, "R1", semantic="AnyOf", identity_roles=["@R1"], edge_router_roles=["@R1"])
    graph.upsert_policy(ERP, "all", semantic="AllOf", identity_roles=["#all"], edge_router_roles=["#all"])
    assert graph.edge_router_link_policies("R1", "R1") == ["R1", "all"]
    assert graph.edge_router_link_policies("R1", "R2") == ["all"]
    graph.remove_policy(ERP, "R1")  # tunneling disabled: system ERP and identity go
    graph.remove_entity(IDENTITY, "R1")
    assert graph.identities_for_edge_router("R1") == []


def test_s8_posture_checks_per_granting_policy() -> None:
    """S8: Dial and Bind AllOf policies #srole/#role/#pcrole each carry the DOMAIN check."""
    graph = PolicyGraph()
    graph.upsert_entity(IDENTITY, "id", ["role"])
    graph.upsert_entity(SERVICE, "svc", ["srole"])
    graph.upsert_entity(POSTURE_CHECK, "domain1", ["pcrole"])
    for policy_type in ("Dial", "Bind"):
        graph.upsert_policy(
            SP,
            policy_type.lower(),
            semantic="AllOf",
            type=policy_type,
            identity_roles=["#role"],
            service_roles=["#srole"],
            posture_check_roles=["#pcrole"],
        )
    graph.upsert_entity(EDGE_ROUTER, "er", [])
    graph.upsert_policy(ERP, "erp", semantic="AllOf", edge_router_roles=["#all"], identity_roles=["#role"])
    graph.upsert_policy(SERP, "serp", semantic="AllOf", edge_router_roles=["#all"], service_roles=["#srole"])
    assert graph.permissions("id", "svc") == {"Dial", "Bind"}
    assert graph.posture_checks_for("id", "svc", "Dial") == {"dial": ("domain1",)}
    assert graph.posture_checks_for("id", "svc", "Bind") == {"bind": ("domain1",)}
    assert graph.advice("id", "svc").common_router_ids == ("er",)


# -- suggested extras and §10 ------------------------------------------------------------------------


@pytest.fixture
def small() -> PolicyGraph:
    graph = PolicyGraph()
    graph.upsert_entity(IDENTITY, "a", ["x"])
    graph.upsert_entity(IDENTITY, "b", ["all"])
    graph.upsert_entity(IDENTITY, "c", [])
    graph.upsert_entity(SERVICE, "s", ["web"])
    return graph


@pytest.mark.parametrize(
    ("semantic", "roles", "members"),
    [
        ("AllOf", [], []),  # §10.2: no vacuous truth
        ("AnyOf", [], []),
        ("AllOf", ["@a", "@b"], ["a", "b"]),  # §10.1: @ids are OR'd under AllOf
        ("AllOf", ["#x", "@c"], ["a", "c"]),
        ("AllOf", ["#all"], ["a", "b", "c"]),  # an attribute "all" makes no difference
        ("AnyOf", ["#all"], ["a", "b", "c"]),
        ("AllOf", ["#X"], []),  # attributes are case-sensitive
        ("allOF", ["#x"], ["a"]),  # the semantic is not
        ("Sometimes", ["#x", "@c"], ["c"]),  # an invalid semantic matches by @id only
    ],
)
def test_matching_rules(small: PolicyGraph, semantic: str, roles: list[str], members: list[str]) -> None:
    """§1.2 and §10.1-2 edge cases."""
    small.upsert_policy(SP, "p", semantic=semantic, type="Dial", identity_roles=roles, service_roles=["#web"])
    assert small.policy_members(SP, "p", IDENTITY) == members


def test_semantic_applies_to_posture_check_roles() -> None:
    """§10.5: an AllOf policy's posture roles need both attributes; AnyOf either."""
    graph = PolicyGraph()
    graph.upsert_entity(POSTURE_CHECK, "both", ["mfa", "os"])
    graph.upsert_entity(POSTURE_CHECK, "mfa", ["mfa"])
    graph.upsert_policy(SP, "p", semantic="AllOf", type="Dial", posture_check_roles=["#mfa", "#os"])
    assert graph.policy_members(SP, "p", POSTURE_CHECK) == ["both"]
    graph.upsert_policy(SP, "p", semantic="AnyOf", type="Dial", posture_check_roles=["#mfa", "#os"])
    assert graph.policy_members(SP, "p", POSTURE_CHECK) == ["both", "mfa"]


def test_posture_input_lists_only_policies_of_the_type() -> None:
    """§10.6: a check-free Dial policy and a checked one both appear; the Bind policy does not."""
    graph = PolicyGraph()
    graph.upsert_entity(IDENTITY, "i", ["u"])
    graph.upsert_entity(SERVICE, "s", ["v"])
    graph.upsert_entity(POSTURE_CHECK, "pc", ["strict"])
    common = {"identity_roles": ["#u"], "service_roles": ["#v"]}
    graph.upsert_policy(SP, "free", semantic="AnyOf", type="Dial", **common)
    graph.upsert_policy(
        SP, "strict", semantic="AnyOf", type="Dial", posture_check_roles=["#strict"], **common
    )
    graph.upsert_policy(SP, "bind", semantic="AnyOf", type="Bind", posture_check_roles=["#strict"], **common)
    assert graph.posture_checks_for("i", "s", "Dial") == {"free": (), "strict": ("pc",)}
    assert graph.posture_checks_for("i", "s", "Bind") == {"bind": ("pc",)}


def test_access_is_lost_only_with_the_last_linking_policy() -> None:
    """§10.8: two policies link the pair; removing one keeps access, removing both loses it."""
    graph = PolicyGraph()
    graph.upsert_entity(IDENTITY, "i", ["u"])
    graph.upsert_entity(SERVICE, "s", ["v"])
    for policy_id in ("p1", "p2"):
        graph.upsert_policy(
            SP, policy_id, semantic="AnyOf", type="Dial", identity_roles=["#u"], service_roles=["#v"]
        )
    assert graph.link_policies("i", "s", "Dial") == ["p1", "p2"]
    graph.remove_policy(SP, "p1")
    assert graph.permissions("i", "s") == {"Dial"}
    graph.upsert_entity(IDENTITY, "i", ["other"])
    assert graph.permissions("i", "s") == set()


def test_semantic_only_change_is_reevaluated(small: PolicyGraph) -> None:
    """A deliberate deviation from OpenZiti's quirk (§3.2, §10.12): the new semantic applies at once."""
    small.upsert_entity(IDENTITY, "d", ["x", "y"])
    small.upsert_policy(
        SP, "p", semantic="AllOf", type="Dial", identity_roles=["#x", "#y"], service_roles=["#web"]
    )
    assert small.policy_members(SP, "p", IDENTITY) == ["d"]
    small.upsert_policy(
        SP, "p", semantic="AnyOf", type="Dial", identity_roles=["#x", "#y"], service_roles=["#web"]
    )
    assert small.policy_members(SP, "p", IDENTITY) == ["a", "d"]
    assert small.permissions("a", "s") == {"Dial"}


def test_type_change_moves_links(small: PolicyGraph) -> None:
    """§2: a Dial policy turned Bind removes Dial access and grants Bind."""
    small.upsert_policy(SP, "p", semantic="AnyOf", type="Dial", identity_roles=["#x"], service_roles=["#web"])
    small.upsert_policy(SP, "p", semantic="AnyOf", type="bind", identity_roles=["#x"], service_roles=["#web"])
    assert small.permissions("a", "s") == {"Bind"}
    assert small.services_for_identity("a", "Dial") == []
    assert small.identities_for_service("s", "Bind") == ["a"]


def test_advice_router_counts() -> None:
    """ERP gives R1 and R2, SERP gives R2: counts 2 and 1, common [R2]; Bind without Dial."""
    graph = PolicyGraph()
    graph.upsert_entity(IDENTITY, "i", ["u"])
    graph.upsert_entity(SERVICE, "s", ["v"])
    for router in ("R1", "R2", "R3"):
        graph.upsert_entity(EDGE_ROUTER, router, [])
    graph.upsert_policy(ERP, "erp", semantic="AnyOf", identity_roles=["#u"], edge_router_roles=["@R1", "@R2"])
    graph.upsert_policy(SERP, "serp", semantic="AnyOf", service_roles=["#v"], edge_router_roles=["@R2"])
    graph.upsert_policy(
        SP, "bind", semantic="AnyOf", type="Bind", identity_roles=["#u"], service_roles=["#v"]
    )
    advice = graph.advice("i", "s")
    assert (advice.is_dial_allowed, advice.is_bind_allowed) == (False, True)
    assert (advice.identity_router_count, advice.service_router_count) == (2, 1)
    assert advice.identity_router_ids == ("R1", "R2")
    assert advice.common_router_ids == ("R2",)
    assert advice.has_common_router
    graph.remove_entity(EDGE_ROUTER, "R2")
    assert advice.common_router_ids == ("R2",)  # an Advice is a snapshot
    assert graph.advice("i", "s").common_router_ids == ()
    assert not graph.advice("i", "s").has_common_router


def test_role_filter_is_not_policy_matching(small: PolicyGraph) -> None:
    """§1.5: unknown @ids dropped, #all is the attribute "all", AllOf by default."""
    assert small.role_filter(IDENTITY, ["#all"]) == ["b"]
    assert small.role_filter(IDENTITY, ["#x", "@nope", "@c"]) == ["a", "c"]
    assert small.role_filter(IDENTITY, ["#x", "#all"], "AnyOf") == ["a", "b"]
    assert small.attribute_names(IDENTITY) == ["all", "x"]


def test_copy_is_isolated(small: PolicyGraph) -> None:
    """A what-if on a copy leaves the original untouched."""
    small.upsert_policy(SP, "p", semantic="AnyOf", type="Dial", identity_roles=["#x"], service_roles=["#web"])
    scratch = small.copy()
    scratch.upsert_entity(IDENTITY, "c", ["x"])
    scratch.remove_policy(SP, "p")
    scratch.upsert_entity(IDENTITY, "new", ["x"])
    assert small.policy_members(SP, "p", IDENTITY) == ["a"]
    assert not small.has_entity(IDENTITY, "new")
    assert scratch.services_for_identity("a") == []


# -- explain ---------------------------------------------------------------------------------------


@pytest.fixture
def shop() -> PolicyGraph:
    graph = PolicyGraph()
    graph.upsert_entity(IDENTITY, "alice", ["sales", "eu"])
    graph.upsert_entity(IDENTITY, "bob", ["eng"])
    graph.upsert_entity(SERVICE, "crm", ["crm", "web"])
    graph.upsert_entity(SERVICE, "wiki", ["docs"])
    graph.upsert_policy(
        SP,
        "sales-crm",
        semantic="AllOf",
        type="Dial",
        identity_roles=["#sales", "#eu"],
        service_roles=["#crm"],
    )
    graph.upsert_policy(
        SP, "by-id", semantic="AllOf", type="Dial", identity_roles=["@alice"], service_roles=["#all"]
    )
    graph.upsert_policy(
        SP,
        "eng-crm",
        semantic="AllOf",
        type="Dial",
        identity_roles=["#eng", "#crm-admin", "#oncall"],
        service_roles=["#crm"],
    )
    graph.upsert_policy(
        SP,
        "any-crm",
        semantic="AnyOf",
        type="Dial",
        identity_roles=["#support", "#ops"],
        service_roles=["#web"],
    )
    graph.upsert_policy(
        SP,
        "eng-docs",
        semantic="AnyOf",
        type="Dial",
        identity_roles=["#eng"],
        service_roles=["#docs", "#intranet"],
    )
    graph.upsert_policy(
        SP, "only-ids", semantic="AnyOf", type="Dial", identity_roles=["@carol"], service_roles=["#crm"]
    )
    graph.upsert_policy(
        SP, "bind", semantic="AnyOf", type="Bind", identity_roles=["#eng"], service_roles=["#crm"]
    )
    return graph


def test_explain_granted_shows_what_matched(shop: PolicyGraph) -> None:
    """Granting policies with the matching entries on each side: #attrs, @id, #all."""
    result = explain(shop, "alice", "crm", "Dial")
    assert result.allowed
    assert [g.policy_id for g in result.grants] == ["by-id", "sales-crm"]
    by_id, sales = result.grants
    assert by_id.identity.roles == ("@id",)
    assert by_id.service.roles == ("#all",)
    assert sales.identity.attributes == ("eu", "sales")
    assert sales.service.roles == ("#crm",)
    assert result.misses == ()


def test_explain_denied_lists_nearest_misses_first(shop: PolicyGraph) -> None:
    """Denied: AnyOf needs one attribute, AllOf its missing ones; @id-only sides are not fixable."""
    result = explain(shop, "bob", "crm", "Dial")
    assert not result.allowed
    assert [(m.policy_id, m.side, m.missing_attributes, m.any_of, m.cost) for m in result.misses] == [
        ("any-crm", "identity", ("ops", "support"), True, 1),
        ("eng-docs", "service", ("docs", "intranet"), True, 1),
        ("eng-crm", "identity", ("crm-admin", "oncall"), False, 2),
        ("sales-crm", "identity", ("eu", "sales"), False, 2),
    ]
    assert "only-ids" not in {m.policy_id for m in result.misses}
    assert "bind" not in {m.policy_id for m in result.misses}
    assert explain(shop, "bob", "crm", "Bind").allowed
    assert len(explain(shop, "bob", "crm", "Dial", max_misses=1).misses) == 1


# -- neighbourhood -----------------------------------------------------------------------------------


def test_neighbourhood_of_an_identity(shop: PolicyGraph) -> None:
    """Depth 1: the identity, its attributes, the policies selecting it and their role attributes."""
    view = neighbourhood(shop, IDENTITY, "alice")
    assert view.nodes[(IDENTITY, "alice")]["node_type"] == "entity"
    assert view.nodes[(SP, "sales-crm")] == {
        "node_type": "policy",
        "kind": SP,
        "label": "sales-crm",
        "semantic": "AllOf",
        "type": "Dial",
    }
    assert view.nodes[("identity-attribute", "sales")]["node_type"] == "attribute"
    assert view.edges[(IDENTITY, "alice"), ("identity-attribute", "eu")]["relation"] == "has"
    assert view.edges[(SP, "sales-crm"), ("service-attribute", "crm")]["relation"] == "requires"
    assert view.edges[(SP, "by-id"), (IDENTITY, "alice")]["roles"] == ("@id",)
    assert view.edges[(SP, "sales-crm"), (IDENTITY, "alice")]["roles"] == ("#eu", "#sales")
    assert (SERVICE, "crm") not in view


def test_neighbourhood_depth_two_reaches_services(shop: PolicyGraph) -> None:
    """Depth 2 adds the policies' members; a path identity <- policy -> service explains access."""
    import networkx as nx  # type: ignore[import-untyped]

    view = neighbourhood(shop, IDENTITY, "alice", depth=2)
    assert view.has_edge((SP, "sales-crm"), (SERVICE, "crm"))
    assert nx.has_path(view.to_undirected(as_view=True), (IDENTITY, "alice"), (SERVICE, "crm"))
    limited = neighbourhood(shop, SP, "by-id", depth=1, member_limit=1)
    assert [n for n in limited if n[0] == SERVICE] == [(SERVICE, "crm")]
    with pytest.raises(ValueError, match="unknown kind"):
        neighbourhood(shop, "router", "x")
