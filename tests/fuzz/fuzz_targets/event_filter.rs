#![no_main]
//! See `baton_e2e::fuzz::event_filter`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| baton_e2e::fuzz::event_filter(data));
