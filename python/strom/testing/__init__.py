"""Testing a topology without a broker or a log: the TopologyTestDriver."""

from strom.testing.driver import TestInputTopic, TestOutputTopic, TopologyTestDriver

__all__ = ["TestInputTopic", "TestOutputTopic", "TopologyTestDriver"]
