"""A small Chrome DevTools Protocol client for the explorer's browser tests: the system's Chromium
(Debian's ``chromium``; ``TRELLIS_CHROMIUM`` names another binary), headless, driven over
``--remote-debugging-pipe`` (the protocol's JSON messages, each ended by a NUL byte, on the
browser's descriptors 3 and 4), so nothing is downloaded and no port is opened.

    with Browser.start(profile_dir) as browser:
        page = browser.new_page()
        page.navigate("https://127.0.0.1:1280/analysis/explorer")
        page.wait("document.querySelector('#login-form') !== null", "the login form")

Waits are for conditions, with generous deadlines; nothing is timed.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

#: Binaries tried in order when ``TRELLIS_CHROMIUM`` is not set.
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: Seconds a command, a navigation or a wait may take.
DEADLINE = 90.0

#: Keys for :meth:`Page.press`: DOM ``key`` and ``code``, Windows key code, the text typed.
KEYS = {
    "Tab": ("Tab", "Tab", 9, ""),
    "Enter": ("Enter", "Enter", 13, "\r"),
    "Space": (" ", "Space", 32, " "),
    "Escape": ("Escape", "Escape", 27, ""),
    "ArrowDown": ("ArrowDown", "ArrowDown", 40, ""),
}
SHIFT = 8


def find_chromium() -> str | None:
    """The Chromium to run: ``TRELLIS_CHROMIUM``, else the first of :data:`CANDIDATES` on the PATH."""
    named = os.environ.get("TRELLIS_CHROMIUM")
    if named:
        return named if Path(named).exists() or shutil.which(named) else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class BrowserError(Exception):
    """The browser answered an error, ended, or did not answer in time."""


class Browser:
    """A headless Chromium and its DevTools pipe."""

    def __init__(self, process: subprocess.Popen[bytes], reader: int, writer: int) -> None:
        self.process = process
        self.reader = reader
        self.writer = writer
        self.buffer = b""
        self.next_id = 0
        #: Events received, oldest first: ``{"method", "params", "sessionId"}``.
        self.events: list[dict[str, Any]] = []

    @classmethod
    def start(cls, profile: Path, binary: str | None = None, *, width: int = 1280, height: int = 900) -> Self:
        binary = binary or find_chromium()
        if binary is None:
            raise BrowserError("no Chromium found (apt-get install chromium, or set TRELLIS_CHROMIUM)")
        profile.mkdir(parents=True, exist_ok=True)
        to_browser_read, to_browser_write = os.pipe()
        from_browser_read, from_browser_write = os.pipe()
        args = [
            binary,
            "--headless",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-features=Translate,MediaRouter,OptimizationHints",
            "--metrics-recording-only",
            "--password-store=basic",
            "--use-mock-keychain",
            # the test server's certificate is signed by its own throwaway CA
            "--ignore-certificate-errors",
            "about:blank",
        ]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox

        def descriptors() -> None:
            # the browser reads commands on 3 and writes answers on 4
            high_in = fcntl.fcntl(to_browser_read, fcntl.F_DUPFD, 10)
            high_out = fcntl.fcntl(from_browser_write, fcntl.F_DUPFD, 10)
            os.dup2(high_in, 3)
            os.dup2(high_out, 4)

        process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=descriptors,
            start_new_session=True,
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        browser = cls(process, from_browser_read, to_browser_write)
        try:
            browser.send("Browser.getVersion")
        except BaseException:
            browser.close()
            raise
        return browser

    # -- the protocol ---------------------------------------------------------------------------
    def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout: float = DEADLINE,
    ) -> dict[str, Any]:
        """Send a command and return its result (raises :class:`BrowserError` on an error)."""
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self.writer, data) :]
        deadline = time.monotonic() + timeout
        while True:
            answer = self._receive(deadline)
            if answer.get("id") == message["id"]:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result
            if "method" in answer:
                self.events.append(answer)

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("the browser did not answer in time")
            ready, _, _ = select.select([self.reader], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.reader, 1 << 20)
            if not chunk:
                raise BrowserError(f"the browser ended (exit {self.process.poll()})")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def pump(self) -> None:
        """Read the events that have arrived, without waiting."""
        while True:
            if b"\0" not in self.buffer:
                ready, _, _ = select.select([self.reader], [], [], 0)
                if not ready:
                    return
            message = self._receive(time.monotonic() + DEADLINE)
            if "method" in message:
                self.events.append(message)

    # -- pages ------------------------------------------------------------------------------------
    def new_page(self, width: int = 1280, height: int = 900) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Log"):
            page.send(f"{domain}.enable")
        page.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return page

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(BrowserError, OSError):
                self.send("Browser.close", timeout=5)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for fd in (self.reader, self.writer):
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


class Page:
    """One tab, attached with its own session id."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.send(method, params, self.session)

    def navigate(self, url: str) -> None:
        """Load ``url`` (a new document, even where only its fragment differs)."""
        self.eval("window.__leaving = true")
        answer = self.send("Page.navigate", {"url": url})
        if answer.get("errorText"):
            raise BrowserError(f"{url}: {answer['errorText']}")
        if self.eval("window.__leaving === true"):  # only the fragment changed: load it anew
            self.send("Page.reload")
        self.wait("window.__leaving !== true && document.readyState === 'complete'", f"{url} to load")

    def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        answer = self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
        if "exceptionDetails" in answer:
            details = answer["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"{expression}: {text}")
        return answer["result"].get("value")

    def wait(self, expression: str, what: str, timeout: float = DEADLINE) -> Any:
        """Wait until ``expression`` is truthy in the page; its value."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.eval(expression)
            except BrowserError:
                value = None  # a navigation replaced the context: try again
            if value:
                return value
            if time.monotonic() > deadline:
                text = self.eval("document.body ? document.body.innerText.slice(0, 3000) : ''")
                raise AssertionError(f"waited {timeout:.0f} s for {what}; the page shows:\n{text}")
            time.sleep(0.05)

    def text(self, selector: str = "body") -> str:
        return str(
            self.eval(f"(document.querySelector({json.dumps(selector)}) || {{innerText: ''}}).innerText")
        )

    def wait_text(self, selector: str, text: str, timeout: float = DEADLINE) -> str:
        """Wait until the element's text contains ``text``; its text."""
        expression = (
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            f" return e && e.innerText.includes({json.dumps(text)}) ? e.innerText : null; }})()"
        )
        return str(self.wait(expression, f"{text!r} in {selector}", timeout))

    def press(self, key: str, shift: bool = False) -> None:
        """Press and release a key, as a keyboard does (focus moves, forms submit)."""
        name, code, number, typed = KEYS[key]
        common = {
            "key": name,
            "code": code,
            "windowsVirtualKeyCode": number,
            "nativeVirtualKeyCode": number,
            "modifiers": SHIFT if shift else 0,
        }
        down = {"type": "keyDown" if typed else "rawKeyDown", **common}
        if typed:
            down["text"] = typed
            down["unmodifiedText"] = typed
        self.send("Input.dispatchKeyEvent", down)
        self.send("Input.dispatchKeyEvent", {"type": "keyUp", **common})

    def type(self, text: str) -> None:
        """Type ``text`` into the focused element."""
        self.send("Input.insertText", {"text": text})

    def focused(self) -> str:
        """A description of the focused element: its tag, id and text or label."""
        return str(
            self.eval(
                "(() => { const e = document.activeElement; if (!e) return '';"
                " return [e.tagName.toLowerCase(), e.id, (e.getAttribute('aria-label') || e.innerText || e.value || '').trim()]"
                ".join('|'); })()"
            )
        )

    def click(self, selector: str) -> None:
        """Click the element's centre with the mouse."""
        box = self.wait(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return r.width && r.height ? {x: r.x + r.width / 2, y: r.y + r.height / 2} : null; })()",
            f"{selector} to be visible",
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": box["x"], "y": box["y"], "button": "left", "clickCount": 1},
            )

    def screenshot(self, path: Path, max_height: int = 4000) -> Path:
        """A PNG of the whole page (at most ``max_height`` pixels tall) written to ``path``."""
        metrics = self.send("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], max_height), "scale": 1}
        shot = self.send(
            "Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True}
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def problems(self) -> list[str]:
        """Errors the page reported: exceptions, console errors, refused resources and CSP reports."""
        self.browser.pump()
        out = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                continue
            params = event.get("params", {})
            if event["method"] == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                out.append(str(details.get("exception", {}).get("description") or details.get("text")))
            elif event["method"] == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                out.append(str(params["entry"].get("text")))
            elif event["method"] == "Runtime.consoleAPICalled" and params.get("type") == "error":
                out.append(
                    " ".join(str(a.get("value", a.get("description"))) for a in params.get("args", []))
                )
        return out
