//! One replicator per prefix (format-spec.md §12.5): `lease.json`, created and renewed with
//! conditional writes.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::ReplicateError;
use super::layout::LEASE;
use super::remote::{Conditional, Remote};
use crate::store::now_ms;

/// A lease not renewed for this long may be taken over.
pub(crate) const LEASE_EXPIRY_MS: u64 = 30_000;
/// The holder renews at least this often.
pub(crate) const LEASE_RENEW: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct LeaseBody {
    format: String,
    version: u64,
    replicator: String,
    host: String,
    pid: u64,
    renewed_ms: u64,
}

/// The lease this replicator holds.
#[derive(Debug)]
pub(crate) struct Lease {
    replicator: String,
    etag: Option<String>,
    /// The server refused conditional writes: the lease is checked, not enforced.
    pub conditional: bool,
    renewed: Instant,
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

fn body(replicator: &str) -> Vec<u8> {
    serde_json::to_vec(&LeaseBody {
        format: "sessionlog-replica-lease".into(),
        version: 1,
        replicator: replicator.to_owned(),
        host: host_name(),
        pid: u64::from(std::process::id()),
        renewed_ms: now_ms().max(0) as u64,
    })
    .unwrap_or_default()
}

fn held_by_other(bytes: &[u8], me: &str) -> Option<ReplicateError> {
    let b: LeaseBody = serde_json::from_slice(bytes).ok()?;
    let age = (now_ms().max(0) as u64).saturating_sub(b.renewed_ms);
    // A holder on this host whose process is gone (killed) holds nothing.
    let gone = b.host == host_name()
        && b.pid != u64::from(std::process::id())
        && !std::path::Path::new(&format!("/proc/{}", b.pid)).exists();
    (b.replicator != me && age < LEASE_EXPIRY_MS && !gone).then(|| ReplicateError::Leased {
        replicator: b.replicator,
        host: b.host,
        pid: b.pid,
        age_s: age / 1000,
    })
}

impl Lease {
    /// Takes the prefix's lease for `replicator`, or says who holds it.
    pub async fn acquire(remote: &Remote, replicator: &str) -> Result<Lease, ReplicateError> {
        let path = remote.prefix.clone().join(LEASE);
        for _ in 0..3 {
            let existing = remote.get(&path).await?;
            let etag = match &existing {
                None => None,
                Some((bytes, etag)) => {
                    if let Some(e) = held_by_other(bytes, replicator) {
                        return Err(e);
                    }
                    // Expired (or unreadable): take it over on its ETag.
                    match etag {
                        Some(t) => Some(t.clone()),
                        None => {
                            remote.put(&path, body(replicator)).await?;
                            return Ok(Lease::unconditional(replicator));
                        }
                    }
                }
            };
            match remote.put_if(&path, body(replicator), etag).await? {
                Conditional::Written(etag) => {
                    return Ok(Lease {
                        replicator: replicator.to_owned(),
                        conditional: etag.is_some(),
                        etag,
                        renewed: Instant::now(),
                    });
                }
                // Someone wrote it meanwhile: look again.
                Conditional::Refused => continue,
                Conditional::Unsupported => {
                    remote.put(&path, body(replicator)).await?;
                    return Ok(Lease::unconditional(replicator));
                }
            }
        }
        Err(ReplicateError::Remote {
            op: "taking the lease",
            object: path.to_string(),
            detail: "it keeps changing (another replicator is starting)".into(),
        })
    }

    fn unconditional(replicator: &str) -> Lease {
        Lease {
            replicator: replicator.to_owned(),
            etag: None,
            conditional: false,
            renewed: Instant::now(),
        }
    }

    /// True when the lease should be renewed before the next manifest.
    pub fn due(&self) -> bool {
        self.renewed.elapsed() >= LEASE_RENEW
    }

    /// Renews the lease; fails with [`ReplicateError::Leased`] when another replicator took
    /// it (then nothing more may be written to the prefix).
    pub async fn renew(&mut self, remote: &Remote) -> Result<(), ReplicateError> {
        let path = remote.prefix.clone().join(LEASE);
        if !self.conditional {
            if let Some((bytes, _)) = remote.get(&path).await?
                && let Some(e) = held_by_other(&bytes, &self.replicator)
            {
                return Err(e);
            }
            remote.put(&path, body(&self.replicator)).await?;
            self.renewed = Instant::now();
            return Ok(());
        }
        match remote
            .put_if(&path, body(&self.replicator), self.etag.clone())
            .await?
        {
            Conditional::Written(etag) => {
                self.etag = etag;
                self.renewed = Instant::now();
                Ok(())
            }
            Conditional::Refused | Conditional::Unsupported => {
                let holder = remote.get(&path).await?;
                Err(holder
                    .and_then(|(b, _)| held_by_other(&b, &self.replicator))
                    .unwrap_or(ReplicateError::Leased {
                        replicator: "unknown".into(),
                        host: "unknown".into(),
                        pid: 0,
                        age_s: 0,
                    }))
            }
        }
    }

    /// Gives the lease up (best effort): deletes `lease.json` if it is still this one's.
    pub async fn release(&self, remote: &Remote) {
        let path = remote.prefix.clone().join(LEASE);
        if let Ok(Some((bytes, _))) = remote.get(&path).await
            && serde_json::from_slice::<LeaseBody>(&bytes)
                .is_ok_and(|b| b.replicator == self.replicator)
        {
            let _ = remote.delete(&path).await;
        }
    }
}
