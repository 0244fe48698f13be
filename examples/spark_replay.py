"""A Spark replay: the word count of examples/word_count.py replayed over its
input history on Spark, its results compared with the streaming app's, then
the streaming app bootstrapped to continue where the replay ended.

Needs the spark extra (pip install '.[spark]') and Java 17+.
Run on the embedded log: python examples/spark_replay.py [LOG_DIR]
"""

from __future__ import annotations

import os
import sys
import tempfile

from pyspark.sql import SparkSession

from strom import KafkaStreams, serdes
from strom.cli.demo import generate_lines, word_count_topology
from strom.embedded import EmbeddedLog
from strom.spark import replay


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="strom-replay-")
    log = EmbeddedLog(path)
    for topic in ("text-input", "word-counts"):
        if topic not in log.topics():
            log.create_topic(topic, partitions=2)
    with log.producer(value_serde=serdes.String()) as producer:
        producer.produce_batch("text-input", [(None, line) for line in generate_lines(2_000)])
    log.close()

    servers = f"embedded:{path}"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's workers run this Python
    spark = SparkSession.builder.master("local[2]").appName("strom example").getOrCreate()
    try:
        replayed = {"application.id": "wc-replayed", "bootstrap.servers": servers}
        with replay(word_count_topology(), spark, source=servers, config=replayed) as result:
            from_spark = {row["key"]: row["value"] for row in result.table("counts").collect()}
    finally:
        spark.stop()

    streamed = {"application.id": "wc-streamed", "bootstrap.servers": servers}
    with KafkaStreams(word_count_topology(), streamed) as app:
        app.run_until_end()
        from_stream = {kv.key: kv.value for kv in app.store("counts").all()}
    print(
        f"words: {len(from_spark)}, same counts on Spark and streaming: {from_spark == from_stream}"
    )
    top = sorted(from_spark.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    print("top 5:", top)
    if from_spark != from_stream:
        sys.exit(1)


if __name__ == "__main__":
    main()
