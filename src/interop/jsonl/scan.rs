//! dsh's `SessionLogScanner` (line by line, torn-tail rule) and the load checks after it.

use super::lines::{event_from_members, write_event_line};
use super::types::{JsonlReadError, NonCanonicalLine, ReadOptions};
use super::{is_known_event_type, parse_value};
use crate::event::{Event, Seq, SessionHeader};
use crate::interop::chunk_rows::{self, ChunkKind, Codec, PackPolicy, Record};
use crate::json::{self, JsonError, JsonValue, NegativeZero, js_number_to_string};

/// One event kept by the scanner, with what the later load checks need.
pub(super) struct Kept {
    file_line: usize,
    seq: Seq,
    kind: Option<String>,
    ignorable: bool,
    /// `data.reason` is the string `"fallback"` (retired `request/header` reason).
    fallback_reason: bool,
    event: Result<Event, Defect>,
}

/// Why a kept record is not a valid event.
enum Defect {
    /// dsh refuses it ("invalid event envelope").
    Invalid(String),
    /// dsh accepts it but this engine cannot represent it.
    Unsupported(String),
}

/// A decoded storage record.
struct Decoded {
    /// For each event: its JavaScript `seq` value (for the gap check) and whether it is a
    /// `turn/end`.
    seqs: Vec<Option<f64>>,
    turn_end: bool,
    kept: Vec<Kept>,
    canonical: bool,
}

pub(super) struct Issue {
    pub(super) dsh_reason: String,
    pub(super) file_line: usize,
    pub(super) detail: String,
}

pub(super) struct Scanner<'o> {
    opts: &'o ReadOptions,
    expected: Seq,
    pub(super) issue: Option<Issue>,
    pub(super) kept: Vec<Kept>,
    /// Stream offset just after the last kept line.
    pub(super) committed: usize,
    /// (stream offset after the line, events kept so far) for each kept line.
    pub(super) line_ends: Vec<(usize, usize)>,
    pub(super) non_canonical: Vec<NonCanonicalLine>,
}

impl<'o> Scanner<'o> {
    pub(super) fn new(opts: &'o ReadOptions, committed: usize) -> Self {
        Scanner {
            opts,
            expected: 0,
            issue: None,
            kept: Vec::new(),
            committed,
            line_ends: Vec::new(),
            non_canonical: Vec::new(),
        }
    }

    /// Decodes one complete line (`k` is dsh's line number: file line − 1).
    fn decode(&self, text: &str, file_line: usize) -> Result<Decoded, String> {
        let limits = &self.opts.line_limits;
        let replay = self.opts.replay_fixture;
        let members = match json::raw_members_with_policy(text, limits, NegativeZero::Accept) {
            Ok(m) => m,
            Err(JsonError::NotAnObject { .. }) => {
                // A non-object record passes through undecoded; its seq is undefined.
                json::validate_with(text, limits, NegativeZero::Accept)
                    .map_err(|e| e.to_string())?;
                return Ok(Decoded {
                    seqs: vec![None],
                    turn_end: false,
                    kept: vec![Kept {
                        file_line,
                        seq: self.expected,
                        kind: None,
                        ignorable: false,
                        fallback_reason: false,
                        event: Err(Defect::Invalid("the record is not a JSON object".into())),
                    }],
                    canonical: false,
                });
            }
            Err(e) => return Err(e.to_string()),
        };
        let last = |name: &str| {
            members
                .iter()
                .rev()
                .find(|m| m.key == name)
                .map(|m| m.value)
        };
        let type_value = last("type")
            .map(parse_value)
            .transpose()
            .map_err(|e| e.to_string())?;
        let type_str = type_value
            .as_ref()
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        if let Some(kind) = type_str.as_deref().and_then(ChunkKind::from_tag) {
            let value =
                json::parse_with(text, limits, NegativeZero::Accept).map_err(|e| e.to_string())?;
            let mut obj = value.as_object().cloned().unwrap_or_default();
            if replay {
                if !obj.contains_key("seq0") {
                    obj.insert(
                        "seq0",
                        JsonValue::number(self.expected as f64).unwrap_or_default(),
                    );
                }
                if !obj.contains_key("time0") {
                    obj.insert("time0", JsonValue::number(0.0).unwrap_or_default());
                }
            }
            let events = chunk_rows::decode_jsonl_record(kind, &obj).map_err(|e| e.to_string())?;
            let rebuilt =
                match chunk_rows::pack(&events, Codec::Jsonl, PackPolicy::Remembered).as_slice() {
                    [Record::Row(row)] => row.to_jsonl_line() == text,
                    _ => false,
                };
            return Ok(Decoded {
                seqs: events.iter().map(|e| Some(e.seq as f64)).collect(),
                turn_end: false,
                kept: events
                    .into_iter()
                    .map(|e| Kept {
                        file_line,
                        seq: e.seq,
                        kind: Some(e.kind.clone()),
                        ignorable: false,
                        fallback_reason: false,
                        event: Ok(e),
                    })
                    .collect(),
                canonical: rebuilt,
            });
        }
        let seq_value = match last("seq")
            .map(parse_value)
            .transpose()
            .map_err(|e| e.to_string())?
        {
            Some(v) => v.as_f64(),
            None if replay => Some(self.expected as f64),
            None => None,
        };
        let lone_surrogate_type = type_value
            .as_ref()
            .and_then(JsonValue::as_js_string)
            .is_some_and(json::JsString::has_lone_surrogates);
        let event = if lone_surrogate_type {
            Err(Defect::Unsupported(
                "the event type holds a lone UTF-16 surrogate".into(),
            ))
        } else {
            event_from_members(&members, replay, self.expected).map_err(Defect::Invalid)
        };
        let canonical = match &event {
            Ok(e) => {
                let mut line = String::with_capacity(text.len());
                write_event_line(&mut line, e).is_ok() && line == text
            }
            Err(_) => false,
        };
        let fallback_reason = type_str.as_deref() == Some("request/header")
            && last("data")
                .and_then(|d| {
                    json::raw_member_with_policy(d, &["reason"], limits, NegativeZero::Accept)
                        .ok()
                        .flatten()
                })
                .and_then(|r| parse_value(r).ok())
                .is_some_and(|v| v.as_str() == Some("fallback"));
        let ignorable = matches!(
            last("ignorable").map(parse_value),
            Some(Ok(JsonValue::Bool(true)))
        );
        Ok(Decoded {
            seqs: vec![seq_value],
            turn_end: type_str.as_deref() == Some("turn/end"),
            kept: vec![Kept {
                file_line,
                seq: self.expected,
                kind: type_str,
                ignorable,
                fallback_reason,
                event,
            }],
            canonical,
        })
    }

    /// Feeds one complete line (without `\n`) that ends at stream offset `end`.
    fn feed(&mut self, line: &[u8], k: usize, end: usize) -> Result<(), JsonlReadError> {
        let file_line = k + 1;
        let text = String::from_utf8_lossy(line);
        let lossy = matches!(text, std::borrow::Cow::Owned(_));
        let decoded = self.decode(&text, file_line);
        let decoded = match decoded {
            Err(detail) => {
                if self.issue.is_none() {
                    self.issue = Some(Issue {
                        dsh_reason: format!("unparsable committed event at line {k}"),
                        file_line,
                        detail,
                    });
                }
                return Ok(());
            }
            Ok(d) => d,
        };
        if let Some(issue) = &self.issue {
            if decoded.turn_end {
                return Err(JsonlReadError::CommittedCorruption {
                    dsh_reason: issue.dsh_reason.clone(),
                    file_line: issue.file_line,
                    detail: issue.detail.clone(),
                    turn_end_line: file_line,
                });
            }
            return Ok(());
        }
        if let Some(&got) = decoded.seqs.first()
            && got != Some(self.expected as f64)
        {
            let got = got.map_or_else(|| "undefined".to_owned(), js_number_to_string);
            let issue = Issue {
                dsh_reason: format!(
                    "seq gap in committed region at line {k} (expected {}, got {got})",
                    self.expected
                ),
                file_line,
                detail: "the record does not continue the log".to_owned(),
            };
            if decoded.turn_end {
                return Err(JsonlReadError::CommittedCorruption {
                    dsh_reason: issue.dsh_reason,
                    file_line,
                    detail: issue.detail,
                    turn_end_line: file_line,
                });
            }
            self.issue = Some(issue);
            return Ok(());
        }
        let n = decoded.kept.len() as u64;
        self.kept.extend(decoded.kept);
        self.expected += n;
        self.committed = end;
        self.line_ends.push((end, self.kept.len()));
        if lossy {
            self.non_canonical.push(NonCanonicalLine {
                file_line,
                reason: "invalid UTF-8 replaced by U+FFFD",
            });
        } else if !decoded.canonical {
            self.non_canonical.push(NonCanonicalLine {
                file_line,
                reason: "not the JSON.stringify form dsh writes",
            });
        }
        Ok(())
    }

    /// Feeds every complete line of `body` (stream offsets start at `base`, dsh line numbers at
    /// `first_k`). Returns the offset after the last complete line and the next line number.
    pub(super) fn feed_all(
        &mut self,
        body: &[u8],
        base: usize,
        first_k: usize,
    ) -> Result<(usize, usize), JsonlReadError> {
        let mut pos = 0;
        let mut k = first_k;
        while let Some(nl) = body[pos..].iter().position(|&c| c == b'\n') {
            self.feed(&body[pos..pos + nl], k, base + pos + nl + 1)?;
            pos += nl + 1;
            k += 1;
        }
        Ok((base + pos, k))
    }
}

pub(super) fn finish_events(
    header: &SessionHeader,
    kept: Vec<Kept>,
) -> Result<Vec<Event>, JsonlReadError> {
    let id = &header.id;
    // 1. Retired shapes (during legacy normalisation).
    for k in &kept {
        let what = match k.kind.as_deref() {
            Some("request/header-delta") => Some("unsupported legacy request/header-delta format"),
            Some("mode/set") => Some("unsupported legacy mode/set event"),
            Some("request/header") if k.fallback_reason => {
                Some("unsupported legacy request/header reason \"fallback\"")
            }
            _ => None,
        };
        if let Some(what) = what {
            return Err(JsonlReadError::RetiredEvent {
                id: id.clone(),
                seq: k.seq,
                what,
            });
        }
    }
    // 2. Unknown types.
    for k in &kept {
        if let Some(kind) = &k.kind
            && !is_known_event_type(kind)
            && !k.ignorable
        {
            return Err(JsonlReadError::UnknownEventType {
                id: id.clone(),
                kind: kind.clone(),
                seq: k.seq,
            });
        }
    }
    // 3. Envelopes.
    let mut events = Vec::with_capacity(kept.len());
    for k in kept {
        match k.event {
            Ok(e) => events.push(e),
            Err(Defect::Unsupported(reason)) => {
                return Err(JsonlReadError::Unsupported {
                    file_line: k.file_line,
                    reason,
                });
            }
            Err(Defect::Invalid(reason)) => {
                return Err(JsonlReadError::InvalidEnvelope {
                    id: id.clone(),
                    index: k.seq,
                    file_line: k.file_line,
                    reason,
                });
            }
        }
    }
    Ok(events)
}
