"""Interactive queries across two instances on a real broker: each learns
the other's ``application.server``, tasks and standbys from the group
(client ids, strom.kafka.instances); every key is answered correctly from either
instance (forwarded to the one running its partition), scans gather every
partition, and after one instance closes and its tasks move, the other
answers everything itself."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient
from tests.integration.kafka_support import BASE_TS, app_config, create_topics, produce, unique
from tests.kafka_harness import KafkaCluster, free_ports
from tests.support import get_json, wait_until

from strom import KafkaStreams, StreamsBuilder, Topology, serdes
from strom.metadata import HostInfo
from strom.query import FailureReason, KeyQuery, StateQueryRequest
from strom.streams import State

S = serdes.String()
PARTITIONS = 4
KEYS = [f"key-{i}" for i in range(60)]
TIMEOUT = 120.0


def count_topology(source: str) -> Topology:
    builder = StreamsBuilder()
    builder.stream(source, key_serde=S, value_serde=S).group_by_key().count("counts")
    return builder.build()


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def unfollowed(url: str) -> tuple[int, Any, str]:
    """Status, body and Location of a request whose redirect is not followed."""
    opener = urllib.request.build_opener(_NoRedirects)
    try:
        with opener.open(url, timeout=30) as response:
            return response.status, json.loads(response.read()), ""
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers.get("Location", "")


def answers(base: str, expected: dict[str, int]) -> dict[str, tuple[int, str]] | None:
    """Each key's (count, answering host) asked at ``base``; None unless
    every answer is the expected count."""
    out = {}
    for key, count in expected.items():
        status, body = get_json(f"{base}/iq/stores/counts/keys/{key}")
        if status != 200 or body["value"] != count:
            return None
        out[key] = (body["value"], body["host"])
    return out


def scanned(base: str) -> dict[str, int] | None:
    status, body = get_json(f"{base}/iq/stores/counts/all")
    if status != 200:
        return None
    return {e["key"]: e["value"] for e in body["entries"]}


def test_every_key_from_either_instance_and_after_a_move(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    boot = kafka.bootstrap_servers
    source, app_id = unique("iq-words"), unique("iq")
    create_topics(boot, {source: PARTITIONS})
    records = [(k.encode(), b"x", BASE_TS + i) for i, k in enumerate(KEYS * 2 + KEYS[:17])]
    produce(boot, source, records)
    expected = dict(Counter(k.decode() for k, _, _ in records))
    ports = free_ports(2)
    hosts = [f"127.0.0.1:{p}" for p in ports]
    bases = [f"http://{h}" for h in hosts]
    apps = [
        KafkaStreams(
            count_topology(source),
            app_config(
                boot,
                app_id,
                str(tmp_path / f"state{i}"),
                application__server=hosts[i],
                iq__http=True,
                num__standby__replicas=1,
            ),
        )
        for i in range(2)
    ]
    first, second = apps
    with first, second:
        first.start()
        second.start()

        def settled() -> bool:
            """Both running and seeing each other, and each key's partition
            is local to the instance both name for it. (A rebalance can
            follow the first one at once, as the instances place standbys;
            while it runs, metadata may name an instance that does not yet
            hold the task, as in Kafka Streams.)"""
            if not all(a.state is State.RUNNING for a in apps) or not all(
                len(a.metadata_for_all_streams_clients()) == 2 for a in apps
            ):
                return False
            for key in KEYS:
                metas = [a.query_metadata_for_key("counts", key, S) for a in apps]
                owner = apps[hosts.index(metas[0].active_host.endpoint())]
                if metas[0] != metas[1] or (
                    metas[0].partition not in owner._local_store_partitions("counts")
                ):
                    return False
            return True

        wait_until(settled, TIMEOUT, "both instances running, agreeing where each key lives")
        # Both instances agree where each key lives, and it is where the
        # key's count is: that instance runs the task of its partition.
        for key in KEYS:
            metas = [a.query_metadata_for_key("counts", key, S) for a in apps]
            assert metas[0] == metas[1], key
            active = metas[0].active_host.endpoint()
            owner = apps[hosts.index(active)]
            assert metas[0].partition in owner._local_store_partitions("counts")
            # One standby replica: kept by the other instance.
            assert {h.endpoint() for h in metas[0].standby_hosts} == set(hosts) - {active}
        stores = {m.host_info: m for m in first.metadata_for_all_streams_clients()}
        assert set(stores) == {HostInfo.build_from_endpoint(h) for h in hosts}
        assert all(m.state_store_names == {"counts"} for m in stores.values())
        assert all(m.standby_state_store_names == {"counts"} for m in stores.values())
        partitions = [{tp.partition for tp in m.topic_partitions} for m in stores.values()]
        assert sorted(p for ps in partitions for p in ps) == list(range(PARTITIONS))

        found: list[dict[str, tuple[int, str]] | None] = [None, None]

        def every_key_from_both() -> bool:
            found[0], found[1] = answers(bases[0], expected), answers(bases[1], expected)
            return found[0] is not None and found[1] is not None

        wait_until(every_key_from_both, TIMEOUT, "every key answered from both instances")
        for one in found:
            assert one is not None
            # Keys of both instances: half the answers were forwarded.
            assert {host for _, host in one.values()} == set(hosts)
        # IQv2 (the counts complete now): each key's count from the instance that has its partition;
        # the other answers that partition is NOT_PRESENT there.
        for key in KEYS[:5]:
            meta = first.query_metadata_for_key("counts", key, S)
            owner = apps[hosts.index(meta.active_host.endpoint())]
            other = second if owner is first else first
            request = (
                StateQueryRequest.in_store("counts")
                .with_query(KeyQuery.with_key(key))
                .with_partitions([meta.partition])
            )
            assert owner.query(request).get_only_partition_result().get_result() == expected[key]
            answer = other.query(request).get_only_partition_result()
            assert answer.get_failure_reason() is FailureReason.NOT_PRESENT
        wait_until(lambda: scanned(bases[0]) == expected, TIMEOUT, "a scan gathered from both")
        assert scanned(bases[1]) == expected
        # Not forwarded (?forward=false): a redirect naming the right instance.
        elsewhere = next(k for k, (_, host) in found[0].items() if host == hosts[1])
        status, body, location = unfollowed(
            f"{bases[0]}/iq/stores/counts/keys/{elsewhere}?forward=false"
        )
        assert status == 307 and body["active_host"] == hosts[1]
        assert location.startswith(f"{bases[1]}/iq/stores/counts/keys/{elsewhere}")

        second.close()
        wait_until(
            lambda: (
                len(first._local_store_partitions("counts")) == PARTITIONS
                and first.state is State.RUNNING
            ),
            TIMEOUT,
            "the first instance to take every task over",
        )
        more = [(k.encode(), b"x", BASE_TS + 10_000 + i) for i, k in enumerate(KEYS[:9])]
        produce(boot, source, more)
        expected = dict(Counter(k.decode() for k, _, _ in records + more))
        alone: list[dict[str, tuple[int, str]] | None] = [None]

        def every_key_from_the_first() -> bool:
            alone[0] = answers(bases[0], expected)
            return alone[0] is not None

        wait_until(every_key_from_the_first, TIMEOUT, "every key answered after the move")
        assert alone[0] is not None and {h for _, h in alone[0].values()} == {hosts[0]}
        assert scanned(bases[0]) == expected
        (only,) = first.metadata_for_all_streams_clients()
        assert only.host_info.endpoint() == hosts[0]


def test_instances_with_client_ids_of_their_own_find_each_other(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    """``client.id`` heads the clients' ids in place of the application.id,
    as in Kafka Streams (users give each instance one of its own); the
    instances still learn each other's application.server from the group."""
    boot = kafka.bootstrap_servers
    source, app_id = unique("iq-ids"), unique("iq-ids")
    create_topics(boot, {source: PARTITIONS})
    produce(boot, source, [(k.encode(), b"x", BASE_TS) for k in KEYS])
    hosts = [f"127.0.0.1:{p}" for p in free_ports(2)]
    apps = [
        KafkaStreams(
            count_topology(source),
            app_config(
                boot,
                app_id,
                str(tmp_path / f"state{i}"),
                application__server=hosts[i],
                client__id=f"orders-eu-{i}",
                # A client.id among a client's settings does not rename it either.
                main__consumer__client__id="ignored",
            ),
        )
        for i in range(2)
    ]
    with apps[0], apps[1]:
        for app in apps:
            app.start()
        wait_until(
            lambda: all(
                a.state is State.RUNNING and len(a.metadata_for_all_streams_clients()) == 2
                for a in apps
            ),
            TIMEOUT,
            "both instances running and seeing each other",
        )
        found = {m.host_info for m in apps[0].metadata_for_all_streams_clients()}
        assert found == {HostInfo.build_from_endpoint(h) for h in hosts}
        admin = AdminClient({"bootstrap.servers": boot})
        group = admin.describe_consumer_groups([app_id])[app_id].result(timeout=30)
        ids = sorted(m.client_id for m in group.members)
        assert [i.split("-StreamThread-")[0].rsplit("-", 2)[0] for i in ids] == [
            "orders-eu-0",
            "orders-eu-1",
        ]
