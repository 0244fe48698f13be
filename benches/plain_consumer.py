"""The ceiling for a Python consumer of one topic: a plain, tuned confluent-kafka
loop that only touches each record's key and value (issue 17's reference for
a stateless app's throughput).

usage: python benches/plain_consumer.py --bootstrap HOST:PORT --topic TOPIC --records N
"""

from __future__ import annotations

import argparse
import time
import uuid

from confluent_kafka import Consumer, TopicPartition

TUNED = {
    "fetch.wait.max.ms": 10,
    "max.partition.fetch.bytes": 10 << 20,
    "fetch.max.bytes": 100 << 20,
    "queued.min.messages": 1_000_000,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, required=True, help="read this many, then stop")
    args = parser.parse_args()
    consumer = Consumer(
        {"bootstrap.servers": args.bootstrap, "group.id": uuid.uuid4().hex, **TUNED}
    )
    partitions = consumer.list_topics(args.topic, timeout=10).topics[args.topic].partitions
    consumer.assign([TopicPartition(args.topic, p, 0) for p in partitions])
    got, started, cpu = 0, time.perf_counter(), time.process_time()
    while got < args.records:
        messages = consumer.consume(10_000, 1.0)
        for message in messages:
            message.key()
            message.value()
        got += len(messages)
    wall = time.perf_counter() - started
    consumer.close()
    print(
        f"{got:,} records in {wall:.2f} s: {got / wall:,.0f} records/s, "
        f"{time.process_time() - cpu:.2f} CPU-seconds"
    )


if __name__ == "__main__":
    main()
