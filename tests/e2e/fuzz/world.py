"""A small network seeded through the HTTP API of a running ``trellis serve``, for the fuzzing runs.

The client API is fuzzed as ``fuzzer``, a non-admin identity enrolled by updb with its own API
session, who can Dial and Bind a service with an intercept config (and Dial a second service behind
posture checks of every type) through an enrolled edge router (ERP and SERP), and holds a Dial
and a Bind session and an API-session certificate.

The management API is fuzzed as the admin. Operations on one entity (``/kind/{id}...``) get the
id of a real entity so that they reach the code behind the 404; the ones that could lock the admin
out get throwaway entities: ``victim`` (an identity with a updb authenticator and its own API
session) for identities, authenticators and API sessions, a throwaway auth policy, CA, external
JWT signer, config type and transit router. The admin's own identity, authenticator and API session
are never named (their ids are random strings no fuzzer guesses).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.api.certs import ThirdPartyCa, csr_pem, new_key, san_csr_pem
from tests.e2e.server import CLIENT, MGMT, Server

FUZZER = "fuzzer"
FUZZER_PASSWORD = "Fuzz-Horse-42-secret"
VICTIM = "victim"
VICTIM_PASSWORD = "Victim-Horse-42-secret"
#: The role attribute that links the fuzzer, its services and the router.
FZ = "fz"


@dataclass
class World:
    """What was seeded: the tokens the runs use and the ids their path parameters take."""

    admin_token: str
    fuzzer_token: str
    #: Management collection (first path segment) -> the id its ``{id}`` takes.
    management_ids: dict[str, str] = field(default_factory=dict)
    #: Client path prefix -> the id its ``{id}`` takes.
    client_ids: dict[str, str] = field(default_factory=dict)
    #: ``{serviceId}`` of ``/identities/{id}/policy-advice/{serviceId}``.
    service_id: str = ""


class Seeder:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.admin = server.login()

    def call(self, method: str, path: str, token: str | None, status: int, **kwargs: Any) -> dict[str, Any]:
        answer = self.server.call(method, path, token, **kwargs)
        return self.server.expect(answer, status, f"seeding: {method} {path}")

    def create(self, kind: str, body: dict[str, Any]) -> str:
        return str(self.call("POST", f"{MGMT}/{kind}", self.admin, 201, json=body)["data"]["id"])

    def detail(self, kind: str, entity: str) -> dict[str, Any]:
        data: dict[str, Any] = self.call("GET", f"{MGMT}/{kind}/{entity}", self.admin, 200)["data"]
        return data

    def first(self, kind: str, token: str | None = None, base: str = MGMT, **params: str) -> str:
        listed = self.call("GET", f"{base}/{kind}", token or self.admin, 200, params=params)["data"]
        assert listed, f"seeding: {base}/{kind} {params} is empty"
        return str(listed[0]["id"])

    def updb_identity(self, name: str, password: str, roles: list[str]) -> tuple[str, str]:
        """A non-admin identity enrolled by updb, logged in on the client API: (id, token)."""
        body = {"name": name, "type": "User", "isAdmin": False, "roleAttributes": roles}
        identity = self.create("identities", {**body, "enrollment": {"updb": name}})
        token = self.detail("identities", identity)["enrollment"]["updb"]["token"]
        self.call(
            "POST", f"{CLIENT}/enroll/updb", None, 200, params={"token": token}, json={"password": password}
        )
        login = self.server.call(
            "POST",
            f"{CLIENT}/authenticate",
            params={"method": "password"},
            json={"username": name, "password": password, "configTypes": ["all"]},
        )
        self.server.expect(login, 200, f"seeding: {name} logs in")
        return identity, str(login.headers["zt-session"])

    def seed(self) -> World:
        _, fuzzer_token = self.updb_identity(FUZZER, FUZZER_PASSWORD, [FZ])
        intercept = self.first("config-types", filter='name="intercept.v1"')
        config = self.create(
            "configs",
            {
                "name": "fz-intercept",
                "configTypeId": intercept,
                "data": {
                    "protocols": ["tcp"],
                    "addresses": ["fz.test"],
                    "portRanges": [{"low": 80, "high": 80}],
                },
            },
        )
        service = self.create(
            "services",
            {"name": "fz-svc", "encryptionRequired": True, "roleAttributes": [FZ], "configs": [config]},
        )
        self.create(
            "services", {"name": "fz-svc-posture", "encryptionRequired": True, "roleAttributes": ["fzp"]}
        )
        checks: list[dict[str, Any]] = [
            {"typeId": "DOMAIN", "domains": ["corp.example.com"]},
            {"typeId": "MAC", "macAddresses": ["AA:BB:CC:DD:EE:FF"]},
            {"typeId": "OS", "operatingSystems": [{"type": "Linux", "versions": [">=1.0.0"]}]},
            {"typeId": "PROCESS", "process": {"osType": "Linux", "path": "/usr/bin/agent", "hashes": ["ab"]}},
            {
                "typeId": "PROCESS_MULTI",
                "semantic": "AnyOf",
                "processes": [{"osType": "Linux", "path": "/usr/bin/a"}],
            },
            {"typeId": "MFA", "timeoutSeconds": 300, "promptOnWake": True},
        ]
        posture_check = ""
        for check in checks:
            posture_check = self.create(
                "posture-checks",
                {"name": f"fz-{check['typeId'].lower()}", "roleAttributes": ["fzp"], **check},
            )
        anyof = {"semantic": "AnyOf", "identityRoles": [f"#{FZ}"]}
        dial = self.create(
            "service-policies", {"name": "fz-dial", "type": "Dial", **anyof, "serviceRoles": [f"#{FZ}"]}
        )
        self.create(
            "service-policies", {"name": "fz-bind", "type": "Bind", **anyof, "serviceRoles": [f"#{FZ}"]}
        )
        self.create(
            "service-policies",
            {
                "name": "fz-dial-p",
                "type": "Dial",
                **anyof,
                "serviceRoles": ["#fzp"],
                "postureCheckRoles": ["#fzp"],
            },
        )
        router = self.create("edge-routers", {"name": "fz-er", "roleAttributes": [FZ], "cost": 3})
        router_token = self.detail("edge-routers", router)["enrollmentToken"]
        server_csr = san_csr_pem(new_key(), router, dns=("er.fz.test",), ips=("127.0.0.1",))
        self.call(
            "POST",
            f"{CLIENT}/enroll",
            None,
            200,
            params={"method": "erott", "token": router_token},
            json={"serverCertCsr": server_csr, "certCsr": csr_pem(new_key(), router)},
        )
        erp = self.create("edge-router-policies", {"name": "fz-erp", **anyof, "edgeRouterRoles": [f"#{FZ}"]})
        serp = self.create(
            "service-edge-router-policies",
            {
                "name": "fz-serp",
                "semantic": "AnyOf",
                "serviceRoles": [f"#{FZ}", "#fzp"],
                "edgeRouterRoles": [f"#{FZ}"],
            },
        )
        # Two sessions: the client runs delete the Dial one, the management runs the Bind one.
        dial_session, bind_session = (
            str(
                self.call(
                    "POST", f"{CLIENT}/sessions", fuzzer_token, 201, json={"serviceId": service, "type": kind}
                )["data"]["id"]
            )
            for kind in ("Dial", "Bind")
        )
        session_cert = self.call(
            "POST",
            f"{CLIENT}/current-api-session/certificates",
            fuzzer_token,
            201,
            json={"csr": csr_pem(new_key())},
        )["data"]["id"]
        fuzzer_authenticator = self.first("current-identity/authenticators", fuzzer_token, CLIENT)

        # Throwaway entities for the management operations that could lock the admin out.
        victim, victim_token = self.updb_identity(VICTIM, VICTIM_PASSWORD, ["victim"])
        victim_session = str(
            self.call("GET", f"{CLIENT}/current-api-session", victim_token, 200)["data"]["id"]
        )
        victim_authenticator = self.first("authenticators", filter=f'identity="{victim}"')
        # An identity whose ott enrollment is still pending: /enrollments/{id}.
        pending = self.create(
            "identities",
            {"name": "fz-pending", "type": "Device", "isAdmin": False, "enrollment": {"ott": True}},
        )
        enrollment = self.first(f"identities/{pending}/enrollments")
        auth_policy = self.create(
            "auth-policies",
            {
                "name": "fz-auth-policy",
                "primary": {
                    "cert": {"allowed": True, "allowExpiredCerts": False},
                    "extJwt": {"allowed": False, "allowedSigners": []},
                    "updb": {
                        "allowed": True,
                        "minPasswordLength": 5,
                        "requireSpecialChar": False,
                        "requireNumberChar": False,
                        "requireMixedCase": False,
                        "maxAttempts": 3,
                        "lockoutDurationMinutes": 1,
                    },
                },
                "secondary": {"requireTotp": False},
            },
        )
        ca = self.create(
            "cas",
            {
                "name": "fz-ca",
                "certPem": ThirdPartyCa("Fuzz Root CA").pem,
                "isAuthEnabled": True,
                "isAutoCaEnrollmentEnabled": False,
                "isOttCaEnrollmentEnabled": True,
                "identityRoles": [],
            },
        )
        signer = self.create(
            "external-jwt-signers",
            {
                "name": "fz-signer",
                "certPem": ThirdPartyCa("Fuzz JWT Signer").pem,
                "issuer": "https://issuer.fz.test",
                "audience": "trellis",
                "enabled": True,
            },
        )
        config_type = self.create("config-types", {"name": "fz-type", "schema": {"type": "object"}})
        transit = self.create("transit-routers", {"name": "fz-tr", "cost": 1})
        terminator = self.create(
            "terminators",
            {"service": service, "router": router, "binding": "transport", "address": "tcp:fz.test:80"},
        )

        return World(
            admin_token=self.server.login(),
            fuzzer_token=fuzzer_token,
            service_id=service,
            client_ids={
                "services": service,
                "sessions": dial_session,
                "current-api-session/certificates": session_cert,
                "current-identity/authenticators": fuzzer_authenticator,
                "specs": self.first("specs", fuzzer_token, CLIENT),
            },
            management_ids={
                "api-sessions": victim_session,
                "auth-policies": auth_policy,
                "authenticators": victim_authenticator,
                "cas": ca,
                "config-types": config_type,
                "configs": config,
                "current-identity/authenticators": self.first("current-identity/authenticators"),
                "edge-router-policies": erp,
                "edge-routers": router,
                "enrollments": enrollment,
                "external-jwt-signers": signer,
                "identities": victim,
                "identity-types": self.first("identity-types"),
                "posture-check-types": self.first("posture-check-types"),
                "posture-checks": posture_check,
                "routers": transit,
                "service-edge-router-policies": serp,
                "service-policies": dial,
                "services": service,
                "sessions": bind_session,
                "specs": self.first("specs"),
                "terminators": terminator,
                "transit-routers": transit,
            },
        )


def seed(server: Server) -> World:
    """Seed ``server`` (freshly initialised) through its HTTP API."""
    return Seeder(server).seed()
