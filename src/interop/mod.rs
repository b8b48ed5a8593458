//! Interoperability with dsh's persistence files (JSONL and SQLite).
//!
//! These modules translate between dsh files and engine events through the public API; they
//! never touch segments or the index directly. [`import`] and [`export`] move whole sessions
//! between dsh files (or directories of them) and a [`Store`](crate::store::Store); [`jsonl`],
//! [`sqlite`] and [`chunk_rows`] are the file formats.

pub(crate) mod atomic;
pub mod chunk_rows;
pub mod export;
pub mod import;
pub mod jsonl;
pub mod sqlite;
