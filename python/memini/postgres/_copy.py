"""`Store.backup` of a PostgreSQL store: one snapshot copied into a new embedded store.

The copy goes through the embedded `Store`'s own API (rows keep their ids, timestamps and
bit-exact vectors; links, keys and events keep theirs, events their ids too), so the
directory it writes is an ordinary store that `Store.open` accepts, and that
``memini export`` / ``memini import`` can move back.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg

from memini.errors import InvalidArgumentError
from memini.postgres import _meta
from memini.postgres._rows import SELECT, to_memory

__all__ = ["snapshot_to_directory"]

_BATCH = 1000


def snapshot_to_directory(conn: psycopg.Connection[Any], path: str, dims: int, metric: str) -> None:
    """Copy everything ``conn``'s transaction sees into a new store directory ``path``.

    Args:
        conn: A connection inside a REPEATABLE READ transaction (one snapshot).
        path: The new directory; it must not exist.
        dims: The store's dims.
        metric: The store's metric.

    Raises:
        InvalidArgumentError: ``path`` exists.
    """
    from memini import Store
    from memini.events import prepare_filter

    if os.path.exists(path):
        raise InvalidArgumentError(f"backup path {path!r} already exists: name a new directory")
    model = conn.execute("SELECT value FROM memini_settings WHERE key = 'embed_model'").fetchone()
    with Store.open(path, dims=dims, metric=metric) as dest:  # type: ignore[arg-type]
        if model and model[0]:
            dest.set_embed_model(str(model[0]))
        with conn.cursor(name="memini_backup", binary=True) as cur:
            cur.execute(f"SELECT {SELECT}, embedding FROM memories ORDER BY namespace, seq")
            while batch := cur.fetchmany(_BATCH):
                memories = []
                for r in batch:
                    m = to_memory(r[:-1])
                    m.embedding = r[-1]
                    memories.append(m)
                dest.upsert_many(memories)
        for link in _meta.list_links(conn, None):
            dest.put_link(link)
        for key in _meta.list_api_keys(conn):
            dest.put_api_key(key)
        events = sorted(_meta.list_events(conn, prepare_filter(None)), key=lambda e: e.id)
        dest._meta.import_events(events, next_id=_meta.next_event_id(conn))
