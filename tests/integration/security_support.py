"""Helpers for the tests on the secured broker (``kafka_secured``).

- ``acl_commands``/``grant``: the ``kafka-acls`` commands of docs/security.md,
  read from the page and run as written (variables filled in), so the suite
  grants exactly what the documentation tells users to grant.
- ``run_app``: a strom app in its own process (tests/integration/secured_app.py),
  bounded in time, with what it did on record: how long until it failed and
  how, its state changes, its log records, and what reached the raw stderr
  (librdkafka's own log lines are the ones that start with ``%<level>|``).
- ``WordCount``: a word count's topics, input and expected counts, set up
  and inspected as the admin, run as a user.
"""

from __future__ import annotations

import json
import random
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from tests.integration.kafka_support import (
    BASE_TS,
    app_config,
    create_topics,
    latest_by_key,
    produce,
    read_all,
    unique,
    word_count_topology,
)
from tests.kafka_harness import REPO_ROOT, KafkaCluster

from strom import KafkaStreams, State, serdes

SECURITY_DOC = REPO_ROOT / "docs" / "security.md"

# A hang must fail the test, not the suite: what an app may take to fail.
FAIL_WITHIN_S = 30.0

_LIBRDKAFKA_LINE = re.compile(r"^%\d+\|")


# --------------------------------------------------------------------------
# ACLs as docs/security.md lists them


@dataclass(frozen=True)
class AclCommand:
    """One ``kafka-acls`` command of the page: its label (the comment above
    it, up to the colon) and its arguments with the variables filled in."""

    label: str
    args: tuple[str, ...]


def acl_commands(set_name: str, variables: Mapping[str, str]) -> list[AclCommand]:
    """The commands of the ``<!-- acl-set: set_name -->`` block of docs/security.md."""
    text = SECURITY_DOC.read_text()
    marker = f"<!-- acl-set: {set_name} -->"
    if marker not in text:
        raise AssertionError(f"{SECURITY_DOC} has no {marker!r} block")
    block = text.split(marker, 1)[1]
    match = re.match(r"\s*```sh\n(.*?)```", block, re.S)
    if match is None:
        raise AssertionError(f"{marker!r} in {SECURITY_DOC} is not followed by a ```sh block")

    def fill(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in variables:
            raise AssertionError(f"{SECURITY_DOC}: no value for ${name} in the {set_name} ACLs")
        return variables[name]

    commands: list[AclCommand] = []
    label = ""
    for raw in match.group(1).replace("\\\n", " ").splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            label = line.lstrip("# ").split(":", 1)[0]
            continue
        words = shlex.split(re.sub(r"\$\{(\w+)\}|\$(\w+)", fill, line))
        if words[:1] != ["kafka-acls"] or not label:
            raise AssertionError(f"{SECURITY_DOC}: not a labelled kafka-acls command: {line!r}")
        commands.append(AclCommand(label, tuple(words[1:])))
        label = ""
    return commands


def acl_sets(guarantee: str) -> list[str]:
    """The ACL sets of docs/security.md an app with ``guarantee`` needs."""
    return ["streams", "exactly-once"] if guarantee == "exactly_once_v2" else ["streams"]


def grant(
    cluster: KafkaCluster,
    sets: Sequence[str],
    *,
    user: str,
    application_id: str,
    input_topic: str = "",
    output_topic: str = "",
    without: Sequence[str] = (),
    extra: Sequence[Sequence[str]] = (),
) -> list[AclCommand]:
    """Runs the commands of the ACL ``sets`` for ``user`` and the app, but
    those labelled in ``without``, plus ``extra`` kafka-acls argument lists
    (tests that need more than the page); returns when the broker enforces
    them all."""
    variables = {
        "BOOTSTRAP": cluster.bootstrap_servers,
        "ADMIN_CONFIG": str(cluster.command_config()),
        "PRINCIPAL": f"User:{user}",
        "APPLICATION_ID": application_id,
        "INPUT_TOPIC": input_topic,
        "OUTPUT_TOPIC": output_topic,
    }
    every = [command for name in sets for command in acl_commands(name, variables)]
    unknown = set(without) - {c.label for c in every}
    assert not unknown, f"no ACL command labelled {sorted(unknown)} in the sets {list(sets)}"
    commands = [c for c in every if c.label not in without]
    connect = ["--bootstrap-server", cluster.bootstrap_servers]
    connect += ["--command-config", str(cluster.command_config())]
    commands += [AclCommand("extra", (*connect, *args)) for args in extra]
    outputs = cluster.kafka_acls(*(c.args for c in commands))
    _await_bindings(cluster, {b for out in outputs for b in _added_bindings(out)})
    return commands


Binding = tuple[str, str, str, str, str, str]  # type, name, pattern, principal, op, permission

_RESOURCE = re.compile(r"resourceType=(\w+), name=(.*?), patternType=(\w+)\)")
_ENTRY = re.compile(r"\(principal=(.*?), host=.*?, operation=(\w+), permissionType=(\w+)\)")


def _added_bindings(output: str) -> set[Binding]:
    """The ACLs kafka-acls says it added."""
    found: set[Binding] = set()
    resource: tuple[str, str, str] | None = None
    for line in output.splitlines():
        if (r := _RESOURCE.search(line)) is not None:
            kind = "BROKER" if r.group(1) == "CLUSTER" else r.group(1)  # confluent-kafka's name
            resource = (kind, r.group(2), r.group(3))
        elif (e := _ENTRY.search(line)) is not None and resource is not None:
            found.add((*resource, e.group(1), e.group(2), e.group(3)))
    assert found, f"kafka-acls added nothing:\n{output}"
    return found


def revoke(cluster: KafkaCluster, user: str, operation: str, topic: str) -> None:
    """Removes the literal ACL that allows ``user`` ``operation`` on
    ``topic``; returns when the broker no longer has it."""
    connect = ["--bootstrap-server", cluster.bootstrap_servers]
    connect += ["--command-config", str(cluster.command_config())]
    principal = f"User:{user}"
    cluster.kafka_acls(
        [*connect, "--remove", "--force", "--allow-principal", principal,
         "--operation", operation, "--topic", topic]
    )  # fmt: skip
    binding = ("TOPIC", topic, "LITERAL", principal, operation.upper(), "ALLOW")
    _await_bindings(cluster, {binding}, present=False)


def _await_bindings(cluster: KafkaCluster, expected: set[Binding], present: bool = True) -> None:
    """Waits until the broker's authorizer has every binding (they arrive
    through the metadata log a moment after the tool returns), or (not
    ``present``) none of them."""
    admin = AdminClient(dict[str, Any](cluster.client_config()))
    every = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    deadline = time.monotonic() + FAIL_WITHIN_S
    while True:
        bindings = admin.describe_acls(every, request_timeout=10).result()
        seen = {
            (
                b.restype.name,
                b.name,
                b.resource_pattern_type.name,
                b.principal,
                b.operation.name,
                b.permission_type.name,
            )
            for b in bindings
        }
        missing = expected - seen if present else expected & seen
        if not missing:
            return
        if time.monotonic() > deadline:
            what = "not in effect" if present else "still in effect"
            pytest.fail(f"ACLs {what} after {FAIL_WITHIN_S:.0f} s: {sorted(missing)}")
        time.sleep(0.05)


# --------------------------------------------------------------------------
# Apps as a user


def secured_app_config(
    cluster: KafkaCluster,
    user: str,
    application_id: str,
    state_dir: Path | str,
    *,
    protocol: str | None = None,
    mechanism: str | None = None,
    password: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """kafka_support.app_config for ``user`` on the secured cluster: the
    security settings as plain client keys, as docs/security.md shows."""
    client: dict[str, Any] = cluster.client_config(
        user,
        protocol=protocol,
        password=password,
        **({"mechanism": mechanism} if mechanism else {}),
    )
    servers = client.pop("bootstrap.servers")
    return app_config(servers, application_id, str(state_dir), **extra) | client


@dataclass
class Outcome:
    """What an app in its own process did (see secured_app.py)."""

    spec: dict[str, Any]
    elapsed: float
    hung: bool
    error: dict[str, Any] | None
    states: list[list[Any]]
    final_state: str
    processed: int
    assigned: int
    logs: list[str]
    stderr: str
    exit_code: int | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def raw_librdkafka_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if _LIBRDKAFKA_LINE.match(line)]

    @property
    def message(self) -> str:
        return "" if self.error is None else str(self.error["message"])

    def error_is(self, *names: str) -> bool:
        """Whether the error is (a subclass of) one of the classes ``names``."""
        return self.error is not None and bool(set(names) & set(self.error["classes"]))

    def logged(self, pattern: str) -> list[str]:
        return [line for line in self.logs if re.search(pattern, line, re.I)]

    def describe(self) -> str:
        """Everything a failure message should show."""
        raw = self.raw_librdkafka_lines
        transitions = " ".join(f"{t:.1f}s:{new}" for t, _, new in self.states[:40])
        if len(self.states) > 40:
            transitions += f" … ({len(self.states)} in all)"
        error = (
            "none"
            if self.error is None
            else f"{'/'.join(self.error['classes'][:3])}: {self.error['message']}"
        )
        hung = " (still running: stopped by the test)" if self.hung else ""
        lines = [
            f"after {self.elapsed:.1f} s{hung}",
            f"error: {error}",
            f"state: {self.final_state}; transitions: {transitions or 'none'}",
            f"records processed: {self.processed}; assigned tasks: {self.assigned}",
            f"log records: {len(self.logs)}; raw librdkafka lines on stderr: {len(raw)}",
        ]
        lines += [f"  log: {line}" for line in self.logs[:12]]
        if len(self.logs) > 12:
            lines.append(f"  log: … {len(self.logs) - 12} more; last: {self.logs[-1]}")
        lines += [f"  stderr: {line}" for line in raw[:5]]
        other = [ln for ln in self.stderr.splitlines() if not _LIBRDKAFKA_LINE.match(ln)]
        lines += [f"  stderr (other): {line}" for line in other[-8:]]
        return "\n".join(lines)


def run_app(spec: dict[str, Any], limit: float = FAIL_WITHIN_S) -> Outcome:
    """Runs secured_app.py with ``spec`` (see there); it stops itself after
    ``limit`` seconds (reporting ``hung``) and is killed if even that fails."""
    spec = {**spec, "limit": limit}
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tests.integration.secured_app"],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            timeout=limit + 30,
            check=False,
        )
        stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out, err = exc.stdout or "", exc.stderr or ""
        stdout = out if isinstance(out, str) else out.decode("utf-8", "replace")
        stderr = err if isinstance(err, str) else err.decode("utf-8", "replace")
        code = None
    result = next(
        (json.loads(line[7:]) for line in stdout.splitlines() if line.startswith("RESULT ")),
        None,
    )
    if result is None:
        return Outcome(
            spec, time.monotonic() - started, True, None, [], "unknown", 0, 0, [], stderr, code,
        )  # fmt: skip
    return Outcome(
        spec,
        result["elapsed"],
        result["hung"],
        result["error"],
        result["states"],
        result["final_state"],
        result["processed"],
        result["assigned"],
        result["logs"],
        stderr,
        code,
        result.get("extra", {}),
    )


# --------------------------------------------------------------------------
# A word count on the secured cluster

WORDS = [f"w{i}" for i in range(30)]
# A normal run's bound (a loaded CI machine included); failures get FAIL_WITHIN_S.
RUN_TIMEOUT_S = 90.0


def text(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 6))) for _ in range(n)]


@dataclass
class WordCount:
    """A word count app's topics and input on the secured cluster; setup and
    inspection act as the admin (a super user), the app as ``user``."""

    cluster: KafkaCluster
    app_id: str = field(default_factory=lambda: unique("wc"))
    source: str = field(default_factory=lambda: unique("lines"))
    sink: str = field(default_factory=lambda: unique("counts"))
    lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        create_topics(self.admin_config, {self.source: 2, self.sink: 2})

    @property
    def admin_config(self) -> dict[str, Any]:
        return dict(self.cluster.client_config())

    @property
    def repartition_topic(self) -> str:
        return f"{self.app_id}-counts-repartition"

    @property
    def changelog_topic(self) -> str:
        return f"{self.app_id}-counts-changelog"

    def produce(self, lines: list[str]) -> None:
        start = len(self.lines)
        records = ((None, line.encode(), BASE_TS + start + i) for i, line in enumerate(lines))
        produce(self.admin_config, self.source, records)
        self.lines += lines

    def expected(self) -> dict[str, int]:
        return dict(Counter(word for line in self.lines for word in line.split()))

    def counts(self) -> dict[str, int]:
        """The latest count per word on the output topic (committed records)."""
        messages = read_all(self.admin_config, self.sink)
        return latest_by_key(messages, serdes.String(), serdes.Long())

    def grant(
        self,
        *sets: str,
        user: str = "app",
        without: Sequence[str] = (),
        extra: Sequence[Sequence[str]] = (),
    ) -> None:
        grant(
            self.cluster,
            sets,
            user=user,
            application_id=self.app_id,
            input_topic=self.source,
            output_topic=self.sink,
            without=without,
            extra=extra,
        )

    def config(self, state_dir: Path, user: str = "app", **extra: Any) -> dict[str, Any]:
        return secured_app_config(self.cluster, user, self.app_id, state_dir, **extra)

    def app(self, state_dir: Path, user: str = "app", **extra: Any) -> KafkaStreams:
        return KafkaStreams(
            word_count_topology(self.source, self.sink), self.config(state_dir, user, **extra)
        )

    def spec(self, config: dict[str, Any], action: str, **more: Any) -> dict[str, Any]:
        """What run_app takes for this app."""
        topology = {"kind": "word_count", "source": self.source, "sink": self.sink}
        return {"config": config, "topology": topology, "action": action, **more}

    def committed(self) -> dict[tuple[str, int], int]:
        admin = AdminClient(self.admin_config)
        request = [ConsumerGroupTopicPartitions(self.app_id)]
        found = admin.list_consumer_group_offsets(request)[self.app_id].result()
        return {(tp.topic, tp.partition): tp.offset for tp in found.topic_partitions or []}

    def topics(self) -> set[str]:
        admin = AdminClient(self.admin_config)
        return set(admin.list_topics(timeout=10).topics)

    def watermarks(self, topic: str) -> list[tuple[int, int]]:
        consumer = Consumer(self.admin_config | {"group.id": unique("probe")})
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            return [
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                for p in sorted(partitions)
            ]
        finally:
            consumer.close()


def describe_apps(apps: Sequence[KafkaStreams]) -> str:
    parts = []
    for i, app in enumerate(apps):
        try:
            metrics = app.metrics()
            tasks = (
                f"tasks {metrics.get('assigned-tasks')}, standbys {metrics.get('standby-tasks')}"
            )
            done = f"processed {metrics.get('records-processed')}"
        except Exception as exc:
            tasks, done = f"metrics failed: {exc}", ""
        parts.append(
            f"instance {i}: {app.state.value}, {tasks}, {done}, exception {app.exception!r}"
        )
    return "; ".join(parts)


def wait_for(
    condition: Callable[[], bool],
    what: str,
    describe: Callable[[], str],
    timeout: float = RUN_TIMEOUT_S,
) -> None:
    """Polls ``condition``; on timeout fails with ``describe()`` (what the apps were doing)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}: {describe()}")
        time.sleep(0.2)


def wait_for_counts(wc: WordCount, apps: Sequence[KafkaStreams], timeout: float) -> None:
    def report() -> str:
        got, expected = wc.counts(), wc.expected()
        wrong = {w: (got.get(w), n) for w, n in expected.items() if got.get(w) != n}
        return f"{len(wrong)} words wrong (got, expected): {dict(list(wrong.items())[:5])}; " + (
            describe_apps(apps)
        )

    def exact() -> bool:
        if any(app.state is State.ERROR for app in apps):
            pytest.fail(f"an instance failed: {describe_apps(apps)}")
        return wc.counts() == wc.expected()

    wait_for(exact, "exact counts", report, timeout)


def start(app: KafkaStreams) -> None:
    try:
        app.start()
    except Exception as exc:
        pytest.fail(f"start() failed: {type(exc).__name__}: {exc}", pytrace=False)


def run_to_end(app: KafkaStreams, timeout: float = RUN_TIMEOUT_S) -> None:
    try:
        app.run_until_end(timeout=timeout)
    except Exception as exc:
        pytest.fail(f"run_until_end failed: {type(exc).__name__}: {exc}", pytrace=False)
