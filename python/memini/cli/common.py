"""What every command shares: the user-facing error, opening a store, progress bars."""

from __future__ import annotations

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

from memini.errors import (
    DimensionMismatchError,
    InvalidArgumentError,
    MeminiError,
    StoreLockedError,
)
from memini.store import Store

__all__ = [
    "METRICS",
    "CliError",
    "Metric",
    "locked_message",
    "open_new_or_existing",
    "open_store",
    "progress_bar",
]

METRICS = ("l2", "cos", "ip")
"""The ``--metric`` choices."""

Metric = Literal["l2", "cos", "ip"]


class CliError(Exception):
    """A failure reported to the user as one message, with exit status 1."""


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


def open_new_or_existing(path: Path, dims: int | None, metric: Metric | None) -> Store:
    """Open for import: a new store needs dims; an existing one checks any given dims."""
    try:
        return Store.open(path, dims=dims, metric=metric)
    except StoreLockedError:
        raise CliError(locked_message(path, "import")) from None
    except DimensionMismatchError as e:
        raise CliError(f"cannot import into {path}: {e}") from None
    except InvalidArgumentError as e:
        if dims is None:
            raise CliError(
                f"{path} is a new store: pass --dims N (the file has no export header and its "
                "first line no embedding to take the dims from)"
            ) from None
        raise CliError(f"cannot open store {path}: {e}") from None
    except MeminiError as e:
        raise CliError(f"cannot open store {path}: {e}") from None


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
