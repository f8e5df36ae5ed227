"""MCP tools over a served store: ``memory_remember``, ``memory_recall``, ``memory_get``,
``memory_list``, ``memory_update``, ``memory_forget`` (API.md section 8).

Built on the ``mcp`` SDK's `MCPServer` (2.x): each tool's JSON schema comes from its type
hints. The tools are an adapter at the edge: each one is a `Service.invoke` of the same
`Store` method the REST API serves, so auth, namespace confinement and the event log apply
unchanged. The namespace is never a tool argument: over stdio it is ``--namespace``; over
HTTP it is the API key's ``default_ns`` (when inside its home) or ``home_ns``, and for the
admin / open access the server's ``mcp_namespace``.

Text in: a memory is stored with the vector the store's embedder (``--embedder``) makes of
its content, and ``memory_recall`` is `Store.recall` (vector and keyword legs fused), its
query embedded by the same embedder. Without an embedder, ``memory_remember`` stores a
keyword-only row unless an ``embedding`` is given, and ``memory_recall`` is the keyword leg
alone (or both, given a ``vector``).
Errors reach the model as tool errors naming the memini error class and its message.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.types import Receive, Scope, Send

from memini import _wire as wire
from memini.errors import MeminiError
from memini.server._auth import Principal
from memini.server._service import Service
from memini.types import Filter, Memory, Sort, new_id

__all__ = ["McpEndpoint", "build_mcp", "run_stdio"]

TierName = Literal["working", "episodic", "semantic", "procedural"]
SortName = Literal["created_at", "updated_at", "last_accessed_at", "access_count", "importance"]


def _plain(value: Any) -> Any:
    """A result as plain JSON data (what the tool returns), without write-only embeddings."""
    data = wire.loads(wire.dumps(value))
    for item in data if isinstance(data, list) else [data]:
        if isinstance(item, dict):
            item.pop("embedding", None)
            if isinstance(item.get("memory"), dict):
                item["memory"].pop("embedding", None)
    return data


def build_mcp(service: Service, resolve: Any) -> MCPServer[Any]:
    """The MCP server of ``service``.

    Args:
        service: The served store.
        resolve: ``resolve(ctx) -> (Principal, namespace)`` for a tool call.
    """
    server: MCPServer[Any] = MCPServer(
        "memini",
        instructions="Long-term memory: remember facts, episodes and procedures; recall them "
        "by meaning and words; get, list, update and forget them.",
    )

    async def invoke(ctx: Context, method: str, **args: Any) -> Any:
        principal, ns = resolve(ctx)
        m = wire.METHODS[method]
        call = {"namespace": ns, **args} if "namespace" in m.params else args
        try:
            return await anyio.to_thread.run_sync(service.invoke, principal, m, call)
        except MeminiError as e:
            raise ToolError(f"{type(e).__name__}: {e}") from e

    @server.tool()
    async def memory_remember(
        ctx: Context,
        content: str,
        tier: TierName = "semantic",
        summary: str = "",
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        importance: float = 0.0,
        level: Literal["explicit", "deduced"] | None = None,
        confidence: float | None = None,
        expires_at: datetime | None = None,
        id: str | None = None,
        embedding: list[float] | None = None,
    ) -> dict[str, Any]:
        """Store a memory (a new one, or replace the one with this id); returns it."""
        _, ns = resolve(ctx)
        memory = Memory(
            id=id or new_id(),
            namespace=ns,
            content=content,
            tier=tier,  # type: ignore[arg-type]  # the store coerces the value
            level=level,  # type: ignore[arg-type]
            summary=summary,
            metadata=metadata or {},
            tags=tags or [],
            importance=importance,
            confidence=confidence,
            expires_at=expires_at,
            embedding=embedding,
        )
        await invoke(ctx, "upsert", memory=memory)
        got = await invoke(ctx, "get", id=memory.id)
        result: dict[str, Any] = _plain(got)
        return result

    @server.tool()
    async def memory_recall(
        ctx: Context,
        query: str = "",
        k: int = 10,
        tiers: list[TierName] | None = None,
        tags: list[str] | None = None,
        vector: list[float] | None = None,
    ) -> list[dict[str, Any]]:
        """Find the memories best matching a query (by meaning and words), best first."""
        f = Filter(tiers=tiers or (), tags=tags or ())  # type: ignore[arg-type]
        hits = await invoke(ctx, "recall", query=query, vector=vector, filter=f, k=k)
        result: list[dict[str, Any]] = _plain(hits)
        return result

    @server.tool()
    async def memory_get(ctx: Context, id: str) -> dict[str, Any]:
        """One memory by id."""
        result: dict[str, Any] = _plain(await invoke(ctx, "get", id=id))
        return result

    @server.tool()
    async def memory_list(
        ctx: Context,
        limit: int = 20,
        offset: int = 0,
        tiers: list[TierName] | None = None,
        tags: list[str] | None = None,
        sort: SortName = "created_at",
        ascending: bool = False,
    ) -> list[dict[str, Any]]:
        """Live memories, newest first by default (sort by another key, or ascending)."""
        f = Filter(
            tiers=tiers or (),  # type: ignore[arg-type]
            tags=tags or (),
            sort=Sort(sort, ascending),  # type: ignore[arg-type]
        )
        rows = await invoke(ctx, "list", filter=f, limit=limit, offset=offset)
        result: list[dict[str, Any]] = _plain(rows)
        return result

    @server.tool()
    async def memory_update(
        ctx: Context,
        id: str,
        content: str | None = None,
        summary: str | None = None,
        tier: TierName | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        importance: float | None = None,
        confidence: float | None = None,
        expires_at: datetime | None = None,
    ) -> dict[str, Any]:
        """Change some fields of a memory (the others keep their values); returns it."""
        given = {
            "content": content,
            "summary": summary,
            "tier": tier,
            "tags": tags,
            "metadata": metadata,
            "importance": importance,
            "confidence": confidence,
            "expires_at": expires_at,
        }
        fields = {k: v for k, v in given.items() if v is not None}
        result: dict[str, Any] = _plain(await invoke(ctx, "update", id=id, fields=fields))
        return result

    @server.tool()
    async def memory_forget(ctx: Context, id: str) -> dict[str, Any]:
        """Delete a memory for good."""
        await invoke(ctx, "delete", id=id)
        return {"forgotten": id}

    return server


class McpEndpoint:
    """``/mcp``: streamable HTTP (stateless, JSON answers) for the app in `_app`.

    Args:
        service: The served store.
        namespace: The namespace of the admin's / open access's tool calls.
        host: The bound address (the SDK's DNS-rebinding guard allows it).
    """

    def __init__(self, service: Service, namespace: str, host: str) -> None:
        self._namespace = namespace
        self.server = build_mcp(service, self._resolve)
        self.server.streamable_http_app(
            stateless_http=True, json_response=True, host=host, streamable_http_path="/mcp"
        )
        self._manager = self.server.session_manager

    def _resolve(self, ctx: Context) -> tuple[Principal, str]:
        request = ctx.request_context.request
        principal = getattr(getattr(request, "state", None), "memini_principal", None)
        if not isinstance(principal, Principal):
            raise ToolError("AuthError: no authenticated caller for this MCP request")
        return principal, principal.default_namespace() or self._namespace

    def run(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The session manager's lifetime (entered by the app's lifespan)."""
        return self._manager.run()

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one MCP request."""
        await self._manager.handle_request(scope, receive, send)


async def run_stdio(service: Service, namespace: str) -> None:
    """Serve MCP over stdin/stdout for one local agent (``memini mcp``), in ``namespace``."""
    principal = Principal(None, "mcp-stdio")
    server = build_mcp(service, lambda ctx: (principal, namespace))
    await server.run_stdio_async()
