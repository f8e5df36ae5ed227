"""The served OpenAPI document says what the server does (issue 33 item 9 of round 3): the
rules the store checks beyond a value's type are in the schemas, vectors have the store's
dims, values read back validate against the response schemas, and a fuzzer working from the
document (schemathesis) finds no server error and no schema-violating request accepted."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memini import Memory
from memini.server import Server, ServerOptions

ADMIN = "openapi-admin-secret"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Server]:
    opts = ServerOptions(port=0, admin_key=ADMIN, mcp=False, backup_dir=tmp_path / "backups")
    server = Server.open(tmp_path / "store", dims=4, options=opts)
    server.start()
    yield server
    server.stop()


def _doc(server: Server) -> dict[str, Any]:
    doc: dict[str, Any] = httpx.get(f"{server.url}/openapi.json").json()
    return doc


def _args(doc: dict[str, Any], method: str) -> dict[str, Any]:
    body = doc["paths"][f"/v1/{method}"]["post"]["requestBody"]
    props: dict[str, Any] = body["content"]["application/json"]["schema"]["properties"]
    return props


def test_the_document_states_the_rules_beyond_types(served: Server) -> None:
    doc = _doc(served)
    schemas = doc["components"]["schemas"]
    search = _args(doc, "vector_search")
    assert search["k"]["minimum"] == 1
    # a vector has exactly the store's dims, each a float32: an array of numbers, or the
    # base64 of its little-endian float32 bytes (16 bytes: 22 characters and "==")
    array, text = search["vector"]["oneOf"]
    assert array["minItems"] == array["maxItems"] == 4
    assert array["items"]["type"] == "number"
    assert text["type"] == "string" and text["format"] == "byte"
    assert text["pattern"] == "^[A-Za-z0-9+/]{22}={2}$"
    assert _args(doc, "vector_search_many")["vectors"]["items"]["oneOf"][0]["maxItems"] == 4
    recall = _args(doc, "recall")
    assert {"type": "null"} in recall["vector"]["anyOf"]  # optional: text recall
    embedding = doc["paths"]["/v1/get_embedding"]["post"]["responses"]["200"]["content"]
    assert embedding["application/json"]["schema"]["anyOf"][0]["oneOf"][1] == text
    assert recall["alpha"]["anyOf"][0] == {"type": "number", "minimum": 0, "maximum": 1}
    # a Tier is one of its values (the store coerces a str, but only these)
    assert _args(doc, "retier")["tier"] == {
        "type": "string",
        "enum": ["working", "episodic", "semantic", "procedural"],
    }
    assert _args(doc, "set_confidence")["confidence"]["maximum"] == 1
    # a memory read back has embedding null; one written has none, [] or a vector
    memory = schemas["Memory"]
    assert {"type": "null"} in memory["properties"]["embedding"]["anyOf"]
    assert "id" not in memory["required"]  # the server makes one
    assert memory["properties"]["namespace"]["minLength"] == 1
    # update's fields are the Memory fields an update may change, no others
    fields = _args(doc, "update")["fields"]
    assert fields["additionalProperties"] is False
    changeable = {f.name for f in dataclasses.fields(Memory)} - {"id", "namespace", "created_at"}
    assert set(fields["properties"]) == changeable
    # filters read None in a collection as "no condition"
    assert {"type": "null"} in schemas["Filter"]["properties"]["tags"]["anyOf"]


def test_answers_validate_against_the_response_schemas(served: Server) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    doc = _doc(served)
    headers = {"Authorization": f"Bearer {ADMIN}"}
    calls = {
        "upsert": {"memory": {"namespace": "n", "content": "tea", "embedding": [1, 0, 0, 0]}},
        "list": {"namespace": "n"},
        "vector_search": {"namespace": "n", "vector": [1, 0, 0, 0]},
        "recall": {"namespace": "n", "query": "tea", "vector": [1, 0, 0, 0]},
        "keyword_search": {"namespace": "n", "query": "tea"},
    }
    for method, body in calls.items():
        answer = httpx.post(f"{served.url}/v1/{method}", json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        schema = doc["paths"][f"/v1/{method}"]["post"]["responses"]["200"]["content"]
        resolver = {"components": doc["components"], **schema["application/json"]["schema"]}
        jsonschema.validate(answer.json(), resolver)


@pytest.mark.skipif(
    shutil.which("schemathesis", path=str(Path(sys.executable).parent)) is None,
    reason="schemathesis is not installed (the dev extra has it)",
)
def test_a_fuzzer_finds_no_server_error_and_no_bad_request_accepted(
    served: Server, tmp_path: Path
) -> None:
    """Every route, with the admin key (backups land below the test's directory): no 5xx,
    answers of the documented schema, and every schema-violating request refused.

    Schema-valid requests may still be refused where a rule joins two values or the store's
    state, which JSON Schema cannot say: ``pool >= k``, ``superseded_by != id``, a backup
    path that already exists, a call on a missing memory."""
    exe = Path(sys.executable).parent / "schemathesis"
    checks = [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "negative_data_rejection",
    ]
    run = subprocess.run(
        [
            str(exe),
            "run",
            f"{served.url}/openapi.json",
            "-H",
            f"Authorization: Bearer {ADMIN}",
            "--checks",
            ",".join(checks),
            "--max-examples",
            "8",
            "--seed",
            "33",
            "--continue-on-failure",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,  # its cache of crashes, not in the checkout
    )
    assert run.returncode == 0, run.stdout[-6000:]
