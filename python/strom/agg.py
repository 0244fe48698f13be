"""Built-in aggregations that run entirely in the native kernels (no
per-record Python): ``count()``, ``sum(expr)``, ``min(expr)``,
``max(expr)``, ``mean(expr)``.

``expr`` is the value itself (omitted or None), a field name of a JSON
object value, or :func:`strom.col`. Pass one to
``TimeWindowedKStream.aggregate``; ``count()`` is also what
``TimeWindowedKStream.count()`` runs.

Result types:

- ``count()``: ``int`` (a Java ``long``; result serde ``Long``).
- ``sum``, ``min``, ``max``: the input's numeric type. The value itself is
  ``int`` with a ``Long`` or ``Integer`` value serde and ``float`` with
  ``Double``; a JSON field is ``float`` unless cast with
  ``strom.col("f").cast(int)``. ``int`` arithmetic wraps on overflow as
  Java's ``long`` does (an ``int`` input beyond 64 bits is an error), a
  ``float`` in an ``int`` aggregation is an error (never rounded), and
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
from strom.errors import TopologyError
from strom.expr import Col

__all__ = ["Aggregation", "count", "max", "mean", "min", "sum"]

Kind = Literal["count", "sum", "min", "max", "mean"]


@dataclass(frozen=True)
class Aggregation:
    """A built-in aggregation: what to compute (``kind``) of what (``expr``:
    None for the value itself, or a field)."""

    kind: Kind
    expr: Col | None = None

    @property
    def field(self) -> str | None:
        return None if self.expr is None else self.expr.name

    def value_type(self, value_serde: Any) -> Literal["int", "float"] | None:
        """The kernel's numeric type (None for a count): a cast wins; the
        value itself follows its serde; a JSON field is a float."""
        if self.kind == "count":
            return None
        if self.expr is not None and self.expr.dtype is not None:
            return "int" if self.expr.dtype is int else "float"
        if self.expr is None and isinstance(value_serde, serdes.Long | serdes.Integer):
            return "int"
        return "float"

    def result_type(self, value_serde: Any) -> Literal["int", "float"]:
        if self.kind == "mean":
            return "float"
        return self.value_type(value_serde) or "int"


def _expr(expr: str | Col | None, kind: str) -> Col | None:
    if expr is None or isinstance(expr, Col):
        return expr
    if isinstance(expr, str) and expr:
        return Col(expr)
    raise TopologyError(
        f"strom.agg.{kind} takes a field name, strom.col(...) or None, not {expr!r}"
    )


def count() -> Aggregation:
    """The number of records (``int``)."""
    return Aggregation("count")


def sum(expr: str | Col | None = None) -> Aggregation:
    """The sum of ``expr`` (see the module docs for its type)."""
    return Aggregation("sum", _expr(expr, "sum"))


def min(expr: str | Col | None = None) -> Aggregation:
    """The smallest ``expr``."""
    return Aggregation("min", _expr(expr, "min"))


def max(expr: str | Col | None = None) -> Aggregation:
    """The largest ``expr``."""
    return Aggregation("max", _expr(expr, "max"))


def mean(expr: str | Col | None = None) -> Aggregation:
    """The mean of ``expr`` (always ``float``)."""
    return Aggregation("mean", _expr(expr, "mean"))
