//! Projections: pure folds over a session's events, checkpointed in the index.
