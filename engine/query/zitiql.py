"""ZitiQL: a hand-written tokenizer and recursive-descent parser (docs/api.md §5.3).

:func:`parse` turns a filter string into a :class:`ParsedQuery` made of frozen dataclasses.
Typing and evaluation against a symbol table live in :mod:`engine.query.evaluate`.

Grammar notes (mirroring OpenZiti's ``ZitiQl.g4``):

* keywords are case-insensitive; ``and`` binds tighter than ``or``; ``not`` takes the *whole rest*
  of the expression at the lowest precedence (``not a = 1 and b = 2`` is ``not (a = 1 and b = 2)``);
* whitespace is required around ``and``, ``or``, ``in``, ``between``, ``contains``, ``icontains``,
  ``sort``, ``by``, ``skip`` and ``limit``; it is optional around comparison operators;
* digits are not allowed in identifiers, so ``name1`` is a syntax error.

Hostile input is bounded: parentheses, ``not`` and subqueries nest at most
:data:`MAX_NESTING` levels deep (upstream's ANTLR parser has no limit; a recursive-descent parser
needs one), and a number literal too long for Python's ``int`` is refused like any other bad token.

Every error is an :class:`InvalidFilterError` whose message starts with ``line L:C`` (1-based line,
0-based column, as ANTLR reports it).
"""

from __future__ import annotations

import enum
import re
from bisect import bisect_right
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from functools import lru_cache

from engine.errors import InvalidFilterError
from engine.query.ast import (
    And,
    BareSymbol,
    Between,
    BoolConst,
    Compare,
    Count,
    Expr,
    InList,
    IsEmpty,
    Lhs,
    Literal,
    LiteralValue,
    Not,
    Or,
    ParsedQuery,
    Pos,
    SetExpr,
    SetFunction,
    SortField,
    SubQuery,
    SymbolRef,
    ValueKind,
    filter_error,
)

# ---------------------------------------------------------------------------------------------
# Tokenizer


class Tok(enum.Enum):
    LPAREN = "'('"
    RPAREN = "')'"
    LBRACKET = "'['"
    RBRACKET = "']'"
    COMMA = "','"
    OP = "operator"
    STRING = "string"
    NUMBER = "number"
    DATETIME = "datetime"
    IDENT = "identifier"
    KEYWORD = "keyword"
    EOF = "<EOF>"


@dataclass(frozen=True)
class Token:
    kind: Tok
    text: str  # source text
    value: LiteralValue
    pos: Pos
    ws_before: bool
    word: str = ""  # lower-cased keyword for KEYWORD tokens


# fmt: off
KEYWORDS = frozenset({
    "and", "or", "not", "in", "between", "contains", "icontains", "true", "false", "null",
    "sort", "by", "asc", "desc", "skip", "limit", "none", "where", "from",
    "anyof", "allof", "count", "isempty",
})
# fmt: on
_WS = " \t\r\n"
#: How deep parentheses, ``not`` and subqueries may nest (each level a few Python frames).
MAX_NESTING = 100
_PUNCT = {"(": Tok.LPAREN, ")": Tok.RPAREN, "[": Tok.LBRACKET, "]": Tok.RBRACKET, ",": Tok.COMMA}
_IDENT_RE = re.compile(r"[A-Za-z][A-Za-z_]*(?:\.[A-Za-z][A-Za-z_\-]*)*")
_QUOTED_IDENT_RE = re.compile(r"'([A-Za-z][A-Za-z_]*(?:\.[A-Za-z][A-Za-z_\-]*)*)'")
_NUMBER_RE = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?(?:0|[1-9][0-9]*))?")
_STRING_RE = re.compile(r'"((?:[^"\\\x00-\x1f]|\\["\\fnrt])*)"')
_ESCAPES = {'"': '"', "\\": "\\", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_ESCAPE_RE = re.compile(r"\\(.)")
_DATETIME_RE = re.compile(
    r"datetime\([ \t\r\n]*"
    r"(\d+)-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])[Tt]"
    r"([01]\d|2[0-3]):([0-5]\d):([0-5]\d|60)(?:\.(\d+))?"
    r"([Zz]|([+-])([01]\d|2[0-3]):([0-5]\d))[ \t\r\n]*\)"
)


class _Source:
    """Maps offsets in the source to line/column positions."""

    def __init__(self, text: str) -> None:
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def pos(self, offset: int) -> Pos:
        line = bisect_right(self._line_starts, offset)
        return Pos(line, offset - self._line_starts[line - 1])


def _parse_datetime(m: re.Match[str], pos: Pos) -> datetime:
    literal = m.group(0) if len(m.group(0)) <= 64 else m.group(0)[:61] + "..."
    if len(m.group(1)) > 4:
        raise filter_error(pos, f"invalid datetime {literal!r}: year out of range")
    try:
        year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
        micros = int((m.group(7) or "0")[:6].ljust(6, "0"))
        if m.group(8) in ("Z", "z"):
            tz = UTC
        else:
            offset = timedelta(hours=int(m.group(10)), minutes=int(m.group(11)))
            tz = timezone(-offset if m.group(9) == "-" else offset)
        return datetime(year, month, day, hour, minute, second, micros, tzinfo=tz)
    except ValueError as exc:
        raise filter_error(pos, f"invalid datetime {literal!r}: {exc}") from None


def _scan_string_error(text: str, start: int, src: _Source) -> InvalidFilterError:
    """Explain why the string literal starting at ``start`` does not match."""
    i = start + 1
    while i < len(text):
        c = text[i]
        if c == '"':
            break
        if c == "\\":
            if i + 1 >= len(text) or text[i + 1] not in _ESCAPES:
                bad = text[i : i + 2]
                return filter_error(src.pos(i), f"invalid escape sequence {bad!r} in string")
            i += 2
            continue
        if ord(c) < 0x20:
            return filter_error(src.pos(i), f"control character {c!r} not allowed in string")
        i += 1
    return filter_error(src.pos(start), "unterminated string literal")


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens, ending with an EOF token."""
    src = _Source(text)
    tokens: list[Token] = []
    i, n, ws = 0, len(text), True

    def add(kind: Tok, start: int, end: int, value: LiteralValue = None, word: str = "") -> None:
        tokens.append(Token(kind, text[start:end], value, src.pos(start), ws, word))

    while i < n:
        c = text[i]
        if c in _WS:
            i, ws = i + 1, True
            continue
        start = i
        if c in _PUNCT:
            add(_PUNCT[c], i, i + 1)
            i += 1
        elif c in "<>":
            i += 2 if text.startswith("=", i + 1) else 1
            add(Tok.OP, start, i)
        elif c == "=" or text.startswith("!=", i):
            i += 1 if c == "=" else 2
            add(Tok.OP, start, i)
        elif c == '"':
            sm = _STRING_RE.match(text, i)
            if sm is None:
                raise _scan_string_error(text, i, src)
            i = sm.end()
            add(Tok.STRING, start, i, _ESCAPE_RE.sub(lambda e: _ESCAPES[e.group(1)], sm.group(1)))
        elif c == "'":
            qm = _QUOTED_IDENT_RE.match(text, i)
            if qm is None:
                raise filter_error(src.pos(i), "invalid quoted identifier")
            i = qm.end()
            add(Tok.IDENT, start, i, qm.group(1))
        elif c == "-" or c.isdigit():
            nm = _NUMBER_RE.match(text, i)
            if nm is None:
                raise filter_error(src.pos(i), f"token recognition error at: {c!r}")
            i = nm.end()
            is_float = nm.group(1) is not None or nm.group(2) is not None
            try:  # int() refuses literals of thousands of digits
                number: float | int = float(nm.group(0)) if is_float else int(nm.group(0))
            except ValueError:
                raise filter_error(src.pos(start), "number literal too long") from None
            add(Tok.NUMBER, start, i, number)
        elif text.startswith("datetime(", i):
            dm = _DATETIME_RE.match(text, i)
            if dm is None:
                raise filter_error(src.pos(i), "invalid datetime literal, expected RFC 3339")
            i = dm.end()
            add(Tok.DATETIME, start, i, _parse_datetime(dm, src.pos(start)))
        elif ("a" <= c <= "z") or ("A" <= c <= "Z"):
            im = _IDENT_RE.match(text, i)
            assert im is not None
            i, word = im.end(), im.group(0)
            if "." not in word and word.lower() in KEYWORDS:
                add(Tok.KEYWORD, start, i, None, word.lower())
            else:
                add(Tok.IDENT, start, i, word)
        else:
            raise filter_error(src.pos(i), f"token recognition error at: {c!r}")
        ws = False
    tokens.append(Token(Tok.EOF, "<EOF>", None, src.pos(n), ws))
    return tokens


# ---------------------------------------------------------------------------------------------
# Parser

_OPERATION_KEYWORDS = ("in", "between", "contains", "icontains")
_SPACED_KEYWORDS = frozenset(("and", "or", "sort", "by", "skip", "limit", *_OPERATION_KEYWORDS))
_EQ_VALUES = (ValueKind.STRING, ValueKind.NUMBER, ValueKind.DATETIME, ValueKind.BOOL, ValueKind.NULL)
_ORDER_VALUES = (ValueKind.STRING, ValueKind.NUMBER, ValueKind.DATETIME)
_KIND_OF = {Tok.STRING: ValueKind.STRING, Tok.NUMBER: ValueKind.NUMBER, Tok.DATETIME: ValueKind.DATETIME}


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = tokenize(text)
        self.i = 0
        self.nesting = 0

    def nest(self) -> None:
        """Enter one more level of parentheses, ``not`` or subquery (see :data:`MAX_NESTING`)."""
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise filter_error(self.peek().pos, f"filter nested more than {MAX_NESTING} levels deep")

    # -- token helpers --------------------------------------------------------------------------
    def peek(self, k: int = 0) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def advance(self) -> Token:
        tok = self.toks[self.i]
        if tok.kind is not Tok.EOF:
            self.i += 1
        if tok.word in _SPACED_KEYWORDS:
            following = self.peek()
            if not tok.ws_before:
                raise filter_error(tok.pos, f"missing whitespace before '{tok.text}'")
            if not following.ws_before and following.kind is not Tok.EOF:
                raise filter_error(following.pos, f"missing whitespace after '{tok.text}'")
        return tok

    def at_kw(self, *words: str, k: int = 0) -> bool:
        return self.peek(k).word in words

    def mismatch(self, expecting: str, tok: Token | None = None) -> InvalidFilterError:
        tok = tok or self.peek()
        return filter_error(tok.pos, f"mismatched input '{tok.text}' expecting {expecting}")

    def expect(self, kind: Tok) -> Token:
        if self.peek().kind is not kind:
            raise self.mismatch(kind.value)
        return self.advance()

    def expect_kw(self, word: str) -> Token:
        if not self.at_kw(word):
            raise self.mismatch(f"'{word}'")
        return self.advance()

    # -- query ----------------------------------------------------------------------------------
    def parse_query(self) -> ParsedQuery:
        filt: Expr | None = None
        if self.peek().kind not in (Tok.EOF, Tok.RPAREN) and not self.at_kw("sort", "skip", "limit"):
            filt = self.parse_or()
        sort: tuple[SortField, ...] | None = None
        skip = limit = None
        if self.at_kw("sort"):
            self.advance()
            self.expect_kw("by")
            fields = [self.parse_sort_field()]
            while self.peek().kind is Tok.COMMA:
                self.advance()
                fields.append(self.parse_sort_field())
            sort = tuple(fields)
        if self.at_kw("skip"):
            self.advance()
            skip = self.parse_int()
        if self.at_kw("limit"):
            self.advance()
            if self.at_kw("none"):
                self.advance()
                limit = -1
            else:
                limit = self.parse_int()
        return ParsedQuery(filt, sort, skip, limit)

    def parse_sort_field(self) -> SortField:
        tok = self.expect(Tok.IDENT)
        ascending = True
        if self.at_kw("asc", "desc"):
            ascending = self.advance().word == "asc"
        return SortField(str(tok.value), ascending, tok.pos)

    def parse_int(self) -> int:
        tok = self.peek()
        if tok.kind is not Tok.NUMBER or not isinstance(tok.value, int):
            raise self.mismatch("an integer")
        self.advance()
        return tok.value

    # -- boolean expressions --------------------------------------------------------------------
    def parse_or(self) -> Expr:
        items = [self.parse_and()]
        while self.at_kw("or"):
            self.advance()
            items.append(self.parse_and())
        return items[0] if len(items) == 1 else Or(tuple(items))

    def parse_and(self) -> Expr:
        items = [self.parse_unary()]
        while self.at_kw("and"):
            self.advance()
            items.append(self.parse_unary())
        return items[0] if len(items) == 1 else And(tuple(items))

    def parse_unary(self) -> Expr:
        if self.at_kw("not"):
            self.advance()
            self.nest()
            inner = self.parse_or()  # `not` swallows the rest, like upstream's boolExpr(1)
            self.nesting -= 1
            return Not(inner)
        return self.parse_primary()

    def parse_primary(self) -> Expr:
        tok = self.peek()
        if tok.kind is Tok.LPAREN:
            self.advance()
            self.nest()
            inner = self.parse_or()
            self.expect(Tok.RPAREN)
            self.nesting -= 1
            return inner
        if tok.kind is Tok.IDENT:
            self.advance()
            ref = SymbolRef(str(tok.value), tok.pos)
            return self.parse_operation(ref) if self.at_operator() else BareSymbol(ref)
        if self.at_kw("true", "false"):
            self.advance()
            return BoolConst(tok.word == "true")
        if self.at_kw("isempty"):
            self.advance()
            return IsEmpty(self.parse_set_arg(), tok.pos)
        if self.at_kw("anyof", "allof"):
            self.advance()
            self.expect(Tok.LPAREN)
            name = self.expect(Tok.IDENT)
            self.expect(Tok.RPAREN)
            func = "anyOf" if tok.word == "anyof" else "allOf"
            return self.parse_operation(SetFunction(func, str(name.value), tok.pos))
        if self.at_kw("count"):
            self.advance()
            return self.parse_operation(Count(self.parse_set_arg(), tok.pos))
        raise self.mismatch("an expression")

    def parse_set_arg(self) -> SetExpr:
        self.expect(Tok.LPAREN)
        tok = self.peek()
        target: SetExpr
        if self.at_kw("from"):
            self.advance()
            name = self.expect(Tok.IDENT)
            self.expect_kw("where")
            self.nest()
            target = SubQuery(str(name.value), self.parse_query(), tok.pos)
            self.nesting -= 1
        else:
            name = self.expect(Tok.IDENT)
            target = SymbolRef(str(name.value), name.pos)
        self.expect(Tok.RPAREN)
        return target

    def at_operator(self) -> bool:
        if self.peek().kind is Tok.OP or self.at_kw(*_OPERATION_KEYWORDS):
            return True
        return self.at_kw("not") and self.at_kw(*_OPERATION_KEYWORDS, k=1)

    def parse_operation(self, lhs: Lhs) -> Expr:
        tok = self.peek()
        if tok.kind is Tok.OP:
            self.advance()
            allowed = _EQ_VALUES if tok.text in ("=", "!=") else _ORDER_VALUES
            return Compare(lhs, tok.text, self.parse_value(allowed))
        negated = self.at_kw("not")
        if negated:
            self.advance()
        if not self.at_kw(*_OPERATION_KEYWORDS):
            raise self.mismatch("{'=', '!=', '<', '<=', '>', '>=', 'in', 'between', 'contains', 'icontains'}")
        word = self.advance().word
        if word == "in":
            return InList(lhs, self.parse_array(), negated)
        if word == "between":
            low = self.parse_value((ValueKind.NUMBER, ValueKind.DATETIME))
            self.expect_kw("and")
            return Between(lhs, low, self.parse_value((low.kind,)), negated)
        kinds = (ValueKind.STRING, ValueKind.NUMBER) if word == "contains" else (ValueKind.STRING,)
        return Compare(lhs, word, self.parse_value(kinds), negated)

    def parse_array(self) -> tuple[Literal, ...]:
        self.expect(Tok.LBRACKET)
        values = [self.parse_value(_ORDER_VALUES)]
        while self.peek().kind is Tok.COMMA:
            self.advance()
            values.append(self.parse_value((values[0].kind,)))
        self.expect(Tok.RBRACKET)
        return tuple(values)

    def parse_value(self, allowed: tuple[ValueKind, ...]) -> Literal:
        tok = self.peek()
        kind = _KIND_OF.get(tok.kind)
        if kind is None and self.at_kw("true", "false"):
            kind = ValueKind.BOOL
        elif kind is None and self.at_kw("null"):
            kind = ValueKind.NULL
        if kind is None or kind not in allowed:
            raise self.mismatch(_describe(allowed))
        self.advance()
        value: LiteralValue = (tok.word == "true") if kind is ValueKind.BOOL else tok.value
        return Literal(kind, value, tok.pos)


def _describe(kinds: tuple[ValueKind, ...]) -> str:
    names = [k.value if k in (ValueKind.BOOL, ValueKind.NULL) else f"a {k.value}" for k in kinds]
    names = ["true/false" if n == "bool" else n for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def parse(text: str) -> ParsedQuery:
    """Parse a complete ZitiQL query. An empty or whitespace-only text is ``ParsedQuery(None)``.

    Results for filters of up to 4 KiB are cached (the AST is immutable).
    """
    return _parse_cached(text) if len(text) <= 4096 else _parse(text)


@lru_cache(maxsize=512)
def _parse_cached(text: str) -> ParsedQuery:
    return _parse(text)


def _parse(text: str) -> ParsedQuery:
    parser = _Parser(text)
    query = parser.parse_query()
    if parser.peek().kind is not Tok.EOF:
        if query.limit is not None:
            expecting = "<EOF>"
        elif query.skip is not None:
            expecting = "{'limit', <EOF>}"
        elif query.sort is not None:
            expecting = "{',', 'skip', 'limit', <EOF>}"
        elif query.filter is not None:
            expecting = "{'and', 'or', 'sort', 'skip', 'limit', <EOF>}"
        else:
            expecting = "an expression"
        raise parser.mismatch(expecting)
    return query
