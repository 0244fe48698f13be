"""KTable-KTable joins: on the primary key (Kafka's KTableKTableInnerJoin,
LeftJoin, RightJoin, OuterJoin and KTableKTableJoinMerger) and on a foreign
key (KIP-213's subscription/response processors).

An update on either side looks the other side up through its value getter and
emits a change whose timestamp is the larger of the two sides' timestamps.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from strom.errors import SerializationError, TopologyError
from strom.kstream import ktable
from strom.kstream.internals.table_processors import (
    SendsOldValues,
    ValueGetterSupplier,
    _StoreNode,
    latest_only,
    old_values_of,
)
from strom.kstream.internals.table_suppliers import TableSupplier, TableView, store_view
from strom.kstream.materialized import Materialized
from strom.processor.api import Partitioner, Partitions, StreamPartitioner
from strom.processor.internals.batch import Batch
from strom.processor.internals.nodes import Node, log, one_partition, partitions_function
from strom.processor.internals.topology_builder import StoreDef
from strom.serdes import Serde

if TYPE_CHECKING:
    from strom.kstream.ktable import KTable
    from strom.processor.internals.task import StreamTask

# (value, other value) -> result; with_key: (key, value, other value) -> result.
Joiner = Callable[..., Any]
Lookup = Callable[[Any], "tuple[Any, int] | None"]

# Kafka's "unknown" timestamp: loses every max() against a real one.
UNKNOWN = -1


class JoinSupplier(TableSupplier):
    """A primary-key join's result (Kafka's KTableKTableJoinMerger over the
    two KTableKTable*Join processors): old values from the join need old
    values from both tables (forcing their stores); it is read through its
    store when materialized, else by joining both tables' getters."""

    def __init__(self, this: KTable, other: KTable, view: TableView) -> None:
        self.this = this
        self.other = other
        self._view = view

    @property
    def versioned(self) -> bool:
        # Only its own store makes a join's result versioned (Kafka sets an
        # unmaterialized join's output not versioned, whatever its inputs).
        return self._view.versioned

    def enable_sending_old_values(self, force_materialization: bool) -> bool:
        self.this._enable_sending_old_values(True)
        self.other._enable_sending_old_values(True)
        self.send_old_values = True
        return True

    def view(self) -> TableView:
        return self._view


def reverse(joiner: Joiner, with_key: bool = False) -> Joiner:
    """The joiner seen from the other side: ``(other, this) -> joiner(this,
    other)`` (``with_key``: ``(key, other, this) -> joiner(key, this, other)``)."""
    if with_key:
        return lambda key, other_value, this_value: joiner(key, this_value, other_value)
    return lambda other_value, this_value: joiner(this_value, other_value)


class KTableKTableJoin(Node):
    """One side of a primary-key join (``KTABLE-JOINTHIS-`` / ``-JOINOTHER-``):
    each change of this side is joined with the other side's current value.

    ``kind`` is Kafka's processor: ``inner``; ``left`` (this side outer);
    ``right`` (the other side of a left join: emits only while the left side
    has a value, joining None when this side is deleted); ``outer``.
    ``joiner`` takes (this side's value, the other side's value), after the
    key with ``with_key``.
    """

    def __init__(
        self,
        kind: str,
        getter: ValueGetterSupplier,
        joiner: Joiner,
        parent_send_old: SendsOldValues,
        send_old: SendsOldValues,
        with_key: bool = False,
    ) -> None:
        super().__init__()
        self.kind = kind
        self.getter = getter
        self.joiner = joiner
        self.parent_send_old = parent_send_old
        self.send_old = send_old
        self.with_key = with_key

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.lookup: Lookup = self.getter(task)

    def process(self, batch: Batch) -> None:
        batch = latest_only(batch)
        lookup, key_joiner, kind, with_key = self.lookup, self.joiner, self.kind, self.with_key
        send_old = self.send_old.send_old_values
        # Old values exist only where the parent was asked to send them.
        olds = batch.old_values if self.parent_send_old.send_old_values else None
        keys: list[Any] = []
        news: list[Any] = []
        old_out: list[Any] = []
        stamps: list[int] = []
        offsets: list[int] = []
        dropped = 0

        def run(indices: Iterator[int]) -> None:
            nonlocal dropped
            for i in indices:
                key = batch.keys[i]
                if key is None:
                    dropped += 1
                    continue
                joiner = partial(key_joiner, key) if with_key else key_joiner
                new = batch.values[i]
                old = None if olds is None else olds[i]
                found = lookup(key)
                other, other_time = (None, UNKNOWN) if found is None else found
                timestamp = max(batch.timestamps[i], other_time)
                if kind in ("inner", "right"):
                    if other is None:
                        continue
                    if kind == "inner":
                        new_result = None if new is None else joiner(new, other)
                        old_result = joiner(old, other) if send_old and old is not None else None
                    else:
                        new_result = joiner(new, other)
                        old_result = joiner(old, other) if send_old else None
                elif other is None and new is None and old is None:
                    continue  # nothing was joined before, nothing is now
                elif kind == "left":
                    new_result = None if new is None else joiner(new, other)
                    old_result = joiner(old, other) if send_old and old is not None else None
                else:  # outer
                    either = other is not None or new is not None
                    new_result = joiner(new, other) if either else None
                    old_result = (
                        joiner(old, other)
                        if send_old and (other is not None or old is not None)
                        else None
                    )
                keys.append(key)
                news.append(new_result)
                old_out.append(old_result)
                stamps.append(timestamp)
                offsets.append(batch.offsets[i])

        self.each_record(batch, run)
        if dropped:
            self.task.metrics.dropped_records += dropped
            log.debug("%s: skipped %d record(s) with a null key", self.name, dropped)
        self.forward(batch.derive(keys, news, stamps, offsets, old_out))


class KTableKTableJoinMerger(Node):
    """``KTABLE-MERGE-``: both sides' results as one table; unmaterialized it
    passes changes on (old values only when asked for)."""

    def __init__(self, send_old: SendsOldValues) -> None:
        super().__init__()
        self.send_old = send_old

    def process(self, batch: Batch) -> None:
        if self.send_old.send_old_values:
            self.forward(batch)
        else:
            self.forward(batch.derive(batch.keys, batch.values, batch.timestamps, batch.offsets))


class KTableKTableJoinMergerMaterialized(_StoreNode):
    """``KTABLE-MERGE-`` with ``materialized=``: the result is kept in a
    queryable (timestamped) store, each change at its record's timestamp."""

    latest_timestamp = False

    def process(self, batch: Batch) -> None:
        values = batch.values
        if self.versioned:
            # Kafka forwards the join's old value here, not the store's.
            self._update_versioned(batch, lambda _key, _old, i: values[i], old_values_of(batch))
            return
        self._put_each(batch, lambda _key, _old, i: values[i])


def join_getter(
    kind: str,
    this: ValueGetterSupplier,
    other: ValueGetterSupplier,
    joiner: Joiner,
    with_key: bool = False,
) -> ValueGetterSupplier:
    """The value getter of an unmaterialized join result: joins on the fly
    (Kafka's KTableKTable*JoinValueGetter)."""

    def supplier(task: StreamTask) -> Lookup:
        get_this, get_other = this(task), other(task)

        def lookup(key: Any) -> tuple[Any, int] | None:
            left = get_this(key)
            if left is None and kind != "outer":
                return None
            right = get_other(key)
            if kind == "inner" and right is None:
                return None
            if left is None and right is None:
                return None
            lv, lt = (None, UNKNOWN) if left is None else left
            rv, rt = (None, UNKNOWN) if right is None else right
            joined = joiner(key, lv, rv) if with_key else joiner(lv, rv)
            # A None result is absent (Kafka's ValueAndTimestamp.make).
            return None if joined is None else (joined, max(lt, rt))

        return lookup

    return supplier


# --- building ---------------------------------------------------------------------

# The processor on the other side of each join kind (Kafka's KTableImpl.doJoin).
_OTHER_SIDE = {"inner": "inner", "left": "right", "outer": "outer"}


def primary_key_join(
    this: KTable,
    other: KTable,
    joiner: Joiner,
    kind: str,
    materialized: Materialized | str | None,
    name: str | None,
    with_key: bool = False,
) -> KTable:
    """Adds ``KTABLE-JOINTHIS-``, ``KTABLE-JOINOTHER-`` and ``KTABLE-MERGE-``
    (named as Kafka names them) and returns the result table."""
    builder = this._builder
    mat = None if materialized is None else Materialized.of(materialized)
    store_name = None
    if mat is not None:
        store_name = mat.store_name or builder.new_name("KTABLE-MERGE-STATE-STORE-")
    merge_name = builder.processor_name(name, "KTABLE-MERGE-")
    this_name = builder.processor_name(name, "KTABLE-JOINTHIS-", "-join-this")
    other_name = builder.processor_name(name, "KTABLE-JOINOTHER-", "-join-other")
    # An outer side must be able to retract what it joined before.
    if kind in ("left", "outer"):
        this._enable_sending_old_values(True)
    if kind == "outer":
        other._enable_sending_old_values(True)
    this_view, other_view = this._view(), other._view()
    assert this_view is not None and other_view is not None, "checked by KTable"
    getter = join_getter(kind, this_view.getter, other_view.getter, joiner, with_key)
    if mat is not None and store_name is not None:
        view = store_view(store_name, mat.versioned)
    else:
        view = TableView(this_view.stores + other_view.stores, getter)
    supplier = JoinSupplier(this, other, view)
    other_kind = _OTHER_SIDE[kind]
    this_supplier, other_supplier = this._supplier, other._supplier
    internal = builder.internal
    internal.add_processor(
        this_name,
        lambda: KTableKTableJoin(
            kind, other_view.getter, joiner, this_supplier, supplier, with_key
        ),
        this._node,
    )
    internal.connect_processor_and_stores([this_name], list(other_view.stores))
    internal.add_processor(
        other_name,
        lambda: KTableKTableJoin(
            other_kind,
            this_view.getter,
            reverse(joiner, with_key),
            other_supplier,
            supplier,
            with_key,
        ),
        other._node,
    )
    internal.connect_processor_and_stores([other_name], list(this_view.stores))
    key_serde = this._key_serde
    value_serde = None
    if mat is not None and store_name is not None:
        key_serde, value_serde = mat.key_serde or key_serde, mat.value_serde
        internal.add_processor(
            merge_name,
            lambda: KTableKTableJoinMergerMaterialized(store_name),
            this_name,
            other_name,
        )
        internal.add_store(mat.store_def(store_name, key_serde, value_serde), merge_name)
    else:
        internal.add_processor(
            merge_name, lambda: KTableKTableJoinMerger(supplier), this_name, other_name
        )
    internal.co_partition(merge_name)
    return ktable.KTable(
        builder,
        merge_name,
        key_serde,
        value_serde,
        supplier,
        store_name=None if mat is None else mat.store_name,
    )


# --- foreign-key joins (Kafka's KIP-213) -------------------------------------------
#
# The left table sends a subscription (its key, a hash of its value, the
# partition to answer to) to the right table's side, keyed by the foreign key;
# the right side keeps subscriptions in a store keyed by (foreign key, key),
# answers each with the right value, and re-answers every subscriber when the
# right value changes. Answers go back to the left side, where one whose hash
# no longer matches the left value is stale and dropped.

# Kafka's SubscriptionWrapper.Instruction.
DELETE_KEY_NO_PROPAGATE = 0
DELETE_KEY_AND_PROPAGATE = 1
PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE = 2
PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE = 3
_VERSION = 1
_NO_HASH = 0x80
_HAS_VALUE = 0x40


@dataclass(frozen=True, slots=True)
class Subscription:
    """A left entry's subscription to a foreign key (Kafka's SubscriptionWrapper)."""

    hash: bytes | None
    instruction: int
    primary_key: Any
    primary_partition: int


@dataclass(frozen=True, slots=True)
class SubscriptionResponse:
    """The right value for a subscription; the partition only routes it back
    and is not serialized (as in Kafka)."""

    hash: bytes | None
    foreign_value: Any
    primary_partition: int = -1


class FkSerdes:
    """The serdes of a foreign-key join; those the DSL did not get come from
    ``default.key.serde`` / ``default.value.serde`` when a task starts."""

    _DEFAULTS = (
        ("primary_key", "default.key.serde"),
        ("foreign_key", "default.key.serde"),
        ("value", "default.value.serde"),
        ("foreign_value", "default.value.serde"),
    )

    def __init__(
        self,
        topic: str,
        primary_key: Serde[Any] | None,
        foreign_key: Serde[Any] | None,
        value: Serde[Any] | None,
        foreign_value: Serde[Any] | None,
    ) -> None:
        self.topic = topic
        self.primary_key = primary_key
        self.foreign_key = foreign_key
        self.value = value
        self.foreign_value = foreign_value

    def resolve(self, task: StreamTask, where: str) -> None:
        for attr, default in self._DEFAULTS:
            if getattr(self, attr) is None:
                setattr(self, attr, task._serde(None, default, where))

    def _get(self, attr: str) -> Serde[Any]:
        serde: Serde[Any] | None = getattr(self, attr)
        if serde is None:
            raise SerializationError(f"foreign-key join {self.topic}: no {attr} serde")
        return serde

    def foreign_key_bytes(self, foreign_key: Any) -> bytes | None:
        return self._get("foreign_key").serialize(f"{self.topic}-fk", foreign_key)

    def value_hash(self, value: Any) -> bytes | None:
        """A 128-bit hash of the serialized left value (Kafka uses murmur3)."""
        if value is None:
            return None
        raw = self._get("value").serialize(f"{self.topic}-vh", value) or b""
        return hashlib.blake2b(raw, digest_size=16).digest()


class SubscriptionSerde(Serde[Subscription]):
    """Kafka's v1 layout: flags and version, instruction, optional 16-byte
    hash, the serialized key, the 4-byte partition to answer to."""

    def __init__(self, serdes: FkSerdes) -> None:
        self.serdes = serdes

    def serialize(self, topic: str, data: Subscription | None) -> bytes | None:
        if data is None:
            return None
        flags = _VERSION | (_NO_HASH if data.hash is None else 0)
        key = self.serdes._get("primary_key").serialize(f"{topic}-pk", data.primary_key) or b""
        return (
            bytes((flags, data.instruction))
            + (data.hash or b"")
            + key
            + struct.pack(">i", data.primary_partition)
        )

    def deserialize(self, topic: str, data: bytes | None) -> Subscription | None:
        if data is None:
            return None
        if len(data) < 6:
            raise SerializationError(f"a subscription on {topic} needs 6 bytes, got {len(data)}")
        flags, instruction = data[0], data[1]
        if flags & 0x7F != _VERSION:
            raise SerializationError(f"subscription version {flags & 0x7F} on {topic} unknown")
        pos = 2 if flags & _NO_HASH else 18
        digest = None if flags & _NO_HASH else data[2:18]
        key = self.serdes._get("primary_key").deserialize(f"{topic}-pk", data[pos:-4])
        (partition,) = struct.unpack(">i", data[-4:])
        return Subscription(digest, instruction, key, partition)


class SubscriptionResponseSerde(Serde[SubscriptionResponse]):
    """Flags and version, optional 16-byte hash, the serialized right value."""

    def __init__(self, serdes: FkSerdes) -> None:
        self.serdes = serdes

    def serialize(self, topic: str, data: SubscriptionResponse | None) -> bytes | None:
        if data is None:
            return None
        value = self.serdes._get("foreign_value").serialize(topic, data.foreign_value)
        flags = _VERSION | (_NO_HASH if data.hash is None else 0)
        flags |= 0 if value is None else _HAS_VALUE
        return bytes((flags,)) + (data.hash or b"") + (value or b"")

    def deserialize(self, topic: str, data: bytes | None) -> SubscriptionResponse | None:
        if not data:
            return None
        flags = data[0]
        if flags & 0x3F != _VERSION:
            raise SerializationError(f"response version {flags & 0x3F} on {topic} unknown")
        pos = 1 if flags & _NO_HASH else 17
        digest = None if flags & _NO_HASH else data[1:17]
        value = None
        if flags & _HAS_VALUE:
            value = self.serdes._get("foreign_value").deserialize(topic, data[pos:])
        return SubscriptionResponse(digest, value)


@dataclass(frozen=True, slots=True)
class _Bound:
    """A raw key bound for a prefix scan of the subscription store."""

    raw: bytes


class CombinedKeySerde(Serde[tuple[Any, Any]]):
    """(foreign key, key) as Kafka's CombinedKeySchema: the foreign key's
    length (4 bytes), the foreign key, the key; so one foreign key's
    subscriptions are a contiguous range."""

    def __init__(self, serdes: FkSerdes) -> None:
        self.serdes = serdes

    def prefix(self, foreign_key: Any) -> bytes:
        raw = self.serdes.foreign_key_bytes(foreign_key) or b""
        return struct.pack(">i", len(raw)) + raw

    def serialize(self, topic: str, data: tuple[Any, Any] | None) -> bytes | None:
        if data is None:
            return None
        if isinstance(data, _Bound):
            return data.raw
        foreign_key, key = data
        pk = self.serdes._get("primary_key").serialize(f"{self.serdes.topic}-pk", key) or b""
        return self.prefix(foreign_key) + pk

    def deserialize(self, topic: str, data: bytes | None) -> tuple[Any, Any] | None:
        if data is None:
            return None
        (length,) = struct.unpack_from(">i", data)
        fk = self.serdes._get("foreign_key").deserialize(
            f"{self.serdes.topic}-fk", data[4 : 4 + length]
        )
        pk = self.serdes._get("primary_key").deserialize(
            f"{self.serdes.topic}-pk", data[4 + length :]
        )
        return fk, pk


def _increment(raw: bytes) -> bytes | None:
    """The smallest byte string above every string starting with ``raw``."""
    stripped = raw.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))


class _Out:
    """Columns of a batch being built."""

    def __init__(self) -> None:
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.stamps: list[int] = []
        self.offsets: list[int] = []

    def add(self, key: Any, value: Any, timestamp: int, offset: int) -> None:
        self.keys.append(key)
        self.values.append(value)
        self.stamps.append(timestamp)
        self.offsets.append(offset)

    def batch(self, origin: Batch) -> Batch:
        return origin.derive(self.keys, self.values, self.stamps, self.offsets)


class SubscriptionSend(Node):
    """``KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-``: turns each left change
    into subscriptions keyed by foreign key (Kafka's SubscriptionSendProcessor)."""

    def __init__(
        self,
        foreign_key: Callable[..., Any],
        left_join: bool,
        serdes: FkSerdes,
        parent_send_old: SendsOldValues,
        keyed: bool = False,
    ) -> None:
        super().__init__()
        self.foreign_key = foreign_key
        # Kafka's BiFunction extractor: the foreign key of (key, value).
        self.keyed = keyed
        self.left_join = left_join
        self.serdes = serdes
        self.parent_send_old = parent_send_old

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.serdes.resolve(task, self.name)

    def process(self, batch: Batch) -> None:
        batch = latest_only(batch)
        olds = batch.old_values if self.parent_send_old.send_old_values else None
        out = _Out()
        partition = self.task.partition
        dropped = 0

        def run(indices: Iterator[int]) -> None:
            nonlocal dropped
            for i in indices:
                key, new = batch.keys[i], batch.values[i]
                old = None if olds is None else olds[i]
                sends = self._instructions(key, new, old)
                if sends is None:
                    dropped += 1
                    continue
                digest = self.serdes.value_hash(new) if sends else None
                for foreign_key, instruction in sends:
                    subscription = Subscription(digest, instruction, key, partition)
                    out.add(foreign_key, subscription, batch.timestamps[i], batch.offsets[i])

        self.each_record(batch, run)
        if dropped:
            self.task.metrics.dropped_records += dropped
            log.debug("%s: skipped %d record(s) with a null foreign key", self.name, dropped)
        self.forward(out.batch(batch))

    def _changed(self, new_fk: Any, old_fk: Any) -> bool:
        return self.serdes.foreign_key_bytes(new_fk) != self.serdes.foreign_key_bytes(old_fk)

    def _fk(self, key: Any, value: Any) -> Any:
        return self.foreign_key(key, value) if self.keyed else self.foreign_key(value)

    def _instructions(self, key: Any, new: Any, old: Any) -> list[tuple[Any, int]] | None:
        """Kafka 4.x's subscriptions for a change, as (foreign key,
        instruction) pairs; None when an inner join skips a null foreign key
        (after retracting the old result, if any)."""
        old_fk = None if old is None else self._fk(key, old)
        if self.left_join:
            if old is None and new is None:
                return []
            new_fk = None if new is None else self._fk(key, new)
            sends = []
            if old_fk is not None and self._changed(new_fk, old_fk):
                sends.append((old_fk, DELETE_KEY_NO_PROPAGATE))
            # Always ask, even for a null foreign key: a left join answers.
            sends.append((new_fk, PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE))
            return sends
        if new is None:
            return [] if old_fk is None else [(old_fk, DELETE_KEY_AND_PROPAGATE)]
        new_fk = self._fk(key, new)
        if new_fk is None:
            if old_fk is not None:
                # Retracts the old result; the record still counts as skipped.
                self.task.metrics.dropped_records += 1
                return [(old_fk, DELETE_KEY_AND_PROPAGATE)]
            return None
        if old_fk is None:
            return [(new_fk, PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE)]
        if self._changed(new_fk, old_fk):
            return [
                (old_fk, DELETE_KEY_NO_PROPAGATE),
                (new_fk, PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE),
            ]
        return [(new_fk, PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE)]


class SubscriptionReceive(Node):
    """``KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-`` on the right side: keeps
    (foreign key, key) -> subscription in the subscription store."""

    def __init__(self, store_name: str, serdes: FkSerdes) -> None:
        super().__init__()
        self.store_name = store_name
        self.serdes = serdes

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.serdes.resolve(task, self.name)
        self.store: Any = task.key_value_store(self.store_name)

    def process(self, batch: Batch) -> None:
        batch = latest_only(batch)
        out = _Out()
        store = self.store
        dropped = 0
        for i, (foreign_key, sub) in enumerate(zip(batch.keys, batch.values, strict=True)):
            if sub is None or (
                foreign_key is None and sub.instruction != PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE
            ):
                dropped += 1
                continue
            timestamp = batch.timestamps[i]
            if foreign_key is not None:
                combined = (foreign_key, sub.primary_key)
                if sub.instruction in (DELETE_KEY_AND_PROPAGATE, DELETE_KEY_NO_PROPAGATE):
                    store.delete(combined)
                else:
                    store.put(combined, (sub, timestamp))
            out.add((foreign_key, sub.primary_key), sub, timestamp, batch.offsets[i])
        if dropped:
            self.task.metrics.dropped_records += dropped
        self.forward(out.batch(batch))


class SubscriptionJoin(Node):
    """``KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-``: answers a subscription with
    the right table's current value, as its instruction says."""

    def __init__(self, getter: ValueGetterSupplier) -> None:
        super().__init__()
        self.getter = getter

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.lookup: Lookup = self.getter(task)

    def process(self, batch: Batch) -> None:
        out = _Out()
        for i, ((foreign_key, key), sub) in enumerate(zip(batch.keys, batch.values, strict=True)):
            found = None if foreign_key is None else self.lookup(foreign_key)
            timestamp = batch.timestamps[i]
            if found is not None:
                timestamp = max(timestamp, found[1])
            value = None if found is None else found[0]
            instruction = sub.instruction
            if instruction == DELETE_KEY_NO_PROPAGATE:
                continue
            if instruction == PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE and found is None:
                continue
            if instruction == DELETE_KEY_AND_PROPAGATE:
                value = None
            response = SubscriptionResponse(sub.hash, value, sub.primary_partition)
            out.add(key, response, timestamp, batch.offsets[i])
        self.forward(out.batch(batch))


class ForeignTableJoin(Node):
    """``KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-`` under the right table: a
    right change answers every subscription to its key again."""

    def __init__(self, store_name: str, key_serde: CombinedKeySerde) -> None:
        super().__init__()
        self.store_name = store_name
        self.key_serde = key_serde

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.key_serde.serdes.resolve(task, self.name)
        self.store: Any = task.key_value_store(self.store_name)

    def process(self, batch: Batch) -> None:
        out = _Out()
        serdes = self.key_serde.serdes
        for i, (foreign_key, new) in enumerate(zip(batch.keys, batch.values, strict=True)):
            if foreign_key is None:
                continue
            prefix = self.key_serde.prefix(foreign_key)
            upper = _increment(prefix)
            fk_raw = serdes.foreign_key_bytes(foreign_key)
            entries = self.store.range(_Bound(prefix), None if upper is None else _Bound(upper))
            for entry in entries:
                found_fk, key = entry.key
                # The range's upper end is inclusive: check the prefix.
                if serdes.foreign_key_bytes(found_fk) != fk_raw:
                    continue
                sub = entry.value[0]
                response = SubscriptionResponse(sub.hash, new, sub.primary_partition)
                out.add(key, response, batch.timestamps[i], batch.offsets[i])
        self.forward(out.batch(batch))


class ResponseJoin(Node):
    """``KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-``: joins an
    answer with the left value, unless the left value changed since the
    subscription was sent (its hash differs): then the answer is stale."""

    def __init__(
        self,
        getter: ValueGetterSupplier,
        joiner: Joiner,
        left_join: bool,
        serdes: FkSerdes,
        with_key: bool = False,
    ) -> None:
        super().__init__()
        self.getter = getter
        self.joiner = joiner
        self.left_join = left_join
        self.serdes = serdes
        self.with_key = with_key

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.serdes.resolve(task, self.name)
        self.lookup: Lookup = self.getter(task)

    def process(self, batch: Batch) -> None:
        out = _Out()
        stale = 0

        def run(indices: Iterator[int]) -> None:
            nonlocal stale
            for i in indices:
                key, response = batch.keys[i], batch.values[i]
                found = self.lookup(key)
                current = None if found is None else found[0]
                if self.serdes.value_hash(current) != response.hash:
                    stale += 1
                    continue
                foreign_value = response.foreign_value
                if foreign_value is None and (not self.left_join or current is None):
                    result = None
                else:
                    result = (
                        self.joiner(key, current, foreign_value)
                        if self.with_key
                        else self.joiner(current, foreign_value)
                    )
                out.add(key, result, batch.timestamps[i], batch.offsets[i])

        self.each_record(batch, run)
        if stale:
            log.debug("%s: dropped %d stale response(s)", self.name, stale)
        self.forward(out.batch(batch))


def _back_to_the_subscriber(_key: Any, response: SubscriptionResponse, _count: int) -> int:
    return response.primary_partition


class _KeyPartitioner(StreamPartitioner[Any, Any]):
    """A TableJoined partitioner on an internal topic of the join: given the
    key alone (None for the value), as Kafka calls it, and held to one
    partition (or None, the default partitioner)."""

    def __init__(self, partitioner: Partitioner) -> None:
        self._partitions = partitions_function(partitioner)

    def partitions(self, topic: str, key: Any, value: Any, num_partitions: int) -> Partitions:
        answer = self._partitions(topic, key, None, num_partitions)
        return one_partition(answer, num_partitions, f"foreign-key join, key {key!r}")


def _by_key(partitioner: Partitioner | None) -> Partitioner | None:
    return None if partitioner is None else _KeyPartitioner(partitioner)


def foreign_key_join(
    this: KTable,
    other: KTable,
    joiner: Joiner,
    kind: str,
    foreign_key: Callable[..., Any],
    materialized: Materialized | str | None,
    name: str | None,
    with_key: bool = False,
    foreign_key_with_key: bool = False,
    partitioners: tuple[Partitioner | None, Partitioner | None] = (None, None),
) -> KTable:
    """Adds the subscription and response topics and processors of a
    foreign-key join, named as Kafka names them, and returns the result.
    ``partitioners`` (Kafka's ``TableJoined``): how this table's and the
    other table's keys are partitioned, if not by the default partitioner."""
    if kind not in ("inner", "left"):
        raise TopologyError(f"foreign-key joins are inner or left, not {kind}")
    builder, internal = this._builder, this._builder.internal
    # Old left values say which subscription to retract; old right values
    # are sent too, as Kafka does.
    other._enable_sending_old_values(True)
    this._enable_sending_old_values(True)

    def named(suffix: str, prefix: str) -> str:
        return builder.processor_name(name, prefix, suffix)

    sub_topic = named("-subscription-registration", _FK + "SUBSCRIPTION-REGISTRATION-") + "-topic"
    send_name = named("-subscription-registration-processor", _FK + "SUBSCRIPTION-REGISTRATION-")
    sub_sink = named("-subscription-registration-sink", "KTABLE-SINK-")
    sub_source = named("-subscription-registration-source", "KTABLE-SOURCE-")
    store_name = named("-subscription-store", _FK + "SUBSCRIPTION-STATE-STORE-")
    receive_name = named("-subscription-receive", _FK + "SUBSCRIPTION-PROCESSOR-")
    join_name = named("-subscription-join-foreign", _FK + "SUBSCRIPTION-PROCESSOR-")
    foreign_name = named("-foreign-join-subscription", _FK + "SUBSCRIPTION-PROCESSOR-")
    response_topic = named("-subscription-response", _FK + "SUBSCRIPTION-RESPONSE-") + "-topic"
    response_sink = named("-subscription-response-sink", "KTABLE-SINK-")
    response_source = named("-subscription-response-source", "KTABLE-SOURCE-")
    resolver_name = named(
        "-subscription-response-resolver", _FK + "SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-"
    )
    output_name = named("-result", _FK + "OUTPUT-")
    mat = Materialized.of(materialized)
    # Kafka names the result's store even when it is not materialized.
    output_store = mat.store_name or builder.new_name(_FK + "OUTPUT-STATE-STORE-")

    serdes = FkSerdes(
        sub_topic, this._key_serde, other._key_serde, this._value_serde, other._value_serde
    )
    subscriptions, responses = SubscriptionSerde(serdes), SubscriptionResponseSerde(serdes)
    combined = CombinedKeySerde(serdes)
    left_join = kind == "left"
    this_view, other_view = this._view(), other._view()
    assert this_view is not None and other_view is not None, "checked by KTable"
    this_supplier = this._supplier

    internal.add_processor(
        send_name,
        lambda: SubscriptionSend(
            foreign_key, left_join, serdes, this_supplier, keyed=foreign_key_with_key
        ),
        this._node,
    )
    internal.add_sink(
        sub_sink,
        sub_topic,
        send_name,
        key_serde=other._key_serde,
        value_serde=subscriptions,
        partitioner=_by_key(partitioners[1]),
        internal=True,
    )
    internal.add_source(sub_source, [sub_topic], other._key_serde, subscriptions, internal=True)
    internal.add_processor(
        receive_name, lambda: SubscriptionReceive(store_name, serdes), sub_source
    )
    internal.add_store(
        StoreDef(store_name, combined, subscriptions, timestamped=True), receive_name
    )
    internal.add_processor(join_name, lambda: SubscriptionJoin(other_view.getter), receive_name)
    internal.connect_processor_and_stores([join_name], list(other_view.stores))
    internal.add_processor(
        foreign_name, lambda: ForeignTableJoin(store_name, combined), other._node
    )
    internal.connect_processor_and_stores([foreign_name], [store_name])
    internal.add_sink(
        response_sink,
        response_topic,
        join_name,
        foreign_name,
        key_serde=this._key_serde,
        value_serde=responses,
        partitioner=_by_key(partitioners[0]) or _back_to_the_subscriber,
        internal=True,
    )
    internal.add_source(
        response_source, [response_topic], this._key_serde, responses, internal=True
    )
    internal.add_processor(
        resolver_name,
        lambda: ResponseJoin(this_view.getter, joiner, left_join, serdes, with_key),
        response_source,
    )
    internal.connect_processor_and_stores([resolver_name], list(this_view.stores))
    # Subscriptions meet the right table's partitions; answers the left's.
    internal.partitions_like[sub_topic] = other._node
    internal.partitions_like[response_topic] = this._node
    # The result is a source table (Kafka's KTableSource): materialized when
    # named, or once something downstream needs its store.
    key_serde = mat.key_serde or this._key_serde
    return builder.table_source(
        output_name, resolver_name, mat, output_store, key_serde, mat.value_serde
    )


_FK = "KTABLE-FK-JOIN-"
