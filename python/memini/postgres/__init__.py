"""The PostgreSQL backend of `memini.Store` (``pip install 'memini[postgres]'``).

``Store.open("postgresql://user:pass@host:5432/db", dims=384, metric="cos")`` opens the
same API (API.md sections 4-6) on PostgreSQL + pgvector: memories, links, API keys and
events in one database, which any number of processes and servers may open at once (no
directory lock: the database's transactions instead). ``import memini`` never imports this
package (nor psycopg); `Store.open` does, for a ``postgresql://`` or ``postgres://`` URL.

The schema lives in the connection's first ``search_path`` schema (``public`` by default; a
URL may choose another with ``?options=-csearch_path%3Dmyschema``): one store per schema.
"""

from memini.postgres._backend import PgEngine, PgMeta, open_backend, safe_url

__all__ = ["PgEngine", "PgMeta", "open_backend", "safe_url"]
