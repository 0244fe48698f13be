"""An interactive-query service over a word count, on the embedded log:
python examples/iq_service.py [LOG_DIR] [--serve].

The app counts words and serves its stores over HTTP (``iq.http`` on
``application.server``). The example asks its own endpoint for a few words,
a prefix scan and the whole table, and prints what came back; with
``--serve`` it keeps serving (and the live web view at /ui/) until Ctrl-C:

    curl http://127.0.0.1:7071/iq/stores/counts/keys/the
    curl 'http://127.0.0.1:7071/iq/stores/counts/prefix?prefix=th'
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from typing import Any

from strom import KafkaStreams
from strom.cli.demo import word_count_topology
from strom.embedded import EmbeddedLog

LINES = [
    "the quick brown fox",
    "jumps over the lazy dog",
    "then the fox sleeps",
    "the end",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ask(base: str, path: str) -> Any:
    with urllib.request.urlopen(f"{base}{path}", timeout=30) as response:
        return json.loads(response.read())


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--serve"]
    path = args[0] if args else tempfile.mkdtemp(prefix="strom-iq-")
    log = EmbeddedLog(path)
    for topic in ("text-input", "word-counts"):
        if topic not in log.topics():
            log.create_topic(topic, partitions=2)
    with log.producer() as producer:
        producer.produce_batch("text-input", [(None, line.encode()) for line in LINES])

    port = 7071 if "--serve" in sys.argv else free_port()
    config = {
        "application.id": "iq-service",
        "bootstrap.servers": f"embedded:{path}",
        "application.server": f"127.0.0.1:{port}",
        "iq.http": True,
        "ui.enabled": True,
    }
    with KafkaStreams(word_count_topology(), config) as app:
        app.run_until_end()
        base = f"http://127.0.0.1:{port}"
        for word in ("the", "fox", "unicorn"):
            value = ask(base, f"/iq/stores/counts/keys/{word}")["value"]
            print(f"GET /iq/stores/counts/keys/{word}:", value)
        prefix = ask(base, "/iq/stores/counts/prefix?" + urllib.parse.urlencode({"prefix": "th"}))
        print("prefix th:", {e["key"]: e["value"] for e in prefix["entries"]})
        every = ask(base, "/iq/stores/counts/all")["entries"]
        print("all counts:", dict(sorted((e["key"], e["value"]) for e in every)))
        if "--serve" in sys.argv:
            print(
                f"serving {base}/iq/stores/counts/... and the web view at {base}/ui/; Ctrl-C stops"
            )
            with contextlib.suppress(KeyboardInterrupt):
                while True:  # new input is processed as it comes; the stores stay queryable
                    app.run_until_end()
                    time.sleep(0.5)


if __name__ == "__main__":
    main()
