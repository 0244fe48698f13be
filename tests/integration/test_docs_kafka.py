"""The guides' programs that need a broker (``<!-- requires: kafka -->``,
docs/writing-docs.md), run as written against the harness broker. Before
(issue #23 point 7): docs/kafka.md's example had no imports, no topology, no
topic creation and a replication factor of 3, which a one-broker cluster
refuses."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from tests.docs.snippets import ROOT, Program, failure, printed, programs, python_blocks
from tests.integration.kafka_support import latest_by_key, read_all
from tests.kafka_harness import KafkaCluster

from strom import serdes

KAFKA = [p for p in programs() if "kafka" in p.requires]
S, L = serdes.String(), serdes.Long()


def run(program: Program, kafka: KafkaCluster, workdir: Path) -> str:
    env = {"BOOTSTRAP": kafka.bootstrap_servers, "PYTHONPATH": str(ROOT)}
    done = program.run(workdir, env=env)
    assert done.returncode == 0, failure(program, done)
    return done.stdout


def test_the_kafka_guide_opens_with_a_program_run_here() -> None:
    (opening, *_) = python_blocks(ROOT / "docs" / "kafka.md")
    assert [p.blocks for p in KAFKA if p.blocks[0] == opening] == [[opening]]


@pytest.mark.parametrize("program", KAFKA, ids=[p.where for p in KAFKA])
def test_the_kafka_programs_run_as_written(
    program: Program, kafka: KafkaCluster, tmp_path: Path
) -> None:
    stdout = run(program, kafka, tmp_path / "work")
    if program.blocks[0].path.name == "kafka.md":
        # The word count's results, checked against the topics themselves.
        store = printed(stdout, "counts in the store:")
        output = printed(stdout, "last update per word in word-counts:")
        lines = [
            S.deserialize("", m.value()) for m in read_all(kafka.bootstrap_servers, "text-input")
        ]
        assert store == output == Counter(w for line in lines for w in str(line).split())
        on_broker = latest_by_key(read_all(kafka.bootstrap_servers, "word-counts"), S, L)
        assert on_broker == output
