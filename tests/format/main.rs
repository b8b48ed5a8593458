//! The pinned on-disk format, one binary: golden bytes of every record variant and checkpoint
//! (`format_golden`), the checked-in store of `tests/data/` (`format_compat`), and the examples
//! of `format-spec.md` (`format_spec`). Run one with `cargo test --release --test format <module>::`.

#[path = "../common/mod.rs"]
mod common;

mod format_compat;
mod format_golden;
mod format_spec;
