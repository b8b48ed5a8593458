//! cargo fuzz target `recover_store`: the body is `sessionlog_fuzz_bodies::recover_damaged_store`, which
//! `tests/fuzz_corpus.rs` also replays over `fuzz/corpus/recover_store/` in plain `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sessionlog_fuzz_bodies::recover_damaged_store(data);
});
