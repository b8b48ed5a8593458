//! dsh's SQLite persistence format (schemas 15, 17 and 18).
