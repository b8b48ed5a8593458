//! Reading limits and the `-0` policy.

/// The default [`JsonLimits::max_depth`]: 10 000 nested arrays/objects.
pub const DEFAULT_MAX_DEPTH: usize = 10_000;

/// The default [`JsonLimits::max_bytes`]: 64 MiB of JSON text.
pub const DEFAULT_MAX_BYTES: usize = 64 << 20;

/// Bounds applied while reading JSON text.
///
/// The [`Default`] is `max_depth` `DEFAULT_MAX_DEPTH` (10 000) and `max_bytes`
/// `DEFAULT_MAX_BYTES` (64 MiB). dsh itself has no depth limit; the default is far above any
/// payload dsh produces and can be raised freely (nothing recurses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JsonLimits {
    /// Maximum nesting of arrays and objects (`1` is `[]`, a top-level scalar is depth 0).
    pub max_depth: usize,
    /// Maximum length of the JSON text in bytes.
    pub max_bytes: usize,
}

impl Default for JsonLimits {
    fn default() -> Self {
        JsonLimits {
            max_depth: DEFAULT_MAX_DEPTH,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// No limit on nesting or length: the session layer reads texts the store already bounded.
pub(crate) const UNBOUNDED: JsonLimits = JsonLimits {
    max_depth: usize::MAX,
    max_bytes: usize::MAX,
};

/// Whether text that JavaScript reads as `-0` is refused ([`validate`], [`parse`]) or accepted.
///
/// dsh's lossless boundary refuses `-0` on append, but its loaders (`Session.fromRestore`)
/// skip that check, so `-0` inside a stored file is loaded (and read as `0`). Importers use
/// [`NegativeZero::Accept`] to load what dsh loads; appends use the default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum NegativeZero {
    /// Refuse with [`JsonError::NegativeZero`] (the lossless boundary).
    #[default]
    Refuse,
    /// Accept; the number's value is `-0.0`, which compares equal to and prints as `0`.
    Accept,
}
