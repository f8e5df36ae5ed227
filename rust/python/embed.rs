//! `memini._core.LocalModel`: the local embedder (`crate::embed`), loaded once and shared.

use std::sync::Arc;
use std::time::Duration;

use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::prelude::*;

use super::errors::{run, run_interruptible};
use crate::embed::{Batcher, BatcherConfig, BertConfig, LocalModel, TokenizerSource};
use crate::error::Error;

/// A loaded BERT sentence model behind the core's batching queue and vector cache: `embed`
/// runs tokenization and the forward pass without the GIL.
#[pyclass(frozen, name = "LocalModel", module = "memini._core")]
pub struct PyLocalModel {
    inner: Arc<Batcher>,
}

impl PyLocalModel {
    /// The model behind its queue, for the HTTP front (text recalls share its batches and
    /// cache).
    pub fn shared(&self) -> Arc<Batcher> {
        self.inner.clone()
    }
}

#[pymethods]
impl PyLocalModel {
    /// Loads the model from the bytes of its `model.safetensors` and either the bytes of its
    /// `tokenizer.json` or the path of its `vocab.txt`; `config_json` (a Hugging Face
    /// `config.json`) gives the shape, else all-MiniLM-L6-v2's.
    #[new]
    #[pyo3(signature = (
        weights, tokenizer_json=None, *, vocab_path=None, config_json=None, max_tokens=256,
        batch=64, max_wait=0.002, cache_size=1024
    ))]
    #[allow(
        clippy::too_many_arguments,
        reason = "keyword arguments of one constructor"
    )]
    fn new(
        py: Python<'_>,
        weights: &[u8],
        tokenizer_json: Option<&[u8]>,
        vocab_path: Option<String>,
        config_json: Option<String>,
        max_tokens: usize,
        batch: usize,
        max_wait: f64,
        cache_size: usize,
    ) -> PyResult<Self> {
        let inner = run(py, || {
            let cfg = match &config_json {
                Some(json) => BertConfig::from_hf_json(json, max_tokens)?,
                None => BertConfig::MINILM_L6,
            };
            let source = match (tokenizer_json, &vocab_path) {
                (Some(json), _) => TokenizerSource::Json(json),
                (None, Some(path)) => TokenizerSource::VocabFile(path),
                (None, None) => {
                    return Err(Error::invalid("give tokenizer_json or vocab_path"));
                }
            };
            if !(0.0..=1.0).contains(&max_wait) {
                return Err(Error::invalid(format!(
                    "max_wait must be in [0, 1] seconds, got {max_wait}"
                )));
            }
            let model = LocalModel::load(weights, source, cfg)?;
            Batcher::new(
                model,
                BatcherConfig {
                    max_batch: batch,
                    max_wait: Duration::from_secs_f64(max_wait),
                    cache_entries: cache_size,
                },
            )
        })?;
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// Width of the vectors.
    #[getter]
    fn dims(&self) -> usize {
        self.inner.model().dims()
    }

    /// Forward passes run so far (a batch of several calls is one).
    #[getter]
    fn passes(&self) -> u64 {
        self.inner.passes()
    }

    /// Texts whose vectors the cache holds now.
    #[getter]
    fn cached(&self) -> usize {
        self.inner.cached()
    }

    /// The word-piece ids the model sees for `text` (`[CLS] ... [SEP]`, truncated).
    fn token_ids(&self, py: Python<'_>, text: String) -> PyResult<Vec<u32>> {
        run(py, || self.inner.model().token_ids(&text))
    }

    /// Unit vectors of `texts`: float32 `(len(texts), dims)`. Concurrent calls of a few texts
    /// share forward passes; recent texts come from the cache.
    fn embed<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let n = texts.len();
        let out = run_interruptible(py, |interrupt| self.inner.embed(&texts, interrupt))?;
        PyArray1::from_vec(py, out).reshape([n, self.inner.model().dims()])
    }
}
