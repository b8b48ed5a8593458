//! cargo fuzz target `append_api`: the body is `sessionlog_fuzz_bodies::append_api`, which
//! `tests/fuzz_corpus.rs` also replays over `fuzz/corpus/append_api/` in plain `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sessionlog_fuzz_bodies::append_api(data);
});
