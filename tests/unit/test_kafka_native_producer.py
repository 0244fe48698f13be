"""The native Kafka producer's checks of its input and its epochs, without
a broker (records stay queued in the client; nothing is acknowledged)."""

from __future__ import annotations

import pytest

from strom._core import KafkaProducer

# Nothing listens there: the client only queues.
NOWHERE = {"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": "600000"}


@pytest.mark.parametrize("queued_before", [0, 100_000])
def test_keys_and_values_must_be_bytes_or_none(queued_before: int) -> None:
    """Both paths of produce_columns (holding the GIL, and from a copy when
    the queue may be full) name the bad item."""
    producer = KafkaProducer(NOWHERE | {"queue.buffering.max.messages": "1000000"})
    if queued_before:
        producer.produce_columns("t", [b"k"] * queued_before, [b"v"] * queued_before, None, None, 3)
    with pytest.raises(TypeError, match=r"values\[1\] must be bytes or None, not str"):
        producer.produce_columns("t", [b"a", b"b"], [b"x", "y"], None, None, 3)
    with pytest.raises(TypeError, match=r"keys\[0\] must be bytes or None, not int"):
        producer.produce_columns("t", [1], [None], None, None, 3)
    producer.flush(0)


def test_an_epoch_is_reported_only_when_all_its_records_are() -> None:
    producer = KafkaProducer(NOWHERE)
    assert producer.reported_through() == 0  # no epoch closed yet
    assert producer.mark() == 0  # closes epoch 0, empty: reported
    assert producer.reported_through() == 1
    producer.produce_columns("t", [b"k"], [b"v"], None, None, 3)
    assert producer.mark() == 1  # its record waits for a broker that is not there
    assert producer.mark() == 2
    assert producer.reported_through() == 1  # epoch 1 holds back epoch 2 too


@pytest.mark.parametrize("queued_before", [0, 100_000])
def test_headers_are_checked_like_the_other_columns(queued_before: int) -> None:
    """On both paths: a headers column of another length is a ValueError, a
    bad item a TypeError naming it, and good headers are taken."""
    producer = KafkaProducer(NOWHERE | {"queue.buffering.max.messages": "1000000"})
    if queued_before:
        producer.produce_columns("t", [b"k"] * queued_before, [b"v"] * queued_before, None, None, 3)
    with pytest.raises(ValueError, match="same length"):
        producer.produce_columns("t", [b"a", b"b"], [b"x", b"y"], None, None, 3, [None])
    bad: list[object] = [None, [("h", "not bytes")]]
    with pytest.raises(TypeError, match=r"headers\[1\] must be None or a list"):
        producer.produce_columns("t", [b"a", b"b"], [b"x", b"y"], None, None, 3, bad)  # type: ignore[arg-type]
    producer.produce_columns(
        "t", [b"a", b"b"], [b"x", b"y"], None, None, 3, [[("h", b"1"), ("n", None)], None]
    )
    producer.flush(0)
