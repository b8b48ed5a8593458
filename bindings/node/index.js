'use strict';
// sessionlog for Node.js: the engine's API on Promises. Every call that touches the disk runs
// on libuv's thread pool; data crosses the boundary once per call (one JSON.stringify of a
// batch in, one JSON.parse of the result out).

const path = require('node:path');

function loadAddon() {
  const file = path.join(__dirname, 'sessionlog.node');
  try {
    return require(file);
  } catch (e) {
    const err = new SessionlogError(
      'ADDON_NOT_BUILT',
      `the native addon ${file} could not be loaded (${e.message}); build it with \`npm run build\` (needs cargo)`,
    );
    err.cause = e;
    throw err;
  }
}

/** Every error of this package: `code` is stable, `message` is the engine's. */
class SessionlogError extends Error {
  constructor(code, message, details) {
    super(message);
    this.name = 'SessionlogError';
    this.code = code;
    if (details) Object.assign(this, details);
  }
}

const native = loadAddon();

function unwrap(text) {
  const r = JSON.parse(text);
  if (r.error) {
    const { code, message, ...details } = r.error;
    throw new SessionlogError(code, message, details);
  }
  return r.ok;
}

const DURABILITIES = new Set(['sync', 'group', 'buffered']);
const INVARIANTS = new Set(['always', 'debug', 'off']);

function describe(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return v.constructor && v.constructor.name ? `a ${v.constructor.name}` : 'an object';
  return `${typeof v} ${String(v)}`;
}

/**
 * Throws unless `value` is lossless JSON (dsh's boundary: null, booleans, finite numbers other
 * than -0, strings, dense plain arrays, plain objects; no cycles). Returns nothing.
 */
function assertJson(value, where, seen = new Set()) {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(value) || Object.is(value, -0)) {
        throw new SessionlogError('INVALID_JSON', `${where} is ${value === 0 ? '-0' : value}, which JSON cannot hold`);
      }
      return;
    case 'object': {
      if (value === null) return;
      if (seen.has(value)) throw new SessionlogError('INVALID_JSON', `${where} is a cycle`);
      seen.add(value);
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          if (!(i in value)) throw new SessionlogError('INVALID_JSON', `${where}[${i}] is a hole in a sparse array`);
          assertJson(value[i], `${where}[${i}]`, seen);
        }
      } else {
        const proto = Object.getPrototypeOf(value);
        if (proto !== Object.prototype && proto !== null) {
          throw new SessionlogError('INVALID_JSON', `${where} is ${describe(value)}, not a plain object`);
        }
        for (const k of Object.keys(value)) assertJson(value[k], `${where}.${k}`, seen);
      }
      seen.delete(value);
      return;
    }
    default:
      throw new SessionlogError('INVALID_JSON', `${where} is ${describe(value)}, which JSON cannot hold`);
  }
}

/** Checks every event's `data` and returns the batch as one JSON text. */
function batchText(events) {
  if (!Array.isArray(events)) {
    throw new SessionlogError('INVALID_ARGUMENT', 'events must be an array of dsh events or JSONL text');
  }
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    if (e === null || typeof e !== 'object' || Array.isArray(e)) {
      throw new SessionlogError('INVALID_EVENT', `event at index ${i} is ${describe(e)}, not an event object`);
    }
    const name = typeof e.type === 'string' ? e.type : `at index ${i}`;
    if (!('data' in e) || e.data === undefined) {
      throw new SessionlogError('INVALID_JSON', `event ${name} (seq ${e.seq}) has no data: data must be JSON`, {
        eventType: e.type,
        seq: e.seq,
      });
    }
    try {
      assertJson(e.data, 'data');
    } catch (err) {
      throw new SessionlogError('INVALID_JSON', `event ${name} (seq ${e.seq}) carries data that is not JSON: ${err.message}`, {
        eventType: e.type,
        seq: e.seq,
      });
    }
  }
  return JSON.stringify(events);
}

function headerText(header) {
  if (header === null || typeof header !== 'object' || Array.isArray(header)) {
    throw new SessionlogError('INVALID_HEADER', `a session header must be an object, got ${describe(header)}`);
  }
  // Optional fields set to undefined are dropped, as JSON.stringify does; the engine checks
  // every field's type.
  return JSON.stringify(header);
}

function checkId(id) {
  if (typeof id !== 'string' || id === '') {
    throw new SessionlogError('INVALID_ARGUMENT', `a session id must be a non-empty string, got ${describe(id)}`);
  }
}

class Store {
  #native;
  #dir;

  constructor(handle, dir) {
    if (!(handle instanceof native.NativeStore)) {
      throw new SessionlogError('INVALID_ARGUMENT', 'use Store.open(dir, options) to open a store');
    }
    this.#native = handle;
    this.#dir = dir;
  }

  /** Opens (creating it unless readOnly) the store in `dir`, running crash recovery. */
  static async open(dir, options = {}) {
    if (typeof dir !== 'string' || dir === '') {
      throw new SessionlogError('INVALID_ARGUMENT', 'the store directory must be a non-empty string');
    }
    const o = options ?? {};
    if (o.durability !== undefined && !DURABILITIES.has(o.durability)) {
      throw new SessionlogError('INVALID_OPTIONS', `durability must be 'sync', 'group' or 'buffered', got ${describe(o.durability)}`);
    }
    if (o.invariants !== undefined && !INVARIANTS.has(o.invariants)) {
      throw new SessionlogError('INVALID_OPTIONS', `invariants must be 'always', 'debug' or 'off', got ${describe(o.invariants)}`);
    }
    const known = ['durability', 'groupDelayMs', 'readOnly', 'invariants', 'repairOnResume', 'gcIntervalMs', 'segmentBytes', 'deferredIndexEntries'];
    for (const k of Object.keys(o)) {
      if (!known.includes(k)) throw new SessionlogError('INVALID_OPTIONS', `unknown store option ${k}`);
    }
    const handle = new native.NativeStore();
    unwrap(await handle.open(path.resolve(dir), JSON.stringify(o)));
    return new Store(handle, path.resolve(dir));
  }

  /** The store directory. */
  get dir() {
    return this.#dir;
  }

  /**
   * Creates an empty session. Resolves to `{revision}`. `{verbatim: true}`: the session stores
   * its events exactly as given, with only seq, JSON and size checks (no session semantics).
   */
  async create(header, options = {}) {
    return unwrap(await this.#native.create(headerText(header), options.verbatim === true));
  }

  /**
   * Appends one batch (all or nothing): an array of dsh events (each `seq` must continue the
   * session) or JSONL text. Resolves when durable per the store's durability.
   */
  async append(id, events) {
    checkId(id);
    if (typeof events === 'string') return unwrap(await this.#native.append(id, events, true));
    return unwrap(await this.#native.append(id, batchText(events), false));
  }

  /**
   * Creates a session with its first batch as one operation: after a crash it is absent or
   * complete. `{verbatim: true}` as for `create`.
   */
  async createWithBatch(header, events, options = {}) {
    return unwrap(
      await this.#native.createAndAppend(headerText(header), batchText(events), options.verbatim === true),
    );
  }

  /** A barrier: resolves once everything appended before it is durable. */
  async flush() {
    unwrap(await this.#native.flush());
  }

  /**
   * Resumes a session from the surface index (no replay): `{header, length, surface, messages,
   * messageSeqs, repaired, revision, events?}`. With the store's `repairOnResume` (default),
   * a log ending inside an open turn first gets dsh's crash closers (`repaired` counts them);
   * `{repair: false}` reads the same view and never writes (use it mid-turn).
   */
  async resume(id, options = {}) {
    checkId(id);
    const o = options ?? {};
    return unwrap(await this.#native.resume(id, Boolean(o.events), o.repair !== false));
  }

  /** The stored events with `seq >= fromSeq`. */
  async readFrom(id, fromSeq = 0) {
    checkId(id);
    if (!Number.isSafeInteger(fromSeq) || fromSeq < 0) {
      throw new SessionlogError('INVALID_ARGUMENT', `fromSeq must be a non-negative safe integer, got ${describe(fromSeq)}`);
    }
    return unwrap(await this.#native.readFrom(id, fromSeq)).events;
  }

  /** `{header, length, events, revision}` for `seq >= fromSeq` (one consistent read). */
  async read(id, fromSeq = 0) {
    checkId(id);
    if (!Number.isSafeInteger(fromSeq) || fromSeq < 0) {
      throw new SessionlogError('INVALID_ARGUMENT', `fromSeq must be a non-negative safe integer, got ${describe(fromSeq)}`);
    }
    return unwrap(await this.#native.readFrom(id, fromSeq));
  }

  /** `{length, revision}` of a session, or `undefined` when it does not exist. Reads no event. */
  async revision(id) {
    checkId(id);
    return unwrap(await this.#native.revision(id)) ?? undefined;
  }

  /**
   * Forks `parentId` into `childHeader.id`, inheriting the first `seedLength` events
   * (zero-copy). Resolves to `{header, length, revision}` (the header the engine wrote).
   */
  async fork(parentId, childHeader, seedLength) {
    checkId(parentId);
    if (!Number.isSafeInteger(seedLength) || seedLength < 0) {
      throw new SessionlogError('INVALID_ARGUMENT', `seedLength must be a non-negative safe integer, got ${describe(seedLength)}`);
    }
    return unwrap(await this.#native.fork(parentId, headerText(childHeader), seedLength));
  }

  /** Every session with its counters, title and stats (from the index; no log read). */
  async list() {
    const rows = unwrap(await this.#native.list());
    for (const r of rows) {
      r.title = r.views.title ?? null;
      r.stats = r.views.sessionStats ?? null;
    }
    return rows;
  }

  /** Deletes a session (forks keep what they inherit). */
  async delete(id) {
    checkId(id);
    unwrap(await this.#native.delete(id));
  }

  /** The segment GC on demand: compacts sealed segments deleted sessions left mostly dead. */
  async gc(options = {}) {
    return unwrap(await this.#native.gc(Boolean(options.dryRun)));
  }

  /** What crash recovery found when the store was opened. */
  async recoveryReport() {
    return unwrap(await this.#native.recovery());
  }

  /** Syncs everything, commits the index and releases the store. Further calls fail with STORE_CLOSED. */
  async close() {
    unwrap(await this.#native.close());
  }
}

const { dshBackend } = require('./lib/dsh-backend.js')({ Store, SessionlogError });

module.exports = { Store, SessionlogError, dshBackend, assertJson };
