//! Kafka's sampled `Rate` and the throttle time derived from it (`SampledStat`, `Rate` and
//! `ClientQuotaManager.throttleTime`), so a Sluice broker throttles a client exactly when and
//! for as long as a Kafka broker would.
//!
//! The rate is the sum of the live samples over the time they span, but never over less than
//! `window_num - 1` whole samples, so a first burst is not measured over a few milliseconds.
//! A sample starts at the first value recorded after the previous one completed and expires
//! once `window_num` samples' time has passed since it started.

/// The measurement window: `quota.window.num` samples of `quota.window.size.seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateWindow {
    pub samples: u32,
    pub sample_ms: i64,
}

impl RateWindow {
    /// The longest a sample counts: after this, everything recorded before has expired.
    pub fn full_ms(&self) -> i64 {
        i64::from(self.samples) * self.sample_ms
    }
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    start_ms: i64,
    total: f64,
}

/// A byte rate over a [`RateWindow`]: at most `samples` samples, reused in a ring.
#[derive(Debug, Clone, Default)]
pub struct SampledRate {
    samples: Vec<Sample>,
    current: usize,
}

impl SampledRate {
    /// Adds `value` (negative to take back a value recorded earlier) at `now_ms`.
    pub fn record(&mut self, window: RateWindow, value: f64, now_ms: i64) {
        let capacity = window.samples.max(1) as usize;
        if self.samples.is_empty() {
            self.samples.push(Sample {
                start_ms: now_ms,
                total: 0.0,
            });
            self.current = 0;
        } else if now_ms - self.samples[self.current].start_ms >= window.sample_ms {
            self.current = (self.current + 1) % capacity;
            let fresh = Sample {
                start_ms: now_ms,
                total: 0.0,
            };
            match self.samples.get_mut(self.current) {
                Some(sample) => *sample = fresh,
                None => self.samples.push(fresh),
            }
        }
        self.samples[self.current].total += value;
    }

    /// Resets samples that have expired at `now_ms`, as Kafka's `purgeObsoleteSamples` does.
    fn purge(&mut self, window: RateWindow, now_ms: i64) {
        for sample in &mut self.samples {
            if now_ms - sample.start_ms >= window.full_ms() {
                *sample = Sample {
                    start_ms: now_ms,
                    total: 0.0,
                };
            }
        }
    }

    /// The time the rate is measured over at `now_ms` (Kafka's `Rate.windowSize`): from the
    /// oldest sample's start, but at least `samples - 1` whole samples.
    pub fn window_size_ms(&self, window: RateWindow, now_ms: i64) -> i64 {
        let oldest = self.samples.iter().map(|s| s.start_ms).min().unwrap_or(now_ms);
        let mut elapsed = now_ms - oldest;
        let full_samples = elapsed / window.sample_ms;
        let min_full_samples = i64::from(window.samples.saturating_sub(1));
        if full_samples < min_full_samples {
            elapsed += (min_full_samples - full_samples) * window.sample_ms;
        }
        elapsed
    }

    /// The rate at `now_ms`, in units per second.
    pub fn measure(&mut self, window: RateWindow, now_ms: i64) -> f64 {
        self.purge(window, now_ms);
        let total: f64 = self.samples.iter().map(|s| s.total).sum();
        let window_ms = self.window_size_ms(window, now_ms);
        if window_ms <= 0 {
            return 0.0;
        }
        total / (window_ms as f64 / 1000.0)
    }
}

/// How long a client must pause for a measured `rate` over `window_ms` to fall back to
/// `bound` (Kafka: O * W / (W + X) = T, so X = (O - T) / T * W), or 0 within the quota. A
/// zero quota throttles by the whole window, after which every sample has expired.
pub fn throttle_time_ms(rate: f64, bound: f64, window_ms: i64, window: RateWindow) -> i32 {
    if rate <= bound {
        return 0;
    }
    if bound <= 0.0 {
        return window.full_ms().clamp(0, i64::from(i32::MAX)) as i32;
    }
    let throttle = ((rate - bound) / bound * window_ms as f64).round();
    throttle.clamp(0.0, f64::from(i32::MAX)) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    const KAFKA: RateWindow = RateWindow {
        samples: 11,
        sample_ms: 1000,
    };

    #[test]
    fn a_first_burst_is_measured_over_at_least_ten_samples() {
        let mut rate = SampledRate::default();
        rate.record(KAFKA, 10_000.0, 0);
        assert_eq!(rate.window_size_ms(KAFKA, 0), 10_000);
        assert_eq!(rate.measure(KAFKA, 0), 1_000.0);
        assert_eq!(rate.window_size_ms(KAFKA, 500), 10_500);
    }

    #[test]
    fn samples_advance_and_expire_after_the_whole_window() {
        let mut rate = SampledRate::default();
        for second in 0..30 {
            rate.record(KAFKA, 1_000.0, second * 1000);
        }
        // 11 live samples of 1000 over 10 s (oldest started at 19 s, now 29 s).
        assert_eq!(rate.measure(KAFKA, 29_000), 1_100.0);
        // Long idle: every sample expires and the rate drops to zero.
        assert_eq!(rate.measure(KAFKA, 60_000), 0.0);
    }

    #[test]
    fn unrecording_takes_a_value_back() {
        let mut rate = SampledRate::default();
        rate.record(KAFKA, 5_000.0, 0);
        rate.record(KAFKA, -5_000.0, 10);
        assert_eq!(rate.measure(KAFKA, 10), 0.0);
    }

    #[test]
    fn throttle_time_is_the_time_for_the_rate_to_fall_back_to_the_quota() {
        // 2000 B/s observed over 10 s against 1000 B/s: wait 10 s more (20000 B / 20 s).
        assert_eq!(throttle_time_ms(2_000.0, 1_000.0, 10_000, KAFKA), 10_000);
        assert_eq!(throttle_time_ms(1_100.0, 1_000.0, 10_000, KAFKA), 1_000);
        assert_eq!(throttle_time_ms(999.0, 1_000.0, 10_000, KAFKA), 0);
        assert_eq!(throttle_time_ms(1.0, 0.0, 10_000, KAFKA), 11_000);
        assert_eq!(throttle_time_ms(1e300, 1.0, 10_000, KAFKA), i32::MAX);
    }
}
