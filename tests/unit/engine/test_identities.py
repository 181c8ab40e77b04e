"""Identity, authenticator and enrollment managers over the in-memory store with a fixed clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from api.json_schemas import JsonSchemaChecker
from engine.entities.identities import ApiSession, Authenticator, Enrollment, Identity
from engine.entities.policies import EdgeRouterPolicy, ServicePolicy
from engine.entities.routers import EdgeRouter
from engine.errors import (
    AuthenticatorMethodMaxError,
    EnrollmentExistsError,
    EntityCanNotBeDeletedError,
    FieldError,
)
from engine.managers._base import Env
from engine.managers.authenticators import AuthenticatorManager
from engine.managers.bootstrap import create_default_admin, ensure_builtins
from engine.managers.enrollment import EnrollmentSettings
from engine.managers.enrollments import EnrollmentManager
from engine.managers.identities import EnrollmentRequest, IdentityManager
from engine.ports import UnitOfWork
from engine.testing import CheapHasher, CountingIds, FixedClock
from storage.memory import MemoryStore

START = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
SETTINGS = EnrollmentSettings(issuer="https://ctrl.example.test:1280")


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(START)


@pytest.fixture
def env(clock: FixedClock, authority: Any, signer: Any) -> Env:
    environment = Env(
        store=MemoryStore(),
        clock=clock,
        ids=CountingIds(),
        hasher=CheapHasher(),
        schemas=JsonSchemaChecker(),
        ca=authority,
        tokens=signer,
    )
    ensure_builtins(environment)
    return environment


@pytest.fixture
def identities(env: Env) -> IdentityManager:
    return IdentityManager(env)


def put(env: Env, *entities: object) -> None:
    uow = UnitOfWork(env.store)
    for entity in entities:
        uow.put(entity)  # type: ignore[arg-type]
    env.commit(uow)


def session_for(env: Env, identity_id: str, authenticator_id: str) -> ApiSession:
    now = env.clock.now()
    return ApiSession(
        id=env.ids.new_id(),
        created_at=now,
        updated_at=now,
        token_hash=env.ids.new_token(),
        identity_id=identity_id,
        authenticator_id=authenticator_id,
        last_activity_at=now,
    )


def test_create_with_enrollments_commits_identity_and_enrollments_together(
    env: Env, identities: IdentityManager
) -> None:
    identity = identities.create_with_enrollments(
        {"name": "ann", "role_attributes": ["a"]},
        EnrollmentRequest(ott=True, updb="ann-login"),
        SETTINGS,
    )
    enrollments = sorted(env.store.find_by(Enrollment, "identity_id", identity.id), key=lambda e: e.method)
    assert [e.method for e in enrollments] == ["ott", "updb"]
    assert all(e.expires_at == START + timedelta(minutes=180) for e in enrollments)
    assert enrollments[1].username == "ann-login"
    assert len({e.token for e in enrollments}) == 2


def test_a_failed_enrollment_leaves_nothing_behind(env: Env, identities: IdentityManager) -> None:
    with pytest.raises(FieldError) as caught:
        identities.create_with_enrollments({"name": "bob"}, EnrollmentRequest(ottca="no-ca"), SETTINGS)
    assert caught.value.field == "enrollment.ottca"
    assert env.store.all(Identity) == []
    assert env.store.all(Enrollment) == []


def test_router_type_is_refused_on_create_and_on_update(identities: IdentityManager) -> None:
    with pytest.raises(FieldError) as created:
        identities.create({"name": "r", "type_id": "Router"})
    assert created.value.field == "typeId"
    plain = identities.create({"name": "plain"})
    with pytest.raises(FieldError) as updated:
        identities.update(plain.id, {"type_id": "Router"})
    assert updated.value.reason == "may not change type to router"


def test_router_identities_keep_their_name_and_are_not_deleted_while_the_router_exists(
    env: Env, identities: IdentityManager
) -> None:
    put(
        env,
        EdgeRouter(id="er1", created_at=START, updated_at=START, name="edge-1", is_tunneler_enabled=True),
        Identity(id="er1", created_at=START, updated_at=START, name="edge-1", type_id="Router"),
    )
    with pytest.raises(FieldError) as renamed:
        identities.update("er1", {"name": "other"})
    assert renamed.value.reason == "may not change name of router identities"
    assert identities.update("er1", {"role_attributes": ["x"]}).role_attributes == ["x"]
    with pytest.raises(EntityCanNotBeDeletedError):
        identities.delete("er1")


def test_default_admin_stays_admin_and_stays(env: Env, identities: IdentityManager) -> None:
    admin = create_default_admin(env, "admin", "admin-password")
    with pytest.raises(FieldError) as demoted:
        identities.update(admin.id, {"is_admin": False})
    assert demoted.value.field == "isAdmin"
    with pytest.raises(EntityCanNotBeDeletedError):
        identities.delete(admin.id)
    assert identities.update(admin.id, {"is_default_admin": False}).is_default_admin is True


def test_delete_cascades_to_credentials_sessions_and_id_references(
    env: Env, identities: IdentityManager
) -> None:
    identity = identities.create_with_enrollments({"name": "gone"}, EnrollmentRequest(ott=True), SETTINGS)
    authenticator = AuthenticatorManager(env).create(
        {"identity_id": identity.id, "method": "updb", "username": "gone-user", "password": "gone-secret"}
    )
    keeper = identities.create({"name": "keeper"})
    put(
        env,
        session_for(env, identity.id, authenticator.id),
        ServicePolicy(
            id="sp",
            created_at=START,
            updated_at=START,
            name="sp",
            identity_roles=["#a", f"@{identity.id}", f"@{keeper.id}"],
        ),
        EdgeRouterPolicy(
            id="erp", created_at=START, updated_at=START, name="erp", identity_roles=[f"@{identity.id}"]
        ),
    )

    identities.delete(identity.id)

    assert env.store.get(Identity, identity.id) is None
    assert env.store.find_by(Authenticator, "identity_id", identity.id) == []
    assert env.store.find_by(Enrollment, "identity_id", identity.id) == []
    assert env.store.find_by(ApiSession, "identity_id", identity.id) == []
    service_policy = env.store.get(ServicePolicy, "sp")
    assert service_policy is not None
    assert service_policy.identity_roles == ["#a", f"@{keeper.id}"]
    edge_router_policy = env.store.get(EdgeRouterPolicy, "erp")
    assert edge_router_policy is not None
    assert edge_router_policy.identity_roles == []


def test_disable_and_enable(env: Env, clock: FixedClock, identities: IdentityManager) -> None:
    identity = identities.create({"name": "lock"})
    put(env, session_for(env, identity.id, "auth-x"))

    locked = identities.disable(identity.id, 30)
    assert (locked.disabled, locked.disabled_at, locked.disabled_until) == (
        True,
        START,
        START + timedelta(minutes=30),
    )
    assert env.store.find_by(ApiSession, "identity_id", identity.id) == []
    assert identities.is_disabled(locked)
    clock.set(START + timedelta(minutes=31))
    assert not identities.is_disabled(locked)

    forever = identities.disable(identity.id, 0)
    assert forever.disabled_until is None
    assert identities.is_disabled(forever)

    unlocked = identities.enable(identity.id)
    assert (unlocked.disabled, unlocked.disabled_at, unlocked.disabled_until) == (False, None, None)


def test_validation_of_references(identities: IdentityManager) -> None:
    with pytest.raises(FieldError) as policy:
        identities.create({"name": "p", "auth_policy_id": "missing"})
    assert policy.value.field == "authPolicyId"
    with pytest.raises(FieldError) as attribute:
        identities.create({"name": "q", "role_attributes": ["#bad"]})
    assert attribute.value.field == "roleAttributes"


def test_enrollments_one_per_method_and_refresh(
    env: Env, clock: FixedClock, identities: IdentityManager
) -> None:
    identity = identities.create({"name": "enrollee"})
    manager = EnrollmentManager(env, SETTINGS)
    first = manager.create(
        {"identity_id": identity.id, "method": "ott", "expires_at": START + timedelta(hours=1)}
    )
    with pytest.raises(EnrollmentExistsError):
        manager.create(
            {"identity_id": identity.id, "method": "ott", "expires_at": START + timedelta(hours=2)}
        )
    with pytest.raises(FieldError) as past:
        manager.create({"identity_id": identity.id, "method": "updb", "username": "u", "expires_at": START})
    assert past.value.field == "expiresAt"

    refreshed = manager.refresh(first.id, START + timedelta(days=1))
    assert refreshed.token != first.token
    assert refreshed.expires_at == START + timedelta(days=1)
    with pytest.raises(FieldError):
        manager.refresh(first.id, START - timedelta(seconds=1))


def test_authenticators_hash_passwords_and_allow_one_per_method(
    env: Env, identities: IdentityManager
) -> None:
    identity = identities.create({"name": "holder"})
    manager = AuthenticatorManager(env)
    created = manager.create(
        {"identity_id": identity.id, "method": "updb", "username": "holder", "password": "secret-1"}
    )
    assert created.password_hash is not None
    assert "secret-1" not in created.password_hash
    assert env.hasher.verify("secret-1", created.password_hash)
    with pytest.raises(AuthenticatorMethodMaxError):
        manager.create(
            {"identity_id": identity.id, "method": "updb", "username": "holder2", "password": "secret-2"}
        )
    updated = manager.update(created.id, {"password": "secret-3"})
    assert updated.password_hash is not None
    assert env.hasher.verify("secret-3", updated.password_hash)
    assert updated.username == "holder"
