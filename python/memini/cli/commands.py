"""The import, export, stats, compact and check commands.

Each ``cmd_*`` takes the parsed arguments and two consoles (stdout for results, stderr for
progress and problems) and returns the exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import itertools
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
from rich.console import Console
from rich.table import Table

from memini.cli.common import (
    CliError,
    Metric,
    create_store,
    open_existing,
    open_store,
    progress_bar,
    rebuild_indexes,
    store_location,
)
from memini.cli.importer import Importer, ImportSummary
from memini.cli.records import (
    EXPORT_TYPE,
    EXPORT_VERSION,
    Header,
    decode_line,
    dumps,
    event_record,
    key_record,
    link_record,
    memory_record,
    parse_header,
)
from memini.store import Store, shown_location
from memini.types import Filter, Sort, SortKey, Tier

__all__ = ["cmd_check", "cmd_compact", "cmd_export", "cmd_import", "cmd_stats", "export_store"]

_LIST_PAGE = 1000


# --------------------------------------------------------------------------------------------
# Import
# --------------------------------------------------------------------------------------------


@dataclass
class _Source:
    """The lines of an import file (gzip-compressed ones too; ``-`` = plain stdin) and how far
    through the file reading is."""

    name: str
    raw: IO[bytes]
    lines: Iterator[bytes]
    size: int | None

    @classmethod
    def open(cls, path: str) -> _Source:
        if path == "-":
            raw: IO[bytes] = sys.stdin.buffer
            return cls("stdin", raw, iter(raw), None)
        try:
            raw = open(path, "rb")  # noqa: SIM115 - closed by close()
        except OSError as e:
            raise CliError(f"cannot read {path}: {e.strerror}") from None
        size = Path(path).stat().st_size
        magic = raw.read(2)
        raw.seek(0)
        if magic == b"\x1f\x8b":
            return cls(path, raw, iter(gzip.GzipFile(fileobj=raw)), size)
        return cls(path, raw, iter(raw), size)

    def records(self) -> Iterator[tuple[int, bytes, str | None]]:
        """``(line number, line, None)`` for each non-blank line; a file that cannot be read
        on (a truncated or damaged .gz) ends with ``(next line number, b"", reason)``."""
        lineno = 0
        try:
            for lineno, line in enumerate(self.lines, start=1):
                if line.strip():
                    yield lineno, line, None
        except (OSError, EOFError, zlib.error) as e:
            yield (
                lineno + 1,
                b"",
                f"cannot read {self.name} past line {lineno}: {e} (is the file cut short?)",
            )

    def position(self) -> int:
        try:
            return self.raw.tell()
        except (OSError, ValueError):
            return 0

    def close(self) -> None:
        if self.raw is not sys.stdin.buffer:
            self.raw.close()


@dataclass
class _Wanted:
    """The settings an import asks of its store: from the options, else the file's header,
    else (a new store) the first line's embedding."""

    dims: int | None
    metric: Metric | None
    header: Header | None
    first_dims: int | None  # the length of the first line's embedding, without a header


def cmd_import(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``memini import``: bulk-load a JSONL file."""
    src = _Source.open(args.file)
    try:
        return _import(src, args, out, err)
    finally:
        src.close()


def _import(src: _Source, args: argparse.Namespace, out: Console, err: Console) -> int:
    path = store_location(args.store)
    records = src.records()
    first = next(records, None)
    pending: list[tuple[int, bytes, str | None]] = []
    header: Header | None = None
    first_dims: int | None = None
    if first is not None:
        obj, _ = decode_line(first[1])
        if isinstance(obj, dict) and obj.get("type") == EXPORT_TYPE:
            header = parse_header(obj, need_metric=args.metric is None)
        else:
            pending.append(first)
            emb = obj.get("embedding") if isinstance(obj, dict) else None
            if isinstance(emb, list) and emb:
                first_dims = len(emb)
    wanted = _wanted(args, header, first_dims)
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        store = open_existing(path, "import")
        if store is not None:
            stack.enter_context(store)
            _check_existing(store, path, args, wanted)
        elif wanted.dims is None:
            raise CliError(
                f"{path} is a new store: pass --dims N (the file has no export header and its "
                "first line no embedding to take the dims from)"
            )
        elif not args.atomic:
            store = stack.enter_context(create_store(path, wanted.dims, wanted.metric, "import"))
        # An atomic import into a new store checks the file against an empty in-memory
        # store and creates the real one only once every line proved good.
        checked = (
            store
            if store is not None
            else stack.enter_context(Store.open(None, dims=wanted.dims, metric=wanted.metric))
        )
        if store is not None and not args.atomic:
            _adopt_model(store, header, err)
        # a store that is there while the lines are read loads in bulk (an atomic import
        # into a new store: once it is created, below)
        fresh = store is not None and stack.enter_context(store._bulk_load())
        progress = stack.enter_context(progress_bar(err))
        task = progress.add_task(f"importing {src.name}", total=src.size, rows=0)

        def on_error(lineno: int, message: str) -> None:
            progress.console.print(f"line {lineno}: {message}", markup=False, highlight=False)

        imp = Importer(
            checked,
            batch=args.batch,
            default_ns=args.namespace,
            on_error=on_error,
            next_event_id=0 if header is None else header.next_event_id,
            on_existing=args.on_existing,
            atomic=args.atomic,
            fresh=fresh,
        )
        for n, (lineno, line, problem) in enumerate(itertools.chain(pending, records), start=1):
            if problem is None:
                obj, problem = decode_line(line)
            if problem is None:
                imp.add(lineno, obj)
            else:
                imp.bad_line(lineno, problem, None)
            if n % 256 == 0:
                progress.update(task, completed=src.position(), rows=n)
        if args.atomic and not imp.summary.bad:
            if store is None:
                assert wanted.dims is not None  # a new store without dims was refused above
                store = stack.enter_context(
                    create_store(path, wanted.dims, wanted.metric, "import")
                )
                stack.enter_context(store._bulk_load())
            _adopt_model(store, header, err)
        summary = imp.finish(into=store)
    _print_summary(out, summary, time.perf_counter() - t0)
    return 1 if summary.bad else 0


def _wanted(args: argparse.Namespace, header: Header | None, first_dims: int | None) -> _Wanted:
    """The store settings an import asks for; refuses options that contradict the file."""
    dims: int | None = args.dims
    hdims = None if header is None else header.dims
    if dims is not None and hdims is not None and dims != hdims:
        raise CliError(
            f"--dims {dims} does not match the file: its export header says its vectors have "
            f"{hdims} dims. Omit --dims to use the header's {hdims} (to change the dims, "
            "re-embed the content and import plain lines)"
        )
    metric: Metric | None = args.metric
    if metric is None and header is not None:
        metric = header.metric
    return _Wanted(dims or hdims or first_dims, metric, header, first_dims)


def _check_existing(
    store: Store, path: Path | str, args: argparse.Namespace, wanted: _Wanted
) -> None:
    """Refuse an import whose settings contradict the existing store's, saying what to type."""
    st = store.stats()
    dims, metric = int(st["dims"]), str(st["metric"])
    header = wanted.header
    problem = ""
    if header is not None and header.dims is not None and header.dims != dims:
        problem = (
            f"the file's vectors have {header.dims} dims (its export header says so) and "
            f"store {path} has {dims}: import it into a new store (--store NEW_DIR), or re-embed "
            "its content with the store's model"
        )
    elif args.dims is not None and args.dims != dims:
        problem = (
            f"store {path} has {dims} dims, not {args.dims}: omit --dims (an existing store "
            f"keeps its dims), or pass --store NEW_DIR to create a {args.dims}-dim store"
        )
    elif header is None and args.dims is None and wanted.first_dims not in (None, dims):
        problem = (
            f"the first line's embedding has {wanted.first_dims} dims and store {path} has "
            f"{dims}: import the file into a new store (--store NEW_DIR --dims "
            f"{wanted.first_dims}), or re-embed it with the store's model"
        )
    elif args.metric is not None and args.metric != metric:
        problem = (
            f"store {path} uses metric {metric}, not {args.metric}: omit --metric (an existing "
            f"store keeps its metric), or pass --store NEW_DIR to create a {args.metric} store"
        )
    elif wanted.metric is not None and wanted.metric != metric:
        problem = (
            f"the file comes from a store with metric {wanted.metric} and store {path} uses "
            f"{metric}: pass --metric {metric} to import into it anyway (its searches score "
            f"with {metric}), or import into a new store (--store NEW_DIR)"
        )
    if problem:
        raise CliError(f"nothing imported: {problem}")


def _adopt_model(store: Store, header: Header | None, err: Console) -> None:
    """Record the file's embedding model in a store that has none; warn when they differ."""
    model = "" if header is None else header.embed_model
    if not model:
        return
    current = store.embed_model()
    if not current:
        store.set_embed_model(model)
    elif current != model:
        err.print(
            f"warning: the store embeds with {current!r}, the file with {model!r}",
            markup=False,
            highlight=False,
        )


def _print_summary(out: Console, s: ImportSummary, seconds: float) -> None:
    def say(text: str) -> None:
        out.print(text, markup=False, highlight=False)

    lines = ", ".join(str(n) for n, _ in s.errors[:20])
    more = f" and {len(s.errors) - 20} more" if len(s.errors) > 20 else ""
    if not s.written:
        say(
            f"nothing imported (--atomic): {s.bad} bad line(s): {lines}{more} "
            "(reasons on stderr); fix them and run the import again"
        )
        return
    say(f"import finished in {seconds:.1f} s")
    kinds = [("memories", s.memories), ("links", s.links), ("api keys", s.api_keys)]
    for name, c in [*kinds, ("events", s.events)]:
        if c.read or name == "memories":
            updated = f"{c.updated:,} updated, " if s.on_existing == "update" else ""
            say(
                f"  {name + ':':<10}{c.read:>10,} read, {c.inserted:,} inserted, {updated}"
                f"{c.skipped:,} skipped (already stored), {c.bad:,} bad"
            )
    if s.other_bad:
        say(f"  {'other:':<10}{s.other_bad:>10,} bad (unreadable lines, unknown record types)")
    skipped = [(name, c.skipped) for name, c in kinds if c.skipped]
    if skipped:
        parts = ", ".join(f"{n:,} {name}" for name, n in skipped)
        say(
            f"note: skipped {sum(n for _, n in skipped):,} record(s) already stored or earlier "
            f"in the file ({parts}), without comparing them: --on-existing update overwrites "
            "them, --on-existing fail reports them"
        )
    for note in s.notes:
        say(f"note: {note}")
    if s.bad:
        say(f"{s.bad} bad line(s) not imported: {lines}{more} (reasons on stderr)")


# --------------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------------


def export_store(store: Store, out: IO[str], on_row: Callable[[int], None] | None = None) -> int:
    """Write the whole store to ``out`` in the export format; return the lines written.

    The output is a function of the stored data only: two stores holding the same rows,
    vectors, links, keys and events (with the same ids) and the same next event id export
    to the same bytes.
    """
    stats = store.stats()
    header = {
        "type": EXPORT_TYPE,
        "version": EXPORT_VERSION,
        "dims": stats["dims"],
        "metric": stats["metric"],
        "embed_model": store.embed_model(),
        "next_event_id": int(stats["meta"]["next_event_id"]),
    }
    out.write(dumps(header) + "\n")
    n = 1
    everything = Filter(
        include_expired=True, include_superseded=True, sort=Sort(SortKey.CREATED_AT, asc=True)
    )
    for ns in store.list_namespaces():
        offset = 0
        while page := store.list(ns, everything, _LIST_PAGE, offset):
            offset += len(page)
            for m in page:
                emb = store.get_embedding(ns, m.id)
                out.write(dumps(memory_record(m, emb)) + "\n")
            n += len(page)
            if on_row is not None:
                on_row(len(page))
    for link in store.list_all_links():
        out.write(dumps(link_record(link)) + "\n")
        n += 1
    for key in store.list_api_keys():
        out.write(dumps(key_record(key)) + "\n")
        n += 1
    for ev in sorted(store.list_events(), key=lambda e: e.id):
        out.write(dumps(event_record(ev)) + "\n")
        n += 1
    return n


def cmd_export(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``memini export``: the whole store as JSONL on stdout (or ``--output``)."""
    path = store_location(args.store)
    with open_store(path, "export") as store, contextlib.ExitStack() as stack:
        total = int(store.stats()["rows"])
        target: IO[str] = sys.stdout  # the export is ASCII: any stdout encoding takes it
        if args.output not in (None, "-"):
            try:
                target = stack.enter_context(open(args.output, "w", encoding="ascii", newline="\n"))
            except OSError as e:
                raise CliError(f"cannot write {args.output}: {e.strerror}") from None
        progress = stack.enter_context(progress_bar(err))
        task = progress.add_task("exporting", total=total, rows=0)
        done = 0

        def on_rows(k: int) -> None:
            nonlocal done
            done += k
            progress.update(task, completed=done, rows=done)

        lines = export_store(store, target, on_rows)
        target.flush()
    if args.output not in (None, "-"):
        err.print(f"exported {total:,} memories ({lines:,} lines) to {args.output}")
    return 0


# --------------------------------------------------------------------------------------------
# stats, compact, check
# --------------------------------------------------------------------------------------------


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _print_stats(out: Console, path: Path | str, st: dict[str, Any], model: str) -> None:
    out.print(
        f"store {shown_location(path)}: {st['rows']:,} memories, {st['dims']} dims, "
        f"metric {st['metric']}, "
        f"embed model {model or '(unset)'}, {_size(st['bytes_on_disk'])} on disk",
        markup=False,
        highlight=False,
    )
    tiers = [t.value for t in Tier]
    table = Table("namespace", "rows", "vectors", *tiers)
    for col in table.columns[1:]:
        col.justify = "right"
    for ns, c in sorted(st["namespaces"].items()):
        table.add_row(ns, f"{c['rows']:,}", f"{c['vectors']:,}", *[f"{c[t]:,}" for t in tiers])
    out.print(table)
    meta = st.get("meta", {})
    out.print(
        f"indexes: {st['keyword_docs']:,} keyword docs; vectors in "
        f"{st['vector_graphs']} HNSW graph(s) + {st['vector_flat_partitions']} flat "
        f"partition(s), {_size(st['vector_memory_bytes'])} in memory\n"
        f"meta: {meta.get('links', 0):,} links, {meta.get('api_keys', 0):,} API keys, "
        f"{meta.get('events', 0):,} events, {_size(meta.get('bytes', 0))}",
        markup=False,
        highlight=False,
    )


def cmd_stats(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``memini stats``: counts per namespace and tier, index and disk sizes."""
    path = store_location(args.store)
    with open_store(path, "stats") as store:
        st, model = store.stats(), store.embed_model()
    if args.json:
        out.print_json(data=st)
    else:
        _print_stats(out, path, st, model)
    return 0


def cmd_compact(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``memini compact``: reclaim the space of deleted rows."""
    path = store_location(args.store)
    with open_store(path, "compact") as store:
        before = int(store.stats()["bytes_on_disk"]) + int(store.stats()["meta"]["bytes"])
        t0 = time.perf_counter()
        store.compact()
        seconds = time.perf_counter() - t0
        st = store.stats()
        after = int(st["bytes_on_disk"]) + int(st["meta"]["bytes"])
    out.print(
        f"compacted {shown_location(path)} in {seconds:.1f} s: {_size(before)} -> {_size(after)}"
    )
    return 0


@dataclass
class _Check:
    rows: int
    keyword_docs: int
    vectors: int
    vector_index: int | None
    probe_found: int
    probe_total: int
    meta_db_lost: str | None

    @property
    def indexes_ok(self) -> bool:
        vec_ok = self.vector_index is None or self.vector_index == self.vectors
        probe_ok = self.probe_found == self.probe_total
        return self.rows == self.keyword_docs and vec_ok and probe_ok

    @property
    def ok(self) -> bool:
        return self.indexes_ok and self.meta_db_lost is None


def _vector_probe(store: Store, per_namespace: int = 20) -> tuple[int, int]:
    """Search with a few stored vectors: each must find its own row (or a tie scoring at
    least as high), else the vector index lacks it. Returns (found, probed)."""
    found = probed = 0
    everything = Filter(include_expired=True, include_superseded=True)
    metric = store.stats()["metric"]
    for ns in store.list_namespaces():
        vecs = [(m.id, store.get_embedding(ns, m.id)) for m in store.list(ns, everything, 200)]
        for id_, emb in [(i, e) for i, e in vecs if e is not None][:per_namespace]:
            probed += 1
            hits = store.vector_search(ns, emb, everything, k=10)
            v = emb.astype(np.float64)
            best = float(v @ v) if metric == "ip" else 1.0  # l2: 1/(1+0), cos: 1
            if any(h.memory.id == id_ for h in hits) or (hits and hits[0].score >= best - 1e-6):
                found += 1
    return found, probed


def _check(store: Store) -> _Check:
    st = store.stats()
    vectors = sum(int(c["vectors"]) for c in st["namespaces"].values())
    index = st.get("vector_index_entries")
    found, total = _vector_probe(store)
    return _Check(
        rows=int(st["rows"]),
        keyword_docs=int(st["keyword_docs"]),
        vectors=vectors,
        vector_index=None if index is None else int(index),
        probe_found=found,
        probe_total=total,
        meta_db_lost=st.get("meta_db_lost"),
    )


def _print_check(out: Console, c: _Check) -> None:
    mark = {True: "ok", False: "MISMATCH"}
    out.print(
        f"rows {c.rows:,} vs keyword index {c.keyword_docs:,} docs: "
        f"{mark[c.rows == c.keyword_docs]}"
    )
    if c.vector_index is None:
        out.print(f"rows with a vector {c.vectors:,}; vector index count not reported by stats()")
    else:
        out.print(
            f"rows with a vector {c.vectors:,} vs vector index {c.vector_index:,}: "
            f"{mark[c.vectors == c.vector_index]}"
        )
    out.print(
        f"vector probe: {c.probe_found}/{c.probe_total} stored vectors find their row: "
        f"{mark[c.probe_found == c.probe_total]}"
    )
    if c.meta_db_lost is None:
        out.print("meta.sqlite3 (links, API keys, events): ok")
    else:
        out.print(
            f"meta.sqlite3 (links, API keys, events): LOST — it was missing on {c.meta_db_lost} "
            "and recreated empty; restore it from a backup (`--repair` acknowledges the loss)"
        )


def cmd_check(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``memini check``: compare the rows with the keyword and vector indexes."""
    path = store_location(args.store)
    if isinstance(path, str):
        raise CliError(
            "memini check compares a store directory's indexes with its rows; PostgreSQL "
            "keeps its own indexes consistent (REINDEX rebuilds them)"
        )
    store = open_store(path, "check")
    try:
        result = _check(store)
    finally:
        store.close()
    _print_check(out, result)
    if not args.repair:
        if result.ok:
            out.print("indexes are consistent with the rows")
            return 0
        out.print("the store has problems: run `memini check --repair`")
        return 2
    # The indexes are derived from the rows: the engine removes them once it holds the
    # store's lock (never while another process may own the store) and rebuilds them.
    t0 = time.perf_counter()
    rebuild_indexes(path, "check --repair")
    with open_store(path, "check --repair") as store:
        store.acknowledge_meta_db_loss()
        after = _check(store)
    out.print(
        f"rebuilt the vector and keyword indexes from the rows in {time.perf_counter() - t0:.1f} s"
    )
    if result.meta_db_lost is not None:
        out.print("acknowledged the loss of meta.sqlite3's earlier links, API keys and events")
    _print_check(out, after)
    return 0 if after.ok else 2
