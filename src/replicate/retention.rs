//! The remote's own retention (format-spec.md §12.6): manifests older than the window go
//! (keeping the newest one before it, and always the newest), then the generations and parts
//! no remaining manifest needs, and the index snapshots (§12.7) no remaining manifest would
//! restore from.

use std::collections::HashMap;

use super::ReplicateError;
use super::layout::{Manifest, SEGMENTS, parse_part};
use super::remote::Remote;
use super::ship::list_manifests;
use super::snapshot::{INDEX_DIR, parse_snapshot_name};

/// What a retention pass removed.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Pruned {
    pub manifests: u64,
    pub parts: u64,
    pub snapshots: u64,
}

/// Removes what is no longer needed. `building` are the (segment, generation, bytes shipped)
/// the running replicator is writing: they are kept whatever the manifests say.
pub(crate) async fn prune(
    remote: &Remote,
    now_ms: u64,
    window_ms: u64,
    building: &[(u64, u64, u64)],
) -> Result<Pruned, ReplicateError> {
    let mut names = list_manifests(remote).await?;
    names.sort_by_key(|(k, _)| *k);
    let cutoff = now_ms.saturating_sub(window_ms);
    // Keep every manifest at or after the cutoff, the newest one before it, and the newest.
    let before = names.iter().rposition(|((t, _), _)| *t < cutoff);
    let first_kept = before.unwrap_or(0);
    let mut pruned = Pruned::default();
    let mut needed: HashMap<(u64, u64), u64> = HashMap::new();
    for (i, (_, path)) in names.iter().enumerate() {
        if i < first_kept {
            continue;
        }
        let name = path.to_string();
        let Some((bytes, _)) = remote.get(path).await? else {
            continue;
        };
        // A manifest this build cannot read names nothing it can judge: keep everything.
        let Ok(m) = Manifest::decode(&name, &bytes) else {
            return Ok(pruned);
        };
        for s in &m.segments {
            let len = needed.entry((s.number, s.generation)).or_default();
            *len = (*len).max(s.length);
        }
    }
    let kept: Vec<(u64, u64)> = names.iter().skip(first_kept).map(|(k, _)| *k).collect();
    pruned.snapshots = prune_snapshots(remote, &kept).await?;
    if names.len() <= first_kept {
        return Ok(pruned);
    }
    for (_, path) in names.iter().take(first_kept) {
        remote.delete(path).await?;
        pruned.manifests += 1;
    }
    for (n, g, shipped) in building {
        let len = needed.entry((*n, *g)).or_default();
        *len = (*len).max(*shipped);
    }
    for meta in remote.list(&remote.prefix.clone().join(SEGMENTS)).await? {
        let Some(p) = parse_part(&remote.prefix, &meta.location) else {
            continue;
        };
        let keep = needed
            .get(&(p.segment, p.generation))
            .is_some_and(|len| p.start < *len);
        if !keep {
            remote.delete(&p.path).await?;
            pruned.parts += 1;
        }
    }
    Ok(pruned)
}

/// Keeps, for each kept manifest (`kept`, ascending), the newest snapshot at or before it,
/// and any newer than every manifest; deletes the other descriptors, then every body without
/// a kept descriptor (one a run left when it died between the two uploads, too).
async fn prune_snapshots(remote: &Remote, kept: &[(u64, u64)]) -> Result<u64, ReplicateError> {
    let listed = remote.list(&remote.prefix.clone().join(INDEX_DIR)).await?;
    let mut descriptors: Vec<(u64, u64)> = listed
        .iter()
        .filter_map(|m| parse_snapshot_name(m.location.filename()?))
        .filter(|(_, _, ext)| *ext == "json")
        .map(|(t, q, _)| (t, q))
        .collect();
    descriptors.sort_unstable();
    let newest_manifest = kept.last().copied();
    let keep = |k: (u64, u64)| {
        newest_manifest.is_none_or(|n| k > n)
            || kept
                .iter()
                .any(|m| descriptors.iter().rev().find(|d| *d <= m) == Some(&k))
    };
    let mut removed = 0;
    for meta in &listed {
        let Some((t, q, _)) = meta.location.filename().and_then(parse_snapshot_name) else {
            continue;
        };
        let described = descriptors.binary_search(&(t, q)).is_ok();
        if !described || !keep((t, q)) {
            remote.delete(&meta.location).await?;
            removed += 1;
        }
    }
    Ok(removed)
}
