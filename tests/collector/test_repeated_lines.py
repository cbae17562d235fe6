"""RepeatedLines: a library's repeated warnings and errors folded into one line a minute with a
count, through a real logging handler; ctxprec's own lines and a library's INFO lines untouched."""
from __future__ import annotations

import io
import logging

from ctxprec.collector.failure_log import RepeatedLines


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def handler_with_folding(clock: Clock) -> tuple[logging.Logger, io.StringIO, RepeatedLines]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    folding = RepeatedLines(handler, clock=clock)
    handler.addFilter(folding)
    logger = logging.getLogger("test-library")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, out, folding


def test_a_library_repeating_an_error_gets_one_line_a_minute_with_the_count() -> None:
    clock = Clock()
    logger, out, folding = handler_with_folding(clock)
    for attempt in range(500):
        logger.error("Unable connect to node with id %s: %s", 1, f"refused ({attempt})")
        clock.now += 0.05
    folding.flush()
    lines = out.getvalue().splitlines()
    assert lines[0] == "ERROR test-library: Unable connect to node with id 1: refused (0)"
    # 25 s of it, all within its first minute: counted, and reported by the minute tick.
    assert len(lines) == 2, lines
    assert lines[1] == ("ERROR test-library: 499 more like this in the last minute "
                        "(the last: Unable connect to node with id 1: refused (499))")


def test_a_cause_that_goes_on_is_reported_each_minute_and_forgotten_once_quiet() -> None:
    clock = Clock()
    logger, out, folding = handler_with_folding(clock)
    for _ in range(130):  # a line a second for 130 s
        logger.warning("Heartbeat failed")
        clock.now += 1.0
    folding.flush()
    lines = out.getvalue().splitlines()
    assert lines[0] == "WARNING test-library: Heartbeat failed"
    counts = [int(line.split(": ")[1].split(" ")[0]) for line in lines[1:]]
    assert sum(counts) == 129 and len(lines) == 4  # the first line, then one per minute: 60, 60, 9
    clock.now += 61
    folding.flush()  # nothing since: the cause is forgotten
    logger.warning("Heartbeat failed")
    assert out.getvalue().splitlines()[-1] == "WARNING test-library: Heartbeat failed"


def test_own_lines_and_library_info_lines_are_never_folded() -> None:
    clock = Clock()
    _, out, folding = handler_with_folding(clock)
    own = logging.getLogger("ctxprec.test")
    own.handlers, own.propagate = [folding.handler], False
    library = logging.getLogger("test-library")
    for _ in range(3):
        own.warning("judge down")
        library.info("Discovered coordinator")
    assert out.getvalue().splitlines() == [
        "WARNING ctxprec.test: judge down", "INFO test-library: Discovered coordinator"] * 3


def test_causes_past_the_cap_share_one_per_logger_and_level() -> None:
    clock = Clock()
    logger, out, folding = handler_with_folding(clock)
    for i in range(RepeatedLines.MAX_CAUSES + 50):
        logger.error(f"distinct message {i}")  # no template to fold by: each is its own cause
    folding.flush()
    lines = out.getvalue().splitlines()
    assert len(lines) == RepeatedLines.MAX_CAUSES + 2  # each tracked cause once, one shared, its count
    assert lines[-1].startswith("ERROR test-library: 49 more like this")
