"""The DSL's stateless steps over ``strom.col`` expressions: filter,
map_values and select_key run one native plan over the whole batch.

They read values that are still JSON bytes (``Batch.encoded``) without
building Python objects, and validate every one of them: a value that is
not JSON goes to the ``deserialization.exception.handler`` from here, as it
would from the source. ``map_values`` of a ``struct`` writes JSON bytes, so
a sink with a ``Json`` value serde appends them as they are.
"""

from __future__ import annotations

from typing import Any

from strom import _core
from strom.errors import ExpressionError
from strom.expr import Expr
from strom.processor.internals.batch import Batch
from strom.processor.internals.nodes import Node
from strom.serdes import Json

_JSON = Json()


class _ExprNode(Node):
    takes_encoded = True
    # Every value given is parsed whole: downstream, they are valid JSON.
    reads_json = True

    def __init__(self, expr: Expr) -> None:
        super().__init__()
        self.expr = expr
        self.plan = expr.plan

    def _input(self, batch: Batch) -> tuple[Batch, bool]:
        """The batch, and whether its values are raw JSON bytes."""
        if batch.encoded is None:
            return batch, False
        if isinstance(batch.encoded, Json):
            return batch, True
        return batch.decoded(), False

    def _failed(self, batch: Batch, errors: list[tuple[int, str, str]]) -> set[int]:
        """The rows to drop: a value that is not JSON is the deserialization
        handler's (which skips it or fails the task); an expression that
        fails on a row is the processing handler's, as an exception in a
        lambda is."""
        dropped = set()
        for row, kind, message in errors:
            if kind != "malformed":
                self.record_failed(batch, row, ExpressionError(f"{self.expr!r}: {message}"))
                dropped.add(row)
                continue
            self.value_not_json(batch, row, message)
            dropped.add(row)
        return dropped

    def _without(self, batch: Batch, dropped: set[int]) -> Batch:
        if not dropped:
            return batch
        return batch.select([i for i in range(len(batch)) if i not in dropped])


class ExprFilter(_ExprNode):
    """``filter``/``filter_not``: keeps the rows whose predicate is True
    (``filter_not``: those whose predicate is not True)."""

    def __init__(self, expr: Expr, negate: bool) -> None:
        super().__init__(expr)
        self.negate = negate

    def native_step(self) -> tuple[str, _core.ExprPlan] | None:
        return ("filter_not" if self.negate else "filter", self.plan)

    def process(self, batch: Batch) -> None:
        batch, raw = self._input(batch)
        rows, errors = self.plan.filter(batch.values, raw=raw)
        dropped = self._failed(batch, errors) if errors else set()
        if self.negate:
            true = set(rows)
            rows = [i for i in range(len(batch)) if i not in true and i not in dropped]
        self.forward(batch.select(rows))


class ExprMapValues(_ExprNode):
    """``map_values``: a struct becomes JSON bytes; other results objects."""

    def native_step(self) -> tuple[str, _core.ExprPlan] | None:
        return ("map", self.plan) if self.expr.is_struct else None

    def process(self, batch: Batch) -> None:
        batch, raw = self._input(batch)
        encoded: Any
        if self.expr.is_struct:
            values, errors = self.plan.to_json(batch.values, raw=raw)
            encoded = _JSON
        else:
            values, errors = self.plan.to_python(batch.values, raw=raw)
            encoded = None
        dropped = self._failed(batch, errors) if errors else set()
        out = Batch(
            batch.topic,
            batch.partition,
            batch.keys,
            values,
            batch.timestamps,
            batch.offsets,
            encoded=encoded,
        )
        self.forward(self._without(out, dropped))


class ExprSelectKey(_ExprNode):
    """``select_key``/``group_by``: the key is the expression's value."""

    def process(self, batch: Batch) -> None:
        batch, raw = self._input(batch)
        keys, errors = self.plan.to_python(batch.values, raw=raw)
        dropped = self._failed(batch, errors) if errors else set()
        out = Batch(
            batch.topic,
            batch.partition,
            keys,
            batch.values,
            batch.timestamps,
            batch.offsets,
            encoded=batch.encoded,
        )
        self.forward(self._without(out, dropped))
