"""The native record cache (``_core.NativeThreadCache``, Kafka's ThreadCache
and NamedCache) through its Python API: dirty (last-update) order on flush,
LRU eviction from the named cache put into, flushing a whole named cache when
a dirty entry is evicted, cached deletes, a zero budget, budget sharing
between named caches, ids of closed caches, and a property test against a
model of Kafka's semantics."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom import _core
from strom.errors import StoreError

Cache = _core.NativeThreadCache

# Kafka's LRUNode size on top of the key and value bytes.
OVERHEAD = 45
# One entry with a one-byte key and a one-byte value.
ENTRY = 2 + OVERHEAD


def put_dirty(cache: Cache, cid: int, keys: str, ts: int = 0) -> None:
    for i, k in enumerate(keys):
        assert cache.put(cid, k.encode(), k.encode(), ts + i, True) == []


def test_named_ids_and_misses() -> None:
    cache = Cache(1000)
    a = cache.named("0_0-store")
    b = cache.named("0_1-store")
    assert a != b
    assert cache.named("0_0-store") == a
    assert cache.get(a, b"k") is None
    assert len(cache) == 0
    assert cache.size_bytes() == 0


def test_put_get_and_size() -> None:
    cache = Cache(1000)
    cid = cache.named("s")
    assert cache.put(cid, b"key", b"value", 7, True) == []
    assert cache.get(cid, b"key") == (b"value", 7)
    assert cache.size_bytes() == 3 + 5 + OVERHEAD
    assert cache.put(cid, b"key", b"v", 9, True) == []
    assert cache.get(cid, b"key") == (b"v", 9)
    assert cache.size_bytes() == 3 + 1 + OVERHEAD
    assert len(cache) == 1


def test_flush_is_in_last_update_order_and_marks_clean() -> None:
    cache = Cache(1000)
    cid = cache.named("s")
    put_dirty(cache, cid, "abc")
    assert cache.put(cid, b"a", b"A", 10, True) == []
    assert cache.put(cid, b"d", b"d", 11, False) == []  # clean: not flushed
    assert cache.flush(cid) == [(b"b", b"b", 1), (b"c", b"c", 2), (b"a", b"A", 10)]
    assert cache.flush(cid) == []
    # Flushed entries stay cached, clean: a clean put over them is allowed.
    assert cache.get(cid, b"a") == (b"A", 10)
    assert cache.put(cid, b"a", b"x", 12, False) == []
    assert len(cache) == 4


def test_clean_put_over_dirty_entry_raises() -> None:
    cache = Cache(1000)
    cid = cache.named("s")
    cache.put(cid, b"k", b"v", 0, True)
    with pytest.raises(StoreError):
        cache.put(cid, b"k", b"w", 1, False)
    assert cache.get(cid, b"k") == (b"v", 0)


def test_evicting_a_dirty_entry_flushes_the_whole_named_cache() -> None:
    cache = Cache(3 * ENTRY)
    cid = cache.named("s")
    put_dirty(cache, cid, "abc")
    assert cache.put(cid, b"b", b"B", 5, True) == []  # dirty order: a c b; LRU: a c b
    flushed = cache.put(cid, b"d", b"d", 6, True)
    assert flushed == [(b"a", b"a", 0), (b"c", b"c", 2), (b"b", b"B", 5), (b"d", b"d", 6)]
    assert cache.get(cid, b"a") is None
    assert len(cache) == 3
    assert cache.size_bytes() == 3 * ENTRY
    assert cache.flush(cid) == []


def test_evicting_clean_entries_returns_nothing() -> None:
    cache = Cache(3 * ENTRY)
    cid = cache.named("s")
    for k in (b"a", b"b", b"c"):
        cache.put(cid, k, k, 0, False)
    cache.put(cid, b"d", b"d", 0, True)
    assert cache.put(cid, b"e", b"e", 0, False) == []  # evicts a, then b (clean)
    assert cache.get(cid, b"a") is None
    assert cache.get(cid, b"b") is None
    assert cache.size_bytes() == 3 * ENTRY
    # Evicting the dirty d flushes it.
    assert cache.put(cid, b"f", b"f", 1, False) == []  # evicts c
    assert cache.put(cid, b"g", b"g", 2, False) == [(b"d", b"d", 0)]


def test_get_refreshes_lru() -> None:
    cache = Cache(3 * ENTRY)
    cid = cache.named("s")
    put_dirty(cache, cid, "abc")
    assert cache.get(cid, b"a") == (b"a", 0)
    # b is now least recently used: evicting it flushes b, then a c d.
    flushed = cache.put(cid, b"d", b"d", 3, True)
    assert [k for k, _, _ in flushed] == [b"b", b"a", b"c", b"d"]
    assert cache.get(cid, b"a") == (b"a", 0)
    assert cache.get(cid, b"b") is None
    # A miss does not count as use.
    assert cache.get(cid, b"zz") is None
    cache.get(cid, b"c")
    cache.get(cid, b"d")
    cache.put(cid, b"e", b"e", 4, False)  # evicts a (clean)
    assert cache.get(cid, b"a") is None


def test_cached_deletes() -> None:
    cache = Cache(1000)
    cid = cache.named("s")
    cache.put(cid, b"k", b"v", 1, True)
    cache.put(cid, b"k", None, 2, True)
    cache.put(cid, b"gone", None, 3, True)
    assert cache.get(cid, b"k") == (None, 2)
    assert cache.size_bytes() == 1 + OVERHEAD + 4 + OVERHEAD
    assert cache.flush(cid) == [(b"k", None, 2), (b"gone", None, 3)]
    assert cache.get(cid, b"k") is None
    assert cache.get(cid, b"gone") is None
    assert len(cache) == 0
    assert cache.size_bytes() == 0


def test_evicted_delete_is_flushed() -> None:
    cache = Cache(2 * ENTRY)
    cid = cache.named("s")
    cache.put(cid, b"a", None, 1, True)
    cache.put(cid, b"b", b"b", 2, False)
    assert cache.put(cid, b"c", b"c", 3, False) == [(b"a", None, 1)]


def test_zero_budget_evicts_at_once() -> None:
    cache = Cache(0)
    cid = cache.named("s")
    for i in range(5):
        k = bytes([i])
        assert cache.put(cid, k, b"v", i, True) == [(k, b"v", i)]
    assert cache.put(cid, b"x", None, 9, True) == [(b"x", None, 9)]
    assert cache.put(cid, b"c", b"clean", 10, False) == []
    assert cache.get(cid, b"c") is None
    assert len(cache) == 0
    assert cache.size_bytes() == 0
    assert cache.flush(cid) == []


def test_named_caches_share_the_budget_but_evict_only_from_the_one_put_into() -> None:
    cache = Cache(3 * ENTRY)
    a = cache.named("a")
    b = cache.named("b")
    put_dirty(cache, a, "xy")
    put_dirty(cache, b, "p", 10)
    assert cache.size_bytes() == 3 * ENTRY
    assert cache.put(b, b"q", b"q", 11, True) == [(b"p", b"p", 10), (b"q", b"q", 11)]
    assert cache.get(a, b"x") == (b"x", 0)
    assert cache.get(a, b"y") == (b"y", 1)
    assert cache.flush(a) == [(b"x", b"x", 0), (b"y", b"y", 1)]
    assert len(cache) == 3
    # Keys are per named cache.
    assert cache.get(b, b"x") is None


def test_budget_stays_exceeded_when_the_cache_put_into_is_empty() -> None:
    cache = Cache(2 * ENTRY)
    a = cache.named("a")
    b = cache.named("b")
    put_dirty(cache, a, "xy")
    assert cache.put(b, b"p", b"p", 5, True) == [(b"p", b"p", 5)]
    assert cache.get(b, b"p") is None
    assert cache.size_bytes() == 2 * ENTRY
    assert cache.flush(a) == [(b"x", b"x", 0), (b"y", b"y", 1)]


def test_close_discards_and_stales_the_id() -> None:
    cache = Cache(1000)
    a = cache.named("a")
    b = cache.named("b")
    put_dirty(cache, a, "xy")
    put_dirty(cache, b, "p")
    cache.close(a)
    assert len(cache) == 1
    assert cache.size_bytes() == ENTRY
    for call in (
        lambda: cache.get(a, b"x"),
        lambda: cache.put(a, b"x", b"x", 0, True),
        lambda: cache.flush(a),
        lambda: cache.close(a),
    ):
        with pytest.raises(StoreError):
            call()
    again = cache.named("a")
    assert again != a
    assert cache.get(again, b"x") is None
    assert cache.flush(again) == []
    assert cache.get(b, b"p") == (b"p", 0)


@pytest.mark.parametrize("cid", [-1, 1, 10**6])
def test_unknown_id_raises(cid: int) -> None:
    cache = Cache(1000)
    cache.named("only")
    with pytest.raises(StoreError):
        cache.get(cid, b"k")
    with pytest.raises(StoreError):
        cache.put(cid, b"k", b"v", 0, True)
    with pytest.raises(StoreError):
        cache.flush(cid)
    with pytest.raises(StoreError):
        cache.close(cid)


# --- property test against a model of Kafka's semantics ------------------------


@dataclass
class _Named:
    # key -> (value, timestamp, dirty), in LRU order (oldest first).
    lru: OrderedDict[bytes, tuple[bytes | None, int, bool]] = field(default_factory=OrderedDict)
    # dirty keys in last-update order
    dirty: OrderedDict[bytes, None] = field(default_factory=OrderedDict)


def _size(key: bytes, value: bytes | None) -> int:
    return len(key) + len(value or b"") + OVERHEAD


class Model:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.caches: dict[str, _Named] = {}

    def size(self) -> int:
        return sum(_size(k, e[0]) for c in self.caches.values() for k, e in c.lru.items())

    def named(self, ns: str) -> _Named:
        return self.caches.setdefault(ns, _Named())

    def get(self, ns: str, key: bytes) -> tuple[bytes | None, int] | None:
        c = self.named(ns)
        if key not in c.lru:
            return None
        c.lru.move_to_end(key)
        value, ts, _ = c.lru[key]
        return value, ts

    def flush(self, ns: str, out: list[tuple[bytes, bytes | None, int]]) -> None:
        c = self.named(ns)
        for key in c.dirty:
            value, ts, _ = c.lru[key]
            out.append((key, value, ts))
            if value is None:
                del c.lru[key]
            else:
                c.lru[key] = (value, ts, False)
        c.dirty.clear()

    def put(
        self, ns: str, key: bytes, value: bytes | None, ts: int, dirty: bool
    ) -> list[tuple[bytes, bytes | None, int]]:
        c = self.named(ns)
        if key in c.lru and c.lru[key][2] and not dirty:
            raise StoreError("clean over dirty")
        c.lru[key] = (value, ts, dirty)
        c.lru.move_to_end(key)
        if dirty:
            c.dirty.pop(key, None)
            c.dirty[key] = None
        out: list[tuple[bytes, bytes | None, int]] = []
        while self.size() > self.max_bytes and c.lru:
            k, (v, t, d) = c.lru.popitem(last=False)
            if d:
                del c.dirty[k]
                out.append((k, v, t))
                self.flush(ns, out)
        return out


_ops = st.lists(
    st.tuples(
        st.sampled_from(["get", "put", "put", "put", "flush"]),
        st.sampled_from(["a", "b"]),
        st.binary(min_size=1, max_size=2).filter(lambda k: k[0] < 6),
        st.one_of(st.none(), st.binary(max_size=8)),
        st.booleans(),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(max_bytes=st.sampled_from([0, 60, 150, 400, 10_000]), ops=_ops)
def test_matches_model(
    max_bytes: int, ops: list[tuple[str, str, bytes, bytes | None, bool]]
) -> None:
    cache = Cache(max_bytes)
    model = Model(max_bytes)
    ids = {ns: cache.named(ns) for ns in ("a", "b")}
    for ts, (op, ns, key, value, dirty) in enumerate(ops):
        if op == "get":
            assert cache.get(ids[ns], key) == model.get(ns, key)
        elif op == "flush":
            expected: list[tuple[bytes, bytes | None, int]] = []
            model.flush(ns, expected)
            assert cache.flush(ids[ns]) == expected
        else:
            try:
                expected = model.put(ns, key, value, ts, dirty)
            except StoreError:
                with pytest.raises(StoreError):
                    cache.put(ids[ns], key, value, ts, dirty)
                continue
            assert cache.put(ids[ns], key, value, ts, dirty) == expected
        assert cache.size_bytes() == model.size()
        assert len(cache) == sum(len(c.lru) for c in model.caches.values())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([b"a", b"bb", b"ccc"]),
            st.one_of(st.none(), st.binary(min_size=1, max_size=6)),
            st.integers(0, 5).map(lambda i: i * 10),
        ),
        max_size=40,
    ),
    st.integers(0, 400),
)
def test_window_write_out_into_the_store_is_the_listed_one(
    updates: list[tuple[bytes, bytes | None, int]], budget: int
) -> None:
    """put_all_into / flush_into write to a window store, and log, exactly
    what put_all / flush hand back written with the store's put_all."""

    def store() -> _core.NativeWindowStore:
        s = _core.NativeWindowStore(1_000, 10)
        s.enable_changelog()
        return s

    keys = [k for k, _, _ in updates]
    values = [v for _, v, _ in updates]
    starts = [s for _, _, s in updates]
    stamps = list(range(len(updates)))
    listed, native = store(), store()
    cache_a, cache_b = Cache(budget), Cache(budget)
    a, b = cache_a.named("w"), cache_b.named("w")
    half = len(updates) // 2
    for lo, hi in ((0, half), (half, len(updates))):
        evicted = cache_a.put_all(a, keys[lo:hi], values[lo:hi], stamps[lo:hi], [starts[lo:hi]])
        written = cache_b.put_all_into(
            b, keys[lo:hi], values[lo:hi], stamps[lo:hi], starts[lo:hi], native
        )
        assert written == len(evicted)
        write_listed(listed, evicted)
    flushed = cache_a.flush(a)
    assert cache_b.flush_into(b, native) == len(flushed)
    write_listed(listed, flushed)
    assert native.take_changelog() == listed.take_changelog()
    assert native.all() == listed.all()


def write_listed(
    store: _core.NativeWindowStore, entries: list[tuple[bytes, bytes | None, int]]
) -> None:
    if entries:
        store.put_all(
            [k[:-8] for k, _, _ in entries],
            [v for _, v, _ in entries],
            [int.from_bytes(k[-8:], "big", signed=True) for k, _, _ in entries],
            [t for _, _, t in entries],
        )
