//! What the replication tests share: an S3-protocol server (moto's, started once for the test
//! binary, or the one `SESSIONLOG_S3_ENDPOINT` names), a TCP proxy in front of it that a test
//! can take down and bring back (the server "killed and restarted" as clients see it), and
//! snapshots of a store's sessions to compare.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use sessionlog::replicate::ReplicaTarget;
use sessionlog::{Config, SessionHeader, Store};
use sessionlog_bench::workload::synthetic_event;

/// The server: its endpoint URL (`None`: none could be started; the tests skip).
pub fn server() -> Option<&'static str> {
    static SERVER: OnceLock<Option<String>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            if let Ok(endpoint) = std::env::var("SESSIONLOG_S3_ENDPOINT") {
                return Some(endpoint);
            }
            start_moto()
        })
        .as_deref()
}

/// Prints why a test is skipped (no server) and returns true.
pub fn skip() -> bool {
    if server().is_some() {
        return false;
    }
    eprintln!(
        "note: skipping: no S3-protocol server (install moto: pip install \"moto[server]\", or set SESSIONLOG_S3_ENDPOINT to a server with SESSIONLOG_S3_BUCKET and AWS_* credentials)"
    );
    true
}

fn free_port() -> Option<u16> {
    let l = TcpListener::bind("127.0.0.1:0").ok()?;
    Some(l.local_addr().ok()?.port())
}

/// Starts `moto_server` on a free port of 127.0.0.1, watched by a shell that stops it when
/// this test process is gone; waits until it answers (30 s at most).
fn start_moto() -> Option<String> {
    let port = free_port()?;
    let me = std::process::id();
    let script = format!(
        "moto_server -p {port} -H 127.0.0.1 >/dev/null 2>&1 & m=$!; \
         while kill -0 {me} 2>/dev/null && kill -0 $m 2>/dev/null; do sleep 1; done; kill $m 2>/dev/null"
    );
    // The shell stops the server and exits by itself once this process is gone.
    #[allow(clippy::zombie_processes)]
    std::process::Command::new("sh")
        .args(["-c", &script])
        .stdin(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if http(&format!("127.0.0.1:{port}"), "GET", "/", b"").is_some_and(|s| s > 0) {
            return Some(format!("http://127.0.0.1:{port}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

/// A minimal HTTP/1.1 request; the status code.
fn http(addr: &str, method: &str, path: &str, body: &[u8]) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .ok()?;
    s.write_all(body).ok()?;
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    text.split_whitespace().nth(1)?.parse().ok()
}

/// A new bucket on the test server (moto accepts unsigned requests); with an external
/// server, `SESSIONLOG_S3_BUCKET` (which must exist) and a fresh prefix in it.
pub fn bucket_url(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let unique = format!("{name}-{}-{n}", std::process::id());
    if let Ok(bucket) = std::env::var("SESSIONLOG_S3_BUCKET") {
        return format!("s3://{bucket}/{unique}");
    }
    let endpoint = server().unwrap_or_default();
    let addr = endpoint.trim_start_matches("http://");
    let status = http(addr, "PUT", &format!("/{unique}"), b"");
    assert_eq!(status, Some(200), "creating bucket {unique} on {endpoint}");
    format!("s3://{unique}/replica")
}

/// Credentials for moto (any will do) unless the environment has them.
pub fn credentials() -> Vec<(&'static str, String)> {
    let get = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    vec![
        ("AWS_ACCESS_KEY_ID", get("AWS_ACCESS_KEY_ID", "test")),
        (
            "AWS_SECRET_ACCESS_KEY",
            get("AWS_SECRET_ACCESS_KEY", "test"),
        ),
        ("AWS_REGION", get("AWS_REGION", "us-east-1")),
    ]
}

/// A target for the library at `endpoint` (the server or a proxy's).
pub fn target(url: &str, endpoint: &str) -> ReplicaTarget {
    let (mut id, mut secret) = (String::new(), String::new());
    for (k, v) in credentials() {
        match k {
            "AWS_ACCESS_KEY_ID" => id = v,
            "AWS_SECRET_ACCESS_KEY" => secret = v,
            _ => {}
        }
    }
    ReplicaTarget::s3(url)
        .unwrap()
        .endpoint(endpoint)
        .allow_http(true)
        .credentials(id, secret)
        .region("us-east-1")
        .interval(Duration::from_millis(50))
}

/// A TCP proxy to the server that a test takes down (connections cut, new ones refused) and
/// brings back on the same port.
pub struct Proxy {
    pub port: u16,
    up: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    pub fn start(upstream: &str) -> Proxy {
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let port = free_port().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (u, s, c) = (up.clone(), stop.clone(), conns.clone());
        std::thread::spawn(move || {
            let mut listener: Option<TcpListener> = None;
            while !s.load(Ordering::SeqCst) {
                if !u.load(Ordering::SeqCst) {
                    listener = None;
                    for conn in c.lock().unwrap().drain(..) {
                        let _ = conn.shutdown(Shutdown::Both);
                    }
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                if listener.is_none() {
                    listener = TcpListener::bind(("127.0.0.1", port)).ok();
                    if let Some(l) = &listener {
                        l.set_nonblocking(true).unwrap();
                    }
                }
                let Some(l) = &listener else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                match l.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let Ok(server) = TcpStream::connect(&upstream) else {
                            continue;
                        };
                        let mut list = c.lock().unwrap();
                        list.push(client.try_clone().unwrap());
                        list.push(server.try_clone().unwrap());
                        pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                        pipe(server, client);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
            for conn in c.lock().unwrap().drain(..) {
                let _ = conn.shutdown(Shutdown::Both);
            }
        });
        Proxy {
            port,
            up,
            stop,
            conns,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Down: every connection cut, new ones refused. Up: accepting again.
    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            // Wait until the proxy thread has cut everything.
            let deadline = Instant::now() + Duration::from_secs(2);
            while !self.conns.lock().unwrap().is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

/// Every session of a store: id, events, surface, derived messages (compared as text).
pub fn snapshot(dir: &Path) -> Vec<String> {
    let store = Store::open(dir, Config::default().read_only(true)).unwrap();
    let mut out = Vec::new();
    let mut sessions = store.sessions();
    sessions.sort_by(|a, b| a.header.id.cmp(&b.header.id));
    for info in sessions {
        let id = info.header.id.clone();
        let len = store.len(&id).unwrap_or(0);
        let events: Vec<_> = store
            .events(&id, 0..len)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        out.push(format!(
            "{id}: {:?}\nsurface {:?}\nmessages {:?}",
            events,
            store.surface(&id).unwrap(),
            store.messages(&id).unwrap()
        ));
    }
    out
}

/// Event counts per session.
pub fn counts(dir: &Path) -> Vec<(String, u64)> {
    let store = Store::open(dir, Config::default().read_only(true)).unwrap();
    let mut v: Vec<_> = store
        .sessions()
        .into_iter()
        .map(|i| {
            let n = store.len(&i.header.id).unwrap_or(0);
            (i.header.id, n)
        })
        .collect();
    v.sort();
    v
}

/// `sessionlog verify` on a store must pass.
pub fn verify_clean(dir: &Path) {
    let store = Store::open(dir, Config::default().read_only(true)).unwrap();
    let report = store.verify().unwrap();
    assert!(
        report.bad_frames.is_empty() && report.problems.is_empty(),
        "{report:?}"
    );
}

/// Runs the CLI with the credentials and `args` (no `--store`).
pub fn cli(args: &[&str]) -> std::process::Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_sessionlog"));
    c.args(args).env_remove("SESSIONLOG_STORE");
    for (k, v) in credentials() {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// A `sessionlog replicate` process (stdout piped).
pub fn spawn_replicate(url: &str, endpoint: &str, dir: &Path) -> std::process::Child {
    spawn_replicate_with(url, endpoint, dir, &[])
}

/// A `sessionlog replicate` process with `extra` options (stdout piped).
pub fn spawn_replicate_with(
    url: &str,
    endpoint: &str,
    dir: &Path,
    extra: &[&str],
) -> std::process::Child {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_sessionlog"));
    c.args([
        "replicate",
        "--to",
        url,
        "--endpoint",
        endpoint,
        "--interval",
        "100ms",
    ])
    .args(extra)
    .arg(dir)
    .env_remove("SESSIONLOG_STORE")
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    for (k, v) in credentials() {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

/// Sends `signal` (a number) to a child.
pub fn signal(child: &std::process::Child, signal: i32) {
    let _ = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status();
}

/// Waits for a condition, at most `secs` seconds.
pub fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Appends `n` synthetic events to each of `ids` (created when missing).
pub fn append(store: &Store, ids: &[&str], n: u64) {
    for (salt, id) in ids.iter().enumerate() {
        if store.len(id).is_none() {
            store
                .create_session(SessionHeader::new(*id, 1_767_225_600_000))
                .unwrap();
        }
        let start = store.len(id).unwrap();
        for seq in start..start + n {
            store.append(id, synthetic_event(seq, salt as u64)).unwrap();
        }
    }
}

/// The object store as the tests see it (to move and damage objects).
pub fn raw_store(url: &str, endpoint: &str) -> (object_store::aws::AmazonS3, String) {
    let rest = url.strip_prefix("s3://").unwrap();
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let mut b = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_region("us-east-1");
    for (k, v) in credentials() {
        match k {
            "AWS_ACCESS_KEY_ID" => b = b.with_access_key_id(v),
            "AWS_SECRET_ACCESS_KEY" => b = b.with_secret_access_key(v),
            _ => {}
        }
    }
    (b.build().unwrap(), prefix.to_owned())
}
