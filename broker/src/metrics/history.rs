//! The console's recent past: every [`SAMPLE_INTERVAL_MS`] this broker's traffic rates, its
//! produce and fetch latency percentiles over the interval, and the lag of the groups it
//! coordinates; the last [`MAX_SAMPLES`] kept. Samples fall on wall-clock multiples of the
//! interval, so the brokers' samples line up and the console can add them up.

use std::collections::VecDeque;

use kafka_protocol::messages::ApiKey;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::histogram::HistogramReading;
use super::{BrokerMetrics, TopicTotals};
use crate::clock::now_ms;

pub const SAMPLE_INTERVAL_MS: i64 = 2_000;
/// Ten minutes of samples.
pub const MAX_SAMPLES: usize = 300;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Wall-clock ms at the end of the interval.
    pub t: i64,
    pub messages_in_per_s: f64,
    pub bytes_in_per_s: f64,
    pub bytes_out_per_s: f64,
    pub messages_out_per_s: f64,
    pub produce_p50_ms: Option<f64>,
    pub produce_p99_ms: Option<f64>,
    pub fetch_p99_ms: Option<f64>,
    pub total_lag: i64,
}

/// The counters a sample is the difference of.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    t: i64,
    traffic: TopicTotals,
    produce: HistogramReading,
    fetch: HistogramReading,
}

impl Reading {
    /// `metrics` as of now.
    pub fn of(metrics: &BrokerMetrics) -> Reading {
        let histogram = |key: ApiKey| {
            metrics
                .request(key as i16)
                .map(|r| r.total_time_ms.read())
                .unwrap_or_default()
        };
        Reading {
            t: now_ms(),
            traffic: metrics.all_topics(),
            produce: histogram(ApiKey::Produce),
            fetch: histogram(ApiKey::Fetch),
        }
    }
}

#[derive(Debug, Default)]
pub struct History {
    samples: Mutex<VecDeque<Sample>>,
}

impl History {
    /// The kept samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().iter().copied().collect()
    }

    pub fn push(&self, sample: Sample) {
        let mut samples = self.samples.lock();
        if samples.len() == MAX_SAMPLES {
            samples.pop_front();
        }
        samples.push_back(sample);
    }
}

/// What happened between two readings, stamped `t`.
pub fn sample(before: &Reading, after: &Reading, t: i64, total_lag: i64) -> Sample {
    let seconds = ((after.t - before.t).max(1) as f64) / 1000.0;
    let rate =
        |pick: fn(&TopicTotals) -> u64| pick(&after.traffic).saturating_sub(pick(&before.traffic)) as f64 / seconds;
    let produce = after.produce.since(&before.produce);
    Sample {
        t,
        messages_in_per_s: rate(|t| t.messages_in),
        bytes_in_per_s: rate(|t| t.bytes_in),
        bytes_out_per_s: rate(|t| t.bytes_out),
        messages_out_per_s: rate(|t| t.messages_out),
        produce_p50_ms: produce.quantile_ms(0.5),
        produce_p99_ms: produce.quantile_ms(0.99),
        fetch_p99_ms: after.fetch.since(&before.fetch).quantile_ms(0.99),
        total_lag,
    }
}

/// The cluster's history from each broker's: rates and lag added, latencies the worst of
/// the brokers', at the timestamps of `own` (a peer's sample at another time is dropped).
pub fn merge(own: &[Sample], peers: &[Vec<Sample>]) -> Vec<Sample> {
    let worst = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    own.iter()
        .map(|mine| {
            let mut merged = *mine;
            for theirs in peers.iter().filter_map(|p| p.iter().find(|s| s.t == mine.t)) {
                merged.messages_in_per_s += theirs.messages_in_per_s;
                merged.bytes_in_per_s += theirs.bytes_in_per_s;
                merged.bytes_out_per_s += theirs.bytes_out_per_s;
                merged.messages_out_per_s += theirs.messages_out_per_s;
                merged.total_lag += theirs.total_lag;
                merged.produce_p50_ms = worst(merged.produce_p50_ms, theirs.produce_p50_ms);
                merged.produce_p99_ms = worst(merged.produce_p99_ms, theirs.produce_p99_ms);
                merged.fetch_p99_ms = worst(merged.fetch_p99_ms, theirs.fetch_p99_ms);
            }
            merged
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::LatencyHistogram;
    use std::time::Duration;

    fn at(t: i64, messages_in: u64, produce: &LatencyHistogram) -> Reading {
        Reading {
            t,
            traffic: TopicTotals {
                messages_in,
                ..Default::default()
            },
            produce: produce.read(),
            fetch: HistogramReading::default(),
        }
    }

    #[test]
    fn a_sample_is_the_rate_and_latency_between_two_readings() {
        let h = LatencyHistogram::default();
        h.record(Duration::from_millis(400));
        let before = at(10_000, 100, &h);
        h.record(Duration::from_micros(800));
        let after = at(12_000, 700, &h);
        let s = sample(&before, &after, 12_000, 5);
        assert_eq!(s.messages_in_per_s, 300.0);
        let p99 = s.produce_p99_ms.unwrap();
        assert!(p99 <= 1.0, "only the request after the first reading counts: {p99}");
        assert_eq!(s.fetch_p99_ms, None);
        assert_eq!(s.total_lag, 5);
    }

    #[test]
    fn history_keeps_the_newest_samples() {
        let history = History::default();
        let h = LatencyHistogram::default();
        for i in 0..MAX_SAMPLES as i64 + 5 {
            history.push(sample(&at(0, 0, &h), &at(2000, 0, &h), i, 0));
        }
        let samples = history.samples();
        assert_eq!(samples.len(), MAX_SAMPLES);
        assert_eq!(samples[0].t, 5);
    }

    #[test]
    fn merged_history_adds_rates_and_keeps_the_worst_latency() {
        let h = LatencyHistogram::default();
        let mut mine = sample(&at(0, 0, &h), &at(2000, 20, &h), 2000, 1);
        mine.produce_p99_ms = Some(2.0);
        let mut theirs = mine;
        theirs.produce_p99_ms = Some(7.0);
        let mut elsewhen = mine;
        elsewhen.t = 4000;
        let merged = merge(&[mine], &[vec![theirs], vec![elsewhen]]);
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].messages_in_per_s, 20.0);
        assert_eq!(merged[0].produce_p99_ms, Some(7.0));
        assert_eq!(merged[0].total_lag, 2);
    }
}
