"""The accept-failure log filter: a descriptor flood and the shutdown after it log a line, not tracebacks."""

from __future__ import annotations

import asyncio
import errno
import logging

import pytest

from memvault.server import limits


@pytest.fixture
def quiet() -> logging.Filter:
    flood = limits.quiet_accept_failures()
    yield flood
    logging.getLogger("asyncio").removeFilter(flood)


def test_retries_failing_on_a_closed_listener_log_one_line_without_a_traceback(
    quiet: logging.Filter, caplog: pytest.LogCaptureFixture
) -> None:
    async def flood_then_close() -> None:
        loop = asyncio.get_running_loop()
        # A descriptor flood, then the server shut down before asyncio's retries came: what the
        # default handler gets from each refused accept and each retry's callback.
        for _ in range(20):
            loop.call_exception_handler(
                {
                    "message": "Exception in callback BaseSelectorEventLoop._start_serving(<fn>, <sock>)",
                    "exception": ValueError("Invalid file descriptor: -1"),
                }
            )
            loop.call_exception_handler(
                {"message": limits.ACCEPT_FAILED, "exception": OSError(errno.EMFILE, "Too many open files")}
            )

    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        asyncio.run(flood_then_close())
    asyncio_records = [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.WARNING]
    assert 1 <= len(asyncio_records) <= 2
    assert all(r.exc_info is None and "Traceback" not in r.getMessage() for r in asyncio_records)


def test_other_callback_errors_still_log_with_their_traceback(
    quiet: logging.Filter, caplog: pytest.LogCaptureFixture
) -> None:
    async def fail() -> None:
        asyncio.get_running_loop().call_exception_handler(
            {"message": "Exception in callback something_else()", "exception": RuntimeError("boom")}
        )

    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        asyncio.run(fail())
    (record,) = [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.WARNING]
    assert record.exc_info is not None
