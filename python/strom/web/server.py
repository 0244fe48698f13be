"""The web server of one app instance: Starlette routes served by uvicorn
in a daemon thread, started by ``KafkaStreams`` (``iq.http`` and/or
``ui.enabled``) and stopped by its ``close()``.

Routes (JSON unless said otherwise; keys and bounds are URL text in the
type of the store's key serde):

- ``GET /iq/metadata``: every instance (``metadata_for_all_streams_clients``).
- ``GET /iq/stores``: the stores, their kinds and local sizes.
- ``GET /iq/stores/{store}/keys/{key}``: a key-value store's value, a window
  store's windows (``?from=&to=`` window starts), a session store's sessions.
- ``GET /iq/stores/{store}/metadata/{key}``: ``query_metadata_for_key``.
- ``GET /iq/stores/{store}/range?from=&to=``, ``/prefix?prefix=``,
  ``/all`` (``&reverse=true``; window stores ``&time_from=&time_to=``).
- ``GET /ui/``: the live web view (HTML), ``GET /ui/api/state`` its data.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from strom.errors import InvalidStateStoreError, StromError
from strom.web.iq import FORWARDED, Answer, QueryError, QueryService
from strom.web.ui import ui_state

if TYPE_CHECKING:
    from collections.abc import Callable

    from strom.streams import KafkaStreams

__all__ = ["WebServer"]

log = logging.getLogger("strom.web")

STATIC = Path(__file__).parent / "static"
START_TIMEOUT_S = 10.0


def _respond(run: Callable[[], Answer]) -> Response:
    try:
        answer = run()
    except QueryError as exc:
        return JSONResponse({"error": str(exc)}, status_code=exc.status)
    except InvalidStateStoreError as exc:
        return JSONResponse({"error": str(exc)}, status_code=503)
    except StromError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)


def _path(request: Request) -> str:
    """The request's path and query, to ask another instance the same."""
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


def routes(streams: KafkaStreams, *, ui: bool, forward: bool) -> list[BaseRoute]:
    service = QueryService(streams, forward=forward)

    def metadata(request: Request) -> Response:
        return _respond(
            lambda: Answer(
                200,
                [
                    {
                        "host": m.host_info.endpoint(),
                        "stores": sorted(m.state_store_names),
                        "standby_stores": sorted(m.standby_state_store_names),
                        "partitions": sorted(f"{t}-{p}" for t, p in m.topic_partitions),
                    }
                    for m in streams.metadata_for_all_streams_clients()
                ],
            )
        )

    def stores(request: Request) -> Response:
        return _respond(lambda: Answer(200, service.stores()))

    def key(request: Request) -> Response:
        p = request.path_params
        forwarded = FORWARDED in request.headers
        return _respond(
            lambda: service.key(
                p["store"], p["key"], request.query_params, _path(request), forwarded
            )
        )

    def key_metadata(request: Request) -> Response:
        p = request.path_params
        return _respond(lambda: service.key_metadata(p["store"], p["key"]))

    def scan(op: str) -> Callable[[Request], Response]:
        def serve(request: Request) -> Response:
            # A forwarded scan asks for the answering instance's own partitions.
            local = FORWARDED in request.headers
            return _respond(
                lambda: service.scan(
                    request.path_params["store"], op, request.query_params, _path(request), local
                )
            )

        return serve

    out: list[BaseRoute] = [
        Route("/iq/metadata", metadata),
        Route("/iq/stores", stores),
        Route("/iq/stores/{store}/keys/{key:path}", key),
        Route("/iq/stores/{store}/metadata/{key:path}", key_metadata),
        Route("/iq/stores/{store}/range", scan("range")),
        Route("/iq/stores/{store}/prefix", scan("prefix")),
        Route("/iq/stores/{store}/all", scan("all")),
    ]
    if ui:

        def state(request: Request) -> Response:
            return JSONResponse(ui_state(streams))

        def home(request: Request) -> Response:
            return RedirectResponse("/ui/")

        out += [
            Route("/", home),
            Route("/ui/api/state", state),
            Mount("/ui", StaticFiles(directory=STATIC, html=True)),
        ]
    return out


class WebServer:
    """The app's HTTP server, in a daemon thread until :meth:`close`."""

    def __init__(
        self, streams: KafkaStreams, host: str, port: int, *, ui: bool, forward: bool = True
    ) -> None:
        app = Starlette(routes=routes(streams, ui=ui, forward=forward))
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            # uvicorn's loggers go through the app's logging setup, untouched.
            log_config=None,
            lifespan="off",
            access_log=False,
        )
        self._server = uvicorn.Server(config)
        self.host = host
        # Bound here, so a taken port is an error of this call (uvicorn would
        # exit its thread) and port 0 is resolved before the server starts.
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind(address)
        except OSError:
            self._socket.close()
            raise
        self.port = int(self._socket.getsockname()[1])
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._socket]},
            name="strom-web",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise OSError(f"the HTTP server on {host}:{port} did not start")
            self._thread.join(0.01)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(START_TIMEOUT_S)
        self._socket.close()
