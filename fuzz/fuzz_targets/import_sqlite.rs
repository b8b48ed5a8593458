//! cargo fuzz target `import_sqlite`: the body is `sessionlog::fuzzing::import_sqlite`, which
//! `tests/fuzz_corpus.rs` also replays over `fuzz/corpus/import_sqlite/` in plain `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sessionlog::fuzzing::import_sqlite(data);
});
