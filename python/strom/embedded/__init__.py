"""The embedded log: Kafka's log design on local disk, so apps run with no broker.

Topics have partitions; a partition is a sequence of CRC-framed segment files
with offset and time indexes, recovered up to the last whole record after a
crash. Retention (``retention.ms`` / ``retention.bytes``) deletes whole
segments and compaction keeps the latest record per key, as in Kafka; consumer
groups commit offsets durably.

>>> from strom.embedded import EmbeddedLog
>>> log = EmbeddedLog("/tmp/strom-doc-log")  # doctest: +SKIP
>>> log.create_topic("orders", partitions=3)  # doctest: +SKIP
>>> with log.producer() as producer:  # doctest: +SKIP
...     producer.produce("orders", b"order-1", b'{"qty": 2}')
>>> consumer = log.consumer("billing", ["orders"])  # doctest: +SKIP
>>> for record in consumer.poll(timeout=1.0):  # doctest: +SKIP
...     print(record.partition, record.offset, record.key, record.value)
>>> consumer.commit()  # doctest: +SKIP

Records are :class:`ConsumedRecord` (``topic, partition, offset, timestamp,
key, value, headers``); the columnar :class:`RecordBatch` is the fast path for
many records (``read_batch``, ``poll_batches``).
"""

from strom._core import ConsumedRecord, RecordBatch
from strom.embedded.consumer import EmbeddedConsumer, OffsetAndMetadata
from strom.embedded.log import CompactionStats, EmbeddedLog
from strom.embedded.producer import EmbeddedProducer, Headers, ProducerRecord

__all__ = [
    "CompactionStats",
    "ConsumedRecord",
    "EmbeddedConsumer",
    "EmbeddedLog",
    "EmbeddedProducer",
    "Headers",
    "OffsetAndMetadata",
    "ProducerRecord",
    "RecordBatch",
]
