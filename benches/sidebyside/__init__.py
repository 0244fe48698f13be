"""The side-by-side benchmark suite: Nexmark and the README/Kafka workloads on
strom, Kafka Streams (JVM), Quix Streams, Bytewax and Faust, on one broker
and the same pre-loaded input.

    python -m benches.sidebyside --systems strom,kstreams --queries q0,q7 --records 200000

:func:`run` is the entry point for callers (``strom bench``); see
``__main__`` for the options and docs/benchmarks.md for the definitions.
"""

from benches.sidebyside.suite import Options, run

__all__ = ["Options", "run"]
