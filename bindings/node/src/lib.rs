//! Node.js binding of the sessionlog engine (napi-rs 3).
//!
//! One native class, `NativeStore`, whose every method returns a Promise computed on libuv's
//! thread pool (`AsyncTask`). Results cross the boundary once, as JSON text
//! (`{"ok":…}` or `{"error":{"code","message",…}}`) that `index.js` parses with one
//! `JSON.parse` and turns into values or `SessionlogError`s. Only the engine's public root
//! API is used.
//!
//! `unsafe_code` is denied for the whole crate. The only unsafe code is the FFI glue the
//! `#[napi]` macros expand to, which napi-derive marks `#[allow(unsafe_code)]` item by item
//! (so `forbid` is not possible; `deny` still refuses any hand-written `unsafe`).

#![deny(unsafe_code)]

mod errors;
mod ops;
mod wire;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, RwLock};

use napi::bindgen_prelude::AsyncTask;
use napi::{Env, Task};
use napi_derive::napi;

use errors::Failure;
use ops::Inner;

type Work = Box<dyn FnOnce(&Inner) -> Result<String, Failure> + Send>;

/// One call, run on the thread pool.
pub struct Op {
    inner: Arc<Inner>,
    work: Option<Work>,
}

impl Task for Op {
    type Output = String;
    type JsValue = String;

    fn compute(&mut self) -> napi::Result<String> {
        let Some(work) = self.work.take() else {
            return Ok(Failure::new("INTERNAL", "the call ran twice").to_json());
        };
        let inner = &self.inner;
        let result = catch_unwind(AssertUnwindSafe(|| work(inner)));
        Ok(match result {
            Ok(Ok(payload)) => format!("{{\"ok\":{payload}}}"),
            Ok(Err(failure)) => failure.to_json(),
            Err(_) => Failure::new(
                "INTERNAL",
                "the engine panicked (a bug: please report it with the store directory)",
            )
            .to_json(),
        })
    }

    fn resolve(&mut self, _env: Env, output: String) -> napi::Result<String> {
        Ok(output)
    }
}

/// A store handle. Created closed; `open` opens it.
#[napi]
pub struct NativeStore {
    inner: Arc<Inner>,
}

impl NativeStore {
    fn run(
        &self,
        work: impl FnOnce(&Inner) -> Result<String, Failure> + Send + 'static,
    ) -> AsyncTask<Op> {
        AsyncTask::new(Op {
            inner: self.inner.clone(),
            work: Some(Box::new(work)),
        })
    }
}

#[napi]
impl NativeStore {
    #[napi(constructor)]
    pub fn new() -> Self {
        NativeStore {
            inner: Arc::new(Inner {
                open: RwLock::new(None),
            }),
        }
    }

    /// Opens the store in `dir`; `options` is JSON text.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn open(&self, dir: String, options: String) -> AsyncTask<Op> {
        self.run(move |inner| inner.open(&dir, &options))
    }

    /// Creates an empty session (`verbatim`: stored without session semantics).
    #[napi(ts_return_type = "Promise<string>")]
    pub fn create(&self, header: String, verbatim: bool) -> AsyncTask<Op> {
        self.run(move |inner| inner.create(&header, verbatim))
    }

    /// Appends a batch given as a JSON array (`jsonl` false) or JSONL text.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn append(&self, id: String, events: String, jsonl: bool) -> AsyncTask<Op> {
        self.run(move |inner| inner.append(&id, &events, jsonl))
    }

    /// Creates the session and appends its first batch as one operation (`Store::create_with_events`,
    /// or `Store::create_verbatim` when `verbatim`; an empty session of that id is replaced).
    #[napi(ts_return_type = "Promise<string>")]
    pub fn create_and_append(
        &self,
        header: String,
        events: String,
        verbatim: bool,
    ) -> AsyncTask<Op> {
        self.run(move |inner| inner.create_and_append(&header, &events, verbatim))
    }

    #[napi(ts_return_type = "Promise<string>")]
    pub fn flush(&self) -> AsyncTask<Op> {
        self.run(|inner| inner.flush())
    }

    #[napi(ts_return_type = "Promise<string>")]
    pub fn resume(&self, id: String, with_events: bool, repair: bool) -> AsyncTask<Op> {
        self.run(move |inner| inner.resume(&id, with_events, repair))
    }

    /// Events with seq >= `from_seq` plus the header and the revision they were read at.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn read_from(&self, id: String, from_seq: f64) -> AsyncTask<Op> {
        self.run(move |inner| inner.read_from(&id, from_seq))
    }

    #[napi(ts_return_type = "Promise<string>")]
    pub fn revision(&self, id: String) -> AsyncTask<Op> {
        self.run(move |inner| inner.revision_of(&id))
    }

    #[napi(ts_return_type = "Promise<string>")]
    pub fn fork(&self, parent: String, child_header: String, seed_length: f64) -> AsyncTask<Op> {
        self.run(move |inner| inner.fork(&parent, &child_header, seed_length))
    }

    #[napi(ts_return_type = "Promise<string>")]
    pub fn list(&self) -> AsyncTask<Op> {
        self.run(|inner| inner.list())
    }

    #[napi(ts_return_type = "Promise<string>")]
    pub fn delete(&self, id: String) -> AsyncTask<Op> {
        self.run(move |inner| inner.delete(&id))
    }

    #[napi(ts_return_type = "Promise<string>")]
    pub fn gc(&self, dry_run: bool) -> AsyncTask<Op> {
        self.run(move |inner| inner.gc(dry_run))
    }

    #[napi(ts_return_type = "Promise<string>")]
    pub fn recovery(&self) -> AsyncTask<Op> {
        self.run(|inner| inner.recovery())
    }

    #[napi(ts_return_type = "Promise<string>")]
    pub fn close(&self) -> AsyncTask<Op> {
        self.run(|inner| inner.close())
    }
}

impl Default for NativeStore {
    fn default() -> Self {
        Self::new()
    }
}
