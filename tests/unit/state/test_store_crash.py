"""Crash and corruption tests of the persistent key-value store.

A child process writes seeded random batches to a persistent store and the
same writes to a changelog topic of an embedded log (flushed before each
store commit, as a task does), reporting each commit on stdout. The parent
waits until the child has reported a seeded number of commits, lets it run a
seeded moment longer, and kills it with SIGKILL. Then: the store reopens
without error exactly as of its last commit, the changelog holds a prefix of
everything written, and a native restore from the committed offset brings
the store to the state of the whole changelog.

A byte flipped on purpose in committed data makes reopening fail with
CorruptLogError naming the segment file; wiping the store and restoring it
from the changelog recovers the state.
"""

from __future__ import annotations

import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from strom import _core
from strom.embedded import EmbeddedLog
from strom.errors import CorruptLogError

Store = _core.NativeKeyValueStore
Batch = tuple[list[bytes], list[bytes | None]]
TOPIC = "store-changelog"

# Shared by the parent and the child (executed in both), so the parent can
# rebuild every batch the child wrote from the seed alone.
GENERATOR = '''
import random

def make_batch(seed, i):
    """Batch ``i`` of a run: keys from a pool (so they repeat, within and
    across batches), about 15% deletes; sometimes large enough for the
    bindings' sorted path and for the store to compact."""
    rng = random.Random(seed * 1_000_003 + i)
    n = rng.randint(1, 40) if rng.random() < 0.5 else rng.randint(256, 2500)
    keys = [b"key-%06d" % rng.randrange(4000) for _ in range(n)]
    values = [
        None if rng.random() < 0.15 else rng.randbytes(rng.randint(0, 300)) for _ in range(n)
    ]
    return keys, values
'''

CHILD = (
    GENERATOR
    + """
import json
import sys

from strom import _core
from strom.embedded import EmbeddedLog

store_path, log_path, seed, topic = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
store, committed = _core.NativeKeyValueStore.open(store_path)
assert committed is None
log = EmbeddedLog(log_path)
log.create_topic(topic, 1)
producer = log.producer()
i = 0
while True:
    keys, values = make_batch(seed, i)
    store.put_all(keys, values)
    producer.produce_columns(topic, keys, values, partitions=[0] * len(keys))
    producer.flush()  # the changelog is durable before the store commits
    offset = log.end_offsets(topic)[0]
    store.commit(json.dumps({"batch": i, "offset": offset}).encode())
    print(i, offset, flush=True)
    i += 1
"""
)

_namespace: dict[str, object] = {}
exec(GENERATOR, _namespace)


def make_batch(seed: int, i: int) -> Batch:
    batch: Batch = _namespace["make_batch"](seed, i)  # type: ignore[operator]
    return batch


def records_of(seed: int, batches: int) -> list[tuple[bytes, bytes | None]]:
    """Every write of batches ``0 .. batches - 1``, in order."""
    out: list[tuple[bytes, bytes | None]] = []
    for i in range(batches):
        keys, values = make_batch(seed, i)
        out.extend(zip(keys, values, strict=True))
    return out


def model_of(records: list[tuple[bytes, bytes | None]]) -> dict[bytes, bytes]:
    model: dict[bytes, bytes] = {}
    for k, v in records:
        if v is None:
            model.pop(k, None)
        else:
            model[k] = v
    return model


def read_lines(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def run_child_until_killed(tmp_path: Path, seed: int, commits: int, extra_s: float) -> int:
    """Starts the writer, kills it once it has reported ``commits`` commits
    and ``extra_s`` more seconds have passed; returns the last batch it
    reported committed."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            str(tmp_path / "store"),
            str(tmp_path / "log"),
            str(seed),
            TOPIC,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=read_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    last = -1
    try:
        deadline = time.monotonic() + 120
        while last + 1 < commits:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            if line is None:
                pytest.fail(f"the writer exited early: {proc.wait()} {proc.stderr.read()}")
            last = int(line.split()[0])
        time.sleep(extra_s)  # only picks where the kill lands, nothing waits on it
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=60)
    while (line := lines.get()) is not None:
        last = int(line.split()[0])
    proc.stdout.close()
    proc.stderr.close()
    return last


@pytest.mark.parametrize("seed", range(12))
def test_sigkill_at_a_random_point_then_reopen_and_restore(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    commits = rng.randint(1, 160)
    extra_s = rng.choice([0.0, rng.uniform(0, 0.005), rng.uniform(0, 0.05)])
    reported = run_child_until_killed(tmp_path, seed, commits, extra_s)
    assert reported >= commits - 1

    # Reopen: exactly the last commit, which is the last one reported or,
    # when the kill came between commit and report, the one after it.
    store, raw = Store.open(tmp_path / "store")
    try:
        assert raw is not None
        meta = json.loads(raw)
        assert reported <= meta["batch"] <= reported + 1
        written = records_of(seed, meta["batch"] + 2)
        committed = records_of(seed, meta["batch"] + 1)
        assert meta["offset"] == len(committed)
        assert dict(store.range()) == model_of(committed)

        # The changelog holds a prefix of the writes: everything committed,
        # maybe some of the next batch.
        log = EmbeddedLog(tmp_path / "log")
        end = log.end_offsets(TOPIC)[0]
        assert len(committed) <= end <= len(written)
        held = log.read_batch(TOPIC, 0, 0, end + 1)
        assert list(zip(held.keys(), held.values(), strict=True)) == written[:end]

        # Restoring the tail brings the store to the whole changelog.
        applied, next_offset = store.restore_from_log(log.native, TOPIC, 0, meta["offset"])
        assert (applied, next_offset) == (end - meta["offset"], end)
        expected = model_of(written[:end])
        assert dict(store.range()) == expected
        store.commit(json.dumps({"offset": end}).encode())
    finally:
        store.close()
    store, raw = Store.open(tmp_path / "store")
    assert raw is not None and json.loads(raw) == {"offset": end}
    assert dict(store.range()) == expected
    store.close()


def write_committed_store(
    tmp_path: Path, seed: int, batches: int
) -> list[tuple[bytes, bytes | None]]:
    """A store and its changelog after ``batches`` committed batches."""
    store, _ = Store.open(tmp_path / "store")
    log = EmbeddedLog(tmp_path / "log")
    log.create_topic(TOPIC, 1)
    producer = log.producer()
    for i in range(batches):
        keys, values = make_batch(seed, i)
        store.put_all(keys, values)
        producer.produce_columns(TOPIC, keys, values, partitions=[0] * len(keys))
        producer.flush()
        store.commit(b"%d" % log.end_offsets(TOPIC)[0])
    store.close()
    return records_of(seed, batches)


def test_a_flipped_committed_byte_is_reported_with_the_file_and_restore_recovers(
    tmp_path: Path,
) -> None:
    records = write_committed_store(tmp_path, seed=99, batches=12)
    expected = model_of(records)
    segments = sorted((tmp_path / "store").glob("*.log"))
    assert segments, "the store keeps its data in segment files"
    segment = segments[0]
    size = segment.stat().st_size
    rng = random.Random(5)
    # Positions well before the last commit marker: committed data.
    positions = [*sorted(rng.sample(range(int(size * 0.8)), 6)), 0, 4, 20]
    pristine = tmp_path / "pristine"
    shutil.copytree(tmp_path / "store", pristine)
    for position in positions:
        shutil.rmtree(tmp_path / "store")
        shutil.copytree(pristine, tmp_path / "store")
        with open(segment, "r+b") as f:
            f.seek(position)
            byte = f.read(1)
            f.seek(position)
            f.write(bytes([byte[0] ^ 0xFF]))
        with pytest.raises(CorruptLogError) as caught:
            Store.open(tmp_path / "store")
        assert str(segment) in str(caught.value), (position, str(caught.value))

    # Wipe and restore from the changelog: the state comes back.
    Store.destroy(tmp_path / "store")
    store, committed = Store.open(tmp_path / "store")
    assert committed is None
    log = EmbeddedLog(tmp_path / "log")
    applied, next_offset = store.restore_from_log(log.native, TOPIC, 0, 0)
    assert (applied, next_offset) == (len(records), len(records))
    assert dict(store.range()) == expected
    store.commit(b"%d" % next_offset)
    store.close()
    store, committed = Store.open(tmp_path / "store")
    assert committed == b"%d" % len(records)
    assert dict(store.range()) == expected
    store.close()


def test_a_truncated_uncommitted_tail_is_not_corruption(tmp_path: Path) -> None:
    """The counterpart: bytes cut from after the last commit marker (a torn
    write) reopen silently as of that commit."""
    store, _ = Store.open(tmp_path / "store")
    store.put_all([b"a", b"b"], [b"1", b"2"])
    store.commit(b"one")
    segment = sorted((tmp_path / "store").glob("*.log"))[-1]
    committed_size = segment.stat().st_size
    # More than the write buffer, so that it reaches the file.
    store.put_all([b"c%d" % i for i in range(20_000)], [os.urandom(100) for _ in range(20_000)])
    store.close()
    size = segment.stat().st_size
    assert size > committed_size + 37
    with open(segment, "r+b") as f:
        f.truncate(size - 37)
    store, committed = Store.open(tmp_path / "store")
    assert committed == b"one"
    assert dict(store.range()) == {b"a": b"1", b"b": b"2"}
    store.close()
