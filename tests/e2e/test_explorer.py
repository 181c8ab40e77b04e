"""The explorer page (docs/analysis.md §14) in a real headless browser, Debian's Chromium driven over
the DevTools protocol (tests/e2e/browser.py), against a real ``trellis serve`` with a small
network seeded through the management API.

One server and one browser for the module, one test walking every view (so that pytest-xdist
never starts them twice): the login typed with the keyboard, each view's data asserted on the DOM's
text, the what-if diff shown before anything is written, an apply at a stale revision answered
with its 409's diff, then the apply, the logout, and the first render's time from the browser's
performance API. A screenshot of each view is written under the test's temporary folder and,
when ``TRELLIS_ARTIFACTS`` names a folder, copied to ``$TRELLIS_ARTIFACTS/explorer``.

Skipped, saying why, where no Chromium is installed (.ci/run installs Debian's as root).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.browser import Browser, Page, find_chromium
from tests.e2e.server import MGMT, Server, running

CHROMIUM = find_chromium()

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.seconds(25),
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no Chromium to drive: install Debian's (apt-get install chromium, as .ci/run does as root) "
        "or name one in TRELLIS_CHROMIUM",
    ),
]

EXPLORER = "/analysis/explorer"
READY = "(() => { const m = document.getElementById('main'); return m && m.dataset.state === 'ready' && m.dataset.view; })()"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from running(tmp_path_factory.mktemp("explorer") / "home")


@pytest.fixture(scope="module")
def net(server: Server) -> dict[str, str]:
    """alice (#staff) may Dial web through staff-web, web-host Binds it, bob (#contractor) may
    nothing; payroll (#finance) has a Dial policy for #finance and no router; r1 is offline."""
    token = server.login()

    def create(path: str, body: dict[str, Any]) -> str:
        return str(server.expect(server.call("POST", MGMT + path, token, json=body), 201, path)["data"]["id"])

    def identity(name: str, *attributes: str) -> str:
        return create(
            "/identities",
            {"name": name, "type": "User", "isAdmin": False, "roleAttributes": list(attributes)},
        )

    ids = {"token": token}
    ids["alice"] = identity("alice", "staff")
    ids["bob"] = identity("bob", "contractor")
    ids["carol"] = identity("carol", "staff")
    ids["web-host"] = identity("web-host", "hosts")
    ids["web"] = create("/services", {"name": "web", "encryptionRequired": True, "roleAttributes": ["web"]})
    ids["payroll"] = create(
        "/services", {"name": "payroll", "encryptionRequired": True, "roleAttributes": ["finance"]}
    )
    ids["r1"] = create("/edge-routers", {"name": "r1", "roleAttributes": ["edge"]})
    policy = {"semantic": "AnyOf"}
    ids["staff-web"] = create(
        "/service-policies",
        {
            **policy,
            "name": "staff-web",
            "type": "Dial",
            "identityRoles": ["#staff"],
            "serviceRoles": ["#web"],
        },
    )
    create(
        "/service-policies",
        {
            **policy,
            "name": "hosts-web",
            "type": "Bind",
            "identityRoles": ["#hosts"],
            "serviceRoles": ["#web"],
        },
    )
    create(
        "/service-policies",
        {
            **policy,
            "name": "finance-payroll",
            "type": "Dial",
            "identityRoles": ["#finance"],
            "serviceRoles": ["#finance"],
        },
    )
    create(
        "/edge-router-policies",
        {**policy, "name": "everyone-edge", "identityRoles": ["#all"], "edgeRouterRoles": ["#edge"]},
    )
    create(
        "/service-edge-router-policies",
        {**policy, "name": "web-edge", "serviceRoles": ["#web"], "edgeRouterRoles": ["#edge"]},
    )
    return ids


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with Browser.start(tmp_path_factory.mktemp("chromium-profile"), CHROMIUM) as started:
        yield started


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``shots(page, name)`` saves a screenshot of the page as ``name.png``."""
    folder = tmp_path_factory.mktemp("explorer-screenshots")
    artifacts = os.environ.get("TRELLIS_ARTIFACTS")

    def shot(page: Page, name: str) -> Path:
        path = page.screenshot(folder / f"{name}.png")
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if artifacts:
            target = Path(artifacts) / "explorer"
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / path.name)
        return path

    return shot


def go(page: Page, server: Server, fragment: str, view: str) -> str:
    """Show ``#/fragment`` and wait for the view to be drawn; the view's text."""
    page.eval(f"location.hash = {json.dumps('#/' + fragment)}")
    page.wait(
        f"(() => {{ const m = document.getElementById('main'); return m.dataset.view === {json.dumps(view)}"
        f" && m.dataset.state === 'ready' && decodeURIComponent(location.hash) === decodeURIComponent({json.dumps('#/' + fragment)}); }})()",
        f"the {view} view of #/{fragment}",
    )
    return page.text("#main")


def has(text: str, *parts: str) -> None:
    """Assert that ``text`` contains each of ``parts``."""
    missing = [p for p in parts if p not in text]
    assert missing == [], f"{missing} not in:\n{text}"


def settled(page: Page, text: str) -> str:
    """Wait until the what-if's result is drawn and shows ``text``; its text."""
    page.wait("document.getElementById('whatif-result').dataset.state === 'ready'", "the what-if's answer")
    return page.wait_text("#whatif-result", text)


def tab_to(page: Page, wanted: str, limit: int = 40) -> None:
    """Press Tab until the focused element's description contains ``wanted``."""
    seen = []
    for _ in range(limit):
        page.press("Tab")
        focused = page.focused()
        seen.append(focused)
        if wanted in focused:
            return
    raise AssertionError(f"{wanted!r} never got the focus; the focus went through {seen}")


def test_the_explorer_in_a_browser(
    server: Server, net: dict[str, str], browser: Browser, shots: Any, record_property: Any
) -> None:
    page = browser.new_page()

    # -- the login, with the keyboard alone ------------------------------------------------------
    page.navigate(server.url + EXPLORER)
    page.wait(
        "document.activeElement && document.activeElement.id === 'login-username'", "the focus on Username"
    )
    shots(page, "01-login")
    page.type("admin")
    page.press("Tab")
    assert page.focused().startswith("input|login-password")
    page.type(server.password)
    page.press("Enter")
    page.wait(READY, "the first view after the login")
    assert page.eval("sessionStorage.getItem('trellis.explorer.token')")
    assert page.eval("document.cookie") == ""
    assert "Logged in as Default Admin" in page.text("header")

    # -- services, and "who can reach service X" reached with Tab and Enter ---------------------
    text = page.text("#main")
    assert "Who can reach a service" in text
    has(text, "web", "payroll")
    shots(page, "02-services")
    tab_to(page, "who can reach web")
    page.press("Enter")
    page.wait_text("#main", "Identities that may Bind")
    page.wait(READY, "the service's view")
    text = page.text("#main")
    dial = page.text("section[aria-label='Identities that may Dial']")
    has(dial, "alice", "carol", "(2)")
    assert "bob" not in dial
    assert "web-host" in page.text("section[aria-label='Identities that may Bind']")
    assert "r1" in page.text("section[aria-label='Edge routers it may use']")
    assert "staff-web" in text
    shots(page, "03-who-can-reach-web")

    # the search, with the keyboard
    go(page, server, "services", "services")
    tab_to(page, "input|search")
    page.type("pay")
    page.press("Enter")
    page.wait("location.hash === '#/services?q=pay'", "the search in the address")
    text = page.wait_text("#main", "1 service whose name contains")
    has(text, "payroll")
    assert "who can reach web" not in text

    # -- "what can identity Y reach" ---------------------------------------------------------------
    text = go(page, server, f"identities/{net['alice']}", "identities")
    assert "What alice reaches" in text
    assert "web" in page.text("section[aria-label='Services it may Dial']")
    assert "It may Bind no service." in page.text("section[aria-label='Services it may Bind']")
    routers = page.text("section[aria-label='Edge routers it may use']")
    has(routers, "r1", "offline")
    shots(page, "04-what-alice-reaches")

    # -- "why not", with the nearest misses ------------------------------------------------------
    text = go(page, server, "why?identity=alice&service=payroll&type=Dial", "why")
    assert "alice may not Dial payroll" in text
    assert "identity alice lacks attribute #finance" in text
    assert "No granting path" in text
    shots(page, "05-why-not-alice-payroll")

    # -- the path view: each hop's status ----------------------------------------------------------
    go(page, server, "why?identity=alice&service=web&type=Dial", "why")
    path = page.text("ol.path")
    has(path, "staff-web", "#staff", "#web")
    has(path, "r1", "offline")
    has(path, "everyone-edge", "web-edge")
    hops = page.eval(
        "[...document.querySelectorAll('ol.path > li')].map(li => li.className + ':' + li.querySelector('.hop-kind').textContent)"
    )
    assert hops == [
        "ok:Identity",
        "ok:Identity side",
        "ok:Service policy",
        "ok:Service side",
        "ok:Posture",
        "bad:Common routers",
        "muted:Service",
    ]
    assert "alice may not Dial web" in page.text("#main")
    assert "no common router online" in page.text("#main")
    shots(page, "06-path-alice-web")
    go(page, server, f"why?identity={net['alice']}&router=r1", "why")
    assert "alice may not use r1" in page.text("#main")

    # -- findings ------------------------------------------------------------------------------------
    text = go(page, server, "findings", "findings")
    assert "service-without-router-policy" in text
    assert "payroll" in text
    shots(page, "07-findings")
    text = go(page, server, 'findings?status=any&filter=kind+%3D+"service-without-router-policy"', "findings")
    assert "1 finding." in text

    # -- what-if: the diff before anything is written, a stale apply's 409, then the apply -------
    go(page, server, f"what-if?kind=service-policies&id={net['staff-web']}", "what-if")
    page.click("#whatif-identityRoles")
    page.eval("document.getElementById('whatif-identityRoles').select()")
    page.type("#staff, #contractor")
    page.click("#whatif-form button[type=submit]")
    added = settled(page, "Service access added")
    has(added, "+ bob", "web", "Dial")
    assert "+1 service access" in added
    assert page.eval("!document.getElementById('whatif-apply').hidden")
    policy = server.call("GET", f"{MGMT}/service-policies/{net['staff-web']}", net["token"]).json()["data"]
    assert policy["identityRoles"] == ["#staff"], "a what-if writes nothing"
    shots(page, "08-what-if-diff")

    # an access-relevant change meanwhile: the apply is refused with what changed
    moved = server.call(
        "PATCH", f"{MGMT}/identities/{net['carol']}", net["token"], json={"roleAttributes": []}
    )
    server.expect(moved, 200, "carol loses #staff")
    page.click("#whatif-apply")
    stale = settled(page, "What changed between revision")
    assert "Not applied" in stale
    has(stale, "carol", "Service access removed")
    shots(page, "09-what-if-409")

    page.click("#whatif-form button[type=submit]")
    page.wait("!document.getElementById('whatif-apply').hidden", "the new preview's apply button")
    page.click("#whatif-apply")
    settled(page, "Applied at revision")
    policy = server.call("GET", f"{MGMT}/service-policies/{net['staff-web']}", net["token"]).json()["data"]
    assert sorted(policy["identityRoles"]) == ["#contractor", "#staff"]
    shots(page, "10-what-if-applied")

    # -- first render: a reload with the session held in the tab -----------------------------------
    page.navigate(server.url + EXPLORER + "#/services")
    page.wait(READY, "the first view after a reload")
    first = page.eval("performance.getEntriesByName('explorer:first-view')[0].startTime")
    record_property("summary", f"explorer first render {first:.0f} ms (tier S, navigation to first view)")
    print(f"explorer first render: {first:.0f} ms from navigation (tier S)")

    # -- logout: the token is gone, and so is the session -------------------------------------------
    token = page.eval("sessionStorage.getItem('trellis.explorer.token')")
    page.click("#logout")
    page.wait("!document.getElementById('login-view').hidden", "the login form after the logout")
    assert page.eval("sessionStorage.getItem('trellis.explorer.token')") is None
    page.wait(
        f"fetch('/analysis/v1/revision', {{headers: {{'zt-session': {json.dumps(token)}}}}}).then(r => r.status === 401)",
        "the logged-out session to be refused",
    )

    # -- nothing the page did was refused by its Content-Security-Policy, nothing threw -------------
    problems = [p for p in page.problems() if "Failed to load resource" not in p]
    assert problems == []
