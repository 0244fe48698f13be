"""The Prometheus exporter (``pip install 'strom[metrics]'``): serves a
``KafkaStreams``' metrics and its health checks over HTTP.

``metrics.port`` starts it with the app (``metrics.host``, default
127.0.0.1, is the address it binds). Paths:

- ``/metrics``: every numeric metric of ``KafkaStreams.metrics()``, read at
  scrape time, named as the Prometheus JMX exporter names Kafka's MBeans:
  ``kafka_streams_<group>_<name>`` (``kafka_consumer_…`` for the consumer's
  metrics) with ``-`` as ``_`` and the tags as labels, all gauges; and
  ``strom_state{state="RUNNING"}``, 1 for the app's state and 0 for the others.
- ``/health/live``: 200 unless the app is in ERROR, PENDING_ERROR or NOT_RUNNING
  (then 503).
- ``/health/ready``: 200 while the app is RUNNING, else 503.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from socketserver import ThreadingMixIn
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from strom.metrics import Metric, MetricName

__all__ = ["MetricsServer", "prometheus_name"]

STATES = (
    "CREATED",
    "REBALANCING",
    "RUNNING",
    "PENDING_SHUTDOWN",
    "NOT_RUNNING",
    "PENDING_ERROR",
    "ERROR",
)
NOT_ALIVE = {"ERROR", "PENDING_ERROR", "NOT_RUNNING"}

LIVE_PATH = "/health/live"
READY_PATH = "/health/ready"


class _App(Protocol):
    """What the exporter reads of a ``KafkaStreams``."""

    @property
    def state(self) -> Any: ...  # a strom.State

    def metrics(self) -> Mapping[MetricName, Metric]: ...


def prometheus_name(name: MetricName) -> str:
    """``kafka_streams_<group>_<name>`` (``kafka_consumer_…`` for the
    consumer's fetch metrics), as the JMX exporter's usual rules name them."""
    domain = "kafka_consumer" if name.group.startswith("consumer-") else "kafka_streams"
    return _clean(f"{domain}_{name.group}_{name.name}")


def _clean(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", text)


class _Collector(Collector):
    def __init__(self, app: _App) -> None:
        self.app = app

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families: dict[str, tuple[GaugeMetricFamily, list[str]]] = {}
        for name, metric in self.app.metrics().items():
            value = metric.metric_value()
            if isinstance(value, str):
                continue  # Kafka's string metrics (state, application-id): see strom_state
            full = prometheus_name(name)
            labels = sorted(name.tags)
            entry = families.get(full)
            if entry is None:
                family = GaugeMetricFamily(
                    full, name.description or name.name, labels=[_clean(k) for k in labels]
                )
                entry = families[full] = (family, labels)
            family, known = entry
            if known != labels:
                continue  # one family, one label set (never the case for Kafka's metrics)
            family.add_metric([name.tags[k] for k in labels], value)
        yield from (family for family, _ in families.values())
        state = GaugeMetricFamily("strom_state", "The app's state (1: current)", labels=["state"])
        current = self.app.state.value
        for each in STATES:
            state.add_metric([each], 1.0 if each == current else 0.0)
        yield state


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # scrapes every few seconds: not worth a log line each


def _health(app: _App, ok: Callable[[str], bool]) -> Callable[..., Iterable[bytes]]:
    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        state = app.state.value
        status = "200 OK" if ok(state) else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [f"{state}\n".encode()]

    return serve


class MetricsServer:
    """The exporter's HTTP server, in a daemon thread until :meth:`close`."""

    def __init__(self, app: _App, host: str = "127.0.0.1", port: int = 0) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(app))
        metrics = make_wsgi_app(registry)
        routes = {
            LIVE_PATH: _health(app, lambda state: state not in NOT_ALIVE),
            READY_PATH: _health(app, lambda state: state == "RUNNING"),
        }

        def route(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "")
            if path in ("/", "/metrics"):
                scraped: Iterable[bytes] = metrics(environ, start_response)
                return scraped
            if path in routes:
                return routes[path](environ, start_response)
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"no {path}: try /metrics, {LIVE_PATH} or {READY_PATH}\n".encode()]

        self._server = make_server(host, port, route, _Server, _QuietHandler)
        self.host = host
        self.port = int(self._server.server_port)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="strom-metrics-server", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
