//! Session semantics: surface, derived messages, invariants, crash repair, fork.
