"""at_least_once commits input offsets without stopping to flush the
producer: an interval's offsets are committed once every record produced
before them is acknowledged (docs/kafka.md). This kills the app with SIGKILL
while its output waits unacknowledged in the client (a long ``linger.ms``
keeps it there across many commit intervals) and checks that every input
record below the committed offsets has its output in the sink: none was
committed past and lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.integration.kafka_support import create_topics, produce, read_all, unique
from tests.integration.test_kafka_faults import _committed, _while_alive
from tests.kafka_harness import REPO_ROOT, KafkaCluster
from tests.support import wait_until

RECORDS = 4000
PARTITIONS = 2
LINGER_MS = 1000


def test_at_least_once_commits_nothing_unacknowledged(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("copied"), unique("copies"), unique("unacked")
    create_topics(boot, {source: PARTITIONS, sink: PARTITIONS})
    produce(boot, source, ((f"k{i % 50}".encode(), f"v{i}".encode(), 0) for i in range(RECORDS)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "python"), str(REPO_ROOT)])
    app = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("kafka_passthrough_app.py")),
            boot,
            app_id,
            source,
            sink,
            str(tmp_path / "state"),
            str(LINGER_MS),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            _while_alive(lambda: sum(_committed(boot, app_id, source).values()) > 0, app),
            90,
            "a first commit",
        )
        # Mid-stream, past a commit: records produced since wait out their linger.
        wait_until(
            _while_alive(
                lambda: sum(_committed(boot, app_id, source).values()) >= RECORDS // 4, app
            ),
            90,
            "a quarter of the input to be committed",
        )
        app.send_signal(signal.SIGKILL)
        app.wait()
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
    committed = _committed(boot, app_id, source)
    assert sum(committed.values()) < RECORDS, "killed too late: everything was committed"
    inputs = read_all(boot, source, committed_only=False)
    outputs = {m.value() for m in read_all(boot, sink, committed_only=False)}
    lost = [
        (m.partition(), m.offset(), m.value())
        for m in inputs
        if m.offset() < committed[m.partition()] and m.value() not in outputs
    ]
    assert not lost, f"committed past {len(lost)} record(s) whose output was lost: {lost[:5]}"
    # The kill left output unsent: the check above had something to catch.
    assert len(outputs) < RECORDS
