"""What the server serves and who may call it: one explicit entry per served `Store` method.

`SERVED` is the whole served surface. A `Store` method without an entry is not served (a
test fails when a public method has neither an entry nor a place in `NOT_SERVED`), so a new
method is refused until someone decides who may call it. The server's gate
(`memini.server._auth.Gate`) applies each entry; the client (`memini._wire.METHODS`) and the
OpenAPI document list the same methods.

Access, from the widest to the narrowest:

* ``ANY`` — any authenticated caller; the call names no namespace and reveals none
  (``ping``, ``embed_model``).
* ``NAMESPACE`` — an API key may make the call when every namespace the arguments named in
  ``namespaces`` hold is its ``home_ns`` or below it; with ``confine`` its answer is also
  cut to the items whose namespaces it owns (``list_links``, ``list_events``).
* ``CONFINED`` — a server-wide read: an API key gets only the items of ``confine`` whose
  namespaces it owns (``list_namespaces``, ``list_expired``, ...).
* ``ADMIN`` — the admin secret, or open access on loopback (no secret, no key stored):
  store-wide maintenance.
* ``SECRET`` — the admin secret only, also in open mode: API-key management and ``backup``
  (API.md section 8, round 3). Without a secret, keys are managed in-process or with
  ``memini key`` while the server is stopped.

Namespace paths: ``"namespace"`` (an argument holding a namespace or, for ``recall``, a list
of them), ``"memory.namespace"`` (a field of a dataclass argument), ``"memories[].namespace"``
(that field of every item of a list argument), ``"filter.namespace|namespaces"`` (an
`EventFilter`, which an API key must give).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["NOT_SERVED", "SERVED", "Access", "Rule"]


class Access(enum.Enum):
    """Who may call a served method (see the module docs)."""

    ANY = "any"
    NAMESPACE = "namespace"
    CONFINED = "confined"
    ADMIN = "admin"
    SECRET = "secret"


Confine = Callable[[Any], Iterable[str]]
"""The namespaces of one item of an answer: an API key sees the item when it owns them all."""


@dataclass(frozen=True)
class Rule:
    """How one method is served.

    Attributes:
        access: Who may call it.
        read_only: It changes nothing (a client may repeat it after a lost answer; the
            server may run it on its event loop).
        namespaces: For ``NAMESPACE``, the paths of the arguments naming namespaces.
        confine: For ``CONFINED`` (and optionally ``NAMESPACE``), the namespaces of each
            item of the answer (a list).
    """

    access: Access
    read_only: bool
    namespaces: tuple[str, ...] = ()
    confine: Confine | None = None


def _ns(*paths: str, read_only: bool = False, confine: Confine | None = None) -> Rule:
    """A namespace-scoped method whose namespaces are at ``paths`` (default: the
    ``namespace`` argument)."""
    return Rule(Access.NAMESPACE, read_only, paths or ("namespace",), confine)


_READ: Final = _ns(read_only=True)
_WRITE: Final = _ns()


def _link_ends(link: Any) -> tuple[str, str]:
    return link.src, link.dst


def _event_namespaces(e: Any) -> tuple[str, ...]:
    return (e.namespace, e.memory_ns) if e.memory_ns else (e.namespace,)


SERVED: Final[dict[str, Rule]] = {
    # --- any caller: names and reveals no namespace
    "ping": Rule(Access.ANY, read_only=True),
    "embed_model": Rule(Access.ANY, read_only=True),
    # --- one namespace's memories
    "get": _READ,
    "get_embedding": _READ,
    "ids_by_prefix": _READ,
    "predecessor_ids": _READ,
    "get_by_fingerprint": _READ,
    "list": _READ,
    "count": _READ,
    "vector_search": _READ,
    "vector_search_many": _READ,
    "keyword_search": _READ,
    "recall": _WRITE,  # a str or a list; linked=True also checks the links' ends
    "upsert": _ns("memory.namespace"),
    "upsert_many": _ns("memories[].namespace"),
    "update": _WRITE,
    "delete": _WRITE,
    "delete_if_expired_before": _WRITE,
    "set_superseded": _WRITE,
    "restore": _WRITE,
    "reinforce": _WRITE,
    "retier": _WRITE,
    "set_confidence": _WRITE,
    "mark_contradicted": _WRITE,
    "delete_namespace": _WRITE,
    "reassign": _ns("from_ns", "to_ns"),
    # --- links and events of the caller's namespaces
    "put_link": _ns("link.src", "link.dst"),
    "delete_link": _ns("src", "dst"),
    "list_links": _ns("src", read_only=True, confine=_link_ends),
    "rename_link_endpoints": _ns("from_ns", "to_ns"),
    "append_events": _ns("events[].namespace", "events[].memory_ns"),
    "list_events": _ns("filter.namespace|namespaces", read_only=True, confine=_event_namespaces),
    # --- server-wide reads, cut to the caller's namespaces
    "list_namespaces": Rule(Access.CONFINED, True, confine=lambda ns: (ns,)),
    "namespace_activity": Rule(Access.CONFINED, True, confine=lambda a: (a.ns,)),
    "list_all_links": Rule(Access.CONFINED, True, confine=_link_ends),
    "list_expired": Rule(Access.CONFINED, True, confine=lambda m: (m.namespace,)),
    # --- store-wide maintenance: the admin (or open loopback access)
    "stats": Rule(Access.ADMIN, read_only=True),
    "compact": Rule(Access.ADMIN, read_only=False),
    "sweep_expired": Rule(Access.ADMIN, read_only=False),
    "refresh_active_counts": Rule(Access.ADMIN, read_only=False),
    "prune_events": Rule(Access.ADMIN, read_only=False),
    "set_embed_model": Rule(Access.ADMIN, read_only=False),
    "acknowledge_meta_db_loss": Rule(Access.ADMIN, read_only=False),
    # --- the admin secret only, open mode included
    "backup": Rule(Access.SECRET, read_only=False),
    "put_api_key": Rule(Access.SECRET, read_only=False),
    "delete_api_key": Rule(Access.SECRET, read_only=False),
    "rename_api_key_namespaces": Rule(Access.SECRET, read_only=False),
    "authenticate": Rule(Access.SECRET, read_only=True),
    "list_api_keys": Rule(Access.SECRET, read_only=True),
    "get_api_key_by_hash": Rule(Access.SECRET, read_only=True),
}
"""Every served method and its rule (``POST /v1/<name>``)."""

NOT_SERVED: Final = frozenset({"open", "close"})
"""Public `Store` methods deliberately not served: the lifecycle belongs to the server."""
