"""Prompt and completion arguments that are not what they look like: a clear error, no traceback."""

from __future__ import annotations

import logging

import pytest
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, PromptReference, ResourceTemplateReference

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ERAS = ["legacy", "auto"]  # the initialize handshake, and 2026-07-28 (server/discover)
ODD_DIGITS = ["²", "١٢", "𝟡", "٣٠", "1²"]  # digits to str.isdigit() (some to int() too), none ASCII


@pytest.mark.parametrize("mode", ERAS)
async def test_review_days_in_non_ascii_digits_is_a_clear_invalid_params_error(
    server_factory, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    caplog.set_level(logging.WARNING)
    async with server_factory() as srv, Client(srv.mcp_url("alice"), mode=mode) as client:
        for days in ODD_DIGITS:
            with pytest.raises(MCPError, match="whole number from 1 to 3650") as raised:
                await client.get_prompt("review-stale-memories", {"days": days})
            assert raised.value.error.code == INVALID_PARAMS
        # The ASCII spelling still works.
        text = (await client.get_prompt("review-stale-memories", {"days": "12"})).messages[0].content.text
    assert "12 days" in text
    assert not [r for r in caplog.records if r.exc_info], "a bad argument logged a traceback"


@pytest.mark.parametrize("mode", ERAS)
async def test_odd_prompt_and_completion_arguments_never_log_a_traceback(
    server_factory, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    caplog.set_level(logging.WARNING)
    odd = ["²", "\x00", "%_\\", "../x", "'\"\n", "١٢"]
    refs = [
        (PromptReference(type="ref/prompt", name="review-stale-memories"), "days"),
        (PromptReference(type="ref/prompt", name="save-session-learnings"), "sessionId"),
        (PromptReference(type="ref/prompt", name="recall-before-task"), "topic"),
        (ResourceTemplateReference(type="ref/resource", uri="memvault://memories/{+filename}"), "filename"),
        (ResourceTemplateReference(type="ref/resource", uri="memvault://archive/{+filename}"), "filename"),
        (ResourceTemplateReference(type="ref/resource", uri="memvault://sessions/{sessionId}"), "sessionId"),
    ]
    async with server_factory() as srv, Client(srv.mcp_url("alice"), mode=mode) as client:
        for value in odd:
            for ref, name in refs:
                done = await client.complete(ref, {"name": name, "value": value})
                assert done.completion.values == []
            await client.get_prompt("recall-before-task", {"topic": value})
            await client.get_prompt("save-session-learnings", {"sessionId": value, "focus": value})
    assert not [r for r in caplog.records if r.exc_info], "an odd argument logged a traceback"
