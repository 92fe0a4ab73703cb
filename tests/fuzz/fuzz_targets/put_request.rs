#![no_main]
//! See `baton_e2e::fuzz::put_request`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| baton_e2e::fuzz::put_request(data));
