"""Store metrics: the `Metrics` protocol, a no-op `NullMetrics` and `PrometheusMetrics`.

The store calls a `Metrics` object after a change is durable, and only then (a failed call
reports nothing): ``upsert`` per inserted or updated row, ``delete`` once per deleted row,
``soft_delete`` per superseded row, ``sweep_expired`` per row the decay sweep deleted,
``active_by_tier`` from ``Store.refresh_active_counts()``, ``dedup_tombstoned`` for rows
tombstoned by deduplication.

Any object with these six methods is a `Metrics` (the protocol is structural and
``runtime_checkable``); ``Store.open`` checks that each is present and callable
(`check_metrics`). Implementations must be thread-safe and should not raise: they run after
the write already succeeded. If one raises anyway, the store never turns that into an
exception of the write (the caller would retry a write that is durable): `GuardedMetrics`
logs it on the ``memini`` logger and counts it (``Store.stats()["metrics_errors"]``).
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Final, Protocol, runtime_checkable

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from memini.errors import InvalidArgumentError

__all__ = [
    "METRICS_METHODS",
    "METRIC_NAMES",
    "GuardedMetrics",
    "Metrics",
    "NullMetrics",
    "PrometheusMetrics",
    "check_metrics",
]

_LOG = logging.getLogger("memini")

METRIC_NAMES = (
    "memini_store_upserts_total",
    "memini_store_deletes_total",
    "memini_store_soft_deletes_total",
    "memini_store_swept_total",
    "memini_memories_active",
    "memini_dedup_tombstoned_total",
)
"""The exposed metric families of `PrometheusMetrics` (API.md section 5)."""


@runtime_checkable
class Metrics(Protocol):
    """What the store reports. ``tier`` arguments are `memini.Tier` members (a ``str``)."""

    def upsert(self, op: str, tier: str, memory_type: str) -> None:
        """A row was written.

        Args:
            op: ``"insert"`` or ``"update"``.
            tier: The row's tier.
            memory_type: ``metadata["memory_type"]`` when it is ``"decision"``,
                ``"preference"`` or ``"problem"``, else ``""``.
        """

    def delete(self) -> None:
        """A row was deleted (called once per row, also from ``delete_namespace``)."""

    def soft_delete(self) -> None:
        """A row was superseded (``set_superseded``)."""

    def sweep_expired(self, tier: str) -> None:
        """The decay sweep deleted an expired row of ``tier``.

        Args:
            tier: The deleted row's tier.
        """

    def active_by_tier(self, tier: str, n: int) -> None:
        """``n`` live rows of ``tier`` exist now (a gauge, set not added).

        Args:
            tier: The tier.
            n: The number of live rows in that tier, across namespaces.
        """

    def dedup_tombstoned(self, n: int) -> None:
        """Deduplication tombstoned ``n`` rows.

        Args:
            n: How many rows (0 reports nothing).
        """


METRICS_METHODS: Final = tuple(
    name for name, value in vars(Metrics).items() if not name.startswith("_") and callable(value)
)
"""The method names of the `Metrics` protocol, in declaration order."""


def check_metrics(metrics: object) -> Metrics:
    """Return ``metrics`` if it has every method of the `Metrics` protocol, callable.

    Args:
        metrics: The object given as ``Store.open(..., metrics=)``.

    Raises:
        InvalidArgumentError: A method is missing or not callable; the message names them.
    """
    missing = [name for name in METRICS_METHODS if not callable(getattr(metrics, name, None))]
    if missing:
        raise InvalidArgumentError(
            f"metrics must implement the memini.Metrics protocol, but "
            f"{type(metrics).__name__} has no callable {', '.join(missing)} (define them; "
            "subclass memini.metrics.NullMetrics to get no-op defaults)"
        )
    return metrics  # type: ignore[return-value]  # checked structurally just above


class GuardedMetrics:
    """Wraps the `Metrics` given to a store so that a report can never fail a write.

    Each call is forwarded; an exception from it is logged on the ``memini`` logger (with
    its traceback the first time for each method) and counted in `errors`, never raised.
    Thread-safe when the wrapped object is.
    """

    def __init__(self, inner: Metrics) -> None:
        """Wrap ``inner`` (already checked with `check_metrics`)."""
        self.inner = inner
        self._lock = threading.Lock()
        self._errors = 0
        self._failed: set[str] = set()

    @property
    def errors(self) -> int:
        """How many reports raised so far."""
        with self._lock:
            return self._errors

    def _call(self, name: str, *args: object) -> None:
        try:
            getattr(self.inner, name)(*args)
        except Exception:
            with self._lock:
                self._errors += 1
                first = name not in self._failed
                self._failed.add(name)
            _LOG.error(
                "metrics %s.%s%r raised; the store's change is durable and stays done "
                "(counted in Store.stats()['metrics_errors'])",
                type(self.inner).__name__,
                name,
                args,
                exc_info=first,
            )

    def upsert(self, op: str, tier: str, memory_type: str) -> None:
        """Forward `Metrics.upsert`."""
        self._call("upsert", op, tier, memory_type)

    def delete(self) -> None:
        """Forward `Metrics.delete`."""
        self._call("delete")

    def soft_delete(self) -> None:
        """Forward `Metrics.soft_delete`."""
        self._call("soft_delete")

    def sweep_expired(self, tier: str) -> None:
        """Forward `Metrics.sweep_expired`."""
        self._call("sweep_expired", tier)

    def active_by_tier(self, tier: str, n: int) -> None:
        """Forward `Metrics.active_by_tier`."""
        self._call("active_by_tier", tier, n)

    def dedup_tombstoned(self, n: int) -> None:
        """Forward `Metrics.dedup_tombstoned`."""
        self._call("dedup_tombstoned", n)


class NullMetrics:
    """A `Metrics` that records nothing (the store's default)."""

    def upsert(self, op: str, tier: str, memory_type: str) -> None:
        """Ignore an upsert."""

    def delete(self) -> None:
        """Ignore a delete."""

    def soft_delete(self) -> None:
        """Ignore a soft delete."""

    def sweep_expired(self, tier: str) -> None:
        """Ignore a swept row."""

    def active_by_tier(self, tier: str, n: int) -> None:
        """Ignore an active count."""

    def dedup_tombstoned(self, n: int) -> None:
        """Ignore tombstoned rows."""


class _Collectors:
    """The prometheus_client collectors of one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        # prometheus_client appends "_total" to counter names on exposition.
        self.upserts = Counter(
            "memini_store_upserts",
            "Rows written to the memory store, by operation, tier and memory type.",
            ("op", "tier", "memory_type"),
            registry=registry,
        )
        self.deletes = Counter(
            "memini_store_deletes", "Rows deleted from the memory store.", registry=registry
        )
        self.soft_deletes = Counter(
            "memini_store_soft_deletes",
            "Rows superseded (soft-deleted) in the memory store.",
            registry=registry,
        )
        self.swept = Counter(
            "memini_store_swept",
            "Expired rows deleted by the decay sweep, by tier.",
            ("tier",),
            registry=registry,
        )
        self.active = Gauge(
            "memini_memories_active",
            "Live rows by tier, as of the last Store.refresh_active_counts().",
            ("tier",),
            registry=registry,
        )
        self.dedup_tombstoned = Counter(
            "memini_dedup_tombstoned",
            "Rows tombstoned by deduplication.",
            registry=registry,
        )


# prometheus_client refuses to register a metric name twice in one registry, so every
# PrometheusMetrics on the same registry shares one set of collectors.
_SHARED: weakref.WeakKeyDictionary[CollectorRegistry, _Collectors] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def _label(value: str) -> str:
    """A label value: a StrEnum member's value, or the string itself."""
    return str(getattr(value, "value", value))


class PrometheusMetrics:
    """`Metrics` on ``prometheus_client``.

    Exposes ``memini_store_upserts_total{op,tier,memory_type}``,
    ``memini_store_deletes_total``, ``memini_store_soft_deletes_total``,
    ``memini_store_swept_total{tier}``, ``memini_memories_active{tier}`` and
    ``memini_dedup_tombstoned_total``.

    Instances created for the same registry share its collectors (a metric name exists once
    per registry), so several stores in one process add up in one set of series.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """Register (or reuse) the memini collectors in ``registry``.

        Args:
            registry: Where to register. None means prometheus_client's default
                ``REGISTRY``, the one ``start_http_server`` and ``generate_latest()``
                expose; pass your own ``CollectorRegistry`` to keep it separate (tests).

        Raises:
            InvalidArgumentError: ``registry`` already holds a different metric with one of
                these names.
        """
        self.registry: CollectorRegistry = REGISTRY if registry is None else registry
        with _SHARED_LOCK:
            collectors = _SHARED.get(self.registry)
            if collectors is None:
                try:
                    collectors = _Collectors(self.registry)
                except ValueError as exc:
                    raise InvalidArgumentError(
                        f"cannot register the memini metrics: {exc}; pass a registry without "
                        "them (e.g. prometheus_client.CollectorRegistry())"
                    ) from exc
                _SHARED[self.registry] = collectors
        self._c = collectors

    def upsert(self, op: str, tier: str, memory_type: str) -> None:
        """Count a written row in ``memini_store_upserts_total{op,tier,memory_type}``.

        Args:
            op: ``"insert"`` or ``"update"``.
            tier: The row's tier.
            memory_type: The reported memory type, or ``""``.
        """
        self._c.upserts.labels(_label(op), _label(tier), _label(memory_type)).inc()

    def delete(self) -> None:
        """Count a deleted row in ``memini_store_deletes_total``."""
        self._c.deletes.inc()

    def soft_delete(self) -> None:
        """Count a superseded row in ``memini_store_soft_deletes_total``."""
        self._c.soft_deletes.inc()

    def sweep_expired(self, tier: str) -> None:
        """Count a swept row in ``memini_store_swept_total{tier}``.

        Args:
            tier: The deleted row's tier.
        """
        self._c.swept.labels(_label(tier)).inc()

    def active_by_tier(self, tier: str, n: int) -> None:
        """Set ``memini_memories_active{tier}`` to ``n``.

        Args:
            tier: The tier.
            n: Live rows in the tier.
        """
        self._c.active.labels(_label(tier)).set(n)

    def dedup_tombstoned(self, n: int) -> None:
        """Add ``n`` to ``memini_dedup_tombstoned_total`` (counters only grow: n <= 0 is ignored).

        Args:
            n: Rows tombstoned.
        """
        if n > 0:
            self._c.dedup_tombstoned.inc(n)
