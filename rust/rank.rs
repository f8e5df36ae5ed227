//! The ranking helpers of API.md section 2 (salience, confidence decay, quality), the one
//! implementation: `recall`'s quality rerank uses it in the core, and Python's `Memory`
//! helpers call it through the binding.

use crate::types::{Micros, Tier};

/// Recency half-life H: 7 days.
const HALF_LIFE_US: f64 = 7.0 * 86_400_000_000.0;
/// One week.
const WEEK_US: f64 = 7.0 * 86_400_000_000.0;
const CONFIDENCE_DECAY_PER_WEEK: f64 = 0.05;
const CONFIDENCE_FLOOR: f64 = 0.05;

/// The fields of a memory its ranking reads. Timestamps None: not stamped yet.
#[derive(Clone, Copy, Debug)]
pub struct Standing {
    /// Tier.
    pub tier: Tier,
    /// Importance (clamped to [0, 1] here).
    pub importance: f64,
    /// Confidence; None = not tracked.
    pub confidence: Option<f64>,
    /// Last update.
    pub updated_at: Option<Micros>,
    /// Last access.
    pub last_accessed_at: Option<Micros>,
    /// Access counter (negative counts as 0).
    pub access_count: i64,
}

/// Clamp to [0, 1]; NaN passes through (as in the upstream Go code).
fn clamp01(x: f64) -> f64 {
    x.clamp(0.0, 1.0)
}

fn tier_weight(t: Tier) -> f64 {
    match t {
        Tier::Procedural => 0.95,
        Tier::Semantic => 0.90,
        Tier::Episodic => 0.55,
        Tier::Working => 0.30,
    }
}

/// Whether the tier is long-term (semantic, procedural).
fn long_term(t: Tier) -> bool {
    matches!(t, Tier::Semantic | Tier::Procedural)
}

#[allow(clippy::cast_precision_loss, reason = "µs differences far below 2^53")]
fn elapsed(now: Micros, since: Micros) -> f64 {
    now.saturating_sub(since) as f64
}

impl Standing {
    /// `clamp01(w_tier * (0.5 + 0.5 * clamp01(importance)))`.
    #[must_use]
    pub fn salience(&self) -> f64 {
        clamp01(tier_weight(self.tier) * (0.5 + 0.5 * clamp01(self.importance)))
    }

    /// 1 for short-term tiers or untracked confidence; else the confidence, decayed 0.05 per
    /// week after the first since max(updated_at, last_accessed_at), floor 0.05.
    #[must_use]
    pub fn effective_confidence(&self, now: Micros) -> f64 {
        let Some(c) = self.confidence.filter(|_| long_term(self.tier)) else {
            return 1.0;
        };
        let c = clamp01(c);
        let Some(anchor) = self.updated_at.max(self.last_accessed_at) else {
            return c;
        };
        let weeks = elapsed(now, anchor) / WEEK_US;
        if weeks <= 1.0 {
            return c;
        }
        CONFIDENCE_FLOOR.max(c - CONFIDENCE_DECAY_PER_WEEK * (weeks - 1.0))
    }

    /// `1 + ln(1 + access_count)`.
    fn usage(&self) -> f64 {
        #[allow(
            clippy::cast_precision_loss,
            reason = "a count, as Python's float(int)"
        )]
        let n = self.access_count.max(0) as f64;
        1.0 + n.ln_1p()
    }

    /// `salience * effective_confidence * (1 + ln(1 + access_count))`.
    #[must_use]
    pub fn durable_score(&self, now: Micros) -> f64 {
        self.salience() * self.effective_confidence(now) * self.usage()
    }

    /// `exp(-age / H)`, age since last access clamped at 0; 1 when never stamped.
    #[must_use]
    pub fn recency(&self, now: Micros) -> f64 {
        self.last_accessed_at
            .map_or(1.0, |t| (-(elapsed(now, t) / HALF_LIFE_US).max(0.0)).exp())
    }

    /// `durable_score` for long-term tiers, else `salience * usage * recency`.
    #[must_use]
    pub fn quality(&self, now: Micros) -> f64 {
        if long_term(self.tier) {
            self.durable_score(now)
        } else {
            self.salience() * self.usage() * self.recency(now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Micros = 86_400_000_000;

    fn s(tier: Tier) -> Standing {
        Standing {
            tier,
            importance: 0.0,
            confidence: None,
            updated_at: Some(0),
            last_accessed_at: Some(0),
            access_count: 0,
        }
    }

    #[test]
    fn formulas_match_api_md() {
        assert!((s(Tier::Semantic).salience() - 0.45).abs() < 1e-12);
        let mut m = s(Tier::Procedural);
        m.importance = 2.0;
        assert!((m.salience() - 0.95).abs() < 1e-12);
        m.confidence = Some(0.8);
        assert!((m.effective_confidence(7 * DAY) - 0.8).abs() < 1e-12);
        assert!((m.effective_confidence(21 * DAY) - 0.7).abs() < 1e-12);
        assert!((m.effective_confidence(10_000 * DAY) - CONFIDENCE_FLOOR).abs() < 1e-12);
        m.access_count = 3;
        let q = m.quality(0);
        assert!((q - 0.95 * 0.8 * (1.0 + 4f64.ln())).abs() < 1e-12);
        let w = s(Tier::Working);
        assert!((w.quality(7 * DAY) - 0.15 * (-1f64).exp()).abs() < 1e-12);
        assert!((w.recency(-DAY) - 1.0).abs() < 1e-12);
    }
}
