//! Many callers, one model: concurrent embed calls are batched together, and recent texts'
//! vectors are remembered.
//!
//! A call's texts are looked up in a small LRU cache, the misses tokenized on the caller's
//! thread and queued. A queued call starts a batch of everything queued (up to `max_batch`
//! texts) at once when no batch is running; while one runs, calls queue up behind it and go
//! together when it ends, or after `max_wait` beside it when a core is free for them. So a
//! lone call never waits, and callers arriving together share one pass over the weights.
//! A text's vector does not depend on its batch mates (`LocalModel::forward`), so every
//! caller gets exactly the vectors it would get alone.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::LocalModel;
use crate::error::{uninterrupted, Error, Interrupt, Result};

/// How a [`Batcher`] groups calls and how much it remembers.
#[derive(Clone, Copy, Debug)]
pub struct BatcherConfig {
    /// Most texts in one forward pass (larger calls run alone, in parts of this size).
    pub max_batch: usize,
    /// Longest a queued call waits for a running batch before starting its own beside it.
    pub max_wait: Duration,
    /// Texts whose vectors are remembered (0: none).
    pub cache_entries: usize,
}

/// Texts longer than this (in bytes) are not cached: the cache's memory stays bounded by
/// `cache_entries * (MAX_CACHED_TEXT + dims * 4)`.
const MAX_CACHED_TEXT: usize = 2048;

/// The model behind a queue that batches concurrent calls, and a cache of recent vectors.
pub struct Batcher {
    model: LocalModel,
    cfg: BatcherConfig,
    state: Mutex<State>,
    changed: Condvar,
    cache: Mutex<Lru>,
    passes: AtomicU64,
}

#[derive(Default)]
struct State {
    next_ticket: u64,
    /// Calls waiting for a batch: their ticket and token ids.
    queue: VecDeque<(u64, Vec<Vec<u32>>)>,
    queued_texts: usize,
    running: usize,
    /// Finished calls' vectors, until their caller takes them.
    done: HashMap<u64, Vec<f32>>,
}

impl Batcher {
    /// A queue in front of `model`.
    pub fn new(model: LocalModel, cfg: BatcherConfig) -> Result<Self> {
        if cfg.max_batch == 0 {
            return Err(Error::invalid("batch must be >= 1"));
        }
        Ok(Self {
            model,
            cfg,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            cache: Mutex::new(Lru::new(cfg.cache_entries)),
            passes: AtomicU64::new(0),
        })
    }

    /// The model.
    #[must_use]
    pub fn model(&self) -> &LocalModel {
        &self.model
    }

    /// Forward passes run so far (a batch of several calls is one).
    #[must_use]
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// Texts whose vectors the cache holds now.
    #[must_use]
    pub fn cached(&self) -> usize {
        self.cache.lock().map.len()
    }

    /// Unit vectors of `texts`, row-major `texts.len() x dims`. A call of more than
    /// `max_batch` texts runs on its own, asking `interrupt` between layers.
    pub fn embed(&self, texts: &[String], interrupt: &Interrupt) -> Result<Vec<f32>> {
        let dims = self.model.dims();
        let mut out = vec![0f32; texts.len() * dims];
        let mut missing: Vec<usize> = Vec::with_capacity(texts.len());
        {
            let mut cache = self.cache.lock();
            for (i, text) in texts.iter().enumerate() {
                match cache.get(text) {
                    Some(v) => out[i * dims..(i + 1) * dims].copy_from_slice(v),
                    None => missing.push(i),
                }
            }
        }
        if missing.is_empty() {
            return Ok(out);
        }
        let inputs: Vec<&str> = missing.iter().map(|&i| texts[i].as_str()).collect();
        let ids = self.model.token_ids_many(&inputs)?;
        let vectors = if ids.len() > self.cfg.max_batch {
            let rows: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
            let mut v = vec![0f32; rows.len() * dims];
            for (part, dst) in rows
                .chunks(self.cfg.max_batch)
                .zip(v.chunks_mut(self.cfg.max_batch * dims))
            {
                self.passes.fetch_add(1, Ordering::Relaxed);
                self.model.forward(part, dst, interrupt)?;
            }
            v
        } else {
            let n = ids.len();
            let v = self.queued(ids);
            if v.len() != n * dims {
                return Err(Error::storage("local embedder", "the forward pass failed"));
            }
            v
        };
        let mut cache = self.cache.lock();
        for (&i, v) in missing.iter().zip(vectors.chunks_exact(dims)) {
            out[i * dims..(i + 1) * dims].copy_from_slice(v);
            if texts[i].len() <= MAX_CACHED_TEXT {
                cache.put(&texts[i], v);
            }
        }
        Ok(out)
    }

    /// Queues one call's token ids and returns their vectors once a batch has run them
    /// (possibly one this thread runs for itself and others).
    fn queued(&self, ids: Vec<Vec<u32>>) -> Vec<f32> {
        let threads = rayon::current_num_threads().max(1);
        let deadline = Instant::now() + self.cfg.max_wait;
        let mut st = self.state.lock();
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.queued_texts += ids.len();
        st.queue.push_back((ticket, ids));
        loop {
            if let Some(v) = st.done.remove(&ticket) {
                return v;
            }
            let now = Instant::now();
            let start = !st.queue.is_empty()
                && (st.running == 0
                    || st.queued_texts >= self.cfg.max_batch
                    || (now >= deadline && st.running < threads));
            if !start {
                if now < deadline && st.running < threads {
                    self.changed.wait_until(&mut st, deadline);
                } else {
                    self.changed.wait(&mut st);
                }
                continue;
            }
            // take the queue's front, up to max_batch texts (at least one call)
            let mut batch = Vec::new();
            let mut texts = 0;
            while let Some((_, ids)) = st.queue.front() {
                if !batch.is_empty() && texts + ids.len() > self.cfg.max_batch {
                    break;
                }
                texts += ids.len();
                batch.extend(st.queue.pop_front());
            }
            st.queued_texts -= texts;
            st.running += 1;
            drop(st);
            // a panic in the pass (a bug) must not leave the callers of its batch waiting:
            // they get no vectors, which `embed` reports as an error
            let results =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run(&batch)))
                    .unwrap_or_else(|_| batch.iter().map(|(t, _)| (*t, Vec::new())).collect());
            st = self.state.lock();
            st.running -= 1;
            st.done.extend(results);
            self.changed.notify_all();
        }
    }

    /// One forward pass over the calls of `batch`: each call's vectors.
    fn run(&self, batch: &[(u64, Vec<Vec<u32>>)]) -> Vec<(u64, Vec<f32>)> {
        let dims = self.model.dims();
        let rows: Vec<&[u32]> = batch
            .iter()
            .flat_map(|(_, ids)| ids.iter().map(Vec::as_slice))
            .collect();
        let mut out = vec![0f32; rows.len() * dims];
        self.passes.fetch_add(1, Ordering::Relaxed);
        // a batch serves several callers: one caller's Ctrl-C does not stop the others'
        if self
            .model
            .forward(&rows, &mut out, &uninterrupted())
            .is_err()
        {
            return batch.iter().map(|(t, _)| (*t, Vec::new())).collect();
        }
        let mut at = 0;
        batch
            .iter()
            .map(|(ticket, ids)| {
                let v = out[at..at + ids.len() * dims].to_vec();
                at += ids.len() * dims;
                (*ticket, v)
            })
            .collect()
    }
}

/// A least-recently-used map from text to vector, of at most `capacity` entries.
struct Lru {
    capacity: usize,
    tick: u64,
    map: HashMap<String, (Vec<f32>, u64)>,
    /// Last use -> text, oldest first.
    order: BTreeMap<u64, String>,
}

impl Lru {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            tick: 0,
            map: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    fn get(&mut self, text: &str) -> Option<&[f32]> {
        let entry = self.map.get_mut(text)?;
        self.tick += 1;
        let text = self.order.remove(&entry.1)?;
        entry.1 = self.tick;
        self.order.insert(self.tick, text);
        Some(&entry.0)
    }

    fn put(&mut self, text: &str, vector: &[f32]) {
        if self.capacity == 0 {
            return;
        }
        self.tick += 1;
        if let Some(entry) = self.map.get_mut(text) {
            self.order.remove(&entry.1);
            entry.1 = self.tick;
        } else {
            if self.map.len() >= self.capacity {
                if let Some((_, oldest)) = self.order.pop_first() {
                    self.map.remove(&oldest);
                }
            }
            self.map
                .insert(text.to_owned(), (vector.to_vec(), self.tick));
        }
        self.order.insert(self.tick, text.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_the_most_recently_used() {
        let mut lru = Lru::new(2);
        lru.put("a", &[1.0]);
        lru.put("b", &[2.0]);
        assert_eq!(lru.get("a"), Some(&[1.0][..])); // a is now newer than b
        lru.put("c", &[3.0]);
        assert_eq!(lru.get("b"), None);
        assert_eq!(lru.get("a"), Some(&[1.0][..]));
        assert_eq!(lru.get("c"), Some(&[3.0][..]));
        assert_eq!((lru.map.len(), lru.order.len()), (2, 2));
        let mut none = Lru::new(0);
        none.put("a", &[1.0]);
        assert_eq!(none.get("a"), None);
    }
}
