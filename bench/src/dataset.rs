//! The `disk` dataset the offline examples share (`bytes_per_event`, `envelope_offline`,
//! `zstd_levels`): one session of the dsh workload written one `write` (one frame) per flush
//! group, as the bench's resume section builds it, and the payloads of its frames read back.

use std::path::Path;

use sessionlog::log::frame::{self, FrameLimits};
use sessionlog::log::segment::{SEGMENT_HEADER_LEN, SEGMENTS_DIR};

use crate::peers::{BenchResult, Writer};
use crate::workload::{FlushGroup, SessionGenerator, WorkloadConfig, event_json, session_header};

/// Writes `turns` turns of session 0 through `writer`, one write per flush group, and closes
/// it. Returns the events written and their bytes of event JSON.
pub fn write_session(writer: Box<dyn Writer>, turns: u64) -> BenchResult<(u64, u64)> {
    let config = WorkloadConfig {
        turns,
        ..WorkloadConfig::default()
    };
    writer.create(0, &session_header(0))?;
    let (mut events, mut json) = (0u64, 0u64);
    for FlushGroup { events: group } in SessionGenerator::new(&config, 0) {
        events += group.len() as u64;
        json += group
            .iter()
            .map(|e| event_json(e).len() as u64)
            .sum::<u64>();
        writer.write(0, group)?;
    }
    writer.close()?;
    Ok((events, json))
}

/// The decompressed payload of every frame of the store in `store_dir`, in log order.
pub fn frame_payloads(store_dir: &Path) -> BenchResult<Vec<Vec<u8>>> {
    let mut files: Vec<_> = std::fs::read_dir(store_dir.join(SEGMENTS_DIR))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let bytes = std::fs::read(&path)?;
        let mut at = SEGMENT_HEADER_LEN as usize;
        while at < bytes.len() {
            let (header, payload) = frame::decode(&bytes[at..], &FrameLimits::default())?;
            out.push(payload);
            at += header.frame_len() as usize;
        }
    }
    Ok(out)
}

/// `content` made a formatted zstd dictionary (RFC 8878 §5: magic, `id`, entropy tables,
/// then the content unchanged), its entropy tables computed from `samples` for compression at
/// `level` by zstd's `ZDICT_finalizeDictionary`. How dictionary 2 (format-spec.md §3.3) was
/// made from dictionary 1 (`bench/examples/dictionary_2.rs`).
pub fn finalize_dictionary<S: AsRef<[u8]>>(
    content: &[u8],
    samples: &[S],
    level: i32,
    id: u32,
) -> BenchResult<Vec<u8>> {
    use zstd::zstd_safe::zstd_sys;
    let flat: Vec<u8> = samples
        .iter()
        .flat_map(|s| s.as_ref().iter().copied())
        .collect();
    let sizes: Vec<usize> = samples.iter().map(|s| s.as_ref().len()).collect();
    let mut out = vec![0u8; content.len() + (64 << 10)];
    let params = zstd_sys::ZDICT_params_t {
        compressionLevel: level,
        notificationLevel: 0,
        dictID: id,
    };
    let count = u32::try_from(sizes.len()).map_err(|_| "too many samples")?;
    // SAFETY: every pointer is to a live buffer of the length passed beside it, and `out`
    // is not borrowed elsewhere while zstd writes into it.
    let n = unsafe {
        zstd_sys::ZDICT_finalizeDictionary(
            out.as_mut_ptr().cast(),
            out.len(),
            content.as_ptr().cast(),
            content.len(),
            flat.as_ptr().cast(),
            sizes.as_ptr(),
            count,
            params,
        )
    };
    // SAFETY: a pure function of its argument.
    if unsafe { zstd_sys::ZDICT_isError(n) } != 0 {
        return Err(format!("ZDICT_finalizeDictionary failed (zstd error code {n})").into());
    }
    out.truncate(n);
    Ok(out)
}
