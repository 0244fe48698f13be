"""KStream, KGroupedStream and KTable: the DSL's streams and tables."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from strom import agg as strom_agg
from strom.errors import TopologyError
from strom.kstream.emit_strategy import EmitStrategy
from strom.kstream.internals import processors as p
from strom.kstream.internals import stream_joins as sj
from strom.kstream.internals import table_processors as tp
from strom.kstream.internals import window_aggregates as wa
from strom.kstream.internals.native_window import (
    MeanState,
    NativeSessionWindowAggregate,
    NativeSlidingWindowAggregate,
    NativeTimeWindowAggregate,
)
from strom.kstream.join_windows import JoinWindows
from strom.kstream.materialized import Materialized
from strom.kstream.suppressed import Suppressed
from strom.kstream.windows import SessionWindows, SlidingWindows, TimeWindows
from strom.processor.internals.nodes import Node, PassThrough
from strom.processor.internals.processor_node import ProcessorAdapter
from strom.processor.internals.topology_builder import ProcessorDef, StoreDef
from strom.serdes import Double, Long, Serde, SessionWindowed, TimeWindowed
from strom.state.stores import to_millis

if TYPE_CHECKING:
    from strom.builder import StreamsBuilder
    from strom.processor.api import Processor, RecordContext

Partitioner = Callable[[Any, Any, int], int]


class KStream:
    """An unbounded stream of records (Kafka's ``KStream``).

    Every operation returns a new KStream (or KGroupedStream / KTable) and
    adds a node to the builder's topology.
    """

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        repartition_required: bool = False,
    ) -> None:
        self._builder = builder
        self._node = node
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._repartition_required = repartition_required

    def _then(
        self,
        prefix: str,
        node: Callable[[], Node],
        *,
        key_changed: bool = False,
        value_serde_kept: bool = True,
        name: str | None = None,
    ) -> KStream:
        node_name = name or self._builder.new_name(prefix)
        self._builder.internal.add_processor(node_name, node, self._node)
        return KStream(
            self._builder,
            node_name,
            None if key_changed else self._key_serde,
            self._value_serde if value_serde_kept else None,
            self._repartition_required or key_changed,
        )

    # --- stateless ------------------------------------------------------------
    def filter(self, predicate: Callable[[Any, Any], bool], *, name: str | None = None) -> KStream:
        """Keeps the records for which ``predicate(key, value)`` is true."""
        return self._then(
            "KSTREAM-FILTER-", lambda: p.KStreamFilter(predicate, negate=False), name=name
        )

    def filter_not(
        self, predicate: Callable[[Any, Any], bool], *, name: str | None = None
    ) -> KStream:
        """Drops the records for which ``predicate(key, value)`` is true."""
        return self._then(
            "KSTREAM-FILTER-", lambda: p.KStreamFilter(predicate, negate=True), name=name
        )

    def map(
        self, mapper: Callable[[Any, Any], tuple[Any, Any]], *, name: str | None = None
    ) -> KStream:
        """``mapper(key, value) -> (new_key, new_value)``; marks the stream for repartitioning."""
        return self._then(
            "KSTREAM-MAP-",
            lambda: p.KStreamMap(mapper, key_only=False),
            key_changed=True,
            value_serde_kept=False,
            name=name,
        )

    def map_values(self, mapper: Callable[[Any], Any], *, name: str | None = None) -> KStream:
        """``mapper(value) -> new_value``; the key is kept."""
        return self._then(
            "KSTREAM-MAPVALUES-",
            lambda: p.KStreamMapValues(mapper, with_key=False),
            value_serde_kept=False,
            name=name,
        )

    def flat_map(
        self,
        mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]]],
        *,
        name: str | None = None,
    ) -> KStream:
        """``mapper(key, value) -> iterable of (key, value)``; marks for repartitioning."""
        return self._then(
            "KSTREAM-FLATMAP-",
            lambda: p.KStreamFlatMap(mapper, values_only=False),
            key_changed=True,
            value_serde_kept=False,
            name=name,
        )

    def flat_map_values(
        self, mapper: Callable[[Any], Iterable[Any]], *, name: str | None = None
    ) -> KStream:
        """``mapper(value) -> iterable of values``, each with the record's key."""
        return self._then(
            "KSTREAM-FLATMAPVALUES-",
            lambda: p.KStreamFlatMap(mapper, values_only=True),
            value_serde_kept=False,
            name=name,
        )

    def select_key(self, mapper: Callable[[Any, Any], Any], *, name: str | None = None) -> KStream:
        """``mapper(key, value) -> new_key``; marks the stream for repartitioning."""
        return self._then(
            "KSTREAM-KEY-SELECT-",
            lambda: p.KStreamMap(mapper, key_only=True),
            key_changed=True,
            name=name,
        )

    def peek(self, action: Callable[[Any, Any], Any], *, name: str | None = None) -> KStream:
        """Calls ``action(key, value)`` for each record and passes it on."""
        return self._then("KSTREAM-PEEK-", lambda: p.KStreamPeek(action), name=name)

    def foreach(self, action: Callable[[Any, Any], Any], *, name: str | None = None) -> None:
        """Calls ``action(key, value)`` for each record (a terminal operation)."""
        self._then("KSTREAM-FOREACH-", lambda: p.KStreamPeek(action), name=name)

    def print(self, *, label: str | None = None, name: str | None = None) -> None:
        """Prints ``[label]: key, value`` for each record (for debugging)."""
        node_name = name or self._builder.new_name("KSTREAM-PRINTER-")
        text = label or self._node
        self._builder.internal.add_processor(node_name, lambda: p.KStreamPrint(text), self._node)

    def merge(self, other: KStream, *, name: str | None = None) -> KStream:
        """The records of both streams (no order between them is promised)."""
        node_name = name or self._builder.new_name("KSTREAM-MERGE-")
        self._builder.internal.add_processor(node_name, PassThrough, self._node, other._node)
        return KStream(
            self._builder,
            node_name,
            self._key_serde if self._key_serde == other._key_serde else None,
            self._value_serde if self._value_serde == other._value_serde else None,
            self._repartition_required or other._repartition_required,
        )

    def split(self, name: str | None = None) -> BranchedKStream:
        """Routes each record to the first branch whose predicate matches:
        ``split().branch(pred).branch(pred2).default_branch()``."""
        return BranchedKStream(self, name or self._builder.new_name("KSTREAM-BRANCH-"))

    def through(
        self,
        topic: str,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        partitioner: Partitioner | None = None,
    ) -> KStream:
        """Writes to ``topic`` (which must exist) and reads it back as a new
        stream: a user-managed repartition."""
        self.to(topic, key_serde=key_serde, value_serde=value_serde, partitioner=partitioner)
        return self._builder.stream(
            topic,
            key_serde=key_serde or self._key_serde,
            value_serde=value_serde or self._value_serde,
        )

    def repartition(
        self,
        *,
        num_partitions: int | None = None,
        name: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> KStream:
        """Goes through the internal topic ``<application.id>-<name>-repartition``
        (partitioned by key with murmur2), starting a new sub-topology."""
        if num_partitions is not None and num_partitions < 1:
            raise TopologyError(f"num_partitions must be at least 1, got {num_partitions}")
        prefix = name or self._builder.new_name("KSTREAM-REPARTITION-")
        keys, values = key_serde or self._key_serde, value_serde or self._value_serde
        source = self._builder.repartition(prefix, self._node, keys, values, num_partitions)
        return KStream(self._builder, source, keys, values)

    def to(
        self,
        topic: str | Callable[[Any, Any, RecordContext], str],
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        partitioner: Partitioner | None = None,
        name: str | None = None,
    ) -> None:
        """Writes the stream to ``topic`` (which must exist), or to the topic
        ``topic(key, value, record_context)`` returns for each record."""
        extractor = None if isinstance(topic, str) else topic
        self._builder.internal.add_sink(
            name or self._builder.new_name("KSTREAM-SINK-"),
            topic if isinstance(topic, str) else "",
            self._node,
            key_serde=key_serde or self._key_serde,
            value_serde=value_serde or self._value_serde,
            partitioner=partitioner,
            topic_extractor=extractor,
        )

    def to_table(self, materialized: Materialized | str | None = None) -> KTable:
        """The stream as a table: the latest value per key, None deletes."""
        builder = self._builder
        mat = Materialized.of(materialized)
        name = builder.new_name("KSTREAM-TOTABLE-")
        store_name = mat.store_name or builder.new_name("KSTREAM-TOTABLE-STATE-STORE-")
        keys, values = mat.key_serde or self._key_serde, mat.value_serde or self._value_serde
        parent = self._node
        if self._repartition_required:
            parent = builder.repartition(name, parent, keys, values)
        builder.internal.add_processor(name, lambda: tp.KTableSource(store_name), parent)
        builder.internal.add_store(mat.store_def(store_name, keys, values), name)
        return KTable(builder, name, keys, values, store_name)

    def process(
        self,
        supplier: Callable[[], Processor[Any, Any]],
        *store_names: str,
        name: str | None = None,
    ) -> KStream:
        """Runs a Processor API ``Processor`` on each record, with access to
        ``store_names`` (added with ``StreamsBuilder.add_state_store``); what
        it forwards is the new stream (keys may have changed)."""
        node_name = name or self._builder.new_name("KSTREAM-PROCESSOR-")
        self._builder.internal.add_processor(
            node_name, lambda: ProcessorAdapter(supplier), self._node
        )
        if store_names:
            self._builder.internal.connect_processor_and_stores([node_name], list(store_names))
        return KStream(self._builder, node_name, None, None, repartition_required=True)

    # --- joins ----------------------------------------------------------------
    def join(
        self,
        other: KStream | KTable | GlobalKTable,
        joiner_or_key_selector: Callable[[Any, Any], Any],
        joiner_or_windows: Callable[[Any, Any], Any] | JoinWindows | None = None,
        *,
        name: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        other_value_serde: Serde[Any] | None = None,
        store_name: str | None = None,
        logging: bool = True,
    ) -> KStream:
        """Inner join, in Kafka's argument order:

        - ``join(other_stream, joiner, join_windows)``: ``joiner(value,
          other_value)`` for every pair of records with the same key whose
          timestamps are within the join windows (see ``JoinWindows``);
        - ``join(table, joiner)``: ``joiner(value, table_value)`` for each
          stream record whose key is in the table (as of that record);
        - ``join(global_table, key_selector, joiner)``: looks up
          ``key_selector(key, value)`` in the global table.

        For stream-stream joins, ``key_serde``, ``value_serde`` and
        ``other_value_serde`` (Kafka's ``StreamJoined``) serialize the join's
        stores and repartition topics, ``store_name`` names its stores and
        ``logging=False`` turns their changelogs off.
        """
        if isinstance(other, KStream):
            return self._stream_join(
                other,
                joiner_or_key_selector,
                joiner_or_windows,
                left_outer=False,
                right_outer=False,
                name=name,
                serdes=(key_serde, value_serde, other_value_serde),
                store_name=store_name,
                logging=logging,
            )
        if isinstance(joiner_or_windows, JoinWindows):
            raise TopologyError("JoinWindows belong to a join with another KStream")
        return self._join(other, joiner_or_key_selector, joiner_or_windows, left=False, name=name)

    def left_join(
        self,
        other: KStream | KTable | GlobalKTable,
        joiner_or_key_selector: Callable[[Any, Any], Any],
        joiner_or_windows: Callable[[Any, Any], Any] | JoinWindows | None = None,
        *,
        name: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        other_value_serde: Serde[Any] | None = None,
        store_name: str | None = None,
        logging: bool = True,
    ) -> KStream:
        """Left join: like ``join``, but a record with no match is joined
        with None. With another KStream that result comes only once the
        record's join window has closed (stream time passed its timestamp
        plus ``after`` plus grace), and never if a match arrived before."""
        if isinstance(other, KStream):
            return self._stream_join(
                other,
                joiner_or_key_selector,
                joiner_or_windows,
                left_outer=True,
                right_outer=False,
                name=name,
                serdes=(key_serde, value_serde, other_value_serde),
                store_name=store_name,
                logging=logging,
            )
        if isinstance(joiner_or_windows, JoinWindows):
            raise TopologyError("JoinWindows belong to a join with another KStream")
        return self._join(other, joiner_or_key_selector, joiner_or_windows, left=True, name=name)

    def outer_join(
        self,
        other: KStream,
        joiner: Callable[[Any, Any], Any],
        join_windows: JoinWindows,
        *,
        name: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        other_value_serde: Serde[Any] | None = None,
        store_name: str | None = None,
        logging: bool = True,
    ) -> KStream:
        """Outer join with another KStream: like ``left_join``, and records
        of the other stream without a match are joined as
        ``joiner(None, other_value)`` once their window has closed."""
        if not isinstance(other, KStream):
            raise TopologyError(
                f"outer_join takes another KStream, not {type(other).__name__} "
                "(a stream has no outer join with a table)"
            )
        return self._stream_join(
            other,
            joiner,
            join_windows,
            left_outer=True,
            right_outer=True,
            name=name,
            serdes=(key_serde, value_serde, other_value_serde),
            store_name=store_name,
            logging=logging,
        )

    def _stream_join(
        self,
        other: KStream,
        joiner: Callable[[Any, Any], Any],
        windows: Any,
        *,
        left_outer: bool,
        right_outer: bool,
        name: str | None,
        serdes: tuple[Serde[Any] | None, Serde[Any] | None, Serde[Any] | None],
        store_name: str | None,
        logging: bool,
    ) -> KStream:
        """Kafka's KStreamImpl.doJoin + KStreamImplJoin.join: repartition
        each side that needs it, a window store per side, a join processor
        per side, their results merged."""
        if not isinstance(windows, JoinWindows):
            raise TopologyError(
                "a join with another KStream takes (other, joiner, join_windows), "
                f"not {type(windows).__name__} as the third argument"
            )
        if not callable(joiner):
            raise TopologyError(f"the joiner must be callable, got {joiner!r}")
        if other._builder is not self._builder:
            raise TopologyError("both streams of a join must come from the same StreamsBuilder")
        builder = self._builder
        keys = serdes[0] or self._key_serde or other._key_serde
        this_values = serdes[1] or self._value_serde
        other_values = serdes[2] or other._value_serde
        this_node, other_node = self._node, other._node
        # Left/outer joins take records with null keys (KIP-962), so their
        # repartition topics pass them on.
        relaxed = left_outer
        if self._repartition_required:
            prefix = f"{name}-left" if name else self._node
            this_node = self._repartition_for_join(prefix, this_node, keys, this_values, relaxed)
        if other._repartition_required:
            if other is self or other._node == self._node:
                other_node = this_node  # a self-join repartitions once
            else:
                prefix = f"{name}-right" if name else other._node
                other_node = self._repartition_for_join(
                    prefix, other_node, keys, other_values, relaxed
                )

        this_suffix = "-outer-this-join" if right_outer else "-this-join"
        other_suffix = "-outer-other-join" if left_outer else "-other-join"
        this_windowed = f"{name}-this-windowed" if name else builder.new_name("KSTREAM-WINDOWED-")
        other_windowed = f"{name}-other-windowed" if name else builder.new_name("KSTREAM-WINDOWED-")
        this_prefix = "KSTREAM-OUTERTHIS-" if right_outer else "KSTREAM-JOINTHIS-"
        this_generated = builder.new_name(this_prefix)
        other_generated = builder.new_name(
            "KSTREAM-OUTEROTHER-" if left_outer else "KSTREAM-JOINOTHER-"
        )
        this_join = f"{name}{this_suffix}" if name else this_generated
        other_join = f"{name}{other_suffix}" if name else other_generated
        merge = f"{name}-merge" if name else builder.new_name("KSTREAM-MERGE-")
        this_store = f"{store_name}{this_suffix}-store" if store_name else f"{this_generated}-store"
        other_store = (
            f"{store_name}{other_suffix}-store" if store_name else f"{other_generated}-store"
        )
        outer_store = None
        if left_outer:
            shared = "-outer-shared-join" if right_outer else "-left-shared-join"
            outer_store = (
                f"{store_name}{shared}-store"
                if store_name
                else f"KSTREAM-OUTERSHARED-{this_generated[len(this_prefix) :]}-store"
            )

        internal = builder.internal
        internal.add_processor(this_windowed, lambda: sj.KStreamJoinWindow(this_store), this_node)
        internal.add_processor(
            other_windowed, lambda: sj.KStreamJoinWindow(other_store), other_node
        )
        trackers = sj.SharedTimeTrackers(this_join)

        def side(is_left: bool) -> Callable[[], Node]:
            return lambda: sj.KStreamKStreamJoinSide(
                is_left=is_left,
                this_store=this_store if is_left else other_store,
                other_store=other_store if is_left else this_store,
                outer_store=outer_store,
                windows_before_ms=windows.before_ms,
                windows_after_ms=windows.after_ms,
                grace_ms=windows.grace_ms,
                joiner=joiner,
                outer=left_outer if is_left else right_outer,
                trackers=trackers,
                windowed_nodes=(this_windowed, other_windowed),
            )

        internal.add_processor(this_join, side(True), this_windowed)
        internal.add_processor(other_join, side(False), other_windowed)
        internal.add_processor(merge, PassThrough, this_join, other_join)

        def window_store(store: str, values: Serde[Any] | None) -> StoreDef:
            return StoreDef(
                store,
                keys,
                values,
                logged=logging,
                kind="window",
                retention_ms=windows.retention_ms(),
                window_size_ms=windows.size_ms,
                retain_duplicates=True,
            )

        internal.add_store(window_store(this_store, this_values), this_windowed, other_join)
        internal.add_store(window_store(other_store, other_values), other_windowed, this_join)
        if outer_store is not None:
            internal.add_store(
                StoreDef(
                    outer_store,
                    sj.JoinSideKeySerde(keys),
                    sj.LeftOrRightListSerde(this_values, other_values),
                    logged=logging,
                ),
                this_join,
                other_join,
            )
        internal.co_partition(this_join)
        return KStream(builder, merge, keys, None)

    def _repartition_for_join(
        self,
        prefix: str,
        parent: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        keep_null_keys: bool,
    ) -> str:
        """``<prefix>-repartition`` for one side of a join; a stream joined
        again reuses its repartition topic (Kafka still spends the names).
        With ``keep_null_keys`` its filter lets null keys through, as Kafka
        does upstream of left/outer joins."""
        builder = self._builder
        source = f"{prefix}-repartition-source"
        if source in builder.internal.nodes:
            for _ in range(3):
                builder.new_name("")
        else:
            source = builder.repartition(prefix, parent, key_serde, value_serde)
        null_key_filter = builder.internal.nodes[f"{prefix}-repartition-filter"]
        if keep_null_keys and isinstance(null_key_filter, ProcessorDef):
            null_key_filter.supplier = PassThrough
        return source

    def _join(
        self,
        other: KTable | GlobalKTable,
        first: Callable[[Any, Any], Any],
        second: Callable[[Any, Any], Any] | None,
        *,
        left: bool,
        name: str | None,
    ) -> KStream:
        if isinstance(other, GlobalKTable):
            if second is None:
                raise TopologyError(
                    "a join with a GlobalKTable takes (table, key_selector, joiner)"
                )
            node_name = name or self._builder.new_name(
                "KSTREAM-LEFTJOIN-" if left else "KSTREAM-JOIN-"
            )
            store = other.queryable_store_name
            self._builder.internal.add_processor(
                node_name,
                lambda: tp.KStreamGlobalKTableJoin(store, first, second, left),
                self._node,
            )
            return KStream(
                self._builder, node_name, self._key_serde, None, self._repartition_required
            )
        if second is not None:
            raise TopologyError("a join with a KTable takes (table, joiner)")
        return self._table_join(other, first, left=left, name=name)

    def _table_join(
        self, table: KTable, joiner: Callable[[Any, Any], Any], *, left: bool, name: str | None
    ) -> KStream:
        if not isinstance(table, KTable):
            raise TopologyError(f"a KStream joins a KTable here, not {type(table).__name__}")
        if table._getter is None:
            raise TopologyError("the table to join must be materialized (it has no store)")
        builder = self._builder
        node_name = name or builder.new_name("KSTREAM-LEFTJOIN-" if left else "KSTREAM-JOIN-")
        parent = self._node
        if self._repartition_required:
            parent = builder.repartition(node_name, parent, self._key_serde, self._value_serde)
        store, getter = table._getter
        builder.internal.add_processor(
            node_name, lambda: tp.KStreamKTableJoin(getter, joiner, left), parent
        )
        builder.internal.connect_processor_and_stores([node_name], [store])
        builder.internal.co_partition(node_name)
        return KStream(builder, node_name, self._key_serde, None)

    # --- grouping -------------------------------------------------------------
    def group_by(
        self,
        key_selector: Callable[[Any, Any], Any],
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> KGroupedStream:
        """Groups by ``key_selector(key, value)``; aggregating then goes through
        a repartition topic, as in Kafka Streams."""
        selected = self.select_key(key_selector)
        return KGroupedStream(
            self._builder,
            selected._node,
            key_serde,
            value_serde or self._value_serde,
            repartition_required=True,
        )

    def group_by_key(
        self, *, key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None
    ) -> KGroupedStream:
        """Groups by the current key (repartitioning only if a key-changing
        operation came before)."""
        return KGroupedStream(
            self._builder,
            self._node,
            key_serde or self._key_serde,
            value_serde or self._value_serde,
            self._repartition_required,
        )


class BranchedKStream:
    """The branches of ``KStream.split()``, keyed as Kafka keys them: the
    split's name followed by the branch name (or its 1-based index; the
    default branch's index is 0)."""

    def __init__(self, stream: KStream, name: str) -> None:
        self._stream = stream
        self._name = name
        self._predicates: list[Callable[[Any, Any], bool]] = []
        self._branches: dict[str, KStream] = {}
        self._done = False
        builder = stream._builder
        builder.internal.add_processor(
            name, lambda: p.KStreamBranch(self._predicates), stream._node
        )

    def _add(self, name: str | None, index: int) -> KStream:
        if self._done:
            raise TopologyError(
                f"split {self._name!r} is closed; it already has its default branch"
            )
        child = self._name + (name if name is not None else str(index))
        builder = self._stream._builder
        builder.new_name("")  # Kafka spends an index per branch
        builder.internal.add_processor(child, PassThrough, self._name)
        stream = self._stream
        branch = KStream(
            builder, child, stream._key_serde, stream._value_serde, stream._repartition_required
        )
        self._branches[child] = branch
        return branch

    def branch(
        self, predicate: Callable[[Any, Any], bool], name: str | None = None
    ) -> BranchedKStream:
        """Records for which ``predicate(key, value)`` holds (and no earlier one did)."""
        self._predicates.append(predicate)
        self._add(name, len(self._predicates))
        return self

    def default_branch(self, name: str | None = None) -> dict[str, KStream]:
        """The records no predicate matched, and the finished branches."""
        self._add(name, 0)
        self._done = True
        return dict(self._branches)

    def no_default_branch(self) -> dict[str, KStream]:
        """Finishes the split; records no predicate matched are dropped."""
        self._done = True
        return dict(self._branches)


def _aggregation(
    builder: StreamsBuilder,
    parent: str,
    *,
    name_prefix: str,
    materialized: Materialized | str | None,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
    result_serde: Serde[Any] | None,
    repartition_serde: Serde[Any] | None,
    repartition: bool,
    node: Callable[[str], Node],
    windows: AnyWindows | None = None,
    emit: EmitStrategy | None = None,
    windowed_node: Callable[[str, int], Node] | None = None,
    store_value_serde: Serde[Any] | None = None,
) -> KTable:
    """The shape every DSL aggregation shares: name the processor and its
    store (Kafka's ``<PREFIX>-STATE-STORE-…`` unless materialized with a
    name), repartition through ``<store>-repartition`` when the key changed,
    add the store, and return the result table."""
    mat = Materialized.of(materialized)
    agg_name = builder.new_name(name_prefix)
    store_name = mat.store_name or builder.new_name(f"{name_prefix}STATE-STORE-")
    key_serde = mat.key_serde or key_serde
    value_serde = mat.value_serde or result_serde
    if repartition:
        parent = builder.repartition(store_name, parent, key_serde, repartition_serde)
    store = mat.store_def(store_name, key_serde, store_value_serde or value_serde)
    table_key_serde = key_serde
    grace_ms = None
    retention = 0
    if windows is not None:
        spec = _window_store(windows)
        grace_ms = spec.grace_ms
        # Kept for the default retention unless Materialized asks for longer.
        retention = spec.retention_ms
        if mat.retention is not None:
            asked = to_millis(mat.retention, "retention")
            if asked < retention:
                raise TopologyError(
                    f"store {store_name!r}: the retention ({asked} ms) must be at least "
                    f"{spec.minimum} ({retention} ms)"
                )
            retention = asked
        store.kind, store.window_size_ms = spec.kind, spec.window_size_ms
        store.retention_ms = retention
        if emit is not None and emit.final_only:
            # Final results are forwarded from the store, never from a cache.
            store.caching = False
            # Final results come from Kafka's time-ordered stores, which keep
            # a little longer: one more window start, or whole time segments
            # of sessions; the processors hide the rest from lookups.
            store.retention_ms += wa.segment_interval(retention) if spec.kind == "session" else 1
        store.timestamped = spec.kind == "window"
        if key_serde is not None:
            table_key_serde = spec.key_serde(key_serde)
    if windowed_node is not None:
        make_node = windowed_node
        builder.internal.add_processor(agg_name, lambda: make_node(store_name, retention), parent)
    else:
        builder.internal.add_processor(agg_name, lambda: node(store_name), parent)
    builder.internal.add_store(store, agg_name)
    getter = None
    if windows is not None:
        # Joins read a windowed table by window, not by key.
        read = wa.session_getter if isinstance(windows, SessionWindows) else wa.window_getter
        getter = (store_name, read(store_name))
    return KTable(
        builder,
        agg_name,
        table_key_serde,
        value_serde,
        store_name,
        getter=getter,
        window_grace_ms=grace_ms,
    )


AnyWindows = TimeWindows | SlidingWindows | SessionWindows


@dataclass(frozen=True)
class _WindowStore:
    """The store behind a windowed aggregation, and what its table needs."""

    kind: str
    retention_ms: int
    window_size_ms: int | None
    # How long after a window's end suppress(until_window_closes) waits.
    grace_ms: int
    minimum: str
    key_serde: Callable[[Serde[Any]], Serde[Any]]


def _window_store(windows: AnyWindows) -> _WindowStore:
    if isinstance(windows, TimeWindows):
        size = windows.size_ms
        return _WindowStore(
            "window",
            windows.retention_ms(),
            size,
            windows.grace_ms,
            "the window size plus the grace period",
            lambda inner: TimeWindowed(inner, size),
        )
    if isinstance(windows, SlidingWindows):
        difference = windows.time_difference_ms
        return _WindowStore(
            "window",
            windows.retention_ms(),
            difference,
            windows.grace_ms,
            "twice the time difference plus the grace period",
            lambda inner: TimeWindowed(inner, difference),
        )
    # Kafka's suppression waits for the gap too: a session can grow until then.
    return _WindowStore(
        "session",
        windows.retention_ms(),
        None,
        windows.inactivity_gap_ms + windows.grace_ms,
        "the inactivity gap plus the grace period",
        SessionWindowed,
    )


class KGroupedStream:
    """A stream grouped by key, ready to aggregate (Kafka's ``KGroupedStream``)."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        repartition_required: bool,
    ) -> None:
        self._builder = builder
        self._node = node
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._repartition_required = repartition_required

    def _aggregate(
        self,
        prefix: str,
        materialized: Materialized | str | None,
        result_serde: Serde[Any] | None,
        node: Callable[[str], Node],
    ) -> KTable:
        return _aggregation(
            self._builder,
            self._node,
            name_prefix=prefix,
            materialized=materialized,
            key_serde=self._key_serde,
            value_serde=self._value_serde,
            result_serde=result_serde,
            repartition_serde=self._value_serde,
            repartition=self._repartition_required,
            node=node,
        )

    def count(self, materialized: Materialized | str | None = None) -> KTable:
        """Counts records per key (null keys and values are skipped) into a
        KTable of ``int``."""
        return self._aggregate("KSTREAM-AGGREGATE-", materialized, Long(), p.KStreamCount)

    @overload
    def windowed_by(self, windows: TimeWindows) -> TimeWindowedKStream: ...
    @overload
    def windowed_by(self, windows: SlidingWindows) -> SlidingWindowedKStream: ...
    @overload
    def windowed_by(self, windows: SessionWindows) -> SessionWindowedKStream: ...
    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | SessionWindows
    ) -> TimeWindowedKStream | SlidingWindowedKStream | SessionWindowedKStream:
        """Aggregates per key and window (time, sliding or session windows);
        results are keyed by ``Windowed``."""
        if isinstance(windows, TimeWindows):
            return TimeWindowedKStream(self, windows)
        if isinstance(windows, SlidingWindows):
            return SlidingWindowedKStream(self, windows)
        if isinstance(windows, SessionWindows):
            return SessionWindowedKStream(self, windows)
        raise TopologyError(
            "windowed_by takes TimeWindows, SlidingWindows or SessionWindows, "
            f"not {type(windows).__name__}"
        )

    def reduce(
        self, reducer: Callable[[Any, Any], Any], materialized: Materialized | str | None = None
    ) -> KTable:
        """Combines each key's values: ``reducer(aggregate, value)``; the first
        value is the first aggregate. Null keys and values are skipped."""
        return self._aggregate(
            "KSTREAM-REDUCE-",
            materialized,
            self._value_serde,
            lambda store: tp.KStreamAggregate(store, None, lambda _k, v, agg: reducer(agg, v)),
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        materialized: Materialized | str | None = None,
    ) -> KTable:
        """``aggregator(key, value, aggregate)`` from ``initializer()`` per key.
        The result serde comes from ``materialized`` (or default.value.serde)."""
        return self._aggregate(
            "KSTREAM-AGGREGATE-",
            materialized,
            None,
            lambda store: tp.KStreamAggregate(store, initializer, aggregator),
        )


class TimeWindowedKStream:
    """A grouped stream cut into time windows (Kafka's ``TimeWindowedKStream``)."""

    def __init__(self, grouped: KGroupedStream, windows: TimeWindows) -> None:
        self._grouped = grouped
        self._windows = windows
        self._emit = EmitStrategy.on_window_update()

    def emit_strategy(self, emit_strategy: EmitStrategy) -> TimeWindowedKStream:
        """Every update (the default) or only final results, once per window."""
        self._emit = _check_emit(emit_strategy)
        return self

    def _aggregate(
        self,
        prefix: str,
        materialized: Materialized | str | None,
        result_serde: Serde[Any] | None,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
    ) -> KTable:
        grouped, windows = self._grouped, self._windows
        final_only = self._emit.final_only
        return _aggregation(
            grouped._builder,
            grouped._node,
            name_prefix=prefix,
            materialized=materialized,
            key_serde=grouped._key_serde,
            value_serde=grouped._value_serde,
            result_serde=result_serde,
            repartition_serde=grouped._value_serde,
            repartition=grouped._repartition_required,
            node=lambda store: wa.KStreamWindowAggregate(
                store, windows, initializer, aggregator, final_only
            ),
            windows=windows,
            emit=self._emit,
        )

    def count(self, materialized: Materialized | str | None = None) -> KTable:
        """Records per key and window (null keys and values are skipped), on
        the native kernel (``strom.agg.count()``) unless ``materialized``
        asks for a value serde other than ``Long``."""
        value_serde = Materialized.of(materialized).value_serde
        if value_serde is None or isinstance(value_serde, Long):
            return self._native(strom_agg.count(), materialized)
        return self._aggregate(
            "KSTREAM-AGGREGATE-", materialized, Long(), lambda: 0, lambda _k, _v, agg: agg + 1
        )

    def _native(self, aggregation: strom_agg.Aggregation, materialized: Any) -> KTable:
        """A built-in aggregation on the native kernel (see strom.agg)."""
        return _native_windowed(
            self._grouped,
            self._windows,
            self._emit,
            aggregation,
            materialized,
            NativeTimeWindowAggregate,
        )

    def reduce(
        self, reducer: Callable[[Any, Any], Any], materialized: Materialized | str | None = None
    ) -> KTable:
        """``reducer(aggregate, value)`` per key and window."""
        return self._aggregate(
            "KSTREAM-REDUCE-",
            materialized,
            self._grouped._value_serde,
            None,
            lambda _k, v, agg: reducer(agg, v),
        )

    @overload
    def aggregate(
        self,
        initializer: strom_agg.Aggregation,
        aggregator: Materialized | str | None = None,
        materialized: Materialized | str | None = None,
    ) -> KTable: ...
    @overload
    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        materialized: Materialized | str | None = None,
    ) -> KTable: ...
    def aggregate(
        self,
        initializer: Callable[[], Any] | strom_agg.Aggregation,
        aggregator: Callable[[Any, Any, Any], Any] | Materialized | str | None = None,
        materialized: Materialized | str | None = None,
    ) -> KTable:
        """``aggregator(key, value, aggregate)`` from ``initializer()`` per key
        and window; or a built-in ``strom.agg`` aggregation, which runs on the
        native kernel: ``aggregate(strom.agg.sum("amount"), materialized)``."""
        if isinstance(initializer, strom_agg.Aggregation):
            if aggregator is not None and not isinstance(aggregator, Materialized | str):
                raise TopologyError("aggregate(strom.agg...) takes no aggregator")
            return self._native(initializer, materialized or aggregator)
        if not callable(aggregator):
            raise TopologyError("aggregate takes an initializer and an aggregator")
        return self._aggregate("KSTREAM-AGGREGATE-", materialized, None, initializer, aggregator)


def _check_emit(emit_strategy: EmitStrategy) -> EmitStrategy:
    if not isinstance(emit_strategy, EmitStrategy):
        raise TopologyError(
            "emit_strategy takes EmitStrategy.on_window_update() or "
            f"EmitStrategy.on_window_close(), not {emit_strategy!r}"
        )
    return emit_strategy


def _reduce_initializer() -> Any:
    return None


def _for_reducer(reducer: Callable[[Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
    """Kafka's aggregatorForReducer: the first value is the aggregate."""

    def aggregate(_key: Any, value: Any, agg: Any) -> Any:
        return value if agg is None else reducer(agg, value)

    return aggregate


def _count(_key: Any, _value: Any, agg: Any) -> Any:
    return agg + 1


def _native_windowed(
    grouped: KGroupedStream,
    windows: AnyWindows,
    emit: EmitStrategy,
    aggregation: strom_agg.Aggregation,
    materialized: Any,
    node_type: type[NativeTimeWindowAggregate]
    | type[NativeSlidingWindowAggregate]
    | type[NativeSessionWindowAggregate],
) -> KTable:
    """A built-in aggregation (see strom.agg) of any windows on the native
    kernel: its results are Longs or Doubles, a mean's store holds sum and
    count."""
    value_type = aggregation.value_type(grouped._value_serde)
    result_serde: Serde[Any] = (
        Double() if aggregation.result_type(grouped._value_serde) == "float" else Long()
    )
    asked = Materialized.of(materialized).value_serde
    if asked is not None and type(asked) is not type(result_serde):
        raise TopologyError(
            f"strom.agg.{aggregation.kind} results are {type(result_serde).__name__}s: "
            f"Materialized cannot give them the value serde {type(asked).__name__}"
        )
    return _aggregation(
        grouped._builder,
        grouped._node,
        name_prefix="KSTREAM-AGGREGATE-",
        materialized=materialized,
        key_serde=grouped._key_serde,
        value_serde=grouped._value_serde,
        result_serde=result_serde,
        repartition_serde=grouped._value_serde,
        repartition=grouped._repartition_required,
        node=lambda _store: PassThrough(),
        windows=windows,
        emit=emit,
        windowed_node=lambda store, retention: node_type(
            store,
            windows,  # type: ignore[arg-type]  # each node type takes its own windows
            aggregation,
            value_type,
            retention,
            emit_final=emit.final_only,
        ),
        store_value_serde=MeanState() if aggregation.kind == "mean" else None,
    )


def _agg_materialized(*rest: Any) -> Materialized | str | None:
    """The Materialized of ``aggregate(strom.agg..., [materialized])``."""
    given = [r for r in rest if r is not None]
    if len(given) > 1 or not all(isinstance(r, Materialized | str) for r in given):
        raise TopologyError("aggregate(strom.agg...) takes no aggregator or merger")
    return given[0] if given else None


def _native(materialized: Materialized | str | None) -> bool:
    """Whether a count can run on the native kernel: its store holds Longs."""
    value_serde = Materialized.of(materialized).value_serde
    return value_serde is None or isinstance(value_serde, Long)


class SlidingWindowedKStream:
    """A grouped stream in sliding windows (Kafka's ``TimeWindowedKStream``
    over ``SlidingWindows``): windows ``[start, start + d]``, both bounds
    inclusive, made as records enter and leave them."""

    def __init__(self, grouped: KGroupedStream, windows: SlidingWindows) -> None:
        self._grouped = grouped
        self._windows = windows
        self._emit = EmitStrategy.on_window_update()

    def emit_strategy(self, emit_strategy: EmitStrategy) -> SlidingWindowedKStream:
        """Every update (the default) or only final results, once per window."""
        self._emit = _check_emit(emit_strategy)
        return self

    def _aggregate(
        self,
        prefix: str,
        materialized: Materialized | str | None,
        result_serde: Serde[Any] | None,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
    ) -> KTable:
        grouped, windows, final_only = self._grouped, self._windows, self._emit.final_only
        return _aggregation(
            grouped._builder,
            grouped._node,
            name_prefix=prefix,
            materialized=materialized,
            key_serde=grouped._key_serde,
            value_serde=grouped._value_serde,
            result_serde=result_serde,
            repartition_serde=grouped._value_serde,
            repartition=grouped._repartition_required,
            node=lambda store: wa.KStreamSlidingWindowAggregate(
                store, windows, initializer, aggregator, final_only
            ),
            windows=windows,
            emit=self._emit,
        )

    def _native(self, aggregation: strom_agg.Aggregation, materialized: Any) -> KTable:
        return _native_windowed(
            self._grouped,
            self._windows,
            self._emit,
            aggregation,
            materialized,
            NativeSlidingWindowAggregate,
        )

    def count(self, materialized: Materialized | str | None = None) -> KTable:
        """Records per key and window (null keys and values are skipped), on
        the native kernel (``strom.agg.count()``) unless ``materialized``
        asks for a value serde other than ``Long``."""
        if _native(materialized):
            return self._native(strom_agg.count(), materialized)
        return self._aggregate("KSTREAM-AGGREGATE-", materialized, Long(), lambda: 0, _count)

    def reduce(
        self, reducer: Callable[[Any, Any], Any], materialized: Materialized | str | None = None
    ) -> KTable:
        """``reducer(aggregate, value)`` per key and window."""
        return self._aggregate(
            "KSTREAM-REDUCE-",
            materialized,
            self._grouped._value_serde,
            _reduce_initializer,
            _for_reducer(reducer),
        )

    def aggregate(
        self,
        initializer: Callable[[], Any] | strom_agg.Aggregation,
        aggregator: Callable[[Any, Any, Any], Any] | Materialized | str | None = None,
        materialized: Materialized | str | None = None,
    ) -> KTable:
        """``aggregator(key, value, aggregate)`` from ``initializer()`` per key
        and window; or a built-in ``strom.agg`` aggregation on the native
        kernel (null values are skipped, as sliding windows skip them)."""
        if isinstance(initializer, strom_agg.Aggregation):
            return self._native(initializer, _agg_materialized(aggregator, materialized))
        if not callable(aggregator):
            raise TopologyError("aggregate takes an initializer and an aggregator")
        return self._aggregate("KSTREAM-AGGREGATE-", materialized, None, initializer, aggregator)


class SessionWindowedKStream:
    """A grouped stream in session windows (Kafka's
    ``SessionWindowedKStream``): per key, records less than the inactivity
    gap apart share a session ``[first, last]``; a record bridging two
    sessions merges them."""

    def __init__(self, grouped: KGroupedStream, windows: SessionWindows) -> None:
        self._grouped = grouped
        self._windows = windows
        self._emit = EmitStrategy.on_window_update()

    def emit_strategy(self, emit_strategy: EmitStrategy) -> SessionWindowedKStream:
        """Every update (the default) or only final results, once per session."""
        self._emit = _check_emit(emit_strategy)
        return self

    def _aggregate(
        self,
        prefix: str,
        materialized: Materialized | str | None,
        result_serde: Serde[Any] | None,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
    ) -> KTable:
        grouped, windows, final_only = self._grouped, self._windows, self._emit.final_only

        def node(store: str, retention: int) -> Node:
            return wa.KStreamSessionWindowAggregate(
                store, windows, retention, initializer, aggregator, merger, final_only
            )

        return _aggregation(
            grouped._builder,
            grouped._node,
            name_prefix=prefix,
            materialized=materialized,
            key_serde=grouped._key_serde,
            value_serde=grouped._value_serde,
            result_serde=result_serde,
            repartition_serde=grouped._value_serde,
            repartition=grouped._repartition_required,
            node=lambda store: node(store, windows.retention_ms()),
            windows=windows,
            emit=self._emit,
            windowed_node=node,
        )

    def _native(self, aggregation: strom_agg.Aggregation, materialized: Any) -> KTable:
        return _native_windowed(
            self._grouped,
            self._windows,
            self._emit,
            aggregation,
            materialized,
            NativeSessionWindowAggregate,
        )

    def count(self, materialized: Materialized | str | None = None) -> KTable:
        """Records per key and session (null keys are skipped), on the native
        kernel (``strom.agg.count()``) unless ``materialized`` asks for a
        value serde other than ``Long``."""
        if _native(materialized):
            return self._native(strom_agg.count(), materialized)
        return self._aggregate(
            "KSTREAM-AGGREGATE-",
            materialized,
            Long(),
            lambda: 0,
            _count,
            lambda _k, agg1, agg2: agg1 + agg2,
        )

    def reduce(
        self, reducer: Callable[[Any, Any], Any], materialized: Materialized | str | None = None
    ) -> KTable:
        """``reducer(aggregate, value)`` per key and session; merging two
        sessions reduces their aggregates."""
        aggregator = _for_reducer(reducer)
        return self._aggregate(
            "KSTREAM-REDUCE-",
            materialized,
            self._grouped._value_serde,
            _reduce_initializer,
            aggregator,
            # Kafka's mergerForAggregator: the second aggregate is added to the first.
            lambda key, agg1, agg2: aggregator(key, agg2, agg1),
        )

    def aggregate(
        self,
        initializer: Callable[[], Any] | strom_agg.Aggregation,
        aggregator: Callable[[Any, Any, Any], Any] | Materialized | str | None = None,
        merger: Callable[[Any, Any, Any], Any] | Materialized | str | None = None,
        materialized: Materialized | str | None = None,
    ) -> KTable:
        """``aggregator(key, value, aggregate)`` from ``initializer()`` per key
        and session; ``merger(key, agg1, agg2)`` combines the aggregates of
        sessions a record merges; or a built-in ``strom.agg`` aggregation on
        the native kernel."""
        if isinstance(initializer, strom_agg.Aggregation):
            return self._native(initializer, _agg_materialized(aggregator, merger, materialized))
        if not callable(aggregator) or not callable(merger):
            raise TopologyError("aggregate takes an initializer, an aggregator and a merger")
        return self._aggregate(
            "KSTREAM-AGGREGATE-", materialized, None, initializer, aggregator, merger
        )


class KTable:
    """A changelog stream: the latest value per key (Kafka's ``KTable``)."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        store_name: str | None,
        send_old: tp.SendOldValues | None = None,
        getter: tuple[str, tp.ValueGetterSupplier] | None = None,
        window_grace_ms: int | None = None,
    ) -> None:
        self._builder = builder
        self._node = node
        self._key_serde = key_serde
        self._value_serde = value_serde
        self.queryable_store_name = store_name
        # Aggregations and sources compute old values from their store anyway.
        self._send_old = send_old or tp.SendOldValues()
        # (store the getter reads, getter): how joins read this table.
        if getter is None and store_name is not None:
            getter = (store_name, tp.store_getter(store_name))
        self._getter = getter
        # The grace period of the windows a windowed table comes from.
        self._window_grace_ms = window_grace_ms

    def _then(
        self,
        prefix: str,
        node: Callable[[tp.SendOldValues], Node],
        name: str | None,
        value_serde_kept: bool,
        getter: Callable[[tp.ValueGetterSupplier], tp.ValueGetterSupplier],
    ) -> KTable:
        node_name = name or self._builder.new_name(prefix)
        send_old = tp.SendOldValues(upstream=self._send_old)
        self._builder.internal.add_processor(node_name, lambda: node(send_old), self._node)
        return KTable(
            self._builder,
            node_name,
            self._key_serde,
            self._value_serde if value_serde_kept else None,
            None,
            send_old,
            None if self._getter is None else (self._getter[0], getter(self._getter[1])),
            self._window_grace_ms,
        )

    def filter(self, predicate: Callable[[Any, Any], bool], *, name: str | None = None) -> KTable:
        """Keeps entries for which ``predicate(key, value)`` holds; an update
        that fails it deletes the key downstream (a tombstone)."""
        return self._then(
            "KTABLE-FILTER-",
            lambda so: tp.KTableFilter(predicate, False, so),
            name,
            True,
            lambda parent: tp.filtered_getter(parent, predicate, False),
        )

    def filter_not(
        self, predicate: Callable[[Any, Any], bool], *, name: str | None = None
    ) -> KTable:
        return self._then(
            "KTABLE-FILTER-",
            lambda so: tp.KTableFilter(predicate, True, so),
            name,
            True,
            lambda parent: tp.filtered_getter(parent, predicate, True),
        )

    def map_values(self, mapper: Callable[[Any], Any], *, name: str | None = None) -> KTable:
        """``mapper(value)`` for every entry; deletes stay deletes."""
        return self._then(
            "KTABLE-MAPVALUES-",
            lambda so: tp.KTableMapValues(mapper, so),
            name,
            False,
            lambda parent: tp.mapped_getter(parent, mapper),
        )

    def to_stream(self, *, name: str | None = None) -> KStream:
        """The table's updates as a stream (deletes as None values)."""
        node_name = name or self._builder.new_name("KTABLE-TOSTREAM-")
        self._builder.internal.add_processor(node_name, tp.KTableToStream, self._node)
        return KStream(self._builder, node_name, self._key_serde, self._value_serde)

    def suppress(self, suppressed: Suppressed) -> KTable:
        """Holds updates back: ``Suppressed.until_window_closes(...)`` emits
        only each window's final result; ``Suppressed.until_time_limit(...)``
        the latest update per key once the time limit has passed."""
        builder = self._builder
        by_window_end = suppressed.kind == "window_closes"
        if by_window_end and self._window_grace_ms is None:
            raise TopologyError("until_window_closes needs a windowed table (from windowed_by)")
        duration = self._window_grace_ms if by_window_end else suppressed.time_limit_ms
        name = suppressed.name or builder.new_name("KTABLE-SUPPRESS-")
        store_name = (
            f"{suppressed.name}-store"
            if suppressed.name
            else builder.new_name("KTABLE-SUPPRESS-STATE-STORE-")
        )
        self._send_old.enable()
        buffer = suppressed.buffer
        builder.internal.add_processor(
            name,
            lambda: tp.KTableSuppress(
                store_name,
                duration or 0,
                by_window_end,
                buffer.record_limit,
                buffer.byte_limit,
                buffer.when_full == "emit_early",
            ),
            self._node,
        )
        value_serde = None if self._value_serde is None else tp.BufferedSerde(self._value_serde)
        builder.internal.add_store(
            StoreDef(store_name, self._key_serde, value_serde, persistent=True), name
        )
        return KTable(
            builder,
            name,
            self._key_serde,
            self._value_serde,
            None,
            tp.SendOldValues(upstream=self._send_old),
            None,
            self._window_grace_ms,
        )

    def group_by(
        self,
        selector: Callable[[Any, Any], tuple[Any, Any]],
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> KGroupedTable:
        """Re-keys the table with ``selector(key, value) -> (new_key, new_value)``
        for an aggregation that retracts old values and adds new ones."""
        self._send_old.enable()
        node_name = self._builder.new_name("KTABLE-SELECT-")
        self._builder.internal.add_processor(
            node_name, lambda: tp.KTableRepartitionMap(selector), self._node
        )
        return KGroupedTable(self._builder, node_name, key_serde, value_serde)

    # --- joins ----------------------------------------------------------------
    def join(
        self,
        other: KTable,
        joiner: Callable[[Any, Any], Any],
        *,
        foreign_key: Callable[[Any], Any] | None = None,
        materialized: Materialized | str | None = None,
        name: str | None = None,
    ) -> KTable:
        """Inner join with another table: ``joiner(value, other_value)`` for
        every key in both, updated when either side changes, deleted when
        either side is. With ``foreign_key=fn(value)`` each entry joins the
        ``other`` entry whose key is ``fn(value)`` (no co-partitioning needed).
        ``materialized`` keeps the result in a queryable store."""
        return self._table_join(other, joiner, "inner", foreign_key, materialized, name)

    def left_join(
        self,
        other: KTable,
        joiner: Callable[[Any, Any], Any],
        *,
        foreign_key: Callable[[Any], Any] | None = None,
        materialized: Materialized | str | None = None,
        name: str | None = None,
    ) -> KTable:
        """Left join: like ``join``, but every entry of this table is in the
        result, joined with None while ``other`` has no match."""
        return self._table_join(other, joiner, "left", foreign_key, materialized, name)

    def outer_join(
        self,
        other: KTable,
        joiner: Callable[[Any, Any], Any],
        *,
        materialized: Materialized | str | None = None,
        name: str | None = None,
    ) -> KTable:
        """Outer join: every key of either table, with None for a missing side."""
        return self._table_join(other, joiner, "outer", None, materialized, name)

    def _table_join(
        self,
        other: KTable,
        joiner: Callable[[Any, Any], Any],
        kind: str,
        foreign_key: Callable[[Any], Any] | None,
        materialized: Materialized | str | None,
        name: str | None,
    ) -> KTable:
        if not isinstance(other, KTable):
            raise TopologyError(f"a KTable joins a KTable here, not {type(other).__name__}")
        for table in (self, other):
            if table._getter is None:
                raise TopologyError(
                    f"table {table._node!r} cannot be joined: it has no value getter "
                    "(join before suppressing; give a foreign-key join materialized=)"
                )
        from strom.kstream.internals import table_joins as tj  # noqa: PLC0415 - a cycle

        if foreign_key is not None:
            return tj.foreign_key_join(self, other, joiner, kind, foreign_key, materialized, name)
        return tj.primary_key_join(self, other, joiner, kind, materialized, name)


class GlobalKTable:
    """A table replicated in full to every instance (Kafka's ``GlobalKTable``):
    bootstrapped from all partitions of its topic before processing starts,
    readable by every task, joined with ``KStream.join(table, key_selector, joiner)``."""

    def __init__(
        self, store_name: str, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
    ) -> None:
        self.queryable_store_name = store_name
        self._key_serde = key_serde
        self._value_serde = value_serde


class KGroupedTable:
    """A re-keyed table, ready to aggregate (Kafka's ``KGroupedTable``)."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
    ) -> None:
        self._builder = builder
        self._node = node
        self._key_serde = key_serde
        self._value_serde = value_serde

    def _aggregate(
        self,
        prefix: str,
        materialized: Materialized | str | None,
        result_serde: Serde[Any] | None,
        initializer: Callable[[], Any] | None,
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
    ) -> KTable:
        inner = self._value_serde
        return _aggregation(
            self._builder,
            self._node,
            name_prefix=prefix,
            materialized=materialized,
            key_serde=self._key_serde,
            value_serde=inner,
            result_serde=result_serde,
            repartition_serde=None if inner is None else tp.ChangeSerde(inner),
            repartition=True,
            node=lambda store: tp.KTableAggregate(store, initializer, adder, subtractor),
        )

    def count(self, materialized: Materialized | str | None = None) -> KTable:
        """The number of entries per new key."""
        return self._aggregate(
            "KTABLE-AGGREGATE-",
            materialized,
            Long(),
            tp.count_initializer,
            tp.count_adder,
            tp.count_subtractor,
        )

    def reduce(
        self,
        adder: Callable[[Any, Any], Any],
        subtractor: Callable[[Any, Any], Any],
        materialized: Materialized | str | None = None,
    ) -> KTable:
        """``adder(aggregate, new_value)`` and ``subtractor(aggregate, old_value)``."""
        return self._aggregate(
            "KTABLE-REDUCE-",
            materialized,
            self._value_serde,
            None,
            lambda _k, v, agg: adder(agg, v),
            lambda _k, v, agg: subtractor(agg, v),
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
        materialized: Materialized | str | None = None,
    ) -> KTable:
        """``adder(key, new_value, aggregate)`` / ``subtractor(key, old_value,
        aggregate)`` from ``initializer()`` per new key."""
        return self._aggregate(
            "KTABLE-AGGREGATE-", materialized, None, initializer, adder, subtractor
        )
