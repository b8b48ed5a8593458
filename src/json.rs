//! Lossless JSON: validation of JSON text as dsh's lossless-JSON boundary does it, a value
//! tree with JavaScript semantics, and `JSON.stringify`-exact printing.
//!
//! (Interim: validation only; the full module lands from the json branch.)

/// Limits for JSON validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonLimits {
    /// Deepest nesting accepted.
    pub max_depth: usize,
    /// Largest text accepted.
    pub max_bytes: usize,
}

impl Default for JsonLimits {
    fn default() -> Self {
        JsonLimits {
            max_depth: 10_000,
            max_bytes: 64 << 20,
        }
    }
}

/// Why a JSON text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct JsonError(String);

/// Validates one JSON text.
pub fn validate(text: &str, limits: &JsonLimits) -> Result<(), JsonError> {
    if text.len() > limits.max_bytes {
        return Err(JsonError("too large".into()));
    }
    serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|e| JsonError(e.to_string()))?;
    Ok(())
}
