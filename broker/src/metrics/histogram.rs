//! A fixed-bucket latency histogram of atomics: recording is a few relaxed adds, no lock, so
//! every request can be timed. Scrapes read it as Prometheus buckets; the console's history
//! takes quantiles from the difference of two readings (what happened in between).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (ms) of the buckets, Prometheus' `le`; the last bucket is `+Inf`. From a
/// quarter millisecond (an in-memory produce) to a minute (a long-poll fetch's cap).
pub const BUCKET_BOUNDS_MS: [f64; 18] = [
    0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0,
    60000.0,
];
const BUCKETS: usize = BUCKET_BOUNDS_MS.len() + 1;

#[derive(Debug)]
pub struct LatencyHistogram {
    /// Non-cumulative: `buckets[i]` counts samples in `(bound[i-1], bound[i]]`.
    buckets: [AtomicU64; BUCKETS],
    sum_us: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_us: AtomicU64::new(0),
        }
    }
}

impl LatencyHistogram {
    pub fn record(&self, elapsed: Duration) {
        let ms = elapsed.as_secs_f64() * 1000.0;
        let bucket = BUCKET_BOUNDS_MS.iter().position(|b| ms <= *b).unwrap_or(BUCKETS - 1);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The counts and sum as of now.
    pub fn read(&self) -> HistogramReading {
        HistogramReading {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            sum_ms: self.sum_us.load(Ordering::Relaxed) as f64 / 1000.0,
        }
    }
}

/// A histogram's counts at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HistogramReading {
    buckets: [u64; BUCKETS],
    pub sum_ms: f64,
}

impl Default for HistogramReading {
    fn default() -> Self {
        HistogramReading {
            buckets: [0; BUCKETS],
            sum_ms: 0.0,
        }
    }
}

impl HistogramReading {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Each bucket's own count with its upper bound, the last one `+Inf` (what
    /// `prometheus-client`'s encoder takes; it writes them cumulatively).
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        BUCKET_BOUNDS_MS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.buckets)
            .collect()
    }

    /// Prometheus' cumulative buckets: `(le, samples ≤ le)`, the last one `+Inf`.
    #[cfg(test)]
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut total = 0;
        BUCKET_BOUNDS_MS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.buckets)
            .map(|(le, n)| {
                total += n;
                (le, total)
            })
            .collect()
    }

    /// What was recorded since `earlier` (a reading of the same histogram).
    pub fn since(&self, earlier: &HistogramReading) -> HistogramReading {
        HistogramReading {
            buckets: std::array::from_fn(|i| self.buckets[i].saturating_sub(earlier.buckets[i])),
            sum_ms: (self.sum_ms - earlier.sum_ms).max(0.0),
        }
    }

    /// The `q` quantile (0..=1) in ms, interpolated within its bucket as Prometheus'
    /// `histogram_quantile` does; `None` with no samples. Past the last bound it is that bound.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        let count = self.count();
        if count == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * count as f64;
        let mut below = 0u64;
        for (i, &n) in self.buckets.iter().enumerate() {
            if n > 0 && (below + n) as f64 >= rank {
                let Some(&upper) = BUCKET_BOUNDS_MS.get(i) else {
                    return BUCKET_BOUNDS_MS.last().copied();
                };
                let lower = if i == 0 { 0.0 } else { BUCKET_BOUNDS_MS[i - 1] };
                let within = ((rank - below as f64) / n as f64).clamp(0.0, 1.0);
                return Some(lower + (upper - lower) * within);
            }
            below += n;
        }
        BUCKET_BOUNDS_MS.last().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1000.0)
    }

    #[test]
    fn samples_land_in_the_first_bucket_that_holds_them() {
        let h = LatencyHistogram::default();
        for v in [0.1, 0.25, 0.3, 7.0, 90_000.0] {
            h.record(ms(v));
        }
        let cumulative = h.read().cumulative();
        assert_eq!(cumulative[0], (0.25, 2));
        assert_eq!(cumulative[1], (0.5, 3));
        assert_eq!(cumulative[6], (10.0, 4));
        assert_eq!(*cumulative.last().unwrap(), (f64::INFINITY, 5));
        assert!(cumulative.windows(2).all(|w| w[0].1 <= w[1].1));
        assert!((h.read().sum_ms - 90_007.65).abs() < 0.01);
    }

    #[test]
    fn quantiles_interpolate_within_the_bucket_of_the_rank() {
        let h = LatencyHistogram::default();
        for _ in 0..90 {
            h.record(ms(0.8)); // (0.5, 1]
        }
        for _ in 0..10 {
            h.record(ms(40.0)); // (25, 50]
        }
        let r = h.read();
        let p50 = r.quantile_ms(0.5).unwrap();
        assert!(p50 > 0.5 && p50 <= 1.0, "{p50}");
        let p99 = r.quantile_ms(0.99).unwrap();
        assert!(p99 > 25.0 && p99 <= 50.0, "{p99}");
        assert_eq!(HistogramReading::default().quantile_ms(0.99), None);
    }

    #[test]
    fn a_difference_holds_only_what_came_after() {
        let h = LatencyHistogram::default();
        h.record(ms(200.0));
        let before = h.read();
        h.record(ms(1.5));
        let delta = h.read().since(&before);
        assert_eq!(delta.count(), 1);
        assert_eq!(delta.quantile_ms(1.0), Some(2.0));
    }
}
