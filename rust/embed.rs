//! The local embedder: a sentence-transformers BERT model (all-MiniLM-L6-v2) run on the CPU.
//!
//! The forward pass is the BERT encoder as `transformers`' `BertModel` computes it (word +
//! position + token-type embeddings, LayerNorm, N post-norm layers of multi-head
//! self-attention and a GELU (erf) feed-forward), followed by sentence-transformers' mean
//! pooling over the tokens and L2 normalisation. Tokenization is the model's own
//! `tokenizer.json` (or its `vocab.txt` with BERT's uncased rules) with the truncation
//! sentence-transformers applies: at most `max_seq_length` word pieces, specials included.
//!
//! The arithmetic is hand-written (`kernels`): weights repacked at load into bfloat16 panels
//! for a SIMD matrix product with f32 accumulation, fused bias + GELU and bias + residual,
//! attention per sequence. Sequences are never padded: the linear layers run over every
//! token of a batch at once (the weights are read once per batch) and attention runs per
//! sequence, so a text's vector does not depend on its batch mates. One short text runs on
//! the calling thread; a batch with enough tokens is split over rayon's threads.

mod kernels;
mod queue;

use std::collections::HashMap;

use rayon::prelude::*;
use tokenizers::{Tokenizer, TruncationParams};

use crate::error::{Error, Interrupt, Result};
pub use kernels::kernel;
use kernels::{Epilogue, Packed};
pub use queue::{Batcher, BatcherConfig};

/// The model's hyper-parameters (the fields of its `config.json` the forward pass needs).
#[derive(Clone, Copy, Debug, PartialEq)]
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

    /// The configuration a Hugging Face `config.json` describes (a BERT with GELU), inputs
    /// truncated at `max_tokens` word pieces.
    pub fn from_hf_json(json: &str, max_tokens: usize) -> Result<Self> {
        let v: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| Error::invalid(format!("the model's config.json does not parse: {e}")))?;
        let int = |key: &str| {
            v.get(key)
                .and_then(serde_json::Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| Error::invalid(format!("the model's config.json has no {key}")))
        };
        if let Some(act) = v.get("hidden_act").and_then(serde_json::Value::as_str) {
            if act != "gelu" {
                return Err(Error::invalid(format!(
                    "the model's config.json asks for hidden_act {act:?}; only \"gelu\" is built in"
                )));
            }
        }
        let cfg = Self {
            hidden: int("hidden_size")?,
            layers: int("num_hidden_layers")?,
            heads: int("num_attention_heads")?,
            intermediate: int("intermediate_size")?,
            eps: v
                .get("layer_norm_eps")
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(1e-12),
            max_tokens: max_tokens.min(int("max_position_embeddings")?),
        };
        let (hidden, heads) = (cfg.hidden, cfg.heads);
        let unfit = if heads == 0 || !hidden.is_multiple_of(heads) {
            format!("hidden_size {hidden} is not split evenly into num_attention_heads {heads}")
        } else if !(hidden / heads).is_multiple_of(16) {
            format!(
                "its attention heads are {} wide (hidden_size {hidden} / num_attention_heads \
                 {heads}), and the local embedder runs heads a multiple of 16 wide",
                hidden / heads
            )
        } else if !cfg.intermediate.is_multiple_of(16) {
            format!(
                "intermediate_size {} is not a multiple of 16",
                cfg.intermediate
            )
        } else if cfg.max_tokens < 2 {
            format!(
                "inputs of at most {} word pieces (max_position_embeddings) hold no text \
                 between [CLS] and [SEP]",
                cfg.max_tokens
            )
        } else {
            return Ok(cfg);
        };
        Err(Error::invalid(format!(
            "the model's config.json describes a shape the local embedder cannot run: {unfit}; \
             use a BERT model of a shape it runs (as all-MiniLM-L6-v2: 384 wide, 12 heads of \
             32) or another embedder (OpenAIEmbedder, or your own Embedder)"
        )))
    }
}

/// Where the word-piece vocabulary comes from.
#[derive(Clone, Copy)]
pub enum TokenizerSource<'a> {
    /// The bytes of a `tokenizer.json`.
    Json(&'a [u8]),
    /// The path of a BERT `vocab.txt` (one word piece per line; uncased rules).
    VocabFile(&'a str),
}

struct Norm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

struct Layer {
    /// Queries (pre-scaled by 1/sqrt(head width)), keys and values in one product.
    qkv: Packed,
    attn_out: Packed,
    attn_norm: Norm,
    up: Packed,
    down: Packed,
    out_norm: Norm,
}

/// A loaded model: tokenizer and weights, immutable and shareable between threads.
pub struct LocalModel {
    cfg: BertConfig,
    tokenizer: Tokenizer,
    words: Vec<f32>,
    /// Position embeddings with the token-type-0 embedding added in (`max_tokens x hidden`).
    positions: Vec<f32>,
    emb_norm: Norm,
    layers: Vec<Layer>,
}

/// Tokens in a batch from which the forward pass splits its work over rayon's threads: below
/// it, handing work to another thread costs more than it saves.
const PARALLEL_TOKENS: usize = 64;

/// Tokens per part of a batch split over threads by texts, when there are enough for more
/// parts than threads: as fast per token as one large part.
const PART_TOKENS: usize = 128;

fn model_err(e: impl std::fmt::Display) -> Error {
    Error::invalid(format!("the embedding model's weights do not load: {e}"))
}

fn run_err(e: impl std::fmt::Display) -> Error {
    Error::storage("local embedder", e)
}

/// The tensors of a `model.safetensors` file, as f32, by name (a leading `bert.` dropped).
fn read_safetensors(bytes: &[u8]) -> Result<Tensors> {
    let head_len = bytes
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n <= bytes.len() - 8)
        .ok_or_else(|| model_err("not a safetensors file"))?;
    let header: HashMap<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + head_len]).map_err(model_err)?;
    let data = &bytes[8 + head_len..];
    let mut out = HashMap::new();
    for (name, meta) in header {
        if name == "__metadata__" {
            continue;
        }
        let bad = || model_err(format!("tensor {name} is malformed"));
        let dtype = meta
            .get("dtype")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(bad)?;
        let shape: Vec<usize> = meta
            .get("shape")
            .and_then(|s| serde_json::from_value(s.clone()).ok())
            .ok_or_else(bad)?;
        let [start, end]: [usize; 2] = meta
            .get("data_offsets")
            .and_then(|s| serde_json::from_value(s.clone()).ok())
            .ok_or_else(bad)?;
        let raw = data.get(start..end).ok_or_else(bad)?;
        let values: Vec<f32> = match dtype {
            "F32" => raw
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            "F16" => raw
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            "BF16" => raw
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            _ => continue, // e.g. the I64 position_ids buffer some exports carry
        };
        if values.len() != shape.iter().product::<usize>() {
            return Err(bad());
        }
        let name = name.strip_prefix("bert.").unwrap_or(&name).to_owned();
        out.insert(name, (shape, values));
    }
    Ok(out)
}

type Tensors = HashMap<String, (Vec<usize>, Vec<f32>)>;

/// The tensor `name`, which must have `shape`.
fn take(t: &mut Tensors, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
    let (got, values) = t
        .remove(name)
        .ok_or_else(|| model_err(format!("no tensor {name}")))?;
    if got != shape {
        return Err(model_err(format!("{name} is {got:?}, expected {shape:?}")));
    }
    Ok(values)
}

/// The LayerNorm `prefix` (its `weight` and `bias`, `width` each).
fn norm(t: &mut Tensors, prefix: &str, width: usize) -> Result<Norm> {
    Ok(Norm {
        gamma: take(t, &format!("{prefix}.weight"), &[width])?,
        beta: take(t, &format!("{prefix}.bias"), &[width])?,
    })
}

impl LocalModel {
    /// Loads a model from its `model.safetensors` bytes and its tokenizer.
    pub fn load(weights: &[u8], tokenizer: TokenizerSource<'_>, cfg: BertConfig) -> Result<Self> {
        let tokenizer = load_tokenizer(tokenizer, cfg.max_tokens)?;
        let mut tensors = read_safetensors(weights)?;
        let h = cfg.hidden;
        let vocab = tokenizer.get_vocab_size(true);
        let words = take(
            &mut tensors,
            "embeddings.word_embeddings.weight",
            &[vocab, h],
        )?;
        // any number of positions >= max_tokens will do; token type 0 is added to each
        let (shape, mut positions) = tensors
            .remove("embeddings.position_embeddings.weight")
            .ok_or_else(|| model_err("no tensor embeddings.position_embeddings.weight"))?;
        if shape.len() != 2 || shape[1] != h || shape[0] < cfg.max_tokens {
            return Err(model_err("fewer position embeddings than max_tokens"));
        }
        positions.truncate(cfg.max_tokens * h);
        let (shape, types) = tensors
            .remove("embeddings.token_type_embeddings.weight")
            .ok_or_else(|| model_err("no tensor embeddings.token_type_embeddings.weight"))?;
        if shape.len() != 2 || shape[1] != h {
            return Err(model_err(
                "token type embeddings are not as wide as the model",
            ));
        }
        for row in positions.chunks_exact_mut(h) {
            for (pos, typ) in row.iter_mut().zip(&types) {
                *pos += typ;
            }
        }
        let emb_norm = norm(&mut tensors, "embeddings.LayerNorm", h)?;
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            reason = "a head is at most a few hundred wide"
        )]
        let scale = (1.0 / ((h / cfg.heads) as f64).sqrt()) as f32;
        // not preallocated: the count comes from a user's config.json, and a missing layer's
        // weights end the loop with an error long before a bogus count would
        let mut layers = Vec::new();
        for i in 0..cfg.layers {
            let layer = format!("encoder.layer.{i}");
            let mut linear = |name: &str, n: usize, k: usize, scale: f32| -> Result<Packed> {
                let w = take(&mut tensors, &format!("{layer}.{name}.weight"), &[n, k])?;
                let b = take(&mut tensors, &format!("{layer}.{name}.bias"), &[n])?;
                Ok(Packed::new(&w, &b, n, k, scale))
            };
            let qkv = Packed::concat(&[
                linear("attention.self.query", h, h, scale)?,
                linear("attention.self.key", h, h, 1.0)?,
                linear("attention.self.value", h, h, 1.0)?,
            ]);
            let attn_out = linear("attention.output.dense", h, h, 1.0)?;
            let up = linear("intermediate.dense", cfg.intermediate, h, 1.0)?;
            let down = linear("output.dense", h, cfg.intermediate, 1.0)?;
            layers.push(Layer {
                qkv,
                attn_out,
                attn_norm: norm(
                    &mut tensors,
                    &format!("{layer}.attention.output.LayerNorm"),
                    h,
                )?,
                up,
                down,
                out_norm: norm(&mut tensors, &format!("{layer}.output.LayerNorm"), h)?,
            });
        }
        Ok(Self {
            cfg,
            tokenizer,
            words,
            positions,
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

    /// Word-piece ids of each of `texts`.
    pub fn token_ids_many(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        if texts.len() == 1 {
            return Ok(vec![self.token_ids(texts[0])?]);
        }
        let encodings = self
            .tokenizer
            .encode_batch_fast(texts.to_vec(), true)
            .map_err(run_err)?;
        Ok(encodings
            .into_iter()
            .map(|e| e.get_ids().to_vec())
            .collect())
    }

    /// Sequences of word-piece ids through the encoder, mean-pooled and normalised, into
    /// `out` (`seqs.len() x dims`). Asks `interrupt` before each layer.
    ///
    /// A batch of many tokens is split over rayon's threads by texts (each part runs the
    /// whole encoder, with no hand-off between layers); one long text by rows, layer by layer.
    pub fn forward(&self, seqs: &[&[u32]], out: &mut [f32], interrupt: &Interrupt) -> Result<()> {
        let h = self.cfg.hidden;
        let seqs: Vec<&[u32]> = seqs
            .iter()
            .map(|s| &s[..s.len().min(self.cfg.max_tokens)])
            .collect();
        let tokens: usize = seqs.iter().map(|s| s.len()).sum();
        let threads = rayon::current_num_threads();
        if tokens < PARALLEL_TOKENS || threads < 2 {
            return self.encode(&seqs, out, interrupt, false);
        }
        if seqs.len() == 1 {
            return self.encode(&seqs, out, interrupt, true);
        }
        // parts of about equal tokens, at least one per thread and a few more when there are
        // enough tokens (a thread that is slow to get a core then holds up less)
        let parts = (tokens / PART_TOKENS).clamp(threads, 4 * threads);
        let mut bounds = vec![0];
        let mut sum = 0;
        for (i, s) in seqs.iter().enumerate() {
            sum += s.len();
            if sum * parts >= tokens * bounds.len() && i + 1 < seqs.len() {
                bounds.push(i + 1);
            }
        }
        bounds.push(seqs.len());
        let mut jobs = Vec::with_capacity(bounds.len());
        let mut rest = out;
        for w in bounds.windows(2) {
            let (part, tail) = rest.split_at_mut((w[1] - w[0]) * h);
            jobs.push((&seqs[w[0]..w[1]], part));
            rest = tail;
        }
        jobs.into_par_iter()
            .try_for_each(|(seqs, out)| self.encode(seqs, out, interrupt, false))
    }

    /// [`LocalModel::forward`] of `seqs` (already truncated) on this thread, or with each
    /// product and norm split by rows over rayon's threads when `parallel`.
    fn encode(
        &self,
        seqs: &[&[u32]],
        out: &mut [f32],
        interrupt: &Interrupt,
        parallel: bool,
    ) -> Result<()> {
        let h = self.cfg.hidden;
        let tokens: usize = seqs.iter().map(|s| s.len()).sum();
        // row offsets of each sequence
        let mut starts = Vec::with_capacity(seqs.len() + 1);
        starts.push(0);
        for s in seqs {
            starts.push(starts.last().copied().unwrap_or(0) + s.len());
        }
        let mut x = vec![0f32; tokens * h];
        let vocab = self.words.len() / h;
        for (row, (t, &id)) in x
            .chunks_exact_mut(h)
            .zip(seqs.iter().flat_map(|s| s.iter().enumerate()))
        {
            let id = (id as usize).min(vocab - 1);
            let word = &self.words[id * h..(id + 1) * h];
            let pos = &self.positions[t * h..(t + 1) * h];
            for ((v, w), p) in row.iter_mut().zip(word).zip(pos) {
                *v = w + p;
            }
        }
        #[allow(clippy::cast_possible_truncation, reason = "an epsilon")]
        let eps = self.cfg.eps as f32;
        let norm = |x: &mut [f32], n: &Norm| {
            for_rows(x, h, parallel, |rows| {
                kernels::layer_norm(rows, &n.gamma, &n.beta, eps);
            });
        };
        norm(&mut x, &self.emb_norm);
        let mut qkv = vec![0f32; tokens * 3 * h];
        let mut ctx = vec![0f32; tokens * h];
        let mut attended = vec![0f32; tokens * h];
        let mut up = vec![0f32; tokens * self.cfg.intermediate];
        for layer in &self.layers {
            interrupt()?;
            linear(&layer.qkv, &x, &mut qkv, Epilogue::None, parallel);
            {
                let mut parts = Vec::with_capacity(seqs.len());
                let mut rest = ctx.as_mut_slice();
                for w in starts.windows(2) {
                    let (part, tail) = rest.split_at_mut((w[1] - w[0]) * h);
                    parts.push((&qkv[w[0] * 3 * h..w[1] * 3 * h], part));
                    rest = tail;
                }
                let heads = self.cfg.heads;
                let run = |(q, o): (&[f32], &mut [f32])| kernels::attention(q, o, h, heads);
                if parallel {
                    parts.into_par_iter().for_each(run);
                } else {
                    parts.into_iter().for_each(run);
                }
            }
            linear(
                &layer.attn_out,
                &ctx,
                &mut attended,
                Epilogue::Residual(&x),
                parallel,
            );
            norm(&mut attended, &layer.attn_norm);
            linear(&layer.up, &attended, &mut up, Epilogue::Gelu, parallel);
            linear(
                &layer.down,
                &up,
                &mut x,
                Epilogue::Residual(&attended),
                parallel,
            );
            norm(&mut x, &layer.out_norm);
        }
        for (w, o) in starts.windows(2).zip(out.chunks_exact_mut(h)) {
            kernels::mean_pool_normalised(&x[w[0] * h..w[1] * h], o);
        }
        Ok(())
    }
}

/// `f` over `x` in whole rows of `width`: all at once, or split in about one part per
/// rayon thread.
fn for_rows(x: &mut [f32], width: usize, parallel: bool, f: impl Fn(&mut [f32]) + Sync + Send) {
    if parallel {
        let rows = x.len() / width;
        let part = rows.div_ceil(rayon::current_num_threads()).max(1);
        x.par_chunks_mut(part * width).for_each(f);
    } else {
        f(x);
    }
}

/// `out = epilogue(x W^T + b)`, split over rayon's threads by rows when `parallel`.
fn linear(packed: &Packed, x: &[f32], out: &mut [f32], epilogue: Epilogue<'_>, parallel: bool) {
    let n = packed.n();
    let k = x.len() / (out.len() / n).max(1);
    if !parallel {
        packed.apply(x, out, epilogue);
        return;
    }
    let rows = out.len() / n;
    let part = rows.div_ceil(rayon::current_num_threads()).max(1);
    out.par_chunks_mut(part * n)
        .zip(x.par_chunks(part * k))
        .enumerate()
        .for_each(|(i, (out, x))| {
            let epilogue = match epilogue {
                Epilogue::Residual(r) => {
                    Epilogue::Residual(&r[i * part * n..i * part * n + out.len()])
                }
                other => other,
            };
            packed.apply(x, out, epilogue);
        });
}

fn load_tokenizer(source: TokenizerSource<'_>, max_tokens: usize) -> Result<Tokenizer> {
    let mut tokenizer = match source {
        TokenizerSource::Json(bytes) => Tokenizer::from_bytes(bytes).map_err(|e| {
            Error::invalid(format!("the model's tokenizer.json does not load: {e}"))
        })?,
        TokenizerSource::VocabFile(path) => bert_tokenizer(path).map_err(|e| {
            Error::invalid(format!("the model's vocab.txt ({path}) does not load: {e}"))
        })?,
    };
    // tokenizer.json ships fixed padding to 128 and truncation at 128; sentence-transformers
    // overrides both: truncation at max_seq_length (specials included), no padding.
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: max_tokens,
            ..TruncationParams::default()
        }))
        .map_err(model_err)?;
    tokenizer.with_padding(None);
    Ok(tokenizer)
}

/// BERT's uncased tokenizer over the word pieces of `vocab_path`.
fn bert_tokenizer(vocab_path: &str) -> tokenizers::Result<Tokenizer> {
    use tokenizers::models::wordpiece::WordPiece;
    use tokenizers::normalizers::BertNormalizer;
    use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
    use tokenizers::processors::bert::BertProcessing;
    use tokenizers::Model;

    let model = WordPiece::from_file(vocab_path)
        .unk_token("[UNK]".into())
        .build()?;
    let id = |t: &str| {
        model
            .token_to_id(t)
            .ok_or_else(|| format!("vocab.txt has no {t}"))
    };
    let processing = BertProcessing::new(
        ("[SEP]".into(), id("[SEP]")?),
        ("[CLS]".into(), id("[CLS]")?),
    );
    let mut tokenizer = Tokenizer::new(model);
    tokenizer
        .with_normalizer(Some(BertNormalizer::new(true, true, None, true)))?
        .with_pre_tokenizer(Some(BertPreTokenizer))
        .with_post_processor(Some(processing));
    Ok(tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_model_files_are_invalid_arguments() {
        let err = LocalModel::load(
            b"not safetensors",
            TokenizerSource::Json(b"{}"),
            BertConfig::MINILM_L6,
        )
        .err()
        .map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|m| m.contains("tokenizer.json does not load")),
            "{err:?}"
        );
    }

    #[test]
    fn a_hugging_face_config_gives_the_shape() {
        let json = r#"{"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
            "intermediate_size": 1536, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
            "max_position_embeddings": 512}"#;
        assert_eq!(
            BertConfig::from_hf_json(json, 256).ok(),
            Some(BertConfig::MINILM_L6)
        );
        let err = BertConfig::from_hf_json(r#"{"hidden_size": 384}"#, 256).err();
        assert!(err.is_some_and(|e| e.to_string().contains("num_hidden_layers")));
        // attention's blocks need heads a multiple of 16 wide (384 / 16 heads = 24): the
        // error says which rule the shape breaks, and what to use instead
        let err = BertConfig::from_hf_json(&json.replace(": 12,", ": 16,"), 256).err();
        let msg = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.contains("heads are 24 wide") && msg.contains("another embedder"),
            "{msg}"
        );
        let err = BertConfig::from_hf_json(&json.replace(": 12,", ": 7,"), 256).err();
        assert!(err.is_some_and(|e| e.to_string().contains("not split evenly")));
    }
}
