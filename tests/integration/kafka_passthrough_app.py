"""A stateless strom app in its own process, for the fault tests (killed
with SIGKILL): ``python kafka_passthrough_app.py BOOTSTRAP APP_ID SOURCE SINK
STATE_DIR LINGER_MS`` copies SOURCE to SINK under at_least_once until it is
killed. Each record sleeps a little, so that a test can kill it mid-stream;
``LINGER_MS`` keeps produced records waiting in the client that long before
they are sent, so that offsets are committed while output is unacknowledged."""

from __future__ import annotations

import sys
import time

from tests.integration.kafka_support import app_config

from strom import KafkaStreams, StreamsBuilder, serdes


def main() -> None:
    bootstrap, app_id, source, sink, state_dir, linger_ms = sys.argv[1:7]
    config = app_config(
        bootstrap,
        app_id,
        state_dir,
        **{
            "processing.guarantee": "at_least_once",
            "commit.interval.ms": 100,
            "poll.max.records": 20,
            "producer.linger.ms": int(linger_ms),
        },
    )
    s = serdes.String()

    def slowly(value: str) -> str:
        time.sleep(0.001)
        return value

    builder = StreamsBuilder()
    builder.stream(source, key_serde=s, value_serde=s).map_values(slowly).to(
        sink, key_serde=s, value_serde=s
    )
    KafkaStreams(builder.build(), config).run()


if __name__ == "__main__":
    main()
