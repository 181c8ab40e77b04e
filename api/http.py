"""Request reading and success envelopes (``{data, meta}``) shared by every resource."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import falcon
import orjson
from falcon.util.uri import parse_query_string
from pydantic import ValidationError

from api.errors import ERROR_META, field_error_from_validation
from api.limits import within_deadline
from api.wire import INT64_MAX, INT64_MIN, WireModel
from engine.entities import Entity
from engine.errors import (
    CouldNotParseBodyError,
    InvalidFilterError,
    InvalidPaginationError,
    InvalidSortError,
    RequestEntityTooLargeError,
)
from engine.query import (
    ListIndex,
    Query,
    Symbol,
    SymbolTable,
    SymbolType,
    compile_query,
    effective_limit,
    effective_offset,
    execute,
    execute_indexed,
    execute_loaded,
    plan,
)

M = TypeVar("M", bound=WireModel)
T = TypeVar("T")

#: Where a request runs (``controller.worker``): on the server's event loop, with no thread hand-off,
#: when its resource's ``loop_methods`` holds its method; else on a pool thread. Only requests
#: that never block belong there: reads bounded by one caller's data (an item, a caller's
#: services, policy advice) and writes whose answer does not read the write back (they are
#: answered once durable: ``Store.deferring``). No password hashing, signing, database reads or
#: unbounded lists of a whole collection (those stay on the pool, where the loop keeps serving
#: I/O; a bounded one may run on the loop, :func:`bounded_list`).
LOOP_READS = frozenset({"GET", "HEAD"})
#: A list of a whole collection runs on the loop too when its page is bounded, read from the
#: indexes and not sorted (:func:`bounded_list`): at most this many rows, starting at most this
#: far into the list, from at most this many ids an index answered exactly.
LOOP_LIST_LIMIT = 100
LOOP_LIST_OFFSET = 10_000
LOOP_LIST_CANDIDATES = 20_000
#: The environ key of the list a request run on the event loop puts its deferred writes in.
DEFERRED_KEY = "trellis.deferred"

#: OpenZiti reports an unlimited page (``limit=-1`` / ``limit none``) as int64 max.
UNLIMITED = 9223372036854775807


def read_body(req: falcon.Request, limit: int) -> bytes:
    """The whole body, at most ``limit`` bytes (413 past it). A body of no declared length (sent
    chunked to a WSGI server that passes it on as is, ``wsgi.input_terminated``) is read too."""
    length = req.content_length
    if length is not None and length > limit:
        raise RequestEntityTooLargeError()
    if length is None and req.env.get("wsgi.input_terminated"):
        data = req.stream.read(limit + 1)
    else:
        data = req.bounded_stream.read(limit + 1)
    if len(data) > limit:
        raise RequestEntityTooLargeError()
    return data


def read_json(req: falcon.Request) -> Any:
    """The JSON body as Python values, for bodies no single wire model describes: any JSON
    value; COULD_NOT_PARSE_BODY when it is missing, not JSON (``NaN`` and ``Infinity`` are not)
    or nested deeper than orjson's limit (where ``json.loads`` would exhaust the stack)."""
    data = read_body(req, req.context.max_body_bytes)
    if not data.strip():
        raise CouldNotParseBodyError(reason="a request body is required")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as ex:
        raise CouldNotParseBodyError(reason=str(ex)) from None


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


#: What Go's ``strconv.ParseInt`` reads: ASCII digits with an optional sign (Python's ``int()``
#: would also take ``1_0``, other scripts' digits and surrounding blanks).
_GO_INT = re.compile(r"[+-]?[0-9]{1,19}")


def _int_param(req: falcon.Request, name: str) -> int | None:
    """A paging parameter as go-swagger reads an ``integer``: an int64, else INVALID_PAGINATION."""
    raw = req.get_param(name)
    value = _go_int(raw)
    if value is not None or raw is None or raw == "":
        return value
    shown = raw if len(raw) <= 64 else raw[:61] + "..."
    raise InvalidPaginationError(field=name, value=shown, reason=f"{name} must be a 64-bit integer")


def _go_int(raw: str | None) -> int | None:
    """``raw`` as an int64 (ASCII digits, an optional sign), else None."""
    if raw and _GO_INT.fullmatch(raw) and INT64_MIN <= (value := int(raw)) <= INT64_MAX:
        return value
    return None


def bounded_list(
    query_string: str, symbols: SymbolTable, index: ListIndex[Any], fields: Mapping[str, str]
) -> bool:
    """Whether a list of ``index``'s whole collection asked with ``query_string`` is answered in
    bounded time, so that it may run on the event loop (:data:`LOOP_LIST_LIMIT` and its kin): no
    sort, a small page near the start, and no filter or one every term of which an index
    answers from few ids. A request that will be refused (a bad filter or page) is cheap too.
    """
    params = parse_query_string(query_string, keep_blank=True)
    if "sort" in params or "roleFilter" in params:  # a sort reads every row; roles ask the engine
        return False
    raw: dict[str, str | None] = {}
    for name in ("filter", "limit", "offset"):
        value = params.get(name)
        if isinstance(value, list):  # repeated: left to the pool
            return False
        raw[name] = value
    limit_param, offset_param = _go_int(raw["limit"]), _go_int(raw["offset"])
    if (raw["limit"] and limit_param is None) or (raw["offset"] and offset_param is None):
        return True  # INVALID_PAGINATION
    try:
        query = compile_query(raw["filter"], symbols)
    except (InvalidFilterError, InvalidSortError):
        return True
    limit = effective_limit(query.limit, limit_param)
    if query.sort or limit == -1 or limit > LOOP_LIST_LIMIT:
        return False
    if effective_offset(query.skip, offset_param) > LOOP_LIST_OFFSET:
        return False
    if query.matches_all:
        return True
    ids, exact = plan(query.expr, symbols, fields, index)
    return ids is not None and exact and len(ids) <= LOOP_LIST_CANDIDATES


@dataclass(frozen=True)
class Indexed(Generic[T]):
    """A store kind's whole collection for a list (narrowed to the ids in ``keep`` when given),
    filtered through its indexes (:func:`engine.query.execute_indexed`) instead of a scan.
    ``fields`` names the indexed field each symbol reads (:func:`index_fields`)."""

    index: ListIndex[T]
    fields: Mapping[str, str]
    keep: Collection[str] | None = None


@dataclass(frozen=True)
class Loaded(Generic[T]):
    """Entities known by their ids, in list order (sorted ids: what a list without ``sort``
    shows), loaded only when needed: a page with no filter and no sort loads just its rows."""

    ids: Sequence[str]
    load: Callable[[Sequence[str]], list[T]]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def index_fields(kind: type[Entity], symbols: SymbolTable) -> dict[str, str]:
    """The symbols of ``symbols`` that read an indexed field of ``kind`` as is: ``id`` and the
    camelCase names of the kind's ``UNIQUE``, ``INDEXED`` and ``MULTI_INDEXED`` fields (every
    such symbol in the views reads its field unchanged, a test checks it), symbol -> field."""
    names = set(symbols.names())
    fields = ("id", *kind.UNIQUE, *kind.INDEXED, *kind.MULTI_INDEXED)
    return {_camel(field): field for field in fields if _camel(field) in names}


@dataclass(frozen=True)
class ListParams:
    """A list request's ``filter``/``sort`` (compiled) and ``limit``/``offset`` (None: not given)."""

    query: Query
    limit: int | None
    offset: int | None


def list_params(req: falcon.Request, symbols: SymbolTable, *, default_limit: int | None = None) -> ListParams:
    """The request's list parameters, checked: a bad filter or sort is 400 ``INVALID_FILTER`` /
    ``INVALID_SORT_IDENTIFIER``, a bad limit or offset 400 ``INVALID_PAGINATION``. A resource that
    must refuse a bad page before its other checks (as go-swagger binds parameters before the
    handler runs) reads them first and hands them to :func:`page`. ``default_limit`` is the page
    size when neither the parameter nor the filter sets one (else the common default)."""
    query = compile_query(req.get_param("filter"), symbols, sort_param=req.get_param("sort"))
    limit = _int_param(req, "limit")
    if limit is None and default_limit is not None:
        limit = default_limit
    return ListParams(query, limit, _int_param(req, "offset"))


def page(
    req: falcon.Request,
    items: Iterable[T] | Indexed[T] | Loaded[T],
    symbols: SymbolTable,
    params: ListParams | None = None,
) -> tuple[list[T], dict[str, Any]]:
    """Filter, sort and page ``items`` by the request's ``filter``/``sort``/``limit``/``offset``
    (``params``, when the caller has read them already)."""
    if params is None:
        params = list_params(req, symbols)
    query, limit_param, offset_param = params.query, params.limit, params.offset
    if isinstance(items, Indexed):
        rows, total, limit, offset = execute_indexed(
            query,
            items.index,
            items.fields,
            limit_param=limit_param,
            offset_param=offset_param,
            keep=items.keep,
            guard=lambda scan: within_deadline(req, scan),
        )
    elif isinstance(items, Loaded):
        rows, total, limit, offset = execute_loaded(
            query, items.ids, items.load, limit_param=limit_param, offset_param=offset_param
        )
    else:
        rows, total, limit, offset = execute(
            query, within_deadline(req, items), limit_param=limit_param, offset_param=offset_param
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
    items: Iterable[T] | Indexed[T] | Loaded[T],
    symbols: SymbolTable,
    render: Callable[[T], Any],
) -> None:
    rows, meta = page(req, items, symbols)
    prepare = getattr(render, "prepare", None)  # a renderer that asks for a whole page at once
    if prepare is not None:
        prepare(rows)
    encode = getattr(render, "encode", None)  # a renderer that answers each row as JSON bytes
    if encode is None:
        ok(resp, [render(row) for row in within_deadline(req, rows)], meta)
        return
    encoded = b",".join([encode(row) for row in within_deadline(req, rows)])
    ok_encoded(resp, encoded, meta)


def ok_encoded(resp: falcon.Response, rows: bytes, extra_meta: dict[str, Any] | None = None) -> None:
    """:func:`ok` of a list whose rows are JSON already (``rows``: each row's ``orjson.dumps``,
    joined by commas): the rows go into the envelope as an ``orjson.Fragment``, written as they
    are, so the answer is the same bytes (and headers) as :func:`ok` of the rows' values, without
    encoding them again."""
    ok(resp, orjson.Fragment(b"[" + rows + b"]"), extra_meta)


def list_strings(req: falcon.Request, resp: falcon.Response, values: Sequence[str]) -> None:
    """A paged list of plain strings (the role-attribute lists), filterable on ``id``."""
    symbols = SymbolTable({"id": Symbol(SymbolType.STRING, lambda v: v)})
    params = list_params(req, symbols)
    if params.limit is None and params.query.limit is None:
        # every attribute unless a limit is asked, as OpenZiti answers (its page limit: the
        # largest int64): an attribute picker must not see only the first page
        params = ListParams(params.query, -1, params.offset)
    rows, meta = page(req, sorted(values), symbols, params)
    ok(resp, rows, meta)
