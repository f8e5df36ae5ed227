"""Limits on what a caller sends (`memini.limits`, README "Limits", API.md section 8).

* Every integer argument of every served method, swept over huge and boundary values, in a
  subprocess (a `Store` in-process, and a real ``memini serve`` over HTTP): the process
  survives and each answer is a result or a clear refusal naming the argument (400 served),
  never an abort or a 500. ``recall(k=2**45)`` once aborted Python in ``fusion::fuse``.
* A query string is at most `memini.limits.MAX_QUERY_CHARS` characters; a
  ``vector_search_many`` call at most `MAX_QUERIES` queries; a recall at most
  `MAX_NAMESPACES` namespaces.
* A namespace name is 1-256 characters without control, invisible or line-separator
  characters and not only whitespace, on every backend and in the CLI.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import time
import typing
import unicodedata
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from memini import EventFilter, InvalidArgumentError, Memory, NamespaceLink, Store, _core, limits
from memini._served import SERVED
from memini.cli import main

MEMINI = [sys.executable, "-m", "memini.cli"]
ADMIN = "limits-admin"

# ---------------------------------------------------------------------------------------------
# every integer argument of every served method


def _int_params(method: str) -> list[str]:
    """The parameters of ``Store.<method>`` annotated ``int`` or ``int | None``."""
    hints = typing.get_type_hints(getattr(Store, method))
    return [
        name
        for name in inspect.signature(getattr(Store, method)).parameters
        if int in (hints.get(name), *typing.get_args(hints.get(name)))
    ]


SWEPT: dict[str, list[str]] = {m: ps for m in sorted(SERVED) if (ps := _int_params(m))}
"""Served method -> its int parameters (a new served method with one is swept at once)."""

# JSON-ready values of the other arguments the swept methods require, by parameter name
SAMPLES: dict[str, Any] = {
    "namespace": "n",
    "prefix": "a",
    "query": "hello",
    "vector": [1.0, 0.0, 0.0, 0.0],
    "vectors": [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]],
    "now": "2030-01-01T00:00:00+00:00",
    "k": 10,  # recall's pool is swept with a valid k
}


def _values(maximum: int | None) -> list[int]:
    edges = [0, -1, 1, 2**31 - 1, 2**31, 2**32, 2**45, 2**53 + 1, 2**63 - 1, 2**63, 2**64]
    edges += [-(2**63), -(2**63) - 1, -(2**64)]
    if maximum is not None:
        edges += [maximum - 1, maximum, maximum + 1]
    return sorted(set(edges))


def _cases() -> list[tuple[str, dict[str, Any], str]]:
    """(method, JSON arguments, the swept parameter) for every swept value."""
    cases = []
    for method, params in SWEPT.items():
        sig = inspect.signature(getattr(Store, method))
        base = {
            name: SAMPLES[name]
            for name, p in sig.parameters.items()
            if name != "self" and p.default is p.empty and name not in params
        }
        for param in params:
            bound = limits.PARAMETERS[param]["integer"]  # every int parameter has a bound
            for v in _values(bound.get("maximum")):
                args = {**base, param: v}
                if param != "k" and "k" in sig.parameters:
                    args["k"] = SAMPLES["k"]
                cases.append((method, args, param))
    return cases


# runs every case on an in-process Store; prints one JSON outcome per case
IN_PROCESS = r"""
import json, sys
from datetime import datetime
import numpy as np
from memini import Memory, Store

store, cases = sys.argv[1], json.loads(sys.stdin.read())
s = Store.open(store, dims=4)
s.upsert_many([Memory(id=f"a{i}", namespace="n", content="hello world", embedding=[1, i, 0, 0])
               for i in range(3)])
for method, args, _ in cases:
    call = dict(args)
    for name in ("vector", "vectors"):
        if name in call:
            call[name] = np.asarray(call[name], np.float32)
    if "now" in call:
        call["now"] = datetime.fromisoformat(call["now"])
    try:
        getattr(s, method)(**call)
        out = {"ok": True}
    except Exception as e:
        out = {"type": type(e).__name__, "message": str(e)}
    print(json.dumps(out), flush=True)
s.close()
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(store: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A real ``memini serve`` on 127.0.0.1 with an admin secret, once it is ready."""
    port = _free_port()
    proc = subprocess.Popen(
        [*MEMINI, "serve", "--store", str(store), "--dims", "4", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MEMINI_ADMIN_KEY": ADMIN},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("memini serve did not start")


def _served_outcomes(tmp_path: Path, cases: list[tuple[str, dict[str, Any], str]]) -> list[Any]:
    proc, url = _serve(tmp_path / "served")
    outcomes = []
    try:
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60
        ) as http:
            rows = [
                {"id": f"a{i}", "namespace": "n", "content": "hello", "embedding": [1, i, 0, 0]}
                for i in range(3)
            ]
            assert http.post("/v1/upsert_many", json={"memories": rows}).status_code == 200
            for method, args, _ in cases:
                r = http.post(f"/v1/{method}", json=args)
                assert proc.poll() is None, f"the server died on {method} {args}"
                if r.status_code == 200:
                    outcomes.append({"ok": True})
                else:
                    err = r.json()["error"]
                    outcomes.append({"status": r.status_code, **err})
            assert http.get("/readyz").status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return outcomes


@pytest.mark.timeout(600)
@pytest.mark.parametrize("where", ["in-process", "served"])
def test_every_integer_argument_of_every_served_method_survives_any_value(
    tmp_path: Path, where: str
) -> None:
    assert "recall" in SWEPT and "pool" in SWEPT["recall"]  # the derivation found them
    cases = _cases()
    if where == "in-process":
        proc = subprocess.run(
            [sys.executable, "-c", IN_PROCESS, str(tmp_path / "s")],
            input=json.dumps(cases),
            capture_output=True,
            text=True,
            timeout=540,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        outcomes = [json.loads(line) for line in proc.stdout.splitlines()]
    else:
        outcomes = _served_outcomes(tmp_path, cases)
    assert len(outcomes) == len(cases)
    for (method, args, param), out in zip(cases, outcomes, strict=True):
        where_ = f"{method}({param}={args[param]})"
        if out.get("ok"):
            maximum = limits.PARAMETERS[param]["integer"].get("maximum")
            assert maximum is None or args[param] <= maximum, f"{where_} passed its maximum"
            continue
        assert out.get("status", 400) == 400, f"{where_}: {out}"
        assert out["type"] == "InvalidArgumentError", f"{where_}: {out}"
        assert param in out["message"], f"{where_}: {out['message']}"
        if where == "served" and not -(2**63) <= args[param] < 2**64:
            # JSON parsers read an integer beyond 64 bits as a float (orjson, the server's)
            assert f"{param} must be an int, got float" in out["message"]
        elif args[param] > limits.PARAMETERS[param]["integer"].get("maximum", 2**63):
            assert "at most" in out["message"], f"{where_}: {out['message']}"


def test_recall_with_a_huge_k_is_refused_naming_the_limit(tmp_path: Path) -> None:
    """The issue's reproduction, in-process: k=2**45 aborted Python; 2**63-1 overflowed."""
    with Store.open(tmp_path / "s", dims=3) as s:
        s.upsert(Memory(id="a", namespace="n", content="hello", embedding=[1, 2, 3]))
        for k in (2**45, 2**63 - 1, 2**64):
            with pytest.raises(InvalidArgumentError, match=rf"k must be at most 10000, got {k}"):
                s.recall("n", "hello", np.ones(3, np.float32), k=k)
        assert len(s.recall("n", "hello", np.ones(3, np.float32), k=limits.MAX_K)) == 1


# ---------------------------------------------------------------------------------------------
# query length, queries per call, namespaces per recall (every backend)


def test_query_text_is_capped(store: Any) -> None:
    store.upsert(Memory(id="a", namespace="n", content="hello", embedding=[1, 0, 0, 0]))
    longest = "hello " + "x" * (limits.MAX_QUERY_CHARS - 6)
    assert [h.memory.id for h in store.keyword_search("n", longest)] == ["a"]
    assert [r.memory.id for r in store.recall("n", longest)] == ["a"]
    too_long = longest + "y"
    msg = f"query must be at most {limits.MAX_QUERY_CHARS} characters, got 4097"
    with pytest.raises(InvalidArgumentError, match=msg):
        store.keyword_search("n", too_long)
    with pytest.raises(InvalidArgumentError, match=msg):
        store.recall("n", too_long)


def test_queries_and_namespaces_per_call_are_capped(store: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="number of query vectors must be at most 1024"):
        store.vector_search_many("n", np.ones((limits.MAX_QUERIES + 1, 4), np.float32))
    assert len(store.vector_search_many("n", np.ones((limits.MAX_QUERIES, 4), np.float32))) == (
        limits.MAX_QUERIES
    )
    names = [f"n{i}" for i in range(limits.MAX_NAMESPACES)]
    assert store.recall(names, "hello") == []
    with pytest.raises(InvalidArgumentError, match="namespace list must be at most 64"):
        store.recall([*names, "n0"], "hello")


def test_an_event_filter_limit_is_capped(store: Any) -> None:
    assert store.list_events(EventFilter(limit=limits.MAX_LIMIT)) == []
    with pytest.raises(InvalidArgumentError, match=r"filter\.limit must be at most 2147483647"):
        store.list_events(EventFilter(limit=limits.MAX_LIMIT + 1))


def test_the_openapi_document_states_the_limits() -> None:
    from memini.server._openapi import openapi

    doc = openapi("test")

    def props(method: str) -> dict[str, Any]:
        body = doc["paths"][f"/v1/{method}"]["post"]["requestBody"]
        return body["content"]["application/json"]["schema"]["properties"]  # type: ignore[no-any-return]

    assert props("recall")["k"] == {"type": "integer", "minimum": 1, "maximum": 10_000}
    assert props("recall")["pool"]["anyOf"][0]["maximum"] == limits.MAX_POOL
    assert props("keyword_search")["query"]["maxLength"] == limits.MAX_QUERY_CHARS
    assert props("list")["offset"] == {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}
    assert props("recall")["namespace"]["anyOf"][1]["maxItems"] == limits.MAX_NAMESPACES
    event_filter = doc["components"]["schemas"]["EventFilter"]["properties"]["limit"]
    assert event_filter == {"type": "integer", "maximum": limits.MAX_LIMIT}
    for method, params in SWEPT.items():
        for param in params:
            schema = props(method)[param]
            ints = [o for o in schema.get("anyOf", [schema]) if o.get("type") == "integer"]
            assert ints and all("maximum" in o for o in ints), (method, param, schema)


# ---------------------------------------------------------------------------------------------
# namespace names

BAD_NAMESPACES = [
    pytest.param("", "non-empty", id="empty"),
    pytest.param("a\0b", "U\\+0000", id="nul"),
    pytest.param("a\nb", "U\\+000A", id="newline"),
    pytest.param("tab\t", "U\\+0009", id="tab"),
    pytest.param("   ", "only whitespace", id="whitespace-only"),
    pytest.param("\u3000\u2003", "only whitespace", id="unicode-whitespace-only"),
    pytest.param("a\u200bb", "U\\+200B", id="zero-width-space"),
    pytest.param("org/a\u202eb", "U\\+202E", id="bidi-override"),
    pytest.param("\ufeffa", "U\\+FEFF", id="bom"),
    pytest.param("a\u2028b", "U\\+2028", id="line-separator"),
    pytest.param("a\U000e0041", "U\\+E0041", id="tag-character"),
    pytest.param("x" * 257, "at most 256 characters, got 257", id="257-chars"),
    pytest.param("x" * 100_000, "at most 256 characters, got 100000", id="100k-chars"),
]
GOOD_NAMESPACES = ["a", "org/a b/c", "日本語", "x" * 256, " padded ", "emoji 🙂", "ünï"]


@pytest.mark.parametrize(("bad", "why"), BAD_NAMESPACES)
def test_a_malformed_namespace_is_refused_on_write(store: Any, bad: str, why: str) -> None:
    good = Memory(id="m", namespace="ok", content="x", embedding=[1, 0, 0, 0])
    store.upsert(good)
    with pytest.raises(InvalidArgumentError, match=f"namespace.*{why}"):
        store.upsert(Memory(id="b", namespace=bad, content="x"))
    with pytest.raises(InvalidArgumentError, match=f"namespace.*{why}"):
        store.upsert_many(
            [
                Memory(id="c", namespace="ok", content="x"),
                Memory(id="d", namespace=bad, content="x"),
            ]
        )
    with pytest.raises(InvalidArgumentError, match=f"to_ns.*{why}"):
        store.reassign("ok", ["m"], bad)
    with pytest.raises(InvalidArgumentError, match=f"link.dst.*{why}"):
        store.put_link(NamespaceLink(src="ok", dst=bad))
    store.put_link(NamespaceLink(src="ok", dst="ok2"))
    with pytest.raises(InvalidArgumentError, match=f"to_ns.*{why}"):
        store.rename_link_endpoints("ok2", bad)
    # nothing of it stored
    assert store.list_namespaces() == ["ok"]
    assert [m.id for m in store.list("ok")] == ["m"]
    assert [(lk.src, lk.dst) for lk in store.list_all_links()] == [("ok", "ok2")]


@pytest.mark.parametrize("good", GOOD_NAMESPACES, ids=range(len(GOOD_NAMESPACES)))
def test_printable_namespaces_are_accepted(store: Any, good: str) -> None:
    store.upsert(Memory(id="m", namespace=good, content="hello"))
    assert store.get(good, "m").namespace == good


def test_the_namespace_rule_is_unicode_cc_cf_zl_zp() -> None:
    """The core's table agrees with `unicodedata` on every assigned code point."""
    disagree = []
    for cp in range(0x110000):
        c = chr(cp)
        cat = unicodedata.category(c)
        if cat in ("Cn", "Cs"):  # unassigned in this Python's Unicode, or a surrogate
            continue
        try:
            _core.check_namespace(f"a{c}")
            refused = False
        except InvalidArgumentError:
            refused = True
        if refused != (cat in ("Cc", "Cf", "Zl", "Zp")):
            disagree.append((hex(cp), cat))
    assert disagree == []


@pytest.mark.parametrize(("bad", "why"), BAD_NAMESPACES[1:9])
def test_the_cli_refuses_a_malformed_namespace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str, why: str
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        json.dumps({"id": "a", "content": "hello", "embedding": [1, 0, 0, 0]})
        + "\n"
        + json.dumps({"id": "b", "namespace": bad, "content": "hello"})
        + "\n"
    )
    store = str(tmp_path / "s")
    # the option: refused before the store is opened
    for argv in (
        ["import", str(rows), "--store", store, "--namespace", bad],
        ["serve", "--store", store, "--mcp-namespace", bad],
        ["mcp", "--store", store, "--namespace", bad],
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        assert re.search(f"namespace.*{why}", capsys.readouterr().err), argv
    assert not Path(store).exists()
    # a line's namespace: that line refused, naming it, the others land
    assert main(["import", str(rows), "--store", store, "--dims", "4"]) != 0
    assert re.search(f"line 2: namespace.*{why}", capsys.readouterr().err)
    with Store.open(store) as s:
        assert s.list_namespaces() == ["default"]
