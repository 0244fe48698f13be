"""A read-only state store on a real broker: its task restores it from its
source topic, not a changelog, and only up to the offset it committed; the
records after that reach the store's processor again."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from tests.integration.kafka_support import (
    BASE_TS,
    app_config,
    client_config,
    create_topics,
    produce,
    unique,
)
from tests.kafka_harness import KafkaCluster
from tests.unit.test_read_only_state_store import PUT, PriceUpdater, builder, expected, prices

from strom import KafkaStreams, Topology, serdes

pytestmark = pytest.mark.kafka

S = serdes.String()


def test_a_read_only_store_is_restored_from_its_topic(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    topic, app_id = unique("prices"), unique("read-only")
    create_topics(boot, {topic: 2})
    topology = Topology().add_read_only_state_store(
        builder(),
        "prices-source",
        topic,
        "prices-updater",
        PriceUpdater,
        key_serde=S,
        value_serde=S,
    )
    first = [*prices(30), (b"k3", None), (b"k4", b"again")]
    later = [(b"k5", b"later"), (b"k40", b"v40")]
    runs = []
    # The second run starts from an empty state dir: no changelog topic to
    # restore from, the topic itself is read up to the committed offsets.
    for records, state_dir in ((first, "first"), (later, "second")):
        produce(boot, topic, [(k, v, BASE_TS + i) for i, (k, v) in enumerate(records)])
        PUT.clear()
        with KafkaStreams(topology, app_config(boot, app_id, str(tmp_path / state_dir))) as app:
            app.run_until_end(timeout=120)
            contents = {kv.key: kv.value for kv in app.store("prices").all()}
            metrics = app.metrics()
            runs.append((contents, metrics["restored-records"], sorted(PUT, key=str)))
    assert runs[0] == (
        expected(first),
        0,
        sorted(((k.decode(), v and v.decode()) for k, v in first), key=str),
    )
    assert runs[1] == (expected(first + later), len(first), [("k40", "v40"), ("k5", "later")])
    topics = AdminClient(client_config(boot)).list_topics(timeout=10).topics
    assert not [t for t in topics if t.startswith(app_id)], "no changelog topic"
