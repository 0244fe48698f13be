"""``strom.col``: a reference to a field of a record's value, for the native
fast paths (today: the built-in aggregations of :mod:`strom.agg`).

Only field references are implemented; arithmetic, comparisons and the
other expressions of the design are not yet.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Col", "col"]


@dataclass(frozen=True)
class Col:
    """The field ``name`` of a JSON object value (``value.get(name)``); a
    missing field or a JSON null is a null value. ``dtype`` is the numeric
    type aggregations read it as: ``int`` or ``float`` (see :meth:`cast`)."""

    name: str
    dtype: type[int] | type[float] | None = None

    def cast(self, dtype: type[int] | type[float]) -> Col:
        """Reads the field as ``int`` (Java ``long``: a float value is an
        error, never rounded) or ``float`` (Java ``double``)."""
        if dtype is not int and dtype is not float:
            raise TypeError(f"a field can be cast to int or float, not {dtype!r}")
        return Col(self.name, dtype)


def col(name: str) -> Col:
    """A reference to the field ``name`` of a JSON object value."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"a field name is a non-empty str, not {name!r}")
    return Col(name)
