//! dsh's JSONL persistence format (plain and zstd).
