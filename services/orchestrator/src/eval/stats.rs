//! The statistics of repeated tries: a pass rate's 95 % Wilson interval,
//! and Fisher's exact test of whether two pass counts differ beyond noise
//! (so a flaky case does not fail a build and a real regression does).

/// The 95 % Wilson score interval of `passed` of `n` (0 to 1 when `n`
/// is 0).
pub fn wilson(passed: u32, n: u32) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let z = 1.959_963_984_540_054_f64;
    let n = f64::from(n);
    let p = f64::from(passed) / n;
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * ((p * (1.0 - p) / n) + z * z / (4.0 * n * n)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// ln(n!) (exact sums up to the sizes tries have).
fn ln_factorial(n: u32) -> f64 {
    (2..=n).map(|k| f64::from(k).ln()).sum()
}

/// The one-sided p-value of Fisher's exact test on the 2×2 table of `a`
/// passed of `n` (the baseline) against `b` passed of `m` (the
/// candidate), for "the candidate passes less often": the probability,
/// with both margins fixed, of the baseline passing `a` times or more.
/// One-sided because a comparison asks whether the candidate got worse
/// (or, swapped, better): 3 of 3 against 0 of 3 is 0.05.
pub fn fisher(a: u32, n: u32, b: u32, m: u32) -> f64 {
    let passed = a + b;
    let total = n + m;
    let failed = total - passed;
    let ln = |x: u32| -> f64 {
        // P(first row has x passes) with the margins fixed.
        ln_factorial(passed) + ln_factorial(failed) + ln_factorial(n) + ln_factorial(m)
            - ln_factorial(total)
            - ln_factorial(x)
            - ln_factorial(n - x)
            - ln_factorial(passed - x)
            - ln_factorial(m + x - passed)
    };
    let hi = passed.min(n);
    let p: f64 = (a..=hi).map(ln).map(f64::exp).sum();
    p.min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_matches_its_textbook_values() {
        let (lo, hi) = wilson(8, 10);
        assert!(
            (lo - 0.4902).abs() < 1e-3 && (hi - 0.9433).abs() < 1e-3,
            "{lo} {hi}"
        );
        assert_eq!(wilson(0, 0), (0.0, 1.0));
        let (lo, hi) = wilson(5, 5);
        assert!(lo > 0.56 && lo < 0.57 && hi == 1.0, "{lo}");
    }

    #[test]
    fn fisher_matches_r() {
        // fisher.test(matrix(c(5,0,0,5),2), alternative="greater")$p.value
        assert!((fisher(5, 5, 0, 5) - 0.003_968).abs() < 1e-5);
        // fisher.test(matrix(c(3,2,1,4),2), alternative="greater"): 66/252
        assert!((fisher(3, 5, 1, 5) - 66.0 / 252.0).abs() < 1e-9);
        assert!((fisher(3, 3, 0, 3) - 0.05).abs() < 1e-9);
        assert_eq!(
            fisher(1, 1, 0, 1),
            0.5,
            "one try each is never beyond noise"
        );
        assert!((fisher(4, 4, 4, 4) - 1.0).abs() < 1e-9);
    }
}
