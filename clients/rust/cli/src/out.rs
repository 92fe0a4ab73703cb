//! Writing to stdout without panicking: the reader may go away (`| head`),
//! and `main` then stops quietly instead of printing a panic.

/// Prints one line to stdout, failing (instead of panicking like `println!`)
/// when stdout is closed.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}
pub(crate) use outln;

/// An amount in billionths: 4 decimals, 6 below 0.0001 (`0.0091`,
/// `0.000035`), 2 from 100 up.
pub fn money(nanos: u64) -> String {
    let v = nanos as f64 / 1e9;
    if v >= 100.0 {
        format!("{v:.2}")
    } else if v >= 0.0001 || nanos == 0 {
        format!("{v:.4}")
    } else {
        format!("{v:.6}")
    }
}
