"""End-to-end: the HTTP surface (healthz, token rules, sessions, caps, Host checks) and path attacks."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from pathlib import Path

import httpx2
import pytest
from commands import INITIALIZE, INITIALIZE_REQUEST, MCP_HEADERS
from conftest import wait_for

pytestmark = [
    pytest.mark.anyio,
    # watchdog warns from its inotify thread when a new folder (token/.memvault) is added to the
    # recursive watch twice; pytest's filterwarnings=error would turn that into a dead watcher thread.
    pytest.mark.filterwarnings("ignore:Callback with id .* already exists for watch:RuntimeWarning"),
]

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def port_of(srv) -> int:
    return int(srv.url.rsplit(":", 1)[1])


def tree(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def assert_clean_error(text: str, root: Path) -> None:
    assert "Traceback" not in text
    assert str(root) not in text and str(root.parent) not in text
    assert "internal error" not in text, text


async def raw_status(
    port: int, method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b""
) -> int:
    """Send a request line exactly as given (no client-side normalisation) and return the status."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        fields = {"Host": f"127.0.0.1:{port}", "Connection": "close", **(headers or {})}
        if method != "GET" or body:
            fields["Content-Length"] = str(len(body))
        head = (
            f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
        )
        writer.write(head.encode("latin-1") + body)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 10)
        assert line.startswith(b"HTTP/1.1 "), line
        return int(line.split()[1])
    finally:
        writer.close()


# ---------------------------------------------------------------------------- healthz


async def test_healthz_reports_status_without_token_or_secrets(server_factory):
    async with server_factory() as srv:
        async with srv.session("alice-secret-token") as s:
            assert not (await srv.call(s, "write_memory", title="x", content="y"))[0]
        async with httpx2.AsyncClient() as client:
            response = await client.get(f"{srv.url}/healthz")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        body = response.json()
        assert body["status"] == "ok"
        assert body["version"]
        assert body["watcher"] in ("inotify", "polling")
        assert (body["tokens_loaded"], body["memories_loaded"]) == (1, 1)
        assert "alice-secret-token" not in response.text
        assert str(srv.settings.root) not in response.text


async def healthz(srv) -> dict:
    async with httpx2.AsyncClient() as client:
        return (await client.get(f"{srv.url}/healthz")).json()


async def loaded_healthz(srv) -> dict:
    """/healthz once the embedder has loaded (WordLlama loads in the background)."""

    async def loaded() -> dict | None:
        body = await healthz(srv)
        return None if body["embeddings"]["name"].endswith("(loading)") else body

    return await wait_for(loaded, timeout=30, interval=0.1)


async def test_healthz_names_maxsim_as_the_default_reranker(server_factory):
    async with server_factory() as srv:  # the default settings: WordLlama, MaxSim
        body = await loaded_healthz(srv)
    assert body["embeddings"]["name"].startswith("wordllama")
    assert body["reranker"] == {"name": "maxsim"}


async def test_healthz_says_the_reranker_is_off_when_set_off(server_factory):
    async with server_factory(embedder="wordllama", reranker="off") as srv:
        body = await loaded_healthz(srv)
    assert body["embeddings"]["name"].startswith("wordllama")
    assert body["reranker"] == {"name": "off"}


async def test_healthz_says_maxsim_is_off_with_the_hash_embedder(server_factory):
    async with server_factory(embedder="hash", reranker="maxsim") as srv:
        body = await loaded_healthz(srv)
    assert body["embeddings"]["name"].startswith("hash")
    assert body["reranker"] == {"name": "off"}


async def test_healthz_says_why_a_cross_encoder_is_off_without_its_path(
    server_factory, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # not installed
    async with server_factory(embedder="hash", reranker="cross-encoder:/nowhere/ms-marco") as srv:
        before = await healthz(srv)
        async with srv.session("tok") as s:
            assert not (await srv.call(s, "write_memory", title="Deploy", content="Deploy on Fridays."))[0]
            is_error, reply = await srv.call(s, "recall", query="deploy")
            assert not is_error and "deploy.md" in reply
        async with httpx2.AsyncClient() as client:
            response = await client.get(f"{srv.url}/healthz")
    assert before["reranker"] == {"name": "cross-encoder:ms-marco (not loaded yet)"}
    reranker = response.json()["reranker"]
    assert reranker["name"] == "off"
    assert reranker["fallback"].startswith("cross-encoder:ms-marco could not load:")
    assert "sentence-transformers" in reranker["fallback"]
    assert "/nowhere" not in response.text


# ---------------------------------------------------------------------------- token rules

BAD_TARGETS = [
    "/mcp/..",
    "/mcp/%2e%2e",
    "/mcp/%2e%2e/sse",
    "/mcp/%2E%2E/messages/?session_id=x",
    "/mcp/..%2f..%2ftmp",
    "/mcp/...",
    "/mcp/.hidden",
    "/mcp/.hidden/sse",
    "/mcp/.memvault",
    "/mcp/a%2Fb",
    "/mcp/a%5Cb",
    "/mcp/a%00b",
    "/mcp/a%20b",
    "/mcp/-dash",
    "/mcp/" + "a" * 129,
    "/mcp/" + "a" * 129 + "/sse",
]


async def test_bad_tokens_are_404_and_touch_nothing(server_factory, tmp_path):
    async with server_factory() as srv:
        port = port_of(srv)
        before = tree(tmp_path)
        for target in BAD_TARGETS:
            for method in ("GET", "POST", "DELETE"):
                body = INITIALIZE if method == "POST" else b""
                status = await raw_status(port, method, target, MCP_HEADERS, body)
                assert status == 404, (method, target, status)
        # A space in the request target is not even valid HTTP.
        status = await raw_status(port, "POST", "/mcp/a b", MCP_HEADERS, INITIALIZE)
        assert 400 <= status < 500 and status != 200
        assert tree(tmp_path) == before

        # The longest valid token (128 characters) works, and a read does not create its folder.
        longest = "b" * 128
        async with srv.session(longest, "http") as s:
            err, text = await srv.call(s, "list_memory_titles")
            assert not err, text
        assert tree(tmp_path) == before


async def test_unknown_token_folder_created_on_first_write_only(server_factory):
    async with server_factory() as srv:
        root = srv.settings.root
        for transport in ("http", "sse"):
            token = f"carol-{transport}"
            async with srv.session(token, transport) as s:
                for tool, args in [
                    ("list_memory_titles", {}),
                    ("read_memory", {}),
                    ("read_memory", {"query": "anything"}),
                    ("search_archive", {"query": "anything"}),
                    ("evict_memories", {"dryRun": True}),
                    ("evict_memories", {}),
                ]:
                    err, text = await srv.call(s, tool, **args)
                    assert not err, (tool, text)
                for tool, args in [
                    ("read_memory", {"filenames": ["nope.md"]}),
                    ("update_memory", {"filename": "nope.md", "content": "x"}),
                    ("delete_memory", {"filename": "nope.md"}),
                    ("restore_memory", {"filename": "nope.md"}),
                ]:
                    err, text = await srv.call(s, tool, **args)
                    assert err, (tool, text)
                    assert_clean_error(text, root)
                assert not (root / token).exists(), f"a read created the folder of {token}"

                err, text = await srv.call(s, "write_memory", title="First", content="the first write")
                assert not err, text
                assert (root / token / "first.md").is_file()


# ---------------------------------------------------------------------------- path attacks

BAD_NAMES = [
    "..",
    "../x.md",
    "../bob/secret.md",
    "/etc/passwd",
    "a\\b.md",
    ".hidden.md",
    "sub/../../x.md",
    "x\x00.md",
]


async def test_path_attacks_in_tool_arguments(server_factory, vault_root, tmp_path):
    folder = vault_root / "alice"
    folder.mkdir()
    (folder / "keep.md").write_text("---\npriority: P1\n---\n# Keep\n\nkeep me\n", encoding="utf-8")
    (folder / ".hidden.md").write_text("# Hidden\n\nhidden text\n", encoding="utf-8")
    archived = folder / "archive" / "x.md"
    archived.parent.mkdir()
    archived.write_text("---\npriority: P2\n---\n# Archived x\n\narchived text\n", encoding="utf-8")
    archived_bytes = archived.read_bytes()
    outside_dir = tmp_path / "outside"
    outside_dir.mkdir()
    secret = outside_dir / "secret.md"
    secret.write_text("---\npriority: P0\n---\n# Secret\n\nexfiltrated marmalade\n", encoding="utf-8")
    secret_bytes = secret.read_bytes()
    os.symlink(secret, folder / "leak.md")
    os.symlink(outside_dir, folder / "linkdir")

    async with server_factory() as srv, srv.session("alice") as s:
        names = [*BAD_NAMES, "leak.md", "leak", "linkdir/secret.md"]
        for name in names:
            calls = [
                ("read_memory", {"filenames": [name]}),
                ("update_memory", {"filename": name, "content": "overwritten"}),
                ("delete_memory", {"filename": name}),
                ("restore_memory", {"filename": name}),
            ]
            for tool, args in calls:
                err, text = await srv.call(s, tool, **args)
                assert err, (tool, name, text)
                assert_clean_error(text, vault_root)
                assert "marmalade" not in text and "root:" not in text, (tool, name, text)

        # archive/... is not a hot memory: update, delete and read refuse it.
        for tool, args in [
            ("update_memory", {"filename": "archive/x.md", "content": "changed"}),
            ("delete_memory", {"filename": "archive/x.md"}),
            ("read_memory", {"filenames": ["archive/x.md"]}),
        ]:
            err, text = await srv.call(s, tool, **args)
            assert err, (tool, text)
            assert "restore_memory" in text, text
            assert_clean_error(text, vault_root)
        assert archived.read_bytes() == archived_bytes

        # Links out of the vault are neither listed nor searchable.
        err, text = await srv.call(s, "list_memory_titles")
        assert not err
        lines = text.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("keep.md|Keep|P1|"), text
        err, text = await srv.call(s, "read_memory", query="marmalade")
        assert not err and "marmalade" not in text.replace("'marmalade'", ""), text
        err, text = await srv.call(s, "read_memory")
        assert not err and "marmalade" not in text and "hidden text" not in text, text

        # A new memory whose slug names the link gets another name; the outside file is untouched.
        err, text = await srv.call(s, "write_memory", title="Leak", content="innocent content")
        assert not err, text
        assert "leak.md" not in text.replace("leak-2.md", ""), text
        err, text = await srv.call(s, "write_memory", title="Secret", content="another innocent content")
        assert not err, text

        assert secret.read_bytes() == secret_bytes
        assert sorted(p.name for p in outside_dir.iterdir()) == ["secret.md"]
        assert os.path.islink(folder / "leak.md") and os.path.islink(folder / "linkdir")
        assert (folder / ".hidden.md").read_text(encoding="utf-8") == "# Hidden\n\nhidden text\n"
        assert (folder / "keep.md").read_text(encoding="utf-8").endswith("keep me\n")


@pytest.mark.slow
async def test_two_tokens_are_isolated(server_factory):
    async with server_factory() as srv:
        root = srv.settings.root
        async with srv.session("bob", "sse") as bob:
            err, text = await srv.call(
                bob, "write_memory", title="Bob secret", content="pineapple pizza code 4242"
            )
            assert not err, text
        bob_file = root / "bob" / "bob-secret.md"
        bob_bytes = bob_file.read_bytes()
        async with srv.session("alice", "http") as alice:
            err, text = await srv.call(alice, "list_memory_titles")
            assert not err and "bob-secret" not in text
            for args in ({"query": "pineapple"}, {"query": "Bob secret"}, {}):
                err, text = await srv.call(alice, "read_memory", **args)
                assert (
                    not err and "4242" not in text and "Bob secret" not in text.replace("'Bob secret'", "")
                ), text
            err, text = await srv.call(alice, "search_archive", query="pineapple")
            assert not err and "4242" not in text
            for name in ("bob-secret.md", "../bob/bob-secret.md", "bob/bob-secret.md"):
                err, text = await srv.call(alice, "read_memory", filenames=[name])
                assert err and "4242" not in text, text
                err, text = await srv.call(alice, "delete_memory", filename=name)
                assert err, text
                err, text = await srv.call(alice, "update_memory", filename=name, content="hijacked")
                assert err, text
            # alice writes the same title: her own file, bob's untouched.
            err, text = await srv.call(alice, "write_memory", title="Bob secret", content="alice's version")
            assert not err and "bob-secret.md" in text
        assert bob_file.read_bytes() == bob_bytes
        assert "alice's version" in (root / "alice" / "bob-secret.md").read_text(encoding="utf-8")
        async with srv.session("bob", "http") as bob:
            err, text = await srv.call(bob, "read_memory", query="pineapple")
            assert not err and "4242" in text and "alice's version" not in text


# ---------------------------------------------------------------------------- sessions bound to tokens


async def test_streamable_session_id_is_bound_to_its_token(server_factory):
    async with server_factory() as srv, httpx2.AsyncClient(timeout=10) as client:
        response = await client.post(f"{srv.url}/mcp/a", json=INITIALIZE_REQUEST, headers=MCP_HEADERS)
        assert response.status_code == 200, response.text
        session_id = response.headers["mcp-session-id"]
        with_session = {**MCP_HEADERS, "mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"}

        response = await client.post(f"{srv.url}/mcp/a", json=INITIALIZED, headers=with_session)
        assert response.status_code in (200, 202), response.text

        for method in ("POST", "GET", "DELETE"):
            response = await client.request(
                method,
                f"{srv.url}/mcp/b",
                headers=with_session,
                content=json.dumps(TOOLS_LIST) if method == "POST" else None,
            )
            assert response.status_code == 404, (method, response.status_code, response.text)
            assert "list_memory_titles" not in response.text

        # Under its own token the session still works (it was not torn down by the attempts).
        response = await client.post(f"{srv.url}/mcp/a", json=TOOLS_LIST, headers=with_session)
        assert response.status_code == 200, response.text
        assert "list_memory_titles" in response.text
        assert not (srv.settings.root / "b").exists()


async def test_sse_session_id_is_bound_to_its_token(server_factory):
    async with server_factory() as srv, httpx2.AsyncClient(timeout=10) as client:
        async with client.stream(
            "GET", f"{srv.url}/mcp/a/sse", headers={"Accept": "text/event-stream"}
        ) as stream:
            assert stream.status_code == 200
            endpoint = None
            lines = stream.aiter_lines()
            async with asyncio.timeout(10):
                async for line in lines:
                    if line.startswith("data: ") and "session_id=" in line:
                        endpoint = line[len("data: ") :].strip()
                        break
            assert endpoint is not None and endpoint.startswith("/mcp/a/messages/"), endpoint
            query = endpoint.split("?", 1)[1]

            response = await client.post(f"{srv.url}/mcp/b/messages/?{query}", json=INITIALIZE_REQUEST)
            assert response.status_code == 404, (response.status_code, response.text)
            response = await client.post(f"{srv.url}/mcp/a/messages/?{query}", json=INITIALIZE_REQUEST)
            assert response.status_code == 202, (response.status_code, response.text)
            async with asyncio.timeout(10):
                async for line in lines:
                    if line.startswith("data: ") and '"result"' in line:
                        assert '"serverInfo"' in line
                        break


# ---------------------------------------------------------------------------- body cap


@pytest.mark.slow
async def test_request_body_cap(server_factory):
    async with server_factory(max_body_bytes=10_000) as srv, httpx2.AsyncClient(timeout=10) as client:
        big = {**INITIALIZE_REQUEST, "params": {**INITIALIZE_REQUEST["params"], "padding": "x" * 20_000}}
        payload = json.dumps(big).encode()
        assert len(payload) > 20_000
        for url in (
            f"{srv.url}/mcp/a",
            f"{srv.url}/mcp/a/messages/?session_id=00000000000000000000000000000000",
        ):
            response = await client.post(url, content=payload, headers=MCP_HEADERS)
            assert response.status_code == 413, (url, response.status_code, response.text)

        # Without a Content-Length (chunked), the cap still holds.
        async def chunks():
            for start in range(0, len(payload), 4096):
                yield payload[start : start + 4096]

        response = await client.post(f"{srv.url}/mcp/a", content=chunks(), headers=MCP_HEADERS)
        assert 400 <= response.status_code < 500, (response.status_code, response.text)
        assert "mcp-session-id" not in response.headers

        # Under the cap, fine.
        response = await client.post(f"{srv.url}/mcp/a", json=INITIALIZE_REQUEST, headers=MCP_HEADERS)
        assert response.status_code == 200, response.text

    # Through the official streamable HTTP client: an oversized tool call fails and stores nothing.
    # (The SDK's legacy SSE client only logs a 413 from its POST and never answers the call, so over
    # SSE the server side is checked above with a raw POST to /messages/.)
    async with server_factory(max_body_bytes=10_000) as srv:
        folder = srv.settings.root / "alice"
        async with srv.session("alice", "http") as s:
            try:
                err, text = await asyncio.wait_for(
                    srv.call(s, "write_memory", title="big", content="z" * 20_000), 10
                )
            except TimeoutError:
                raise AssertionError("an oversized call hung instead of failing") from None
            except Exception:
                pass  # the transport reported the 413 as an error
            else:
                assert err, text
        assert not (folder / "big.md").exists()
        async with srv.session("alice", "http") as s:
            err, text = await srv.call(s, "write_memory", title="small", content="fits")
            assert not err, text
        assert (folder / "small.md").is_file()


# ---------------------------------------------------------------------------- Host / Origin


@pytest.mark.slow
async def test_host_and_origin_checks(server_factory):
    async with server_factory() as srv, httpx2.AsyncClient(timeout=10) as client:
        port = port_of(srv)
        url = f"{srv.url}/mcp/a"
        response = await client.post(
            url, json=INITIALIZE_REQUEST, headers={**MCP_HEADERS, "Host": "evil.example"}
        )
        assert response.status_code == 421, (response.status_code, response.text)
        assert "mcp-session-id" not in response.headers
        response = await client.post(
            url, json=INITIALIZE_REQUEST, headers={**MCP_HEADERS, "Host": f"evil.example:{port}"}
        )
        assert 400 <= response.status_code < 500
        status = await raw_status(
            port, "GET", "/mcp/a/sse", {"Host": "evil.example", "Accept": "text/event-stream"}
        )
        assert 400 <= status < 500

        response = await client.post(
            url,
            json=INITIALIZE_REQUEST,
            headers={**MCP_HEADERS, "Origin": "http://evil.example", "Host": f"localhost:{port}"},
        )
        assert 400 <= response.status_code < 500, response.status_code

        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost"):
            response = await client.post(url, json=INITIALIZE_REQUEST, headers={**MCP_HEADERS, "Host": host})
            assert response.status_code == 200, (host, response.status_code, response.text)
        response = await client.post(
            url, json=INITIALIZE_REQUEST, headers={**MCP_HEADERS, "Origin": f"http://localhost:{port}"}
        )
        assert response.status_code == 200

    async with server_factory(allowed_hosts=("myhost:*",)) as srv, httpx2.AsyncClient(timeout=10) as client:
        url = f"{srv.url}/mcp/a"
        response = await client.post(
            url, json=INITIALIZE_REQUEST, headers={**MCP_HEADERS, "Host": "myhost:1234"}
        )
        assert response.status_code == 200, (response.status_code, response.text)
        response = await client.post(
            url, json=INITIALIZE_REQUEST, headers={**MCP_HEADERS, "Host": "otherhost:1234"}
        )
        assert response.status_code == 421
        response = await client.post(
            url, json=INITIALIZE_REQUEST, headers={**MCP_HEADERS, "Host": f"127.0.0.1:{port_of(srv)}"}
        )
        assert response.status_code == 200


# ---------------------------------------------------------------------------- allowlist


async def test_tokens_file_allowlist(server_factory, tmp_path):
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("# who may connect\nalice\n\ncarol  # trailing comment\n", encoding="utf-8")
    async with server_factory(tokens_file=tokens) as srv:
        async with srv.session("alice", "http") as s:
            err, text = await srv.call(s, "write_memory", title="Allowed", content="alice may write")
            assert not err, text
        async with srv.session("carol", "sse") as s:
            err, text = await srv.call(s, "list_memory_titles")
            assert not err, text
        async with httpx2.AsyncClient(timeout=10) as client:
            response = await client.post(f"{srv.url}/mcp/bob", json=INITIALIZE_REQUEST, headers=MCP_HEADERS)
            assert response.status_code == 403, response.text
            assert "alice" not in response.text
            response = await client.post(f"{srv.url}/mcp/bob/messages/?session_id=x", json=INITIALIZE_REQUEST)
            assert response.status_code == 403
        status = await raw_status(port_of(srv), "GET", "/mcp/bob/sse", {"Accept": "text/event-stream"})
        assert status == 403
        assert sorted(p.name for p in srv.settings.root.iterdir()) == ["alice"]


@pytest.mark.slow
async def test_a_token_folder_that_is_a_link_is_refused_and_never_followed(
    server_factory, vault_root, tmp_path
):
    """Issue 9, 4: a token folder linked to another token's folder, or out of the root, was followed:
    a token read, rewrote and created files outside its own folder."""
    bob = vault_root / "bob"
    bob.mkdir(parents=True)
    (bob / "secret.md").write_text(
        "---\npriority: P1\n---\n# Secret\n\nbob's okapi secret\n", encoding="utf-8"
    )
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "note.md").write_text("# Outside\n\noutside okapi text\n", encoding="utf-8")
    os.symlink(bob, vault_root / "alice")
    os.symlink(outside, vault_root / "carol")
    before = {p: p.read_bytes() for p in (bob / "secret.md", outside / "note.md")}
    async with server_factory() as srv:
        for token in ("alice", "carol"):
            async with srv.session(token) as s:
                for tool, args in [
                    ("list_memory_titles", {}),
                    ("read_memory", {"query": "okapi"}),
                    ("read_memory", {"filenames": ["secret.md"]}),
                    ("write_memory", {"title": "Planted", "content": "planted by a linked token"}),
                    ("update_memory", {"filename": "secret.md", "content": "overwritten"}),
                    ("recall", {"query": "okapi secret"}),
                    ("upsert_summary", {"sessionId": "s1", "summary": "planted summary"}),
                ]:
                    err, text = await srv.call(s, tool, **args)
                    assert err and "symbolic link" in text, (token, tool, text)
                    assert "okapi" not in text and str(tmp_path) not in text
        assert {p: p.read_bytes() for p in before} == before
        assert sorted(p.name for p in outside.iterdir()) == ["note.md"]  # nothing created outside the root
        assert sorted(p.name for p in bob.iterdir()) == ["secret.md"]
        async with srv.session("bob") as s:  # the real owner is unaffected
            err, text = await srv.call(s, "read_memory", query="okapi")
            assert not err and "secret.md" in text


# ------------------------------------------------------------ resources that come back (issue 9, 6)


async def test_a_client_that_never_ends_its_sessions_recycles_only_its_own(server_factory):
    """10,000 initialize calls without DELETE filled the SDK's session cap, and every token was then
    refused new sessions for 30 minutes."""
    async with server_factory(max_sessions_per_token=3) as srv, httpx2.AsyncClient(timeout=10) as client:
        manager = srv.app.state.server.session_manager
        opened = []
        for _ in range(12):
            response = await client.post(
                f"{srv.url}/mcp/greedy", json=INITIALIZE_REQUEST, headers=MCP_HEADERS
            )
            assert response.status_code == 200, response.text
            opened.append(response.headers["mcp-session-id"])
        assert len(srv.app.state.sessions.oldest_first(token="greedy")) == 3
        assert len(manager._server_instances) <= 3
        # The newest still work, the oldest were closed (a client then starts a new one, as after a 404).
        for sid, alive in ((opened[-1], True), (opened[0], False)):
            headers = {**MCP_HEADERS, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
            response = await client.post(f"{srv.url}/mcp/greedy", json=TOOLS_LIST, headers=headers)
            assert (response.status_code == 200) is alive, (alive, response.status_code, response.text)
        # Another vault is not affected.
        response = await client.post(f"{srv.url}/mcp/other", json=INITIALIZE_REQUEST, headers=MCP_HEADERS)
        assert response.status_code == 200, response.text


@pytest.mark.slow
async def test_messages_to_made_up_tokens_leave_no_sse_state_behind(server_factory):
    """One legacy SSE app per token name ever posted to: 80,000 made-up names held 310 MB."""
    async with server_factory() as srv, httpx2.AsyncClient(timeout=10) as client:
        sse_apps = srv.app.state.sse_apps
        for i in range(200):
            response = await client.post(
                f"{srv.url}/mcp/made-up-{i}/messages/?session_id=abc", json=INITIALIZE_REQUEST
            )
            assert response.status_code == 404, response.text
        assert sse_apps.apps == {} and sse_apps.streams == {}
        async with srv.session("alice", transport="sse") as session:
            err, text = await srv.call(session, "list_memory_titles")
            assert not err, text
            assert list(sse_apps.apps) == ["alice"]
        await wait_for(lambda: sse_apps.apps == {}, 5.0)  # gone once its last stream ended


async def test_a_refused_legacy_sse_request_is_one_log_line_not_a_traceback(server_factory, caplog):
    """A refused Host or Origin on GET /mcp/<token>/sse once logged a 70-line traceback each time."""
    caplog.set_level(logging.WARNING)
    uvicorn_log = logging.getLogger("uvicorn.error")  # uvicorn's loggers do not reach the root's
    async with server_factory() as srv, httpx2.AsyncClient(timeout=10) as client:
        uvicorn_log.addHandler(caplog.handler)
        try:
            for headers in ({"Host": "evil.example"}, {"Origin": "http://evil.example"}):
                response = await client.get(f"{srv.url}/mcp/a/sse", headers=headers)
                assert response.status_code in (403, 421), response.status_code
        finally:
            uvicorn_log.removeHandler(caplog.handler)
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in records if r.exc_info], [r.getMessage() for r in records if r.exc_info]
    assert len(records) <= 2, [r.getMessage() for r in records]


async def test_an_unknown_prompt_or_resource_is_a_clear_error_without_a_traceback(server_factory, caplog):
    """The server once advertised prompts and resources and served none, and an unknown prompt was
    error 0 with a traceback in the log (issue 14); since issue 36 it serves both."""
    from mcp.shared.exceptions import MCPError

    caplog.set_level(logging.INFO)
    async with server_factory() as srv, srv.session("a") as session:
        capabilities = session.server_capabilities
        assert capabilities is not None and capabilities.tools is not None
        assert capabilities.prompts is not None and capabilities.resources is not None
        for call, words in (
            (session.get_prompt("no-such-prompt"), "prompts/list"),
            (session.read_resource("memvault://memories/none.md"), "list_memory_titles"),
        ):
            with pytest.raises(MCPError) as info:
                await call
            assert info.value.code in (-32602, -32002) and words in str(info.value)
    assert not [r.getMessage() for r in caplog.records if r.exc_info]
