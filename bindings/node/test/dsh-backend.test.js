'use strict';
// dsh's backend contract cases (dsh-persistence-backend.md), with dsh's event shapes.
const test = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

const { Store, SessionlogError, dshBackend } = require('..');
const { tempDir, meta, oneTurnLog, turn, user } = require('./helpers.js');

const OPTIONS = { invariants: 'off', repairOnResume: false };

async function rejectsCode(promise, code) {
  await assert.rejects(promise, (e) => e instanceof SessionlogError && e.code === code);
}

async function backendOn(t, dir = tempDir(t)) {
  const store = await Store.open(dir, OPTIONS);
  const backend = dshBackend(store);
  return { dir, store, backend };
}

const interruptedEnd = (seq, time, turnNo) => ({
  type: 'turn/end',
  seq,
  time,
  data: { turn: turnNo, reason: { kind: 'interrupted' } },
});

test('name, locate, and absent sessions', async (t) => {
  const { backend } = await backendOn(t);
  assert.equal(typeof backend.name, 'string');
  assert.equal(backend.locate(meta('x')), undefined);
  assert.equal(await backend.loadStored('nope'), undefined);
  assert.equal(await backend.readStoredRevision('nope'), undefined);
  assert.equal(await backend.loadStoredFrom('nope', 0), undefined);
  await backend.close();
});

test('create + append then load gives identical meta and deep-equal events', async (t) => {
  const { backend, dir } = await backendOn(t);
  await backend.appendBatch(meta('s1', '/work'), oneTurnLog(), false);
  const loaded = await backend.loadStored('s1');
  assert.deepEqual(loaded.meta, meta('s1', '/work'));
  assert.deepEqual(loaded.events, oneTurnLog());
  assert.equal(loaded.tornMarker, undefined);
  assert.equal(typeof loaded.revision, 'string');
  // Fresh, unshared objects: freezing one load does not touch the next.
  Object.freeze(loaded.events[0]);
  const again = await backend.loadStored('s1');
  assert.notEqual(again.events[0], loaded.events[0]);
  await backend.close();
  // And after a reopen.
  const { backend: b2 } = await backendOn(t, dir);
  assert.deepEqual((await b2.loadStored('s1')).events, oneTurnLog());
  await b2.close();
});

test('list excludes a created-but-never-appended session', async (t) => {
  const { backend, store } = await backendOn(t);
  await backend.appendBatch(meta('full'), oneTurnLog(), false);
  await store.create(meta('shell')); // an empty session made through the Store API
  assert.deepEqual((await backend.list()).map((h) => h.id), ['full']);
  assert.deepEqual((await backend.listSnapshots()).map((s) => s.header.id), ['full']);
  assert.equal(await backend.loadStored('shell'), undefined);
  assert.equal(await backend.readStoredRevision('shell'), undefined);
  // Materializing the shell's id later works: the first batch replaces it.
  await backend.appendBatch(meta('shell', '/w'), oneTurnLog(), false);
  assert.deepEqual((await backend.loadStored('shell')).meta, meta('shell', '/w'));
  await backend.close();
});

test('loadStoredFrom returns exactly the suffix without mutating', async (t) => {
  const { backend } = await backendOn(t);
  await backend.appendBatch(meta('rf'), [...oneTurnLog(), ...turn(6, 2)], false);
  const before = await backend.readStoredRevision('rf');
  const r = await backend.loadStoredFrom('rf', 4);
  assert.deepEqual(r.meta, meta('rf'));
  assert.deepEqual(r.events, [...oneTurnLog(), ...turn(6, 2)].slice(4));
  assert.deepEqual((await backend.loadStoredFrom('rf', 12)).events, []);
  assert.equal(await backend.readStoredRevision('rf'), before);
  await assert.rejects(backend.loadStoredFrom('rf', -1), TypeError);
  await backend.close();
});

test('listSnapshots revisions are stable (also across a reopen) and change after an append', async (t) => {
  const { dir, backend } = await backendOn(t);
  await backend.appendBatch(meta('a'), oneTurnLog(), false);
  await backend.appendBatch(meta('b'), oneTurnLog(), false);
  const s1 = await backend.listSnapshots();
  const s2 = await backend.listSnapshots();
  assert.deepEqual(s1, s2);
  assert.equal(s1.find((s) => s.header.id === 'a').revision, await backend.readStoredRevision('a'));
  assert.equal((await backend.loadStored('a')).revision, await backend.readStoredRevision('a'));
  await backend.appendBatch(meta('a'), turn(6, 2), true);
  const s3 = await backend.listSnapshots();
  assert.notEqual(s3.find((s) => s.header.id === 'a').revision, s1.find((s) => s.header.id === 'a').revision);
  assert.equal(s3.find((s) => s.header.id === 'b').revision, s1.find((s) => s.header.id === 'b').revision);
  await backend.close();
  // Stable across a reopen: a revision dsh cached still matches an unchanged session.
  const { backend: again } = await backendOn(t, dir);
  assert.deepEqual(await again.listSnapshots(), s3);
  assert.equal(await again.readStoredRevision('b'), s1.find((s) => s.header.id === 'b').revision);
  await again.close();
});

test('a batch whose first seq is not the next seq is rejected, and so is a gap inside a batch', async (t) => {
  const { backend } = await backendOn(t);
  await backend.appendBatch(meta('q'), oneTurnLog(), false);
  await assert.rejects(backend.appendBatch(meta('q'), turn(7, 2), true), {
    code: 'SEQ_MISMATCH',
    message: 'session q append starts at seq 7, stored next seq is 6',
  });
  await assert.rejects(backend.appendBatch(meta('q'), turn(5, 2), true), {
    message: 'session q append starts at seq 5, stored next seq is 6',
  });
  const gap = turn(6, 2);
  gap[3] = { ...gap[3], seq: 10 };
  await assert.rejects(backend.appendBatch(meta('q'), gap, true), { code: 'SEQ_MISMATCH' });
  assert.equal((await backend.loadStored('q')).events.length, 6);
  // A first batch must start at 0.
  await assert.rejects(backend.appendBatch(meta('q2'), turn(1, 1), false), { code: 'SEQ_MISMATCH' });
  assert.equal(await backend.loadStored('q2'), undefined);
  await backend.close();
});

test('non-JSON data is rejected naming the event type', async (t) => {
  const { backend } = await backendOn(t);
  const bad = oneTurnLog();
  bad[2] = { ...bad[2], data: { turn: 1, step: 1, when: new Map() } };
  await assert.rejects(backend.appendBatch(meta('nj'), bad, false), (e) => {
    assert.ok(e instanceof SessionlogError);
    assert.equal(e.code, 'INVALID_JSON');
    assert.match(e.message, /step\/start/);
    return true;
  });
  assert.equal(await backend.loadStored('nj'), undefined);
  await backend.close();
});

test('crash repair: the open turn is reported as stored and closed by commitRepair', async (t) => {
  const { backend, dir } = await backendOn(t);
  // What a crash after two acknowledged batches of turn 2 leaves.
  await backend.appendBatch(meta('cr'), oneTurnLog(), false);
  await backend.appendBatch(
    meta('cr'),
    [
      { type: 'turn/start', seq: 6, time: 7, data: { turn: 2 } },
      { type: 'step/start', seq: 7, time: 8, data: { turn: 2, step: 1 } },
    ],
    true,
  );
  await backend.close();

  const { backend: b } = await backendOn(t, dir);
  const loaded = await b.loadStored('cr');
  assert.equal(loaded.events.length, 8);
  assert.equal(loaded.tornMarker, undefined);
  // The closers dsh's coordinator computes for this log (dsh-persistence-formats.md §9.3).
  const closers = [
    { type: 'step/end', seq: 8, time: 8, data: { turn: 2, step: 1 } },
    interruptedEnd(9, 8, 2),
  ];
  await b.commitRepair(loaded.meta, undefined, closers);
  const repaired = await b.loadStored('cr');
  assert.deepEqual(repaired.events.slice(8), closers);
  assert.notEqual(repaired.revision, loaded.revision);
  // A stale repair (first closer not at the next seq) is refused; so is a marker we never gave.
  await assert.rejects(b.commitRepair(loaded.meta, undefined, closers), { code: 'STALE_REPAIR' });
  await assert.rejects(b.commitRepair(loaded.meta, 8, []), { code: 'STALE_REPAIR' });
  // An append at s10 then succeeds.
  await b.appendBatch(loaded.meta, turn(10, 3), true);
  assert.equal((await b.loadStored('cr')).events.length, 16);
  await b.close();
});

test('tool closers: a retryable synthetic result and an "assess retry risk" result', async (t) => {
  const { backend } = await backendOn(t);
  const log = [
    ...oneTurnLog(),
    { type: 'turn/start', seq: 6, time: 7, data: { turn: 2 } },
    { type: 'step/start', seq: 7, time: 8, data: { turn: 2, step: 1 } },
    {
      type: 'assistant/message',
      seq: 8,
      time: 9,
      data: {
        turn: 2,
        step: 1,
        message: {
          id: 'a2',
          role: 'assistant',
          content: [{ type: 'tool-call', id: 'call-x', name: 'bash', arguments: '{}' }],
          source: { kind: 'model', provider: 'mock', model: 'mock' },
        },
      },
      surfaceOp: 'append',
    },
  ];
  await backend.appendBatch(meta('tc'), log, false);
  const closers = [
    {
      type: 'tool/result',
      seq: 9,
      time: 9,
      data: {
        turn: 2,
        step: 1,
        message: {
          id: 'interrupted-tool-result-call-x-9',
          role: 'user',
          source: { kind: 'tool', callId: 'call-x' },
          content: [
            {
              type: 'tool-result',
              toolCallId: 'call-x',
              isError: true,
              content: [{ type: 'text', text: 'The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed.' }],
            },
          ],
        },
        error: { name: 'ToolNotStartedError', code: 'TOOL_NOT_STARTED' },
      },
      surfaceOp: 'append',
    },
    { type: 'step/end', seq: 10, time: 9, data: { turn: 2, step: 1 } },
    interruptedEnd(11, 9, 2),
  ];
  await backend.commitRepair(meta('tc'), undefined, closers);
  const loaded = await backend.loadStored('tc');
  assert.deepEqual(loaded.events.slice(9), closers);
  assert.equal(JSON.stringify(loaded.events.slice(9)), JSON.stringify(closers));
  await backend.close();
});

test('a seeded fork persists its seed once; seedLength, delegationDepth, parentSession round-trip', async (t) => {
  const { backend, dir } = await backendOn(t);
  await backend.appendBatch(meta('p'), oneTurnLog(), false);
  const childMeta = { version: 0, id: 'child', createdAt: 2000, parentSession: 'p', seedLength: 6, origin: 'subagent', delegationDepth: 1 };
  await backend.appendBatch(childMeta, [...oneTurnLog(), ...turn(6, 2)], false);
  await backend.close();
  const { backend: b } = await backendOn(t, dir);
  const loaded = await b.loadStored('child');
  assert.deepEqual(loaded.meta, childMeta);
  assert.equal(loaded.events.length, 12);
  assert.deepEqual(loaded.events, [...oneTurnLog(), ...turn(6, 2)]);
  assert.deepEqual((await b.list()).find((h) => h.id === 'child'), childMeta);
  await b.close();
});

test('reloading the backend adopts a stored session and persists the suffix ahead of storage', async (t) => {
  const { backend, dir } = await backendOn(t);
  await backend.appendBatch(meta('live'), oneTurnLog(), false);
  await backend.close();
  const { backend: b } = await backendOn(t, dir);
  const stored = await b.loadStored('live');
  await b.appendBatch(stored.meta, turn(stored.events.length, 2), true);
  assert.deepEqual((await b.loadStored('live')).events, [...oneTurnLog(), ...turn(6, 2)]);
  await b.close();
});

test('a new session colliding with a persisted id is rejected', async (t) => {
  const { backend } = await backendOn(t);
  await backend.appendBatch(meta('dup'), oneTurnLog(), false);
  await assert.rejects(backend.appendBatch(meta('dup'), oneTurnLog(), false), { code: 'SESSION_EXISTS' });
  assert.equal((await backend.loadStored('dup')).events.length, 6);
  await backend.close();
});

test('a pre-aborted signal rejects with exactly signal.reason', async (t) => {
  const { backend } = await backendOn(t);
  const reason = { why: 'aborted by test' };
  const ac = new AbortController();
  ac.abort(reason);
  for (const call of [
    () => backend.loadStored('x', ac.signal),
    () => backend.readStoredRevision('x', ac.signal),
    () => backend.loadStoredFrom('x', 0, ac.signal),
    () => backend.list(ac.signal),
    () => backend.listSnapshots(ac.signal),
  ]) {
    await assert.rejects(call(), (e) => e === reason);
  }
  await backend.close();
});

// ---- torn tails: a never-committed operation cut at open is reported by a torn marker ----

/** Cuts the last frame of the store's last segment in half (what a power cut mid-write leaves). */
function tearLastFrame(dir) {
  const segs = fs.readdirSync(path.join(dir, 'segments')).filter((n) => n.endsWith('.seg')).sort();
  const file = path.join(dir, 'segments', segs[segs.length - 1]);
  const bytes = fs.readFileSync(file);
  let at = 32;
  let last = -1;
  while (at + 16 <= bytes.length) {
    last = at;
    at += 16 + bytes.readUInt32LE(at);
  }
  assert.ok(last >= 32, 'the segment has a frame');
  const end = last + Math.floor((at - last) / 2);
  fs.truncateSync(file, end);
}

test('torn marker: a cut multi-frame batch is reported until the repair commits, and only then', async (t) => {
  const dir = tempDir(t);
  const { backend } = await backendOn(t, dir);
  await backend.appendBatch(meta('tm'), oneTurnLog(), false);
  await backend.appendBatch(meta('tm'), [{ type: 'turn/start', seq: 6, time: 7, data: { turn: 2 } }], true);
  // What the writer had published as durable before the big batch: a writer killed while
  // writing that batch leaves ACKED here (a tear below what it published is refused instead).
  const acked = fs.readFileSync(path.join(dir, 'ACKED'));
  // A batch larger than a frame (8 MiB): continued frames; incompressible text.
  const big = [];
  for (let i = 0; i < 3; i++) {
    big.push({ type: 'x/blob', seq: 7 + i, time: 8, data: { blob: crypto.randomBytes(4 << 20).toString('base64') } });
  }
  await backend.appendBatch(meta('tm'), big, true);
  await backend.close();
  tearLastFrame(dir);
  fs.writeFileSync(path.join(dir, 'ACKED'), acked);

  const { backend: b, store } = await backendOn(t, dir);
  const report = await store.recoveryReport();
  assert.ok(report.truncated !== null);
  assert.deepEqual(report.tornSessions.map((s) => [s.id, s.firstSeq]), [['tm', 7]]);
  const loaded = await b.loadStored('tm');
  assert.equal(loaded.events.length, 7, 'the never-committed batch is not visible');
  assert.ok(loaded.tornMarker !== undefined, 'the cut is reported');
  assert.equal((await b.loadStoredFrom('tm', 6)).tornMarker, undefined, 'loadStoredFrom reports no marker');
  // Stale repairs: one that omits the torn tail, one with another marker, one whose closers start elsewhere.
  const closers = [interruptedEnd(7, 9, 2)];
  await rejectsCode(b.commitRepair(loaded.meta, undefined, closers), 'STALE_REPAIR');
  await rejectsCode(b.commitRepair(loaded.meta, { ...loaded.tornMarker, firstSeq: 3 }, closers), 'STALE_REPAIR');
  await rejectsCode(b.commitRepair(loaded.meta, loaded.tornMarker, [interruptedEnd(8, 9, 2)]), 'STALE_REPAIR');
  await b.commitRepair(loaded.meta, loaded.tornMarker, closers);
  const repaired = await b.loadStored('tm');
  assert.equal(repaired.tornMarker, undefined);
  assert.deepEqual(repaired.events.slice(7), closers);
  assert.notEqual(repaired.revision, loaded.revision);
  // The same marker again is stale now.
  await rejectsCode(b.commitRepair(loaded.meta, loaded.tornMarker, []), 'STALE_REPAIR');
  await b.close();
});

// ---- verbatim storage: only seq contiguity, the start seq and JSON are checked ----

test('verbatim storage: a malformed log the coordinator must refuse is stored as given', async (t) => {
  const dir = tempDir(t);
  const { backend } = await backendOn(t, dir);
  // A user/message without surfaceOp: dsh's backends store it, dsh's coordinator refuses it on load.
  const malformed = [{ type: 'turn/start', seq: 0, time: 1, data: { turn: 1 } }, user(1, 2, 'u', 'x')];
  delete malformed[1].surfaceOp;
  await backend.appendBatch(meta('bad'), malformed, false);
  assert.deepEqual((await backend.loadStored('bad')).events, malformed);
  // Later batches too: a turn/end for a turn that never started, a surfaceOp where none belongs.
  const more = [
    { type: 'turn/end', seq: 2, time: 3, data: { turn: 9, reason: { kind: 'completed' } } },
    { type: 'step/start', seq: 3, time: 4, data: { turn: 9, step: 1 }, surfaceOp: 'append' },
  ];
  await backend.appendBatch(meta('bad'), more, true);
  await backend.close();
  // Across a reopen, byte for byte.
  const { backend: again, store } = await backendOn(t, dir);
  assert.equal(JSON.stringify((await again.loadStored('bad')).events), JSON.stringify([...malformed, ...more]));
  // The engine's own resume reports that dsh's load refuses it, with a stable code.
  await assert.rejects(store.resume('bad'), (e) => e instanceof SessionlogError && e.code === 'NOT_LOADABLE');
  const listed = (await store.list()).find((s) => s.header.id === 'bad');
  assert.equal(listed.verbatim, true);
  await again.close();
});

test('verbatim storage: legacy-shaped events are stored as given', async (t) => {
  const { backend } = await backendOn(t);
  const legacy = [
    { type: 'mode/set', seq: 0, time: 1, data: { mode: 'plan' } },
    { type: 'request/header-delta', seq: 1, time: 2, data: { delta: { model: 'x' } } },
    { type: 'request/header', seq: 2, time: 3, data: { reason: 'fallback', provider: 'p', model: 'm' } },
  ];
  await backend.appendBatch(meta('legacy'), legacy, false);
  assert.deepEqual((await backend.loadStored('legacy')).events, legacy);
  await backend.close();
});

test('verbatim storage: still refused are a seq gap, a wrong start seq and non-JSON data', async (t) => {
  const { backend } = await backendOn(t);
  await backend.appendBatch(meta('v'), [{ type: 'mode/set', seq: 0, time: 1, data: {} }], false);
  await assert.rejects(
    backend.appendBatch(meta('v'), [{ type: 'x', seq: 2, time: 1, data: {} }], true),
    /session v append starts at seq 2, stored next seq is 1/,
  );
  await assert.rejects(
    backend.appendBatch(meta('v'), [{ type: 'x', seq: 1, time: 1, data: {} }, { type: 'x', seq: 3, time: 1, data: {} }], true),
    (e) => e.code === 'SEQ_MISMATCH',
  );
  await assert.rejects(
    backend.appendBatch(meta('v'), [{ type: 'odd/type', seq: 1, time: 1, data: 1n }], true),
    /odd\/type/,
  );
  assert.equal((await backend.loadStored('v')).events.length, 1);
  await backend.close();
});

test('fork of a verbatim session: any seed length, the child header as given', async (t) => {
  const { store, backend } = await backendOn(t);
  await backend.appendBatch(meta('p'), [{ type: 'mode/set', seq: 0, time: 1, data: {} }, { type: 'x', seq: 1, time: 2, data: [] }], false);
  const child = { ...meta('c0'), parentSession: 'p', seedLength: 0, delegationDepth: 3 };
  const forked = await store.fork('p', child, 0);
  assert.equal(forked.length, 0);
  assert.deepEqual(forked.header, child);
  const c2 = await store.fork('p', { ...meta('c2'), parentSession: 'p', seedLength: 2 }, 2);
  assert.equal(c2.length, 2);
  assert.deepEqual((await store.read('c2')).events, (await store.read('p')).events);
  await rejectsCode(store.fork('p', meta('c3'), 3), 'INVALID_BOUNDARY');
  await backend.close();
});

test('key order: a closer with surfaceOp before sourceEventSeqs comes back in that order', async (t) => {
  const dir = tempDir(t);
  const { backend } = await backendOn(t, dir);
  const log = [
    { type: 'turn/start', seq: 0, time: 1, data: { turn: 1 } },
    { type: 'step/start', seq: 1, time: 2, data: { turn: 1, step: 1 } },
    { type: 'tool/call', seq: 2, time: 3, data: { turn: 1, step: 1, callId: 'c', name: 'bash', arguments: '{}' } },
    {
      type: 'tool/result',
      seq: 3,
      time: 4,
      data: {
        turn: 1,
        step: 1,
        message: { id: 'r', role: 'user', source: { kind: 'tool', callId: 'c' }, content: [{ type: 'tool-result', toolCallId: 'c', isError: true, content: [] }] },
      },
      surfaceOp: 'append',
      sourceEventSeqs: [2],
    },
  ];
  await backend.appendBatch(meta('ko'), log, false);
  assert.equal(JSON.stringify((await backend.loadStored('ko')).events), JSON.stringify(log));
  // Any other order comes back as given too, in a later batch and after a reopen.
  const odd = { seq: 4, type: 'step/end', data: { turn: 1, step: 1 }, time: 5 };
  const canonical = { type: 'turn/end', seq: 5, time: 6, data: { turn: 1, reason: { kind: 'completed' } } };
  await backend.appendBatch(meta('ko'), [odd, canonical], true);
  const expected = JSON.stringify([...log, odd, canonical]);
  assert.equal(JSON.stringify((await backend.loadStored('ko')).events), expected);
  await backend.close();
  const { backend: again } = await backendOn(t, dir);
  assert.equal(JSON.stringify((await again.loadStored('ko')).events), expected);
  assert.equal(JSON.stringify((await again.loadStoredFrom('ko', 3)).events), JSON.stringify([log[3], odd, canonical]));
  await again.close();
});
