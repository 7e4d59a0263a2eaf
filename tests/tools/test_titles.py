"""Every tool has a title a client shows a person (tools.titles), and no title is left for a tool
that is gone."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from memvault.config import TOOL_GROUPS, Settings
from memvault.ops.service import Service
from memvault.tools import build_server
from memvault.tools.titles import TITLES

pytestmark = pytest.mark.anyio


async def test_the_titles_name_exactly_the_registered_tools(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(tools=TOOL_GROUPS)
    service = Service(settings)
    try:
        tools = await build_server(service, settings).list_tools()
    finally:
        await service.close()
    names = {tool.name for tool in tools}
    assert sorted(names - TITLES.keys()) == [], "add a title to memvault/tools/titles.py"
    assert sorted(TITLES.keys() - names) == [], "a title for a tool that is not registered"
    assert all(tool.title == TITLES[tool.name] for tool in tools)
