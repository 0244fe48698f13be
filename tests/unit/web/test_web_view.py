"""The live web view in a real browser: headless Chromium (the OS's
chromium and chromium-driver packages) driven by Selenium loads the page of
a word count running on the embedded log while records keep arriving, and
the test waits until the graph shows every node of the topology, the
per-node rates move, the tables list the tasks and the store, and the store
browser answers. A screenshot goes to the artifact directory
(``STROM_ARTIFACTS``, default ``artifacts/`` at the repository's root)."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog

ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = Path(os.environ.get("STROM_ARTIFACTS", ROOT / "artifacts"))
TIMEOUT = 60


def _executable(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        f"none of {', '.join(names)} is installed: apt-get install chromium chromium-driver "
        "(.ci/run does)",
        pytrace=False,
    )


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = Options()
    options.binary_location = _executable("chromium", "chromium-browser")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1400,1000")
    driver = webdriver.Chrome(options=options, service=Service(_executable("chromedriver")))
    try:
        yield driver
    finally:
        driver.quit()


def word_count() -> StreamsBuilder:
    builder = StreamsBuilder()
    (
        builder.stream("lines", key_serde=serdes.String(), value_serde=serdes.String())
        .flat_map_values(str.split)
        .group_by(lambda _k, word: word, key_serde=serdes.String(), value_serde=serdes.String())
        .count("counts")
        .to_stream()
        .to("word-counts", key_serde=serdes.String(), value_serde=serdes.Long())
    )
    return builder


def test_the_page_shows_the_topology_and_live_rates(
    browser: WebDriver, log: EmbeddedLog, log_path: str
) -> None:
    log.create_topic("lines", partitions=2)
    log.create_topic("word-counts", partitions=2)
    topology = word_count().build()
    nodes = set(topology._internal.nodes)
    stop = threading.Event()

    def feed() -> None:
        # Records keep arriving while the page is watched, so rates move.
        with log.producer() as producer:
            i = 0
            while not stop.is_set():
                producer.produce_batch(
                    "lines", [(None, f"alpha beta gamma {i % 7}".encode()) for _ in range(50)]
                )
                producer.flush()
                i += 1
                stop.wait(0.05)

    config = {
        "application.id": "web-view",
        "bootstrap.servers": f"embedded:{log_path}",
        "ui.enabled": True,
        "commit.interval.ms": 200,
    }
    feeder = threading.Thread(target=feed, daemon=True)
    with KafkaStreams(topology, config) as app:
        app.start()
        feeder.start()
        try:
            assert app.web_server is not None
            browser.get(f"{app.web_server.url}/ui/")
            wait = WebDriverWait(browser, TIMEOUT)
            wait.until(
                lambda d: (
                    {
                        e.get_attribute("data-node")
                        for e in d.find_elements(By.CSS_SELECTOR, "#graph g.node")
                    }
                    == nodes
                )
            )
            assert browser.find_elements(By.CSS_SELECTOR, '#graph g.store[data-store="counts"]')

            def rates() -> dict[str, float]:
                labels = browser.find_elements(By.CSS_SELECTOR, "#graph [data-rate]")
                return {
                    str(e.get_attribute("data-rate")): float(e.get_attribute("data-value") or 0)
                    for e in labels
                }

            source = next(n for n in nodes if n.startswith("KSTREAM-SOURCE"))
            wait.until(lambda _d: rates().get(source, 0) > 0)
            totals: list[float] = []

            def total_grows(_d: object) -> bool:
                labels = browser.find_elements(By.CSS_SELECTOR, f'[data-rate="{source}"]')
                total = float(labels[0].get_attribute("data-total") or 0) if labels else 0
                totals.append(total)
                return len(totals) > 1 and totals[-1] > totals[0]

            wait.until(total_grows)
            wait.until(lambda d: "RUNNING" in d.find_element(By.ID, "state").text)
            wait.until(
                lambda d: (
                    len(d.find_elements(By.CSS_SELECTOR, "#tasks tbody tr")) == 4
                    and "counts" in d.find_element(By.ID, "stores").text
                )
            )
            Select(browser.find_element(By.ID, "store-name")).select_by_value("counts")
            Select(browser.find_element(By.ID, "query-kind")).select_by_value("key")
            browser.find_element(By.ID, "query-a").send_keys("alpha")
            browser.find_element(By.CSS_SELECTOR, "#browse button").click()
            wait.until(lambda d: '"value":' in d.find_element(By.ID, "result").text)
            assert browser.find_element(By.ID, "result").text.startswith("200 ")
            browser.execute_script("window.scrollTo(0, 0)")
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            assert browser.save_screenshot(str(ARTIFACTS / "web-view.png"))
        finally:
            stop.set()
            feeder.join()
