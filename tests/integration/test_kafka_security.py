"""strom on a secured broker (``kafka_secured``: SCRAM users over SASL_SSL and
SASL_PLAINTEXT, a CA made by keytool, ACLs enforced with no allow-all), as
users holding exactly the ACLs docs/security.md lists (issue #25).

The first half runs the app as a user would: word count under both
guarantees, restore from changelogs, standbys, a rebalance, resets. The
second half has one test per failure mode of issue #25, each asserting the
behaviour the issue asks for: fail fast with the denied resource named, ERROR
rather than a retry loop, no state change when a reset is denied. An app that
is expected to fail runs in its own process (security_support.run_app), so a
hang ends the test after FAIL_WITHIN_S and its stderr can be counted.

Spark replay on the secured broker: test_kafka_security_spark.py.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.integration.kafka_support import word_count_topology
from tests.integration.security_support import (
    FAIL_WITHIN_S,
    RUN_TIMEOUT_S,
    WordCount,
    acl_commands,
    acl_sets,
    describe_apps,
    revoke,
    run_app,
    run_to_end,
    secured_app_config,
    start,
    text,
    wait_for,
    wait_for_counts,
)
from tests.kafka_harness import SASL_PLAINTEXT, SASL_SSL, KafkaCluster, generate_ca, java_properties

from strom import KafkaStreams, State
from strom.cli import main as strom_cli
from strom.errors import StromError
from strom.kafka import reset_application

GUARANTEES = ("at_least_once", "exactly_once_v2")


# --------------------------------------------------------------------------
# As a user would run it, with the documented ACLs


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_word_count_over_sasl_ssl(
    kafka_secured: KafkaCluster, tmp_path: Path, guarantee: str
) -> None:
    wc = WordCount(kafka_secured)
    wc.grant(*acl_sets(guarantee))
    wc.produce(text(800, seed=1))
    with wc.app(tmp_path, **{"processing.guarantee": guarantee}) as app:
        run_to_end(app)
        store = {kv.key: kv.value for kv in app.store("counts").all()}
    assert wc.counts() == wc.expected()
    assert store == wc.expected()


@pytest.mark.parametrize(
    ("protocol", "mechanism"), [(SASL_PLAINTEXT, "SCRAM-SHA-512"), (SASL_SSL, "PLAIN")]
)
def test_word_count_over_other_listeners_and_mechanisms(
    kafka_secured: KafkaCluster, tmp_path: Path, protocol: str, mechanism: str
) -> None:
    wc = WordCount(kafka_secured)
    wc.grant("streams")
    wc.produce(text(300, seed=2))
    config = secured_app_config(
        kafka_secured, "app", wc.app_id, tmp_path, protocol=protocol, mechanism=mechanism
    )
    assert config["security.protocol"] == protocol and config["sasl.mechanism"] == mechanism
    with KafkaStreams(word_count_topology(wc.source, wc.sink), config) as app:
        run_to_end(app)
    assert wc.counts() == wc.expected()


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_restore_from_changelogs_after_a_restart(
    kafka_secured: KafkaCluster, tmp_path: Path, guarantee: str
) -> None:
    """The restarted app has lost its local state: it restores the counts from
    the changelogs (the restore consumer reads by assignment, under no group
    ACL of its own) and counts on. Issue #25 mode 2: under exactly_once_v2
    with a literal group ACL this restart stalled, RUNNING with no tasks."""
    wc = WordCount(kafka_secured)
    wc.grant(*acl_sets(guarantee))
    wc.produce(text(400, seed=3))
    extra: dict[str, Any] = {"processing.guarantee": guarantee}
    with wc.app(tmp_path, **extra) as app:
        run_to_end(app)
    assert wc.counts() == wc.expected()

    shutil.rmtree(tmp_path)  # the changelogs are all that is left
    wc.produce(text(200, seed=4))
    app = wc.app(tmp_path, **extra)
    with app:
        start(app)
        wait_for_counts(wc, [app], RUN_TIMEOUT_S)
        assert app.state is State.RUNNING, describe_apps([app])
        metrics = app.metrics()
        assert metrics["assigned-tasks"] == 4, describe_apps([app])  # 2 sub-topologies x 2
        assert metrics["restored-records"] > 0


def test_standby_takes_over(kafka_secured: KafkaCluster, tmp_path: Path) -> None:
    """Two instances with a standby each; one stops, the other takes its
    tasks over from its warm standby (the standby consumer, too, reads by
    assignment under the app's documented ACLs) and counts on exactly."""
    wc = WordCount(kafka_secured)
    wc.grant("streams")
    wc.produce(text(600, seed=5))
    standby: dict[str, Any] = {"num.standby.replicas": 1}
    apps = [wc.app(tmp_path / "a", **standby), wc.app(tmp_path / "b", **standby)]
    with apps[0], apps[1]:
        for app in apps:
            start(app)
        wait_for_counts(wc, apps, RUN_TIMEOUT_S)

        def metric(name: str) -> int:
            return sum(a.metrics()[name] for a in apps)

        # Two stateful tasks (the counts), each with a standby on the other instance.
        wait_for(
            lambda: metric("assigned-tasks") == 4 and metric("standby-tasks") == 2,
            "four active tasks and two standbys",
            lambda: describe_apps(apps),
        )
        keeper = max(apps, key=lambda a: a.metrics()["standby-tasks"])
        leaver = apps[1 - apps.index(keeper)]
        wait_for(
            lambda: keeper.metrics()["standby-records"] > 0,
            "the standby to read the changelog",
            lambda: describe_apps(apps),
        )
        leaver.close()
        wc.produce(text(300, seed=6))
        wait_for(
            lambda: keeper.metrics()["assigned-tasks"] == 4 and keeper.state is State.RUNNING,
            "the remaining instance to take every task",
            lambda: describe_apps(apps),
        )
        wait_for_counts(wc, [keeper], RUN_TIMEOUT_S)


def test_rebalance_with_two_instances(kafka_secured: KafkaCluster, tmp_path: Path) -> None:
    """exactly_once_v2: a second instance joins while the first runs; the
    tasks spread, the first's transactional producer hands over, and the
    counts add up exactly."""
    wc = WordCount(kafka_secured)
    wc.grant("streams", "exactly-once")
    eos: dict[str, Any] = {"processing.guarantee": "exactly_once_v2"}
    first, second = wc.app(tmp_path / "a", **eos), wc.app(tmp_path / "b", **eos)
    apps = [first, second]
    with first, second:
        start(first)
        wc.produce(text(400, seed=7))
        wait_for_counts(wc, [first], RUN_TIMEOUT_S)
        start(second)
        wait_for(
            lambda: (
                all(a.metrics()["assigned-tasks"] == 2 for a in apps)
                and all(a.state is State.RUNNING for a in apps)
            ),
            "the four tasks to spread over both instances",
            lambda: describe_apps(apps),
        )
        wc.produce(text(400, seed=8))
        wait_for_counts(wc, apps, RUN_TIMEOUT_S)
        assert all(a.metrics()["records-processed"] > 0 for a in apps), describe_apps(apps)


def _reset_and_rerun(wc: WordCount, tmp_path: Path, reset: Callable[[], object]) -> None:
    """Counts once, resets, counts again: the second run starts from scratch,
    so the counts are those of one pass over the input, not doubled."""
    wc.produce(text(300, seed=9))
    with wc.app(tmp_path) as app:
        run_to_end(app)
    assert wc.counts() == wc.expected()
    reset()
    assert not (tmp_path / wc.app_id).exists()
    assert not {t for t in wc.topics() if t.startswith(f"{wc.app_id}-")}
    assert all(offset <= 0 for offset in wc.committed().values()), wc.committed()
    with wc.app(tmp_path) as app:
        run_to_end(app)
        assert app.metrics()["restored-records"] == 0
    assert wc.counts() == wc.expected()


@pytest.mark.parametrize("how", ["--config-file", "--set"])
def test_strom_reset_command(
    kafka_secured: KafkaCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    """Issue #25 mode 6: ``strom reset`` takes the security settings as
    Kafka's reset tool does (``--config-file FILE``) or one by one
    (``--set KEY=VALUE``), and runs as the app's user."""
    wc = WordCount(kafka_secured)
    wc.grant("streams")
    client = kafka_secured.client_config("app")
    servers = client.pop("bootstrap.servers")
    if how == "--config-file":
        properties = tmp_path / "app.properties"
        properties.write_text(java_properties(client))
        security = ["--config-file", str(properties)]
    else:
        security = [arg for k, v in client.items() for arg in ("--set", f"{k}={v}")]
    state_dir = tmp_path / "state"
    argv = [
        "reset", "--application-id", wc.app_id, "--bootstrap-servers", servers,
        "--input-topics", wc.source, "--state-dir", str(state_dir), *security,
    ]  # fmt: skip

    def reset() -> None:
        started = time.monotonic()
        try:
            code = strom_cli(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        out = capsys.readouterr()
        assert code == 0, (
            f"strom {' '.join(argv[:9])} {how} … exited {code} after "
            f"{time.monotonic() - started:.1f} s: {out.err.strip()[-600:]}"
        )

    _reset_and_rerun(wc, state_dir, reset)


def test_reset_application_with_client_config(kafka_secured: KafkaCluster, tmp_path: Path) -> None:
    wc = WordCount(kafka_secured)
    wc.grant("streams")
    client = kafka_secured.client_config("app")
    servers = client.pop("bootstrap.servers")
    _reset_and_rerun(
        wc,
        tmp_path,
        lambda: reset_application(
            wc.app_id,
            servers,
            input_topics=[wc.source],
            state_dir=tmp_path,
            client_config=client,
        ),
    )


# --------------------------------------------------------------------------
# Issue #25's failure modes: what each must do instead


def test_mode1_the_documented_acls_are_enough(
    kafka_secured: KafkaCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Mode 1: with exactly Kafka Streams' documented ACLs (no DescribeConfigs,
    a literal group ACL) the app starts, creates its internal topics, counts
    exactly, and purges the repartition records it has committed past, with
    no authorization error logged on the way."""
    wc = WordCount(kafka_secured)
    wc.grant("streams")
    wc.produce(text(500, seed=10))
    purge: dict[str, Any] = {"repartition.purge.interval.ms": 0}
    with wc.app(tmp_path, **purge) as app:
        run_to_end(app)
        assert {wc.repartition_topic, wc.changelog_topic} <= wc.topics()
        wc.produce(text(100, seed=11))
        run_to_end(app)  # commits again, past the purge interval: purges
        wait_for(
            lambda: all(low > 0 for low, _ in wc.watermarks(wc.repartition_topic)),
            f"the consumed records of {wc.repartition_topic} to be deleted",
            lambda: f"watermarks {wc.watermarks(wc.repartition_topic)}; " + describe_apps([app]),
            timeout=FAIL_WITHIN_S,
        )
    assert wc.counts() == wc.expected()
    denied = [r.getMessage() for r in caplog.records if re.search("authoriz", r.getMessage(), re.I)]
    assert not denied, denied


def test_a_denied_purge_warns_once_and_counts_on(
    kafka_secured: KafkaCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without Delete on the internal topics the app runs on and counts
    exactly; the denied purge of the repartition topic is a warning once,
    naming the topic and the grant, and a debug line on each later interval."""
    caplog.set_level(logging.DEBUG, logger="strom.kafka")
    wc = WordCount(kafka_secured)
    wc.grant("streams", without=["internal-delete"])

    def failures() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.getMessage().startswith("purging ")]

    purge: dict[str, Any] = {"repartition.purge.interval.ms": 0}
    with wc.app(tmp_path, **purge) as app:
        for seed in (30, 31, 32):  # three commits past new repartition records
            wc.produce(text(200, seed=seed))
            run_to_end(app)
        wait_for(
            lambda: len(failures()) >= 3,
            "three denied purges of the repartition topic to be logged",
            lambda: f"logged: {[r.getMessage() for r in failures()]}",
            timeout=FAIL_WITHIN_S,
        )
    assert wc.counts() == wc.expected()
    logged = failures()
    warned = [r.getMessage() for r in logged if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    assert wc.repartition_topic in warned[0] and "Delete" in warned[0], warned[0]
    assert re.search("authoriz", warned[0], re.I), warned[0]
    assert all(r.levelno == logging.DEBUG for r in logged if r.getMessage() not in warned)
    assert all(low == 0 for low, _ in wc.watermarks(wc.repartition_topic))


def test_mode2_a_task_that_cannot_restore_stops_the_app(
    kafka_secured: KafkaCluster, tmp_path: Path
) -> None:
    """Mode 2: a restart under exactly_once_v2 whose restore is denied (an
    explicit DENY of Read on the changelog) does not leave the app RUNNING
    with no tasks: it goes to ERROR, naming the changelog topic."""
    wc = WordCount(kafka_secured)
    wc.produce(text(300, seed=12))
    eos: dict[str, Any] = {"processing.guarantee": "exactly_once_v2"}
    with wc.app(tmp_path / "admin", user="admin", **eos) as app:  # fills the changelog
        run_to_end(app)
    deny = [
        "--add", "--deny-principal", "User:app", "--operation", "Read",
        "--topic", wc.changelog_topic,
    ]  # fmt: skip
    wc.grant("streams", "exactly-once", extra=[deny])
    outcome = run_app(wc.spec(wc.config(tmp_path / "app", **eos), "start"))
    assert not outcome.hung, outcome.describe()
    assert outcome.final_state == "ERROR", outcome.describe()
    assert wc.changelog_topic in outcome.message, outcome.describe()
    assert re.search("authoriz", outcome.message, re.I), outcome.describe()


def test_mode3_missing_write_on_the_output_under_eos_fails_once(
    kafka_secured: KafkaCluster, tmp_path: Path
) -> None:
    """Mode 3: without Write on the output topic (but allowed to describe it),
    exactly_once_v2 goes to ERROR naming the topic and the operation: no
    abort-and-reopen loop, no state flapping, no repartition records
    rewritten again and again. (The topic's description says what the
    principal may do, so this fails at startup; the next test revokes Write
    while the app runs.)"""
    wc = WordCount(kafka_secured)
    lines = text(300, seed=13)
    wc.produce(lines)
    describe = ["--add", "--allow-principal", "User:app", "--operation", "Describe"]
    wc.grant("streams", "exactly-once", without=["output"], extra=[[*describe, "--topic", wc.sink]])
    config = wc.config(tmp_path, **{"processing.guarantee": "exactly_once_v2"})
    outcome = run_app(wc.spec(config, "start"))
    words = sum(len(line.split()) for line in lines)
    written = sum(high for _, high in wc.watermarks(wc.repartition_topic))
    report = f"{outcome.describe()}\nrepartition records written: {written} for {words} words"
    assert not outcome.hung, report
    assert outcome.final_state == "ERROR", report
    assert wc.sink in outcome.message and re.search("authoriz", outcome.message, re.I), report
    assert re.search(r"\bwrite\b", outcome.message, re.I), report
    rebalances = [s for s in outcome.states if s[2] == "REBALANCING"]
    assert len(rebalances) <= 2, report
    # One attempt's worth (its records and transaction markers), not one per retry.
    assert written <= 2 * words, report


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_mode3_write_revoked_while_running_stops_the_app(
    kafka_secured: KafkaCluster, tmp_path: Path, guarantee: str
) -> None:
    """Mode 3 at run time: Write on the output is revoked while the app runs.
    The next write is denied: the app (under exactly_once_v2 after aborting
    its transaction once) goes to ERROR with an error naming the topic and
    Write, without reopening its tasks again and again or rewriting the
    repartition records."""
    wc = WordCount(kafka_secured)
    wc.grant(*acl_sets(guarantee))
    wc.produce(text(200, seed=17))
    transitions: list[str] = []
    app = wc.app(tmp_path, **{"processing.guarantee": guarantee})
    app.set_state_listener(lambda new, old: transitions.append(new.value))
    with app:
        start(app)
        wait_for_counts(wc, [app], RUN_TIMEOUT_S)
        revoke(kafka_secured, "app", "Write", wc.sink)
        before = len(transitions)
        written = sum(high for _, high in wc.watermarks(wc.repartition_topic))
        lines = text(200, seed=18)
        wc.produce(lines)
        wait_for(
            lambda: app.state is State.ERROR,
            "the app to stop with an authorization error",
            lambda: (
                f"transitions after the revoke: {transitions[before:]}; " + describe_apps([app])
            ),
            timeout=FAIL_WITHIN_S,
        )
        message = f"{type(app.exception).__name__}: {app.exception}"
    words = sum(len(line.split()) for line in lines)
    rewritten = sum(high for _, high in wc.watermarks(wc.repartition_topic)) - written
    report = (
        f"{message}; transitions after the revoke: {transitions[before:]}; "
        f"repartition records written after it: {rewritten} for {words} words"
    )
    assert wc.sink in message and re.search("authoriz", message, re.I), report
    assert re.search(r"\bwrite\b", message, re.I), report
    assert transitions[before:].count("REBALANCING") <= 1, report
    assert rewritten <= 2 * words, report


@pytest.mark.parametrize("failure", ["wrong-password", "wrong-ca", "wrong-mechanism"])
def test_mode4_authentication_and_tls_failures_fail_fast(
    kafka_secured: KafkaCluster, tmp_path: Path, failure: str
) -> None:
    """Mode 4: a wrong password, a CA that did not sign the broker's
    certificate, or a mechanism the broker does not enable stop the app
    within seconds with one exception that says which (not a metadata
    timeout), and librdkafka prints nothing on stderr by itself."""
    wc = WordCount(kafka_secured)  # no ACLs: it must not get that far
    wc.produce(text(20, seed=14))
    config = wc.config(tmp_path)
    expect = r"authenticat|SASL"
    if failure == "wrong-password":
        config["sasl.password"] = "not-the-password"
    elif failure == "wrong-mechanism":
        config["sasl.mechanism"] = "SCRAM-SHA-256"  # the broker enables SCRAM-SHA-512 and PLAIN
        expect = r"mechanism|SCRAM-SHA-256"
    else:
        config["ssl.ca.location"] = str(generate_ca(tmp_path / "other-ca", "other-ca").pem)
        expect = r"SSL|TLS|certificate"
    outcome = run_app(wc.spec(config, "run_until_end"))
    assert not outcome.hung, outcome.describe()
    assert outcome.error is not None, outcome.describe()
    assert re.search(expect, outcome.message, re.I), outcome.describe()
    assert not re.search("timed out|timeout", outcome.message, re.I), outcome.describe()
    # Fail fast: well inside the clients' 30-60 s timeouts that explained it before.
    assert outcome.elapsed < 20, outcome.describe()
    assert not outcome.raw_librdkafka_lines, outcome.describe()
    # Through logging, rate-limited: a handful of records, not one per retry.
    assert len(outcome.logged(r"authenticat|SSL|SASL|transport|disconnect")) <= 10, (
        outcome.describe()
    )


@pytest.mark.parametrize(
    ("missing", "guarantee"),
    [
        ("input", "at_least_once"),
        ("output", "at_least_once"),
        ("group", "at_least_once"),
        ("transactional-id", "exactly_once_v2"),
    ],
)
def test_mode5_a_denied_resource_is_named(
    kafka_secured: KafkaCluster, tmp_path: Path, missing: str, guarantee: str
) -> None:
    """Mode 5: without one of the documented ACLs the app fails fast with the
    denied resource (topic, group, transactional id) named as not
    authorized, never as a topic that does not exist."""
    wc = WordCount(kafka_secured)
    wc.grant(*acl_sets(guarantee), without=[missing])
    wc.produce(text(50, seed=15))
    outcome = run_app(wc.spec(wc.config(tmp_path, **{"processing.guarantee": guarantee}), "start"))
    resource = {
        "input": wc.source,
        "output": wc.sink,
        "group": wc.app_id,
        "transactional-id": wc.app_id,
    }[missing]
    kind = {"input": "topic", "output": "topic", "group": "group"}.get(missing, "transactional")
    assert not outcome.hung, outcome.describe()
    assert outcome.final_state == "ERROR", outcome.describe()
    assert resource in outcome.message, outcome.describe()
    assert re.search(kind, outcome.message, re.I), outcome.describe()
    assert re.search("authoriz", outcome.message, re.I), outcome.describe()
    assert not re.search(r"do(es)? not exist", outcome.message), outcome.describe()
    assert not outcome.raw_librdkafka_lines, outcome.describe()


def test_mode6_a_denied_reset_changes_nothing(kafka_secured: KafkaCluster, tmp_path: Path) -> None:
    """Mode 6: a reset whose user may not delete the internal topics fails
    before it changes anything, naming what it may not do: the committed
    offsets, the internal topics and the local state are as they were, and
    the next run does not count anything twice."""
    wc = WordCount(kafka_secured)
    wc.produce(text(300, seed=16))
    # The app ran (as the admin: only the reset is under test here).
    with wc.app(tmp_path, user="admin") as app:
        run_to_end(app)
    assert wc.counts() == wc.expected()
    offsets, topics = wc.committed(), wc.topics()
    internal = {t for t in topics if t.startswith(f"{wc.app_id}-")}
    assert internal and offsets and (tmp_path / wc.app_id).exists()

    wc.grant("streams", without=["internal-delete"])
    client = kafka_secured.client_config("app")
    servers = client.pop("bootstrap.servers")
    started = time.monotonic()
    try:
        reset_application(
            wc.app_id, servers, input_topics=[wc.source], state_dir=tmp_path, client_config=client
        )
        message = "(none: the reset succeeded)"
    except StromError as exc:
        message = f"{type(exc).__name__}: {exc}"
    took = time.monotonic() - started
    problems = []
    if not (re.search("delete", message, re.I) and any(t in message for t in internal)):
        problems.append("the error does not name the Delete it was denied and the topic")
    if wc.committed() != offsets:
        problems.append(f"committed offsets changed from {offsets} to {wc.committed()}")
    if not internal <= wc.topics():
        problems.append(f"internal topics deleted: {sorted(internal - wc.topics())}")
    if not (tmp_path / wc.app_id).exists():
        problems.append("local state removed")
    if not problems:
        with wc.app(tmp_path, user="admin") as app:
            run_to_end(app)
        if wc.counts() != wc.expected():
            problems.append("the next run counted records twice")
    assert not problems, f"after {took:.1f} s the reset raised {message}; " + "; ".join(problems)


def test_the_doc_has_the_acl_sets_the_suite_grants(kafka_secured: KafkaCluster) -> None:
    """The commands of docs/security.md parse, and carry the labels the tests
    above leave out one at a time."""
    variables = {
        "BOOTSTRAP": kafka_secured.bootstrap_servers,
        "ADMIN_CONFIG": "admin.properties",
        "PRINCIPAL": "User:app",
        "APPLICATION_ID": "wc",
        "INPUT_TOPIC": "in",
        "OUTPUT_TOPIC": "out",
    }
    labels = {
        name: [c.label for c in acl_commands(name, variables)]
        for name in ("streams", "exactly-once", "replay")
    }
    assert labels == {
        "streams": ["input", "output", "internal", "internal-delete", "group"],
        "exactly-once": ["transactional-id"],
        "replay": ["input"],
    }
