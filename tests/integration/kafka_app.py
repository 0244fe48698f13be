"""A strom app in its own process, for the fault tests (killed with SIGKILL):
``python kafka_app.py BOOTSTRAP APP_ID SOURCE SINK STATE_DIR GUARANTEE``
runs the windowed count of kafka_support until it is killed. Each record
sleeps a little, so that a test can kill it mid-stream."""

from __future__ import annotations

import sys
import time

from tests.integration.kafka_support import app_config, windowed_count_topology

from strom import KafkaStreams


def main() -> None:
    bootstrap, app_id, source, sink, state_dir, guarantee = sys.argv[1:7]
    config = app_config(
        bootstrap,
        app_id,
        state_dir,
        **{
            "processing.guarantee": guarantee,
            "poll.max.records": 20,
            "producer.transaction.timeout.ms": 5000,
        },
    )
    topology = windowed_count_topology(source, sink, slow=lambda: time.sleep(0.002))
    KafkaStreams(topology, config).run()


if __name__ == "__main__":
    main()
