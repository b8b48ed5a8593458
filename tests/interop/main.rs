//! dsh interop tests, one binary: JSONL, SQLite (every schema version), packed chunk rows,
//! import and export. Each module is one former `tests/<name>.rs`; run one with
//! `cargo test --release --test interop <module>::`. (`tests/import_stream.rs` stays its own
//! binary: its counting global allocator measures the whole process.)

#[path = "../common/mod.rs"]
mod common;

mod chunk_rows;
mod interop_errors;
mod interop_roundtrip;
mod jsonl;
mod sqlite;
mod sqlite_export;
mod sqlite_packing;
mod sqlite_vectors;
