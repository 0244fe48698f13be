"""Fixtures for tests against a real Apache Kafka broker (marker ``kafka``).

``kafka`` is one KRaft node for the whole session; ``kafka_cluster3`` is a
three-node cluster and ``kafka_secured`` a secured node (SASL over TLS, ACLs
enforced), each started only when a test asks for it. All come from
tests/kafka_harness.py. If a broker does not come up the fixture fails the
tests that need it (it never skips): CI must not go green without Kafka.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.kafka_harness import DEFAULT_START_TIMEOUT, KafkaCluster, KafkaHarnessError

HERE = Path(__file__).resolve().parent

START_TIMEOUT = float(os.environ.get("STROM_KAFKA_START_TIMEOUT", DEFAULT_START_TIMEOUT))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything under tests/integration needs the broker, so it carries the
    # marker without each module having to say so. This hook sees the whole
    # session's items; only ours are marked.
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.kafka)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report: pytest.TestReport = yield
    if report.failed:
        # Broker logs explain most Kafka test failures (fenced, no leader,
        # coordinator not available...): attach their tail to the report.
        seen: set[int] = set()
        # Public fixture names first, so the section says "kafka", not "_kafka_session".
        funcargs = sorted(getattr(item, "funcargs", {}).items(), key=lambda kv: kv[0][:1] == "_")
        for name, value in funcargs:
            if isinstance(value, KafkaCluster) and id(value) not in seen:
                seen.add(id(value))
                report.sections.append((f"kafka broker log ({name})", value.log_tail(80)))
    return report


def _start(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    brokers: int,
    security: str | None = None,
) -> KafkaCluster:
    cluster = KafkaCluster(
        tmp_path_factory.mktemp(name),
        start_timeout=START_TIMEOUT,
        # Transactions of killed app instances are aborted within a second of
        # their timeout (default: checked every 10 s), so fault tests finish sooner.
        broker_config={"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"},
        security=security,
    )
    try:
        cluster.start(brokers=brokers)
    except KafkaHarnessError as e:
        # Fail, not skip: the harness is part of the test suite.
        what = f"{brokers} node(s)" + (f", {security}" if security else "")
        pytest.fail(f"Kafka ({what}) did not start: {e}", pytrace=False)
    return cluster


@pytest.fixture(scope="session")
def _kafka_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = _start(tmp_path_factory, "kafka", 1)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def _kafka_cluster3_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = _start(tmp_path_factory, "kafka3", 3)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def _kafka_secured_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = _start(tmp_path_factory, "kafka-secured", 1, security="SASL_SSL")
    yield cluster
    cluster.stop()


def _healthy(cluster: KafkaCluster) -> KafkaCluster:
    # A broker-failure test may leave a node down (or a node may have died):
    # bring it back before the next test rather than fail that one mysteriously.
    try:
        cluster.ensure_running(timeout=START_TIMEOUT)
    except KafkaHarnessError as e:
        pytest.fail(f"Kafka node could not be restarted: {e}", pytrace=False)
    return cluster


@pytest.fixture
def kafka(_kafka_session: KafkaCluster) -> KafkaCluster:
    """A single-node Kafka shared by the session: ``kafka.bootstrap_servers``."""
    return _healthy(_kafka_session)


@pytest.fixture
def kafka_cluster3(_kafka_cluster3_session: KafkaCluster) -> KafkaCluster:
    """A three-node Kafka shared by the session; ``stop_broker(i)``/``start_broker(i)``
    for broker-failure tests (nodes left stopped are restarted before the next test)."""
    return _healthy(_kafka_cluster3_session)


@pytest.fixture
def kafka_secured(_kafka_secured_session: KafkaCluster) -> KafkaCluster:
    """A secured single-node Kafka shared by the session: SASL_SSL (and
    SASL_PLAINTEXT) listeners, SCRAM users ``admin`` (a super user), ``app`` and
    ``reader``, ACLs enforced. ``client_config(user)`` connects;
    ``kafka_acls(...)`` grants (see tests/integration/security_support.py)."""
    return _healthy(_kafka_secured_session)
