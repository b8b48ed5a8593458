'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');

const { Store } = require('..');
const { tempDir, meta, turn } = require('./helpers.js');

// 16 sessions append concurrently from one process; each session's batches are issued one
// after another (as dsh's coordinator chains them), the sessions interleave freely.
for (const durability of ['sync', 'group']) {
  test(`16 sessions appending concurrently (${durability})`, async (t) => {
    const dir = tempDir(t);
    let store = await Store.open(dir, { durability });
    const sessions = Array.from({ length: 16 }, (_, i) => `c${i}`);
    await Promise.all(sessions.map((id) => store.create(meta(id))));
    const turns = 20;
    const started = Date.now();
    await Promise.all(
      sessions.map(async (id, k) => {
        for (let n = 0; n < turns; n++) {
          // Two batches per turn: the user's message, then the rest of the turn.
          const events = turn(n * 6, n + 1, `session ${k} turn ${n}`);
          await store.append(id, events.slice(0, 2));
          await store.append(id, events.slice(2));
        }
      }),
    );
    const elapsed = Date.now() - started;
    await store.flush();
    await store.close();

    store = await Store.open(dir, { readOnly: true });
    const listed = await store.list();
    assert.equal(listed.length, 16);
    for (const [k, id] of sessions.entries()) {
      const events = await store.readFrom(id);
      assert.equal(events.length, turns * 6, id);
      const expected = [];
      for (let n = 0; n < turns; n++) expected.push(...turn(n * 6, n + 1, `session ${k} turn ${n}`));
      assert.deepEqual(events, expected, id);
      const r = await store.resume(id);
      assert.equal(r.surface.length, turns * 2);
    }
    await store.close();
    t.diagnostic(`${16 * turns * 2} batches (${16 * turns * 6} events) in ${elapsed} ms`);
  });
}

test('concurrent appends to one session: exactly one wins each seq', async (t) => {
  const store = await Store.open(tempDir(t));
  await store.create(meta('race'));
  const results = await Promise.allSettled(Array.from({ length: 8 }, () => store.append('race', turn(0, 1))));
  const won = results.filter((r) => r.status === 'fulfilled');
  assert.equal(won.length, 1);
  for (const r of results.filter((x) => x.status === 'rejected')) assert.equal(r.reason.code, 'SEQ_MISMATCH');
  assert.deepEqual(await store.readFrom('race'), turn(0, 1));
  await store.close();
});
