"""Crash recovery, corruption and process exclusion, with real files and processes."""

from __future__ import annotations

import os

import pytest
from tests.unit.embedded.logtools import release, run_python, segment_files

from strom.embedded import EmbeddedLog
from strom.errors import CorruptLogError

READ_ALL = """
from strom.embedded import EmbeddedLog
log = EmbeddedLog(sys.argv[1])
return [[r.offset, r.value.decode()] for r in log.read(sys.argv[2], 0, 0, 1000)]
"""


def test_a_torn_tail_is_truncated_on_reopen(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("torn")
    producer = log.producer()
    for i in range(10):
        producer.produce("torn", None, f"record-{i}-".encode() + b"x" * 50)
    producer.flush()
    release(producer, log)
    (active,) = segment_files(log_path, "torn")
    size = active.stat().st_size
    # Cut the last record in half, as a crash in the middle of a write would.
    os.truncate(active, size - 30)

    out = run_python(
        """
        import logging
        from strom.embedded import EmbeddedLog
        warnings = []
        class Keep(logging.Handler):
            def emit(self, record):
                if record.levelno >= logging.WARNING:
                    warnings.append([record.name, record.getMessage()])
        logging.getLogger("strom").addHandler(Keep())
        log = EmbeddedLog(sys.argv[1])
        before = [r.offset for r in log.read("torn", 0, 0, 100)]
        with log.producer() as producer:
            producer.produce("torn", None, b"after recovery")
        return {"before": before, "end": log.end_offsets("torn")[0], "warnings": warnings}
        """,
        log_path,
    )
    assert out["before"] == list(range(9))
    assert out["end"] == 10
    # The core's log::warn! reached Python's logging under "strom".
    [(logger, message)] = out["warnings"]
    assert logger.startswith("strom._core.strom_core.log")  # strom_core::log::…
    assert "torn tail" in message
    assert active.name in message
    reopened = EmbeddedLog(log_path)
    records = reopened.read("torn", 0, 0, 100)
    assert [r.offset for r in records] == list(range(10))
    assert records[8].value == b"record-8-" + b"x" * 50
    assert records[9].value == b"after recovery"


def test_a_torn_tail_is_recovered_in_process_once_handles_are_gone(
    log: EmbeddedLog, log_path: str
) -> None:
    log.create_topic("torn")
    with log.producer() as producer:
        producer.produce_batch("torn", [(None, b"a" * 40), (None, b"b" * 40)])
    release(log)
    (active,) = segment_files(log_path, "torn")
    os.truncate(active, active.stat().st_size - 1)
    reopened = EmbeddedLog(log_path)
    assert [r.value for r in reopened.read("torn", 0, 0, 10)] == [b"a" * 40]
    assert reopened.end_offsets("torn") == {0: 1}


def test_a_corrupt_closed_segment_names_the_file(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("bad")
    with log.producer() as producer:
        producer.produce_batch("bad", [(b"key", bytes([65 + i]) * 200) for i in range(5)])
    log.roll("bad", 0)
    with log.producer() as producer:
        producer.produce("bad", b"key", b"in the active segment")
    release(log)
    closed = segment_files(log_path, "bad")[0]
    data = bytearray(closed.read_bytes())
    middle = data.index(bytes([67]) * 200) + 100  # inside the third record's value
    data[middle] ^= 0xFF
    closed.write_bytes(bytes(data))

    with pytest.raises(CorruptLogError) as info:
        EmbeddedLog(log_path).read("bad", 0, 0, 100)
    assert str(closed) in str(info.value) or closed.name in str(info.value)


def test_a_second_process_gets_log_in_use(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("t")
    out = run_python(
        """
        from strom.embedded import EmbeddedLog
        EmbeddedLog(sys.argv[1])
        return "opened"
        """,
        log_path,
    )
    assert out["error"] == "LogInUseError"
    assert log_path in out["message"] or os.path.basename(log_path) in out["message"]
    # Once this process lets go, the other can open it.
    release(log)
    assert run_python(READ_ALL, log_path, "t") == []
