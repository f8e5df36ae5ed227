"""Domain types, helpers, ranking formulas and the Python <-> core conversions.

Needs no compiled core: only `memini.types`, `memini.errors`, `memini._values` and
`memini._convert`, but for a few round trips through a store.
"""

from __future__ import annotations

import array
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, get_type_hints

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memini.types as types_mod
from memini import _convert as cv
from memini import _values as vals
from memini.errors import CorruptionError, DimensionMismatchError, InvalidArgumentError
from memini.types import (
    EventKind,
    Filter,
    Level,
    Memory,
    Sort,
    SortKey,
    Tier,
    fingerprint,
    grow_confidence,
    hash_api_key,
    new_id,
    normalize_content,
)

RUST_TYPES = Path(__file__).resolve().parents[1] / "rust" / "types.rs"
NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
WEEK = timedelta(weeks=1)
DIMS = 4


# ============================================================================================
# Enums
# ============================================================================================


@pytest.mark.parametrize(
    ("tier", "term", "ttl"),
    [
        pytest.param(Tier.WORKING, "short", timedelta(hours=72), id="working"),
        pytest.param(Tier.EPISODIC, "short", timedelta(days=30), id="episodic"),
        pytest.param(Tier.SEMANTIC, "long", None, id="semantic"),
        pytest.param(Tier.PROCEDURAL, "long", None, id="procedural"),
    ],
)
def test_tier_term_and_default_ttl(tier: Tier, term: str, ttl: timedelta | None) -> None:
    assert tier.term == term
    assert tier.default_ttl == ttl


@pytest.mark.parametrize(
    ("member", "value"),
    [
        pytest.param(Tier.WORKING, "working", id="tier-working"),
        pytest.param(Tier.SEMANTIC, "semantic", id="tier-semantic"),
        pytest.param(Level.EXPLICIT, "explicit", id="level-explicit"),
        pytest.param(Level.DEDUCED, "deduced", id="level-deduced"),
        pytest.param(SortKey.LAST_ACCESSED_AT, "last_accessed_at", id="sortkey-last-accessed"),
        pytest.param(SortKey.ACCESS_COUNT, "access_count", id="sortkey-access-count"),
        pytest.param(EventKind.SUPERSEDE, "supersede", id="eventkind-supersede"),
        pytest.param(EventKind.INJECT, "inject", id="eventkind-inject"),
    ],
)
def test_str_enum_equals_its_value(member: Any, value: str) -> None:
    assert member == value
    assert value == member
    assert str(member) == value
    assert f"{member}" == value
    assert {value: 1}[member] == 1  # same hash as the string
    assert type(member)(value) is member


def test_enum_member_sets() -> None:
    assert [t.value for t in Tier] == ["working", "episodic", "semantic", "procedural"]
    assert [lv.value for lv in Level] == ["explicit", "deduced"]
    assert [k.value for k in SortKey] == [
        "created_at",
        "updated_at",
        "last_accessed_at",
        "access_count",
        "importance",
    ]
    assert len(EventKind) == 11


# ============================================================================================
# normalize_content / fingerprint / hash_api_key
# ============================================================================================


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param("  The user   likes COFFEE ", "the user likes coffee", id="ascii-collapse"),
        pytest.param("", "", id="empty"),
        pytest.param(" \t\n\r\v\f ", "", id="only-ascii-whitespace"),
        pytest.param("a\tb\nc\r\nd", "a b c d", id="tabs-newlines"),
        pytest.param("a\u00a0b", "a b", id="nbsp-splits"),
        pytest.param("a\u0085b", "a b", id="nel-splits"),
        pytest.param("a\u1680b", "a b", id="ogham-space-splits"),
        pytest.param("a\u2000\u200ab", "a b", id="en-quad-hair-space-split"),
        pytest.param("a\u2028b\u2029c", "a b c", id="line-paragraph-separators-split"),
        pytest.param("a\u202fb\u205fc\u3000d", "a b c d", id="narrow-math-ideographic-split"),
        pytest.param("a\u200bb", "a\u200bb", id="zero-width-space-is-not-whitespace"),
        pytest.param("a\u180eb", "a\u180eb", id="mongolian-vowel-separator-is-not-whitespace"),
        pytest.param("A\x1cB", "a\x1cb", id="info-separator-is-not-whitespace"),
        pytest.param(
            " X\x1d\tY\x1e \x1f ", "x\x1d y\x1e \x1f", id="info-separators-kept-others-split"
        ),
        pytest.param("\u0130stanbul", "istanbul", id="dotted-capital-I-maps-to-i-alone"),
        pytest.param("\u0130", "i", id="dotted-capital-I-alone"),
        pytest.param(
            "\u039f\u0394\u039f\u03a3",  # ODOS in capitals
            "\u03bf\u03b4\u03bf\u03c3",  # small sigma at the end, not final sigma U+03C2
            id="word-final-sigma-is-not-final-form",
        ),
        pytest.param(
            "\u03a3\u0391\u03a3 \u03a3\u0391\u03a3",
            "\u03c3\u03b1\u03c3 \u03c3\u03b1\u03c3",
            id="sigma-everywhere-maps-to-small-sigma",
        ),
        pytest.param("\u03a3", "\u03c3", id="lone-capital-sigma"),
        pytest.param("\u03c2", "\u03c2", id="final-sigma-input-stays"),
        pytest.param("\u1e9e", "\u00df", id="capital-sharp-s"),
        pytest.param("\u01c4 \u01c5", "\u01c6 \u01c6", id="dz-digraph-upper-and-titlecase"),
        pytest.param("\u212a\u212b\u2126", "k\u00e5\u03c9", id="kelvin-angstrom-ohm-signs"),
        pytest.param("\U00010400", "\U00010428", id="deseret-astral"),
        pytest.param("Straße ÉTÉ", "straße été", id="latin1"),
        pytest.param("日本語 テキスト", "日本語 テキスト", id="uncased-cjk"),
        pytest.param("a\x00B", "a\x00b", id="nul-kept"),
    ],
)
def test_normalize_content(raw: str, want: str) -> None:
    assert normalize_content(raw) == want


@pytest.mark.parametrize(
    ("content", "match"),
    [
        pytest.param(
            "A\ud800B", r"^content contains a lone surrogate '\\ud800' at index 1", id="high"
        ),
        pytest.param("x\udfff", "at index 1", id="low-at-end"),
        pytest.param("\udc80" + " " * 3, "at index 0", id="escaped-byte-first"),
        pytest.param("😀 ok \ud83d", "at index 5", id="after-a-valid-pair"),
        pytest.param(b"bytes", "^content must be a str, got a bytes", id="bytes"),
        pytest.param(None, "^content must be a str", id="none"),
    ],
)
def test_normalize_content_and_fingerprint_refuse_the_same_content(
    content: Any, match: str
) -> None:
    """One rule: content a memory cannot hold (a lone surrogate) is refused by both helpers,
    exactly as upsert refuses it, never a UnicodeEncodeError or a hash of unstorable text."""
    with pytest.raises(InvalidArgumentError, match=match):
        normalize_content(content)
    with pytest.raises(InvalidArgumentError, match=match):
        fingerprint(content)
    if isinstance(content, str):
        with pytest.raises(InvalidArgumentError, match=match):
            cv.memory_to_row(full_memory(content=content), DIMS)


def _white_space() -> set[str]:
    # Unicode's White_Space property (PropList.txt), written out independently of the module.
    ranges = [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680)]
    ranges += [(0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F)]
    ranges += [(0x3000, 0x3000)]
    return {chr(c) for lo, hi in ranges for c in range(lo, hi + 1)}


def _known(c: str) -> bool:
    """Whether ``c`` is assigned in Python's Unicode tables, the oracle here: the rule runs
    in the core, whose tables may be newer (a code point this Python does not know yet is
    lowered as the newer version says)."""
    return unicodedata.category(c) != "Cn"


def _all_non_space_code_points() -> list[str]:
    ws = _white_space()
    return [
        chr(cp)
        for cp in range(0x110000)
        if not 0xD800 <= cp <= 0xDFFF and chr(cp) not in ws and _known(chr(cp))
    ]


def test_normalize_content_maps_every_code_point_to_one_code_point() -> None:
    chars = _all_non_space_code_points()
    # Joined by spaces, every capital sigma is word-final: the context str.lower() would use.
    words = normalize_content(" ".join(chars)).split(" ")
    assert len(words) == len(chars)
    for c, w in zip(chars, words, strict=True):
        assert len(w) == 1, (hex(ord(c)), w)
        if c == "\u0130":
            assert w == "i"
        else:
            # For every other code point the full mapping of the char alone is the simple one.
            assert w == c.lower(), hex(ord(c))


def test_normalize_content_splits_exactly_on_unicode_white_space() -> None:
    ws = _white_space()
    chars = [chr(cp) for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and _known(chr(cp))]
    # "x" + c for every code point c: a word boundary exactly where c is White_Space.
    got = normalize_content("".join(f"x{c}" for c in chars) + "x")
    want, word = [], ["x"]
    for c in chars:
        if c in ws:
            want.append("".join(word))
            word = []
        else:
            word.append("i" if c == "\u0130" else c.lower())
        word.append("x")
    want.append("".join(word))
    assert got == " ".join(want)


_PERL_SIMPLE_LOWER = r"""
use Unicode::UCD qw(prop_invmap);
my ($list, $map, $format, $default) = prop_invmap("Simple_Lowercase_Mapping");
print Unicode::UCD::UnicodeVersion(), "\n";
for my $i (0..$#$list) {
  my $m = $map->[$i];
  next if $m eq $default || $m eq "0";
  my $end = $i < $#$list ? $list->[$i+1] - 1 : 0x10FFFF;
  for my $cp ($list->[$i]..$end) {
    my $v = $format =~ /a/ ? $m + ($cp - $list->[$i]) : $m;
    printf("%X %X\n", $cp, $v) if $v != $cp;
  }
}
"""


@pytest.mark.skipif(shutil.which("perl") is None, reason="perl (Unicode::UCD oracle) missing")
def test_normalize_content_matches_unicode_simple_lowercase_oracle() -> None:
    """Perl's Unicode::UCD gives the UnicodeData.txt simple mapping: an independent oracle."""
    proc = subprocess.run(
        ["perl", "-e", _PERL_SIMPLE_LOWER], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        pytest.skip(f"perl Unicode::UCD unavailable: {proc.stderr.strip()[:200]}")
    version, *lines = proc.stdout.splitlines()
    if version != unicodedata.unidata_version:
        pytest.skip(f"perl has Unicode {version}, Python {unicodedata.unidata_version}")
    simple = {int(a, 16): int(b, 16) for a, b in (ln.split() for ln in lines)}
    chars = _all_non_space_code_points()
    want = " ".join(chr(simple.get(ord(c), ord(c))) for c in chars)
    assert normalize_content(" ".join(chars)) == want


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=["Cs"])))
def test_normalize_content_is_per_code_point_and_idempotent(s: str) -> None:
    ws = _white_space()
    out = normalize_content(s)
    assert normalize_content(out) == out
    assert out[:1] not in ws and out[-1:] not in ws
    assert "  " not in out
    words = [w for w in re.split("[" + re.escape("".join(sorted(ws))) + "]+", s) if w]
    assert out == " ".join("".join(normalize_content(c) for c in w) for w in words)


@pytest.mark.parametrize(
    ("content", "want"),
    [
        pytest.param(
            "  The user   likes COFFEE ",
            "d24add2f99bb999edcf69338f901d8b691c709789bd93e0d4bf033d02a1ce3c5",
            id="contract-vector",
        ),
        pytest.param(
            "the user likes coffee",
            "d24add2f99bb999edcf69338f901d8b691c709789bd93e0d4bf033d02a1ce3c5",
            id="already-normal",
        ),
        pytest.param(
            "THE\u3000USER\tLIKES\n\ncoffee",
            "d24add2f99bb999edcf69338f901d8b691c709789bd93e0d4bf033d02a1ce3c5",
            id="unicode-whitespace-and-case",
        ),
        pytest.param(
            "",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            id="empty-is-sha256-of-nothing",
        ),
    ],
)
def test_fingerprint(content: str, want: str) -> None:
    assert fingerprint(content) == want


def test_fingerprint_distinguishes_content_and_is_lower_hex() -> None:
    a, b = fingerprint("the user likes coffee"), fingerprint("the user likes tea")
    assert a != b
    assert re.fullmatch("[0-9a-f]{64}", b)
    assert fingerprint("\u0130") == fingerprint("i") != fingerprint("i\u0307")
    assert fingerprint("x\U0001f600") == hashlib.sha256("x\U0001f600".encode()).hexdigest()


@pytest.mark.parametrize(
    ("secret", "want"),
    [
        pytest.param(
            "abc",
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            id="fips-180-abc",
        ),
        pytest.param(
            "",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            id="empty",
        ),
        pytest.param("clé", hashlib.sha256("clé".encode()).hexdigest(), id="utf8-not-normalised"),
    ],
)
def test_hash_api_key(secret: str, want: str) -> None:
    assert hash_api_key(secret) == want


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda: normalize_content(b"abc"), id="normalize-bytes"),  # type: ignore[arg-type]
        pytest.param(lambda: fingerprint(None), id="fingerprint-none"),  # type: ignore[arg-type]
        pytest.param(lambda: hash_api_key(123), id="hash-int"),  # type: ignore[arg-type]
    ],
)
def test_text_helpers_reject_non_str(call: Callable[[], object]) -> None:
    with pytest.raises(InvalidArgumentError, match="must be a str"):
        call()


@pytest.mark.parametrize(
    ("c", "want"),
    [
        pytest.param(0.0, 0.1, id="from-zero"),
        pytest.param(0.4, 0.46, id="seed"),
        pytest.param(0.9, 0.91, id="near-one"),
        pytest.param(1.0, 1.0, id="at-one"),
        pytest.param(-1.0, 0.0, id="negative-clamps-to-zero"),
        pytest.param(2.0, 1.0, id="above-one-clamps"),
    ],
)
def test_grow_confidence(c: float, want: float) -> None:
    assert grow_confidence(c) == pytest.approx(want, abs=1e-15)


def test_grow_confidence_increases_toward_one() -> None:
    c = 0.25
    for _ in range(200):
        nxt = grow_confidence(c)
        assert c <= nxt <= 1.0
        c = nxt
    assert c > 0.999


# ============================================================================================
# new_id
# ============================================================================================

_ULID = re.compile("[0-7][0-9A-HJKMNP-TV-Z]{25}")
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _id_millis(ident: str) -> int:
    """The Unix milliseconds in a ULID's first 10 characters."""
    return sum(_CROCKFORD.index(c) << (5 * (9 - i)) for i, c in enumerate(ident[:10]))


def test_new_id_format_and_timestamp() -> None:
    before = time.time_ns() // 1_000_000
    ident = new_id()
    after = time.time_ns() // 1_000_000
    assert _ULID.fullmatch(ident), ident
    assert before <= _id_millis(ident) <= after


def test_new_id_sorts_by_creation_within_one_millisecond() -> None:
    ids = [new_id() for _ in range(20_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(
    "clock",
    [
        pytest.param([5_000] * 50, id="frozen-clock"),
        pytest.param([5_000 - i for i in range(50)], id="clock-steps-back"),
        pytest.param([5_000 + (i % 3) - 1 for i in range(50)], id="jittering-clock"),
    ],
)
def test_new_id_monotonic_under_odd_clocks(
    monkeypatch: pytest.MonkeyPatch, clock: list[int]
) -> None:
    monkeypatch.setattr(types_mod._ids, "ms", -1)
    ticks = iter(clock)
    monkeypatch.setattr(types_mod, "_now_ms", lambda: next(ticks))
    ids = [new_id() for _ in clock]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert _id_millis(ids[0]) == clock[0]
    assert _id_millis(ids[-1]) == max(clock)


def test_new_id_random_overflow_borrows_next_millisecond(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(types_mod, "_now_ms", lambda: 7_000)
    monkeypatch.setattr(types_mod._ids, "ms", 7_000)
    monkeypatch.setattr(types_mod._ids, "rand", (1 << 80) - 2)
    a, b, c = new_id(), new_id(), new_id()
    assert a < b < c
    assert (_id_millis(a), _id_millis(b), _id_millis(c)) == (7_000, 7_001, 7_001)
    assert a.endswith("Z" * 16)


def test_new_id_unique_and_ordered_per_thread_across_threads() -> None:
    per_thread: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(len(per_thread))

    def work(out: list[str]) -> None:
        start.wait()
        out.extend(new_id() for _ in range(3_000))

    threads = [threading.Thread(target=work, args=(out,)) for out in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [i for out in per_thread for i in out]
    assert len(set(everything)) == len(everything) == 8 * 3_000
    for out in per_thread:
        assert out == sorted(out)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_new_id_forked_child_never_repeats_parent() -> None:
    before = new_id()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report two ids and leave without running pytest's teardown
        try:
            os.write(w, (new_id() + new_id()).encode())
        finally:
            os._exit(0)
    os.close(w)
    parent = [new_id() for _ in range(1_000)]
    with os.fdopen(r, "rb") as f:
        data = f.read().decode()
    os.waitpid(pid, 0)
    child = [data[:26], data[26:]]
    assert before < child[0] < child[1]
    assert not set(child) & set(parent)


# ============================================================================================
# Ranking helpers on Memory
# ============================================================================================


def mem(
    tier: Tier | str = Tier.SEMANTIC,
    importance: float = 0.5,
    *,
    confidence: float | None = None,
    updated_ago: timedelta | None = timedelta(0),
    accessed_ago: timedelta | None = timedelta(0),
    access_count: int = 0,
    expires_in: timedelta | None = None,
) -> Memory:
    return Memory(
        id="m",
        namespace="ns",
        content="c",
        tier=tier,  # type: ignore[arg-type]  # strings are accepted too
        importance=importance,
        confidence=confidence,
        updated_at=None if updated_ago is None else NOW - updated_ago,
        last_accessed_at=None if accessed_ago is None else NOW - accessed_ago,
        access_count=access_count,
        expires_at=None if expires_in is None else NOW + expires_in,
    )


@pytest.mark.parametrize(
    ("m", "now", "want"),
    [
        pytest.param(mem(), NOW, False, id="no-expiry"),
        pytest.param(mem(expires_in=-timedelta(seconds=1)), NOW, True, id="past"),
        pytest.param(mem(expires_in=timedelta(0)), NOW, True, id="exactly-now-is-expired"),
        pytest.param(mem(expires_in=timedelta(microseconds=1)), NOW, False, id="future"),
        pytest.param(
            mem(expires_in=timedelta(0)), NOW.replace(tzinfo=None), True, id="naive-now-is-utc"
        ),
        pytest.param(
            mem(expires_in=timedelta(0)),
            NOW.astimezone(timezone(timedelta(hours=-5))),
            True,
            id="aware-now-other-zone",
        ),
        pytest.param(
            Memory("m", "ns", "c", expires_at=datetime(2026, 1, 15, 12, 0)),
            NOW - timedelta(microseconds=1),
            False,
            id="naive-expiry-vs-aware-now",
        ),
    ],
)
def test_expired(m: Memory, now: datetime, want: bool) -> None:
    assert m.expired(now) is want


@pytest.mark.parametrize(
    ("tier", "importance", "want"),
    [
        pytest.param(Tier.PROCEDURAL, 1.0, 0.95, id="procedural-full"),
        pytest.param(Tier.SEMANTIC, 1.0, 0.90, id="semantic-full"),
        pytest.param(Tier.EPISODIC, 1.0, 0.55, id="episodic-full"),
        pytest.param(Tier.WORKING, 1.0, 0.30, id="working-full"),
        pytest.param(Tier.SEMANTIC, 0.0, 0.45, id="semantic-zero-is-half-weight"),
        pytest.param(Tier.WORKING, 0.5, 0.225, id="working-half"),  # 0.30 * 0.75
        pytest.param(Tier.EPISODIC, -3.0, 0.275, id="negative-importance-clamps"),
        pytest.param(Tier.PROCEDURAL, 7.0, 0.95, id="importance-above-one-clamps"),
        pytest.param("semantic", 0.2, 0.54, id="tier-as-string"),  # 0.90 * 0.6
    ],
)
def test_salience(tier: Tier | str, importance: float, want: float) -> None:
    assert mem(tier, importance).salience() == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(
    ("m", "want"),
    [
        pytest.param(
            mem(Tier.WORKING, confidence=0.2, updated_ago=10 * WEEK, accessed_ago=10 * WEEK),
            1.0,
            id="short-term-is-neutral",
        ),
        pytest.param(
            mem(Tier.EPISODIC, confidence=0.2, updated_ago=10 * WEEK), 1.0, id="episodic-neutral"
        ),
        pytest.param(
            mem(confidence=None, updated_ago=10 * WEEK, accessed_ago=10 * WEEK),
            1.0,
            id="untracked-is-neutral",
        ),
        pytest.param(
            mem(confidence=0.8, updated_ago=3 * DAY, accessed_ago=3 * DAY), 0.8, id="grace-week"
        ),
        pytest.param(
            mem(confidence=0.8, updated_ago=WEEK, accessed_ago=WEEK), 0.8, id="exactly-one-week"
        ),
        pytest.param(
            mem(confidence=0.8, updated_ago=10 * DAY, accessed_ago=10 * DAY),
            0.8 - 0.05 * 3 / 7,
            id="ten-days-continuous",
        ),
        pytest.param(
            mem(confidence=0.8, updated_ago=3 * WEEK, accessed_ago=3 * WEEK),
            0.7,
            id="three-weeks",
        ),
        pytest.param(
            mem(Tier.PROCEDURAL, confidence=0.3, updated_ago=20 * WEEK, accessed_ago=20 * WEEK),
            0.05,
            id="floor",
        ),
        pytest.param(
            mem(confidence=0.03, updated_ago=2 * DAY, accessed_ago=2 * DAY),
            0.03,
            id="below-floor-inside-grace-unchanged",
        ),
        pytest.param(
            mem(confidence=0.03, updated_ago=3 * WEEK, accessed_ago=3 * WEEK),
            0.05,
            id="below-floor-after-grace-is-floor",
        ),
        pytest.param(
            mem(confidence=1.5, updated_ago=2 * WEEK, accessed_ago=2 * WEEK),
            0.95,
            id="clamped-before-decay",
        ),
        pytest.param(mem(confidence=-0.5), 0.0, id="negative-clamps"),
        pytest.param(
            mem(confidence=0.8, updated_ago=10 * WEEK, accessed_ago=2 * DAY),
            0.8,
            id="recent-access-anchors",
        ),
        pytest.param(
            mem(confidence=0.8, updated_ago=2 * DAY, accessed_ago=10 * WEEK),
            0.8,
            id="recent-update-anchors",
        ),
        pytest.param(
            mem(confidence=0.8, updated_ago=3 * WEEK, accessed_ago=None),
            0.7,
            id="only-updated-at-set",
        ),
        pytest.param(
            mem(confidence=0.8, updated_ago=None, accessed_ago=None),
            0.8,
            id="never-stamped-no-decay",
        ),
        pytest.param(
            mem(confidence=0.8, updated_ago=-WEEK * 5, accessed_ago=-WEEK * 5),
            0.8,
            id="anchor-in-future",
        ),
    ],
)
def test_effective_confidence(m: Memory, want: float) -> None:
    assert m.effective_confidence(NOW) == pytest.approx(want, rel=1e-12)


def test_effective_confidence_continuous_at_grace_boundary() -> None:
    hour = timedelta(hours=1)
    m = mem(confidence=0.5, updated_ago=WEEK + hour, accessed_ago=WEEK + hour)
    assert m.effective_confidence(NOW) == pytest.approx(0.5 - 0.05 / 168, rel=1e-12)


@pytest.mark.parametrize(
    ("m", "want"),
    [
        pytest.param(mem(Tier.SEMANTIC, 0.5), 0.675, id="semantic-no-access"),
        pytest.param(
            mem(Tier.SEMANTIC, 0.5, access_count=3),
            0.675 * (1 + math.log(4)),  # 1.6107486937559263
            id="semantic-three-accesses",
        ),
        pytest.param(
            mem(
                Tier.SEMANTIC,
                1.0,
                confidence=0.8,
                updated_ago=3 * WEEK,
                accessed_ago=3 * WEEK,
                access_count=1,
            ),
            0.9 * 0.7 * (1 + math.log(2)),  # 1.0666827237527656
            id="semantic-decayed-confidence",
        ),
        pytest.param(
            mem(Tier.WORKING, 1.0, confidence=0.1, accessed_ago=20 * WEEK),
            0.3,
            id="working-ignores-confidence-and-age",
        ),
        pytest.param(
            mem(Tier.SEMANTIC, 0.5, access_count=-4), 0.675, id="negative-access-count-is-zero"
        ),
    ],
)
def test_durable_score(m: Memory, want: float) -> None:
    assert m.durable_score(NOW) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(
    ("m", "want"),
    [
        pytest.param(mem(Tier.WORKING, 1.0), 0.3, id="fresh-working"),
        pytest.param(
            mem(Tier.EPISODIC, 0.5, access_count=3, accessed_ago=7 * DAY),
            0.55 * 0.75 * (1 + math.log(4)) * math.exp(-1),  # 0.36212081236623167
            id="episodic-one-time-constant",
        ),
        pytest.param(
            mem(Tier.WORKING, 0.0, confidence=0.2, accessed_ago=14 * DAY),
            0.15 * math.exp(-2),
            id="working-confidence-ignored",
        ),
        pytest.param(
            mem(Tier.SEMANTIC, 0.5, accessed_ago=60 * DAY, updated_ago=60 * DAY),
            0.675,
            id="stale-semantic-no-recency-decay",
        ),
        pytest.param(
            mem(
                Tier.PROCEDURAL,
                1.0,
                confidence=0.8,
                accessed_ago=3 * WEEK,
                updated_ago=3 * WEEK,
                access_count=1,
            ),
            0.95 * 0.7 * (1 + math.log(2)),
            id="procedural-is-durable-score",
        ),
    ],
)
def test_quality(m: Memory, want: float) -> None:
    assert m.quality(NOW) == pytest.approx(want, rel=1e-12)
    if Tier(m.tier).term == "long":
        assert m.quality(NOW) == m.durable_score(NOW)


@pytest.mark.parametrize(
    ("accessed_ago", "want"),
    [
        pytest.param(timedelta(0), 1.0, id="now"),
        pytest.param(3.5 * DAY, math.exp(-0.5), id="half-time-constant"),
        pytest.param(7 * DAY, math.exp(-1), id="seven-days-is-1-over-e"),  # 0.36787944117144233
        pytest.param(14 * DAY, math.exp(-2), id="fourteen-days"),
        pytest.param(-timedelta(hours=1), 1.0, id="future-access-clamps-to-one"),
        pytest.param(None, 1.0, id="never-accessed-counts-as-now"),
    ],
)
def test_recency(accessed_ago: timedelta | None, want: float) -> None:
    m = mem(Tier.EPISODIC, accessed_ago=accessed_ago)
    assert m.recency(NOW) == pytest.approx(want, rel=1e-12)
    assert m.recency(NOW.replace(tzinfo=None)) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(
    "method",
    ["salience", "effective_confidence", "durable_score", "quality"],
)
def test_ranking_rejects_unknown_tier(method: str) -> None:
    m = mem("bogus")
    args = () if method == "salience" else (NOW,)
    with pytest.raises(InvalidArgumentError, match="tier must be a Tier or one of 'working'"):
        getattr(m, method)(*args)


# ============================================================================================
# Datetimes <-> micros
# ============================================================================================

PLUS_0530 = timezone(timedelta(hours=5, minutes=30))
MINUS_05 = timezone(timedelta(hours=-5))


@pytest.mark.parametrize(
    ("dt", "us"),
    [
        pytest.param(datetime(1970, 1, 1), 0, id="epoch-naive"),
        pytest.param(datetime(1970, 1, 1, tzinfo=UTC), 0, id="epoch-aware"),
        pytest.param(datetime(1970, 1, 1, 0, 0, 0, 1), 1, id="one-microsecond"),
        pytest.param(datetime(1969, 12, 31, 23, 59, 59, 999_999), -1, id="before-epoch"),
        pytest.param(datetime(2024, 2, 29, 12, 30), 1_709_209_800_000_000, id="leap-day-naive"),
        pytest.param(
            datetime(2024, 2, 29, 18, 0, tzinfo=PLUS_0530),
            1_709_209_800_000_000,
            id="leap-day-plus-0530",
        ),
        pytest.param(
            datetime(2024, 2, 29, 7, 30, tzinfo=MINUS_05),
            1_709_209_800_000_000,
            id="leap-day-minus-05",
        ),
        pytest.param(datetime(1, 1, 1), -62_135_596_800_000_000, id="year-1"),
        pytest.param(
            datetime(9999, 12, 31, 23, 59, 59, 999_999),
            253_402_300_799_999_999,
            id="year-9999",
        ),
        pytest.param(
            datetime(1, 1, 1, 0, 0, tzinfo=MINUS_05),
            -62_135_596_800_000_000 + 5 * 3_600_000_000,
            id="year-1-west-of-utc",
        ),
    ],
)
def test_to_micros_exact(dt: datetime, us: int) -> None:
    assert vals.to_micros(dt) == us
    back = vals.from_micros(us)
    assert back.tzinfo is UTC
    want = dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt
    assert back == want


@pytest.mark.parametrize(
    "dt",
    [
        pytest.param(datetime(1, 1, 1), id="year-1"),
        pytest.param(datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC), id="year-1-aware"),
        pytest.param(datetime(9999, 12, 31, 23, 59, 59, 999_999), id="year-9999"),
        pytest.param(datetime(2026, 3, 29, 1, 59, 59, 123_456), id="sub-millisecond"),
        pytest.param(datetime(2026, 7, 1, 9, tzinfo=PLUS_0530), id="aware-offset"),
    ],
)
def test_micros_round_trip(dt: datetime) -> None:
    back = vals.from_micros(vals.to_micros(dt))
    assert back == (dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt)
    assert back.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    ("dt", "match"),
    [
        pytest.param(
            datetime(1, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1))),
            "outside the representable range",
            id="aware-before-year-1-utc",
        ),
        pytest.param(
            datetime(9999, 12, 31, 23, 0, tzinfo=MINUS_05),
            "outside the representable range",
            id="aware-after-9999-utc",
        ),
        pytest.param("2024-01-01", "must be a datetime, got str", id="string"),
        pytest.param(1_700_000_000, "must be a datetime, got int", id="epoch-int"),
        pytest.param(datetime(2024, 1, 1).date(), "must be a datetime, got date", id="date"),
    ],
)
def test_to_micros_rejects(dt: Any, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        vals.to_micros(dt)


def test_opt_variants_and_from_micros_range() -> None:
    assert vals.opt_micros(None) is None
    assert vals.opt_micros(datetime(1970, 1, 1, 0, 0, 1)) == 1_000_000
    assert vals.from_micros(1_000_000) == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    with pytest.raises(InvalidArgumentError, match=r"^expires_at must be a datetime"):
        vals.opt_micros(3, "expires_at")  # type: ignore[arg-type]
    with pytest.raises(CorruptionError):
        vals.from_micros(253_402_300_800_000_000)
    with pytest.raises(CorruptionError):
        vals.from_micros(-62_135_596_800_000_001)


# ============================================================================================
# Enums at the boundary
# ============================================================================================


@pytest.mark.parametrize(
    ("cls", "value", "want"),
    [
        pytest.param(Tier, Tier.EPISODIC, Tier.EPISODIC, id="member"),
        pytest.param(Tier, "procedural", Tier.PROCEDURAL, id="string-value"),
        pytest.param(Level, "deduced", Level.DEDUCED, id="level-string"),
        pytest.param(SortKey, "importance", SortKey.IMPORTANCE, id="sortkey-string"),
        pytest.param(EventKind, "briefing", EventKind.BRIEFING, id="eventkind-string"),
    ],
)
def test_coerce_enum_accepts(cls: Any, value: object, want: object) -> None:
    assert vals.coerce_enum(cls, value, "x") is want


@pytest.mark.parametrize(
    ("cls", "value", "match"),
    [
        pytest.param(
            Tier,
            "bogus",
            "^tier must be a Tier or one of 'working', 'episodic', 'semantic', 'procedural'; "
            "got 'bogus'$",
            id="unknown-string-lists-allowed",
        ),
        pytest.param(Tier, "SEMANTIC", "got 'SEMANTIC'", id="case-sensitive"),
        pytest.param(Tier, "", "got ''", id="empty-string"),
        pytest.param(Tier, 2, "got int", id="int"),
        pytest.param(Tier, None, "got NoneType", id="none"),
        pytest.param(Tier, SortKey.IMPORTANCE, "got 'importance'", id="other-enum-member"),
        pytest.param(Level, "implicit", "'explicit', 'deduced'", id="unknown-level"),
    ],
)
def test_coerce_enum_rejects(cls: Any, value: object, match: str) -> None:
    what = "tier" if cls is Tier else "level"
    with pytest.raises(InvalidArgumentError, match=match):
        vals.coerce_enum(cls, value, what)


# ============================================================================================
# Vectors
# ============================================================================================


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param([1.0, 2.0, 3.0, 4.5], [1.0, 2.0, 3.0, 4.5], id="list-of-floats"),
        pytest.param((1, 2, 3, 4), [1.0, 2.0, 3.0, 4.0], id="tuple-of-ints"),
        pytest.param(array.array("f", [1, 2, 3, 4]), [1.0, 2.0, 3.0, 4.0], id="array-module"),
        pytest.param(np.arange(4, dtype=np.float64), [0.0, 1.0, 2.0, 3.0], id="float64-array"),
        pytest.param(np.arange(4, dtype=np.float16), [0.0, 1.0, 2.0, 3.0], id="float16-array"),
        pytest.param(np.arange(4, dtype=np.int32), [0.0, 1.0, 2.0, 3.0], id="int-array"),
        pytest.param(np.arange(4, dtype=">f4"), [0.0, 1.0, 2.0, 3.0], id="big-endian"),
        pytest.param(np.arange(8, dtype=np.float32)[::2], [0.0, 2.0, 4.0, 6.0], id="strided"),
        pytest.param([0.1, -0.0, 3.4e38, 1e-45], [0.1, -0.0, 3.4e38, 1e-45], id="edge-floats"),
    ],
)
def test_embedding_to_array_converts(value: object, want: list[float]) -> None:
    out = vals.embedding_to_array(value, DIMS)
    assert out is not None
    assert out.dtype == np.float32 and out.dtype.isnative
    assert out.ndim == 1 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, np.asarray(want, dtype=np.float32))


def test_embedding_to_array_does_not_copy_a_ready_array() -> None:
    v = np.ones(DIMS, dtype=np.float32)
    assert vals.embedding_to_array(v, DIMS) is v
    q = np.ones((3, DIMS), dtype=np.float32)
    assert vals.queries_to_array(q, DIMS) is q
    assert vals.query_to_array(v, DIMS) is v


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="none"),
        pytest.param([], id="empty-list"),
        pytest.param((), id="empty-tuple"),
        pytest.param(np.empty(0, dtype=np.float32), id="empty-array"),
    ],
)
def test_embedding_to_array_none_or_empty_is_no_vector(value: object) -> None:
    assert vals.embedding_to_array(value, DIMS) is None


@pytest.mark.parametrize(
    ("value", "exc", "match"),
    [
        pytest.param(
            [0.0] * 383,
            DimensionMismatchError,
            r"^embedding has 383 dims, store expects 4 \(embed it with the store's model; "
            r"383-d vectors belong in a store of their own\)$",
            id="too-long",
        ),
        pytest.param([1.0], DimensionMismatchError, "has 1 dims, store expects 4", id="too-short"),
        pytest.param(
            [1.0, math.nan, 0.0, 0.0], InvalidArgumentError, "index 1: nan is not finite", id="nan"
        ),
        pytest.param(
            np.array([0, 0, 0, np.inf]),
            InvalidArgumentError,
            "index 3: inf is not finite",
            id="inf",
        ),
        pytest.param(
            [0.0, -math.inf, 0.0, 0.0], InvalidArgumentError, "-inf is not finite", id="neg-inf"
        ),
        pytest.param(
            [0.0, 0.0, 1e39, 0.0],
            InvalidArgumentError,
            "index 2: 1e\\+39 overflows float32",
            id="float32-overflow",
        ),
        pytest.param(["1", "2", "3", "4"], InvalidArgumentError, "real numbers", id="strings"),
        pytest.param("1234", InvalidArgumentError, "got str", id="a-str"),
        pytest.param(b"\x00\x00\x00\x00", InvalidArgumentError, "got bytes", id="bytes"),
        pytest.param({"a": 1.0}, InvalidArgumentError, "got dict", id="dict"),
        pytest.param(iter([1.0] * 4), InvalidArgumentError, "got list_iterator", id="iterator"),
        pytest.param(3.0, InvalidArgumentError, "got float", id="scalar"),
        pytest.param([True, False, True, False], InvalidArgumentError, "dtype bool", id="bools"),
        pytest.param([1j, 0, 0, 0], InvalidArgumentError, "dtype complex", id="complex"),
        pytest.param([1.0, None, 0.0, 0.0], InvalidArgumentError, "dtype object", id="none-item"),
        pytest.param([[1.0, 2.0, 3.0, 4.0]], InvalidArgumentError, "must be 1-D", id="2d-list"),
        pytest.param(np.ones((2, 2)), InvalidArgumentError, r"shape \(2, 2\)", id="2d-array"),
        pytest.param(np.array(1.0), InvalidArgumentError, r"shape \(\)", id="0d-array"),
        pytest.param([[1.0], [1.0, 2.0]], InvalidArgumentError, "flat sequence", id="ragged"),
    ],
)
def test_embedding_to_array_rejects(value: object, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        vals.embedding_to_array(value, DIMS)


@pytest.mark.parametrize(
    ("values", "shape"),
    [
        pytest.param(np.zeros((3, DIMS)), (3, DIMS), id="2d-float64"),
        pytest.param([[0.0] * DIMS, [1.0] * DIMS], (2, DIMS), id="list-of-lists"),
        pytest.param([np.zeros(DIMS, np.float32), (1, 2, 3, 4)], (2, DIMS), id="mixed-rows"),
        pytest.param([], (0, DIMS), id="empty-list-is-empty-batch"),
        pytest.param(np.zeros((0, DIMS)), (0, DIMS), id="empty-array"),
        pytest.param(np.zeros((DIMS, 3)).T, (3, DIMS), id="fortran-order"),
    ],
)
def test_queries_to_array_converts(values: object, shape: tuple[int, int]) -> None:
    out = vals.queries_to_array(values, DIMS)
    assert out.shape == shape
    assert out.dtype == np.float32 and out.flags.c_contiguous


@pytest.mark.parametrize(
    ("values", "exc", "match"),
    [
        pytest.param(
            np.zeros(DIMS),
            InvalidArgumentError,
            r"^query vectors must be a 2-D array of shape \(n, 4\).*shape \(4,\).*vector_search",
            id="1d-array",
        ),
        pytest.param(
            [1, 2, 3, 4],
            InvalidArgumentError,
            r"^query vectors must be a 2-D array of shape \(n, 4\).* flat sequence of 4 numbers",
            id="flat-list-of-ints",
        ),
        pytest.param(
            (0.5, np.float32(1.0)),
            InvalidArgumentError,
            r"2-D array of shape \(n, 4\).*flat sequence of 2 numbers",
            id="flat-tuple-of-floats",
        ),
        pytest.param(1.0, InvalidArgumentError, r"2-D array .*got a float", id="scalar"),
        pytest.param(
            np.zeros((2, 3)), DimensionMismatchError, "has 3 dims, store expects 4", id="3-dims"
        ),
        pytest.param(
            [[0.0] * DIMS, [0.0] * 3],
            DimensionMismatchError,
            r"query vectors\[1\] has 3 dims",
            id="ragged-names-row",
        ),
        pytest.param(
            np.array([[0, 0, 0, 0], [0, 0, np.nan, 0]]),
            InvalidArgumentError,
            "row 1, index 2: nan",
            id="nan-names-cell",
        ),
        pytest.param(
            [[0.0] * DIMS, [0.0, math.inf, 0.0, 0.0]],
            InvalidArgumentError,
            "row 1, index 1: inf",
            id="inf-in-list",
        ),
        pytest.param(np.zeros((1, 1, DIMS)), InvalidArgumentError, r"shape \(1, 1, 4\)", id="3d"),
        pytest.param([[[0.0] * DIMS]], InvalidArgumentError, r"\[0\] must be a 1-D", id="nested"),
        pytest.param([["a"] * DIMS], InvalidArgumentError, "real numbers", id="strings"),
        pytest.param(None, InvalidArgumentError, "2-D array .*got a NoneType", id="none"),
    ],
)
def test_queries_to_array_rejects(values: object, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        vals.queries_to_array(values, DIMS)


@pytest.mark.parametrize(
    ("value", "exc", "match"),
    [
        pytest.param(
            [], DimensionMismatchError, "query vector has 0 dims, store expects 4", id="empty"
        ),
        pytest.param(np.empty(0), DimensionMismatchError, "has 0 dims", id="empty-array"),
        pytest.param([1.0] * 5, DimensionMismatchError, "has 5 dims", id="too-long"),
        pytest.param(None, InvalidArgumentError, "got None", id="none"),
        pytest.param(np.ones((1, DIMS)), InvalidArgumentError, "vector_search_many", id="2d"),
        pytest.param([0.0, 0.0, 0.0, math.nan], InvalidArgumentError, "not finite", id="nan"),
    ],
)
def test_query_to_array_rejects(value: object, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        vals.query_to_array(value, DIMS)


def test_query_to_array_converts() -> None:
    out = vals.query_to_array([1, 2, 3, 4], DIMS)
    assert out.dtype == np.float32 and out.shape == (DIMS,)


# ============================================================================================
# Metadata
# ============================================================================================


@pytest.mark.parametrize(
    ("meta", "text"),
    [
        pytest.param({}, "{}", id="empty"),
        pytest.param(None, "{}", id="none-is-empty"),
        pytest.param({"b": 1, "a": 2}, '{"b":1,"a":2}', id="key-order-kept"),
        pytest.param(
            {"x": [1, 2.5, True, None, "s"], "y": {"z": {}}},
            '{"x":[1,2.5,true,null,"s"],"y":{"z":{}}}',
            id="nested-compact",
        ),
        pytest.param({"é": "ü日本"}, '{"é":"ü日本"}', id="utf8-not-escaped"),
        pytest.param(
            {"f": 0.1, "g": 1e300, "h": -0.0}, '{"f":0.1,"g":1e+300,"h":-0.0}', id="floats"
        ),
        pytest.param({"n": "a\x00b"}, '{"n":"a\\u0000b"}', id="nul-escaped"),
        pytest.param(
            {"big": 2**64 - 1, "neg": -(2**63)},
            f'{{"big":{2**64 - 1},"neg":{-(2**63)}}}',
            id="64-bit-ints",
        ),
        pytest.param({"tier": Tier.SEMANTIC}, '{"tier":"semantic"}', id="str-enum-as-string"),
        pytest.param({"memory_type": "decision"}, '{"memory_type":"decision"}', id="plain"),
    ],
)
def test_metadata_to_json(meta: dict[str, Any] | None, text: str) -> None:
    assert vals.metadata_to_json(meta) == text
    assert vals.metadata_to_json(meta) == text  # deterministic
    assert vals.json_to_metadata(text) == (meta or {})


def _cyclic() -> dict[str, Any]:
    d: dict[str, Any] = {"a": []}
    d["a"].append(d)
    return d


def _deep(n: int) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for _ in range(n):
        d = {"k": d}
    return d


@pytest.mark.parametrize(
    ("meta", "match"),
    [
        pytest.param(
            {"a": {"b": [1, datetime(2024, 1, 1)]}},
            r"^metadata\['a'\]\['b'\]\[1\] has type datetime, which is not a JSON type",
            id="datetime-nested-path",
        ),
        pytest.param({"t": (1, 2)}, r"metadata\['t'\] has type tuple", id="tuple"),
        pytest.param({"s": {1, 2}}, r"metadata\['s'\] has type set", id="set"),
        pytest.param({"b": b"x"}, "has type bytes", id="bytes"),
        pytest.param({"n": np.int64(3)}, "has type int64", id="numpy-int"),
        pytest.param({"x": {"y": math.nan}}, r"metadata\['x'\]\['y'\] is nan", id="nan-nested"),
        pytest.param({"x": [math.inf]}, r"metadata\['x'\]\[0\] is inf", id="inf-in-list"),
        pytest.param({"x": -math.inf}, "is -inf", id="neg-inf"),
        pytest.param({1: "a"}, "metadata has a key 1 of type int", id="int-key"),
        pytest.param({"a": {None: 1}}, r"metadata\['a'\] has a key None", id="none-key-nested"),
        pytest.param(
            {"s": "x\udc80"}, r"metadata\['s'\] contains a lone surrogate", id="surrogate"
        ),
        pytest.param({"k\ud800": 1}, "key .* contains a lone surrogate", id="surrogate-key"),
        pytest.param({"n": 2**64}, "does not fit in 64 bits", id="int-too-big"),
        pytest.param({"n": -(2**63) - 1}, "does not fit in 64 bits", id="int-too-small"),
        pytest.param(_cyclic(), r"metadata\['a'\]\[0\] contains itself", id="cycle"),
        pytest.param(_deep(101), "nests deeper than 100 levels", id="too-deep"),
        pytest.param(
            [1, 2], "metadata must be a dict with str keys, got list", id="top-level-list"
        ),
        pytest.param("{}", "got str", id="top-level-json-text"),
    ],
)
def test_metadata_to_json_rejects(meta: Any, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        vals.metadata_to_json(meta)


def test_metadata_depth_limit_boundary() -> None:
    assert vals.json_to_metadata(vals.metadata_to_json(_deep(100))) == _deep(100)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("", {}, id="empty-text"),
        pytest.param("{}", {}, id="empty-object"),
        pytest.param('{"a":[1,{"b":null}]}', {"a": [1, {"b": None}]}, id="nested"),
    ],
)
def test_json_to_metadata(text: str, want: dict[str, Any]) -> None:
    assert vals.json_to_metadata(text) == want


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("{", id="truncated"),
        pytest.param("[1]", id="array"),
        pytest.param("3", id="number"),
    ],
)
def test_json_to_metadata_corrupt(text: str) -> None:
    with pytest.raises(CorruptionError):
        vals.json_to_metadata(text)


# ============================================================================================
# Memory <-> row
# ============================================================================================

T0 = datetime(2026, 1, 2, 3, 4, 5, 678_901, tzinfo=UTC)
T0_US = vals.to_micros(T0)


def full_memory(**overrides: Any) -> Memory:
    values: dict[str, Any] = {
        "id": "01ABC",
        "namespace": "alice",
        "content": "  The user   likes COFFEE ",
        "tier": "procedural",
        "level": Level.DEDUCED,
        "summary": "coffee",
        "metadata": {"memory_type": "preference", "n": [1, 2]},
        "tags": ["b", "a", "b"],
        "importance": 0.1 + 0.2,
        "created_at": T0,
        "updated_at": T0.replace(tzinfo=None),
        "last_accessed_at": T0.astimezone(MINUS_05),
        "access_count": np.int64(7),
        "expires_at": None,
        "superseded_by": "01XYZ",
        "valid_from": datetime(1, 1, 1),
        "valid_to": datetime(9999, 12, 31, 23, 59, 59, 999_999),
        "confidence": 0.3,
        "linked_memory_ids": ("x", "y"),
        "embedding": [1.0, 2.0, 3.0, 4.0],
    }
    values.update(overrides)
    return Memory(**values)


def test_memory_to_row_every_field() -> None:
    row: dict[str, Any] = dict(cv.memory_to_row(full_memory(), DIMS))
    emb = row.pop("embedding")
    np.testing.assert_array_equal(emb, np.array([1, 2, 3, 4], dtype=np.float32))
    assert emb.dtype == np.float32
    assert row == {
        "id": "01ABC",
        "namespace": "alice",
        "content": "  The user   likes COFFEE ",
        "tier": "procedural",
        "level": "deduced",
        "summary": "coffee",
        "metadata": '{"memory_type":"preference","n":[1,2]}',
        "tags": ["b", "a", "b"],
        "importance": 0.30000000000000004,
        "created_at": T0_US,
        "updated_at": T0_US,
        "last_accessed_at": T0_US,
        "access_count": 7,
        "expires_at": None,
        "superseded_by": "01XYZ",
        "valid_from": -62_135_596_800_000_000,
        "valid_to": 253_402_300_799_999_999,
        "confidence": 0.3,
        "linked_memory_ids": ["x", "y"],
        "fingerprint": "d24add2f99bb999edcf69338f901d8b691c709789bd93e0d4bf033d02a1ce3c5",
    }
    assert type(row["tier"]) is str and type(row["access_count"]) is int


def rust_memory_fields() -> dict[str, tuple[str, str, str]]:
    """The Rust schema of a memory: field name -> (Python kind, record, update|fixed).

    Parsed from the entries ``name: Type, record, kind, update|fixed;`` of the
    ``for_memory_fields!`` macro in rust/types.rs (the one Rust declaration of the fields,
    read by the binding to build rows and `Memory` objects), so the tests below fail when
    the Python and Rust schemas drift, e.g. a field added on one side only.
    """
    text = RUST_TYPES.read_text()
    start = text.index("macro_rules! for_memory_fields")
    body = text[start : text.index("\n}\n", start)]
    entries = re.findall(
        r"^\s*(\w+)\s*:\s*[^;]+?,\s*(col|payload),\s*(\w+),\s*(update|fixed);\s*$", body, re.M
    )
    assert len(entries) >= 20, f"cannot read the fields of for_memory_fields! in {RUST_TYPES}"
    return {name: (kind, record, update) for name, record, kind, update in entries}


# How each Python field type crosses to Rust (the kinds of for_memory_fields!): a time field
# given as None is stamped "now" (``time``) or kept None (``opt_time``), both ``datetime | None``.
PY_KINDS: dict[object, set[str]] = {
    str: {"text"},
    str | None: {"opt_text"},
    Tier: {"tier"},
    Level | None: {"level"},
    dict[str, Any]: {"json"},
    list[str]: {"list"},
    float: {"float"},
    float | None: {"opt_float"},
    int: {"int"},
    datetime | None: {"time", "opt_time"},
}


def test_every_memory_field_has_a_converter() -> None:
    """Converters are derived from the dataclass: a new field gets one with no other edit."""
    assert list(cv._FIELD_CONVERTERS) == [f.name for f in fields(Memory)]


def test_memory_schema_matches_rust() -> None:
    """The row dict has exactly the Rust schema's fields (+ the vector), of matching kinds."""
    rust = rust_memory_fields()
    row = cv.memory_to_row(full_memory(), DIMS)
    assert set(row) == set(rust) | {"embedding"}
    python = [f.name for f in fields(Memory) if f.name != "embedding"]
    assert python == [name for name in rust if name != "fingerprint"]  # same order, too
    assert rust["fingerprint"][0] == "digest"  # computed from content, not a Memory field
    hints = get_type_hints(Memory)
    mismatched = {
        name: (hints[name], rust[name][0])
        for name in python
        if rust[name][0] not in PY_KINDS.get(hints[name], set())
    }
    assert not mismatched, "Python type vs Rust kind"
    fixed = {name for name, (_, _, update) in rust.items() if update == "fixed"}
    assert set(cv._NOT_UPDATABLE) == fixed


@dataclass
class _Extended:
    """`Memory`'s field types beside a plain new field: how a new field is converted."""

    source: str = ""
    origin: str | None = None
    score: float | None = None
    rank: int = 0
    when: datetime | None = None
    kind: Level | None = None
    labels: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@pytest.mark.parametrize(
    ("name", "value", "want"),
    [
        pytest.param("source", "web", "web", id="str"),
        pytest.param("origin", None, None, id="optional-str-none"),
        pytest.param("score", 1, 1.0, id="optional-float"),
        pytest.param("rank", np.int64(3), 3, id="int"),
        pytest.param("when", datetime(1970, 1, 1, 0, 0, 1), 1_000_000, id="datetime"),
        pytest.param("kind", "deduced", "deduced", id="optional-enum"),
        pytest.param("labels", ("a",), ["a"], id="list-of-str"),
        pytest.param("extra", {"a": [1]}, '{"a":[1]}', id="json"),
    ],
)
def test_new_field_converter_from_its_type(name: str, value: object, want: object) -> None:
    hints = get_type_hints(_Extended)
    (f,) = (f for f in fields(_Extended) if f.name == name)
    got = cv._converter(f, hints[name])(value, DIMS)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        pytest.param("source", 1, "^source must be a str, got int$", id="str"),
        pytest.param("score", math.nan, "^score must be finite", id="float"),
        pytest.param("kind", "x", "^kind must be a Level or one of", id="enum"),
        pytest.param("labels", "a", r"^labels must be a list of strings, not a str", id="list"),
    ],
)
def test_new_field_converter_names_the_field(name: str, value: object, match: str) -> None:
    hints = get_type_hints(_Extended)
    (f,) = (f for f in fields(_Extended) if f.name == name)
    with pytest.raises(InvalidArgumentError, match=match):
        cv._converter(f, hints[name])(value, DIMS)


def test_field_of_unknown_type_is_refused_at_import() -> None:
    @dataclass
    class Odd:
        blob: bytes = b""

    with pytest.raises(TypeError, match=r"Memory\.blob has type <class 'bytes'>.*_TYPE_RULES"):
        cv._converter(fields(Odd)[0], bytes)


def test_memory_to_row_defaults() -> None:
    row = cv.memory_to_row(Memory(id="i", namespace="n", content=""), DIMS)
    assert row["tier"] == "semantic"
    assert row["level"] is None
    assert row["metadata"] == "{}"
    assert row["embedding"] is None
    assert row["created_at"] is None and row["confidence"] is None
    assert row["fingerprint"] == hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize(
    ("overrides", "exc", "match"),
    [
        pytest.param(
            {"id": ""}, InvalidArgumentError, "^id must be a non-empty str$", id="empty-id"
        ),
        pytest.param({"id": 5}, InvalidArgumentError, "^id must be a str, got int$", id="int-id"),
        pytest.param(
            {"namespace": ""}, InvalidArgumentError, "^namespace must be a non-empty", id="empty-ns"
        ),
        pytest.param(
            {"namespace": None}, InvalidArgumentError, "^namespace must be a str", id="none-ns"
        ),
        pytest.param(
            {"content": None}, InvalidArgumentError, "^content must be a str", id="none-content"
        ),
        pytest.param(
            {"content": "ok\ud83d"},
            InvalidArgumentError,
            "^content contains a lone surrogate '\\\\ud83d' at index 2",
            id="surrogate-content",
        ),
        pytest.param(
            {"summary": "\udfff"},
            InvalidArgumentError,
            "^summary contains a lone",
            id="surrogate-summary",
        ),
        pytest.param(
            {"id": "\ud800"}, InvalidArgumentError, "^id contains a lone", id="surrogate-id"
        ),
        pytest.param(
            {"tier": "long"}, InvalidArgumentError, "^tier must be a Tier", id="unknown-tier"
        ),
        pytest.param({"tier": None}, InvalidArgumentError, "^tier must be a Tier", id="none-tier"),
        pytest.param(
            {"level": "guessed"}, InvalidArgumentError, "^level must be a Level", id="unknown-level"
        ),
        pytest.param(
            {"metadata": {"d": datetime(2024, 1, 1)}},
            InvalidArgumentError,
            r"metadata\['d'\]",
            id="bad-metadata",
        ),
        pytest.param(
            {"tags": "coffee"},
            InvalidArgumentError,
            r"^tags must be a list of strings, not a str: write tags=\['coffee'\]",
            id="bare-str-tags",
        ),
        pytest.param(
            {"linked_memory_ids": "01XYZ"},
            InvalidArgumentError,
            r"^linked_memory_ids must be a list of strings, not a str: write "
            r"linked_memory_ids=\['01XYZ'\]",
            id="bare-str-linked-ids",
        ),
        pytest.param(
            {"confidence": 5.0},
            InvalidArgumentError,
            r"^confidence must be between 0 and 1, got 5.0",
            id="confidence-above-one",
        ),
        pytest.param(
            {"confidence": -0.01},
            InvalidArgumentError,
            r"^confidence must be between 0 and 1",
            id="confidence-negative",
        ),
        pytest.param(
            {"superseded_by": "01ABC"},
            InvalidArgumentError,
            r"^memory '01ABC' cannot be superseded by itself",
            id="superseded-by-itself",
        ),
        pytest.param(
            {"tags": ["a", 1]}, InvalidArgumentError, r"^tags\[1\] must be a str", id="int-tag"
        ),
        pytest.param(
            {"tags": ["\ud800"]},
            InvalidArgumentError,
            r"^tags\[0\] contains a lone",
            id="surrogate-tag",
        ),
        pytest.param(
            {"tags": None}, InvalidArgumentError, "^tags must be a list of str", id="none-tags"
        ),
        pytest.param(
            {"importance": math.nan},
            InvalidArgumentError,
            "^importance must be finite",
            id="nan-importance",
        ),
        pytest.param(
            {"importance": "high"},
            InvalidArgumentError,
            "^importance must be a float",
            id="str-importance",
        ),
        pytest.param({"importance": True}, InvalidArgumentError, "got bool", id="bool-importance"),
        pytest.param(
            {"confidence": math.inf},
            InvalidArgumentError,
            "^confidence must be finite",
            id="inf-confidence",
        ),
        pytest.param(
            {"access_count": -1},
            InvalidArgumentError,
            "^access_count must be between 0",
            id="negative-count",
        ),
        pytest.param(
            {"access_count": 1.0},
            InvalidArgumentError,
            "^access_count must be an int",
            id="float-count",
        ),
        pytest.param({"access_count": 2**63}, InvalidArgumentError, "2\\*\\*63-1", id="huge-count"),
        pytest.param(
            {"superseded_by": 3},
            InvalidArgumentError,
            "^superseded_by must be a str",
            id="int-superseded-by",
        ),
        pytest.param(
            {"linked_memory_ids": [None]},
            InvalidArgumentError,
            r"^linked_memory_ids\[0\]",
            id="none-link",
        ),
        pytest.param(
            {"created_at": "2024-01-01"},
            InvalidArgumentError,
            "^created_at must be a datetime",
            id="str-created-at",
        ),
        pytest.param(
            {"expires_at": 1.5},
            InvalidArgumentError,
            "^expires_at must be a datetime",
            id="float-expires-at",
        ),
        pytest.param(
            {"valid_from": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=2)))},
            InvalidArgumentError,
            "^valid_from .* outside the representable range",
            id="valid-from-out-of-range",
        ),
        pytest.param(
            {"embedding": [1.0] * 3},
            DimensionMismatchError,
            "^embedding has 3 dims, store expects 4",
            id="short-embedding",
        ),
        pytest.param(
            {"embedding": [1.0, 2.0, math.nan, 4.0]},
            InvalidArgumentError,
            "^embedding has a bad value",
            id="nan-embedding",
        ),
    ],
)
def test_memory_to_row_rejects(overrides: dict[str, Any], exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        cv.memory_to_row(full_memory(**overrides), DIMS)


@pytest.mark.parametrize(
    ("overrides", "want"),
    [
        pytest.param(
            {"content": "a\x00b"},
            {"content": "a\x00b", "fingerprint": fingerprint("a\x00b")},
            id="nul-content",
        ),
        pytest.param({"id": "\x00"}, {"id": "\x00"}, id="nul-id"),
        pytest.param({"tags": ["\x00", "😀"]}, {"tags": ["\x00", "😀"]}, id="nul-and-astral-tags"),
        pytest.param(
            {"content": "😀 paired surrogates are fine"},
            {
                "content": "😀 paired surrogates are fine",
                "fingerprint": hashlib.sha256("😀 paired surrogates are fine".encode()).hexdigest(),
            },
            id="astral-content",
        ),
        pytest.param({"tags": []}, {"tags": []}, id="no-tags"),
        pytest.param({"tags": ("a", "b")}, {"tags": ["a", "b"]}, id="tuple-tags-become-a-list"),
        pytest.param({"importance": np.float32(0.5)}, {"importance": 0.5}, id="numpy-float"),
        pytest.param({"importance": 3}, {"importance": 3.0}, id="int-importance"),
        pytest.param({"confidence": 0}, {"confidence": 0.0}, id="confidence-zero"),
        pytest.param({"confidence": 1.0}, {"confidence": 1.0}, id="confidence-one"),
        pytest.param({"confidence": None}, {"confidence": None}, id="confidence-untracked"),
        pytest.param(
            {"embedding": np.array([], dtype=np.float32)}, {"embedding": None}, id="empty-embedding"
        ),
    ],
)
def test_memory_to_row_accepts(overrides: dict[str, Any], want: dict[str, Any]) -> None:
    """Each value is accepted and lands in the row as the core expects it (exact type)."""
    row: dict[str, Any] = dict(cv.memory_to_row(full_memory(**overrides), DIMS))
    got = {key: row[key] for key in want}
    assert got == want
    assert {key: type(v) for key, v in got.items()} == {key: type(v) for key, v in want.items()}


def test_memory_to_row_rejects_non_memory() -> None:
    with pytest.raises(InvalidArgumentError, match="expected a Memory, got dict"):
        cv.memory_to_row({"id": "x"}, DIMS)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields_", "want"),
    [
        pytest.param({}, {}, id="nothing"),
        pytest.param({"summary": "s"}, {"summary": "s"}, id="one-field"),
        pytest.param(
            {"content": "Hello  World"},
            {"content": "Hello  World", "fingerprint": fingerprint("hello world")},
            id="content-adds-fingerprint",
        ),
        pytest.param({"embedding": None}, {"embedding": None}, id="embedding-none-removes"),
        pytest.param({"embedding": []}, {"embedding": None}, id="embedding-empty-removes"),
        pytest.param({"level": None}, {"level": None}, id="level-none"),
        pytest.param({"tier": Tier.WORKING}, {"tier": "working"}, id="tier-member"),
        pytest.param({"metadata": {"a": 1}}, {"metadata": '{"a":1}'}, id="metadata-replaced"),
        pytest.param({"metadata": None}, {"metadata": "{}"}, id="metadata-none-is-empty"),
        pytest.param({"updated_at": None}, {"updated_at": None}, id="updated-at-none-stamps-now"),
        pytest.param(
            {"expires_at": datetime(1970, 1, 1, 0, 0, 2)},
            {"expires_at": 2_000_000},
            id="expires-at",
        ),
        pytest.param(
            {"confidence": None, "access_count": 3},
            {"confidence": None, "access_count": 3},
            id="two-fields",
        ),
    ],
)
def test_fields_to_row(fields_: dict[str, Any], want: dict[str, Any]) -> None:
    assert cv.fields_to_row(fields_, DIMS) == want


def test_fields_to_row_embedding() -> None:
    row = cv.fields_to_row({"embedding": (1, 2, 3, 4)}, DIMS)
    assert set(row) == {"embedding"}
    np.testing.assert_array_equal(row["embedding"], np.arange(1, 5, dtype=np.float32))


@pytest.mark.parametrize(
    ("fields_", "exc", "match"),
    [
        pytest.param({"id": "x"}, InvalidArgumentError, "^id cannot be changed by update", id="id"),
        pytest.param(
            {"confidence": 1.5},
            InvalidArgumentError,
            "^confidence must be between 0 and 1",
            id="conf",
        ),
        pytest.param(
            {"superseded_by": "m1"},
            InvalidArgumentError,
            "^memory 'm1' cannot be superseded by itself",
            id="superseded-by-itself",
        ),
        pytest.param({"namespace": "x"}, InvalidArgumentError, "use reassign", id="namespace"),
        pytest.param(
            {"created_at": T0},
            InvalidArgumentError,
            "^created_at cannot be updated",
            id="created-at",
        ),
        pytest.param(
            {"fingerprint": "ab"},
            InvalidArgumentError,
            "unknown field 'fingerprint'.*updatable fields: content",
            id="fingerprint",
        ),
        pytest.param({"contnet": "x"}, InvalidArgumentError, "unknown field 'contnet'", id="typo"),
        pytest.param(
            {"tier": "bogus"}, InvalidArgumentError, "^tier must be a Tier", id="bad-value"
        ),
        pytest.param(
            {"embedding": [1.0]}, DimensionMismatchError, "has 1 dims", id="bad-embedding"
        ),
    ],
)
def test_fields_to_row_rejects(fields_: dict[str, Any], exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        cv.fields_to_row(fields_, DIMS, id="m1")


def test_core_memory_round_trip(store: Any) -> None:
    """The core builds the `Memory` it returns: every field reads back as written."""
    m = full_memory()
    store.upsert(m)
    back = store.get("alice", "01ABC")
    assert type(back) is Memory
    assert list(vars(back)) == [f.name for f in fields(Memory)]  # every field, in order
    assert back.tier is Tier.PROCEDURAL
    assert back.level is Level.DEDUCED
    assert back.embedding is None
    assert back.metadata == {"memory_type": "preference", "n": [1, 2]}
    assert back.tags == ["b", "a", "b"] and back.linked_memory_ids == ["x", "y"]
    for name in ("created_at", "updated_at", "last_accessed_at", "valid_from", "valid_to"):
        dt = getattr(back, name)
        assert dt.tzinfo is UTC, name
        orig = getattr(m, name)
        assert dt == (orig.replace(tzinfo=UTC) if orig.tzinfo is None else orig), name
    assert back.created_at == T0  # microseconds kept
    assert back.expires_at is None
    assert (back.importance, back.confidence, back.access_count) == (0.1 + 0.2, 0.3, 7)
    assert (back.id, back.namespace, back.content, back.summary, back.superseded_by) == (
        "01ABC",
        "alice",
        "  The user   likes COFFEE ",
        "coffee",
        "01XYZ",
    )
    everything = Filter(include_superseded=True)  # the row is superseded by 01XYZ
    (listed,) = store.list("alice", everything)
    (hit,) = store.keyword_search("alice", "coffee", everything)
    assert back == listed == hit.memory
    back.tags.append("mine")  # results are plain, independent dataclass instances
    assert store.get("alice", "01ABC").tags == ["b", "a", "b"]


def test_core_datetimes_are_exact(store: Any) -> None:
    """The core's micros -> datetime conversion agrees with Python's, edges included."""
    lo, hi = vals.to_micros(datetime.min), vals.to_micros(datetime.max)
    edges = [lo, lo + 1, -1, 0, 1, 951_782_400_000_000, 4_107_542_399_999_999, hi - 1, hi]
    rng = np.random.default_rng(7)
    sample = [int(x) for x in rng.integers(lo, hi, size=500, endpoint=True)]
    instants = edges + sample
    store.upsert_many(
        Memory(id=f"i{i}", namespace="n", content="c", expires_at=vals.from_micros(us))
        for i, us in enumerate(instants)
    )
    for i, us in enumerate(instants):
        got = store.get("n", f"i{i}").expires_at
        assert got == vals.from_micros(us) and got.tzinfo is UTC, us


# A process whose `memini.types.Memory` and `Scored` are dataclasses with __slots__ (no
# instance __dict__). The binding looks the classes up once per process, at the first store
# call, so they are replaced before it; `memini._convert` binds `Memory` at import (it checks
# what it writes is one), so it gets the slots class too. `dataclass(slots=True)(Memory)`
# cannot do it: the first decoration removed the class attributes of the default_factory
# fields, so a second one reads them as required fields after defaulted ones (TypeError).
SLOTS_SCRIPT = """
import dataclasses, sys
from datetime import UTC, datetime

import memini._convert
import memini.types
from memini import Filter, Level, Store, Tier


def with_slots(cls):
    def spec(f):
        kw = {"metadata": f.metadata}
        if f.default is not dataclasses.MISSING:
            kw["default"] = f.default
        if f.default_factory is not dataclasses.MISSING:
            kw["default_factory"] = f.default_factory
        return f.name, f.type, dataclasses.field(**kw)

    methods = {k: v for k, v in vars(cls).items() if callable(v) and not k.startswith("__")}
    fields = [spec(f) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, fields, namespace=methods, slots=True)


Memory = memini.types.Memory = memini._convert.Memory = with_slots(memini.types.Memory)
Scored = memini.types.Scored = with_slots(memini.types.Scored)
assert "__slots__" in vars(Memory) and "__slots__" in vars(Scored)

T = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
full = Memory(
    id="m1", namespace="n", content="coffee in the morning", tier=Tier.PROCEDURAL,
    level=Level.DEDUCED, summary="coffee", metadata={"a": [1, None]}, tags=["x", "y"],
    importance=0.5, created_at=T, updated_at=T, last_accessed_at=T, access_count=3,
    expires_at=datetime(2999, 1, 1, tzinfo=UTC), valid_from=T, confidence=0.25,
    linked_memory_ids=["m2"], embedding=[1.0, 0.0],
)
plain = Memory(id="m2", namespace="n", content="tea", embedding=[0.0, 1.0])
s = Store.open(sys.argv[1] or None, dims=2)
s.upsert(full)
s.upsert_many([plain])


def check(m, want):
    assert type(m) is Memory and not hasattr(m, "__dict__"), type(m)
    assert m == dataclasses.replace(want, embedding=None), (m, want)


check(s.get("n", "m1"), full)
got = s.get("n", "m2")
assert got.created_at is not None and got.created_at == got.updated_at  # stamped by the store
check(got, dataclasses.replace(plain, created_at=got.created_at, updated_at=got.updated_at,
                               last_accessed_at=got.last_accessed_at))
assert s.get("n", "m1").salience() > 0  # the methods came along
listed = s.list("n", Filter(), 10)
assert [m.id for m in listed] == ["m2", "m1"]
check(listed[1], full)
hits = [*s.vector_search("n", [1.0, 0.0], k=1), *s.keyword_search("n", "coffee", k=1)]
hits += [h for batch in s.vector_search_many("n", [[1.0, 0.0]], k=1) for h in batch]
for h in hits:
    assert type(h) is Scored and not hasattr(h, "__dict__"), type(h)
    check(h.memory, full)
new = s.update("n", "m1", summary="beans", tags=["z"])
check(new, dataclasses.replace(full, summary="beans", tags=["z"], updated_at=new.updated_at))
s.close()
print("ok")
"""


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_core_fills_slots_dataclasses(tmp_path: Path, kind: str) -> None:
    """Results are built field by field also for a class without __dict__ (object.__setattr__)."""
    path = str(tmp_path / "s") if kind == "disk" else ""
    run = subprocess.run(
        [sys.executable, "-c", SLOTS_SCRIPT, path],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and run.stdout == "ok\n", run.stderr[-3000:]


# ============================================================================================
# Filter -> spec
# ============================================================================================


def filt(**kw: Any) -> Filter:
    """A Filter built from untyped values, to feed the validators what users may pass."""
    return Filter(**kw)


def sort_(key: Any, asc: Any = False) -> Sort:
    """A Sort built from untyped values."""
    return Sort(key, asc)


def test_filter_to_spec_default() -> None:
    before = time.time_ns() // 1_000
    spec = cv.filter_to_spec(None)
    after = time.time_ns() // 1_000
    assert before <= spec["now"] <= after
    assert {**spec, "now": 0} == {
        "tiers": [],
        "levels": [],
        "tags": [],
        "metadata": [],
        "exclude_metadata": [],
        "exclude_ids": [],
        "include_expired": False,
        "include_superseded": False,
        "now": 0,
        "as_of": None,
        "memory_types": [],
        "created_after": None,
        "accessed_after": None,
        "sort_key": "created_at",
        "sort_asc": False,
    }
    assert cv.filter_to_spec(filt())["sort_key"] == "created_at"
    # None takes a shortcut: it must equal the full conversion of Filter(), `now` included
    at = datetime(2030, 5, 6, tzinfo=UTC)
    assert cv.filter_to_spec(None, now=at) == cv.filter_to_spec(Filter(), now=at)


@pytest.mark.parametrize(
    ("f", "now", "want"),
    [
        pytest.param(filt(now=T0), None, T0_US, id="filter-now"),
        pytest.param(filt(now=T0), datetime(2000, 1, 1), T0_US, id="filter-now-beats-argument"),
        pytest.param(filt(), T0, T0_US, id="argument-when-filter-has-none"),
        pytest.param(None, T0.replace(tzinfo=None), T0_US, id="naive-argument-is-utc"),
    ],
)
def test_filter_to_spec_now(f: Filter | None, now: datetime | None, want: int) -> None:
    assert cv.filter_to_spec(f, now)["now"] == want


def test_filter_to_spec_every_field() -> None:
    f = filt(
        tiers=["semantic", Tier.PROCEDURAL],
        levels=[None, "explicit", Level.DEDUCED],
        tags=("b", "a"),
        metadata={"memory_type": "decision", "project": "x"},
        exclude_metadata={"status": "archived"},
        exclude_ids=["1", "2"],
        include_expired=True,
        include_superseded=np.bool_(True),
        now=T0,
        as_of=datetime(1970, 1, 1, 0, 0, 1),
        memory_types=["decision", "problem"],
        created_after=datetime(1970, 1, 1, 0, 0, 2, tzinfo=UTC),
        accessed_after=datetime(1970, 1, 1, 0, 0, 3),
        sort=sort_("importance", asc=True),
    )
    assert cv.filter_to_spec(f) == {
        "tiers": ["semantic", "procedural"],
        "levels": [None, "explicit", "deduced"],
        "tags": ["b", "a"],
        "metadata": [("memory_type", "decision"), ("project", "x")],
        "exclude_metadata": [("status", "archived")],
        "exclude_ids": ["1", "2"],
        "include_expired": True,
        "include_superseded": True,
        "now": T0_US,
        "as_of": 1_000_000,
        "memory_types": ["decision", "problem"],
        "created_after": 2_000_000,
        "accessed_after": 3_000_000,
        "sort_key": "importance",
        "sort_asc": True,
    }


@pytest.mark.parametrize(
    ("f", "key", "want"),
    [
        pytest.param(filt(tags={"b"}), "tags", ["b"], id="set-of-tags"),
        pytest.param(filt(exclude_ids=frozenset()), "exclude_ids", [], id="empty-frozenset"),
        pytest.param(filt(memory_types=None), "memory_types", [], id="none-memory-types"),
        pytest.param(filt(tiers=None), "tiers", [], id="none-tiers-is-all"),
        pytest.param(filt(levels=None), "levels", [], id="none-levels-is-all"),
        pytest.param(filt(levels=[None]), "levels", [None], id="legacy-only"),
        pytest.param(
            filt(sort=sort_(SortKey.UPDATED_AT)), "sort_key", "updated_at", id="sort-member"
        ),
        pytest.param(filt(metadata={}), "metadata", [], id="empty-metadata"),
    ],
)
def test_filter_to_spec_shapes(f: Filter, key: str, want: object) -> None:
    assert dict(cv.filter_to_spec(f, T0))[key] == want


@pytest.mark.parametrize(
    ("f", "match"),
    [
        pytest.param(
            filt(tiers=["bogus"]), r"^filter.tiers\[0\] must be a Tier", id="unknown-tier"
        ),
        pytest.param(
            filt(levels=[None, "legacy"]),
            r"^filter.levels\[1\] must be a Level",
            id="unknown-level",
        ),
        pytest.param(
            filt(sort=sort_("relevance")),
            r"^filter.sort.key must be a SortKey or one of 'created_at'",
            id="unknown-sort-key",
        ),
        pytest.param(
            filt(metadata={"n": 1}),
            r"^filter.metadata\['n'\] must be a str, got int",
            id="int-metadata-value",
        ),
        pytest.param(
            filt(metadata={"n": None}), r"must be a str, got NoneType", id="none-metadata-value"
        ),
        pytest.param(
            filt(exclude_metadata={1: "x"}),
            r"^filter.exclude_metadata key must be a str",
            id="int-metadata-key",
        ),
        pytest.param(
            filt(metadata=[("a", "b")]),
            r"^filter.metadata must be a mapping",
            id="pairs-not-mapping",
        ),
        pytest.param(filt(tags=[1]), r"^filter.tags\[0\] must be a str", id="int-tag"),
        pytest.param(
            filt(tags={"a": "b"}),
            r"^filter.tags must be a list of strings \(a list, tuple or set\), got dict",
            id="dict-tags",
        ),
        pytest.param(
            filt(tags="coffee"),
            r"^filter.tags must be a list of strings, not a str: write filter.tags=\['coffee'\]",
            id="bare-str-tags",
        ),
        pytest.param(
            filt(tiers=Tier.SEMANTIC),
            r"^filter.tiers must be a list of Tier values, not a str: write "
            r"filter.tiers=\['semantic'\]",
            id="bare-member-tiers",
        ),
        pytest.param(filt(tiers="working"), r"^filter.tiers .*not a str", id="bare-str-tiers"),
        pytest.param(filt(levels="explicit"), r"^filter.levels .*not a str", id="bare-str-levels"),
        pytest.param(
            filt(exclude_ids="01ABC"), r"^filter.exclude_ids .*not a str", id="bare-str-ids"
        ),
        pytest.param(
            filt(memory_types="decision"),
            r"^filter.memory_types .*not a str",
            id="bare-str-memory-types",
        ),
        pytest.param(filt(tags=b"ab"), r"^filter.tags .*got bytes", id="bytes-tags"),
        pytest.param(filt(exclude_ids=[None]), r"^filter.exclude_ids\[0\]", id="none-id"),
        pytest.param(
            filt(memory_types=["\ud800"]),
            r"^filter.memory_types\[0\] contains a lone",
            id="surrogate",
        ),
        pytest.param(
            filt(include_expired="yes"), r"^filter.include_expired must be a bool", id="str-flag"
        ),
        pytest.param(filt(as_of="2024"), r"^filter.as_of must be a datetime", id="str-as-of"),
        pytest.param(filt(now=5), r"^filter.now must be a datetime", id="int-now"),
        pytest.param(filt(sort="importance"), r"^filter.sort must be a Sort", id="sort-not-sort"),
        pytest.param(
            {"tiers": []}, r"^filter must be a Filter or None, got dict", id="dict-filter"
        ),
    ],
)
def test_filter_to_spec_rejects(f: Any, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        cv.filter_to_spec(f, T0)


def test_spec_round_trips_through_json_types() -> None:
    """The spec holds only plain values (what the binding extracts)."""
    spec = cv.filter_to_spec(filt(metadata={"a": "b"}, tiers=[Tier.WORKING]), T0)
    assert json.loads(json.dumps(spec)) == {**spec, "metadata": [["a", "b"]]}
    assert all(type(t) is str for t in spec["tiers"])
