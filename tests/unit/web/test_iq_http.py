"""The interactive-query HTTP endpoint (``iq.http``) of one instance on the
embedded log: keys, scans and window/session fetches as JSON, read with the
stores' serdes; clear errors for an unknown store, a bad key or a scan a
store's kind does not have. (Two instances on Kafka: tests/integration.)"""

from __future__ import annotations

import contextlib
import re
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from tests.kafka_harness import free_ports
from tests.support import get_json

from strom import KafkaStreams, StreamsBuilder, Topology, serdes
from strom.embedded import EmbeddedLog
from strom.errors import ConfigError
from strom.kstream import Materialized, SessionWindows, TimeWindows
from strom.state import Stores
from strom.web.iq import QueryError, parse_key, to_json

S = serdes.String()
WORDS = ["apple", "apricot", "banana", "cherry", "fig"]


@pytest.fixture
def served(log: EmbeddedLog, log_path: str) -> Iterator[tuple[str, KafkaStreams]]:
    log.create_topic("words", partitions=2)
    with log.producer() as producer:
        for i, word in enumerate(WORDS * 3 + WORDS[:2]):
            producer.produce("words", word.encode(), b"", timestamp=1_000 + i)
    builder = StreamsBuilder()
    grouped = builder.stream("words", key_serde=S, value_serde=S).group_by_key()
    grouped.count(Materialized("counts"))
    grouped.windowed_by(TimeWindows.of_size_with_no_grace(10_000)).count(Materialized("windows"))
    grouped.windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(5_000)).count(
        Materialized("sessions")
    )
    with serving(builder.build(), log_path, "iq-http") as served_app:
        yield served_app


@contextlib.contextmanager
def serving(
    topology: Topology, log_path: str, app_id: str, host: str = "127.0.0.1", **config: Any
) -> Iterator[tuple[str, KafkaStreams]]:
    """The app on the embedded log, run to the end of its input, serving
    IQ over HTTP on a free port (``application.server`` ``host:port``, and
    ``config`` on top): its base URL on 127.0.0.1 and the app."""
    (port,) = free_ports(1)
    settings = {
        "application.id": app_id,
        "bootstrap.servers": f"embedded:{log_path}",
        "application.server": f"{host}:{port}",
        "iq.http": True,
    }
    with KafkaStreams(topology, settings | config) as app:
        app.run_until_end(timeout=120)
        assert app.web_server is not None and app.web_server.port == port
        yield f"http://127.0.0.1:{port}", app


def counts() -> dict[str, int]:
    return dict(Counter(WORDS * 3 + WORDS[:2]))


def test_keys_and_scans(served: tuple[str, KafkaStreams]) -> None:
    base, app = served
    for word, count in counts().items():
        status, body = get_json(f"{base}/iq/stores/counts/keys/{word}")
        assert status == 200, body
        meta = app.query_metadata_for_key("counts", word, S)
        assert body["value"] == count and body["partition"] == meta.partition
        assert body["host"] == f"127.0.0.1:{app.web_server.port}"  # type: ignore[union-attr]
    assert get_json(f"{base}/iq/stores/counts/keys/kiwi")[1]["value"] is None
    status, body = get_json(f"{base}/iq/stores/counts/all")
    assert status == 200 and body["partitions"] == [0, 1]
    assert {e["key"]: e["value"] for e in body["entries"]} == counts()
    status, body = get_json(f"{base}/iq/stores/counts/range?from=b&to=d")
    assert {e["key"] for e in body["entries"]} == {"banana", "cherry"}
    status, body = get_json(f"{base}/iq/stores/counts/range?to=b")
    assert {e["key"] for e in body["entries"]} == {"apple", "apricot"}
    status, body = get_json(f"{base}/iq/stores/counts/prefix?prefix=ap")
    assert {e["key"]: e["value"] for e in body["entries"]} == {"apple": 4, "apricot": 4}
    status, body = get_json(f"{base}/iq/stores/counts/metadata/fig")
    assert status == 200 and body["active_host"] == base.removeprefix("http://")
    status, body = get_json(f"{base}/iq/metadata")
    assert [m["host"] for m in body] == [base.removeprefix("http://")]
    assert set(body[0]["stores"]) == {"counts", "windows", "sessions"}
    status, body = get_json(f"{base}/iq/stores")
    assert {s["name"]: s["kind"] for s in body} == {
        "counts": "key_value",
        "windows": "window",
        "sessions": "session",
    }


def test_window_and_session_fetches(served: tuple[str, KafkaStreams]) -> None:
    base, _ = served
    status, body = get_json(f"{base}/iq/stores/windows/keys/apple?from=0&to=20000")
    assert status == 200
    assert body["windows"] == [{"key": 0, "value": 4}]  # key: the window start
    status, body = get_json(f"{base}/iq/stores/windows/all?time_from=0&time_to=0")
    assert {e["key"]["key"]: e["value"] for e in body["entries"]} == counts()
    assert all(e["key"]["start"] == 0 and e["key"]["end"] == 10_000 for e in body["entries"])
    status, body = get_json(f"{base}/iq/stores/sessions/keys/fig")
    (session,) = body["sessions"]
    assert session["value"] == 3 and session["key"]["key"] == "fig"
    status, body = get_json(f"{base}/iq/stores/sessions/range?from=a&to=b")
    assert {e["key"]["key"] for e in body["entries"]} == {"apple", "apricot"}


def test_clear_errors(served: tuple[str, KafkaStreams]) -> None:
    base, _ = served
    status, body = get_json(f"{base}/iq/stores/nope/keys/a")
    assert status == 404 and "no state store named 'nope'" in body["error"]
    status, body = get_json(f"{base}/iq/stores/windows/prefix?prefix=a")
    assert status == 400 and "window store" in body["error"]
    status, body = get_json(f"{base}/iq/stores/counts/prefix")
    assert status == 400 and "prefix" in body["error"]
    status, body = get_json(f"{base}/iq/stores/windows/keys/apple?from=x")
    assert status == 400 and "from='x'" in body["error"]


def test_iq_http_needs_application_server(log_path: str) -> None:
    builder = StreamsBuilder()
    builder.stream("words", key_serde=S, value_serde=S)
    app = KafkaStreams(
        builder.build(),
        {"application.id": "a", "bootstrap.servers": f"embedded:{log_path}", "iq.http": "true"},
    )
    with pytest.raises(ConfigError, match=r"iq\.http needs application\.server"):
        app.start()


def test_a_taken_port_is_a_clear_error(served: tuple[str, KafkaStreams], log_path: str) -> None:
    _, app = served
    taken = app.config["application.server"]
    builder = StreamsBuilder()
    builder.stream("words", key_serde=S, value_serde=S)
    other = KafkaStreams(
        builder.build(),
        {
            "application.id": "b",
            "bootstrap.servers": f"embedded:{log_path}",
            "application.server": taken,
            "iq.http": True,
        },
    )
    with pytest.raises(ConfigError, match=re.escape(f"cannot serve HTTP on {taken}")):
        other.start()
    other.close()


def test_key_types_follow_the_key_serde(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("numbers", partitions=1)
    with log.producer() as producer:
        for n in (1, 2, 2, 300):
            producer.produce("numbers", serdes.Long().serialize("numbers", n), b"x", timestamp=0)
    builder = StreamsBuilder()
    builder.stream("numbers", key_serde=serdes.Long(), value_serde=S).group_by_key().count(
        Materialized("by-number")
    )
    # Advertised as localhost, bound where web.host says.
    web = {"web.host": "127.0.0.1"}
    with serving(builder.build(), log_path, "iq-long", "localhost", **web) as (url, _app):
        base = f"{url}/iq/stores/by-number"
        assert get_json(f"{base}/keys/2")[1]["value"] == 2
        status, body = get_json(f"{base}/keys/{urllib.parse.quote('two')}")
        assert status == 400 and "'two' is not a Long value" in body["error"]
        assert [e["key"] for e in get_json(f"{base}/range?from=2&to=400")[1]["entries"]] == [2, 300]


def test_a_versioned_tables_key_as_of_a_time(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("prices", partitions=1)
    with log.producer(S, S) as producer:
        for price, ts in [("1.00", 1_000), ("1.20", 5_000)]:
            producer.produce("prices", "apple", price, timestamp=ts)
    builder = StreamsBuilder()
    history = Stores.persistent_versioned_key_value_store("prices", 60_000)
    builder.table("prices", key_serde=S, value_serde=S, materialized=Materialized(history))
    with serving(builder.build(), log_path, "iq-versioned") as (url, _app):
        base = f"{url}/iq/stores/prices"
        status, body = get_json(f"{base}/keys/apple")
        assert status == 200
        assert (body["value"], body["timestamp"], body["valid_to"]) == ("1.20", 5_000, None)
        body = get_json(f"{base}/keys/apple?as_of=4000")[1]
        assert (body["value"], body["timestamp"], body["valid_to"]) == ("1.00", 1_000, 5_000)
        assert get_json(f"{base}/keys/apple?as_of=10")[1]["value"] is None
        status, body = get_json(f"{base}/all")
        assert status == 400 and "versioned" in body["error"]


def test_url_keys_of_the_other_java_serdes() -> None:
    """Keys given in a URL take the type of Short, Float, Boolean and UUID
    key serdes too, and UUIDs answer as their strings."""
    key = "123e4567-e89b-12d3-a456-426614174000"
    assert parse_key(serdes.Short(), "-7") == -7
    assert parse_key(serdes.Float(), "1.5") == 1.5
    assert parse_key(serdes.Boolean(), "true") is True
    assert parse_key(serdes.UUID(), key) == uuid.UUID(key)
    assert to_json(uuid.UUID(key)) == key
    for serde, text in ((serdes.Boolean(), "yes"), (serdes.UUID(), "x"), (serdes.Short(), "1.5")):
        with pytest.raises(QueryError, match=f"{text!r} is not a {type(serde).__name__} value"):
            parse_key(serde, text)
