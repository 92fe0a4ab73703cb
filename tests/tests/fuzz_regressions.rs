//! Replays what the fuzzers start from and every input they once crashed
//! on (`tests/fuzz/seeds/<target>/`, `tests/fuzz/regressions/<target>/`)
//! through the same target bodies, on stable, in every `cargo test`. The
//! long fuzzing runs are `tests/fuzz/run` (nightly, cargo-fuzz).

use std::path::Path;

#[test]
fn every_seed_and_regression_input_is_handled_without_panicking() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    for (target, body) in baton_e2e::fuzz::TARGETS {
        let mut replayed = 0;
        for folder in ["seeds", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root.join(folder).join(target)) else {
                continue;
            };
            for entry in entries {
                let path = entry.expect("entry").path();
                let data = std::fs::read(&path).expect("read");
                let outcome = std::panic::catch_unwind(|| body(&data));
                assert!(outcome.is_ok(), "{target} panicked on {}", path.display());
                replayed += 1;
            }
        }
        assert!(replayed > 0, "{target} has seeds");
    }
}
