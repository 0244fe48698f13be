"""The vocabulary of user functions a case spec names. Each has a Java twin
of the same name in tests/reference/.../Fns.java computing the same thing;
keep the two in step. Values flow as strings (Long only out of count), so
every function reads its inputs through ``s`` (text) and ``n`` (number)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from strom import KeyValue
from strom.kstream import Windowed
from strom.processor import Processor, ProcessorContext, Record, ValueTransformerWithKey

_INT = re.compile(r"-?[0-9]{1,9}")
_ABC = ("a", "b", "c")


def s(x: Any) -> str:
    """A value as text as Java prints it: "null" for None, windowed keys as
    ``key@start/end``."""
    if x is None:
        return "null"
    if isinstance(x, Windowed):
        return f"{s(x.key)}@{x.window.start}/{x.window.end}"
    return str(x)


def n(x: Any) -> int:
    """A value as a number: its integer, else its text's length; None is 0."""
    if x is None:
        return 0
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    text = s(x)
    return int(text) if _INT.fullmatch(text) else len(text)


def _even(v: Any) -> bool:
    return n(v) % 2 == 0  # Python's % is Java's Math.floorMod


def _abc(v: Any) -> str:
    return _ABC[n(v) % 3]


PREDICATES: dict[str, Callable[[Any, Any], bool]] = {
    "p_even": lambda k, v: v is not None and _even(v),
    "p_gt4": lambda k, v: v is not None and n(v) > 4,
    "p_key_a": lambda k, v: k == "a",
    "p_not_null": lambda k, v: v is not None,
    "p_small_or_null": lambda k, v: v is None or n(v) < 3,
}

MAPPERS: dict[str, Callable[[Any], Any]] = {
    "m_inc": lambda v: None if v is None else s(n(v) + 1),
    "m_tag": lambda v: "x" + s(v),
    "m_null_if_odd": lambda v: None if v is None or not _even(v) else s(v),
    "m_mod3": lambda v: None if v is None else s(n(v) % 3),
}

KV_MAPPERS: dict[str, Callable[[Any, Any], KeyValue]] = {
    "kv_key_from_value": lambda k, v: KeyValue(None if v is None else f"k{n(v) % 3}", s(k)),
    "kv_rekey_ab": lambda k, v: KeyValue(
        None if v is None else ("a" if _even(v) else "b"), None if v is None else s(v)
    ),
    "kv_swap": lambda k, v: KeyValue(s(v), s(k)),
    "kv_same": lambda k, v: KeyValue(k, None if v is None else s(v)),
}

KEY_SELECTORS: dict[str, Callable[[Any, Any], Any]] = {
    "k_from_value": lambda k, v: None if v is None else f"k{n(v) % 3}",
    "k_abc_from_value": lambda k, v: None if v is None else _abc(v),
    "k_const": lambda k, v: "z",
    "k_same": lambda k, v: k,
    "k_text": lambda k, v: s(k),
    "k_null_for_c": lambda k, v: None if k == "c" else k,
}

FLAT_MAPPERS: dict[str, Callable[[Any, Any], Iterable[KeyValue]]] = {
    "fm_dup": lambda k, v: [KeyValue(k, s(v)), KeyValue(k, s(v) + "!")],
    "fm_drop_odd": lambda k, v: [] if v is None or not _even(v) else [KeyValue(k, s(v))],
}

FLAT_VALUE_MAPPERS: dict[str, Callable[[Any], Iterable[Any]]] = {
    "fmv_split": lambda v: [s(v), "e"] if v is not None and _even(v) else [],
}

# Given the key too (``with_key=True``, Kafka's ValueMapperWithKey).
# KTable.transform_values: transform(key, value) of a ValueTransformerWithKey,
# which Kafka calls for deletes (None) too.
TRANSFORMERS: dict[str, Callable[[Any, Any], Any]] = {
    "t_key_arrow": lambda k, v: s(k) + "->" + s(v) + "!",
    "t_keep_nulls": lambda k, v: None if v is None else s(k) + "=" + s(v),
}


class Transformer(ValueTransformerWithKey[Any, Any]):
    """A ValueTransformerWithKey of the TRANSFORMERS function ``name``."""

    def __init__(self, name: str) -> None:
        self.fn = TRANSFORMERS[name]

    def transform(self, read_only_key: Any, value: Any) -> Any:
        return self.fn(read_only_key, value)


KEYED_MAPPERS: dict[str, Callable[[Any, Any], Any]] = {
    "mk_key_tag": lambda k, v: s(k) + ":" + s(v),
    "mk_null_unless_key_a": lambda k, v: s(v) if s(k).startswith("a") else None,
}

KEYED_FLAT_VALUE_MAPPERS: dict[str, Callable[[Any, Any], Iterable[Any]]] = {
    "fmk_key_and_value": lambda k, v: [] if v is None else [s(k), s(v)],
}

REDUCERS: dict[str, Callable[[Any, Any], Any]] = {
    "r_concat": lambda agg, v: s(agg) + "|" + s(v),
    "r_sum": lambda agg, v: s(n(agg) + n(v)),
    "r_null_if_big": lambda agg, v: None if n(agg) + n(v) > 8 else s(n(agg) + n(v)),
    "r_sub": lambda agg, v: s(n(agg) - n(v)),
    "r_sub_concat": lambda agg, v: s(agg) + "-" + s(v),
}

INITIALIZERS: dict[str, Callable[[], Any]] = {
    "i_empty": lambda: "",
    "i_zero": lambda: "0",
}

AGGREGATORS: dict[str, Callable[[Any, Any, Any], Any]] = {
    "a_concat": lambda k, v, agg: s(agg) + s(v),
    "a_sum": lambda k, v, agg: s(n(agg) + n(v)),
    "a_null_if_big": lambda k, v, agg: None if n(agg) + n(v) > 8 else s(n(agg) + n(v)),
    "a_sub": lambda k, v, agg: s(n(agg) - n(v)),
    "a_sub_concat": lambda k, v, agg: s(agg) + "-" + s(v),
    "a_sub_null": lambda k, v, agg: None if n(agg) - n(v) <= 0 else s(n(agg) - n(v)),
}

MERGERS: dict[str, Callable[[Any, Any, Any], Any]] = {
    "g_concat": lambda k, a1, a2: s(a1) + "+" + s(a2),
    "g_sum": lambda k, a1, a2: s(n(a1) + n(a2)),
}

# Given the key too (``with_key=True``, Kafka's ValueJoinerWithKey; Kafka's
# stream joins take one, its table joins do not).
KEYED_JOINERS: dict[str, Callable[[Any, Any, Any], Any]] = {
    "jk_key_pair": lambda k, v1, v2: s(k) + ":" + s(v1) + "," + s(v2),
}

JOINERS: dict[str, Callable[[Any, Any], Any]] = {
    "j_pair": lambda v1, v2: s(v1) + "," + s(v2),
    "j_null_if_both_even": lambda v1, v2: (
        None
        if v1 is not None and v2 is not None and _even(v1) and _even(v2)
        else s(v1) + "," + s(v2)
    ),
}

FOREIGN_KEYS: dict[str, Callable[[Any], Any]] = {
    "f_abc": lambda v: None if v is None else _abc(v),
    "f_abc_or_null": lambda v: None if v is None or n(v) % 4 == 3 else _abc(v),
}

# Kafka's BiFunction extractors: the foreign key of (key, value).
KEYED_FOREIGN_KEYS: dict[str, Callable[[Any, Any], Any]] = {
    "fk_key_abc": lambda k, v: None if v is None else _abc(n(k) + n(v)),
}


class _StoreProcessor(Processor[Any, Any]):
    def __init__(self, store_name: str) -> None:
        self.store_name = store_name

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(self.store_name)


class ConcatProcessor(_StoreProcessor):
    """A running concatenation per key in a key-value store; a tombstone clears it."""

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            self.context.forward(record.with_value("nokey"))
            return
        if record.value is None:
            self.store.delete(record.key)
            self.context.forward(record)
            return
        previous = self.store.get(record.key)
        value = ("" if previous is None else s(previous)) + s(record.value)
        self.store.put(record.key, value)
        self.context.forward(record.with_value(value))


class DedupeProcessor(_StoreProcessor):
    """Forwards a record only when its value differs from the key's last one."""

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None or record.value is None:
            return
        value = s(record.value)
        if value == self.store.get(record.key):
            return
        self.store.put(record.key, value)
        self.context.forward(record.with_value(value))


PROCESSORS: dict[str, type[_StoreProcessor]] = {
    "proc_concat": ConcatProcessor,
    "proc_dedupe": DedupeProcessor,
}


def get(table: dict[str, Any], name: str, what: str) -> Any:
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown {what} function {name!r}") from None
