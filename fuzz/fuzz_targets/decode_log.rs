//! cargo fuzz target `decode_log`: the body is `sessionlog::fuzzing::decode_log_bytes`, which
//! `tests/fuzz_corpus.rs` also replays over `fuzz/corpus/decode_log/` in plain `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sessionlog::fuzzing::decode_log_bytes(data);
});
