//! cargo fuzz target `import_jsonl`: the body is `sessionlog_fuzz_bodies::import_jsonl`, which
//! `tests/fuzz_corpus.rs` also replays over `fuzz/corpus/import_jsonl/` in plain `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sessionlog_fuzz_bodies::import_jsonl(data);
});
