//! Helpers shared by the core test binaries.

#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(
    clippy::cast_precision_loss,
    reason = "24-bit integers made into f32 exactly"
)]

use memini::types::Unstamped;
use memini::{FilterSpec, Memory, Metric, NewMemory, Options};

pub fn now() -> i64 {
    memini::types::now_micros()
}

pub fn mem(id: &str, ns: &str, content: &str, vector: Option<Vec<f32>>) -> NewMemory {
    NewMemory {
        memory: Memory {
            id: id.into(),
            namespace: ns.into(),
            content: content.into(),
            metadata: "{}".into(),
            tags: vec!["t".into()],
            importance: 0.5,
            ..Memory::default()
        },
        unstamped: Unstamped {
            created_at: true,
            updated_at: true,
            last_accessed_at: true,
        },
        embedding: vector,
    }
}

pub fn live() -> FilterSpec {
    FilterSpec {
        now: now(),
        ..FilterSpec::default()
    }
}

pub fn opts(dims: usize) -> Options {
    Options {
        dims: Some(dims),
        metric: Some(Metric::L2),
        ..Options::default()
    }
}

/// A deterministic pseudo-random vector (xorshift), values in [-1, 1).
pub fn vector(seed: u64, dims: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..dims)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}
