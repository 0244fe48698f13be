"""``strom.col`` expressions against a model of their documented semantics
(python/strom/expr.py), on both native paths: Python values (the callable
form, steps after a Python step) and raw JSON bytes (steps fed by a Json
source). Random expressions over random records, record for record."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strom
from strom import col, lit, serdes, struct
from strom.errors import ExpressionError, TopologyError
from strom.expr import Expr

I64 = 2**63


class Fails(Exception):
    """The model's error: the expression must fail on this record too."""


def wrap(i: int) -> int:
    """Java long arithmetic."""
    return (i + I64) % (2 * I64) - I64


def kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    return "json"


def arith(op: str, a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    ka, kb = kind(a), kind(b)
    if ka == kb == "int":
        if op == "truediv":
            return None if b == 0 else float(a) / float(b)
        if op in ("floordiv", "mod") and b == 0:
            return None
        ops = {
            "add": lambda: a + b,
            "sub": lambda: a - b,
            "mul": lambda: a * b,
            "floordiv": lambda: a // b,
            "mod": lambda: a % b,
        }
        return wrap(ops[op]())
    if ka in ("int", "float") and kb in ("int", "float"):
        x, y = float(a), float(b)
        if op in ("add", "sub", "mul"):
            return {"add": x + y, "sub": x - y, "mul": x * y}[op]
        if y == 0.0:
            return None
        return {"truediv": lambda: x / y, "floordiv": lambda: x // y, "mod": lambda: x % y}[op]()
    if op == "add" and ka == kb == "str":
        return a + b
    raise Fails


def compare(op: str, a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    ka, kb = kind(a), kind(b)
    if "json" in (ka, kb):
        raise Fails
    numbers = {ka, kb} <= {"int", "float"}
    comparable = numbers or ka == kb
    if op in ("eq", "ne"):
        equal = comparable and a == b
        return equal if op == "eq" else not equal
    if not comparable:
        raise Fails
    return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[op]


def truth(v: Any) -> bool | None:
    if v is None or isinstance(v, bool):
        return v
    raise Fails


def logic(op: str, a: Any, b: Any) -> Any:
    x, y = truth(a), truth(b)
    decisive = op == "or"
    if decisive in (x, y):
        return decisive
    if x is None or y is None:
        return None
    return not decisive


def cast(to: type, v: Any) -> Any:
    if v is None:
        return None
    k = kind(v)
    if to is str:
        if k == "float":
            return repr(v)
        if k == "json":
            raise Fails  # not generated
        return str(v)
    if k == "json":
        raise Fails
    try:
        out = to(v.strip() if k == "str" else v)
    except (ValueError, OverflowError):
        raise Fails from None
    if to is int and not -I64 <= out < I64:
        raise Fails
    return out


def unary(op: str, v: Any) -> Any:
    if op == "is_null":
        return v is None
    if v is None:
        return None
    if op == "not":
        return not truth(v)
    if op == "neg":
        if kind(v) == "int":
            return wrap(-v)
        if kind(v) == "float":
            return -v
        raise Fails
    if kind(v) != "str":
        raise Fails
    return v.upper() if op == "upper" else v.lower()


def string_op(op: str, a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    if kind(a) != "str" or kind(b) != "str":
        raise Fails
    return a.startswith(b) if op == "startswith" else b in a


# --- random records and expressions -------------------------------------------
ALPHABET = "ab0129 -.eéßİ"
ints = st.one_of(st.integers(-1000, 1000), st.integers(-(2**40), 2**40))
floats = st.floats(allow_nan=False, allow_infinity=False, width=64)
scalars = st.one_of(st.none(), st.booleans(), ints, floats, st.text(ALPHABET, max_size=6))
FIELDS = ["a", "b", "c", "s", "o.x", "o", "missing"]
records = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "a": scalars,
            "b": scalars,
            "c": ints,
            "s": st.text(ALPHABET, max_size=6),
            "o": st.one_of(
                st.fixed_dictionaries({}, optional={"x": scalars}), st.lists(ints, max_size=2)
            ),
        },
    ),
    st.none(),
    scalars,
)


def get(value: Any, path: str) -> Any:
    for name in path.split("."):
        if not isinstance(value, dict) or name not in value:
            return None
        value = value[name]
    return value


Model = Any  # a function of the record: its value, or raises Fails

leaves = st.one_of(
    st.sampled_from([p for p in FIELDS if p != "o"]).map(
        lambda p: (col(p), lambda v, p=p: get(v, p))
    ),
    scalars.map(lambda x: (lit(x), lambda _v, x=x: x)),
)


def extend(children: Any) -> Any:
    binary_ops = [
        *(["add", "sub", "mul", "truediv", "floordiv", "mod"]),
        *(["eq", "ne", "lt", "le", "gt", "ge"]),
        "and",
        "or",
        "startswith",
        "contains",
    ]
    unary_ops = ["not", "neg", "is_null", "upper", "lower", int, float, str]

    def make_binary(op: str, left: tuple[Expr, Model], right: tuple[Expr, Model]) -> Any:
        (le, lm), (re_, rm) = left, right
        if op in ("startswith", "contains"):
            e = getattr(le, op)(re_)
            fn = string_op
        else:
            symbol = {
                "add": "__add__",
                "sub": "__sub__",
                "mul": "__mul__",
                "truediv": "__truediv__",
                "floordiv": "__floordiv__",
                "mod": "__mod__",
                "eq": "__eq__",
                "ne": "__ne__",
                "lt": "__lt__",
                "le": "__le__",
                "gt": "__gt__",
                "ge": "__ge__",
                "and": "__and__",
                "or": "__or__",
            }[op]
            e = getattr(le, symbol)(re_)
            fn = (
                arith
                if op in ("add", "sub", "mul", "truediv", "floordiv", "mod")
                else logic
                if op in ("and", "or")
                else compare
            )
        return (e, lambda v: fn(op, lm(v), rm(v)))

    def make_unary(op: Any, child: tuple[Expr, Model]) -> Any:
        ce, cm = child
        if isinstance(op, type):
            return (ce.cast(op), lambda v: cast(op, cm(v)))
        e = {
            "not": lambda: ~ce,
            "neg": lambda: -ce,
            "is_null": ce.is_null,
            "upper": ce.upper,
            "lower": ce.lower,
        }[op]()
        return (e, lambda v: unary(op, cm(v)))

    return st.one_of(
        st.builds(make_binary, st.sampled_from(binary_ops), children, children),
        st.builds(make_unary, st.sampled_from(unary_ops), children),
    )


expressions = st.recursive(leaves, extend, max_leaves=6)


def outcome(model: Model, value: Any) -> Any:
    try:
        return ("ok", model(value))
    except Fails:
        return ("fails",)


def same(a: Any, b: Any) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "fails":
        return True
    x, y = a[1], b[1]
    if isinstance(x, float) and isinstance(y, float):
        return repr(x) == repr(y) or (math.isnan(x) and math.isnan(y))
    return type(x) is type(y) and x == y


@settings(max_examples=400, deadline=None)
@given(expressions, st.lists(records, min_size=1, max_size=8))
def test_expressions_match_the_model_on_both_paths(
    pair: tuple[Expr, Model], rows: list[Any]
) -> None:
    expr, model = pair
    expected = [outcome(model, v) for v in rows]
    # Python values: the callable form (one record at a time) and the batch.
    for value, want in zip(rows, expected, strict=True):
        try:
            got = ("ok", expr(value))
        except ExpressionError:
            got = ("fails",)
        assert same(got, want), (expr, value, got, want)
    values, errors = expr.plan.to_python(rows, raw=False)
    failed = {row for row, _kind, _message in errors}
    batch = [("fails",) if i in failed else ("ok", v) for i, v in enumerate(values)]
    assert all(same(g, w) for g, w in zip(batch, expected, strict=True)), (expr, rows)
    # Raw JSON bytes, as a Json source hands them on.
    raw = [None if v is None else json.dumps(v).encode() for v in rows]
    values, errors = expr.plan.to_python(raw, raw=True)
    assert all(kind != "malformed" for _row, kind, _m in errors)
    failed = {row for row, _kind, _message in errors}
    from_bytes = [("fails",) if i in failed else ("ok", v) for i, v in enumerate(values)]
    assert all(same(g, w) for g, w in zip(from_bytes, expected, strict=True)), (expr, rows)
    # A filter keeps exactly the rows whose result is True.
    kept, _errors = expr.plan.filter(raw, raw=True)
    assert kept == [i for i, w in enumerate(expected) if w[0] == "ok" and w[1] is True]


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), ints, floats, st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text("abcé ß", min_size=1, max_size=4), json_values, min_size=1))
def test_struct_output_is_what_the_json_serde_writes(record: dict[str, Any]) -> None:
    """A struct of the record's fields is written byte for byte as
    serdes.Json writes the same dict (both as Jackson does)."""
    e = struct(**{f"f{i}": col(name) for i, name in enumerate(record)})
    expected_object = {f"f{i}": record[name] for i, name in enumerate(record)}
    raw = json.dumps(record, ensure_ascii=False).encode()
    out, errors = e.plan.to_json([raw], raw=True)
    assert not errors
    assert out == [serdes.Json().serialize("t", expected_object)]
    assert json.loads(out[0]) == expected_object
    # The same from Python values.
    assert e.plan.to_json([record], raw=False)[0] == out


def test_json_serde_writes_as_jackson() -> None:
    J = serdes.Json()
    assert J.serialize("t", {"f": 1e10, "g": 0.001, "h": 1e-4, "i": 2**70}) == (
        b'{"f":1.0E10,"g":0.001,"h":1.0E-4,"i":1180591620717411303424}'
    )
    assert J.serialize("t", [float("nan"), float("-inf")]) == b'["NaN","-Infinity"]'
    assert J.serialize("t", "\x01é\U0001f600") == b'"\\u0001\xc3\xa9\\uD83D\\uDE00"'
    assert J.serialize("t", {1: True, None: False}) == b'{"1":true,"null":false}'


def test_literals_and_names_are_checked() -> None:
    with pytest.raises(TypeError, match="64-bit"):
        lit(2**63)
    with pytest.raises(TypeError, match="literal"):
        lit([1])
    with pytest.raises(TypeError, match="field name"):
        col("a..b")
    with pytest.raises(TypeError, match="cast"):
        col("a").cast(bool)
    with pytest.raises(TypeError, match="no truth value"):
        bool(col("a") > 1)
    with pytest.raises(TypeError, match="no truth value"):
        _ = (col("a") > 1) and (col("b") > 1)
    with pytest.raises(TopologyError, match="numbers"):
        strom.agg.sum(col("a").cast(str))


def test_repr_reads_like_the_code() -> None:
    e = ((col("auction") % 123) == 0) & ~col("s").startswith("x")
    assert repr(e) == "(((col('auction') % 123) == 0) & ~col('s').startswith('x'))"
    assert repr(struct(p=col("price") * 89 // 100, c=col().cast(int))) == (
        "struct(p=((col('price') * 89) // 100), c=col().cast(int))"
    )
