//! cargo fuzz target `import_sqlite`: the body is `sessionlog_fuzz_bodies::import_sqlite`, which
//! `tests/fuzz_corpus.rs` also replays over `fuzz/corpus/import_sqlite/` in plain `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sessionlog_fuzz_bodies::import_sqlite(data);
});
