//! The local embedder: a sentence-transformers BERT model (all-MiniLM-L6-v2) run on the CPU.
//!
//! The forward pass is the BERT encoder exactly as `transformers`' `BertModel` computes it
//! (word + position + token-type embeddings, LayerNorm, N post-norm layers of multi-head
//! self-attention and a GELU (erf) feed-forward), followed by sentence-transformers' mean
//! pooling over the real tokens and L2 normalisation. Tokenization is the model's own
//! `tokenizer.json` (BERT normalisation, WordPiece, `[CLS] ... [SEP]`) with the truncation
//! sentence-transformers applies: at most `max_seq_length` word pieces, specials included.
//!
//! Texts are sorted by length and embedded in batches padded to their longest member, so
//! padding costs little; padded positions are masked out of attention and pooling, which
//! keeps each text's vector independent of its batch mates.

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{layer_norm, linear, Embedding, LayerNorm, Linear, VarBuilder};
use tokenizers::{Tokenizer, TruncationParams};

use crate::error::{Error, Interrupt, Result};

/// The model's hyper-parameters (the fields of its `config.json` the forward pass needs).
#[derive(Clone, Copy, Debug)]
pub struct BertConfig {
    /// Width of every hidden state (and of the output vector).
    pub hidden: usize,
    /// Encoder layers.
    pub layers: usize,
    /// Attention heads per layer.
    pub heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate: usize,
    /// LayerNorm epsilon.
    pub eps: f64,
    /// Longest input, in word pieces with the specials (sentence-transformers' `max_seq_length`).
    pub max_tokens: usize,
}

impl BertConfig {
    /// all-MiniLM-L6-v2: 6 layers, 12 heads, 384 wide, inputs truncated at 256 word pieces.
    pub const MINILM_L6: Self = Self {
        hidden: 384,
        layers: 6,
        heads: 12,
        intermediate: 1536,
        eps: 1e-12,
        max_tokens: 256,
    };
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    up: Linear,
    down: Linear,
    out_norm: LayerNorm,
}

/// A loaded model: tokenizer and weights, immutable and shareable between threads.
pub struct LocalModel {
    cfg: BertConfig,
    tokenizer: Tokenizer,
    words: Embedding,
    positions: Tensor,
    token_type: Tensor,
    emb_norm: LayerNorm,
    layers: Vec<Layer>,
}

fn model_err(e: impl std::fmt::Display) -> Error {
    Error::invalid(format!("the embedding model's weights do not load: {e}"))
}

fn run_err(e: impl std::fmt::Display) -> Error {
    Error::storage("local embedder", e)
}

impl LocalModel {
    /// Loads a model from its `model.safetensors` and `tokenizer.json` bytes.
    pub fn load(weights: Vec<u8>, tokenizer_json: &[u8], cfg: BertConfig) -> Result<Self> {
        let mut tokenizer = Tokenizer::from_bytes(tokenizer_json).map_err(|e| {
            Error::invalid(format!("the model's tokenizer.json does not load: {e}"))
        })?;
        // tokenizer.json ships fixed padding to 128 and truncation at 128; sentence-transformers
        // overrides both: truncation at max_seq_length (specials included), padding per batch.
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: cfg.max_tokens,
                ..TruncationParams::default()
            }))
            .map_err(model_err)?;
        tokenizer.with_padding(None);

        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(model_err)?;
        let h = cfg.hidden;
        let emb = vb.pp("embeddings");
        let vocab = emb
            .get_unchecked("word_embeddings.weight")
            .map_err(model_err)?;
        if vocab.dim(1).map_err(model_err)? != h {
            return Err(model_err("word embeddings are not as wide as the model"));
        }
        let words = Embedding::new(vocab, h);
        let positions = emb
            .get_unchecked("position_embeddings.weight")
            .map_err(model_err)?;
        if positions.dim(0).map_err(model_err)? < cfg.max_tokens {
            return Err(model_err("fewer position embeddings than max_tokens"));
        }
        let token_type = emb
            .get_unchecked("token_type_embeddings.weight")
            .and_then(|t| t.get(0))
            .map_err(model_err)?;
        let emb_norm = layer_norm(h, cfg.eps, emb.pp("LayerNorm")).map_err(model_err)?;
        let layers = (0..cfg.layers)
            .map(|i| {
                let l = vb.pp(format!("encoder.layer.{i}"));
                let a = l.pp("attention");
                Ok(Layer {
                    query: linear(h, h, a.pp("self.query"))?,
                    key: linear(h, h, a.pp("self.key"))?,
                    value: linear(h, h, a.pp("self.value"))?,
                    attn_out: linear(h, h, a.pp("output.dense"))?,
                    attn_norm: layer_norm(h, cfg.eps, a.pp("output.LayerNorm"))?,
                    up: linear(h, cfg.intermediate, l.pp("intermediate.dense"))?,
                    down: linear(cfg.intermediate, h, l.pp("output.dense"))?,
                    out_norm: layer_norm(h, cfg.eps, l.pp("output.LayerNorm"))?,
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(model_err)?;
        Ok(Self {
            cfg,
            tokenizer,
            words,
            positions,
            token_type,
            emb_norm,
            layers,
        })
    }

    /// Width of the vectors this model returns.
    #[must_use]
    pub fn dims(&self) -> usize {
        self.cfg.hidden
    }

    /// Word-piece ids of `text` as the model sees it: `[CLS] ... [SEP]`, truncated.
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.tokenizer.encode_fast(text, true).map_err(run_err)?;
        Ok(enc.get_ids().to_vec())
    }

    /// Embeds `texts`, `batch` at a time: row-major `texts.len() x dims` unit vectors. Asks
    /// `interrupt` before each batch (a forward pass takes tens of milliseconds).
    pub fn embed(&self, texts: &[String], batch: usize, interrupt: &Interrupt) -> Result<Vec<f32>> {
        if batch == 0 {
            return Err(Error::invalid("batch must be >= 1"));
        }
        let inputs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let encodings = self
            .tokenizer
            .encode_batch_fast(inputs, true)
            .map_err(run_err)?;
        let ids: Vec<&[u32]> = encodings
            .iter()
            .map(tokenizers::Encoding::get_ids)
            .collect();
        // Longest first, so each batch is padded to a length close to all its members'.
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(ids[i].len()));
        let dims = self.dims();
        let mut out = vec![0f32; texts.len() * dims];
        for chunk in order.chunks(batch) {
            interrupt()?;
            let rows: Vec<&[u32]> = chunk.iter().map(|&i| ids[i]).collect();
            let vectors = self.forward(&rows).map_err(run_err)?;
            for (&i, v) in chunk.iter().zip(vectors.chunks_exact(dims)) {
                out[i * dims..(i + 1) * dims].copy_from_slice(v);
            }
        }
        Ok(out)
    }

    /// One padded batch through the encoder, mean-pooled and normalised: `rows.len() x dims`.
    fn forward(&self, rows: &[&[u32]]) -> candle_core::Result<Vec<f32>> {
        let (n, width) = (rows.len(), self.cfg.hidden);
        let len = rows.iter().map(|r| r.len()).max().unwrap_or(0).max(1);
        let mut ids = vec![0u32; n * len];
        let mut mask = vec![0f32; n * len];
        for (r, row) in rows.iter().enumerate() {
            ids[r * len..r * len + row.len()].copy_from_slice(row);
            mask[r * len..r * len + row.len()].fill(1.0);
        }
        let dev = Device::Cpu;
        let ids = Tensor::from_vec(ids, (n, len), &dev)?;
        let mask = Tensor::from_vec(mask, (n, len), &dev)?;

        let embedded = self
            .words
            .forward(&ids)?
            .broadcast_add(&self.positions.narrow(0, 0, len)?)?
            .broadcast_add(&self.token_type)?;
        let mut states = self.emb_norm.forward(&embedded)?;
        // Padded keys get a large negative bias before the softmax (transformers uses the
        // dtype's minimum); their weight is exactly 0 after it.
        let bias = ((mask.clone() - 1.0)? * 1e30)?.reshape((n, 1, 1, len))?;
        let heads = self.cfg.heads;
        let head_width = width / heads;
        #[allow(
            clippy::cast_precision_loss,
            reason = "a head is at most a few hundred wide"
        )]
        let scale = 1.0 / (head_width as f64).sqrt();
        let split = |y: Tensor| -> candle_core::Result<Tensor> {
            y.reshape((n, len, heads, head_width))?
                .transpose(1, 2)?
                .contiguous()
        };
        for layer in &self.layers {
            let query = split((layer.query.forward(&states)? * scale)?)?;
            let key = split(layer.key.forward(&states)?)?;
            let value = split(layer.value.forward(&states)?)?;
            let scores = query
                .matmul(&key.t()?.contiguous()?)?
                .broadcast_add(&bias)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let context = probs
                .matmul(&value)?
                .transpose(1, 2)?
                .contiguous()?
                .reshape((n, len, width))?;
            let attended = layer
                .attn_norm
                .forward(&(layer.attn_out.forward(&context)? + &states)?)?;
            let fed = layer
                .down
                .forward(&layer.up.forward(&attended)?.gelu_erf()?)?;
            states = layer.out_norm.forward(&(fed + attended)?)?;
        }
        // Mean over the real tokens, then unit length.
        let weights = mask.unsqueeze(2)?;
        let summed = states.broadcast_mul(&weights)?.sum(1)?;
        let mean = summed.broadcast_div(&weights.sum(1)?)?;
        let norm = mean.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?.maximum(1e-12)?;
        mean.broadcast_div(&norm)?.flatten_all()?.to_vec1::<f32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_model_files_are_invalid_arguments() {
        let err = LocalModel::load(b"not safetensors".to_vec(), b"{}", BertConfig::MINILM_L6)
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|m| m.contains("tokenizer.json does not load")),
            "{err:?}"
        );
    }
}
