"""Who is calling and what they may touch (API.md section 8).

* ``Authorization: Bearer <secret>``. The admin secret (``MEMINI_ADMIN_KEY``, compared in
  constant time) may do everything. An API key (`Store.authenticate`) may touch only its
  ``home_ns`` and the namespaces below it (``home_ns/...``) and may not manage keys or run
  store-wide maintenance; a key with an empty ``home_ns`` may touch no namespace.
* With no admin secret and no API key stored, requests without a credential are served as
  admin only on a loopback address (`Gate.open`); anywhere else they get 401.
* 401 for an unknown or disabled secret; 403 for a namespace or operation outside the key's
  reach. A 403 message names only the key's own home, never the namespace or data asked for.
* Secrets are never logged nor echoed; a lookup is cached for ``cache_for`` seconds by the
  secret's hash (a key disabled or deleted through this server is dropped from it at once).
"""

from __future__ import annotations

import dataclasses
import hmac
import ipaddress
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

from memini.errors import AuthError
from memini.store import Store
from memini.types import APIKey, Event, EventFilter, Memory, NamespaceLink, hash_api_key

__all__ = ["ADMIN_ONLY", "Gate", "Principal", "Unauthenticated", "is_loopback"]


class Unauthenticated(AuthError):
    """401: no credential where one is needed, or an unknown or disabled one."""


@dataclasses.dataclass(frozen=True)
class Principal:
    """The caller: admin (``key is None``) or an API key confined to ``key.home_ns``."""

    key: APIKey | None
    name: str

    @property
    def admin(self) -> bool:
        """Whether the caller may do everything."""
        return self.key is None

    def owns(self, namespace: str) -> bool:
        """Whether ``namespace`` is the key's home or below it (always, for admin)."""
        if self.key is None:
            return True
        home = self.key.home_ns
        return bool(home) and (namespace == home or namespace.startswith(home + "/"))

    def default_namespace(self) -> str:
        """The namespace MCP tools work in: the key's ``default_ns`` (when it owns it) or
        its ``home_ns``; ``""`` for admin (which must name one)."""
        if self.key is None:
            return ""
        return self.key.default_ns if self.owns(self.key.default_ns) else self.key.home_ns


ADMIN: Final = Principal(None, "admin")
OPEN: Final = Principal(None, "open-loopback")

# Methods only the admin may call: key management and store-wide maintenance.
ADMIN_ONLY: Final = frozenset(
    {
        "put_api_key",
        "authenticate",
        "delete_api_key",
        "list_api_keys",
        "get_api_key_by_hash",
        "rename_api_key_namespaces",
        "stats",
        "compact",
        "backup",
        "acknowledge_meta_db_loss",
        "sweep_expired",
        "set_embed_model",
        "prune_events",
        "refresh_active_counts",
    }
)
# Arguments naming a namespace, checked by name.
_NS_ARGS: Final = ("namespace", "from_ns", "to_ns", "src", "dst")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _forbidden(principal: Principal, what: str) -> AuthError:
    home = principal.key.home_ns if principal.key is not None else ""
    reach = f"{home!r} and {home}/..." if home else "no namespace (its home_ns is empty)"
    return AuthError(f"{what} is outside what this API key may touch: {reach}")


class Gate:
    """Authentication and the namespace rules of one server."""

    def __init__(
        self, store: Store, admin_key: str | None, loopback: bool, cache_for: float = 2.0
    ) -> None:
        self._store = store
        self._admin = admin_key.encode() if admin_key else None
        self._loopback = loopback
        self._cache_for = cache_for
        self._cache: dict[str, tuple[float, APIKey | None]] = {}
        self._lock = threading.Lock()
        self._keys_stored = bool(store.list_api_keys())

    @property
    def open(self) -> bool:
        """Whether requests without a credential are served (as admin)."""
        return self._admin is None and not self._keys_stored and self._loopback

    def keys_changed(self) -> None:
        """Forget cached lookups after a key was written or deleted through this server."""
        with self._lock:
            self._cache.clear()
        self._keys_stored = bool(self._store.list_api_keys())

    def principal(self, authorization: str | None) -> Principal:
        """The caller of a request with this ``Authorization`` header.

        Raises:
            Unauthenticated: No credential where one is required, a malformed header, or an
                unknown or disabled secret.
        """
        if not authorization:
            if self.open:
                return OPEN
            raise Unauthenticated(
                "this server requires a credential: send 'Authorization: Bearer <secret>' "
                "(the admin secret or an API key)"
            )
        scheme, _, secret = authorization.partition(" ")
        secret = secret.strip()
        if scheme.lower() != "bearer" or not secret:
            raise Unauthenticated("malformed Authorization header: use 'Bearer <secret>'")
        if self._admin is not None and hmac.compare_digest(secret.encode(), self._admin):
            return ADMIN
        key = self._lookup(secret)
        if key is None:
            raise Unauthenticated("unknown or disabled API key")
        return Principal(key, key.name)

    def _lookup(self, secret: str) -> APIKey | None:
        digest = hash_api_key(secret)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(digest)
        if hit is not None and now - hit[0] < self._cache_for:
            return hit[1]
        key = self._store.get_api_key_by_hash(digest)
        if key is not None and key.disabled:
            key = None
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = (now, key)
        return key

    # ---------------------------------------------------------------- namespace rules

    def check(self, principal: Principal, method: str, args: Mapping[str, Any]) -> None:
        """Refuse a call the principal may not make (before it reaches the store).

        Raises:
            AuthError: An admin-only method, or an argument naming a namespace outside the
                key's home (the message names only the key's home).
        """
        if principal.admin:
            return
        if method in ADMIN_ONLY:
            raise AuthError(f"{method}() is for the admin secret only, not an API key")
        for name in _NS_ARGS:
            ns = args.get(name)
            if isinstance(ns, str) and not principal.owns(ns):
                raise _forbidden(principal, name)
            if isinstance(ns, list) and any(  # recall over several namespaces
                not isinstance(n, str) or not principal.owns(n) for n in ns
            ):
                raise _forbidden(principal, "a namespace of the list")
        for name, value in args.items():
            for what, ns in _namespaces_in(name, value):
                if not principal.owns(ns):
                    raise _forbidden(principal, what)
        if method == "list_events":
            f = args.get("filter")
            names = [f.namespace] if isinstance(f, EventFilter) and f.namespace else []
            if isinstance(f, EventFilter) and not names:
                names = [n for n in f.namespaces if isinstance(n, str)]
            if not names:
                raise AuthError(
                    "an API key must name its namespaces in the EventFilter "
                    "(namespace= or namespaces=)"
                )
            if not all(principal.owns(n) for n in names):
                raise _forbidden(principal, "filter.namespace")
        if method == "recall" and args.get("linked"):
            self._check_links(principal, args.get("namespace"))

    def _check_links(self, principal: Principal, namespace: object) -> None:
        names = [namespace] if isinstance(namespace, str) else namespace
        for ns in names if isinstance(names, list) else []:
            for link in self._store.list_links(ns):
                if not principal.owns(link.dst):
                    raise _forbidden(principal, "a namespace linked from it")

    def confine(self, principal: Principal, method: str, result: Any) -> Any:
        """Drop from a store-wide answer what lies outside the key's home."""
        if principal.admin:
            return result
        owns = principal.owns
        if method == "list_namespaces":
            return [ns for ns in result if owns(ns)]
        if method == "namespace_activity":
            return [a for a in result if owns(a.ns)]
        if method in ("list_all_links", "list_links"):
            return [x for x in result if owns(x.src) and owns(x.dst)]
        if method == "list_expired":
            return [m for m in result if owns(m.namespace)]
        return result


def _namespaces_in(name: str, value: object) -> Iterable[tuple[str, str]]:
    """The (argument, namespace) pairs inside dataclass arguments: memories, links, events."""
    items: Iterable[object] = value if isinstance(value, list) else [value]
    for i, item in enumerate(items):
        where = f"{name}[{i}]" if isinstance(value, list) else name
        if isinstance(item, Memory) and isinstance(item.namespace, str):
            yield f"{where}.namespace", item.namespace
        elif isinstance(item, NamespaceLink):
            for end in ("src", "dst"):
                ns = getattr(item, end)
                if isinstance(ns, str):
                    yield f"{where}.{end}", ns
        elif isinstance(item, Event):
            if isinstance(item.namespace, str):
                yield f"{where}.namespace", item.namespace
            if isinstance(item.memory_ns, str) and item.memory_ns:
                yield f"{where}.memory_ns", item.memory_ns
