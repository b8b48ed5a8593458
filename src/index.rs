//! index
