//! The segmented append-only log: frames, records, segments, group commit and recovery.
