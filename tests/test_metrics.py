"""Metrics (API.md section 5): the protocol, NullMetrics and PrometheusMetrics' series."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from memini.errors import InvalidArgumentError
from memini.metrics import METRIC_NAMES, Metrics, NullMetrics, PrometheusMetrics
from memini.types import Tier


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


def test_null_metrics_accepts_every_call() -> None:
    m = NullMetrics()
    m.upsert("insert", Tier.SEMANTIC, "")
    m.delete()
    m.soft_delete()
    m.sweep_expired(Tier.WORKING)
    m.active_by_tier(Tier.EPISODIC, 3)
    m.dedup_tombstoned(2)


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
