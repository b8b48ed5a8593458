//! Interoperability with dsh's persistence files (JSONL and SQLite).
//!
//! These modules translate between dsh files and engine events through the public API; they
//! never touch segments or the index directly.

pub mod chunk_rows;
pub mod jsonl;
pub mod sqlite;
