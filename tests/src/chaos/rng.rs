//! The chaos test's randomness: SplitMix64, seeded once per run and forked
//! per actor (the nemesis, each client), so one seed replays the same
//! choices — which replica, which fault, which workload item, which answer
//! — even though the timing of a run never repeats exactly.

use std::time::Duration;

/// A SplitMix64 generator (Steele, Lea and Flood, 2014): tiny, fast, and
/// good enough to choose faults and workloads by.
#[derive(Debug, Clone)]
pub struct Rng(u64);

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

impl Rng {
    /// A generator that starts from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// A generator of its own for actor `n`, derived from `seed` (the
    /// nemesis is actor 0, client `i` is actor `i + 1`).
    pub fn fork(seed: u64, n: u64) -> Self {
        let mut base = Self::new(seed ^ n.wrapping_mul(GOLDEN).rotate_left(17));
        Self(base.next_u64())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next_u64() % n as u64) as usize
    }

    /// A number in `0.0..1.0`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// A duration in `low..=high`.
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        if high <= low {
            return low;
        }
        low + (high - low).mul_f64(self.unit())
    }

    /// `base` scaled by a factor in `low..high`.
    pub fn scaled(&mut self, base: Duration, low: f64, high: f64) -> Duration {
        base.mul_f64(low + (high - low) * self.unit())
    }

    /// One of `items`, by reference.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// An index in `0..n` other than `not` when there is one.
    pub fn other_than(&mut self, n: usize, not: usize) -> usize {
        if n < 2 {
            return 0;
        }
        let i = self.below(n - 1);
        if i >= not { i + 1 } else { i }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_gives_one_sequence_and_forks_differ() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(Rng::fork(7, 1).next_u64(), Rng::fork(7, 2).next_u64());
        let mut r = Rng::new(1);
        for _ in 0..1000 {
            assert!(r.below(3) < 3);
            assert_ne!(r.other_than(3, 1), 1);
            let d = r.between(Duration::from_secs(2), Duration::from_secs(5));
            assert!(d >= Duration::from_secs(2) && d <= Duration::from_secs(5));
        }
    }
}
