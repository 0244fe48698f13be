"""Spark replay on the secured broker (markers kafka and spark), as users
holding exactly the ACLs docs/security.md lists: issue #25 mode 7 (the
replay's readers used a fixed consumer group, so a read-only user could not
replay; a wrong password took 35 s and ended in a raw traceback)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pyspark.sql import SparkSession
from tests.integration.kafka_support import word_count_topology
from tests.integration.security_support import (
    FAIL_WITHIN_S,
    RUN_TIMEOUT_S,
    WordCount,
    run_to_end,
    text,
)
from tests.kafka_harness import KafkaCluster
from tests.spark.conftest import spark  # noqa: F401 - the Spark session fixture

from strom import KafkaStreams
from strom.errors import StromError
from strom.spark import replay

pytestmark = pytest.mark.spark

T = TypeVar("T")


def bounded(session: SparkSession, what: str, call: Callable[[], T], timeout: float) -> T:
    """``call()``, or a test failure (its Spark jobs cancelled) after ``timeout`` s."""
    done: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(call())
        except BaseException as exc:
            failed.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        session.sparkContext.cancelAllJobs()
        worker.join(30)
        pytest.fail(f"{what} did not finish within {timeout:.0f} s")
    if failed:
        raise failed[0]
    return done[0]


def _table(result: Any, store: str) -> dict[str, int]:
    return {row["key"]: row["value"] for row in result.table(store).collect()}


def test_mode7_a_read_only_user_replays(
    spark: SparkSession,  # noqa: F811 - the imported fixture
    kafka_secured: KafkaCluster,
) -> None:
    """The replay set (Read on the input topics, nothing else) is enough: the
    readers read by assignment, in no consumer group."""
    wc = WordCount(kafka_secured)
    wc.produce(text(300, seed=30))
    wc.grant("replay", user="reader")
    client = kafka_secured.client_config("reader")
    servers = client.pop("bootstrap.servers")
    config = {"application.id": wc.app_id, **client}

    def run() -> dict[str, int]:
        with replay(
            word_count_topology(wc.source, wc.sink), spark, source=servers, config=config
        ) as result:
            return _table(result, "counts")

    started = time.monotonic()
    try:
        table = bounded(spark, "the replay", run, RUN_TIMEOUT_S)
    except Exception as exc:
        message = re.sub(r"\s+", " ", str(exc))[:1500]
        pytest.fail(
            f"the replay as a read-only user failed after {time.monotonic() - started:.1f} s: "
            f"{type(exc).__name__}: {message}"
        )
    assert table == wc.expected()


def test_mode7_replay_then_bootstrap_then_stream_as_the_app(
    spark: SparkSession,  # noqa: F811 - the imported fixture
    kafka_secured: KafkaCluster,
    tmp_path: Path,
) -> None:
    """The first half of the input replayed on Spark, bootstrapped, the rest
    streamed by the app, all as the app's user with the documented ACLs: the
    app continues where the replay ended (its offsets committed for the app's
    own group), so nothing is counted twice."""
    wc = WordCount(kafka_secured)
    wc.produce(text(400, seed=31))
    wc.grant("streams")
    half = {(wc.source, p): high // 2 for p, (_, high) in enumerate(wc.watermarks(wc.source))}
    config = wc.config(tmp_path)
    topology = word_count_topology(wc.source, wc.sink)

    def run_and_bootstrap() -> None:
        with replay(
            topology,
            spark,
            source=config["bootstrap.servers"],
            config=config,
            end_offsets=half,
            changelogs=True,
        ) as result:
            result.bootstrap(config)

    started = time.monotonic()
    try:
        bounded(spark, "the replay and bootstrap", run_and_bootstrap, RUN_TIMEOUT_S)
    except Exception as exc:
        message = re.sub(r"\s+", " ", str(exc))[:1500]
        pytest.fail(
            f"replay + bootstrap as the app failed after {time.monotonic() - started:.1f} s: "
            f"{type(exc).__name__}: {message}"
        )
    assert {tp: offset for tp, offset in wc.committed().items() if offset >= 0} == half

    with KafkaStreams(topology, config) as app:
        run_to_end(app)
        store = {kv.key: kv.value for kv in app.store("counts").all()}
    assert store == wc.expected()
    # The output has the words of the streamed half, at their full counts.
    counts = wc.counts()
    assert counts and all(counts[word] == wc.expected()[word] for word in counts)


def test_mode7_a_wrong_password_fails_fast(
    spark: SparkSession,  # noqa: F811 - the imported fixture
    kafka_secured: KafkaCluster,
) -> None:
    """A replay with a wrong password fails within seconds with a StromError
    that says authentication failed, not after a timeout with a raw
    traceback."""
    wc = WordCount(kafka_secured)
    wc.produce(text(20, seed=32))
    wc.grant("replay", user="reader")
    client = kafka_secured.client_config("reader", password="not-the-password")
    servers = client.pop("bootstrap.servers")
    config = {"application.id": wc.app_id, **client}

    def run() -> None:
        with replay(word_count_topology(wc.source, wc.sink), spark, source=servers, config=config):
            pass

    started = time.monotonic()
    with pytest.raises(Exception) as failure:
        bounded(spark, "the replay", run, FAIL_WITHIN_S + 30)
    took = time.monotonic() - started
    message = re.sub(r"\s+", " ", str(failure.value))
    report = f"after {took:.1f} s: {type(failure.value).__name__}: {message[:1500]}"
    assert isinstance(failure.value, StromError), report
    assert re.search(r"authenticat|SASL", message, re.I), report
    assert took < 20, report
