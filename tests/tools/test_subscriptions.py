"""Resource subscriptions end to end: whoever changes a file, its subscribers hear of it, in both eras.

Each test waits for a notification with a deadline of one second (never a fixed sleep). That a
vault hears nothing of another's changes is shown with a barrier: the watcher applies batches in
order, so once a later change in the same vault has been heard, an earlier one would have been too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for
from mcp.client.client import Client
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated
from mcp.types import ResourceListChangedNotification, ResourceUpdatedNotification

from memvault.errors import InvalidArgument
from memvault.ops.changes import Change
from memvault.tools.subscriptions import MAX_PENDING, MAX_URIS, Subscriber

pytestmark = [
    pytest.mark.anyio,
    # resources/subscribe is deprecated by the SDK (2026-07-28 removed it); the handshake era has it.
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

DEADLINE = 1.0  # seconds from a change to its notification
DEPLOY = "memvault://memories/deploy-notes.md"
GRAPH = "memory://knowledge-graph"
VAULT = "memvault://vault"


class Heard:
    """The change notifications one handshake-era client received, in order."""

    def __init__(self) -> None:
        self.items: list[str] = []

    async def __call__(self, message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            self.items.append(message.params.uri)
        elif isinstance(message, ResourceListChangedNotification):
            self.items.append("list_changed")

    async def wait(self, uri: str) -> None:
        await wait_for(lambda: uri in self.items, timeout=DEADLINE)


@contextlib.asynccontextmanager
async def legacy(srv: Any, token: str) -> AsyncIterator[tuple[Client, Heard]]:
    heard = Heard()
    async with Client(srv.mcp_url(token), mode="legacy", message_handler=heard) as client:
        yield client, heard


async def call(client: Client, tool: str, **args: Any) -> None:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content


def seed(vault_root: Path, token: str = "alice") -> Path:
    """A vault that exists before the server starts: no folder is created during a test, so every
    notification heard comes from the change the test makes."""
    folder = vault_root / token
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "deploy-notes.md").write_text("# Deploy notes\n\nPostgres on Fridays.\n", encoding="utf-8")
    (folder / "grocery-list.md").write_text("# Grocery list\n\nOat milk.\n", encoding="utf-8")
    pull_graph(folder, ["Ann"])
    return folder


def edit_by_hand(path: Path, old: str, new: str) -> None:
    path.write_text(path.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")


def pull_graph(folder: Path, names: list[str]) -> None:
    """What git does to a file on a pull: the new version written beside it, renamed over it."""
    lines = [
        json.dumps({"type": "entity", "name": n, "entityType": "person", "observations": []}) for n in names
    ]
    incoming = folder.parent / f".{folder.name}-incoming"
    incoming.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(incoming, folder / "graph.jsonl")


async def test_a_hand_edit_reaches_a_subscribed_client_within_a_second(server_factory, vault_root):
    seed(vault_root)
    async with server_factory() as srv, legacy(srv, "alice") as (client, heard):
        await client.subscribe_resource(DEPLOY)
        heard.items.clear()
        edit_by_hand(vault_root / "alice" / "deploy-notes.md", "Fridays", "Mondays")
        await heard.wait(DEPLOY)
        read = await client.read_resource(DEPLOY)
        assert "Mondays" in read.contents[0].text


async def test_another_clients_write_reaches_a_subscriber(server_factory, vault_root):
    seed(vault_root)
    async with (
        server_factory() as srv,
        legacy(srv, "alice") as (client, heard),
        legacy(srv, "alice") as (other, _),
    ):
        await client.subscribe_resource(DEPLOY)
        heard.items.clear()
        await call(other, "update_memory", filename="deploy-notes.md", append="And on Mondays.")
        await heard.wait(DEPLOY)


async def test_a_pulled_graph_reaches_a_subscriber(server_factory, vault_root):
    seed(vault_root)
    async with server_factory() as srv, legacy(srv, "alice") as (client, heard):
        await client.subscribe_resource(GRAPH)
        heard.items.clear()
        pull_graph(vault_root / "alice", ["Ann", "Bob"])
        await heard.wait(GRAPH)
        graph = json.loads((await client.read_resource(GRAPH)).contents[0].text)
        assert [e["name"] for e in graph["entities"]] == ["Ann", "Bob"]


async def test_the_sse_transport_delivers_subscriptions_too(server_factory, vault_root):
    from mcp.client.session import ClientSession
    from mcp.client.sse import sse_client

    heard = Heard()
    seed(vault_root)
    async with server_factory() as srv:
        async with (
            sse_client(srv.mcp_url("alice") + "/sse") as (read, write),
            ClientSession(read, write, message_handler=heard) as session,
        ):
            await session.initialize()
            await session.subscribe_resource(DEPLOY)
            heard.items.clear()
            edit_by_hand(vault_root / "alice" / "deploy-notes.md", "Fridays", "Mondays")
            await heard.wait(DEPLOY)


async def test_unsubscribing_stops_the_notifications(server_factory, vault_root):
    seed(vault_root)
    async with server_factory() as srv, legacy(srv, "alice") as (client, heard):
        grocery = "memvault://memories/grocery-list.md"
        await client.subscribe_resource(DEPLOY)
        await client.subscribe_resource(grocery)
        await client.unsubscribe_resource(DEPLOY)
        heard.items.clear()
        edit_by_hand(vault_root / "alice" / "deploy-notes.md", "Fridays", "Mondays")
        await call(client, "write_memory", title="Barrier", content="Applied after the edit.")
        edit_by_hand(vault_root / "alice" / "grocery-list.md", "Oat", "Soy")
        await heard.wait(grocery)
        assert DEPLOY not in heard.items


async def test_a_vault_subscriber_hears_every_change_of_its_vault_and_none_of_another(
    server_factory, vault_root
):
    seed(vault_root, "alice")
    seed(vault_root, "bob")
    async with server_factory() as srv, legacy(srv, "alice") as (alice, alice_heard):
        async with legacy(srv, "bob") as (bob, bob_heard):
            await alice.subscribe_resource(VAULT)
            await bob.subscribe_resource(VAULT)
            await call(alice, "write_memory", title="Alice note", content="alice's secret")
            await alice_heard.wait("memvault://memories/alice-note.md")
            assert "list_changed" in alice_heard.items
            # The barrier: bob's own change, after alice's.
            await call(bob, "write_memory", title="Bob note", content="mine")
            await bob_heard.wait("memvault://memories/bob-note.md")
            assert all("bob-note" in uri or uri in (VAULT, "list_changed") for uri in bob_heard.items)
            # A person's new file in alice's vault: alice hears of the list and the file.
            alice_heard.items.clear()
            (vault_root / "alice" / "by-hand.md").write_text("# By hand\n", encoding="utf-8")
            await alice_heard.wait("memvault://memories/by-hand.md")
            assert "list_changed" in alice_heard.items


# ---------------------------------------------------------------------------- 2026-07-28


async def next_event(subscription: Any) -> Any:
    async with asyncio.timeout(DEADLINE):
        async for event in subscription:
            return event


async def test_listen_delivers_hand_edits_and_pulls_in_the_2026_era(server_factory, vault_root):
    seed(vault_root)
    async with server_factory() as srv, Client(srv.mcp_url("alice")) as client:
        assert client.protocol_version == "2026-07-28"
        async with client.listen(resource_subscriptions=[DEPLOY]) as memory_events:
            edit_by_hand(vault_root / "alice" / "deploy-notes.md", "Fridays", "Mondays")
            assert await next_event(memory_events) == ResourceUpdated(uri=DEPLOY)
        async with client.listen(resource_subscriptions=[GRAPH]) as graph_events:
            pull_graph(vault_root / "alice", ["Ann", "Carol"])
            assert await next_event(graph_events) == ResourceUpdated(uri=GRAPH)


async def test_listen_hears_only_its_own_vault(server_factory, vault_root):
    seed(vault_root, "alice")
    seed(vault_root, "bob")
    async with (
        server_factory() as srv,
        Client(srv.mcp_url("alice")) as alice,
        Client(srv.mcp_url("bob")) as bob,
    ):
        async with bob.listen(resource_subscriptions=[VAULT], resources_list_changed=True) as bob_events:
            await call(alice, "write_memory", title="Alice note", content="alice's secret")
            await call(bob, "write_memory", title="Bob note", content="mine")  # the barrier
            heard = []
            while ResourceUpdated(uri="memvault://memories/bob-note.md") not in heard:
                heard.append(await next_event(bob_events))
        assert ResourcesListChanged() in heard
        assert all(e == ResourcesListChanged() or "bob-note" in e.uri or e.uri == VAULT for e in heard)


async def test_listen_refuses_uris_that_are_not_resources_here(server_factory):
    from mcp.shared.exceptions import MCPError

    async with server_factory() as srv, Client(srv.mcp_url("alice")) as client:
        with pytest.raises(MCPError, match="Invalid filename"):
            async with client.listen(resource_subscriptions=["memvault://memories/../x.md"]):
                pass


# ---------------------------------------------------------------------------- bounds


async def test_a_slow_reader_holds_a_bounded_backlog():
    stuck = asyncio.Event()

    async def never_returns(event: Any) -> None:
        await stuck.wait()

    subscriber = Subscriber("alice", never_returns, listing=True)
    subscriber.add(VAULT)
    delivering = asyncio.create_task(subscriber.deliver())
    try:
        for i in range(20_000):  # a git pull of 20,000 files, one batch each
            subscriber.changed(Change(frozenset({f"memory:n{i}.md"}), listing=True))
            if i % 1000 == 0:
                await asyncio.sleep(0)
        assert len(subscriber.pending) <= MAX_PENDING + 1
        # What it will be told once it reads again: the vault changed, nothing lost by that.
        subscriber.changed(Change(frozenset({"memory:last.md"})))
        assert VAULT in subscriber.pending or "memvault://memories/last.md" in subscriber.pending
    finally:
        delivering.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await delivering


async def test_subscriptions_end_with_their_client(server_factory, vault_root):
    seed(vault_root)
    async with server_factory() as srv:
        changes = srv.app.state.service.changes
        async with legacy(srv, "alice") as (client, _):
            await client.subscribe_resource(DEPLOY)
            await client.subscribe_resource(VAULT)
            assert changes.listening("alice") == 1  # one connection, one listener
        await wait_for(lambda: changes.listening("alice") == 0)
        async with Client(srv.mcp_url("alice")) as modern:
            async with modern.listen(resource_subscriptions=[DEPLOY]):
                assert changes.listening("alice") == 1
            await wait_for(lambda: changes.listening("alice") == 0)


async def test_a_session_summary_subscriber_hears_of_each_new_version(server_factory, vault_root):
    seed(vault_root)
    retro = "memvault://sessions/Retro%20%2F%20March"  # an id whose file name is a slug and a hash
    async with server_factory() as srv, legacy(srv, "alice") as (client, heard):
        await call(client, "upsert_summary", sessionId="Retro / March", summary="First.")
        await client.subscribe_resource(retro)
        # A barrier: once a later write is heard, the sessions/ folder's creation has been too.
        await client.subscribe_resource("memvault://memories/barrier.md")
        await call(client, "write_memory", title="Barrier", content="After the first version.")
        await heard.wait("memvault://memories/barrier.md")
        heard.items.clear()
        await call(client, "append_summary", sessionId="Retro / March", content="Second.")
        await heard.wait(retro)
        assert "Second." in (await client.read_resource(retro)).contents[0].text


async def test_a_client_subscribes_to_a_bounded_number_of_resources():
    async def send(event: Any) -> None:
        pass

    subscriber = Subscriber("alice", send, listing=False)
    for i in range(MAX_URIS):
        subscriber.add(f"memvault://memories/n{i}.md")
    subscriber.add("memvault://memories/n0.md")  # again: no new room taken
    with pytest.raises(InvalidArgument, match="memvault://vault"):
        subscriber.add("memvault://memories/one-more.md")
    subscriber.add(VAULT)  # the whole vault is always one subscription


def kernel_overflow() -> None:
    """What the kernel sends when its inotify queue overflows, through watchdog's own handling."""
    from watchdog.observers.inotify_c import InotifyConstants, InotifyEvent, InotifyFD, WatchDescriptor

    InotifyFD.get_instance().handle_event(
        InotifyEvent(WatchDescriptor(-1), InotifyConstants.IN_Q_OVERFLOW, 0, b"")
    )


async def test_lost_events_tell_each_vault_only_what_changed_in_it(server_factory, vault_root, monkeypatch):
    """Issue 46, 7: one inotify overflow sent every vault's listeners "everything changed"."""
    seed(vault_root, "alice")
    seed(vault_root, "bob")
    grocery = "memvault://memories/grocery-list.md"
    async with (
        server_factory() as srv,
        legacy(srv, "alice") as (alice, alice_heard),
        legacy(srv, "bob") as (bob, bob_heard),
    ):
        for client in (alice, bob):
            await client.subscribe_resource(VAULT)
            await client.subscribe_resource(DEPLOY)
        watcher, changes = srv.app.state.watcher, srv.app.state.service.changes
        assert watcher.mode == "inotify"
        await wait_for(lambda: watcher.idle and changes.idle)
        alice_heard.items.clear()
        bob_heard.items.clear()

        # Alice's vault changes while the kernel drops the events; bob's does not change.
        monkeypatch.setattr(watcher, "push", lambda event: None)
        edit_by_hand(vault_root / "alice" / "grocery-list.md", "Oat", "Soy")
        (vault_root / "alice" / "new-note.md").write_text("# New note\n\nPulled.\n", encoding="utf-8")
        monkeypatch.undo()
        kernel_overflow()
        await alice_heard.wait(grocery)
        await alice_heard.wait("memvault://memories/new-note.md")
        await alice_heard.wait("list_changed")  # a file came
        edit_by_hand(vault_root / "bob" / "grocery-list.md", "Oat", "Rice")  # the barrier
        await bob_heard.wait(grocery)
        assert DEPLOY not in alice_heard.items  # unchanged: not announced
        assert bob_heard.items == [grocery], bob_heard.items
