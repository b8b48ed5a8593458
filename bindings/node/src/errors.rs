//! Engine errors as stable string codes (the `code` of the JavaScript `SessionlogError`).

use sessionlog::{AppendError, ForkFailure, OpenError, ReadError};

/// A failed call: a stable code, the engine's message, and details (JSON members text).
#[derive(Debug)]
pub struct Failure {
    pub code: &'static str,
    pub message: String,
    /// Extra members of the error object, as JSON text without braces (`"got":3,...`).
    pub details: String,
}

impl Failure {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            details: String::new(),
        }
    }

    fn with(mut self, details: String) -> Self {
        self.details = details;
        self
    }

    /// The failure as the JSON object the JavaScript side turns into an error.
    pub fn to_json(&self) -> String {
        let mut out = format!(
            "{{\"error\":{{\"code\":\"{}\",\"message\":{}",
            self.code,
            crate::wire::string(&self.message)
        );
        if !self.details.is_empty() {
            out.push(',');
            out.push_str(&self.details);
        }
        out.push_str("}}");
        out
    }
}

impl From<OpenError> for Failure {
    fn from(e: OpenError) -> Self {
        let code = match &e {
            OpenError::Locked { .. } => "STORE_LOCKED",
            OpenError::UnsupportedFormat { .. } => "UNSUPPORTED_FORMAT",
            OpenError::NotASegment { .. }
            | OpenError::Corruption { .. }
            | OpenError::TornTail { .. }
            | OpenError::MissingSegment { .. } => "CORRUPTION",
            OpenError::NeedsRepair { .. } => "NEEDS_REPAIR",
            OpenError::Config(_) => "INVALID_OPTIONS",
            OpenError::Index(_) => "INDEX",
            OpenError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                "NOT_FOUND"
            }
            OpenError::Io { .. } => "IO",
            _ => "INTERNAL",
        };
        Failure::new(code, e.to_string())
    }
}

impl From<AppendError> for Failure {
    fn from(e: AppendError) -> Self {
        let code = match &e {
            AppendError::NoSuchSession(_) => "SESSION_NOT_FOUND",
            AppendError::SessionExists(_) => "SESSION_EXISTS",
            AppendError::InvalidSessionId { .. } | AppendError::InvalidHeader { .. } => {
                "INVALID_HEADER"
            }
            AppendError::WrongSeq { got, expected, .. } => {
                let details = format!("\"got\":{got},\"expected\":{expected}");
                return Failure::new("SEQ_MISMATCH", e.to_string()).with(details);
            }
            AppendError::BadData { kind, seq, .. } => {
                let details = format!("\"eventType\":{},\"seq\":{seq}", crate::wire::string(kind));
                return Failure::new("INVALID_JSON", e.to_string()).with(details);
            }
            AppendError::Envelope { .. } => "INVALID_EVENT",
            AppendError::TooLarge { .. } | AppendError::RecordTooLarge { .. } => "TOO_LARGE",
            AppendError::Semantics { .. } => "SEMANTICS",
            AppendError::ReadOnly => "READ_ONLY",
            AppendError::PreviousIo(_) | AppendError::Writer(_) => "WRITER_FAILED",
            AppendError::Io(_) => "IO",
            AppendError::Index(_) => "INDEX",
            AppendError::Replay { .. } | AppendError::Projection { .. } => "REPLAY",
            AppendError::Registry { .. } => "CORRUPTION",
            _ => "INTERNAL",
        };
        Failure::new(code, e.to_string())
    }
}

impl From<ReadError> for Failure {
    fn from(e: ReadError) -> Self {
        let code = match &e {
            ReadError::NoSuchSession(_) => "SESSION_NOT_FOUND",
            ReadError::Corruption { .. } => "CORRUPTION",
            ReadError::Io { .. } => "IO",
            ReadError::Index(_) => "INDEX",
            ReadError::Derive(_) => "DERIVE",
            ReadError::Replay { .. } | ReadError::Projections(_) => "REPLAY",
            ReadError::Verbatim { .. } => "NOT_LOADABLE",
            _ => "INTERNAL",
        };
        Failure::new(code, e.to_string())
    }
}

impl From<ForkFailure> for Failure {
    fn from(e: ForkFailure) -> Self {
        match e {
            ForkFailure::Rule(rule) => Failure::new(rule.code.as_str(), rule.message.clone()),
            ForkFailure::Append(a) => a.into(),
        }
    }
}
