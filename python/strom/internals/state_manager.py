"""A task's local state: opening its stores under
``state.dir/<application.id>/<task_id>/<store>``, restoring them from their
changelogs, and committing them with the changelog offsets they reflect.

Each persistent store records its changelog offset and the task's stream time
in the same atomic commit as its data (as Kafka 4.3's KIP-1035 does), so a
store reopens exactly as of its last commit and only the changelog's tail after
that offset is replayed. With no usable local state (none, a store without a
commit, an offset the changelog cannot have, corruption) the store is wiped and
restored from the whole changelog.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom import _core
from strom.errors import CorruptLogError, StoreError

if TYPE_CHECKING:
    from strom.embedded import EmbeddedLog

log = logging.getLogger("strom.state")


@dataclass
class _OpenStore:
    native: _core.NativeKeyValueStore
    path: Path | None
    changelog: str | None
    committed: dict[str, Any] | None


class StateManager:
    def __init__(self, task_id: str, task_dir: Path, partition: int) -> None:
        self.task_id = task_id
        self.task_dir = task_dir
        self.partition = partition
        self.stores: dict[str, _OpenStore] = {}
        self.stream_time = -1
        self.restored_records = 0

    def open_key_value(
        self, name: str, persistent: bool, changelog: str | None
    ) -> _core.NativeKeyValueStore:
        if not persistent:
            native = _core.NativeKeyValueStore()
            self.stores[name] = _OpenStore(native, None, changelog, None)
            return native
        path = self.task_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            native, raw = _core.NativeKeyValueStore.open(str(path))
        except CorruptLogError as exc:
            log.warning("task %s: store %s is corrupt (%s); wiping it", self.task_id, name, exc)
            self._wipe(path)
            native, raw = _core.NativeKeyValueStore.open(str(path))
        committed = self._parse(name, raw)
        self.stores[name] = _OpenStore(native, path, changelog, committed)
        if committed is not None:
            self.stream_time = max(self.stream_time, int(committed.get("stream_time", -1)))
        return native

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

    @staticmethod
    def _wipe(path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def restore(self, log_: EmbeddedLog, apply: Any = None) -> None:
        """Replays each logged store's changelog from the offset it committed
        (or from the start) to the end, natively: the records go from the
        log's segments into the store without becoming Python objects, and
        are not logged again. ``apply`` is accepted for older callers and
        not used."""
        del apply
        for name, store in self.stores.items():
            if store.changelog is None:
                continue
            topic, partition = store.changelog, self.partition
            start = log_.log_start_offsets(topic)[partition]
            end = log_.end_offsets(topic)[partition]
            offset = start
            committed = store.committed
            if committed is not None and committed.get("changelog") == topic:
                if start <= committed["offset"] <= end:
                    offset = committed["offset"]
                else:
                    log.warning(
                        "task %s: store %s committed changelog offset %d outside [%d, %d]; "
                        "restoring it from scratch",
                        self.task_id,
                        name,
                        committed["offset"],
                        start,
                        end,
                    )
                    store.native.clear()
            elif len(store.native):
                # Data without a commit we can trust: the changelog is the truth.
                store.native.clear()
            restored, _ = store.native.restore_from_log(log_.native, topic, partition, offset, end)
            self.restored_records += restored
            if restored:
                log.info(
                    "task %s restored %d record(s) of %s from %s",
                    self.task_id,
                    restored,
                    name,
                    topic,
                )

    def commit(self, changelog_ends: dict[str, int]) -> None:
        """Commits every persistent store with the changelog end offset its
        data now reflects and the task's stream time."""
        for name, store in self.stores.items():
            if store.path is None:
                continue
            meta: dict[str, Any] = {"stream_time": self.stream_time}
            if store.changelog is not None:
                meta |= {"changelog": store.changelog, "offset": changelog_ends[name]}
            else:
                meta["offset"] = 0
            store.native.commit(json.dumps(meta).encode())

    def close(self) -> None:
        for store in self.stores.values():
            store.native.close()

    def __repr__(self) -> str:
        return f"StateManager({self.task_id}, {self.task_dir})"


def check_store_name(name: str) -> None:
    if "/" in name or name in {"", ".", ".."}:
        raise StoreError(f"store name {name!r} cannot be used as a directory name")
