"""``memini key add|list|delete``: API keys managed while no server holds the store.

A served store manages keys only with the admin secret (API.md section 8); without one, or
before the first start, keys are made here: ``memini key add NAME --home NS`` prints a new
secret once (only its hash is stored), ``list`` shows names and namespaces (never secrets),
``delete`` removes one. A running server holds the store's lock: stop it first.
"""

from __future__ import annotations

import argparse
import secrets
from typing import Any

from rich.console import Console

from memini.cli.common import CliError, open_store, store_location
from memini.types import APIKey, hash_api_key

__all__ = ["add_parser"]


def cmd_key(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Run one ``memini key`` action."""
    if args.action != "list" and not args.name:
        raise CliError(f"memini key {args.action} needs the key's NAME")
    with open_store(store_location(args.store), "key") as store:
        if args.action == "list":
            for key in store.list_api_keys():
                state = " (disabled)" if key.disabled else ""
                out.print(
                    f"{key.name}\thome {key.home_ns!r}\tdefault {key.default_ns!r}{state}",
                    markup=False,
                )
        elif args.action == "delete":
            if not store.delete_api_key(args.name):
                raise CliError(f"no API key named {args.name!r}")
        else:
            if not args.home:
                raise CliError("a key needs --home NS: the namespace (and those below it) it owns")
            if any(k.name == args.name for k in store.list_api_keys()):
                raise CliError(f"an API key named {args.name!r} exists: delete it first")
            secret = secrets.token_urlsafe(32)
            store.put_api_key(
                APIKey(args.name, hash_api_key(secret), home_ns=args.home, default_ns=args.default)
            )
            out.print(secret, markup=False)
            err.print(
                f"API key {args.name!r} for {args.home!r}: the secret above is shown once "
                "(only its hash is stored)",
                markup=False,
            )
    return 0


def add_parser(sub: Any, store_arg: Any) -> None:
    """Add ``key`` to the command line's subparsers."""
    sp = sub.add_parser(
        "key",
        help="add, list or delete API keys (the store must not be served meanwhile)",
        description="API keys of a store, managed while no server holds it (a running "
        "server manages them only with the admin secret). 'add' prints the new secret once.",
    )
    sp.add_argument("action", choices=("add", "list", "delete"))
    sp.add_argument("name", nargs="?", default="", metavar="NAME", help="the key's name")
    store_arg(sp)
    sp.add_argument("--home", default="", metavar="NS", help="namespace the key owns (add)")
    sp.add_argument(
        "--default", default="", metavar="NS", help="namespace of its MCP tool calls (add)"
    )
    sp.set_defaults(func=cmd_key)
