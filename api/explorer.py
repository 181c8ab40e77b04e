"""The explorer page (docs/analysis.md §14): static HTML, CSS and JavaScript the controller serves
at ``/analysis/explorer``, beside ``/analysis/v1`` (never under ``/edge``, so no OpenZiti path can
collide with it).

The files are the package's own (``api/explorer_static``, shipped as package data): read once,
served from memory, each with its content type, an ``ETag`` (``If-None-Match`` answers 304),
``Cache-Control: no-cache`` (a browser revalidates, so an upgrade is seen at once) and a strict
Content-Security-Policy: scripts, styles and connections from this origin only, no inline script,
no frame around it. Only the names found in that folder are served (a name is looked up, never
joined to a path), so ``..`` and encoded slashes reach nothing; any other name is 404.

The page is public; it holds no data. Everything it shows it fetches with the administrator's
``zt-session`` token (kept in the tab's ``sessionStorage``, never in a cookie) from the management
API and ``/analysis/v1``, which refuse a request without one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

import falcon

from api.http import LOOP_READS
from api.middleware import NONE
from api.routing import Routes
from engine.errors import NotFoundError

#: Where the page is served.
EXPLORER_BASE = "/analysis/explorer"
#: The folder of the package holding the files.
STATIC_FOLDER = "explorer_static"
INDEX = "index.html"

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}

#: Nothing but this origin's own files and API; no inline script or style, no plugin, no frame.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Cache-Control": "no-cache",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    content_type: str
    etag: str


def load_files() -> dict[str, StaticFile]:
    """The served files by name: those of the package folder with a known type."""
    folder = resources.files("api").joinpath(STATIC_FOLDER)
    out: dict[str, StaticFile] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        content_type = CONTENT_TYPES.get(suffix)
        if content_type is None or not entry.is_file():
            continue
        body = entry.read_bytes()
        etag = hashlib.sha256(body).hexdigest()[:32]
        out[entry.name] = StaticFile(body, content_type, etag)
    return out


class Explorer:
    """``/analysis/explorer`` (the page) and ``/analysis/explorer/{name}`` (its files), to anyone."""

    auth = NONE
    loop_methods = LOOP_READS

    def __init__(self, files: dict[str, StaticFile]) -> None:
        self.files = files

    def _serve(self, req: falcon.Request, resp: falcon.Response, name: str, body: bool) -> None:
        found = self.files.get(name)
        if found is None:
            raise NotFoundError(f"{req.path} is not a file of the explorer")
        resp.set_headers(HEADERS)
        resp.etag = found.etag
        if any(tag in ("*", found.etag) for tag in req.if_none_match or ()):
            resp.status = falcon.HTTP_304
            return
        resp.content_type = found.content_type
        resp.content_length = len(found.body)
        if body:
            resp.data = found.body

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str = INDEX) -> None:
        """The page, or one of its files."""
        self._serve(req, resp, name, body=True)

    def on_head(self, req: falcon.Request, resp: falcon.Response, name: str = INDEX) -> None:
        """As GET, without the body."""
        self._serve(req, resp, name, body=False)


def register(routes: Routes) -> None:
    """Mount the explorer's page and files."""
    explorer = Explorer(load_files())
    routes.raw(EXPLORER_BASE, explorer)
    routes.raw(EXPLORER_BASE + "/{name}", explorer)
