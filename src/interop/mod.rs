//! Interoperability with dsh's persistence files (JSONL and SQLite).
