"""A hypothesis state machine drives one Store against a brute-force model written from API.md.

The model is a dict of rows; every rule applies the same operation to the store and to the
model and compares what comes back. Vector search over a handful of rows is exact, so ids and
scores are compared; keyword search is compared as the set of matching ids when k covers them
(BM25 scores are not modelled). Every timestamp the store would stamp from the wall clock is
passed explicitly, except ``set_superseded``'s ``valid_to`` (it takes no ``now``), which is
read back and checked against the wall-clock window of the call.
"""

from __future__ import annotations

import copy
import math
import shutil
import tempfile
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from memini import (
    ConflictError,
    Filter,
    InvalidArgumentError,
    Level,
    Memory,
    NotFoundError,
    Sort,
    SortKey,
    Store,
    Tier,
)

DIMS = 4
IDS = [f"m{i}" for i in range(6)]
NSS = ["alpha", "beta"]
T0 = datetime(2024, 1, 1, tzinfo=UTC)
WORDS = ["apple", "river", "stone", "cloud", "tiger", "maple"]  # distinct stems
TAGS = ["red", "blue", "green"]  # disjoint from WORDS: tags never decide a keyword match
MEMORY_FIELDS = [f.name for f in fields(Memory) if f.name != "embedding"]

times = st.integers(0, 12).map(lambda h: T0 + timedelta(hours=h))
opt_times = st.none() | times
ids = st.sampled_from(IDS)
nss = st.sampled_from(NSS)
tiers = st.sampled_from(list(Tier))
levels = st.sampled_from([None, Level.EXPLICIT, Level.DEDUCED])
contents = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)
summaries = st.just("") | st.sampled_from(WORDS)
tag_lists = st.lists(st.sampled_from(TAGS), unique=True, max_size=3)
metadatas = st.fixed_dictionaries(
    {},
    optional={
        "k": st.sampled_from(["x", "y"]),
        "memory_type": st.sampled_from(["decision", "fact"]),
        "n": st.just(1),
    },
)
importances = st.sampled_from([0.0, 0.25, 0.5, 1.0])
confidences = st.none() | st.sampled_from([0.3, 0.8])
embeddings = st.none() | st.integers(0, 10_000).map(
    lambda seed: np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
)


@st.composite
def memories(draw: st.DrawFn, id: str | None = None, ns: str | None = None) -> Memory:
    return Memory(
        id=draw(ids) if id is None else id,
        namespace=draw(nss) if ns is None else ns,
        content=draw(contents),
        tier=draw(tiers),
        level=draw(levels),
        summary=draw(summaries),
        metadata=draw(metadatas),
        tags=draw(tag_lists),
        importance=draw(importances),
        created_at=draw(times),
        updated_at=draw(times),
        last_accessed_at=draw(times),
        access_count=draw(st.integers(0, 3)),
        expires_at=draw(opt_times),
        superseded_by=draw(st.none() | st.just("m9")),
        valid_from=draw(opt_times),
        valid_to=draw(opt_times),
        confidence=draw(confidences),
        linked_memory_ids=draw(st.lists(ids, max_size=2)),
        embedding=draw(embeddings),
    )


update_fields = st.fixed_dictionaries(
    {"updated_at": times},
    optional={
        "content": contents,
        "summary": summaries,
        "tags": tag_lists,
        "importance": importances,
        "tier": tiers,
        "level": levels,
        "metadata": metadatas,
        "expires_at": opt_times,
        "superseded_by": st.none() | st.just("m8"),
        "valid_from": opt_times,
        "valid_to": opt_times,
        "confidence": confidences,
        "access_count": st.integers(0, 5),
        "last_accessed_at": times,
        "embedding": embeddings,
    },
)


@st.composite
def filters(draw: st.DrawFn) -> Filter:
    return Filter(
        tiers=draw(st.lists(tiers, unique=True, max_size=2)),
        levels=draw(st.lists(levels, unique=True, max_size=2)),
        tags=draw(st.lists(st.sampled_from(TAGS), unique=True, max_size=2)),
        metadata=draw(st.sampled_from([{}, {}, {"k": "x"}, {"n": "1"}, {"memory_type": "fact"}])),
        exclude_metadata=draw(st.sampled_from([{}, {}, {"k": "y"}, {"k": "x", "n": "1"}])),
        exclude_ids=draw(st.lists(ids, unique=True, max_size=2)),
        include_expired=draw(st.booleans()),
        include_superseded=draw(st.booleans()),
        now=draw(st.none() | times),
        as_of=draw(st.none() | st.none() | times),
        memory_types=draw(st.sampled_from([(), (), ("decision",), ("decision", "fact")])),
        created_after=draw(st.none() | st.none() | times),
        accessed_after=draw(st.none() | st.none() | times),
        sort=Sort(draw(st.sampled_from(list(SortKey))), draw(st.booleans())),
    )


def same(got: Memory, want: Memory) -> None:
    """Assert equality field by field, naming the fields that differ."""
    diff = {
        k: (getattr(got, k), getattr(want, k))
        for k in MEMORY_FIELDS
        if getattr(got, k) != getattr(want, k)
        or type(getattr(got, k)) is not type(getattr(want, k))
    }
    assert not diff, f"{want.id}: (got, want) differ: {diff}"
    assert got.embedding is None


def words(text: str) -> set[str]:
    return set(text.split())


def l2_score(q: np.ndarray, v: np.ndarray) -> float:
    d = q.astype(np.float64) - v.astype(np.float64)
    return float(1.0 / (1.0 + math.sqrt(float((d * d).sum()))))


class StoreModel(RuleBasedStateMachine):
    """One store, one model; ``ON_DISK`` decides whether close+reopen is exercised."""

    ON_DISK = True

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="memini-sm-") if self.ON_DISK else None
        self.path = None if self.tmp is None else Path(self.tmp) / "store"
        self.store = Store.open(self.path, dims=DIMS)
        self.rows: dict[str, dict[str, Any]] = {}  # id -> Memory fields + "emb"

    def teardown(self) -> None:
        self.store.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------------ model helpers

    def row_in(self, ns: str, id: str) -> dict[str, Any] | None:
        r = self.rows.get(id)
        return r if r is not None and r["namespace"] == ns else None

    def expected(self, r: dict[str, Any]) -> Memory:
        return Memory(**{k: copy.deepcopy(r[k]) for k in MEMORY_FIELDS})

    @staticmethod
    def model_upsert(rows: dict[str, dict[str, Any]], m: Memory) -> None:
        old = rows.get(m.id)
        if old is not None and old["namespace"] != m.namespace:
            raise ConflictError(m.id)
        r = {k: copy.deepcopy(getattr(m, k)) for k in MEMORY_FIELDS}
        r["tier"] = Tier(r["tier"])
        if old is not None:
            r["created_at"] = old["created_at"]
        emb = m.embedding
        r["emb"] = None if emb is None or len(emb) == 0 else np.asarray(emb, np.float32)
        rows[m.id] = r

    def matches(self, r: dict[str, Any], ns: str, f: Filter | None, wall: datetime) -> bool:
        if r["namespace"] != ns:
            return False
        f = f or Filter()
        ref = f.as_of or f.now or wall
        md = r["metadata"]
        if f.tiers and r["tier"] not in f.tiers:
            return False
        if f.levels and r["level"] not in f.levels:
            return False
        if any(t not in r["tags"] for t in f.tags):
            return False
        if any(md.get(k) != v for k, v in f.metadata.items()):
            return False
        if any(md.get(k) == v for k, v in f.exclude_metadata.items()):
            return False
        if r["id"] in f.exclude_ids:
            return False
        if f.memory_types and md.get("memory_type") not in f.memory_types:
            return False
        if f.created_after is not None and r["created_at"] < f.created_after:
            return False
        if f.accessed_after is not None and r["last_accessed_at"] < f.accessed_after:
            return False
        if not f.include_expired and r["expires_at"] is not None and r["expires_at"] <= ref:
            return False
        if f.as_of is not None:
            if r["valid_from"] is not None and r["valid_from"] > f.as_of:
                return False
            if r["valid_to"] is not None and r["valid_to"] <= f.as_of:
                return False
        elif not f.include_superseded:
            if r["superseded_by"] is not None:
                return False
            if r["valid_to"] is not None and r["valid_to"] <= ref:
                return False
        return True

    def matching(self, ns: str, f: Filter | None) -> list[dict[str, Any]]:
        wall = datetime.now(UTC)
        return [r for r in self.rows.values() if self.matches(r, ns, f, wall)]

    # ------------------------------------------------------------------ writes

    @rule(m=memories())
    def upsert(self, m: Memory) -> None:
        old = self.rows.get(m.id)
        if old is not None and old["namespace"] != m.namespace:
            before = self.store.get(old["namespace"], m.id)
            try:
                self.store.upsert(m)
            except ConflictError as e:
                assert old["namespace"] not in str(e)
            else:
                raise AssertionError("upsert across namespaces did not raise ConflictError")
            same(self.store.get(old["namespace"], m.id), before)
            return
        self.store.upsert(m)
        self.model_upsert(self.rows, m)
        same(self.store.get(m.namespace, m.id), self.expected(self.rows[m.id]))

    @rule(batch=st.lists(memories(), min_size=1, max_size=4))
    def upsert_many(self, batch: list[Memory]) -> None:
        trial = copy.deepcopy(self.rows)
        try:
            for m in batch:
                self.model_upsert(trial, m)
        except ConflictError:
            with_conflict = True
        else:
            with_conflict = False
        if with_conflict:
            try:
                self.store.upsert_many(batch)
            except ConflictError:
                pass
            else:
                raise AssertionError("batch with a cross-namespace id did not raise")
        else:
            assert self.store.upsert_many(batch) == len(batch)
            self.rows = trial
        for m in batch:
            self.check_get(m.namespace, m.id)

    @rule(ns=nss, id=ids, upd=update_fields)
    def update(self, ns: str, id: str, upd: dict[str, Any]) -> None:
        r = self.row_in(ns, id)
        if r is None:
            try:
                self.store.update(ns, id, **upd)
            except NotFoundError:
                return
            raise AssertionError("update of an absent row did not raise NotFoundError")
        got = self.store.update(ns, id, **upd)
        for k, v in upd.items():
            if k == "embedding":
                r["emb"] = v
            else:
                r[k] = copy.deepcopy(v)
        same(got, self.expected(r))

    @rule(ns=nss, id=ids)
    def delete(self, ns: str, id: str) -> None:
        if self.row_in(ns, id) is None:
            try:
                self.store.delete(ns, id)
            except NotFoundError:
                return
            raise AssertionError("delete of an absent row did not raise NotFoundError")
        self.store.delete(ns, id)
        del self.rows[id]

    @rule(ns=nss, id=ids, by=ids)
    def set_superseded(self, ns: str, id: str, by: str) -> None:
        r = self.row_in(ns, id)
        if by == id:  # a memory cannot supersede itself: refused before anything is read
            with pytest.raises(InvalidArgumentError, match="superseded by itself"):
                self.store.set_superseded(ns, id, by)
            return
        if r is None:
            try:
                self.store.set_superseded(ns, id, by)
            except NotFoundError:
                return
            raise AssertionError("set_superseded of an absent row did not raise")
        before = datetime.now(UTC) - timedelta(milliseconds=2)
        self.store.set_superseded(ns, id, by)
        after = datetime.now(UTC) + timedelta(milliseconds=2)
        r["superseded_by"] = by
        if r["valid_to"] is None:
            got = self.store.get(ns, id).valid_to
            assert got is not None and before <= got <= after, got
            r["valid_to"] = got

    @rule(ns=nss, id=ids)
    def restore(self, ns: str, id: str) -> None:
        r = self.row_in(ns, id)
        if r is None:
            try:
                self.store.restore(ns, id)
            except NotFoundError:
                return
            raise AssertionError("restore of an absent row did not raise")
        self.store.restore(ns, id)
        r["superseded_by"] = None
        r["valid_to"] = None

    # unique ids: a repeated id is test_reinforce_repeated_id_counts_one_access's subject
    @rule(ns=nss, some=st.lists(ids, unique=True, max_size=3), at=times, new_expiry=opt_times)
    def reinforce(
        self, ns: str, some: list[str], at: datetime, new_expiry: datetime | None
    ) -> None:
        self.store.reinforce(ns, some, at, new_expiry)
        for id in some:
            r = self.row_in(ns, id)
            if r is None:
                continue
            r["access_count"] += 1
            r["last_accessed_at"] = at
            if new_expiry is not None and r["expires_at"] is not None:
                r["expires_at"] = new_expiry

    @rule(src=nss, some=st.lists(ids, max_size=3), dst=nss)
    def reassign(self, src: str, some: list[str], dst: str) -> None:
        n = self.store.reassign(src, some, dst)
        moved = 0
        if src != dst:
            for id in dict.fromkeys(some):
                r = self.row_in(src, id)
                if r is not None:
                    r["namespace"] = dst
                    moved += 1
        assert n == moved

    @rule(ns=nss, id=ids, tier=tiers, expires_at=opt_times)
    def retier(self, ns: str, id: str, tier: Tier, expires_at: datetime | None) -> None:
        r = self.row_in(ns, id)
        if r is None:
            try:
                self.store.retier(ns, id, tier, expires_at)
            except NotFoundError:
                return
            raise AssertionError("retier of an absent row did not raise")
        self.store.retier(ns, id, tier, expires_at)
        r["tier"] = tier
        r["expires_at"] = expires_at

    @rule(ns=nss, id=ids, by=ids, conf=st.sampled_from([0.1, 0.6]), now=times)
    def mark_contradicted(self, ns: str, id: str, by: str, conf: float, now: datetime) -> None:
        r = self.row_in(ns, id)
        if r is None:
            try:
                self.store.mark_contradicted(ns, id, by, conf, now)
            except NotFoundError:
                return
            raise AssertionError("mark_contradicted of an absent row did not raise")
        self.store.mark_contradicted(ns, id, by, conf, now)
        r["metadata"] = {
            **r["metadata"],
            "contradicted_by": by,
            "contradicted_prev_confidence": r["confidence"],
        }
        r["confidence"] = conf
        if r["valid_to"] is None:
            r["valid_to"] = now
        r["updated_at"] = now

    @rule(ns=nss, id=ids, conf=st.sampled_from([0.2, 0.9]), now=times)
    def set_confidence(self, ns: str, id: str, conf: float, now: datetime) -> None:
        r = self.row_in(ns, id)
        if r is None or (r["valid_to"] is not None and r["valid_to"] <= now):
            try:
                self.store.set_confidence(ns, id, conf, now)
            except NotFoundError:
                return
            raise AssertionError("set_confidence of an absent/ended row did not raise")
        self.store.set_confidence(ns, id, conf, now)
        r["confidence"] = conf
        r["updated_at"] = now

    @rule(now=times)
    def sweep_expired(self, now: datetime) -> None:
        gone = [i for i, r in self.rows.items() if r["expires_at"] is not None]
        gone = [i for i in gone if self.rows[i]["expires_at"] <= now]
        listed = self.store.list_expired(now, 0)
        assert sorted(m.id for m in listed) == sorted(gone)
        assert self.store.sweep_expired(now) == len(gone)
        for i in gone:
            del self.rows[i]

    @rule()
    def compact(self) -> None:
        self.store.compact()

    @precondition(lambda self: self.ON_DISK)
    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = Store.open(self.path)

    # ------------------------------------------------------------------ reads

    def check_get(self, ns: str, id: str) -> None:
        r = self.row_in(ns, id)
        if r is None:
            try:
                self.store.get(ns, id)
            except NotFoundError:
                return
            raise AssertionError(f"get({ns}, {id}) of an absent row did not raise")
        same(self.store.get(ns, id), self.expected(r))
        emb = self.store.get_embedding(ns, id)
        if r["emb"] is None:
            assert emb is None
        else:
            assert emb is not None and emb.dtype == np.float32
            assert emb.tobytes() == r["emb"].tobytes()

    @rule(ns=nss, id=ids)
    def get(self, ns: str, id: str) -> None:
        self.check_get(ns, id)

    @rule(ns=nss, id=ids)
    def predecessors(self, ns: str, id: str) -> None:
        want = sorted(
            r["id"] for r in self.rows.values() if r["namespace"] == ns and r["superseded_by"] == id
        )
        assert sorted(self.store.predecessor_ids(ns, id)) == want

    @rule(
        ns=nss,
        f=st.none() | filters(),
        k=st.integers(1, 8),
        seed=st.integers(0, 10_000),
        own=st.none() | ids,
    )
    def vector_search(self, ns: str, f: Filter | None, k: int, seed: int, own: str | None) -> None:
        r = self.rows.get(own) if own is not None else None
        if r is not None and r["emb"] is not None:
            q = r["emb"]
        else:
            q = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
        hits = self.store.vector_search(ns, q, f, k)
        cands = [r for r in self.matching(ns, f) if r["emb"] is not None]
        score = {r["id"]: l2_score(q, r["emb"]) for r in cands}
        assert len(hits) == min(k, len(cands)), (len(hits), k, sorted(score))
        got = [h.memory.id for h in hits]
        assert len(set(got)) == len(got)
        for h in hits:
            assert h.memory.id in score, f"{h.memory.id} should not match"
            assert math.isclose(h.score, score[h.memory.id], rel_tol=1e-12, abs_tol=1e-12)
            same(h.memory, self.expected(self.rows[h.memory.id]))
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        if hits:
            left_out = [s for i, s in score.items() if i not in got]
            assert not left_out or max(left_out) <= min(scores) + 1e-12

    @rule(
        ns=nss,
        f=st.none() | filters(),
        k=st.integers(1, 8),
        query=st.lists(st.sampled_from([*WORDS, "zebra"]), min_size=1, max_size=2),
        syntax=st.sampled_from([" ", " OR ", ' "', " +", ":", " -", "*"]),
    )
    def keyword_search(
        self, ns: str, f: Filter | None, k: int, query: list[str], syntax: str
    ) -> None:
        q = syntax.join(query)
        hits = self.store.keyword_search(ns, q, f, k)
        qw = set(query) | ({"or"} if "OR" in syntax else set())
        want = {
            r["id"]
            for r in self.matching(ns, f)
            if (words(r["content"]) | words(r["summary"])) & qw
        }
        got = [h.memory.id for h in hits]
        assert len(set(got)) == len(got)
        assert all(h.score > 0 for h in hits)
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        if k >= len(want):
            assert set(got) == want, (q, sorted(got), sorted(want))
        else:
            assert len(got) == k and set(got) <= want, (q, sorted(got), sorted(want))

    @rule(
        ns=nss,
        f=st.none() | filters(),
        limit=st.integers(-1, 5),
        offset=st.integers(0, 3),
    )
    def list_and_count(self, ns: str, f: Filter | None, limit: int, offset: int) -> None:
        want = self.matching(ns, f)
        sort = (f or Filter()).sort
        want.sort(key=lambda r: r["id"])
        want.sort(key=lambda r: r[str(sort.key)], reverse=not sort.asc)
        want_ids = [r["id"] for r in want]
        end = None if limit <= 0 else offset + limit
        got = self.store.list(ns, f, limit, offset)
        assert [m.id for m in got] == want_ids[offset:end], (sort, [m.id for m in got])
        for m in got:
            same(m, self.expected(self.rows[m.id]))
        assert self.store.count(ns, f) == len(want_ids)

    @invariant()
    def namespaces_and_totals(self) -> None:
        assert self.store.list_namespaces() == sorted({r["namespace"] for r in self.rows.values()})
        everything = Filter(include_expired=True, include_superseded=True)
        for ns in NSS:
            n = sum(r["namespace"] == ns for r in self.rows.values())
            assert self.store.count(ns, everything) == n


class MemoryStoreModel(StoreModel):
    ON_DISK = False


TestStoreModelOnDisk = StoreModel.TestCase
TestStoreModelInMemory = MemoryStoreModel.TestCase


def test_reinforce_repeated_id_counts_one_access() -> None:
    """API.md: reinforce is one access of each listed row (``access_count += 1``); an id
    listed twice in one call is still one access (as the upstream ``WHERE id IN (...)``)."""
    with Store.open(None, dims=DIMS) as s:
        s.upsert(Memory(id="m0", namespace="alpha", content="apple"))
        s.reinforce("alpha", ["m0", "m0"], T0)
        assert s.get("alpha", "m0").access_count == 1
