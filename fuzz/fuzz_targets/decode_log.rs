//! cargo fuzz target `decode_log`: the body is `sessionlog_fuzz_bodies::decode_log_bytes`, which
//! `tests/fuzz_corpus.rs` also replays over `fuzz/corpus/decode_log/` in plain `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sessionlog_fuzz_bodies::decode_log_bytes(data);
});
