"""The Spark suite's session: one local[2] SparkSession for all its tests.

Every test here is marked ``spark``. Spark must start: a missing Java or
pyspark fails the suite loudly instead of skipping it.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # Executors run this interpreter, so they import this strom.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    source = str(Path(__file__).parents[2] / "python")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (source, os.environ.get("PYTHONPATH")) if p
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pyspark's own import-time warnings
            from pyspark.sql import SparkSession  # noqa: PLC0415

            session = (
                SparkSession.builder.master("local[2]")
                .appName("strom-tests")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "4")
                .config("spark.default.parallelism", "2")
                .config("spark.driver.memory", "1g")
                .config("spark.sql.session.timeZone", "UTC")
                .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=error")
                .getOrCreate()
            )
    except Exception as exc:  # pragma: no cover - the message is the point
        pytest.fail(f"Spark did not start (pyspark installed? Java 17 on PATH?): {exc}")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
