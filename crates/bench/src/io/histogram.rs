//! A log-linear latency histogram (nanoseconds): exact below 64 ns, then 32 buckets per
//! power of two, so any value is known to within 1/64 (about 1.6 %). Fixed size (1,920
//! counters), no allocation when recording.

/// Sub-buckets per power of two, as a power of two.
const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
const BUCKETS: usize = (2 * SUB + (63 - SUB_BITS as u64) * SUB) as usize;

#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.count())
            .field("p50_ns", &self.percentile(0.5))
            .field("p99_ns", &self.percentile(0.99))
            .finish()
    }
}

fn index(v: u64) -> usize {
    if v < 2 * SUB {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    let shift = msb - SUB_BITS;
    (2 * SUB + u64::from(msb - SUB_BITS - 1) * SUB + ((v >> shift) - SUB)) as usize
}

/// The smallest value of bucket `i` and the bucket's width.
fn bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < 2 * SUB {
        return (i, 1);
    }
    let k = (i - 2 * SUB) / SUB;
    let sub = (i - 2 * SUB) % SUB;
    let shift = k + 1;
    ((sub + SUB) << shift, 1 << shift)
}

impl Histogram {
    pub fn new() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
        }
    }

    pub fn record(&mut self, ns: u64) {
        self.counts[index(ns)] += 1;
        self.total += 1;
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// The value (ns, the middle of its bucket) below which a fraction `q` of the recorded
    /// values lie: the value of rank `ceil(q * count)`. 0 when empty.
    pub fn percentile(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, width) = bounds(i);
                return lo as f64 + (width - 1) as f64 / 2.0;
            }
        }
        let (lo, _) = bounds(BUCKETS - 1);
        lo as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut last = 0;
        for shift in 0..64 {
            for v in [
                1u64 << shift,
                (1u64 << shift) + 1,
                (1u64 << shift) + (1u64 << shift) / 2,
            ] {
                let i = index(v);
                assert!(i < BUCKETS, "{v} -> {i}");
                let (lo, w) = bounds(i);
                assert!(lo <= v && v - lo < w, "{v} not in [{lo}, {lo}+{w})");
                assert!(i >= last || v < 2);
                last = i;
            }
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
        for v in 0..100_000u64 {
            let (lo, w) = bounds(index(v));
            assert!(lo <= v && v - lo < w);
            assert!(w as f64 <= (v as f64 / 32.0).max(1.0));
        }
    }

    #[test]
    fn percentiles() {
        let mut h = Histogram::new();
        assert_eq!(h.percentile(0.99), 0.0);
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        assert_eq!(h.count(), 1000);
        let p99 = h.percentile(0.99);
        assert!((p99 - 990_000.0).abs() / 990_000.0 < 0.02, "{p99}");
        let p50 = h.percentile(0.5);
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.02, "{p50}");
        // One huge outlier does not move p99 of 1000 values...
        h.record(u64::MAX / 2);
        assert!(h.percentile(0.99) < 1e6);
        // ...but a 2 % tail does.
        for _ in 0..20 {
            h.record(50_000_000);
        }
        assert!(h.percentile(0.99) > 4e7);
    }
}
