"""The part of GitHub Actions' expression language that ootci's workflows use, evaluated as
GitHub does, so a test can render what an expression in a workflow gives for given inputs.

Literals (strings in single quotes, numbers, true, false, null), contexts (`inputs.login-shell`,
`secrets.x`), property access and indexing (null on a missing key), `!`, `==`, `!=`, `<`, `<=`,
`>`, `>=` (strings compared case-insensitively, other values as numbers), `&&` and `||` (which
return an operand, not a boolean), and the
functions startsWith, endsWith, contains, format, join, fromJSON and toJSON. Anything else is an
error, never a guess.
"""

from __future__ import annotations

import json
import re
from typing import Any

TOKEN = re.compile(r"""\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?)|(?P<op>&&|\|\||==|!=|<=|>=|[<>!().,\[\]])
                       |(?P<id>[A-Za-z_][A-Za-z0-9_-]*))""", re.X)


def tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"cannot read the expression at {text[pos:pos + 20]!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "") and not (isinstance(value, float) and value != value)


def to_string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return "Object" if isinstance(value, dict) else "Array"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def number(v: Any) -> float:
    """A value as GitHub coerces it for a loose comparison: null, false and '' are 0, true 1."""
    if v is None or v is False or v == "":
        return 0.0
    if v is True:
        return 1.0
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.casefold() == b.casefold()
    if type(a) is not type(b):
        return number(a) == number(b)  # loose equality: both sides as numbers
    return a == b


def ordered(a: Any, op: str, b: Any) -> bool:
    """a < b (and <=, >, >=): strings case-insensitively, anything else as numbers (NaN: false)."""
    if isinstance(a, str) and isinstance(b, str):
        a, b = a.casefold(), b.casefold()
    else:
        a, b = number(a), number(b)
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def _format(template: str, *args: Any) -> str:
    out, i = [], 0
    while i < len(template):
        if template.startswith("{{", i):
            out.append("{")
            i += 2
        elif template.startswith("}}", i):
            out.append("}")
            i += 2
        elif template[i] == "{":
            end = template.index("}", i)
            out.append(to_string(args[int(template[i + 1:end])]))
            i = end + 1
        else:
            out.append(template[i])
            i += 1
    return "".join(out)


def _join(value: Any, separator: str = ",") -> str:
    if isinstance(value, list):
        return separator.join(to_string(v) for v in value)
    return to_string(value)


FUNCTIONS = {
    "startswith": lambda s, p: to_string(s).casefold().startswith(to_string(p).casefold()),
    "endswith": lambda s, p: to_string(s).casefold().endswith(to_string(p).casefold()),
    "contains": lambda s, p: (any(equal(x, p) for x in s) if isinstance(s, list)
                              else to_string(p).casefold() in to_string(s).casefold()),
    "format": _format,
    "join": _join,
    "fromjson": lambda s: json.loads(s),
    "tojson": lambda v: json.dumps(v, indent=2),
}


class _Parser:
    def __init__(self, text: str, contexts: dict[str, Any]):
        self.toks = tokens(text)
        self.i = 0
        self.contexts = contexts

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            raise ValueError(f"expected {value!r}, got {tok!r}")
        self.i += 1
        return tok

    def parse(self) -> Any:
        value = self.or_()
        if self.peek() is not None:
            raise ValueError(f"unexpected {self.peek()!r}")
        return value

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == ("op", "||"):
            self.take()
            right = self.and_()
            value = value if truthy(value) else right
        return value

    def and_(self) -> Any:
        value = self.compare()
        while self.peek() == ("op", "&&"):
            self.take()
            right = self.compare()
            value = right if truthy(value) else value
        return value

    def compare(self) -> Any:
        value = self.unary()
        while self.peek() in (("op", "=="), ("op", "!="), ("op", "<"), ("op", "<="), ("op", ">"), ("op", ">=")):
            op = self.take()[1]
            if op in ("==", "!="):
                same = equal(value, self.unary())
                value = same if op == "==" else not same
            else:
                value = ordered(value, op, self.unary())
        return value

    def unary(self) -> Any:
        if self.peek() == ("op", "!"):
            self.take()
            return not truthy(self.unary())
        return self.postfix()

    def postfix(self) -> Any:
        value = self.primary()
        while self.peek() in (("op", "."), ("op", "[")):
            if self.take()[1] == ".":
                value = self.member(value, self.take()[1])
            else:
                key = self.or_()
                self.take("]")
                value = value[int(key)] if isinstance(value, list) and 0 <= int(key) < len(value) \
                    else self.member(value, to_string(key))
        return value

    @staticmethod
    def member(value: Any, name: str) -> Any:
        if isinstance(value, dict):
            for key, item in value.items():
                if key.casefold() == name.casefold():
                    return item
        return None

    def primary(self) -> Any:
        kind, text = self.take()
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text)
        if (kind, text) == ("op", "("):
            value = self.or_()
            self.take(")")
            return value
        if kind == "id":
            if text in ("true", "false", "null"):
                return {"true": True, "false": False, "null": None}[text]
            if self.peek() == ("op", "("):
                self.take()
                args = []
                while self.peek() != ("op", ")"):
                    args.append(self.or_())
                    if self.peek() == ("op", ","):
                        self.take()
                self.take(")")
                function = FUNCTIONS.get(text.casefold())
                if function is None:
                    raise ValueError(f"function {text}() is not modelled")
                return function(*args)
            if text not in self.contexts:
                raise ValueError(f"context {text!r} is not given")
            return self.contexts[text]
        raise ValueError(f"unexpected {text!r}")


def evaluate(expression: str, **contexts: Any) -> Any:
    """Value of `${{ expression }}` (with or without the braces) for the given contexts."""
    text = expression.strip()
    match = re.fullmatch(r"\$\{\{(.*)\}\}", text, re.S)
    return _Parser(match.group(1) if match else text, contexts).parse()
