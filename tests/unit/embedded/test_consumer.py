"""EmbeddedConsumer: poll, commit and resume, seek, offset reset, blocking polls."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import threading
import time

import pytest

from strom.embedded import EmbeddedConsumer, EmbeddedLog, OffsetAndMetadata, RecordBatch
from strom.errors import ConfigError


def _fill(log: EmbeddedLog, topic: str, partitions: int, per_partition: int) -> None:
    log.create_topic(topic, partitions)
    with log.producer() as producer:
        for p in range(partitions):
            producer.produce_columns(
                topic,
                [None] * per_partition,
                [f"{p}:{i}".encode() for i in range(per_partition)],
                partitions=[p] * per_partition,
            )


def _drain(consumer: EmbeddedConsumer, expected: int, timeout: float = 10.0) -> list[bytes]:
    """Polls until ``expected`` values came (or the timeout passed)."""
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(values) < expected and time.monotonic() < deadline:
        values.extend(r.value for r in consumer.poll(max_records=7, timeout=0.2) if r.value)
    return values


def test_poll_reads_every_partition_in_order(log: EmbeddedLog) -> None:
    _fill(log, "t", 3, 20)
    consumer = log.consumer("g", ["t"])
    assert sorted(consumer.assignment()) == [("t", 0), ("t", 1), ("t", 2)]
    values = _drain(consumer, 60)
    assert sorted(values) == sorted(f"{p}:{i}".encode() for p in range(3) for i in range(20))
    for p in range(3):
        mine = [v for v in values if v.startswith(f"{p}:".encode())]
        assert mine == [f"{p}:{i}".encode() for i in range(20)]
        assert consumer.position("t", p) == 20
    assert consumer.poll(timeout=0) == []


def test_poll_respects_max_records(log: EmbeddedLog) -> None:
    _fill(log, "t", 2, 50)
    consumer = log.consumer("g", "t")
    records = consumer.poll(max_records=30, timeout=1.0)
    assert 0 < len(records) <= 30


def test_commit_and_resume_from_a_new_consumer(log: EmbeddedLog) -> None:
    _fill(log, "t", 2, 10)
    first = log.consumer("group", ["t"])
    seen = _drain(first, 20)
    assert len(seen) == 20
    first.seek("t", 0, 4)  # commit a position that is not the end
    first.commit()
    first.close()
    assert log.committed_offsets("group") == {
        ("t", 0): OffsetAndMetadata(4, ""),
        ("t", 1): OffsetAndMetadata(10, ""),
    }
    second = log.consumer("group", ["t"])
    assert second.position("t", 0) == 4
    assert second.position("t", 1) == 10
    assert _drain(second, 6) == [f"0:{i}".encode() for i in range(4, 10)]
    # Another group starts from scratch.
    assert log.consumer("other", ["t"]).position("t", 0) == 0


def test_commit_explicit_offsets_with_metadata(log: EmbeddedLog) -> None:
    _fill(log, "t", 2, 5)
    consumer = log.consumer("g", ["t"])
    consumer.commit({("t", 0): OffsetAndMetadata(3, "stream-time=99"), ("t", 1): 2})
    assert consumer.committed() == {
        ("t", 0): OffsetAndMetadata(3, "stream-time=99"),
        ("t", 1): OffsetAndMetadata(2, ""),
    }
    # Later commits merge with earlier ones per partition.
    log.commit_offsets("g", {("t", 1): 5})
    assert log.committed_offsets("g")[("t", 0)] == OffsetAndMetadata(3, "stream-time=99")
    assert log.committed_offsets("g")[("t", 1)] == OffsetAndMetadata(5, "")
    assert log.consumer("g", ["t"]).position("t", 0) == 3


def test_seek_rereads(log: EmbeddedLog) -> None:
    _fill(log, "t", 1, 10)
    consumer = log.consumer("g", ["t"])
    assert len(_drain(consumer, 10)) == 10
    consumer.seek("t", 0, 8)
    assert consumer.position("t", 0) == 8
    assert _drain(consumer, 2) == [b"0:8", b"0:9"]


def test_offset_reset_latest_reads_only_new_records(log: EmbeddedLog) -> None:
    _fill(log, "t", 1, 5)
    consumer = log.consumer("late", ["t"], offset_reset="latest")
    assert consumer.position("t", 0) == 5
    assert consumer.poll(timeout=0) == []
    with log.producer() as producer:
        producer.produce("t", None, b"new")
    assert _drain(consumer, 1) == [b"new"]


def test_offset_reset_none_and_bad_values(log: EmbeddedLog) -> None:
    _fill(log, "t", 1, 1)
    with pytest.raises(ConfigError, match="offset"):
        log.consumer("g", ["t"], offset_reset="newest")
    # Kafka's NoOffsetForPartitionException.
    with pytest.raises(ConfigError, match="no committed offset for t-0"):
        log.consumer("fresh", ["t"], offset_reset="none")
    committed = log.consumer("committed", ["t"])
    committed.commit()
    # With a committed offset, "none" has nothing to reset.
    assert log.consumer("committed", ["t"], offset_reset="none").position("t", 0) == 0


def test_bad_poll_timeout_is_a_config_error(log: EmbeddedLog) -> None:
    _fill(log, "t", 1, 0)
    consumer = log.consumer("g", ["t"])
    with pytest.raises(ConfigError, match="timeout"):
        consumer.poll(timeout=-1)
    with pytest.raises(ConfigError, match="timeout"):
        consumer.poll(timeout=float("nan"))


def test_poll_batches_is_columnar(log: EmbeddedLog) -> None:
    _fill(log, "t", 2, 5)
    consumer = log.consumer("g", ["t"])
    batches: list[RecordBatch] = []
    deadline = time.monotonic() + 10
    while sum(len(b) for b in batches) < 10 and time.monotonic() < deadline:
        batches.extend(consumer.poll_batches(max_records=100, timeout=0.2))
    by_partition: dict[int, list[bytes | None]] = {}
    for batch in batches:
        assert batch.topic == "t"
        by_partition.setdefault(batch.partition, []).extend(batch.values())
        assert batch.next_offset == batch.offsets()[-1] + 1
    assert by_partition == {p: [f"{p}:{i}".encode() for i in range(5)] for p in range(2)}


def test_a_blocking_poll_releases_the_gil_and_wakes_on_produce(log: EmbeddedLog) -> None:
    log.create_topic("t")
    consumer = log.consumer("g", ["t"])
    result: list[list[bytes | None]] = []
    started = threading.Event()

    def poll() -> None:
        started.set()
        result.append([r.value for r in consumer.poll(timeout=20.0)])

    thread = threading.Thread(target=poll)
    begin = time.monotonic()
    thread.start()
    assert started.wait(5)
    # Python keeps running here while the poll waits: it released the GIL.
    spins = 0
    while time.monotonic() - begin < 0.3:
        spins += 1
    assert thread.is_alive(), "poll returned before anything was produced"
    with log.producer() as producer:
        producer.produce("t", None, b"wake up")
    thread.join(timeout=10)
    assert not thread.is_alive(), "poll did not wake up"
    assert result == [[b"wake up"]]
    assert time.monotonic() - begin < 10, "woke by timeout, not by the append"
    assert spins > 1000


def test_ctrl_c_interrupts_a_blocking_poll(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("quiet")
    log.close()
    gc.collect()
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from strom.embedded import EmbeddedLog\n"
            "consumer = EmbeddedLog(sys.argv[1]).consumer('g', ['quiet'])\n"
            "start = time.monotonic()\n"
            "try:\n"
            # Inside the try: a signal that beats the poll (a loaded machine)
            # is still caught, not a traceback.
            "    print('polling', flush=True)\n"
            "    consumer.poll(timeout=60)\n"
            "    print('timed out', flush=True)\n"
            "except KeyboardInterrupt:\n"
            "    print(f'interrupted after {time.monotonic() - start:.1f}s', flush=True)\n",
            log_path,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "polling"
        time.sleep(0.5)  # let it block in the poll; the test holds if it has not yet
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=20)
    finally:
        child.kill()
    assert out.startswith("interrupted after")
    assert float(out.split()[-1].rstrip("s")) < 10
