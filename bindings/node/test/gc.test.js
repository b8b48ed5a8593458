'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const { Store, SessionlogError } = require('..');
const { tempDir, meta, turn } = require('./helpers.js');

/**
 * Bytes of the segment files. A background GC may be writing a compacted copy (`.gc`) and
 * renaming it over its segment meanwhile: copies are not segments yet, and a file gone
 * between the listing and its `stat` holds nothing.
 */
function segmentsSize(dir) {
  const segs = path.join(dir, 'segments');
  let n = 0;
  for (const f of fs.readdirSync(segs)) {
    if (!f.endsWith('.seg')) continue;
    try {
      n += fs.statSync(path.join(segs, f)).size;
    } catch (e) {
      if (e.code !== 'ENOENT') throw e;
    }
  }
  return n;
}

/** Twelve sessions of 40 turns with big (but very compressible) messages, over many small segments. */
async function fill(store) {
  const kept = {};
  for (let s = 0; s < 12; s++) {
    const id = `s${s}`;
    await store.create(meta(id, '/work'));
    let events = [];
    for (let k = 0; k < 40; k++) events = events.concat(turn(k * 6, k + 1, `${id} ${'x'.repeat(300)} ${k}`));
    await store.append(id, events);
    kept[id] = events;
  }
  return kept;
}

test('gc() gives back what deleted sessions held; the rest reads the same after a reopen', async (t) => {
  const dir = tempDir(t);
  let store = await Store.open(dir, { segmentBytes: 4096 });
  const written = await fill(store);
  for (let s = 0; s < 12; s += 2) await store.delete(`s${s}`);
  const dry = await store.gc({ dryRun: true });
  assert.equal(dry.dryRun, true);
  assert.ok(dry.freed > 0, JSON.stringify(dry));
  const before = segmentsSize(dir);
  assert.equal(before, dry.sizeBefore);
  const r = await store.gc();
  assert.equal(r.dryRun, false);
  assert.ok(r.compacted.length > 0 && r.freed === dry.freed, JSON.stringify(r));
  assert.equal(segmentsSize(dir), before - r.freed);
  await store.close();
  store = await Store.open(dir);
  for (let s = 1; s < 12; s += 2) assert.deepEqual(await store.readFrom(`s${s}`, 0), written[`s${s}`]);
  assert.equal(await store.revision('s0'), undefined);
  await store.close();
});

test('gcIntervalMs runs the GC in the background after deletions', async (t) => {
  const dir = tempDir(t);
  const store = await Store.open(dir, { segmentBytes: 4096, gcIntervalMs: 10 });
  const written = await fill(store);
  const before = segmentsSize(dir);
  for (let s = 0; s < 12; s += 2) await store.delete(`s${s}`);
  // A liveness bound for the background thread, not a speed assertion.
  const start = Date.now();
  while (segmentsSize(dir) >= before && Date.now() - start < 60000) {
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(segmentsSize(dir) < before, 'the background GC freed space');
  for (let s = 1; s < 12; s += 2) assert.deepEqual(await store.readFrom(`s${s}`, 0), written[`s${s}`]);
  await store.close();
  await assert.rejects(Store.open(dir, { gcIntervalMs: 0 }), (e) => e instanceof SessionlogError && e.code === 'INVALID_OPTIONS');
});
