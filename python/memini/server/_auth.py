"""Who is calling and what they may touch (API.md section 8).

* ``Authorization: Bearer <secret>``. The admin secret (``MEMINI_ADMIN_KEY``, compared in
  constant time) may do everything. An API key (`Store.authenticate`) may touch only its
  ``home_ns`` and the namespaces below it (``home_ns/...``) and may not manage keys or run
  store-wide maintenance; a key with an empty ``home_ns`` may touch no namespace.
* What each method needs is its entry in `memini._served.SERVED` (admin only, the namespaces
  its arguments name, or a server-wide answer cut to the key's namespaces); `Gate.check`
  and `Gate.confine` apply it.
* With no admin secret and no API key stored, requests without a credential are served as
  admin only on a loopback address (`Gate.open`); anywhere else they get 401. Open access
  never covers what needs the admin secret itself (``Access.SECRET``: API-key management and
  ``backup``), so the first local caller cannot take the server over.
* 401 for an unknown or disabled secret; 403 for a namespace or operation outside the key's
  reach. A 403 message names only the key's own home, never the namespace or data asked for.
* Secrets are never logged nor echoed; a lookup is cached for ``cache_for`` seconds by the
  secret's hash (a key disabled or deleted through this server is dropped from it at once).
* Behind the HTTP front (`memini._core.Front`, ``memini serve --front``) the decision is the
  front's, made once per request from the key snapshot this gate pushes to it on every key
  change (`attach`, `keys_changed`); the app reads it from the ``memini-principal`` header,
  believed only beside the front's per-process token (`principal`).
"""

from __future__ import annotations

import dataclasses
import hmac
import ipaddress
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, Final, Protocol

from memini._served import SERVED, Access
from memini.errors import AuthError
from memini.store import Store
from memini.types import APIKey, EventFilter, hash_api_key

__all__ = ["ADMIN_KEY_ENV", "Gate", "Principal", "Unauthenticated", "is_loopback"]

ADMIN_KEY_ENV: Final = "MEMINI_ADMIN_KEY"
"""The environment variable holding the admin secret."""


class Unauthenticated(AuthError):
    """401: no credential where one is needed, or an unknown or disabled one."""


@dataclasses.dataclass(frozen=True)
class Principal:
    """The caller: admin (``key is None``) or an API key confined to ``key.home_ns``."""

    key: APIKey | None
    name: str
    secret: bool = False
    """Whether the caller showed the admin secret (not open access)."""

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


ADMIN: Final = Principal(None, "admin", secret=True)
OPEN: Final = Principal(None, "open-loopback")


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


class Front(Protocol):
    """What the gate needs of the HTTP front (`memini._core.Front`)."""

    def set_keys(self, open: bool, keys: list[tuple[str, str, str, str, bool]]) -> None: ...


_NO_CREDENTIAL: Final = (
    "this server requires a credential: send 'Authorization: Bearer <secret>' "
    "(the admin secret or an API key)"
)
_MALFORMED: Final = "malformed Authorization header: use 'Bearer <secret>'"
_UNKNOWN: Final = "unknown or disabled API key"
_REFUSED: Final = {"missing": _NO_CREDENTIAL, "malformed": _MALFORMED, "unknown": _UNKNOWN}


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
        self._front: Front | None = None
        self._token = b""
        self._enabled: dict[str, APIKey] = {}  # the front's snapshot, by hash

    @property
    def open(self) -> bool:
        """Whether requests without a credential are served (as admin)."""
        return self._admin is None and not self._keys_stored and self._loopback

    def keys_changed(self) -> None:
        """Forget cached lookups after a key was written or deleted through this server."""
        with self._lock:
            self._cache.clear()
        keys = self._store.list_api_keys()
        self._keys_stored = bool(keys)
        if self._front is not None:
            self._enabled = {k.hash: k for k in keys if not k.disabled}
            rows = [(k.hash, k.name, k.home_ns, k.default_ns, k.disabled) for k in keys]
            self._front.set_keys(self.open, rows)

    def attach(self, front: Front, token: bytes) -> None:
        """Let ``front`` decide auth from now on: it gets the key snapshot now and on every
        key change; requests carrying ``token`` carry its decision (`principal`)."""
        self._front = front
        self._token = token
        self.keys_changed()

    def principal(
        self, authorization: str | None, token: bytes | None = None, decided: bytes | None = None
    ) -> Principal:
        """The caller of a request with this ``Authorization`` header; behind the front, the
        front's decision (``decided``, the ``memini-principal`` header), believed only with
        the front's ``token`` (``memini-front-token``).

        Raises:
            Unauthenticated: No credential where one is required, a malformed header, or an
                unknown or disabled secret; behind the front, a request without its token.
        """
        if self._front is not None:
            return self._decided(token, decided)
        if not authorization:
            if self.open:
                return OPEN
            raise Unauthenticated(_NO_CREDENTIAL)
        scheme, _, secret = authorization.partition(" ")
        secret = secret.strip()
        if scheme.lower() != "bearer" or not secret:
            raise Unauthenticated(_MALFORMED)
        if self._admin is not None and hmac.compare_digest(secret.encode(), self._admin):
            return ADMIN
        key = self._lookup(secret)
        if key is None:
            raise Unauthenticated(_UNKNOWN)
        return Principal(key, key.name)

    def _decided(self, token: bytes | None, decided: bytes | None) -> Principal:
        if token is None or decided is None or not hmac.compare_digest(token, self._token):
            raise Unauthenticated("this request did not come through the server's front")
        kind, _, digest = decided.decode("latin-1").partition(" ")
        if kind == "admin":
            return ADMIN
        if kind == "open":
            return OPEN
        key = self._enabled.get(digest) if kind == "key" else None
        if key is None:
            raise Unauthenticated(_REFUSED.get(kind, _UNKNOWN))
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

    # ---------------------------------------------------------------- the served table

    def check(self, principal: Principal, method: str, args: Mapping[str, Any]) -> None:
        """Refuse a call the principal may not make, by the method's entry in
        `memini._served.SERVED` (before anything reaches the store).

        Raises:
            AuthError: The method needs the admin secret, or is the admin's, or an argument
                names a namespace outside the key's home (the message names only the key's
                home).
        """
        rule = SERVED[method]
        if rule.access is Access.SECRET and principal.admin and not principal.secret:
            raise AuthError(
                f"{method}() needs the admin secret ({ADMIN_KEY_ENV}), also on loopback; "
                "without one, manage API keys in-process or with `memini key` while the "
                "server is stopped"
            )
        if principal.admin:
            return
        if rule.access in (Access.ADMIN, Access.SECRET):
            raise AuthError(f"{method}() is for the admin secret only, not an API key")
        for path in rule.namespaces:
            for what, ns in _named(path, args):
                if not isinstance(ns, str) or not principal.owns(ns):
                    raise _forbidden(principal, what)
        if method == "recall" and args.get("linked"):
            self._check_links(principal, args.get("namespace"))

    def _check_links(self, principal: Principal, namespace: object) -> None:
        names = [namespace] if isinstance(namespace, str) else namespace
        for ns in names if isinstance(names, list) else []:
            for link in self._store.list_links(ns):
                if not principal.owns(link.dst):
                    raise _forbidden(principal, "a namespace linked from it")

    def confine(self, principal: Principal, method: str, result: Any) -> Any:
        """Cut an answer to the items whose namespaces the key owns (the rule's
        ``confine``); the admin's answers pass whole."""
        confine = SERVED[method].confine
        if principal.admin or confine is None:
            return result
        owns = principal.owns
        return [x for x in result if all(owns(ns) for ns in confine(x))]


def _named(path: str, args: Mapping[str, Any]) -> Iterator[tuple[str, object]]:
    """The (argument, namespace) pairs a rule's namespace path names in a call's arguments
    (see `memini._served`); a value that is not a namespace is yielded as it is, and
    refused."""
    head, _, field = path.partition(".")
    if head.endswith("[]"):
        name = head[:-2]
        items = args.get(name)
        for i, item in enumerate(items if isinstance(items, list) else [items]):
            ns = getattr(item, field, None)
            if field != "memory_ns" or ns:  # an event may name no memory
                yield f"{name}[{i}].{field}", ns
        return
    if head not in args:
        if field == "namespace|namespaces":  # an EventFilter: an API key must name them
            raise AuthError(_NAME_THEM)
        return
    value = args[head]
    if field == "namespace|namespaces":
        names = _event_filter_namespaces(value)
        if not names:
            raise AuthError(_NAME_THEM)
        for ns in names:
            yield "filter.namespace", ns
    elif field:
        yield path, getattr(value, field, None)
    elif isinstance(value, list):  # recall over several namespaces
        for ns in value:
            yield "a namespace of the list", ns
    else:
        yield head, value


def _event_filter_namespaces(f: object) -> list[object]:
    if not isinstance(f, EventFilter):
        return []
    return [f.namespace] if f.namespace else list(f.namespaces or ())


_NAME_THEM: Final = (
    "an API key must name its namespaces in the EventFilter (namespace= or namespaces=)"
)
