"""ProcessorContext.schedule(start_time, interval, type, callback): Kafka's
anchored punctuation (StreamTask.schedule with a start time). It fires at
``start_time`` and every interval after it; a start time already passed
moves to the first of those times after now. Checked in the test driver,
whose wall clock and stream time the test moves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from strom import Topology, serdes
from strom.errors import TopologyError
from strom.processor import Processor, ProcessorContext, PunctuationType, Record
from strom.testing import TopologyTestDriver

S = serdes.String()
WALL, STREAM = PunctuationType.WALL_CLOCK_TIME, PunctuationType.STREAM_TIME


def scheduling(*schedule: Any, on_first_record: bool = False) -> tuple[Topology, list[int]]:
    """A topology whose processor calls ``context.schedule(*schedule,
    fired.append)`` in init (or on its first record), and the list of times
    its punctuation fires at."""
    fired: list[int] = []

    class Scheduler(Processor[str, str]):
        def init(self, context: ProcessorContext) -> None:
            self.context = context
            self.scheduled = False
            if not on_first_record:
                self.schedule()

        def schedule(self) -> None:
            self.context.schedule(*schedule, fired.append)
            self.scheduled = True

        def process(self, record: Record[str, str]) -> None:
            if not self.scheduled:
                self.schedule()

    topology = (
        Topology()
        .add_source("S", "in", key_serde=S, value_serde=S)
        .add_processor("P", Scheduler, "S")
    )
    return topology, fired


def test_wall_clock_punctuation_from_a_start_time_to_come() -> None:
    topology, fired = scheduling(1_050, 100, WALL)
    with TopologyTestDriver(topology, initial_wall_clock_ms=1_000) as driver:
        driver.advance_wall_clock_time(49)
        assert fired == []
        driver.advance_wall_clock_time(1)
        assert fired == [1_050]  # not 1_100, where schedule(100, …) would fire first
        driver.advance_wall_clock_time(99)
        assert fired == [1_050]
        driver.advance_wall_clock_time(1)
        assert fired == [1_050, 1_150]
        driver.advance_wall_clock_time(250)  # 1_250 and 1_350 missed: fires once
        assert fired == [1_050, 1_150, 1_400]
        driver.advance_wall_clock_time(49)
        assert fired == [1_050, 1_150, 1_400]
        driver.advance_wall_clock_time(1)  # back on the start time's grid
        assert fired == [1_050, 1_150, 1_400, 1_450]


def test_wall_clock_start_time_passed_moves_to_its_next_time_after_now() -> None:
    start = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=730)  # an Instant
    topology, fired = scheduling(start, timedelta(milliseconds=100), WALL)
    with TopologyTestDriver(topology, initial_wall_clock_ms=1_000) as driver:
        driver.advance_wall_clock_time(29)
        assert fired == []
        driver.advance_wall_clock_time(1)
        assert fired == [1_030]
        driver.advance_wall_clock_time(100)
        assert fired == [1_030, 1_130]


def test_a_start_time_passed_on_the_dot_of_now_fires_one_interval_later() -> None:
    """As Kafka's PunctuationSchedule.next(now): strictly after now."""
    topology, fired = scheduling(800, 100, WALL)
    with TopologyTestDriver(topology, initial_wall_clock_ms=1_000) as driver:
        driver.advance_wall_clock_time(0)
        driver.advance_wall_clock_time(99)
        assert fired == []
        driver.advance_wall_clock_time(1)
        assert fired == [1_100]


def test_stream_time_punctuation_from_a_start_time() -> None:
    """Not on the first record (as schedule(interval, …), aligned to 0,
    would): first when stream time reaches the start time, then on its grid."""
    topology, fired = scheduling(250, 100, STREAM)
    with TopologyTestDriver(topology) as driver:
        source = driver.create_input_topic("in", S, S)
        for timestamp, expected in [
            (100, []),
            (249, []),
            (260, [260]),  # the punctuation gets the stream time
            (349, [260]),
            (350, [260, 350]),
            (580, [260, 350, 580]),  # 450 and 550 missed: fires once
            (649, [260, 350, 580]),
            (500, [260, 350, 580]),  # late: stream time stays 649
            (650, [260, 350, 580, 650]),
        ]:
            source.pipe_input("k", "v", timestamp)
            assert fired == expected, timestamp


def test_stream_time_start_time_passed_moves_past_the_current_stream_time() -> None:
    """Scheduled while processing a record at 1_000 with a start time of 5:
    the first punctuation is at 1_005, the first of 5 + n * 100 after 1_000."""
    topology, fired = scheduling(5, 100, STREAM, on_first_record=True)
    with TopologyTestDriver(topology) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("k", "v", 1_000)
        source.pipe_input("k", "v", 1_004)
        assert fired == []
        source.pipe_input("k", "v", 1_005)
        assert fired == [1_005]
        source.pipe_input("k", "v", 1_104)
        source.pipe_input("k", "v", 1_105)
        assert fired == [1_005, 1_105]


def test_the_three_argument_schedule_is_unchanged() -> None:
    topology, fired = scheduling(100, STREAM)
    with TopologyTestDriver(topology) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("k", "v", 42)
        assert fired == [42]  # aligned to 0: fires on the first record


@pytest.mark.parametrize(
    ("schedule", "error", "message"),
    [
        ((-1, 100, WALL), TopologyError, "cannot start before the epoch"),
        ((0, 0, WALL), TopologyError, "at least 1 ms"),
        ((100, "WALL_CLOCK_TIME"), TypeError, "is a PunctuationType"),
        ((0, 100, STREAM, None), TypeError, "got 5 arguments"),
    ],
)
def test_bad_schedules_are_refused(
    schedule: tuple[Any, ...], error: type[Exception], message: str
) -> None:
    topology, _ = scheduling(*schedule)
    with pytest.raises(error, match=message):
        TopologyTestDriver(topology).close()
