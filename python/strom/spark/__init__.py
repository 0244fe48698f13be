"""Batch replay of a topology on PySpark, through the engine the streaming app
runs (``pip install pyspark``; see docs/spark.md).

>>> from strom.spark import replay  # doctest: +SKIP
>>> result = replay(topology, spark, source="embedded:/data/log")  # doctest: +SKIP
>>> result.table("counts").show()  # doctest: +SKIP
"""

from strom.spark.replay import Replay, replay

__all__ = ["Replay", "replay"]
