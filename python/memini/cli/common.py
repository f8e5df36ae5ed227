"""What every command shares: the user-facing error, opening a store, progress bars."""

from __future__ import annotations

import argparse
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

from memini.errors import InvalidArgumentError, MeminiError, StoreLockedError
from memini.store import Store

__all__ = [
    "METRICS",
    "CliError",
    "Metric",
    "create_store",
    "locked_message",
    "open_existing",
    "open_store",
    "progress_bar",
    "store_dir",
]

METRICS = ("l2", "cos", "ip")
"""The ``--metric`` choices."""

Metric = Literal["l2", "cos", "ip"]


class CliError(Exception):
    """A failure reported to the user as one message, with exit status 1."""


def store_dir(text: str) -> str:
    """The ``--store`` argument: a directory path, never empty (an empty path would mean
    the current directory, which is never what was meant)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "the store directory must not be empty (write --store . for the current directory)"
        )
    return text


def locked_message(path: Path, what: str) -> str:
    """The message for a store another process (or `Store`) holds."""
    return (
        f"store {path} is open in another process (or Store) and {what} needs it to itself. "
        "Close it first; to snapshot a live store, call Store.backup(new_dir) from the "
        "process that holds it, then run this command on the copy."
    )


def open_store(
    path: Path,
    what: str,
    *,
    dims: int | None = None,
    metric: Metric | None = None,
    must_exist: bool = True,
) -> Store:
    """Open the store in ``path`` for a command, turning the usual failures into `CliError`."""
    if must_exist and not (path.is_dir() and any(path.iterdir())):
        raise CliError(f"no store at {path}")
    try:
        return Store.open(path, dims=dims, metric=metric)
    except StoreLockedError:
        raise CliError(locked_message(path, what)) from None
    except MeminiError as e:
        raise CliError(f"cannot open store {path}: {e}") from None


def open_existing(path: Path, what: str) -> Store | None:
    """The store in ``path`` opened with its own settings, or None when there is none yet."""
    try:
        return Store.open(path)
    except StoreLockedError:
        raise CliError(locked_message(path, what)) from None
    except InvalidArgumentError:
        return None  # Store.open needs dims to create a store, and creates nothing without
    except MeminiError as e:
        raise CliError(f"cannot open store {path}: {e}") from None


def create_store(path: Path, dims: int, metric: Metric | None, what: str) -> Store:
    """Create the store in ``path`` (where `open_existing` found none)."""
    try:
        return Store.open(path, dims=dims, metric=metric)
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
