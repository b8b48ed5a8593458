//! Fuzz-target bodies, shared by `fuzz/` (cargo fuzz) and the corpus-replay tests, so a
//! regression input fails `cargo test`. Not part of the stable API.
