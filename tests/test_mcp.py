"""MCP tools of the served store, driven by the ``mcp`` package's own client: a real session
(initialize, list tools, call them) over streamable HTTP at ``/mcp`` and over stdio with
``memini mcp``."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

import memini
from embed_helpers import needs_weights
from memini import APIKey, EventFilter, EventKind, hash_api_key
from memini.server import Server, ServerOptions

TOOLS = {
    "memory_remember",
    "memory_recall",
    "memory_get",
    "memory_list",
    "memory_update",
    "memory_forget",
}
KEY = "mcp-key-secret"


def _data(result: Any) -> Any:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        data = result.structured_content
        return data.get("result", data) if set(data) == {"result"} else data
    return json.loads(result.content[0].text)


async def _exercise(session: ClientSession) -> dict[str, Any]:
    """Initialize, list the tools, remember / recall / get / list / update / forget."""
    init = await session.initialize()
    assert init.server_info.name == "memini"
    tools = {t.name: t for t in (await session.list_tools()).tools}
    assert set(tools) == TOOLS
    schema = tools["memory_remember"].input_schema
    assert schema["required"] == ["content"]
    assert schema["properties"]["importance"]["type"] == "number"
    assert "ctx" not in schema["properties"]
    assert set(tools["memory_recall"].input_schema["properties"]) >= {"query", "k"}

    stored = _data(
        await session.call_tool(
            "memory_remember",
            {"content": "the user drinks oat milk coffee", "tags": ["diet"], "id": "m1"},
        )
    )
    assert stored["id"] == "m1" and stored["tags"] == ["diet"]
    await session.call_tool("memory_remember", {"content": "meeting moved to friday"})
    hits = _data(await session.call_tool("memory_recall", {"query": "coffee", "k": 5}))
    assert [h["memory"]["id"] for h in hits] == ["m1"]
    assert hits[0]["score"] > 0
    got = _data(await session.call_tool("memory_get", {"id": "m1"}))
    assert got["content"] == "the user drinks oat milk coffee"
    listed = _data(await session.call_tool("memory_list", {"limit": 10}))
    assert len(listed) == 2
    updated = _data(await session.call_tool("memory_update", {"id": "m1", "importance": 0.9}))
    assert updated["importance"] == 0.9 and updated["content"] == got["content"]
    assert _data(await session.call_tool("memory_forget", {"id": "m1"})) == {"forgotten": "m1"}
    missing = await session.call_tool("memory_get", {"id": "m1"})
    assert missing.is_error
    assert "NotFoundError" in missing.content[0].text
    return got


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Server]:
    opts = ServerOptions(port=0, admin_key="mcp-admin", mcp_namespace="admin-ns")
    server = Server.open(tmp_path / "store", dims=4, options=opts)
    server.service.store.put_api_key(
        APIKey("agent", hash_api_key(KEY), home_ns="team", default_ns="team/agent")
    )
    server.service.gate.keys_changed()
    server.start()
    yield server
    server.stop()


@contextlib.asynccontextmanager
async def _http_session(url: str) -> AsyncIterator[ClientSession]:
    """An MCP client session at ``url``/mcp as the API key ``KEY``."""
    headers = {"authorization": f"Bearer {KEY}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        yield session


def test_mcp_over_streamable_http(served: Server) -> None:
    async def main() -> None:
        async with _http_session(served.url) as session:
            got = await _exercise(session)
            assert got["namespace"] == "team/agent"  # the key's default_ns

    anyio.run(main)
    with memini.connect(served.url, api_key="mcp-admin") as admin:
        assert admin.count("team/agent") == 1
        served.service.recorder.flush()  # type: ignore[union-attr]
        kinds = {e.kind for e in admin.list_events(EventFilter(namespace="team/agent"))}
        assert {EventKind.REMEMBER, EventKind.RECALL, EventKind.UPDATE, EventKind.FORGET} <= kinds


def test_mcp_http_refuses_bad_credentials(served: Server) -> None:
    r = httpx2.post(
        f"{served.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        headers={"authorization": "Bearer wrong", "accept": "application/json"},
    )
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "AuthError"


def test_mcp_over_stdio(tmp_path: Path) -> None:
    store = tmp_path / "store"
    memini.Store.open(store, dims=4).close()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memini.cli", "mcp", "--store", str(store), "--namespace", "agent-1"],
    )

    async def main() -> None:
        with anyio.fail_after(120):
            async with (
                stdio_client(params) as (read, write, *_),
                ClientSession(read, write) as session,
            ):
                got = await _exercise(session)
                assert got["namespace"] == "agent-1"

    anyio.run(main)
    with memini.Store.open(store) as s:  # the stdio server closed the store cleanly
        assert s.count("agent-1") == 1


@needs_weights
def test_mcp_text_in_with_the_local_embedder(tmp_path: Path) -> None:
    """``--embedder local``: remembered text is embedded, and recall finds it by meaning."""
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "memini.cli",
            "mcp",
            "--store",
            str(tmp_path / "store"),
            "--namespace",
            "agent",
            "--embedder",
            "local",
        ],
    )

    async def main() -> None:
        with anyio.fail_after(180):
            async with (
                stdio_client(params) as (read, write, *_),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                for text in ("the user drinks espresso every morning", "the cat is named Tom"):
                    await session.call_tool("memory_remember", {"content": text})
                hits = _data(
                    await session.call_tool("memory_recall", {"query": "hot beverage", "k": 1})
                )
                assert hits[0]["memory"]["content"].startswith("the user drinks espresso")
                assert hits[0]["vector_score"] is not None

    anyio.run(main)
    with memini.Store.open(tmp_path / "store") as s:
        assert s.embed_model().endswith("all-MiniLM-L6-v2")


def test_mcp_recall_with_a_huge_k_is_a_tool_error_naming_the_limit(served: Server) -> None:
    """One ``memory_recall`` with k=1e9 from any key once stopped the server (allocation
    abort in the core's fusion); now it is the tool's error and the server answers on."""

    async def main() -> None:
        async with _http_session(served.url) as session:
            await session.initialize()
            await session.call_tool("memory_remember", {"content": "hello there"})
            for k in (10**9, 2**45, 2**63 - 1):
                out = await session.call_tool("memory_recall", {"query": "hello", "k": k})
                assert out.is_error
                assert "k must be at most 10000" in out.content[0].text
            long = await session.call_tool("memory_recall", {"query": "x" * 4097})
            assert long.is_error and "query must be at most 4096" in long.content[0].text
            hits = _data(await session.call_tool("memory_recall", {"query": "hello", "k": 10_000}))
            assert len(hits) == 1

    anyio.run(main)
