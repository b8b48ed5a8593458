//! The worked examples of format-spec.md (§2, §3, §4.1, §4.3, §11.1), decoded byte by byte.

use sessionlog::event::{Event, KeyOrder, Packing};
use sessionlog::log::frame::{self, FrameLimits};
use sessionlog::log::record::Record;

/// Parses the hexdump block of format-spec.md §4.1 (the first ``` block after its heading).
fn spec_example() -> Vec<u8> {
    hexdump_after("### 4.1 Worked example", 1)
}

/// Parses the `nth` ``` block (1-based, odd numbers) after the heading or text `marker`.
fn hexdump_after(marker: &str, nth: usize) -> Vec<u8> {
    let spec = include_str!("../../format-spec.md");
    let section = spec.split(marker).nth(1).expect("section");
    let block = section.split("```").nth(nth).expect("hexdump block");
    block
        .lines()
        .filter_map(|l| l.split_once(':'))
        .flat_map(|(_, bytes)| {
            bytes
                .split_whitespace()
                .map(|b| u8::from_str_radix(b, 16).expect("hex"))
        })
        .collect()
}

#[test]
fn the_spec_example_frame_decodes_to_the_documented_event() {
    let bytes = spec_example();
    assert_eq!(bytes.len(), 53);
    let (header, payload) = frame::decode(&bytes, &FrameLimits::default()).unwrap();
    assert_eq!(header.stored_len, 37);
    assert_eq!(header.raw_len, 37);
    assert_eq!(header.flags, 0);
    assert_eq!(header.crc, 0x3f5f_0cd3);
    let records = Record::decode_all(&payload).unwrap();
    assert_eq!(records.len(), 1);
    let (offset, record) = &records[0];
    assert_eq!(*offset, 0);
    let Record::Event { session, event } = record.clone() else {
        panic!("expected an event record, got {record:?}")
    };
    assert_eq!(session, 1);
    let event = Event::from(event);
    assert_eq!(
        event,
        Event::new("turn/start", 0, 1_767_225_600_000, r#"{"turn":1}"#)
    );
    assert_eq!(event.layout.key_order, KeyOrder::Canonical);
    assert_eq!(event.layout.packing, Packing::Auto);
    // And the encoder produces exactly the documented bytes.
    let mut raw = Vec::new();
    record.encode_into(&mut raw).unwrap();
    assert_eq!(frame::encode(&raw, 512, 1), bytes);
}

#[test]
fn the_tag_1_example_is_what_a_version_6_writer_wrote() {
    // The encoding the store used before lean records, still read.
    let e = Event::new("turn/start", 0, 1_767_225_600_000, r#"{"turn":1}"#);
    let raw = Record::encode_event_v1(1, &e).unwrap();
    assert_eq!(frame::encode(&raw, 512, 1), spec_example());
}

#[test]
fn the_lean_records_example_decodes_and_is_what_the_store_writes() {
    let bytes = hexdump_after("### 4.3 Worked example: lean records", 1);
    assert_eq!(bytes.len(), 63);
    let (header, payload) = frame::decode(&bytes, &FrameLimits::default()).unwrap();
    assert_eq!(
        (header.flags, header.raw_len, header.stored_len),
        (0, 47, 47)
    );
    assert_eq!(header.crc, 0xfbc9_ce30);
    assert_eq!(payload[0], 5, "EventStart");
    assert_eq!(payload[22], 6, "EventNext");
    let records = Record::decode_all(&payload).unwrap();
    let events: Vec<(u32, u64, Event)> = records
        .into_iter()
        .map(|(offset, r)| match r {
            Record::Event { session, event } => (offset, session, Event::from(event)),
            other => panic!("expected an event record, got {other:?}"),
        })
        .collect();
    let expected = dictionary_example_events();
    assert_eq!(
        events,
        vec![(0, 1, expected[0].clone()), (22, 1, expected[1].clone())]
    );
    // The EventNext record alone does not decode: it continues the record before it.
    assert!(Record::decode(&payload[22..]).is_err());
    assert_eq!(
        sessionlog::log::envelope::TYPE_CODES[43..47],
        ["turn/start", "turn/end", "step/start", "step/end"]
    );
    // What the store writes for this flush group (default configuration).
    let dir = tempfile::tempdir().unwrap();
    let store =
        sessionlog::store::Store::open(dir.path(), sessionlog::store::Config::default()).unwrap();
    store
        .create_session(sessionlog::event::SessionHeader::new("s1", 1))
        .unwrap();
    store
        .append_batch("s1", dictionary_example_events())
        .unwrap();
    drop(store);
    let seg = std::fs::read(dir.path().join("segments/00000000000000000001.seg")).unwrap();
    assert_eq!(&seg[0..8], b"SLOGSEG\0");
    assert_eq!(&seg[8..12], &9u32.to_le_bytes());
    assert!(
        seg.ends_with(&bytes),
        "the last frame on disk is the spec example; it is {:02x?}",
        &seg[seg.len() - bytes.len()..]
    );
}

#[test]
fn the_spec_type_code_table_is_the_one_the_build_uses() {
    let spec = include_str!("../../format-spec.md");
    let section = spec
        .split("### 4.2 Lean event records")
        .nth(1)
        .expect("section 4.2");
    let table = section
        .split_once("The type codes")
        .expect("the code table")
        .1
        .split_once("A writer may always")
        .expect("the end of the code table")
        .0;
    let mut codes: Vec<(usize, String)> = Vec::new();
    for line in table
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains('`'))
    {
        let cells: Vec<&str> = line.split('|').map(str::trim).skip(1).collect();
        for pair in cells.chunks(2) {
            if let [code, name] = pair
                && let Ok(code) = code.parse::<usize>()
                && name.starts_with('`')
            {
                codes.push((code, name.trim_matches('`').to_owned()));
            }
        }
    }
    codes.sort();
    let listed: Vec<String> = codes.iter().map(|(_, n)| n.clone()).collect();
    assert_eq!(
        codes.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        (1..=48).collect::<Vec<_>>()
    );
    assert_eq!(listed, sessionlog::log::envelope::TYPE_CODES);
}

#[test]
fn the_spec_segment_header_example_is_what_the_store_writes() {
    use sessionlog::log::segment::{self, HeaderCheck};
    let bytes = hexdump_after("Example: the header of segment 1 at format version 9", 1);
    assert_eq!(bytes.len(), 32);
    assert_eq!(
        segment::check_header(&bytes, 1),
        HeaderCheck::Valid { version: 9 }
    );
    assert_eq!(segment::encode_header(1).to_vec(), bytes);
}

#[test]
fn the_spec_compacted_segment_header_example_is_what_a_gc_writes() {
    use sessionlog::log::segment::{
        self, COMPACTED_V3_VERSION, COMPACTED_V5_VERSION, COMPACTED_V7_VERSION, COMPACTED_VERSION,
        HeaderCheck,
    };
    let bytes = hexdump_after(
        "Example: the header of compacted segment 1 at format version 10",
        1,
    );
    assert_eq!(bytes.len(), 32);
    assert_eq!(
        segment::check_header(&bytes, 1),
        HeaderCheck::Valid { version: 10 }
    );
    assert_eq!(
        segment::encode_header_version(1, COMPACTED_VERSION).to_vec(),
        bytes
    );
    let v8 = hexdump_after("Example: the same at format version 8", 1);
    assert_eq!(
        segment::check_header(&v8, 1),
        HeaderCheck::Valid { version: 8 }
    );
    assert_eq!(
        segment::encode_header_version(1, COMPACTED_V7_VERSION).to_vec(),
        v8
    );
    // The older builds' compacted versions stay readable.
    let v6 = hexdump_after("Example: the same at format version 6", 1);
    assert_eq!(
        segment::check_header(&v6, 1),
        HeaderCheck::Valid { version: 6 }
    );
    assert_eq!(
        segment::encode_header_version(1, COMPACTED_V5_VERSION).to_vec(),
        v6
    );
    let old = hexdump_after("Example: the same at format version 4", 1);
    assert_eq!(
        segment::check_header(&old, 1),
        HeaderCheck::Valid { version: 4 }
    );
    assert_eq!(
        segment::encode_header_version(1, COMPACTED_V3_VERSION).to_vec(),
        old
    );
}

#[test]
fn the_spec_continued_frame_example_decodes_with_bit_1() {
    let bytes = hexdump_after("Example: the frame of §4.1 with bit 1 set", 1);
    let (header, payload) = frame::decode(&bytes, &FrameLimits::default()).unwrap();
    assert!(header.continued());
    assert_eq!(header.flags, frame::FLAG_CONTINUED);
    assert_eq!(header.crc, 0xa302_5a0a);
    let plain = spec_example();
    assert_eq!(
        frame::decode(&plain, &FrameLimits::default()).unwrap().1,
        payload
    );
    let mut encoder = frame::Encoder::new(1);
    let continued = encoder.encode(&payload, 512, frame::FLAG_CONTINUED);
    assert_eq!(continued, bytes);
    assert_eq!(&bytes[9..], &continued[9..]);
    assert_eq!(bytes[..4], plain[..4]);
}

/// The events of format-spec.md §3.2's worked example: one flush group of session 1.
fn dictionary_example_events() -> Vec<Event> {
    vec![
        Event::new("turn/start", 0, 1_767_225_600_000, r#"{"turn":1}"#),
        Event::new("step/start", 1, 1_767_225_600_002, r#"{"turn":1,"step":1}"#),
    ]
}

#[test]
fn the_built_in_dictionary_is_the_one_the_spec_pins() {
    use sessionlog::log::dictionary::DICTIONARY_1;
    let spec = include_str!("../../format-spec.md");
    let section = spec
        .split("### 3.2 The built-in dictionary")
        .nth(1)
        .expect("section 3.2");
    let pinned = format!(
        "{} bytes, CRC-32 {:#010x}",
        DICTIONARY_1.len(),
        crc32fast::hash(DICTIONARY_1)
    );
    assert!(
        section.contains(&pinned),
        "format-spec.md §3.2 pins the dictionary as `{pinned}`"
    );
    // Its listing in the spec is the same bytes (\xNN escapes, quotes, backslashes).
    let listing = section.split("```").nth(3).expect("the dictionary listing");
    let mut bytes = Vec::new();
    for line in listing.lines() {
        let mut chars = line.trim_end().bytes();
        while let Some(b) = chars.next() {
            if b != b'\\' {
                bytes.push(b);
                continue;
            }
            match chars.next() {
                Some(b'x') => {
                    let hex = [chars.next().unwrap(), chars.next().unwrap()];
                    let hex = std::str::from_utf8(&hex).unwrap();
                    bytes.push(u8::from_str_radix(hex, 16).unwrap());
                }
                Some(other) => bytes.push(other),
                None => panic!("a listing line ends with a lone backslash"),
            }
        }
    }
    assert_eq!(bytes, DICTIONARY_1, "the spec's listing is the dictionary");
}

#[test]
fn the_spec_dictionary_frame_example_decodes_and_is_what_a_version_5_store_wrote() {
    let bytes = hexdump_after("Example: a frame compressed with dictionary 1", 1);
    let (header, payload) = frame::decode(&bytes, &FrameLimits::default()).unwrap();
    assert_eq!(header.flags, frame::FLAG_ZSTD | frame::FLAG_DICTIONARY);
    let mut raw = Vec::new();
    for e in dictionary_example_events() {
        raw.extend(Record::encode_event_v1(1, &e).unwrap());
    }
    assert_eq!(payload, raw);
    assert_eq!(header.raw_len as usize, raw.len());
    assert_eq!(header.stored_len as usize, bytes.len() - 16);
    // The spec's comparison: 99 bytes uncompressed, 84 with zstd alone, 71 with the dictionary.
    assert_eq!(frame::encode(&raw, usize::MAX, 3).len(), 99);
    assert_eq!(
        frame::Encoder::without_dictionary(3)
            .encode(&raw, 64, 0)
            .len(),
        84
    );
    assert_eq!(bytes.len(), 71);
    // The zstd frame refers into the dictionary: without it, zstd refuses it.
    assert!(zstd::bulk::decompress(&bytes[16..], raw.len()).is_err());
    // What a version-5 store wrote for this flush group (default configuration): the
    // dictionary-1 encoder over postcard records.
    assert_eq!(
        frame::Encoder::with_dictionary_1(1).encode(&raw, 64, 0),
        bytes
    );
}

#[test]
fn dictionary_2_is_the_one_the_spec_pins() {
    use sessionlog::log::dictionary::{DICTIONARY_1, DICTIONARY_2, DICTIONARY_2_HEADER};
    let spec = include_str!("../../format-spec.md");
    let section = spec
        .split("### 3.3 Dictionary 2")
        .nth(1)
        .expect("section 3.3")
        .split("\n## 4.")
        .next()
        .expect("its end");
    let pinned = format!(
        "{} bytes, CRC-32 {:#010x}",
        DICTIONARY_2.len(),
        crc32fast::hash(DICTIONARY_2)
    );
    assert!(
        section.contains(&pinned),
        "format-spec.md §3.3 pins dictionary 2 as `{pinned}`"
    );
    let listed = hexdump_after("### 3.3 Dictionary 2", 1);
    assert_eq!(
        listed, DICTIONARY_2_HEADER,
        "the spec's listing is the header"
    );
    assert_eq!(&DICTIONARY_2[..listed.len()], &listed[..]);
    assert_eq!(
        &DICTIONARY_2[listed.len()..],
        DICTIONARY_1,
        "its content is dictionary 1"
    );
    // zstd reads it as a formatted dictionary: magic, then id 2.
    assert_eq!(&DICTIONARY_2[..4], &[0x37, 0xa4, 0x30, 0xec]);
    assert_eq!(
        zstd::zstd_safe::get_dict_id_from_dict(DICTIONARY_2).map(|id| id.get()),
        Some(2)
    );
}

#[test]
fn the_spec_dictionary_2_frame_example_decodes_and_is_what_the_store_writes() {
    let bytes = hexdump_after("Example: a frame compressed with dictionary 2", 1);
    assert_eq!(bytes.len(), 70);
    let (header, payload) = frame::decode(&bytes, &FrameLimits::default()).unwrap();
    assert_eq!(header.flags, frame::FLAG_ZSTD | frame::FLAG_DICTIONARY_2);
    assert_eq!(header.crc, 0x6b76_2d42);
    let mut raw = Vec::new();
    for e in dictionary_example_events() {
        raw.extend(Record::encode_event_v1(1, &e).unwrap());
    }
    assert_eq!(payload, raw);
    assert_eq!(header.raw_len, 83);
    assert_eq!(header.stored_len, 54);
    // Repeat_Mode for all three sequence codes: the tables are the dictionary's.
    assert_eq!(&bytes[50..52], &[0x07, 0xfc]);
    // Without dictionary 2, or with dictionary 1, zstd cannot read it as these bytes.
    assert!(zstd::bulk::decompress(&bytes[16..], raw.len()).is_err());
    let one = zstd::bulk::Decompressor::with_dictionary(sessionlog::log::dictionary::DICTIONARY_1)
        .unwrap()
        .decompress(&bytes[16..], raw.len());
    assert!(one.is_err() || one.unwrap() != raw);
    // The spec's comparison: 71 bytes with dictionary 1, 70 with dictionary 2.
    assert_eq!(
        frame::Encoder::with_dictionary_1(1)
            .encode(&raw, 64, 0)
            .len(),
        71
    );
    // What this build's writer makes of the payload (default configuration).
    assert_eq!(frame::Encoder::new(1).encode(&raw, 64, 0), bytes);
}

#[test]
fn the_spec_zero_tail_example_ends_the_log_and_a_changed_zero_is_a_torn_tail() {
    use sessionlog::error::{LogPosition, OpenError};
    use sessionlog::fs::StdFileSystem;
    use sessionlog::log::Segments;
    use sessionlog::log::scan::{RecoveryMode, scan};
    use sessionlog::log::segment;

    let bytes = hexdump_after(
        "Example: a last segment left by a writer that did not close",
        1,
    );
    assert_eq!(bytes.len(), 32 + 53 + 16);
    assert_eq!(&bytes[32..85], &spec_example()[..], "the frame of §4.1");
    assert!(bytes[85..].iter().all(|&b| b == 0));
    let run = |bytes: &[u8], mode: RecoveryMode| {
        let dir = tempfile::tempdir().unwrap();
        let seg_dir = dir.path().join("segments");
        std::fs::create_dir_all(&seg_dir).unwrap();
        std::fs::write(segment::path(&seg_dir, 1), bytes).unwrap();
        let segments = Segments::new(std::sync::Arc::new(StdFileSystem), seg_dir, false).unwrap();
        let from = LogPosition {
            segment: 1,
            offset: segment::SEGMENT_HEADER_LEN,
        };
        let mut frames = 0;
        let report = scan(
            &segments,
            &[1],
            from,
            mode,
            &FrameLimits::default(),
            &mut |_| {
                frames += 1;
                Ok(())
            },
        );
        (report, frames)
    };
    let end = LogPosition {
        segment: 1,
        offset: 85,
    };
    // The zeros end the log, even for the strictest mode.
    let (report, frames) = run(&bytes, RecoveryMode::AbsoluteConsistency);
    let report = report.unwrap();
    assert_eq!(frames, 1);
    assert_eq!(report.end, end);
    assert_eq!(report.torn_tail, None);
    assert_eq!(report.zero_tail, Some((end, 16)));
    // One changed zero makes them a torn frame.
    let mut torn = bytes.clone();
    torn[90] = 0x5a;
    let (report, _) = run(&torn, RecoveryMode::TolerateTornTail);
    let report = report.unwrap();
    assert_eq!(report.zero_tail, None);
    assert_eq!(
        report.torn_tail.map(|t| (t.position, t.skipped)),
        Some((end, 16))
    );
    match run(&torn, RecoveryMode::AbsoluteConsistency).0 {
        Err(OpenError::TornTail { position, .. }) => assert_eq!(position, end),
        other => panic!("a changed zero is a torn tail: {other:?}"),
    }
}
