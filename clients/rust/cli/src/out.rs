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
