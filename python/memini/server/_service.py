"""`Service`: one served call, the same for REST and MCP — check, call, confine, log.

Handlers hold no business logic: they decode, hand the call to `Service.invoke` in a worker
thread (the store releases the GIL, so calls run in parallel), and encode its answer; a
search started in the core (`memini.aio._native`) is `enter`, the core call, `finish` and
`leave`, the same steps.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memini import _wire as wire
from memini._core import Front
from memini.errors import AuthError, InvalidArgumentError, UnavailableError
from memini.server._auth import Gate, Principal
from memini.server._events import EventRecorder
from memini.store import Store

_LOG = logging.getLogger("memini.server")

__all__ = ["Service"]

_KEY_WRITES = frozenset({"put_api_key", "delete_api_key", "rename_api_key_namespaces"})


class Service:
    """The served store with its gate (auth) and event recorder.

    Args:
        store: The store this process owns.
        gate: Authentication and namespace rules.
        recorder: Where the rows of served calls go; None = no event log.
        backup_dir: The directory a served ``backup`` writes below (None: served backups
            are refused).
    """

    def __init__(
        self,
        store: Store,
        gate: Gate,
        recorder: EventRecorder | None,
        backup_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.store = store
        self.gate = gate
        self.recorder = recorder
        self.backup_dir = None if backup_dir is None else Path(backup_dir).resolve()
        self.draining = False
        self.front: Front | None = None  # the HTTP front serving this service, if any
        self._inflight = 0
        self._idle = threading.Condition()

    def invoke(self, principal: Principal, method: wire.Method, args: Mapping[str, Any]) -> Any:
        """Run one call for ``principal`` (in a worker thread, or on the event loop).

        Raises:
            AuthError: The call is not the principal's to make (nothing ran).
            UnavailableError: The server is draining.
            MeminiError: What the store raised.
        """
        self.enter(principal, method, args)
        try:
            if method.name == "backup":
                args = {**args, "path": self.backup_path(args.get("path"))}
            if method.name == "list_expired" and not principal.admin:
                limit = args.get("limit", 0)
                rows = self.gate.confine(
                    principal, method.name, method.call(self.store, {**args, "limit": 0})
                )
                result = rows[:limit] if isinstance(limit, int) and limit > 0 else rows
            else:
                result = method.call(self.store, args)
            return self.finish(principal, method, args, result)
        finally:
            self.leave()

    def backup_path(self, path: object) -> Path:
        """Where a served ``backup`` of ``path`` writes: below `backup_dir`, never outside it.

        ``path`` names a new directory relative to `backup_dir` (an absolute path is taken
        when it lies below it). No ``..`` component, and no symbolic link leading out.

        Raises:
            AuthError: This server has no backup directory (``--backup-dir``).
            InvalidArgumentError: ``path`` is not a str, or leads outside the directory.
        """
        if self.backup_dir is None:
            raise AuthError(
                "backup() over the server writes only below the server's --backup-dir, and "
                "this server was started without one"
            )
        if not isinstance(path, str) or not path.strip() or "\x00" in path:
            raise InvalidArgumentError(
                "backup path must name a new directory below the server's backup directory"
            )
        rel = Path(path)
        if ".." in rel.parts:
            raise InvalidArgumentError(f"backup path {path!r} may not contain '..'")
        target = (self.backup_dir / rel).resolve()  # absolute paths replace the base
        if target == self.backup_dir or self.backup_dir not in target.parents:
            raise InvalidArgumentError(
                f"backup path {path!r} lies outside the server's backup directory: name a "
                "new directory below it (a relative path)"
            )
        return target

    def enter(self, principal: Principal, method: wire.Method, args: Mapping[str, Any]) -> None:
        """Admit a call (counted in flight until `leave`, which the caller must call).

        Raises:
            AuthError: The call is not the principal's to make (not admitted).
            UnavailableError: The server is draining (not admitted).
        """
        with self._idle:
            if self.draining:
                raise UnavailableError("the server is shutting down; retry on its successor")
            self._inflight += 1
        try:
            self.gate.check(principal, method.name, args)
        except BaseException:
            self.leave()
            raise

    def finish(
        self, principal: Principal, method: wire.Method, args: Mapping[str, Any], result: Any
    ) -> Any:
        """The answer of an admitted call that succeeded: confined to what the principal may
        see, its event rows queued."""
        result = self.gate.confine(principal, method.name, result)
        if method.name == "stats" and isinstance(result, dict):
            result["events_dropped"] = 0 if self.recorder is None else self.recorder.dropped
        if method.name in _KEY_WRITES:
            self.gate.keys_changed()
        if self.recorder is not None:
            self.recorder.record(method.name, args, result, principal.name)
        return result

    def report_front_writes(self) -> None:
        """Report to the store's metrics the writes the front answered itself since the last
        call, as `Store` reports its own (``upsert`` by op, tier and memory type; ``delete``)."""
        if self.front is None:
            return
        upserts, deletes = self.front.written()
        metrics = self.store._metrics
        for (op, tier, memory_type), n in upserts:
            for _ in range(n):
                metrics.upsert(op, tier, memory_type)
        for _ in range(deletes):
            metrics.delete()

    def leave(self) -> None:
        """The end of an admitted call, whatever its outcome."""
        with self._idle:
            self._inflight -= 1
            self._idle.notify_all()

    @property
    def in_flight(self) -> int:
        """Calls being served now."""
        return self._inflight

    def drain(self, timeout: float = 30.0) -> bool:
        """Refuse new calls and wait for those in flight; True when none is left."""
        with self._idle:
            self.draining = True
            return self._idle.wait_for(lambda: self._inflight == 0, timeout)

    def close(self) -> None:
        """Drain, stop the front's own calls (their rows queue in it), write the queued
        event rows, close the store."""
        self.drain()
        if self.front is not None:
            self.front.stop()
            if not self.front.idle(30.0):  # a call still running: its rows are not logged
                _LOG.warning("the front still answers a call after 30 s; its event rows are lost")
        if self.recorder is not None:
            self.recorder.close()
        self.store.close()
