"""Column expressions: ``strom.col``, ``strom.lit`` and ``strom.struct``,
combined with operators into a tree that runs in the native kernels.

An expression reads fields of a record's value (a JSON object): ``col("a")``,
nested ``col("a.b")``, or the value itself: ``col()``. It takes
``+ - * / // %``, comparisons, ``& | ~``
(not ``and``/``or``/``not``: Python cannot overload those), ``.is_null()``,
``.cast(int | float | str)``, and the string methods ``.startswith``,
``.contains``, ``.upper``, ``.lower``; ``struct(name=expr, …)`` builds a JSON
object. Pass one wherever the DSL takes a function of the value (``filter``,
``filter_not``, ``map_values``, ``select_key``, ``group_by``, join key
selectors, ``strom.agg``): the stateless ones then run over whole batches
in Rust, and values that arrive and leave as JSON bytes are never turned
into Python objects. An expression is also a plain callable,
``expr(key, value)`` or ``expr(value)``, so it fits any other callback too.

Semantics (Python's where Python has one, SQL's for nulls):

- A missing field, a JSON ``null`` and a null value are ``None``; operators
  given ``None`` give ``None`` (but ``is_null``, ``&``, ``|``).
- ``int`` is a Java ``long``: ``+ - *`` wrap on overflow (as Kafka Streams'
  Java would); ``/`` is true division (a float, as in Python); ``//`` and
  ``%`` floor as Python's do (``-7 // 2 == -4``, ``-7 % 2 == 1``). A division
  or modulo by zero is ``None``, not an error (Spark SQL's non-ANSI rule).
- A float operand makes the result a float; ``str + str`` concatenates.
- ``==``/``!=`` between different types are False/True (int and float
  compare by value, exactly); ``<`` and friends between them are an error.
- ``&``, ``|``, ``~`` are three-valued (SQL): ``False & None`` is False,
  ``True | None`` is True, ``~None`` is None. A filter keeps the records whose
  predicate is True: None (unknown) drops the record, as SQL's ``WHERE`` does,
  and ``filter_not`` keeps it.
- ``cast(int)`` truncates a float toward zero and parses a string as
  Python's ``int()`` does; ``cast(float)`` parses a string; ``cast(str)``
  writes a float as Python's ``repr`` (``1e+16``) and a bool as ``True``.
- A failing row (an operator given types it does not take, a failed cast)
  fails the task naming the record, as an exception in a lambda does; a
  value that is not JSON goes to the ``deserialization.exception.handler``.
- A JSON integer beyond 64 bits is read as a float; ``NaN``/``Infinity``
  literals are not JSON and are rejected (Jackson rejects them too).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import cached_property
from typing import Any, Final

from strom import _core
from strom.errors import ExpressionError

__all__ = ["Col", "Expr", "col", "lit", "struct"]

_CASTS: Final = {int: "cast_int", float: "cast_float", str: "cast_str"}
_SYMBOLS: Final = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "truediv": "/",
    "floordiv": "//",
    "mod": "%",
    "eq": "==",
    "ne": "!=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "and": "&",
    "or": "|",
}
_LIT_TYPES: Final = (type(None), bool, int, float, str)


def _wrap(value: Any) -> Expr:
    if isinstance(value, Expr):
        return value
    return lit(value)


class Expr(ABC):
    """An expression over a record's value; build one with :func:`col`,
    :func:`lit` and :func:`struct`."""

    __slots__ = ("__dict__",)
    # Operators build expressions, so == does not compare expressions.
    __hash__ = object.__hash__

    @abstractmethod
    def tree(self) -> tuple[Any, ...]:
        """The nested-tuple form the native plan is compiled from."""

    @cached_property
    def plan(self) -> _core.ExprPlan:
        """The native plan (compiled once)."""
        return _core.ExprPlan(self.tree())

    def __getstate__(self) -> dict[str, Any]:
        # The native plan is not pickled (Spark ships topologies): it is
        # compiled again where it is first used.
        return {k: v for k, v in self.__dict__.items() if k != "plan"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def is_struct(self) -> bool:
        return False

    def __call__(self, *args: Any) -> Any:
        """The expression's value for one record: ``expr(value)`` or
        ``expr(key, value)`` (the key is not read), so an expression fits any
        callback; the DSL's stateless steps run it over whole batches."""
        if len(args) not in (1, 2):
            raise TypeError(f"an expression takes (value) or (key, value), got {len(args)} args")
        values, errors = self.plan.to_python([args[-1]], raw=False)
        if errors:
            raise ExpressionError(f"{self!r}: {errors[0][2]}")
        return values[0]

    def __bool__(self) -> bool:
        raise TypeError(
            f"an expression has no truth value ({self!r}): combine conditions with "
            "& | ~ (not and/or/not) and wrap each comparison in parentheses"
        )

    # --- operators -----------------------------------------------------------
    def _binary(self, op: str, other: Any, reflected: bool = False) -> Expr:
        a, b = (_wrap(other), self) if reflected else (self, _wrap(other))
        return _Binary(op, a, b)

    def __add__(self, other: Any) -> Expr:
        return self._binary("add", other)

    def __radd__(self, other: Any) -> Expr:
        return self._binary("add", other, True)

    def __sub__(self, other: Any) -> Expr:
        return self._binary("sub", other)

    def __rsub__(self, other: Any) -> Expr:
        return self._binary("sub", other, True)

    def __mul__(self, other: Any) -> Expr:
        return self._binary("mul", other)

    def __rmul__(self, other: Any) -> Expr:
        return self._binary("mul", other, True)

    def __truediv__(self, other: Any) -> Expr:
        return self._binary("truediv", other)

    def __rtruediv__(self, other: Any) -> Expr:
        return self._binary("truediv", other, True)

    def __floordiv__(self, other: Any) -> Expr:
        return self._binary("floordiv", other)

    def __rfloordiv__(self, other: Any) -> Expr:
        return self._binary("floordiv", other, True)

    def __mod__(self, other: Any) -> Expr:
        return self._binary("mod", other)

    def __rmod__(self, other: Any) -> Expr:
        return self._binary("mod", other, True)

    def __eq__(self, other: object) -> Expr:  # type: ignore[override]
        return self._binary("eq", other)

    def __ne__(self, other: object) -> Expr:  # type: ignore[override]
        return self._binary("ne", other)

    def __lt__(self, other: Any) -> Expr:
        return self._binary("lt", other)

    def __le__(self, other: Any) -> Expr:
        return self._binary("le", other)

    def __gt__(self, other: Any) -> Expr:
        return self._binary("gt", other)

    def __ge__(self, other: Any) -> Expr:
        return self._binary("ge", other)

    def __and__(self, other: Any) -> Expr:
        return self._binary("and", other)

    def __rand__(self, other: Any) -> Expr:
        return self._binary("and", other, True)

    def __or__(self, other: Any) -> Expr:
        return self._binary("or", other)

    def __ror__(self, other: Any) -> Expr:
        return self._binary("or", other, True)

    def __invert__(self) -> Expr:
        return _Unary("not", self)

    def __neg__(self) -> Expr:
        return _Unary("neg", self)

    # --- methods -------------------------------------------------------------
    def is_null(self) -> Expr:
        """True where the value is None (a missing field, a JSON null)."""
        return _Unary("is_null", self)

    def cast(self, dtype: type[int] | type[float] | type[str]) -> Expr:
        """The value as ``int``, ``float`` or ``str`` (see the module docs)."""
        op = _CASTS.get(dtype)
        if op is None:
            raise TypeError(f"an expression can be cast to int, float or str, not {dtype!r}")
        return _Unary(op, self, dtype)

    def startswith(self, prefix: str | Expr) -> Expr:
        return _Binary("startswith", self, _wrap(prefix))

    def contains(self, part: str | Expr) -> Expr:
        return _Binary("contains", self, _wrap(part))

    def upper(self) -> Expr:
        return _Unary("upper", self)

    def lower(self) -> Expr:
        return _Unary("lower", self)


class Col(Expr):
    """The field ``name`` of a JSON object value; dots name nested fields.
    No name: the value itself."""

    def __init__(self, name: str | None) -> None:
        self.name = name
        self.path = () if name is None else tuple(name.split("."))

    def tree(self) -> tuple[Any, ...]:
        return ("col", self.path)

    def __repr__(self) -> str:
        return "col()" if self.name is None else f"col({self.name!r})"


class _Lit(Expr):
    def __init__(self, value: Any) -> None:
        self.value = value

    def tree(self) -> tuple[Any, ...]:
        return ("lit", self.value)

    def __repr__(self) -> str:
        return repr(self.value)


class _Unary(Expr):
    def __init__(self, op: str, operand: Expr, dtype: type | None = None) -> None:
        self.op = op
        self.operand = operand
        self.dtype = dtype  # the cast's type

    def tree(self) -> tuple[Any, ...]:
        return ("unary", self.op, self.operand.tree())

    def __repr__(self) -> str:
        if self.op == "not":
            return f"~{self.operand!r}"
        if self.op == "neg":
            return f"-{self.operand!r}"
        if self.dtype is not None:
            return f"{self.operand!r}.cast({self.dtype.__name__})"
        return f"{self.operand!r}.{self.op}()"


class _Binary(Expr):
    def __init__(self, op: str, left: Expr, right: Expr) -> None:
        self.op = op
        self.left = left
        self.right = right

    def tree(self) -> tuple[Any, ...]:
        return ("binary", self.op, self.left.tree(), self.right.tree())

    def __repr__(self) -> str:
        symbol = _SYMBOLS.get(self.op)
        if symbol is None:
            return f"{self.left!r}.{self.op}({self.right!r})"
        return f"({self.left!r} {symbol} {self.right!r})"


class _Struct(Expr):
    def __init__(self, fields: dict[str, Expr]) -> None:
        self.fields = fields

    @property
    def is_struct(self) -> bool:
        return True

    def tree(self) -> tuple[Any, ...]:
        return ("struct", tuple((name, e.tree()) for name, e in self.fields.items()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={e!r}" for name, e in self.fields.items())
        return f"struct({inner})"


def col(name: str | None = None) -> Col:
    """The field ``name`` of a JSON object value (``"a.b"``: field ``b`` of
    the object in field ``a``); without a name, the value itself (a string,
    a number: ``col().startswith("x")`` on a stream of ``String`` values)."""
    if name is not None and (not isinstance(name, str) or "" in name.split(".")):
        raise TypeError(f"a field name is a non-empty str (dots between names), not {name!r}")
    return Col(name)


def lit(value: bool | int | float | str | None) -> Expr:
    """A constant."""
    if not isinstance(value, _LIT_TYPES):
        raise TypeError(f"a literal is None, bool, int, float or str, not {type(value).__name__}")
    if type(value) is int and not -(2**63) <= value < 2**63:
        raise TypeError(f"an int literal must fit a 64-bit long: {value}")
    return _Lit(value)


def struct(**fields: Expr | bool | int | float | str | None) -> Expr:
    """A JSON object with these fields, in this order (constants allowed)."""
    if not fields:
        raise TypeError("struct() needs at least one field")
    return _Struct({name: _wrap(e) for name, e in fields.items()})


def cast_type(e: Expr) -> type | None:
    """The type of a cast at the top of ``e`` (None if there is none)."""
    return e.dtype if isinstance(e, _Unary) else None


def field_cast(e: Expr) -> tuple[str, type | None] | None:
    """``(name, cast type)`` when ``e`` is a top-level field, cast to int or
    float or not cast (the window kernels read such fields themselves)."""
    dtype = cast_type(e)
    if isinstance(e, _Unary) and dtype in (int, float):
        e = e.operand
    elif dtype is not None:
        return None
    if isinstance(e, Col) and e.name is not None and len(e.path) == 1:
        return e.name, dtype
    return None
