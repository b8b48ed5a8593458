'use strict';
// SIGKILL a Node process mid-append, reopen: every acknowledged batch is there, whole.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');

const { Store, dshBackend } = require('..');
const { tempDir, turn } = require('./helpers.js');

function runAndKill(dir, acks, mode = 'append') {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'crash-writer.js'), dir, mode], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let acked = 0;
    let seen = 0;
    let buffered = '';
    child.stdout.on('data', (chunk) => {
      buffered += chunk;
      const lines = buffered.split('\n');
      buffered = lines.pop();
      for (const l of lines) {
        acked = Number(l);
        seen++;
        if (seen === acks) child.kill('SIGKILL');
      }
    });
    child.on('error', reject);
    child.on('exit', (code, signal) => resolve({ acked, signal, code }));
  });
}

for (const acks of [7, 40]) {
  test(`SIGKILL after ${acks} acknowledged batches: all of them survive, the open turn is closable`, async (t) => {
    const dir = tempDir(t);
    const { acked, signal } = await runAndKill(dir, acks);
    assert.equal(signal, 'SIGKILL');
    assert.ok(acked >= 2);

    const store = await Store.open(dir, { invariants: 'off', repairOnResume: false });
    const report = await store.recoveryReport();
    t.diagnostic(`acked ${acked} events; recovery: ${JSON.stringify(report)}`);
    const backend = dshBackend(store);
    const loaded = await backend.loadStored('crash');
    const events = loaded.events;
    assert.ok(events.length >= acked, `${events.length} events stored, ${acked} acknowledged`);
    // Whole batches only (a turn is written as 2 + 4 events), contiguous, as appended.
    assert.ok(events.length % 6 === 0 || events.length % 6 === 2, `length ${events.length}`);
    const expected = [];
    for (let n = 1, seq = 0; seq < events.length; n++, seq += 6) expected.push(...turn(seq, n, 'x'.repeat(2000 + (n % 7) * 500)));
    assert.deepEqual(events, expected.slice(0, events.length));
    // The engine cut any torn tail when it opened: there is no marker to report.
    assert.equal(loaded.tornMarker, undefined);
    if (events.length % 6 === 2) {
      const last = events[events.length - 1];
      const turnNo = events[events.length - 2].data.turn;
      await backend.commitRepair(loaded.meta, undefined, [
        { type: 'turn/end', seq: last.seq + 1, time: last.time, data: { turn: turnNo, reason: { kind: 'interrupted' } } },
      ]);
      const repaired = await backend.loadStored('crash');
      assert.equal(repaired.events.at(-1).data.reason.kind, 'interrupted');
    }
    await backend.close();
  });
}

test('SIGKILL while sessions are created with their first batch: each is absent or complete', async (t) => {
  const dir = tempDir(t);
  const { acked, signal } = await runAndKill(dir, 25, 'first');
  assert.equal(signal, 'SIGKILL');
  assert.ok(acked >= 25);
  const store = await Store.open(dir, { invariants: 'off', repairOnResume: false });
  // The store itself (not only the backend, which hides empty sessions) has no empty or
  // partial session: the header and the first batch are one operation.
  const listed = await store.list();
  assert.ok(listed.length >= acked, `${listed.length} sessions, ${acked} acknowledged`);
  for (const s of listed) assert.equal(s.eventCount, 18, `session ${s.header.id}`);
  const ids = new Set(listed.map((s) => s.header.id));
  for (let i = 0; i < acked; i++) assert.ok(ids.has(`s${i}`), `acknowledged session s${i}`);
  const backend = dshBackend(store);
  const loaded = await backend.loadStored(`s${acked - 1}`);
  assert.deepEqual(loaded.events.slice(0, 6), turn(0, 1, 'y'.repeat(3000 + ((acked - 1) % 5) * 700)));
  await backend.close();
});
