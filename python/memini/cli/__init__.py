"""The ``memini`` command line: bulk import and export, stats, compaction, index checks, demo.

Commands (``memini COMMAND --help`` lists the options):

* ``memini import FILE --store DIR [--atomic] [--on-existing skip|update|fail]``: load a
  JSONL file (``.gz`` too, ``-`` = stdin) in atomic batches. A bad line is reported with its
  line and column and the rest lands, or with ``--atomic`` nothing is written unless every
  line is good. What is stored already is skipped and counted (``--on-existing`` updates or
  refuses it instead).
* ``memini export --store DIR [-o FILE]``: the whole store as versioned JSONL; importing it
  into a new store and exporting again gives the same bytes.
* ``memini stats|compact|check [--repair] --store DIR``: inspect, compact, verify the indexes.
* ``memini demo [--store ./memini-data]``: import the shipped PyPI sample and recall from it.
* ``memini serve --store DIR [--host H] [--port P] ...``: serve the store over HTTP (REST,
  MCP, metrics; `memini.server`); ``memini mcp --store DIR --namespace NS``: MCP over stdio.
* ``memini key add|list|delete [NAME] --store DIR [--home NS]``: API keys, managed while
  no server holds the store (`memini.cli.keys`).
* ``memini recall --store DIR NS TEXT [-k 10] [--linked] [--fusion F] [--tier T] [--tag T]
  [--json] [--embedder SPEC]``:
  `Store.recall` of TEXT in namespace NS, the query embedded with the store's model.

The file format is described in `memini.cli.records`; the package splits by job: `common`
(errors, opening stores, progress), `records` (the format), `importer` (records into a
store), `commands` (import, export, stats, compact, check), `demo`.

Exit status: 0 on success; 1 on an error, or when an import had bad lines (the good ones are
stored); 2 when ``check`` finds the indexes out of step with the rows (without ``--repair``).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from typing import cast

from rich.console import Console

from memini import __version__
from memini._core import simd
from memini.cli.commands import (
    cmd_check,
    cmd_compact,
    cmd_export,
    cmd_import,
    cmd_stats,
    export_store,
)
from memini.cli.common import (
    EMBEDDER_HELP,
    METRICS,
    CliError,
    embedder_arg,
    namespace_arg,
    store_dir,
)
from memini.cli.demo import DEFAULT_DEMO_STORE, cmd_demo
from memini.cli.importer import ON_EXISTING, ImportSummary
from memini.cli.keys import add_parser as add_key_parser
from memini.cli.recall import cmd_recall
from memini.cli.records import EXPORT_TYPE, EXPORT_VERSION
from memini.cli.serve import add_parsers as add_serve_parsers
from memini.errors import MeminiError
from memini.store import shown_location
from memini.types import Tier

__all__ = ["EXPORT_TYPE", "EXPORT_VERSION", "ImportSummary", "export_store", "main"]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


class _Version(argparse.Action):
    """``--version``: memini's version, then the SIMD kernels chosen at run time on this CPU
    (for a store of the default metric; ``stats()["simd"]`` shows a store's own)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        kernels = simd("l2")
        print(f"memini {__version__}")
        print(
            "SIMD on this CPU: "
            + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in kernels.items())
        )
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="memini",
        description="memini: an embeddable memory store for AI agents.",
        epilog="Exit status: 0 ok; 1 error or bad import lines; 2 check found a mismatch.",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log progress of long work")
    p.add_argument(
        "--version",
        action=_Version,
        help="show memini's version and the SIMD kernels it chose on this CPU, then exit",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def store_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--store", required=True, type=store_dir, metavar="DIR", help="store directory"
        )

    sp = sub.add_parser(
        "import",
        help="bulk-load a JSONL file (export format or plain rows)",
        description="Load a JSONL file into a store (created when missing). By default each "
        "bad line is reported with its number and the others land; already stored records "
        "are skipped and counted.",
    )
    sp.add_argument("file", metavar="FILE", help="JSONL file, .gz accepted, - for stdin")
    store_arg(sp)
    sp.add_argument(
        "--dims",
        type=_positive,
        help="vector dims of a new store (default: the export header's, or the first "
        "embedding's length); must match the export header and an existing store",
    )
    sp.add_argument("--metric", choices=METRICS, help="metric of a new store (default l2)")
    sp.add_argument(
        "--batch", type=_positive, default=1000, help="rows per commit (1000; not with --atomic)"
    )
    sp.add_argument(
        "--namespace",
        type=namespace_arg,
        default="default",
        help="namespace of lines without one (default 'default')",
    )
    sp.add_argument(
        "--atomic",
        action="store_true",
        help="all or nothing: check every line first and write nothing if any is bad; the "
        "memories are then written in one transaction (held in memory)",
    )
    sp.add_argument(
        "--on-existing",
        choices=ON_EXISTING,
        default="skip",
        help="a memory id (in its namespace), link or API key name that is stored already or "
        "came earlier in the file: skip it (default; the summary counts them), update "
        "(overwrite it), or fail (report the line as bad). Events are always kept once",
    )
    sp.set_defaults(func=cmd_import)

    sp = sub.add_parser("export", help="write the whole store as versioned JSONL")
    store_arg(sp)
    sp.add_argument("-o", "--output", metavar="FILE", help="output file (default stdout)")
    sp.set_defaults(func=cmd_export)

    sp = sub.add_parser("stats", help="counts per namespace and tier, index and disk sizes")
    store_arg(sp)
    sp.add_argument("--json", action="store_true", help="print Store.stats() as JSON")
    sp.set_defaults(func=cmd_stats)

    sp = sub.add_parser("compact", help="reclaim the space of deleted rows")
    store_arg(sp)
    sp.set_defaults(func=cmd_compact)

    sp = sub.add_parser("check", help="compare the rows with the vector and keyword indexes")
    store_arg(sp)
    sp.add_argument(
        "--repair",
        action="store_true",
        help="rebuild both indexes from the rows (the store must be closed)",
    )
    sp.set_defaults(func=cmd_check)

    sp = sub.add_parser("demo", help="import the shipped PyPI sample and run a few recalls")
    sp.add_argument(
        "--store",
        default=DEFAULT_DEMO_STORE,
        type=store_dir,
        metavar="DIR",
        help=f"store directory (default {DEFAULT_DEMO_STORE})",
    )
    sp.add_argument(
        "--query",
        action="append",
        metavar="TEXT",
        help="a free-text query to embed with the local model and recall (repeatable; "
        "needs pip install 'memini[embed]')",
    )
    sp.set_defaults(func=cmd_demo)
    add_serve_parsers(sub, store_arg, METRICS, _positive)
    add_key_parser(sub, store_arg)

    sp = sub.add_parser(
        "recall",
        help="recall memories of a namespace for a free-text query",
        description="Store.recall of TEXT in namespace NS with the store's defaults: words "
        "(BM25) and, when the store has an embedder, meaning; best first.",
    )
    store_arg(sp)
    sp.add_argument("namespace", metavar="NS", help="namespace to recall from")
    sp.add_argument("text", metavar="TEXT", help="the query, free text")
    sp.add_argument("-k", type=_positive, default=10, help="results (default 10)")
    sp.add_argument(
        "--linked", action="store_true", help="also recall from the namespaces NS links to"
    )
    sp.add_argument(
        "--fusion", choices=("convex", "rrf"), help="how the legs are fused (default: recall's)"
    )
    sp.add_argument(
        "--tier",
        action="append",
        choices=[t.value for t in Tier],
        help="only memories of this tier (repeatable: any of them)",
    )
    sp.add_argument(
        "--tag",
        action="append",
        metavar="TAG",
        help="only memories tagged TAG (repeatable: all)",
    )
    sp.add_argument("--json", action="store_true", help="one JSON object per result")
    sp.add_argument(
        "--embedder",
        type=embedder_arg,
        metavar="SPEC",
        help=f"{EMBEDDER_HELP}; default: the local model when the store's vectors are its "
        "and its weights are installed, else words alone",
    )
    sp.set_defaults(func=cmd_recall)
    return p


def _masked(args: argparse.Namespace, message: str) -> str:
    """``message`` with the ``--store`` URL's password masked (`shown_location`)."""
    store = getattr(args, "store", None)
    return message.replace(store, shown_location(store)) if isinstance(store, str) else message


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status.

    Args:
        argv: The arguments after the program name; None reads ``sys.argv``.
    """
    args = _parser().parse_args(argv)
    if args.verbose or args.command in ("serve", "mcp"):
        # memini's own progress at INFO; its dependencies (tantivy's commits and merges,
        # uvicorn, httpx, ...) only from WARNING on
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
        logging.getLogger("memini").setLevel(logging.INFO)
    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    func = cast("Callable[[argparse.Namespace, Console, Console], int]", args.func)
    try:
        return func(args, out, err)
    except CliError as e:
        err.print(f"memini {args.command}: {_masked(args, str(e))}", markup=False)
        return 1
    except MeminiError as e:
        err.print(
            f"memini {args.command}: {type(e).__name__}: {_masked(args, str(e))}", markup=False
        )
        return 1
    except BrokenPipeError:
        return 1
    except KeyboardInterrupt:
        if getattr(args, "atomic", False):
            err.print("interrupted; an --atomic import writes nothing before the file is checked")
        else:
            err.print("interrupted; every batch that finished is stored")
        return 130
