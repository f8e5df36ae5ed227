//! `memini._core.LocalModel`: the local embedder (`crate::embed`), loaded once and shared.

use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::prelude::*;

use super::errors::{run, run_interruptible};
use crate::embed::{BertConfig, LocalModel};

/// A loaded all-MiniLM-L6-v2: `embed` runs tokenization and the forward pass without the GIL.
#[pyclass(frozen, name = "LocalModel", module = "memini._core")]
pub struct PyLocalModel {
    inner: LocalModel,
}

#[pymethods]
impl PyLocalModel {
    /// Loads the model from the bytes of its `model.safetensors` and `tokenizer.json`.
    #[new]
    fn new(py: Python<'_>, weights: &[u8], tokenizer_json: &[u8]) -> PyResult<Self> {
        let inner = run(py, || {
            LocalModel::load(weights.to_vec(), tokenizer_json, BertConfig::MINILM_L6)
        })?;
        Ok(Self { inner })
    }

    /// Width of the vectors.
    #[getter]
    fn dims(&self) -> usize {
        self.inner.dims()
    }

    /// The word-piece ids the model sees for `text` (`[CLS] ... [SEP]`, truncated).
    fn token_ids(&self, py: Python<'_>, text: String) -> PyResult<Vec<u32>> {
        run(py, || self.inner.token_ids(&text))
    }

    /// Unit vectors of `texts`, `batch` texts per forward pass: float32 `(len(texts), dims)`.
    fn embed<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
        batch: usize,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let n = texts.len();
        let out = run_interruptible(py, |interrupt| self.inner.embed(&texts, batch, interrupt))?;
        PyArray1::from_vec(py, out).reshape([n, self.inner.dims()])
    }
}
