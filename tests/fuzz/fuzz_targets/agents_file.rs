#![no_main]
//! See `baton_e2e::fuzz::agents_file`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| baton_e2e::fuzz::agents_file(data));
