"""A task's local state: opening its stores under
``state.dir/<application.id>/<task_id>/<store>``, restoring them from their
changelogs, and committing them with the changelog offsets they reflect.

Each persistent store records its changelog offset and the task's stream time
in the same atomic commit as its data (as Kafka 4.3's KIP-1035 does), so a
store reopens exactly as of its last commit and only the changelog's tail after
that offset is replayed. With no usable local state (none, a store without a
commit, an offset the changelog cannot have, corruption) the store is wiped and
restored from the whole changelog.

A read-only store's changelog is its source topic (Kafka's source-changelog
stores, ``Topology.add_read_only_state_store``): nothing is written to it, the
store commits the source offset its task processed up to, and is restored
from the topic only up to the offset the task committed (records after it are
processed again), skipping records without a key and stamping a timestamped
store's values with their records' timestamps, as Kafka's restore does.
"""

from __future__ import annotations

import bisect
import functools
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom import _core
from strom.errors import CorruptLogError, StoreError
from strom.state.internals.lru import LruBytesStore
from strom.state.internals.registry import RESTORE_BATCH, NativeStore, StoreKind, store_kind

if TYPE_CHECKING:
    from collections.abc import Mapping

    from strom.embedded import EmbeddedLog
    from strom.processor.api import StateRestoreListener
    from strom.processor.internals.topology_builder import StoreDef

log = logging.getLogger("strom.state")

# (topic, partition) -> (log start offset, end offset) of a changelog
ChangelogRange = Callable[[str, int], tuple[int, int]]


@dataclass
class _OpenStore:
    kind: StoreKind
    native: NativeStore
    persistent: bool
    changelog: str | None
    restore_from: int | None  # None: from the changelog's start
    # A source topic read as the changelog (a read-only store).
    from_source: bool = False
    # A source changelog's restore stops before this offset: the task's
    # committed offset on it (0 until told, as Kafka's default).
    restore_to: int = 0
    # The source offset the store reflects, when known (what it commits).
    position: int | None = None
    timestamped: bool = False


class StateManager:
    def __init__(
        self,
        task_id: str,
        task_dir: Path,
        partition: int,
        changelog_range: ChangelogRange | None = None,
    ) -> None:
        self.task_id = task_id
        self.task_dir = task_dir
        self.partition = partition
        self._changelog_range = changelog_range
        self.stores: dict[str, _OpenStore] = {}
        self.stream_time = -1
        # Processors' own observed stream time (windowed aggregations), kept
        # with the stores' commits so a restart drops exactly what an
        # uninterrupted run would.
        self.node_times: dict[str, int] = {}
        self.restored_records = 0
        # Changelog records known to be left to restore (Kafka's
        # restore-remaining-records-total).
        self.restore_remaining = 0

    def open(
        self, store: StoreDef, changelog: str | None, from_source: bool = False
    ) -> NativeStore:
        """Opens a store as of its last commit, or wipes it when that commit
        cannot be trusted; ``restore`` then replays the changelog's tail.
        ``from_source``: ``changelog`` is the source topic of a read-only
        store (see the module's doc)."""
        check_store_name(store.name)
        kind = store_kind(store)
        opener = functools.partial(kind.open_native, store)
        if not store.persistent:
            native, _ = opener(None)
            self.stores[store.name] = _OpenStore(
                kind, native, False, changelog, None, from_source, timestamped=store.timestamped
            )
            return native
        path = self.task_dir / store.name
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            native, raw = opener(path)
        except CorruptLogError as exc:
            log.warning(
                "task %s: store %s is corrupt (%s); wiping it", self.task_id, store.name, exc
            )
            native, raw = self._wipe(opener, path, None)
        committed = self._parse(store.name, raw)
        restore_from = None
        if changelog is not None:
            restore_from = self._usable_offset(store.name, committed, changelog)
            if restore_from is None and raw is not None:
                # Local state we cannot line up with the changelog: rebuild it.
                native, raw = self._wipe(opener, path, native)
                committed = None
        if committed is not None:
            self.stream_time = max(self.stream_time, int(committed.get("stream_time", -1)))
            for node, time in dict(committed.get("node_times") or {}).items():
                self.node_times[node] = max(self.node_times.get(node, -1), int(time))
        self.stores[store.name] = _OpenStore(
            kind,
            native,
            True,
            changelog,
            restore_from,
            from_source,
            position=restore_from if from_source else None,
            timestamped=store.timestamped,
        )
        return native

    def _usable_offset(
        self, name: str, committed: dict[str, Any] | None, changelog: str
    ) -> int | None:
        """The changelog offset a committed store can resume from, if any."""
        if committed is None or self._changelog_range is None:
            return None
        if committed.get("changelog") != changelog:
            return None
        start, end = self._changelog_range(changelog, self.partition)
        offset = int(committed["offset"])
        if start <= offset <= end:
            return offset
        log.warning(
            "task %s: store %s committed changelog offset %d outside [%d, %d]; restoring it "
            "from scratch",
            self.task_id,
            name,
            offset,
            start,
            end,
        )
        return None

    def _wipe(
        self,
        opener: Callable[[Path | None], tuple[NativeStore, bytes | None]],
        path: Path,
        native: NativeStore | None,
    ) -> tuple[NativeStore, bytes | None]:
        if native is not None:
            native.close()
        shutil.rmtree(path, ignore_errors=True)
        return opener(path)

    def _parse(self, name: str, raw: bytes | None) -> dict[str, Any] | None:
        if raw is None:
            return None
        try:
            meta = json.loads(raw)
            if not isinstance(meta, dict) or not isinstance(meta.get("offset"), int):
                raise ValueError("no offset")
        except ValueError as exc:
            log.warning("task %s: unreadable commit metadata of %s (%s)", self.task_id, name, exc)
            return None
        return meta

    def node_stream_time(self, node: str) -> int:
        return self.node_times.get(node, -1)

    def set_node_stream_time(self, node: str, time: int) -> None:
        self.node_times[node] = time

    def limit_source_restores(self, committed: Mapping[tuple[str, int], int]) -> None:
        """Where the restores of stores read from a source topic stop: the
        task's committed offset on that topic (``committed`` by topic and
        partition; none committed: nothing to restore, as in Kafka)."""
        for store in self.stores.values():
            if store.from_source and store.changelog is not None:
                store.restore_to = committed.get((store.changelog, self.partition), 0)

    def restore_end(self, name: str, end: int) -> int:
        """Where store ``name``'s restore stops, given its changelog's end
        offset: that, or its source's committed offset if lower."""
        store = self.stores[name]
        return min(end, store.restore_to) if store.from_source else end

    def restores_from_source(self, name: str) -> bool:
        """Whether store ``name``'s changelog is a source topic it does not write."""
        return self.stores[name].from_source

    def restore(self, log_: EmbeddedLog, listener: StateRestoreListener | None = None) -> None:
        """Replays each logged store's changelog from the offset it committed
        (or from the start) to the end (a source changelog: to the committed
        offset), without logging it again; tells ``listener`` about each
        store that has records to replay."""
        for name, store in self.stores.items():
            if store.changelog is None:
                continue
            topic, partition = store.changelog, self.partition
            end = self.restore_end(name, log_.end_offsets(topic)[partition])
            offset = store.restore_from
            if offset is None:
                offset = log_.log_start_offsets(topic)[partition]
            if listener is not None and offset < end:
                listener.on_restore_start((topic, partition), name, offset, end)
            self.restore_remaining += max(0, end - offset)
            if store.from_source:
                restored = self._restore_source(store, log_, topic, offset, end)
            else:
                restored = store.kind.restore_from_log(
                    store.native, log_, topic, partition, offset, end
                )
            self.restore_remaining -= max(0, end - offset)
            self.restored_records += restored
            if listener is not None and offset < end:
                listener.on_batch_restored((topic, partition), name, end - 1, restored)
                listener.on_restore_end((topic, partition), name, restored)
            if restored:
                log.info(
                    "task %s restored %d record(s) of %s from %s",
                    self.task_id,
                    restored,
                    name,
                    topic,
                )

    def _restore_source(
        self, store: _OpenStore, log_: EmbeddedLog, topic: str, offset: int, end: int
    ) -> int:
        """Replays ``[offset, end)`` of a source changelog partition; the
        store then reflects the topic up to ``end`` (or to where it was)."""
        store.position = max(offset, end)
        restored = 0
        while offset < end:
            records = log_.read_batch(topic, self.partition, offset, RESTORE_BATCH)
            if not len(records):
                break
            restored += _apply_source_records(store, records, end)
            offset = records.next_offset
        return restored

    def restore_positions(self) -> dict[str, tuple[str, int | None]]:
        """Per logged store: its changelog and the offset to replay from
        (None: the changelog's start), for a transport that restores itself."""
        return {
            name: (store.changelog, store.restore_from)
            for name, store in self.stores.items()
            if store.changelog is not None
        }

    def restore_batch(self, name: str, records: _core.RecordBatch, remaining: int = 0) -> None:
        """Applies a batch of store ``name``'s changelog records, as read,
        without logging them again; ``remaining``: the changelog's records
        still to come after these, when known."""
        store = self.stores[name]
        assert store.changelog is not None, f"store {name} has no changelog"
        if store.from_source:
            self.restored_records += _apply_source_records(store, records, store.restore_to)
            self.restore_remaining = max(0, self.restore_remaining - len(records))
            reached = min(records.next_offset, store.restore_to)
            store.position = max(store.position or 0, reached)
            return
        store.kind.restore_records(store.native, records, remaining)
        self.restored_records += len(records)
        self.restore_remaining = max(0, self.restore_remaining - len(records))

    def commit(self, changelog_ends: dict[str, int]) -> None:
        """Commits every persistent store with the changelog end offset its
        data now reflects (a source changelog: the source offset processed
        up to, in ``changelog_ends`` when the task processed any) and the
        task's stream time."""
        for name, store in self.stores.items():
            if store.from_source and name in changelog_ends:
                store.position = changelog_ends[name]
            if not store.persistent:
                continue
            meta: dict[str, Any] = {
                "stream_time": self.stream_time,
                "node_times": self.node_times,
                "offset": 0,
            }
            if store.changelog is not None:
                offset = store.position if store.from_source else changelog_ends[name]
                if offset is not None:  # None: a source not read at all yet
                    meta |= {"changelog": store.changelog, "offset": offset}
            store.native.commit(json.dumps(meta).encode())

    def close(self) -> None:
        for store in self.stores.values():
            store.native.close()

    def __repr__(self) -> str:
        return f"StateManager({self.task_id}, {self.task_dir})"


def _apply_source_records(store: _OpenStore, records: _core.RecordBatch, end: int) -> int:
    """Puts the records of a source changelog batch before offset ``end``
    into the store as they are (a None value deletes), without a record
    that has no key, a timestamped store's values stamped with their
    records' timestamps; returns how many were put."""
    offsets = records.offsets()
    count = bisect.bisect_left(offsets, end)
    keyed = [
        (key, value, stamp)
        for key, value, stamp in zip(
            records.keys()[:count],
            records.values()[:count],
            records.timestamps()[:count],
            strict=True,
        )
        if key is not None
    ]
    if count > len(keyed):
        log.warning(
            "skipped %d record(s) without a key of %s-%d in restoring a store from it",
            count - len(keyed),
            records.topic,
            records.partition,
        )
    if keyed:
        keys = [key for key, _, _ in keyed]
        values: list[bytes | None] = [value for _, value, _ in keyed]
        if store.timestamped:
            values = _core.stamp_values(values, [stamp for _, _, stamp in keyed])
        native = store.native
        assert isinstance(native, _core.NativeKeyValueStore | LruBytesStore), native
        native.restore(keys, values)
    return len(keyed)


def check_store_name(name: str) -> None:
    if "/" in name or name in {"", ".", ".."}:
        raise StoreError(f"store name {name!r} cannot be used as a directory name")
