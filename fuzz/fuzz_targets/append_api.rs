//! cargo fuzz target `append_api`: the body is `sessionlog::fuzzing::append_api`, which
//! `tests/fuzz_corpus.rs` also replays over `fuzz/corpus/append_api/` in plain `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sessionlog::fuzzing::append_api(data);
});
