"""Built-in aggregations that run entirely in the native kernels (no
per-record Python): ``count()``, ``sum(expr)``, ``min(expr)``,
``max(expr)``, ``mean(expr)``.

``expr`` is the value itself (omitted or None), a field name of a JSON
object value, or a :mod:`strom.expr` expression (``strom.col("price") *
strom.col("qty")``), evaluated over each batch in the native kernels. Pass one to
``TimeWindowedKStream.aggregate``; ``count()`` is also what
``TimeWindowedKStream.count()`` runs.

Result types:

- ``count()``: ``int`` (a Java ``long``; result serde ``Long``).
- ``sum``, ``min``, ``max``: the input's numeric type. The value itself is
  ``int`` with a ``Long`` or ``Integer`` value serde and ``float`` with
  ``Double``; a JSON field or an expression is ``float`` unless cast with
  ``.cast(int)`` (on a plain field, ``strom.col("f").cast(int)`` reads a
  Java ``long``: a float value is an error there, not truncated). ``int``
  arithmetic wraps on overflow as Java's ``long`` does (an ``int`` input
  beyond 64 bits is an error), a ``float`` in an ``int`` aggregation is an
  error (never rounded), and
  ``int`` inputs of a ``float`` aggregation are converted to the nearest
  double. ``min``/``max`` of floats follow Java's ``Math.min``/``Math.max``
  (NaN wins; -0.0 < 0.0). Result serde ``Long`` or ``Double``.
- ``mean``: ``float``, the sum (as a double) divided by the count, whatever
  the input type. The window store keeps the sum and the count (16 bytes);
  interactive queries read the mean.

Null values (and missing fields) are skipped and counted as dropped
records, as records with a null key are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from strom import serdes
from strom.errors import ExpressionError, TopologyError
from strom.expr import Expr, cast_type, col, field_cast

__all__ = ["Aggregation", "count", "max", "mean", "min", "sum"]

Kind = Literal["count", "sum", "min", "max", "mean"]


@dataclass(frozen=True, eq=False)
class Aggregation:
    """A built-in aggregation: what to compute (``kind``) of what (``expr``:
    None for the value itself, or an expression)."""

    kind: Kind
    expr: Expr | None = None

    @property
    def field(self) -> str | None:
        """The top-level field the kernel reads itself (None for the value
        itself or an expression evaluated first)."""
        simple = None if self.expr is None else field_cast(self.expr)
        return None if simple is None else simple[0]

    def reads_raw_json(self, raw: bool) -> bool:
        """Whether :meth:`kernel_input` takes the values as JSON bytes: a
        count ignores them, an expression reads them natively."""
        return self.kind == "count" or (raw and self.expr is not None and self.field is None)

    def kernel_input(self, values: list[Any], *, raw: bool = False) -> tuple[list[Any], str | None]:
        """The values the kernel aggregates (JSON bytes if ``raw``) and the
        field it reads in them."""
        if self.kind == "count" or self.expr is None or self.field is not None:
            return values, self.field
        results, errors = self.expr.plan.to_python(values, raw=raw)
        if errors:
            row, _kind, message = errors[0]
            raise ExpressionError(f"{self.expr!r} failed on record {row} of the batch: {message}")
        return results, None

    def value_type(self, value_serde: Any) -> Literal["int", "float"] | None:
        """The kernel's numeric type (None for a count): a cast wins; the
        value itself follows its serde; a JSON field is a float."""
        if self.kind == "count":
            return None
        dtype = None if self.expr is None else cast_type(self.expr)
        if dtype is not None:
            return "int" if dtype is int else "float"
        if self.expr is None and isinstance(value_serde, serdes.Long | serdes.Integer):
            return "int"
        return "float"

    def result_type(self, value_serde: Any) -> Literal["int", "float"]:
        if self.kind == "mean":
            return "float"
        return self.value_type(value_serde) or "int"


def _expr(expr: str | Expr | None, kind: str) -> Expr | None:
    if isinstance(expr, Expr):
        if cast_type(expr) is str:
            raise TopologyError(f"strom.agg.{kind} aggregates numbers, not {expr!r}")
        return expr
    if expr is None:
        return None
    if isinstance(expr, str) and expr:
        return col(expr)
    raise TopologyError(
        f"strom.agg.{kind} takes a field name, a strom.col expression or None, not {expr!r}"
    )


def count() -> Aggregation:
    """The number of records (``int``)."""
    return Aggregation("count")


def sum(expr: str | Expr | None = None) -> Aggregation:
    """The sum of ``expr`` (see the module docs for its type)."""
    return Aggregation("sum", _expr(expr, "sum"))


def min(expr: str | Expr | None = None) -> Aggregation:
    """The smallest ``expr``."""
    return Aggregation("min", _expr(expr, "min"))


def max(expr: str | Expr | None = None) -> Aggregation:
    """The largest ``expr``."""
    return Aggregation("max", _expr(expr, "max"))


def mean(expr: str | Expr | None = None) -> Aggregation:
    """The mean of ``expr`` (always ``float``)."""
    return Aggregation("mean", _expr(expr, "mean"))
