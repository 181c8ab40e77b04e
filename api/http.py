"""Request reading and success envelopes (``{data, meta}``) shared by every resource."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import falcon
from pydantic import ValidationError

from api.errors import ERROR_META, field_error_from_validation
from api.wire import WireModel
from engine.errors import CouldNotParseBodyError, InvalidPaginationError, RequestEntityTooLargeError
from engine.query import Symbol, SymbolTable, SymbolType, compile_query, execute

M = TypeVar("M", bound=WireModel)
T = TypeVar("T")

#: OpenZiti reports an unlimited page (``limit=-1`` / ``limit none``) as int64 max.
UNLIMITED = 9223372036854775807


def read_body(req: falcon.Request, limit: int) -> bytes:
    length = req.content_length
    if length is not None and length > limit:
        raise RequestEntityTooLargeError()
    data = req.bounded_stream.read(limit + 1)
    if len(data) > limit:
        raise RequestEntityTooLargeError()
    return data


def read_model(req: falcon.Request, model: type[M], *, allow_empty: bool = False) -> M:
    """The JSON body validated against ``model``; errors in OpenZiti's shape."""
    data = read_body(req, req.context.max_body_bytes)
    if not data.strip():
        if allow_empty:
            return model()
        raise CouldNotParseBodyError(reason="a request body is required")
    try:
        return model.model_validate_json(data)
    except ValidationError as ex:
        raise field_error_from_validation(ex) from None


#: Every envelope's ``meta`` carries the API versions (seed document 1, "Versioning").
API_META = ERROR_META


def meta(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**API_META, **extra} if extra else dict(API_META)


def ok(resp: falcon.Response, data: Any, extra_meta: dict[str, Any] | None = None) -> None:
    resp.media = {"data": data, "meta": meta(extra_meta)}


def empty(resp: falcon.Response) -> None:
    resp.media = {"data": {}, "meta": meta()}


def created(resp: falcon.Response, entity: str, id: str) -> None:
    resp.status = falcon.HTTP_201
    resp.media = {"data": {"_links": {"self": {"href": f"./{entity}/{id}"}}, "id": id}, "meta": meta()}


def _int_param(req: falcon.Request, name: str) -> int | None:
    raw = req.get_param(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidPaginationError(field=name, value=raw, reason=f"{name} must be an integer") from None


def page(req: falcon.Request, items: Iterable[T], symbols: SymbolTable) -> tuple[list[T], dict[str, Any]]:
    """Filter, sort and page ``items`` by the request's ``filter``/``sort``/``limit``/``offset``."""
    query = compile_query(req.get_param("filter"), symbols, sort_param=req.get_param("sort"))
    rows, total, limit, offset = execute(
        query, items, limit_param=_int_param(req, "limit"), offset_param=_int_param(req, "offset")
    )
    meta = {
        "filterableFields": symbols.names(),
        "pagination": {
            "limit": UNLIMITED if limit == -1 else limit,
            "offset": offset,
            "totalCount": total,
        },
    }
    return rows, meta


def list_response(
    req: falcon.Request,
    resp: falcon.Response,
    items: Iterable[T],
    symbols: SymbolTable,
    render: Callable[[T], Any],
) -> None:
    rows, meta = page(req, items, symbols)
    ok(resp, [render(row) for row in rows], meta)


def list_strings(req: falcon.Request, resp: falcon.Response, values: Sequence[str]) -> None:
    """A paged list of plain strings (the role-attribute lists), filterable on ``id``."""
    symbols = SymbolTable({"id": Symbol(SymbolType.STRING, lambda v: v)})
    list_response(req, resp, sorted(values), symbols, lambda v: v)
