"""OpenZiti's own ``ziti`` program (v1.6.0, built from Go source) against a real ``trellis serve``.

The binary comes from :mod:`tests.e2e.ziti_cli` (built once per machine into the user cache; these tests
FAIL if it cannot be built, set ``TRELLIS_SKIP_ZITI_E2E=1`` to skip them). Every test runs the CLI
as a bounded subprocess with a config directory of its own (``ZITI_CONFIG_DIR`` and ``HOME`` in
the test's temporary directory), so no login leaks between tests or from the machine.

One server without a router serves the CLI tests: logins (password with our CA bundle, accepting
the server's CA with ``-y``, a client certificate, an identity file, a token), identities and
their enrollment by the CLI itself (``ziti edge enroll``, OTT and UPDB), services, configs,
policies, ``policy-advisor``, updates, deletes and ``-j`` output. A second server with its embedded
router carries TCP through ``ziti tunnel host`` and ``ziti tunnel proxy`` (the Go SDK inside the
tunneler speaks to our Python router), end-to-end encrypted. A third, with its embedded router and
a second router process linked to it, answers ``ziti fabric list`` and ``ziti fabric delete
circuit`` while a ``ziti tunnel proxy`` holds a circuit across the link.

Known incompatibilities are ``xfail(strict=True)`` tests: they pass the day Trellis is fixed,
which turns them into failures to be promoted to plain tests.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from tests.e2e.dataplane import EMBEDDED, Network, RouterProcess
from tests.e2e.echo import EchoServer
from tests.e2e.server import MGMT, Server, free_port, running, tail
from tests.e2e.ziti_cli import LOCK_TIMEOUT, SKIP_ENV, ZitiCliError, clean_env, ensure_ziti

pytestmark = [
    pytest.mark.seconds(80),
    pytest.mark.e2e,
    # the first test's set-up may build the ziti binary (bounded by the build lock's timeout)
    pytest.mark.timeout(LOCK_TIMEOUT + 300),
    pytest.mark.skipif(
        os.environ.get(SKIP_ENV, "").strip().lower() in ("1", "true", "yes"),
        reason=f"{SKIP_ENV} is set: OpenZiti ziti CLI e2e tests skipped on purpose",
    ),
]

PASSWORD = "e2e-ziti-cli-admin-password"
CLI_TIMEOUT = 60.0  # one CLI command; an RSA-4096 enrollment takes a few seconds
TUNNEL_READY_TIMEOUT = 30.0
LINK_READY_TIMEOUT = 60.0  # a second router's start, enrollment done, and its link
ECHO_TIMEOUT = 30.0
PAYLOAD = 100_000


@pytest.fixture(scope="module")
def ziti() -> Path:
    try:
        return ensure_ziti()
    except ZitiCliError as exc:
        problem = str(exc)
    pytest.fail(f"cannot provide OpenZiti's ziti binary: {problem}", pytrace=False)


@pytest.fixture(scope="module")
def server(ziti: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from running(tmp_path_factory.mktemp("ziti-cli") / "home", password=PASSWORD, unset=["TRELLIS_*"])


@dataclass
class Cli:
    """The ziti binary with a config directory of its own, against one server."""

    exe: Path
    server: Server
    workdir: Path
    ran: list[str] = field(default_factory=list)

    @property
    def config_dir(self) -> Path:
        return self.workdir / "ziti-config"

    def env(self) -> dict[str, str]:
        return clean_env(
            HOME=str(self.workdir / "home"),
            ZITI_CONFIG_DIR=str(self.config_dir),
        )

    def run(
        self, *args: str, ok: bool = True, timeout: float = CLI_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """``ziti <args>`` in the work directory; with ``ok`` its exit code must be 0."""
        (self.workdir / "home").mkdir(exist_ok=True)
        try:
            done = subprocess.run(
                [str(self.exe), *args],
                env=self.env(),
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(
                f"`ziti {' '.join(args)}` ran over {timeout:.0f} s\n{self.server.log_tail()}"
            ) from exc
        self.ran.append(
            f"$ ziti {' '.join(args)}  -> {done.returncode}\n{tail(done.stdout + done.stderr, 3000)}"
        )
        if ok:
            assert done.returncode == 0, self.explain(f"`ziti {' '.join(args)}` exited {done.returncode}")
        return done

    def out(self, *args: str) -> str:
        """The stdout of a command that must succeed."""
        return self.run(*args).stdout

    def json(self, *args: str) -> dict[str, Any]:
        """A command run with ``-j``: its JSON."""
        text = self.out(*args, "-j")
        try:
            parsed: dict[str, Any] = json.loads(text)
        except ValueError:
            raise AssertionError(self.explain(f"`ziti {' '.join(args)} -j` printed no JSON")) from None
        return parsed

    def login(self, *extra: str) -> str:
        """``ziti edge login`` with our CA bundle; the token it printed."""
        text = self.out("edge", "login", self.server.url, "--ca", self.server.ca, *extra)
        return token_of(text)

    def admin(self) -> Cli:
        self.login("-u", "admin", "-p", self.server.password)
        return self

    def explain(self, what: str) -> str:
        return "\n".join([what, "--- ziti commands run:", *self.ran[-6:], self.server.log_tail()])


def token_of(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.startswith("Token: ")]
    assert len(lines) == 1, text
    return lines[0].removeprefix("Token: ").strip()


def jwt_claims(token: str) -> dict[str, Any]:
    payload = token.strip().split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


def table_rows(text: str) -> list[list[str]]:
    """The body rows of one of the CLI's box-drawn tables, as stripped cells (the header, which
    may span lines, ends at the first ``├`` rule)."""
    rows: list[list[str]] = []
    in_body = False
    for line in text.splitlines():
        if line.startswith("├"):
            in_body = True
        elif line.startswith("│") and in_body:
            rows.append([cell.strip() for cell in line.strip("│").split("│")])
    return rows


def column(text: str, index: int) -> list[str]:
    return [row[index] for row in table_rows(text) if row[index]]


@pytest.fixture
def cli(ziti: Path, server: Server, tmp_path: Path) -> Cli:
    return Cli(ziti, server, tmp_path)


# -- logins ------------------------------------------------------------------------------------


def test_password_login_with_our_ca_bundle_saves_the_management_url(cli: Cli) -> None:
    token = cli.login("-u", "admin", "-p", PASSWORD)
    saved = json.loads((cli.config_dir / "ziti-cli.json").read_text())
    identity = saved["edgeIdentities"][saved["default"]]
    assert identity["url"] == f"{cli.server.url}{MGMT}", saved
    assert identity["token"] == token, saved
    assert identity["username"] == "admin", saved
    assert identity["readOnly"] is False, saved

    text = cli.out("edge", "list", "identities")
    assert "Default Admin" in column(text, 1), text
    assert "results: 1-1 of 1" in text, text

    version = cli.out("edge", "version")
    assert "Version     : v1.6.0" in version, version

    sessions = cli.out("edge", "list", "api-sessions")
    assert "Default Admin" in column(sessions, 2), sessions


def test_login_with_yes_accepts_the_ca_the_server_publishes(cli: Cli) -> None:
    """Without ``--ca`` the CLI fetches ``/.well-known/est/cacerts``, checks that the server's own
    certificate chains to it and, told ``-y``, saves it for later commands."""
    text = cli.out("edge", "login", cli.server.url, "-u", "admin", "-p", PASSWORD, "-y")
    assert "Server certificate chain written to" in text, text
    saved = x509.load_pem_x509_certificates((cli.config_dir / "certs" / "127.0.0.1").read_bytes())
    ours = x509.load_pem_x509_certificates(Path(cli.server.ca).read_bytes())
    assert {c.fingerprint(hashes.SHA256()) for c in saved} == {c.fingerprint(hashes.SHA256()) for c in ours}
    assert "Default Admin" in column(cli.out("edge", "list", "identities"), 1)


def test_wrong_password_is_refused(cli: Cli) -> None:
    done = cli.run(
        "edge", "login", cli.server.url, "--ca", cli.server.ca, "-u", "admin", "-p", "wrong-pw", ok=False
    )
    assert done.returncode != 0, done
    assert "INVALID_AUTH" in done.stdout + done.stderr, done
    assert (
        not (cli.config_dir / "ziti-cli.json").exists()
        or "token" not in (cli.config_dir / "ziti-cli.json").read_text()
    )


def test_token_login_is_read_only_and_works(cli: Cli) -> None:
    token = cli.server.login()
    text = cli.out("edge", "login", cli.server.url, "--ca", cli.server.ca, "--token", token, "-i", "by-token")
    assert "marked as read-only" in text, text
    assert "Default Admin" in column(cli.out("edge", "list", "identities", "-i", "by-token"), 1)
    used = cli.out("edge", "use")
    assert "id:     by-token | current: false | read-only:  true" in used, used


# -- identities and enrollment -------------------------------------------------------------


def test_identity_created_and_enrolled_by_the_cli_logs_in_with_its_certificate(
    cli: Cli, tmp_path: Path
) -> None:
    cli.admin()
    text = cli.out("edge", "create", "identity", "laptop-1", "-a", "laptops,green", "-o", "laptop-1.jwt")
    assert "New identity laptop-1 created with id: " in text, text
    identity_id = text.split("created with id: ")[1].split()[0]

    claims = jwt_claims((tmp_path / "laptop-1.jwt").read_text())
    assert claims["em"] == "ott", claims
    assert claims["sub"] == identity_id, claims
    assert claims["iss"] == cli.server.url, claims

    listed = cli.out("edge", "list", "identities", 'anyOf(roleAttributes) = "laptops"')
    rows = table_rows(listed)
    assert [row[:3] for row in rows] == [[identity_id, "laptop-1", "Default"]], listed
    assert sorted(rows[0][3].split(",")) == ["green", "laptops"], listed
    enrollments = cli.out("edge", "list", "enrollments", f'identity = "{identity_id}"')
    assert column(enrollments, 1) == ["ott"], enrollments

    (tmp_path / "laptop-1.jwt.copy").write_text((tmp_path / "laptop-1.jwt").read_text())
    text = cli.out("edge", "enroll", "laptop-1.jwt", "-a", "EC", "-o", "laptop-1.json", "--rm")
    assert "enrolled successfully" in cli.ran[-1], cli.ran[-1]
    assert not (tmp_path / "laptop-1.jwt").exists()
    config = json.loads((tmp_path / "laptop-1.json").read_text())
    assert config["ztAPI"] == f"{cli.server.url}/edge/client/v1", config
    assert config["id"]["cert"].startswith("pem:-----BEGIN CERTIFICATE-----"), config["id"]
    assert cli.out("edge", "list", "enrollments", f'identity = "{identity_id}"').count("│ ott") == 0

    authenticators = cli.out("edge", "list", "authenticators", f'identity = "{identity_id}"')
    assert column(authenticators, 1) == ["cert"], authenticators

    # the JWT is spent
    spent = cli.run("edge", "enroll", "laptop-1.jwt.copy", "-a", "EC", "-o", "again.json", ok=False)
    assert spent.returncode != 0, spent
    assert "INVALID_ENROLLMENT_TOKEN" in spent.stdout + spent.stderr, spent
    assert not (tmp_path / "again.json").exists()

    # the identity file logs in (certificate authentication on the management API) ...
    own = Cli(cli.exe, cli.server, tmp_path / "own")
    own.workdir.mkdir()
    own.out("edge", "login", "-f", str(tmp_path / "laptop-1.json"), "--ca", cli.server.ca)
    # ... as a non-admin, whom the management API refuses, as OpenZiti's does
    refused = own.run("edge", "list", "services", ok=False)
    assert refused.returncode != 0
    assert "401 Unauthorized" in refused.stdout + refused.stderr, refused
    assert "UNAUTHORIZED" in refused.stdout + refused.stderr, refused


def test_client_certificate_login(cli: Cli, tmp_path: Path) -> None:
    cli.admin()
    cli.out("edge", "create", "identity", "cert-login", "-A", "-o", "cert-login.jwt")
    cli.out("edge", "enroll", "cert-login.jwt", "-a", "EC", "-o", "cert-login.json")
    ids = json.loads((tmp_path / "cert-login.json").read_text())["id"]
    for part in ("cert", "key"):
        (tmp_path / f"cert-login.{part}.pem").write_text(ids[part].removeprefix("pem:"))
    other = Cli(cli.exe, cli.server, tmp_path / "by-cert")
    other.workdir.mkdir()
    other.login("-c", str(tmp_path / "cert-login.cert.pem"), "-k", str(tmp_path / "cert-login.key.pem"))
    assert "cert-login" in column(other.out("edge", "list", "identities"), 1)


def test_updb_identity_enrolls_logs_in_and_changes_its_password(cli: Cli, tmp_path: Path) -> None:
    cli.admin()
    cli.out("edge", "create", "identity", "operator-1", "--updb", "operator-1", "-o", "operator-1.jwt")
    assert jwt_claims((tmp_path / "operator-1.jwt").read_text())["em"] == "updb"
    cli.out("edge", "enroll", "operator-1.jwt", "-u", "operator-1", "-p", "first-password")
    authenticators = cli.out("edge", "list", "authenticators", 'method = "updb"')
    assert "operator-1" in column(authenticators, 4), authenticators

    user = Cli(cli.exe, cli.server, tmp_path / "operator")
    user.workdir.mkdir()
    user.login("-u", "operator-1", "-p", "first-password")
    user.out("edge", "update", "authenticator", "updb", "-s", "-c", "first-password", "-n", "second-password")
    user.out("edge", "logout")
    refused = user.run(
        "edge",
        "login",
        cli.server.url,
        "--ca",
        cli.server.ca,
        "-u",
        "operator-1",
        "-p",
        "first-password",
        ok=False,
    )
    assert "INVALID_AUTH" in refused.stdout + refused.stderr, refused
    user.login("-u", "operator-1", "-p", "second-password")


# -- services, configs, policies ---------------------------------------------------------------


def test_services_configs_policies_and_policy_advisor(cli: Cli, tmp_path: Path) -> None:
    cli.admin()
    cli.out("edge", "create", "identity", "pa-client", "-a", "pa-clients")
    cli.out("edge", "create", "identity", "pa-server", "-a", "pa-servers")
    intercept = '{"protocols":["tcp"],"addresses":["pa-web.ziti"],"portRanges":[{"low":80,"high":80}]}'
    cli.out("edge", "create", "config", "pa-web-intercept", "intercept.v1", intercept)
    cli.out(
        "edge",
        "create",
        "config",
        "pa-web-host",
        "host.v1",
        '{"protocol":"tcp","address":"127.0.0.1","port":8080}',
    )
    text = cli.out(
        "edge", "create", "service", "pa-web", "--configs", "pa-web-intercept,pa-web-host", "-a", "pa"
    )
    assert "New service pa-web created with id: " in text, text

    services = cli.out("edge", "list", "services", 'name = "pa-web"')
    # `ziti edge create service` asks for end-to-end encryption unless told -e OFF
    assert table_rows(services)[0][1:] == ["pa-web", "true", "smartrouting", "pa"], services
    configs = cli.out("edge", "list", "service", "configs", "pa-web")
    assert sorted(column(configs, 1)) == ["pa-web-host", "pa-web-intercept"], configs
    shown = json.loads(cli.out("edge", "show", "config", "pa-web-intercept"))
    assert shown == json.loads(intercept), shown

    cli.out(
        "edge",
        "create",
        "service-policy",
        "pa-dial",
        "Dial",
        "--identity-roles",
        "#pa-clients",
        "--service-roles",
        "#pa",
    )
    cli.out(
        "edge",
        "create",
        "service-policy",
        "pa-bind",
        "Bind",
        "--identity-roles",
        "#pa-servers",
        "--service-roles",
        "#pa",
    )
    policies = cli.out("edge", "list", "service", "service-policies", "pa-web")
    assert sorted(column(policies, 1)) == ["pa-bind", "pa-dial"], policies
    assert column(cli.out("edge", "list", "identity", "services", "pa-client"), 1) == ["pa-web"]
    assert sorted(column(cli.out("edge", "list", "service", "identities", "pa-web"), 1)) == [
        "pa-client",
        "pa-server",
    ]

    advice = cli.out("edge", "policy-advisor", "identities", "pa-client", "pa-web", "-q")
    assert "ERROR: pa-client (0) -> pa-web (0) Common Routers: (0/0) Dial: Y Bind: N" in advice, advice
    assert "Identity has no edge routers assigned" in advice, advice

    # an (offline) router both may use
    cli.out("edge", "create", "edge-router", "pa-router", "-a", "pa-routers", "-o", "pa-router.jwt")
    cli.out(
        "edge",
        "create",
        "edge-router-policy",
        "pa-erp",
        "--edge-router-roles",
        "#pa-routers",
        "--identity-roles",
        "#pa-clients,#pa-servers",
    )
    cli.out(
        "edge",
        "create",
        "service-edge-router-policy",
        "pa-serp",
        "--edge-router-roles",
        "#pa-routers",
        "--service-roles",
        "#pa",
    )
    routers = cli.out("edge", "list", "edge-routers", 'name = "pa-router"')
    assert table_rows(routers)[0][1:3] == ["pa-router", "false"], routers
    advice = cli.out("edge", "policy-advisor", "services", "pa-web", "-q")
    assert "ERROR: pa-client (1) -> pa-web (1) Common Routers: (0/1) Dial: Y Bind: N" in advice, advice
    assert "ERROR: pa-server (1) -> pa-web (1) Common Routers: (0/1) Dial: N Bind: Y" in advice, advice
    assert "Common edge routers are all off-line" in advice, advice


def test_updates_and_deletes(cli: Cli) -> None:
    cli.admin()
    cli.out("edge", "create", "identity", "ud-id", "-a", "one")
    cli.out("edge", "update", "identity", "ud-id", "-a", "two,three", "--name", "ud-id-2")
    rows = table_rows(cli.out("edge", "list", "identities", 'name = "ud-id-2"'))
    assert len(rows) == 1, rows
    assert sorted(rows[0][3].split(",")) == ["three", "two"], rows

    cli.out(
        "edge", "create", "config", "ud-host", "host.v1", '{"protocol":"tcp","address":"127.0.0.1","port":1}'
    )
    cli.out("edge", "update", "config", "ud-host", "-d", '{"protocol":"tcp","address":"127.0.0.1","port":2}')
    assert json.loads(cli.out("edge", "show", "config", "ud-host"))["port"] == 2

    cli.out("edge", "create", "service", "ud-svc", "-e", "OFF")
    # encryptionRequired is "read-only, set at create" (OpenZiti's spec): the PATCH the CLI sends
    # for -e ON changes only the attributes
    cli.out("edge", "update", "service", "ud-svc", "-a", "x", "-e", "ON")
    assert table_rows(cli.out("edge", "list", "services", 'name = "ud-svc"'))[0][2:] == [
        "false",
        "smartrouting",
        "x",
    ]

    cli.out(
        "edge", "create", "service-policy", "ud-sp", "Dial", "--identity-roles", "#a", "--service-roles", "#b"
    )
    cli.out("edge", "update", "service-policy", "ud-sp", "--identity-roles", "#a,#c")
    assert table_rows(cli.out("edge", "list", "service-policies", 'name = "ud-sp"'))[0][4] == "#a #c"

    for kind, name in (
        ("service-policy", "ud-sp"),
        ("service", "ud-svc"),
        ("config", "ud-host"),
        ("identity", "ud-id-2"),
    ):
        text = cli.out("edge", "delete", kind, name)
        assert f"delete of {kind} with id " in text, text
        assert text.rstrip().endswith(": OK"), text
    assert "results: none" in cli.out("edge", "list", "identities", 'name = "ud-id-2"')

    cli.out("edge", "create", "identity", "ud-many-1")
    cli.out("edge", "create", "identity", "ud-many-2")
    text = cli.out("edge", "delete", "identities", "where", 'name contains "ud-many-"')
    assert text.count(": OK") == 2, text


def test_a_guardrail_refuses_a_policy_the_cli_creates_with_a_readable_error(cli: Cli) -> None:
    """An enforced guardrail (Trellis's own, made on /analysis/v1) refuses a write sent by OpenZiti's
    CLI: the command fails showing the 409's code and the guardrail's name, and nothing is written."""
    cli.admin()
    cli.out("edge", "create", "identity", "gr-bob", "-a", "gr-contractor")
    cli.out("edge", "create", "service", "gr-payroll", "-a", "gr-finance")
    server = cli.server
    token = server.login()
    made = server.call(
        "POST",
        "/analysis/v1/guardrails",
        token,
        json={
            "name": "gr-no-contractor-finance",
            "form": "deny",
            "mode": "enforce",
            "identityRoles": ["#gr-contractor"],
            "serviceRoles": ["#gr-finance"],
            "type": "Dial",
        },
    )
    server.expect(made, 201, "guardrail")

    refused = cli.run(
        "edge", "create", "service-policy", "gr-everyone-payroll", "Dial",
        "--identity-roles", "#all", "--service-roles", "@gr-payroll", ok=False,
    )  # fmt: skip
    shown = refused.stdout + refused.stderr
    assert refused.returncode != 0, shown
    assert "GUARDRAIL_VIOLATION" in shown, shown
    assert "gr-no-contractor-finance" in shown, shown
    assert "results: none" in cli.out("edge", "list", "service-policies", 'name = "gr-everyone-payroll"')

    # a policy that keeps to the guardrail goes through
    cli.out(
        "edge", "create", "service-policy", "gr-staff-payroll", "Dial",
        "--identity-roles", "#gr-staff", "--service-roles", "@gr-payroll",
    )  # fmt: skip


def test_json_output_is_the_controller_envelope(cli: Cli) -> None:
    cli.admin()
    cli.out("edge", "create", "service", "json-svc", "-a", "j")
    listed = cli.json("edge", "list", "services", 'name = "json-svc"')
    assert [s["name"] for s in listed["data"]] == ["json-svc"], listed
    assert listed["data"][0]["roleAttributes"] == ["j"], listed
    assert listed["meta"]["pagination"]["totalCount"] == 1, listed
    summary = cli.out("edge", "list", "summary")
    assert "services" in column(summary, 0), summary


def test_os_posture_check(cli: Cli) -> None:
    """The CLI sends the operating systems as ``{"Type": ..., "Versions": [...]}`` (a Go struct
    without json tags); keys match ignoring case, as Go's encoding/json matches them."""
    cli.admin()
    done = cli.run("edge", "create", "posture-check", "os", "windows-10", "-o", "Windows:10.0.0", ok=False)
    assert done.returncode == 0, done.stdout + done.stderr
    checks = cli.out("edge", "list", "posture-checks", 'name = "windows-10"')
    assert "OS" in checks, checks


def test_other_posture_checks(cli: Cli) -> None:
    cli.admin()
    cli.out("edge", "create", "posture-check", "mac", "pc-mac", "-m", "AA:BB:CC:DD:EE:FF")
    cli.out("edge", "create", "posture-check", "domain", "pc-domain", "-d", "corp.example")
    cli.out("edge", "create", "posture-check", "process", "pc-process", "Windows", "C:\\app.exe")
    cli.out("edge", "create", "posture-check", "mfa", "pc-mfa")
    text = cli.out("edge", "list", "posture-checks", 'name contains "pc-"')
    assert sorted(column(text, 2)) == ["DOMAIN", "MAC", "MFA", "PROCESS"], text


# -- the tunneler through the embedded router --------------------------------------------------


def echo_through(port: int, size: int) -> bytes:
    """Send ``size`` bytes to 127.0.0.1:``port``, half-close, read until EOF."""
    payload = (bytes(range(256)) * (size // 256 + 1))[:size]
    with socket.create_connection(("127.0.0.1", port), timeout=ECHO_TIMEOUT) as conn:

        def write() -> None:
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)

        writer = threading.Thread(target=write)
        writer.start()
        got = bytearray()
        while data := conn.recv(65536):
            got += data
        writer.join(ECHO_TIMEOUT)
    assert bytes(got) == payload, f"sent {len(payload)} bytes, got {len(got)} back"
    return bytes(got)


class Tunnel:
    """``ziti tunnel <mode> ...`` in the background, its log in the work directory."""

    def __init__(self, cli: Cli, name: str, *args: str) -> None:
        self.log = cli.workdir / f"tunnel-{name}.log"
        with self.log.open("wb") as sink:
            self.proc = subprocess.Popen(
                [str(cli.exe), "tunnel", *args, "--cli-agent=false", "-v"],
                env=cli.env(),
                cwd=cli.workdir,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def router_server(ziti: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from running(
        tmp_path_factory.mktemp("ziti-tunnel") / "home",
        password=PASSWORD,
        unset=["TRELLIS_*"],
        env={"TRELLIS_ROUTER": "on", "TRELLIS_LOG_LEVEL": "debug"},
    )


def test_tunneler_proxy_and_host_carry_tcp_through_the_embedded_router(
    ziti: Path, router_server: Server, tmp_path: Path
) -> None:
    cli = Cli(ziti, router_server, tmp_path)
    cli.admin()
    wait_for(
        lambda: table_rows(cli.out("edge", "list", "edge-routers"))[0][2] == "true",
        30,
        "the embedded router comes online",
    )
    for name in ("tun-dialer", "tun-binder"):
        cli.out("edge", "create", "identity", name, "-a", name, "-o", f"{name}.jwt")
        cli.out("edge", "enroll", f"{name}.jwt", "-a", "EC", "-o", f"{name}.json")
    echo = EchoServer(ECHO_TIMEOUT)
    hosts: list[Tunnel] = []
    proxy: Tunnel | None = None
    try:
        host_config = json.dumps({"protocol": "tcp", "address": "127.0.0.1", "port": echo.port})
        cli.out("edge", "create", "config", "tun-echo-host", "host.v1", host_config)
        cli.out("edge", "create", "service", "tun-echo", "--configs", "tun-echo-host", "-a", "tun-echo")
        cli.out(
            "edge",
            "create",
            "service-policy",
            "tun-dial",
            "Dial",
            "--identity-roles",
            "#tun-dialer",
            "--service-roles",
            "#tun-echo",
        )
        cli.out(
            "edge",
            "create",
            "service-policy",
            "tun-bind",
            "Bind",
            "--identity-roles",
            "#tun-binder",
            "--service-roles",
            "#tun-echo",
        )
        advice = cli.out("edge", "policy-advisor", "services", "tun-echo", "-q")
        assert "OKAY : tun-dialer (1) -> tun-echo (1) Common Routers: (1/1) Dial: Y Bind: N" in advice, advice

        hosts.append(Tunnel(cli, "host", "host", "-i", "tun-binder.json"))

        def terminators() -> list[list[str]]:
            return table_rows(cli.out("edge", "list", "terminators", 'service.name = "tun-echo"'))

        def explain(what: str) -> str:
            logs = [
                f"--- {t.log.name}:\n{tail(t.text(), 4000)}" for t in [*hosts, *([proxy] if proxy else [])]
            ]
            return cli.explain("\n".join([what, *logs]))

        try:
            wait_for(terminators, TUNNEL_READY_TIMEOUT, "the hosting tunneler's terminator appears")
        except AssertionError as exc:
            raise AssertionError(explain(str(exc))) from None

        port = free_port()
        proxy = Tunnel(cli, "proxy", "proxy", f"tun-echo:{port}", "-i", "tun-dialer.json")
        try:
            wait_for(lambda: listening(port), TUNNEL_READY_TIMEOUT, "the proxy listens")
        except AssertionError as exc:
            raise AssertionError(explain(str(exc))) from None

        try:
            echo_through(port, PAYLOAD)
            results: list[BaseException | None] = [None] * 4

            def one(i: int) -> None:
                try:
                    echo_through(port, 1_000_000)
                except BaseException as exc:  # reported below
                    results[i] = exc

            threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(ECHO_TIMEOUT * 2)
            assert results == [None] * 4, results
        except (AssertionError, OSError) as exc:
            raise AssertionError(explain(f"echo through the tunnel: {exc!r}")) from None
        # 5 echoes, and the readiness probe's connection (the proxy dials for it too)
        assert echo.accepted >= 5, explain(f"the echo server took {echo.accepted} connections")
        assert "tunnel closed: 100000 bytes sent; 100000 bytes received" in hosts[0].text(), explain(
            "host log"
        )
        assert "hello of tun-dialer" in router_server.log.read_text(errors="replace")

        # the hosting tunneler goes: its terminator goes, and a new connection is refused
        hosts[0].stop()
        wait_for(lambda: not terminators(), 15, "the stopped host's terminator goes")
        with socket.create_connection(("127.0.0.1", port), timeout=ECHO_TIMEOUT) as conn:
            conn.sendall(b"anyone?")
            try:
                got = conn.recv(100)
            except ConnectionResetError:
                got = b""
        assert got == b"", got
        wait_for(lambda: "has no terminators" in proxy.text(), 10, "the proxy logs the failed dial")
    finally:
        for tunnel in [*hosts, *([proxy] if proxy else [])]:
            tunnel.stop()
        echo.close()


# -- ziti fabric: two routers, a link and a live circuit ---------------------------------------


@dataclass
class Fabric:
    """A server with its embedded router (A, ``#public``) and a second router (B, tunneler-enabled,
    not ``#public``, so that SDKs reach it only over A's link) as its own process."""

    server: Server
    a: str
    b: str
    router_b: RouterProcess


@pytest.fixture(scope="module")
def fabric_net(ziti: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    base = tmp_path_factory.mktemp("ziti-fabric")
    with Server(
        base / "home", password=PASSWORD, unset=["TRELLIS_*"], env={"TRELLIS_ROUTER": "on"}
    ) as server:
        server.up()
        admin = server.login()
        found = server.expect(
            server.call("GET", f"{MGMT}/edge-routers", admin, params={"filter": f'name="{EMBEDDED}"'}),
            200,
            "find the embedded router",
        )["data"]
        assert len(found) == 1, found
        # RouterProcess asks the management API through a Network; no SDK runs here
        net = Network(server, admin, base, Path(sys.executable), found[0]["id"])
        router_b = RouterProcess(net, "router-b", base / "router-b", isTunnelerEnabled=True)
        router_b.start()
        try:
            yield Fabric(server, found[0]["id"], router_b.id, router_b)
        finally:
            router_b.stop()


def fabric_rows(cli: Cli, kind: str, *filter_: str) -> list[list[str]]:
    return table_rows(cli.out("fabric", "list", kind, *filter_))


def test_fabric_lists_routers_links_circuits_services_and_terminators(
    ziti: Path, fabric_net: Fabric, tmp_path: Path
) -> None:
    cli = Cli(ziti, fabric_net.server, tmp_path)
    cli.admin()
    a, b = fabric_net.a, fabric_net.b

    def explain(what: str) -> str:
        return cli.explain(f"{what}\n{fabric_net.router_b.log_tail()}")

    # routers: ID, Name, Online, Cost, No Traversal, Disabled, Version, Listeners
    def routers_online() -> list[list[str]]:
        rows = fabric_rows(cli, "routers")
        return rows if len(rows) == 2 and all(r[2] == "true" for r in rows) else []

    try:
        rows = wait_for(routers_online, LINK_READY_TIMEOUT, "both routers are online")
    except AssertionError as exc:
        raise AssertionError(explain(str(exc))) from None
    assert sorted((r[0], r[1]) for r in rows) == sorted([(a, EMBEDDED), (b, "router-b")]), rows
    for row in rows:
        assert row[3:6] == ["0", "false", "false"], rows
        assert " on linux/" in row[6], rows  # the version the router's hello reported
        assert row[7].startswith("1: tls:127.0.0.1:"), rows  # its link listener
    text = cli.out("fabric", "list", "routers", "true limit 1")
    assert len(table_rows(text)) == 1, text
    assert "results: 1-1 of 2" in text, text

    # links: ID, Dialer, Acceptor, Static Cost, Src Latency, Dst Latency, State, Status, Full Cost
    try:
        [link] = wait_for(lambda: fabric_rows(cli, "links"), LINK_READY_TIMEOUT, "the routers link")
    except AssertionError as exc:
        raise AssertionError(explain(str(exc))) from None
    dialer, acceptor = sorted([(a, EMBEDDED), (b, "router-b")])  # the smaller id dials
    assert link[1:] == [dialer[1], acceptor[1], "1", "0.0ms", "0.0ms", "Connected", "up", "1"], link
    link_id = link[0]

    # a service router B hosts (host.v1 as its router identity), dialed through router A
    echo = EchoServer(ECHO_TIMEOUT)
    proxy: Tunnel | None = None
    try:
        host_config = json.dumps({"protocol": "tcp", "address": "127.0.0.1", "port": echo.port})
        cli.out("edge", "create", "config", "fab-echo-host", "host.v1", host_config)
        cli.out("edge", "create", "service", "fab-echo", "--configs", "fab-echo-host", "-e", "OFF")
        cli.out("edge", "create", "identity", "fab-dialer", "-a", "fab-dialers", "-o", "fab-dialer.jwt")
        cli.out("edge", "enroll", "fab-dialer.jwt", "-a", "EC", "-o", "fab-dialer.json")
        cli.out(
            "edge",
            "create",
            "service-policy",
            "fab-dial",
            "Dial",
            "--identity-roles",
            "#fab-dialers",
            "--service-roles",
            "@fab-echo",
        )
        cli.out(  # router B's router identity (the router's id) hosts it
            "edge",
            "create",
            "service-policy",
            "fab-bind",
            "Bind",
            "--identity-roles",
            f"@{b}",
            "--service-roles",
            "@fab-echo",
        )

        # terminators: ID, Service, Router, Binding, Address, Instance, Cost, Precedence, Dynamic Cost, Host ID
        try:
            [terminator] = wait_for(
                lambda: fabric_rows(cli, "terminators", 'service.name = "fab-echo"'),
                LINK_READY_TIMEOUT,
                "router B's terminator of fab-echo",
            )
        except AssertionError as exc:
            raise AssertionError(explain(str(exc))) from None
        assert terminator[1:4] == ["fab-echo", "router-b", "tunnel"], terminator
        assert terminator[6:9] == ["0", "default", "0"], terminator

        services = fabric_rows(cli, "services", 'name = "fab-echo"')
        assert [row[1:] for row in services] == [["fab-echo", "smartrouting"]], services
        service_id = services[0][0]

        port = free_port()
        proxy = Tunnel(cli, "fab-proxy", "proxy", f"fab-echo:{port}", "-i", "fab-dialer.json")
        try:
            wait_for(lambda: listening(port), TUNNEL_READY_TIMEOUT, "the proxy listens")
        except AssertionError as exc:
            raise AssertionError(explain(f"{exc}\n{tail(proxy.text(), 4000)}")) from None

        # a connection held open through the proxy is a live circuit A -> link -> B
        with socket.create_connection(("127.0.0.1", port), timeout=ECHO_TIMEOUT) as held:
            held.sendall(b"ping")
            assert held.recv(100) == b"ping"

            def circuits() -> list[list[str]]:
                # the proxy's readiness probe made a circuit too, which ends with the probe
                rows = fabric_rows(cli, "circuits", f'service = "{service_id}"')
                return rows if len(rows) == 1 else []

            try:
                [live] = wait_for(circuits, LINK_READY_TIMEOUT, "the held circuit alone is listed")
            except AssertionError as exc:
                raise AssertionError(explain(str(exc))) from None
            # circuits: ID, Client, Service, Terminator, CreatedAt, Path
            assert live[2:4] == ["fab-echo", terminator[0]], live
            assert live[5] == f"r/{EMBEDDED} -> l/{link_id} -> r/router-b", live

            done = cli.out("fabric", "delete", "circuit", live[0])
            assert f"delete of circuit with id {live[0]}: OK" in done, done

            held.settimeout(ECHO_TIMEOUT)
            try:
                ended = held.recv(100)
            except ConnectionResetError:
                ended = b""
            assert ended == b"", ended  # the router closed the circuit: the proxy closes its side
        assert live[0] not in [r[0] for r in fabric_rows(cli, "circuits", "true limit none")]

        # what is not served says why
        refused = cli.run("fabric", "create", "service", "fab-other", ok=False)
        said = refused.stdout + refused.stderr
        assert refused.returncode != 0, said
        assert "METHOD_NOT_ALLOWED" in said, said
        assert "/edge/management/v1/services" in said, said

        # router B goes: it is no longer online, and its link goes with it
        fabric_net.router_b.stop()
        wait_for(lambda: not fabric_rows(cli, "links"), LINK_READY_TIMEOUT, "the link goes with router B")
        online = {row[1]: row[2] for row in fabric_rows(cli, "routers")}
        assert online == {EMBEDDED: "true", "router-b": "false"}, online
    finally:
        if proxy is not None:
            proxy.stop()
        echo.close()
