"""Metrics (API.md section 5): the protocol, NullMetrics and PrometheusMetrics' series."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from memini import Memory, Store
from memini.errors import InvalidArgumentError
from memini.metrics import (
    METRIC_NAMES,
    METRICS_METHODS,
    GuardedMetrics,
    Metrics,
    NullMetrics,
    PrometheusMetrics,
    check_metrics,
)
from memini.types import Tier

# One call of every protocol method, with arguments of the documented types.
EVERY_CALL: list[tuple[str, tuple[Any, ...]]] = [
    ("upsert", ("insert", Tier.SEMANTIC, "")),
    ("delete", ()),
    ("soft_delete", ()),
    ("sweep_expired", (Tier.WORKING,)),
    ("active_by_tier", (Tier.EPISODIC, 3)),
    ("dedup_tombstoned", (2,)),
]


@pytest.fixture
def registry() -> CollectorRegistry:
    """A private registry per test."""
    return CollectorRegistry()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    """The current value of one sample."""
    return registry.get_sample_value(name, labels)


def test_both_implementations_satisfy_the_protocol(registry: CollectorRegistry) -> None:
    assert isinstance(NullMetrics(), Metrics)
    assert isinstance(PrometheusMetrics(registry), Metrics)
    assert not isinstance(object(), Metrics)


def test_protocol_methods_are_the_six_of_the_api() -> None:
    assert tuple(name for name, _ in EVERY_CALL) == METRICS_METHODS


def test_null_metrics_accepts_every_call() -> None:
    """Every protocol method exists, takes the documented arguments, returns None and
    records nothing (the instance stays stateless)."""
    m = NullMetrics()
    results = {name: getattr(m, name)(*args) for name, args in EVERY_CALL}
    assert results == dict.fromkeys(METRICS_METHODS)
    assert vars(m) == {}
    assert check_metrics(m) is m


def test_exposition_uses_the_api_names(registry: CollectorRegistry) -> None:
    m = PrometheusMetrics(registry)
    m.upsert("insert", Tier.SEMANTIC, "decision")
    m.delete()
    m.soft_delete()
    m.sweep_expired(Tier.WORKING)
    m.active_by_tier(Tier.EPISODIC, 3)
    m.dedup_tombstoned(2)
    text = generate_latest(registry).decode()
    for name in METRIC_NAMES:
        assert f"\n{name}" in text or text.startswith(name), name
    assert (
        'memini_store_upserts_total{memory_type="decision",op="insert",tier="semantic"} 1.0' in text
    )
    assert 'memini_store_swept_total{tier="working"} 1.0' in text
    assert 'memini_memories_active{tier="episodic"} 3.0' in text


@pytest.mark.parametrize(
    ("calls", "sample", "labels", "expected"),
    [
        pytest.param(
            [("upsert", ("insert", Tier.SEMANTIC, ""))] * 2
            + [("upsert", ("update", "semantic", ""))],
            "memini_store_upserts_total",
            {"op": "insert", "tier": "semantic", "memory_type": ""},
            2.0,
            id="upsert-by-labels",
        ),
        pytest.param(
            [("upsert", ("update", Tier.PROCEDURAL, "problem"))],
            "memini_store_upserts_total",
            {"op": "update", "tier": "procedural", "memory_type": "problem"},
            1.0,
            id="upsert-enum-label-is-value",
        ),
        pytest.param([("delete", ())] * 3, "memini_store_deletes_total", {}, 3.0, id="delete"),
        pytest.param(
            [("soft_delete", ())] * 2, "memini_store_soft_deletes_total", {}, 2.0, id="soft-delete"
        ),
        pytest.param(
            [("sweep_expired", (Tier.WORKING,)), ("sweep_expired", ("episodic",))],
            "memini_store_swept_total",
            {"tier": "working"},
            1.0,
            id="swept-by-tier",
        ),
        pytest.param(
            [("active_by_tier", (Tier.SEMANTIC, 7)), ("active_by_tier", (Tier.SEMANTIC, 4))],
            "memini_memories_active",
            {"tier": "semantic"},
            4.0,
            id="active-is-a-gauge",
        ),
        pytest.param(
            [("dedup_tombstoned", (3,)), ("dedup_tombstoned", (0,)), ("dedup_tombstoned", (-2,))],
            "memini_dedup_tombstoned_total",
            {},
            3.0,
            id="dedup-adds-positive-only",
        ),
    ],
)
def test_calls_update_samples(
    registry: CollectorRegistry,
    calls: list[tuple[str, tuple[object, ...]]],
    sample: str,
    labels: dict[str, str],
    expected: float,
) -> None:
    m = PrometheusMetrics(registry)
    for method, args in calls:
        getattr(m, method)(*args)
    assert value(registry, sample, **labels) == expected


def test_instances_on_one_registry_share_series(registry: CollectorRegistry) -> None:
    a, b = PrometheusMetrics(registry), PrometheusMetrics(registry=registry)
    a.delete()
    b.delete()
    assert value(registry, "memini_store_deletes_total") == 2.0
    other = CollectorRegistry()
    PrometheusMetrics(other).delete()
    assert value(other, "memini_store_deletes_total") == 1.0
    assert value(registry, "memini_store_deletes_total") == 2.0


def test_default_registry_when_none() -> None:
    from prometheus_client import REGISTRY

    m = PrometheusMetrics()
    assert m.registry is REGISTRY
    before = REGISTRY.get_sample_value("memini_store_soft_deletes_total") or 0.0
    PrometheusMetrics(None).soft_delete()  # a second instance does not clash
    assert REGISTRY.get_sample_value("memini_store_soft_deletes_total") == before + 1


def test_name_taken_by_someone_else_is_a_clear_error(registry: CollectorRegistry) -> None:
    Counter("memini_store_deletes", "not ours", registry=registry)
    with pytest.raises(InvalidArgumentError, match="CollectorRegistry"):
        PrometheusMetrics(registry)


def test_concurrent_reports_add_up(registry: CollectorRegistry) -> None:
    m = PrometheusMetrics(registry)

    def work() -> None:
        for _ in range(1000):
            m.upsert("insert", Tier.WORKING, "")
            m.delete()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert value(registry, "memini_store_deletes_total") == 8000.0
    assert (
        value(registry, "memini_store_upserts_total", op="insert", tier="working", memory_type="")
        == 8000.0
    )


# ------------------------------------------------------------------ the store and its metrics


class _Partial:
    """Has only some of the protocol methods (and one that is not callable)."""

    upsert = 3

    def delete(self) -> None:
        """Present."""


@pytest.mark.parametrize(
    ("metrics", "missing"),
    [
        pytest.param(object(), list(METRICS_METHODS), id="object"),
        pytest.param(
            _Partial(),
            ["upsert", "soft_delete", "sweep_expired", "active_by_tier", "dedup_tombstoned"],
            id="partial-and-non-callable",
        ),
        pytest.param("metrics", list(METRICS_METHODS), id="str"),
    ],
)
def test_open_checks_the_metrics_protocol(
    tmp_path: Path, metrics: object, missing: list[str]
) -> None:
    """Refused at open, naming every missing method, before anything is created."""
    with pytest.raises(InvalidArgumentError, match=r"memini\.Metrics protocol") as err:
        Store.open(tmp_path / "s", dims=4, metrics=metrics)  # type: ignore[arg-type]
    message = str(err.value)
    assert f"has no callable {', '.join(missing)} " in message
    assert "NullMetrics" in message
    assert not (tmp_path / "s").exists()
    with pytest.raises(InvalidArgumentError, match=r"memini\.Metrics protocol"):
        check_metrics(metrics)


class _SubclassedNull(NullMetrics):
    """A user's metrics overriding one method: the rest come from NullMetrics."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def upsert(self, op: str, tier: str, memory_type: str) -> None:
        self.calls.append((op, tier, memory_type))


def test_open_accepts_any_object_with_the_protocol(tmp_path: Path) -> None:
    m = _SubclassedNull()
    with Store.open(tmp_path / "s", dims=4, metrics=m) as s:
        s.upsert(Memory(id="a", namespace="ns", content="c"))
        assert s.stats()["metrics_errors"] == 0
    assert m.calls == [("insert", "semantic", "")]


class _Broken:
    """Every report raises."""

    def __init__(self) -> None:
        self.calls = 0

    def _fail(self, *args: object) -> None:
        self.calls += 1
        raise RuntimeError("metrics backend down")

    upsert = delete = soft_delete = sweep_expired = active_by_tier = dedup_tombstoned = _fail


def test_guarded_metrics_logs_counts_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    inner = _Broken()
    guarded = GuardedMetrics(inner)
    with caplog.at_level(logging.ERROR, logger="memini"):
        for name, args in EVERY_CALL * 2:
            assert getattr(guarded, name)(*args) is None
    assert inner.calls == guarded.errors == 2 * len(EVERY_CALL)
    records = [r for r in caplog.records if r.name == "memini"]
    assert len(records) == 2 * len(EVERY_CALL)
    assert all("durable" in r.getMessage() for r in records)
    # the traceback once per method, not on every failure
    assert [bool(r.exc_info) for r in records] == [True] * 6 + [False] * 6


T0 = datetime(2024, 1, 1, tzinfo=UTC)
NS = "ns"


def _seed(s: Store) -> None:
    s.upsert_many(
        [
            Memory(id="a", namespace=NS, content="alpha", expires_at=T0),
            Memory(id="b", namespace=NS, content="beta"),
        ]
    )


# (write, reports it makes, check that the change is there)
WRITES: list[Any] = [
    pytest.param(
        lambda s: s.upsert(Memory(id="c", namespace=NS, content="gamma")),
        1,
        lambda s: s.get(NS, "c").content == "gamma",
        id="upsert",
    ),
    pytest.param(
        lambda s: s.upsert_many(
            [Memory(id="c", namespace=NS, content="c"), Memory(id="b", namespace=NS, content="b2")]
        ),
        2,
        lambda s: s.get(NS, "c").content == "c" and s.get(NS, "b").content == "b2",
        id="upsert-many",
    ),
    pytest.param(
        lambda s: s.update(NS, "b", content="beta 2"),
        1,
        lambda s: s.get(NS, "b").content == "beta 2",
        id="update",
    ),
    pytest.param(lambda s: s.delete(NS, "b"), 1, lambda s: s.count(NS) == 0, id="delete"),
    pytest.param(
        lambda s: s.set_superseded(NS, "b", "a"),
        1,
        lambda s: s.get(NS, "b").superseded_by == "a",
        id="set-superseded",
    ),
    pytest.param(
        lambda s: s.delete_if_expired_before(NS, "a", T0),
        1,
        lambda s: s.ids_by_prefix(NS, "a", 10) == [],
        id="delete-if-expired-before",
    ),
    pytest.param(
        lambda s: s.sweep_expired(T0 + timedelta(days=1)),
        1,
        lambda s: s.ids_by_prefix(NS, "a", 10) == [],
        id="sweep-expired",
    ),
    pytest.param(
        lambda s: s.delete_namespace(NS), 2, lambda s: s.list_namespaces() == [], id="delete-ns"
    ),
]


@pytest.mark.parametrize(("write", "reports", "done"), WRITES)
def test_failing_metrics_never_fail_a_durable_write(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    write: Callable[[Store], Any],
    reports: int,
    done: Callable[[Store], bool],
) -> None:
    """The write returns normally (a caller must not retry a write that is durable); the
    failure is logged on the memini logger and counted in stats()["metrics_errors"]."""
    broken = _Broken()
    with Store.open(tmp_path / "s", dims=4, metrics=broken) as s:  # type: ignore[arg-type]
        _seed(s)
        seeded_errors = s.stats()["metrics_errors"]
        assert seeded_errors == broken.calls == 2
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="memini"):
            write(s)
        assert done(s)
        assert s.stats()["metrics_errors"] == seeded_errors + reports
    assert len([r for r in caplog.records if r.name == "memini"]) == reports
    with Store.open(tmp_path / "s") as s:  # durable: still there after a reopen
        assert done(s)


def test_failing_metrics_do_not_fail_refresh_active_counts(tmp_path: Path) -> None:
    broken = _Broken()
    with Store.open(tmp_path / "s", dims=4, metrics=broken) as s:  # type: ignore[arg-type]
        assert s.refresh_active_counts() is None
        assert s.stats()["metrics_errors"] == broken.calls >= 1
