"""What every command shares: the user-facing error, opening a store, progress bars."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from memini import limits
from memini._core import Engine
from memini.embed import Embedder
from memini.errors import InvalidArgumentError, MeminiError, StoreLockedError
from memini.store import Store, is_postgres_url

__all__ = [
    "EMBEDDER_HELP",
    "METRICS",
    "CliError",
    "Metric",
    "create_store",
    "embedder_arg",
    "locked_message",
    "make_embedder",
    "namespace_arg",
    "open_existing",
    "open_store",
    "progress_bar",
    "rebuild_indexes",
    "store_dir",
    "store_location",
]

METRICS = ("l2", "cos", "ip")
"""The ``--metric`` choices."""

Metric = Literal["l2", "cos", "ip"]


class CliError(Exception):
    """A failure reported to the user as one message, with exit status 1."""


def store_location(text: str) -> Path | str:
    """Where ``--store`` points: a directory, or a ``postgresql://`` URL kept as text (a
    `Path` would fold its ``//``)."""
    if is_postgres_url(text):
        return text
    return Path(text)


def store_dir(text: str) -> str:
    """The ``--store`` argument: a directory path, never empty (an empty path would mean
    the current directory, which is never what was meant)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "the store directory must not be empty (write --store . for the current directory)"
        )
    return text


def namespace_arg(text: str) -> str:
    """A namespace option the command writes to: the store's rule (`memini.limits`)."""
    try:
        return limits.check_namespace(text)
    except InvalidArgumentError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


EMBEDDER_HELP = (
    "turn text into vectors: 'local' (all-MiniLM-L6-v2 in process; pip install "
    "'memini[embed]'), 'openai:BASE_URL#MODEL' (any OpenAI-compatible /embeddings service; "
    "its key, if any, from MEMINI_EMBEDDER_API_KEY) or 'none'"
)
"""Help of an ``--embedder`` option (`embedder_arg` parses it)."""


def embedder_arg(text: str) -> str:
    """The ``--embedder`` argument, checked for form (the embedder is made by `make_embedder`
    when the command runs, so ``--help`` never loads a model)."""
    if text in ("local", "none") or (text.startswith("openai:") and "#" in text):
        return text
    raise argparse.ArgumentTypeError(
        f"unknown embedder {text!r}: use local, openai:BASE_URL#MODEL or none"
    )


def make_embedder(spec: str | None) -> Embedder | None:
    """The embedder an ``--embedder`` value names (None for ``none`` or no option)."""
    import os

    from memini.embed import LocalEmbedder, OpenAIEmbedder

    try:
        if spec is None or spec == "none":
            return None
        if spec == "local":
            return LocalEmbedder()
        url, _, model = spec.removeprefix("openai:").partition("#")
        return OpenAIEmbedder(url, model, api_key=os.environ.get("MEMINI_EMBEDDER_API_KEY"))
    except MeminiError as e:
        raise CliError(f"--embedder {spec}: {e}") from None


def locked_message(path: Path | str, what: str) -> str:
    """The message for a store another process (or `Store`) holds."""
    return (
        f"store {path} is open in another process (or Store) and {what} needs it to itself. "
        "Close it first; to snapshot a live store, call Store.backup(new_dir) from the "
        "process that holds it, then run this command on the copy."
    )


def open_store(
    path: Path | str,
    what: str,
    *,
    dims: int | None = None,
    metric: Metric | None = None,
    must_exist: bool = True,
    embedder: Embedder | None = None,
) -> Store:
    """Open the store in ``path`` for a command, turning the usual failures into `CliError`."""
    if must_exist and isinstance(path, Path) and not (path.is_dir() and any(path.iterdir())):
        raise CliError(f"no store at {path}")
    with _opening(path, what):
        store = Store.open(path, dims=dims, metric=metric, embedder=embedder)
    return store


def rebuild_indexes(path: Path, what: str) -> None:
    """Rebuild the vector and keyword indexes of the store in ``path`` from its rows: the
    engine removes them only once it holds the store's lock, never while another process
    may own the store."""
    with _opening(path, what):
        Engine(str(path), None, None, rebuild_indexes=True).close()


@contextlib.contextmanager
def _opening(path: Path | str, what: str) -> Iterator[None]:
    """Turns the usual failures of opening the store in ``path`` into `CliError`."""
    try:
        yield
    except StoreLockedError:
        raise CliError(locked_message(path, what)) from None
    except MeminiError as e:
        raise CliError(f"cannot open store {path}: {e}") from None


def open_existing(path: Path | str, what: str, *, embedder: Embedder | None = None) -> Store | None:
    """The store in ``path`` opened with its own settings, or None when there is none yet."""
    if embedder is not None and isinstance(path, Path) and not (path / "rows.redb").exists():
        return None  # Store.open would create it with the embedder's dims
    try:
        return Store.open(path, embedder=embedder)
    except StoreLockedError:
        raise CliError(locked_message(path, what)) from None
    except InvalidArgumentError:
        return None  # Store.open needs dims to create a store, and creates nothing without
    except MeminiError as e:
        raise CliError(f"cannot open store {path}: {e}") from None


def create_store(
    path: Path | str,
    dims: int,
    metric: Metric | None,
    what: str,
    *,
    embedder: Embedder | None = None,
) -> Store:
    """Create the store in ``path`` (where `open_existing` found none)."""
    try:
        return Store.open(path, dims=dims, metric=metric, embedder=embedder)
    except StoreLockedError:
        raise CliError(locked_message(path, what)) from None
    except MeminiError as e:
        raise CliError(f"cannot create a store in {path}: {e}") from None


def progress_bar(console: Console) -> Progress:
    """A transient progress bar with a row count, shown only on a terminal."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[rows]:>10,} rows"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
