"""The embedded log: Kafka's log design on local disk, so apps run with no broker.

Topics have partitions; a partition is a sequence of CRC-framed segment files
with offset and time indexes, recovered up to the last whole record after a
crash. Retention (``retention.ms`` / ``retention.bytes``) deletes whole
segments and compaction keeps the latest record per key, as in Kafka; consumer
groups commit offsets durably.

>>> from strom import serdes
>>> from strom.embedded import EmbeddedLog
>>> log = EmbeddedLog("/tmp/strom-doc-log")  # doctest: +SKIP
>>> log.create_topic("orders", partitions=3)  # doctest: +SKIP
>>> with log.producer(serdes.String(), serdes.Json()) as producer:  # doctest: +SKIP
...     producer.produce("orders", "order-1", {"qty": 2})
>>> for record in log.records("orders", key_serde=serdes.String(),  # doctest: +SKIP
...                           value_serde=serdes.Json()):
...     print(record.partition, record.offset, record.key, record.value)
>>> consumer = log.consumer("billing", ["orders"])  # doctest: +SKIP
>>> for record in consumer.poll(timeout=1.0):  # doctest: +SKIP
...     print(record.partition, record.offset, record.key, record.value)
>>> consumer.commit()  # doctest: +SKIP

A producer without serdes takes ``bytes``; consumers, ``read`` and
``records`` without serdes give :class:`ConsumedRecord` (``topic, partition,
offset, timestamp, key, value, headers``) with ``bytes``, and ``records``
with serdes gives :class:`TypedRecord` (the same fields, deserialized). The
columnar :class:`RecordBatch` is the fast path for many records
(``read_batch``, ``poll_batches``).
"""

from strom._core import ConsumedRecord, RecordBatch
from strom.embedded.consumer import EmbeddedConsumer, OffsetAndMetadata
from strom.embedded.log import CompactionStats, EmbeddedLog
from strom.embedded.producer import EmbeddedProducer, Headers, ProducerRecord
from strom.embedded.records import TypedRecord
from strom.embedded.reset import ResetResult, reset_application

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
    "ResetResult",
    "TypedRecord",
    "reset_application",
]
