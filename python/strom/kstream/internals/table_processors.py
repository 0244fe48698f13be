"""KTable nodes: batches carry changes (``values`` new, ``old_values`` old)
and aggregations read-modify-write a store per record, as in Kafka Streams."""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from strom import _core
from strom.errors import SerializationError, StoreError
from strom.processor.api import ValueTransformerWithKey
from strom.processor.internals.batch import Batch
from strom.processor.internals.nodes import Node, drop, log, without
from strom.processor.internals.processor_node import ValueTransformerRunner
from strom.serdes import Long, Serde, String, Timestamped, WrappingSerde
from strom.state.internals.caching import CachingKeyValueStore
from strom.state.versioned import NOT_PUT, VALID_TO_UNDEFINED, VersionedKeyValueStore

if TYPE_CHECKING:
    from strom.processor.internals.task import StreamTask


class SendsOldValues(Protocol):
    """Whether a table's changes carry real old values (Kafka's
    ``sendOldValues``): decided while the DSL is built, read by the nodes
    (see strom.kstream.internals.table_suppliers)."""

    send_old_values: bool


def latest_only(batch: Batch) -> Batch:
    """A versioned table's changes without those that are not their key's
    latest version: what joins and re-groupings take (Kafka's processors
    with versioned semantics skip ``!isLatest`` changes)."""
    if batch.is_latest is None:
        return batch
    return batch.select([i for i, latest in enumerate(batch.is_latest) if latest])


def old_values_of(batch: Batch) -> list[Any]:
    """A batch's old values (None each when it carries none)."""
    return batch.old_values if batch.old_values is not None else [None] * len(batch)


class _StoreNode(Node):
    """Updates a store per record, over whole batches: keys, old values and
    new values cross into native code once per batch (serdes included); only
    a user callback runs per record in Python. Results equal Kafka's
    record-at-a-time processing, the record cache's evictions included."""

    def __init__(self, store_name: str) -> None:
        super().__init__()
        self.store_name = store_name

    def forward(self, batch: Batch) -> None:
        if not self.versioned:
            # A (non-versioned) store's changes are each its key's latest.
            batch.is_latest = None
        super().forward(batch)

    def init(self, task: StreamTask) -> None:
        super().init(task)
        store = task.store(self.store_name)
        # A processor materialized in a versioned store (KIP-914).
        self.versioned = isinstance(store, VersionedKeyValueStore)
        if self.versioned:
            self.store = store
            self.caching = self.timestamped = False
            return
        self.store = task.key_value_store(self.store_name)
        self.caching = isinstance(self.store, CachingKeyValueStore)
        if self.caching:
            # Updates reach the children when the cache writes them out.
            self.forward_cache_flushes(self.store)
        serde = self.store.value_serde
        self.timestamped = isinstance(serde, Timestamped)
        self.inner_serde: Serde[Any] = serde.inner if self.timestamped else serde
        # Values that survive a serde round trip unchanged: no need to make one.
        self.plain_type: type | None = None
        if isinstance(self.inner_serde, Long):
            self.plain_type = int
        elif isinstance(self.inner_serde, String):
            self.plain_type = str

    # Aggregations time their results with the latest record (Kafka's
    # KStreamAggregate/KTableAggregate); a table source uses the record's own.
    latest_timestamp = True

    def sent_old_values(self, olds: list[Any], skipped: list[int]) -> list[Any]:
        """The old values an uncached update forwards (the store's, here):
        one per record of the batch but those at ``skipped``."""
        return olds

    def _put_each(self, batch: Batch, update: Callable[[Any, Any, int], Any]) -> None:
        """For each record: new = update(key, old, i); store it (with its
        result timestamp when the store is timestamped); forward the change.
        Record by record: used when a batch cannot be serialized as a whole,
        so that the error names the record, as it would have one by one."""
        store, timestamped = self.store, is_timestamped(self.store)
        new_values: list[Any] = []
        old_values: list[Any] = []
        stamps: list[int] = []
        task, keys, record_stamps = self.task, batch.keys, batch.timestamps

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                key, timestamp = keys[i], record_stamps[i]
                task.current_timestamp = timestamp
                old = store.get(key)
                if timestamped and old is not None:
                    old, old_time = old
                    if self.latest_timestamp:
                        timestamp = max(timestamp, old_time)
                new = update(key, old, i)
                store.put(key, (new, timestamp) if timestamped and new is not None else new)
                new_values.append(new)
                old_values.append(old)
                stamps.append(timestamp)

        skipped = self.each_record(batch, run)
        if not self.caching:
            olds = self.sent_old_values(old_values, skipped)
            batch = without(batch, skipped)
            self.forward(batch.derive(batch.keys, new_values, stamps, batch.offsets, olds))

    # --- batches -------------------------------------------------------------
    def _raw_keys(self, keys: list[Any]) -> list[bytes]:
        raw: list[Any] = self.store.key_serde.serialize_batch(self.store_name, keys)
        if None in raw:
            raise StoreError(f"store {self.store_name!r}: keys must not be None")
        return raw

    def _encode(self, values: list[Any], stamps: list[int]) -> list[bytes | None]:
        raw = self.inner_serde.serialize_batch(self.store_name, values)
        if not self.timestamped:
            return raw
        if raw.count(None) != values.count(None):
            # A value its serde turns into None is still stored (as Timestamped does).
            pairs = zip(raw, values, strict=True)
            raw = [b"" if r is None and v is not None else r for r, v in pairs]
        stamped: list[bytes | None] = _core.stamp_values(raw, stamps)
        return stamped

    def _decode(self, raw: list[bytes | None]) -> tuple[list[Any], list[int | None]]:
        if not self.timestamped:
            return self.inner_serde.deserialize_batch(self.store_name, raw), [None] * len(raw)
        inner, stamps = _core.split_stamped(raw)
        return self.inner_serde.deserialize_batch(self.store_name, inner), stamps

    def _round_trip(self, value: Any) -> Any:
        """The value as the store would give it back."""
        if value is None or type(value) is self.plain_type:
            return value
        serde, name = self.inner_serde, self.store_name
        return serde.deserialize(name, serde.serialize(name, value) or b"")

    def _update_batch(self, batch: Batch, update: Callable[[Any, Any, int], Any]) -> None:
        """``_put_each`` over the whole batch: old values read in one native
        call, ``update`` per record (a record whose key came earlier in the
        batch sees that record's result), new values written in one."""
        if self.versioned:
            self._update_versioned(batch, update)
            return
        keys, record_stamps = batch.keys, batch.timestamps
        try:
            raw_keys = self._raw_keys(keys)
            olds, old_stamps = self._decode(self.store.get_raw_batch(raw_keys))
        except Exception:
            # Nothing written yet: one by one, the error names its record.
            self._put_each(batch, update)
            return
        repeated = len(set(raw_keys)) < len(raw_keys)
        current: dict[bytes, tuple[Any, Any]] = {}
        news: list[Any] = []
        stamps: list[int] = []
        old_values: list[Any] = []
        task, latest = self.task, self.latest_timestamp

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                timestamp = record_stamps[i]
                task.current_timestamp = timestamp
                if repeated and raw_keys[i] in current:
                    old, old_time = current[raw_keys[i]]
                else:
                    old, old_time = olds[i], old_stamps[i]
                if latest and old_time is not None and old_time > timestamp:
                    timestamp = old_time
                new = update(keys[i], old, i)
                if repeated:
                    current[raw_keys[i]] = (
                        (None, None) if new is None else (self._round_trip(new), timestamp)
                    )
                news.append(new)
                stamps.append(timestamp)
                old_values.append(old)

        # A record the handler fails on stops the task before anything of
        # the batch is written.
        skipped = self.each_record(batch, run)
        old_values = self.sent_old_values(old_values, skipped)
        if skipped:
            batch, raw_keys = without(batch, skipped), drop(raw_keys, skipped)
        try:
            encoded = self._encode(news, stamps)
        except Exception:
            # A result its serde rejects is found only here, after the
            # callbacks of the records behind it in the batch have run.
            bad = []
            for j in range(len(news)):
                if (error := self._encode_error(news[j], stamps[j])) is not None:
                    self.record_failed(batch, j, error)
                    bad.append(j)
            batch, raw_keys = without(batch, bad), drop(raw_keys, bad)
            news, stamps, old_values = drop(news, bad), drop(stamps, bad), drop(old_values, bad)
            encoded = self._encode(news, stamps)
        self.store.upsert_raw(raw_keys, encoded, batch.timestamps, False)
        if not self.caching:
            self.forward(batch.derive(batch.keys, news, stamps, batch.offsets, old_values))

    def _update_versioned(
        self,
        batch: Batch,
        update: Callable[[Any, Any, int], Any],
        sent_olds: list[Any] | None = None,
    ) -> None:
        """``_update_batch`` over a versioned store (Kafka's processors with
        a versioned store, KIP-914): the latest version is the old value;
        the new one is put as a version at the result timestamp. One the
        store does not put (older than its history retention) is not
        forwarded either; one older than the key's latest version (a later
        tombstone, or a later value) is forwarded marked not latest. The
        old values forwarded are the store's, or ``sent_olds`` (one per
        record) when given."""
        store, task, latest_timestamp = self.store, self.task, self.latest_timestamp
        keys, record_stamps = batch.keys, batch.timestamps
        kept: list[int] = []
        not_put: list[int] = []
        news: list[Any] = []
        olds: list[Any] = []
        stamps: list[int] = []
        latest: list[bool] = []

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                timestamp = record_stamps[i]
                task.current_timestamp = timestamp
                found = store.get(keys[i])
                old = None
                if found is not None:
                    old = found.value
                    if latest_timestamp:
                        timestamp = max(timestamp, found.timestamp)
                new = update(keys[i], old, i)
                code = store.put(keys[i], new, timestamp)
                if code == NOT_PUT:
                    not_put.append(i)
                    continue
                kept.append(i)
                news.append(new)
                olds.append(old if sent_olds is None else sent_olds[i])
                stamps.append(timestamp)
                latest.append(code == VALID_TO_UNDEFINED)

        skipped = self.each_record(batch, run)
        olds = self.sent_old_values(olds, sorted(skipped + not_put))
        out = batch.select(kept)
        out = out.derive(out.keys, news, stamps, out.offsets, olds)
        out.is_latest = None if all(latest) else latest
        self.forward(out)

    def _encode_error(self, value: Any, stamp: int) -> Exception | None:
        try:
            self._encode([value], [stamp])
        except Exception as exc:
            return exc
        return None


class KTableSource(_StoreNode):
    """``builder.table``: the latest value per key; a None value deletes.
    No user code runs: a batch is written in one native call that returns
    the old values."""

    latest_timestamp = False

    def process(self, batch: Batch) -> None:
        batch = skip_null_keys(self, batch)
        values = batch.values
        if not len(batch):
            if not self.caching:
                self.forward(batch.derive([], [], [], []))
            return
        try:
            raw_keys = self._raw_keys(batch.keys)
            encoded = self._encode(values, batch.timestamps)
        except Exception:
            self._put_each(batch, lambda _key, _old, i: values[i])
            return
        self.task.current_timestamp = batch.timestamps[-1]
        raw_olds = self.store.upsert_raw(raw_keys, encoded, batch.timestamps, not self.caching)
        if not self.caching:
            olds, _ = self._decode(raw_olds)
            self.forward(batch.derive(batch.keys, values, batch.timestamps, batch.offsets, olds))


class KTableSourceUnmaterialized(Node):
    """``builder.table`` without a store (Kafka's KTableSource with no
    queryable name): each update forwarded at once, without an old value;
    records with a null key are skipped."""

    def process(self, batch: Batch) -> None:
        batch = skip_null_keys(self, batch)
        self.forward(batch.derive(batch.keys, batch.values, batch.timestamps, batch.offsets))


def skip_null_keys(node: Node, batch: Batch) -> Batch:
    """The batch without its records with a null key, counted as dropped."""
    if None not in batch.keys:
        return batch
    skipped = batch.keys.count(None)
    node.task.metrics.dropped_records += skipped
    log.debug("%s: skipped %d record(s) with a null key", node.name, skipped)
    return batch.select([i for i, k in enumerate(batch.keys) if k is not None])


def table_source(store_name: str | None, versioned: bool = False) -> Node:
    """The node of a source table: over its store when it has one."""
    if store_name is None:
        return KTableSourceUnmaterialized()
    return KTableSourceVersioned(store_name) if versioned else KTableSource(store_name)


class KTableSourceVersioned(Node):
    """Kafka's KTableSource over a versioned store: every update becomes a
    version at its timestamp. One older than the latest (out of order) is
    forwarded marked not latest (``Batch.is_latest``), with the latest value
    as its old value; one older than the store's history is neither put nor
    forwarded."""

    def __init__(self, store_name: str) -> None:
        super().__init__()
        self.store_name = store_name

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.store: Any = task.store(self.store_name)

    def process(self, batch: Batch) -> None:
        batch = skip_null_keys(self, batch)
        store, task = self.store, self.task
        keys, values, stamps = batch.keys, batch.values, batch.timestamps
        kept: list[int] = []
        olds: list[Any] = []
        latest: list[bool] = []

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                task.current_timestamp = stamps[i]
                previous = store.get(keys[i])
                code = store.put(keys[i], values[i], stamps[i])
                if code == NOT_PUT:
                    continue
                kept.append(i)
                olds.append(None if previous is None else previous.value)
                latest.append(code == VALID_TO_UNDEFINED)

        self.each_record(batch, run)
        out = batch.select(kept)
        out = out.derive(out.keys, out.values, out.timestamps, out.offsets, olds)
        out.is_latest = None if all(latest) else latest
        self.forward(out)


def versioned_getter(store_name: str) -> ValueGetterSupplier:
    """A versioned table's value getter: the latest value, or with a time the
    value as of then (what a stream-table join reads, Kafka's ``get(key,
    asOf)``)."""

    def supplier(task: StreamTask) -> Callable[..., tuple[Any, int] | None]:
        store = task.store(store_name)

        def lookup(key: Any, *as_of: int) -> tuple[Any, int] | None:
            found = store.get(key, *as_of)
            return None if found is None else (found.value, found.timestamp)

        return lookup

    return supplier


class KTableFilter(Node):
    """Kafka's KTableFilter: ``send_old.send_old_values`` says whether
    changes carry old values (then an update filtered out before and after
    is not forwarded at all)."""

    def __init__(
        self,
        predicate: Callable[[Any, Any], bool],
        negate: bool,
        send_old: SendsOldValues,
        versioned_parent: bool = False,
    ) -> None:
        super().__init__()
        self.predicate = predicate
        self.negate = negate
        self.send_old = send_old
        # Kafka's useVersionedSemantics: every update is forwarded.
        self.versioned_parent = versioned_parent

    def _keep(self, key: Any, value: Any) -> Any:
        if value is None or bool(self.predicate(key, value)) is self.negate:
            return None
        return value

    def process(self, batch: Batch) -> None:
        send_old = self.send_old.send_old_values
        skip_absent = send_old and not self.versioned_parent
        keys, values, old_values = batch.keys, batch.values, old_values_of(batch)
        out: list[Any] = []
        olds: list[Any] = []
        kept: list[int] = []

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                key, new, old = keys[i], values[i], old_values[i]
                new2 = self._keep(key, new)
                old2 = self._keep(key, old) if send_old else None
                # Kafka forwards a tombstone for a filtered-out update, unless
                # old values are sent and there is nothing to retract.
                if skip_absent and new2 is None and old2 is None:
                    continue
                kept.append(i)
                out.append(new2)
                olds.append(old2)

        self.each_record(batch, run)
        selected = batch.select(kept)
        self.forward(
            selected.derive(selected.keys, out, selected.timestamps, selected.offsets, olds)
        )


class KTableMapValues(Node):
    """Kafka's KTableMapValues: None stays None (a delete)."""

    def __init__(
        self, mapper: Callable[..., Any], send_old: SendsOldValues, with_key: bool = False
    ) -> None:
        super().__init__()
        self.mapper = mapper
        self.send_old = send_old
        self.with_key = with_key

    def process(self, batch: Batch) -> None:
        fn, send_old = self.mapper, self.send_old.send_old_values
        news: list[Any] = []
        olds: list[Any] = []

        def run(values: Iterator[Any], old_values: Iterator[Any]) -> None:
            for new, old in zip(values, old_values, strict=True):
                new2 = None if new is None else fn(new)
                olds.append(fn(old) if send_old and old is not None else None)
                news.append(new2)

        def run_with_key(
            keys: Iterator[Any], values: Iterator[Any], old_values: Iterator[Any]
        ) -> None:
            for key, new, old in zip(keys, values, old_values, strict=True):
                new2 = None if new is None else fn(key, new)
                olds.append(fn(key, old) if send_old and old is not None else None)
                news.append(new2)

        columns = (batch.values, old_values_of(batch))
        skipped = (
            self.each_record(batch, run_with_key, batch.keys, *columns)
            if self.with_key
            else self.each_record(batch, run, *columns)
        )
        batch = without(batch, skipped)
        self.forward(batch.derive(batch.keys, news, batch.timestamps, batch.offsets, olds))


class KTableMaterializedChange(_StoreNode):
    """KTableFilter and KTableMapValues with ``materialized=`` (Kafka's
    queryable name): ``compute(key, value)`` gives each update's new value
    (None stays None), kept in the store at the record's timestamp; the old
    value forwarded is the store's. A filter (``skip_both_absent``) whose
    table sends old values drops an update that was absent and stays absent,
    store and all, as Kafka's does."""

    latest_timestamp = False

    def __init__(
        self,
        store_name: str,
        compute: Callable[[Any, Any], Any],
        send_old: SendsOldValues,
        skip_both_absent: bool,
    ) -> None:
        super().__init__(store_name)
        self.compute = compute
        self.send_old = send_old
        self.skip_both_absent = skip_both_absent

    def process(self, batch: Batch) -> None:
        compute, news = self.compute, []

        def run(keys: Iterator[Any], values: Iterator[Any]) -> None:
            for key, value in zip(keys, values, strict=True):
                news.append(None if value is None else compute(key, value))

        batch = without(batch, self.each_record(batch, run, batch.keys, batch.values))
        if self.skip_both_absent and self.send_old.send_old_values:
            kept: list[int] = []
            present: dict[Any, bool] = {}
            for i, (key, new) in enumerate(zip(batch.keys, news, strict=True)):
                was = present[key] if key in present else self.store.get(key) is not None
                if new is None and not was:
                    continue
                present[key] = new is not None
                kept.append(i)
            batch, news = batch.select(kept), [news[i] for i in kept]
        self._update_batch(batch, lambda _key, _old, i: news[i])


class KTableTransformValues(Node):
    """Kafka's KTableTransformValues without a store: each update's new
    value, and its old one when old values are sent, is what the
    transformer makes of it (of None too: a delete may become a value)."""

    def __init__(
        self,
        supplier: Callable[[], ValueTransformerWithKey[Any, Any]],
        send_old: SendsOldValues,
    ) -> None:
        super().__init__()
        self.supplier = supplier
        self.send_old = send_old

    def init(self, task: StreamTask) -> None:
        super().init(task)
        stores = task.node_stores.get(self.name, [])
        self.runner = ValueTransformerRunner(task, self.name, stores, self.supplier)

    def process(self, batch: Batch) -> None:
        runner, send_old = self.runner, self.send_old.send_old_values
        olds_in = old_values_of(batch)
        news: list[Any] = []
        olds: list[Any] = []

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                news.append(runner.transform(batch, i, batch.values[i]))
                olds.append(runner.transform(batch, i, olds_in[i]) if send_old else None)

        batch = without(batch, self.each_record(batch, run))
        self.forward(batch.derive(batch.keys, news, batch.timestamps, batch.offsets, olds))

    def close(self) -> None:
        self.runner.close()


class KTableTransformValuesMaterialized(_StoreNode):
    """KTableTransformValues with a queryable store: the transformer's
    value is kept there at the record's timestamp (None deletes), and the
    old value forwarded is the store's."""

    latest_timestamp = False

    def __init__(
        self, store_name: str, supplier: Callable[[], ValueTransformerWithKey[Any, Any]]
    ) -> None:
        super().__init__(store_name)
        self.supplier = supplier

    def init(self, task: StreamTask) -> None:
        super().init(task)
        stores = task.node_stores.get(self.name, [])
        self.runner = ValueTransformerRunner(task, self.name, stores, self.supplier)

    def process(self, batch: Batch) -> None:
        runner = self.runner
        news: list[Any] = []

        def run(indices: Iterator[int]) -> None:
            # Appended one by one: a record that fails leaves those before it.
            news.extend(runner.transform(batch, i, batch.values[i]) for i in indices)

        batch = without(batch, self.each_record(batch, run))
        self._update_batch(batch, lambda _key, _old, i: news[i])

    def close(self) -> None:
        self.runner.close()


def transformed_getter(
    parent: ValueGetterSupplier,
    name: str,
    store_names: list[str],
    supplier: Callable[[], ValueTransformerWithKey[Any, Any]],
) -> ValueGetterSupplier:
    """Kafka's KTableTransformValuesGetter: a transformer of its own per
    reader, applied to the parent's value (None included); a value it makes
    of an absent one takes the reading record's timestamp."""

    def make(task: StreamTask) -> Callable[..., tuple[Any, int] | None]:
        get = parent(task)
        runner = ValueTransformerRunner(task, name, store_names, supplier)
        task.on_close(runner.close)

        def lookup(key: Any, *as_of: int) -> tuple[Any, int] | None:
            found = get(key, *as_of)
            value = runner.transformer.transform(key, None if found is None else found[0])
            if value is None:
                return None
            return value, task.current_timestamp if found is None else found[1]

        return lookup

    return make


class KTableToStream(Node):
    """The table's updates as a stream of new values (tombstones included)."""

    def process(self, batch: Batch) -> None:
        out = batch.derive(batch.keys, batch.values, batch.timestamps, batch.offsets)
        out.is_latest = None  # a stream's records: out-of-order versions included
        self.forward(out)


class KTableRepartitionMap(Node):
    """``KTable.group_by``: each change becomes a retraction of the old pair
    and an addition of the new one (one record when the key stays)."""

    def __init__(self, selector: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        super().__init__()
        self.selector = selector

    def process(self, batch: Batch) -> None:
        batch = latest_only(batch)
        fn = self.selector
        keys: list[Any] = []
        changes: list[tuple[Any, Any]] = []
        stamps: list[int] = []
        offsets: list[int] = []
        old_values = old_values_of(batch)

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                key, new, old = batch.keys[i], batch.values[i], old_values[i]
                new_pair = None if new is None else tuple(fn(key, new))
                old_pair = None if old is None else tuple(fn(key, old))
                new_ok = new_pair is not None and None not in new_pair
                old_ok = old_pair is not None and None not in old_pair
                if new_ok and old_ok and new_pair[0] == old_pair[0]:  # type: ignore[index]
                    out = [(new_pair[0], (new_pair[1], old_pair[1]))]  # type: ignore[index]
                else:
                    out = []
                    if old_ok:
                        out.append((old_pair[0], (None, old_pair[1])))  # type: ignore[index]
                    if new_ok:
                        out.append((new_pair[0], (new_pair[1], None)))  # type: ignore[index]
                for k, change in out:
                    keys.append(k)
                    changes.append(change)
                    stamps.append(batch.timestamps[i])
                    offsets.append(batch.offsets[i])

        self.each_record(batch, run)
        self.forward(batch.derive(keys, changes, stamps, offsets))


class ChangeSerde(WrappingSerde[tuple[Any, Any]]):
    """(new, old) pairs on a table's repartition topic: a flag byte (bit 0:
    new present, bit 1: old present), the new value's length, both values
    (Kafka's ChangedSerializer around the table's value serde, or the
    default one)."""

    def __init__(self, inner: Serde[Any] | None) -> None:
        self.inner = inner

    def serialize(self, topic: str, data: tuple[Any, Any] | None) -> bytes | None:
        if data is None:
            return None
        new = self._inner().serialize(topic, data[0])
        old = self._inner().serialize(topic, data[1])
        flags = (new is not None) | (old is not None) << 1
        return struct.pack(">BI", flags, len(new or b"")) + (new or b"") + (old or b"")

    def deserialize(self, topic: str, data: bytes | None) -> tuple[Any, Any] | None:
        if data is None:
            return None
        if len(data) < 5:
            raise SerializationError(f"a table change on {topic} needs 5 bytes, got {len(data)}")
        flags, length = struct.unpack_from(">BI", data)
        new = self._inner().deserialize(topic, data[5 : 5 + length]) if flags & 1 else None
        old = self._inner().deserialize(topic, data[5 + length :]) if flags & 2 else None
        return new, old

    # Batches: the framing in one native call each way, the values through
    # the inner serde's batch calls.
    def serialize_batch(
        self, topic: str, data: Sequence[tuple[Any, Any] | None]
    ) -> list[bytes | None]:
        if None in data:
            return super().serialize_batch(topic, data)
        news = self._inner().serialize_batch(topic, [d[0] for d in data])  # type: ignore[index]
        olds = self._inner().serialize_batch(topic, [d[1] for d in data])  # type: ignore[index]
        return list(_core.pack_changes(news, olds))

    def deserialize_batch(
        self, topic: str, data: Sequence[bytes | None]
    ) -> list[tuple[Any, Any] | None]:
        unpacked = _core.unpack_changes(list(data))
        if unpacked is None:  # one by one, to name what is wrong
            return super().deserialize_batch(topic, data)
        news = self._inner().deserialize_batch(topic, unpacked[0])
        olds = self._inner().deserialize_batch(topic, unpacked[1])
        return list(zip(news, olds, strict=True))


class KTableAggregate(_StoreNode):
    """``KGroupedTable.aggregate`` (and count, reduce): remove the old value,
    then add the new one, as Kafka's KTableAggregate/KTableReduce do."""

    def __init__(
        self,
        store_name: str,
        initializer: Callable[[], Any] | None,
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
    ) -> None:
        super().__init__(store_name)
        self.initializer = initializer
        self.adder = adder
        self.subtractor = subtractor

    def init(self, task: StreamTask) -> None:
        super().init(task)
        # count() runs natively: no user code to call per record.
        self.native_count = (
            self.adder is count_adder
            and self.subtractor is count_subtractor
            and self.timestamped
            and isinstance(self.inner_serde, Long)
        )

    def process(self, batch: Batch) -> None:
        changes: Sequence[tuple[Any, Any]] = batch.values
        if self.native_count and len(batch):
            try:
                raw_keys = self._raw_keys(batch.keys)
            except Exception:
                raw_keys = None  # the general path names the record
            if raw_keys is not None:
                self._count(batch, raw_keys)
                return

        def update(key: Any, agg: Any, i: int) -> Any:
            new, old = changes[i]
            if old is not None and agg is not None:
                agg = self.subtractor(key, old, agg)
            if new is not None:
                if agg is None:
                    # reduce (no initializer): the first value is the aggregate
                    if self.initializer is None:
                        return new
                    agg = self.initializer()
                agg = self.adder(key, new, agg)
            return agg

        self._update_batch(batch, update)

    def _count(self, batch: Batch, raw_keys: list[bytes]) -> None:
        has_new = [new is not None for new, _ in batch.values]
        has_old = [old is not None for _, old in batch.values]
        self.task.current_timestamp = batch.timestamps[-1]
        if self.caching:
            self.store.table_count(raw_keys, batch.timestamps, has_new, has_old)
            return
        olds, news, stamps = self.store.table_count(raw_keys, batch.timestamps, has_new, has_old)
        self.forward(batch.derive(batch.keys, news, stamps, batch.offsets, olds))


def count_initializer() -> int:
    return 0


def count_adder(_key: Any, _value: Any, agg: int) -> int:
    """``KGroupedTable.count``'s adder (KTableAggregate recognizes it and
    counts natively)."""
    return agg + 1


def count_subtractor(_key: Any, _value: Any, agg: int) -> int:
    return agg - 1


class KStreamAggregate(_StoreNode):
    """``KGroupedStream.reduce`` and ``aggregate`` with user functions, per
    record over the store; null keys and (for reduce) null values are skipped."""

    def __init__(
        self,
        store_name: str,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
    ) -> None:
        super().__init__(store_name)
        self.initializer = initializer
        self.aggregator = aggregator
        # Record index -> the initializer's aggregate it started from.
        self.initialized: dict[int, Any] = {}

    def process(self, batch: Batch) -> None:
        # By identity: a value's own == may not give a bool (arrays).
        if any(k is None for k in batch.keys) or any(v is None for v in batch.values):
            keep = [
                i
                for i, (k, v) in enumerate(zip(batch.keys, batch.values, strict=True))
                if k is not None and v is not None
            ]
            self.task.metrics.dropped_records += len(batch) - len(keep)
            batch = batch.select(keep)
        values = batch.values
        initialized = self.initialized = {}

        def update(key: Any, agg: Any, i: int) -> Any:
            if agg is None:
                if self.initializer is None:
                    return values[i]
                agg = initialized[i] = self.initializer()
            return self.aggregator(key, values[i], agg)

        self._update_batch(batch, update)

    def sent_old_values(self, olds: list[Any], skipped: list[int]) -> list[Any]:
        """A key's first aggregate retracts the initializer's: Kafka's
        KStreamAggregate forwards it as the old value (what a filter or join
        with old values downstream then sees)."""
        for i, initial in self.initialized.items():
            before = bisect_left(skipped, i)  # records skipped before this one
            if before == len(skipped) or skipped[before] != i:
                olds[i - before] = initial
        return olds


# A table's value getter: given a task, a function from key to the current
# (value, timestamp), or None (Kafka's KTableValueGetter and ValueAndTimestamp).
# Stores answer directly; filtered, mapped and joined tables compute through.
# Getters of versioned tables also take a time: lookup(key, as_of).
ValueGetterSupplier = Callable[["StreamTask"], Callable[..., "tuple[Any, int] | None"]]


def is_timestamped(store: Any) -> bool:
    """Whether a key-value store holds (value, timestamp) pairs (Kafka's
    timestamped stores, which the DSL's tables and aggregations use)."""
    return isinstance(getattr(store, "value_serde", None), Timestamped)


def plain_get(store: Any) -> Callable[[Any], Any]:
    """A store's ``get`` that returns values without their timestamps."""
    if not is_timestamped(store):
        get: Callable[[Any], Any] = store.get
        return get

    def lookup(key: Any) -> Any:
        pair = store.get(key)
        return None if pair is None else pair[0]

    return lookup


def store_getter(store_name: str) -> ValueGetterSupplier:
    def supplier(task: StreamTask) -> Callable[[Any], tuple[Any, int] | None]:
        store = task.key_value_store(store_name)
        if is_timestamped(store):
            get: Callable[[Any], tuple[Any, int] | None] = store.get
            return get

        def lookup(key: Any) -> tuple[Any, int] | None:
            value = store.get(key)
            return None if value is None else (value, -1)

        return lookup

    return supplier


def filtered_getter(
    parent: ValueGetterSupplier, predicate: Callable[[Any, Any], bool], negate: bool
) -> ValueGetterSupplier:
    def supplier(task: StreamTask) -> Callable[..., tuple[Any, int] | None]:
        get = parent(task)

        def lookup(key: Any, *as_of: int) -> tuple[Any, int] | None:
            found = get(key, *as_of)
            if found is None or bool(predicate(key, found[0])) is negate:
                return None
            return found

        return lookup

    return supplier


def mapped_getter(
    parent: ValueGetterSupplier, mapper: Callable[..., Any], with_key: bool = False
) -> ValueGetterSupplier:
    def supplier(task: StreamTask) -> Callable[..., tuple[Any, int] | None]:
        get = parent(task)

        def lookup(key: Any, *as_of: int) -> tuple[Any, int] | None:
            found = get(key, *as_of)
            if found is None:
                return None
            mapped = mapper(key, found[0]) if with_key else mapper(found[0])
            # A value mapped to None is absent, as Kafka's ValueAndTimestamp.make
            # makes it: a getter downstream never maps or joins it.
            return None if mapped is None else (mapped, found[1])

        return lookup

    return supplier


class KStreamKTableJoin(Node):
    """Stream records look up the table's current value for their key; only
    stream records trigger output, at the stream record's timestamp. Inner:
    no match, no output; left: the joiner gets None. Records with a null
    value are dropped, and so are those with a null key, except in a left
    join (Kafka's KStreamKTableJoinProcessor, KIP-962). A versioned table is
    read as of each stream record's timestamp.

    With a grace period (``buffer`` names its store), stream records wait
    in a buffer until the buffer's stream time is ``grace_ms`` past them,
    then join in timestamp order (then serialized key, then arrival), as
    Kafka's RocksDBTimeOrderedKeyValueBuffer releases them; a record
    already older than that joins at once."""

    def __init__(
        self,
        getter: ValueGetterSupplier,
        joiner: Callable[..., Any],
        left: bool,
        with_key: bool = False,
        versioned: bool = False,
        grace_ms: int = 0,
        buffer: str | None = None,
    ) -> None:
        super().__init__()
        self.getter = getter
        self.joiner = joiner
        self.left = left
        self.with_key = with_key
        self.versioned = versioned
        self.grace_ms = grace_ms
        self.buffer_name = buffer

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.lookup = self.getter(task)
        if self.buffer_name is not None:
            self.buffer: Any = task.key_value_store(self.buffer_name)
            self._time_key = f"{self.name}#buffer-time"
            self.buffer_time = NO_TIME
            self._buffer_time_read = False  # when the first batch comes

    def _join_one(self, key: Any, value: Any, timestamp: int) -> tuple[bool, Any]:
        if key is None:
            found = None
        else:
            found = self.lookup(key, timestamp) if self.versioned else self.lookup(key)
        if found is None and not self.left:
            return False, None
        table_value = None if found is None else found[0]
        if self.with_key:
            return True, self.joiner(key, value, table_value)
        return True, self.joiner(value, table_value)

    def process(self, batch: Batch) -> None:
        if self.buffer_name is not None:
            self._process_buffered(batch)
            return
        left, stamps = self.left, batch.timestamps
        kept: list[int] = []
        joined: list[Any] = []

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                key, value = batch.keys[i], batch.values[i]
                if value is None or (key is None and not left):
                    self.task.metrics.dropped_records += 1
                    continue
                matched, result = self._join_one(key, value, stamps[i])
                if matched:
                    joined.append(result)
                    kept.append(i)

        self.each_record(batch, run)
        selected = batch.select(kept)
        self.forward(selected.derive(selected.keys, joined, selected.timestamps, selected.offsets))

    def _process_buffered(self, batch: Batch) -> None:
        task, left, grace = self.task, self.left, self.grace_ms
        if not self._buffer_time_read:
            # As committed, and at least the latest record held back (the
            # buffer may just have been restored from its changelog).
            held = [int.from_bytes(k[:8], "big") for k, _ in self.buffer.native.range(None, None)]
            self.buffer_time = max([task.state.node_times.get(self._time_key, NO_TIME), *held])
            self._buffer_time_read = True
        keys, values, stamps, offsets = batch.keys, batch.values, batch.timestamps, batch.offsets
        headers_in = task.record_headers(batch)
        out: tuple[list[Any], list[Any], list[int], list[int], list[Any]] = ([], [], [], [], [])

        def emit(key: Any, value: Any, timestamp: int, offset: int, headers: Any) -> None:
            task.current_timestamp = timestamp
            matched, joined = self._join_one(key, value, timestamp)
            if matched:
                for column, item in zip(
                    out, (key, joined, timestamp, offset, headers), strict=True
                ):
                    column.append(item)

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                key, value, timestamp = keys[i], values[i], stamps[i]
                if value is None or (key is None and not left):
                    task.metrics.dropped_records += 1
                    continue
                headers = None if headers_in is None else headers_in[i]
                if key is None or self.buffer_time - grace > timestamp:
                    emit(key, value, timestamp, offsets[i], headers)
                    continue
                self._buffer_put(key, value, timestamp, offsets[i], headers)
                self.buffer_time = max(self.buffer_time, timestamp)
                self._evict(emit)

        try:
            self.each_record(batch, run)
        finally:
            task.state.node_times[self._time_key] = self.buffer_time
        keys_out, values_out, stamps_out, offsets_out, headers_out = out
        result = Batch(
            batch.topic,
            batch.partition,
            keys_out,
            values_out,
            stamps_out,
            offsets_out,
            headers=headers_out if any(headers_out) else None,
        )
        self.forward(result)

    def _buffer_put(self, key: Any, value: Any, timestamp: int, offset: int, headers: Any) -> None:
        store = self.buffer
        raw_key = store.key_serde.serialize(self.buffer_name, key) or b""
        entry_key = timestamp.to_bytes(8, "big") + raw_key + offset.to_bytes(8, "big")
        raw_value = store.value_serde.serialize(self.buffer_name, value)
        store.native.put(entry_key, _buffered(raw_value, headers), timestamp)

    def _evict(self, emit: Callable[[Any, Any, int, int, Any], None]) -> None:
        """Joins every buffered record at or before buffer time - grace, in order."""
        limit = self.buffer_time - self.grace_ms
        if limit < 0:
            return
        store = self.buffer
        for entry_key, entry in store.native.range(None, (limit + 1).to_bytes(8, "big")):
            timestamp = int.from_bytes(entry_key[:8], "big")
            offset = int.from_bytes(entry_key[-8:], "big")
            key = store.key_serde.deserialize(self.buffer_name, entry_key[8:-8])
            raw_value, headers = _unbuffered(entry)
            value = store.value_serde.deserialize(self.buffer_name, raw_value)
            store.native.put(entry_key, None, timestamp)
            emit(key, value, timestamp, offset, headers)


_I32 = struct.Struct(">i")
NO_TIME = -(2**63)


def _buffered(value: bytes | None, headers: Any) -> bytes:
    """A buffered stream record's value bytes and headers."""
    parts = [_I32.pack(-1 if value is None else len(value)), value or b""]
    items = list(headers or ())
    parts.append(_I32.pack(len(items)))
    for name, data in items:
        name_bytes = name.encode()
        parts += [_I32.pack(len(name_bytes)), name_bytes]
        parts += [_I32.pack(-1 if data is None else len(data)), data or b""]
    return b"".join(parts)


def _unbuffered(entry: bytes) -> tuple[bytes | None, Any]:
    def field(at: int) -> tuple[bytes | None, int]:
        (length,) = _I32.unpack_from(entry, at)
        at += 4
        if length < 0:
            return None, at
        return entry[at : at + length], at + length

    value, at = field(0)
    (count,) = _I32.unpack_from(entry, at)
    at += 4
    headers = []
    for _ in range(count):
        name, at = field(at)
        data, at = field(at)
        headers.append(((name or b"").decode(), data))
    return value, headers or None


class KStreamGlobalKTableJoin(Node):
    """Stream records look up ``key_selector(key, value)`` in a global store;
    no co-partitioning is needed. Inner: no match, no output; left: the
    joiner gets None. Records with a null value are dropped, and so are
    those whose selected key is null, except in a left join (Kafka's
    KStreamKTableJoinProcessor, KIP-962)."""

    def __init__(
        self,
        store_name: str,
        key_selector: Callable[[Any, Any], Any],
        joiner: Callable[..., Any],
        left: bool,
        with_key: bool = False,
    ) -> None:
        super().__init__()
        self.store_name = store_name
        self.key_selector = key_selector
        self.joiner = joiner
        self.left = left
        # joiner(stream key, value, global value), Kafka's ValueJoinerWithKey.
        self.with_key = with_key

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.lookup = plain_get(task.key_value_store(self.store_name))

    def process(self, batch: Batch) -> None:
        lookup, select, joiner, left = self.lookup, self.key_selector, self.joiner, self.left
        kept: list[int] = []
        joined: list[Any] = []

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                key, value = batch.keys[i], batch.values[i]
                if value is None:
                    self.task.metrics.dropped_records += 1
                    continue
                table_key = select(key, value)
                if table_key is None and not left:
                    self.task.metrics.dropped_records += 1
                    continue
                table_value = None if table_key is None else lookup(table_key)
                if table_value is None and not left:
                    continue
                joined.append(
                    joiner(key, value, table_value) if self.with_key else joiner(value, table_value)
                )
                kept.append(i)

        self.each_record(batch, run)
        selected = batch.select(kept)
        self.forward(selected.derive(selected.keys, joined, selected.timestamps, selected.offsets))
