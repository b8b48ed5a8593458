'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');

const { Store, SessionlogError } = require('..');
const { tempDir, meta, oneTurnLog, turn, user } = require('./helpers.js');

async function rejectsWith(promise, code) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof SessionlogError, `expected a SessionlogError, got ${e}`);
    assert.ok(e instanceof Error);
    assert.equal(e.code, code, e.message);
    return true;
  });
}

test('create, append, readFrom and reopen give back the events deep-equal', async (t) => {
  const dir = tempDir(t);
  let store = await Store.open(dir);
  await store.create(meta('s1', '/work'));
  const r = await store.append('s1', oneTurnLog());
  assert.equal(r.appended, 6);
  assert.equal(r.length, 6);
  assert.equal(r.durable, true);
  assert.deepEqual(await store.readFrom('s1', 0), oneTurnLog());
  await store.close();

  store = await Store.open(dir);
  const events = await store.readFrom('s1', 0);
  assert.deepEqual(events, oneTurnLog());
  // Key order survives too (the envelope's and data's).
  assert.equal(JSON.stringify(events), JSON.stringify(oneTurnLog()));
  assert.deepEqual(await store.readFrom('s1', 4), oneTurnLog().slice(4));
  assert.deepEqual(await store.readFrom('s1', 6), []);
  assert.deepEqual(await store.readFrom('s1', 99), []);
  await store.close();
});

test('append accepts JSONL text as one batch', async (t) => {
  const store = await Store.open(tempDir(t));
  await store.create(meta('j'));
  const text = oneTurnLog().map((e) => JSON.stringify(e)).join('\n') + '\n';
  assert.equal((await store.append('j', text)).appended, 6);
  assert.deepEqual(await store.readFrom('j'), oneTurnLog());
  await rejectsWith(store.append('j', '{"type":"turn/start","seq":6'), 'INVALID_EVENT');
  await store.close();
});

test('a batch is all or nothing', async (t) => {
  const store = await Store.open(tempDir(t));
  await store.create(meta('b'));
  const batch = oneTurnLog();
  batch[4] = { ...batch[4], seq: 9 };
  await rejectsWith(store.append('b', batch), 'SEQ_MISMATCH');
  assert.deepEqual(await store.readFrom('b'), []);
  // A rule broken by the last event also leaves nothing behind.
  const bad = oneTurnLog();
  bad[5] = { type: 'turn/end', seq: 5, time: 6, data: { turn: 7, reason: { kind: 'completed' } } };
  await rejectsWith(store.append('b', bad), 'SEMANTICS');
  assert.equal((await store.revision('b')).length, 0);
  await store.append('b', oneTurnLog());
  assert.equal((await store.revision('b')).length, 6);
  await store.close();
});

test('resume answers from the surface index: surface, messages, header', async (t) => {
  const dir = tempDir(t);
  let store = await Store.open(dir);
  await store.create(meta('r', '/work'));
  await store.append('r', [...oneTurnLog(), ...turn(6, 2, 'second')]);
  await store.close();
  store = await Store.open(dir);
  const r = await store.resume('r');
  assert.deepEqual(r.header, meta('r', '/work'));
  assert.equal(r.length, 12);
  assert.deepEqual(r.surface, [1, 3, 7, 9]);
  assert.deepEqual(r.messageSeqs, [1, 3, 7, 9]);
  assert.equal(r.messages.length, 4);
  assert.deepEqual(r.messages[0], oneTurnLog()[1].data);
  assert.equal(r.messages[2].content[0].text, 'second');
  assert.equal(r.events, undefined);
  assert.equal(r.repaired, 0);
  const withEvents = await store.resume('r', { events: true });
  assert.equal(withEvents.events.length, 12);
  await store.close();
});

test('resume closes a turn left open by a crash (dsh closers), unless repairOnResume is off', async (t) => {
  const dir = tempDir(t);
  let store = await Store.open(dir);
  await store.create(meta('open'));
  await store.append('open', [
    ...oneTurnLog(),
    { type: 'turn/start', seq: 6, time: 7, data: { turn: 2 } },
    { type: 'step/start', seq: 7, time: 8, data: { turn: 2, step: 1 } },
  ]);
  await store.close();

  store = await Store.open(dir, { repairOnResume: false });
  assert.equal((await store.resume('open')).repaired, 0);
  assert.equal((await store.revision('open')).length, 8);
  await store.close();

  store = await Store.open(dir);
  const r = await store.resume('open', { events: true });
  assert.equal(r.repaired, 2);
  assert.deepEqual(
    r.events.slice(8).map((e) => [e.type, e.seq, e.data]),
    [
      ['step/end', 8, { turn: 2, step: 1 }],
      ['turn/end', 9, { turn: 2, reason: { kind: 'interrupted' } }],
    ],
  );
  await store.close();
});

test('fork inherits the seed; list shows titles and stats; delete removes', async (t) => {
  const store = await Store.open(tempDir(t));
  await store.create(meta('parent', '/work'));
  await store.append('parent', [...oneTurnLog(), ...turn(6, 2)]);
  const child = await store.fork('parent', { version: 0, id: 'child', createdAt: 2000 }, 6);
  assert.equal(child.header.id, 'child');
  assert.equal(child.header.parentSession, 'parent');
  assert.equal(child.header.seedLength, 6);
  const childEvents = await store.readFrom('child');
  assert.deepEqual(childEvents.slice(0, 6), oneTurnLog());
  await rejectsWith(store.fork('parent', { version: 0, id: 'child', createdAt: 1 }, 6), 'SESSION_ALREADY_EXISTS');
  await rejectsWith(store.fork('nope', { version: 0, id: 'c2', createdAt: 1 }, 1), 'SESSION_NOT_FOUND');
  await rejectsWith(store.fork('parent', { version: 0, id: 'c3', createdAt: 1 }, 2), 'OPEN_TURN');

  const listed = await store.list();
  assert.deepEqual(listed.map((l) => l.header.id), ['parent', 'child']);
  const p = listed[0];
  assert.equal(p.eventCount, 12);
  assert.equal(p.surfaceLength, 4);
  assert.ok('title' in p && 'stats' in p);
  assert.equal(p.views.listing.turnsEnded, 2);
  assert.equal(typeof p.revision, 'string');

  await store.delete('child');
  assert.deepEqual((await store.list()).map((l) => l.header.id), ['parent']);
  await rejectsWith(store.readFrom('child'), 'SESSION_NOT_FOUND');
  await rejectsWith(store.delete('child'), 'SESSION_NOT_FOUND');
  await store.close();
});

test('error codes', async (t) => {
  const dir = tempDir(t);
  const store = await Store.open(dir);
  await rejectsWith(store.create({ version: 0, id: '', createdAt: 1 }), 'INVALID_HEADER');
  await rejectsWith(store.create({ version: 1, id: 'v', createdAt: 1 }), 'INVALID_HEADER');
  await store.create(meta('e'));
  await rejectsWith(store.create(meta('e')), 'SESSION_EXISTS');
  await rejectsWith(store.append('missing', oneTurnLog()), 'SESSION_NOT_FOUND');
  await rejectsWith(store.append('e', [{ type: 'turn/start', seq: 3, time: 1, data: { turn: 1 } }]), 'SEQ_MISMATCH');
  await rejectsWith(store.append('e', [{ type: 'turn/start', seq: 0, time: 1, data: { turn: NaN } }]), 'INVALID_JSON');
  await rejectsWith(store.append('e', [{ type: 'turn/start', seq: 0, time: 1, data: { turn: 1 }, extra: 1 }]), 'INVALID_EVENT');
  // surfaceOp on a log-only type: a session rule
  await rejectsWith(
    store.append('e', [{ type: 'turn/start', seq: 0, time: 1, data: { turn: 1 }, surfaceOp: 'append' }]),
    'SEMANTICS',
  );
  await rejectsWith(
    store.append('e', [{ type: 'turn/start', seq: 0, time: 1, data: { turn: 1 }, surfaceOp: 'prepend' }]),
    'INVALID_EVENT',
  );
  await rejectsWith(store.append('e', 'not an array'), 'INVALID_EVENT');
  await rejectsWith(store.append('e', 42), 'INVALID_ARGUMENT');
  await rejectsWith(store.readFrom('e', -1), 'INVALID_ARGUMENT');
  await rejectsWith(Store.open(dir), 'STORE_LOCKED');
  await rejectsWith(Store.open(dir, { durability: 'sometimes' }), 'INVALID_OPTIONS');
  await rejectsWith(Store.open(path.join(dir, 'nope'), { readOnly: true }), 'NOT_FOUND');
  await store.close();
  await rejectsWith(store.append('e', oneTurnLog()), 'STORE_CLOSED');
  await rejectsWith(store.list(), 'STORE_CLOSED');
});

test('non-JSON data is refused naming the event type', async (t) => {
  const store = await Store.open(tempDir(t));
  await store.create(meta('nj'));
  for (const data of [undefined, { x: () => 1 }, { x: Infinity }, { x: -0 }, { x: 1n }, { d: new Date(0) }, [1, , 3]]) {
    await assert.rejects(store.append('nj', [{ type: 'plugin/note', seq: 0, time: 1, data }]), (e) => {
      assert.equal(e.code, 'INVALID_JSON');
      assert.match(e.message, /plugin\/note/);
      assert.equal(e.eventType, 'plugin/note');
      return true;
    });
  }
  const cyclic = {};
  cyclic.self = cyclic;
  await rejectsWith(store.append('nj', [{ type: 'plugin/note', seq: 0, time: 1, data: cyclic }]), 'INVALID_JSON');
  assert.equal((await store.revision('nj')).length, 0);
  await store.close();
});

test('durability modes and flush; read-only opens refuse writes', async (t) => {
  for (const durability of ['sync', 'group', 'buffered']) {
    const dir = tempDir(t);
    let store = await Store.open(dir, { durability });
    await store.create(meta('d'));
    const r = await store.append('d', oneTurnLog());
    if (durability === 'sync') assert.equal(r.durable, true);
    await store.flush();
    await store.close();
    store = await Store.open(dir, { readOnly: true });
    assert.deepEqual(await store.readFrom('d'), oneTurnLog(), durability);
    await rejectsWith(store.append('d', turn(6, 2)), 'READ_ONLY');
    await rejectsWith(store.create(meta('x')), 'READ_ONLY');
    await store.close();
  }
});

test('deferredIndexEntries: every value in range reads back what was appended; out of range is refused', async (t) => {
  for (const deferredIndexEntries of [0, 1, 5, 1 << 20]) {
    const dir = tempDir(t);
    let store = await Store.open(dir, { deferredIndexEntries });
    await store.create(meta('d'));
    let log = [];
    for (let i = 0; i < 4; i++) {
      const events = turn(log.length, i + 1);
      const r = await store.append('d', events);
      assert.equal(r.durable, true);
      log = log.concat(events);
      // Read back at once, while the index entries may still be waiting for their commit.
      assert.deepEqual(await store.readFrom('d'), log, `${deferredIndexEntries}`);
    }
    await store.close();
    store = await Store.open(dir, { readOnly: true });
    assert.deepEqual(await store.readFrom('d'), log, `${deferredIndexEntries} after reopen`);
    await store.close();
  }
  const dir = tempDir(t);
  for (const bad of [-1, 1.5, 'many', (1 << 20) + 1]) {
    await rejectsWith(Store.open(dir, { deferredIndexEntries: bad }), 'INVALID_OPTIONS');
  }
});

test('revisions: stable while unchanged, new after every change, qualified by the store', async (t) => {
  const dirA = tempDir(t);
  const a = await Store.open(dirA);
  const b = await Store.open(tempDir(t));
  await a.create(meta('s'));
  await b.create(meta('s'));
  await a.append('s', oneTurnLog());
  await b.append('s', oneTurnLog());
  const ra = (await a.revision('s')).revision;
  assert.equal((await a.revision('s')).revision, ra);
  assert.notEqual((await b.revision('s')).revision, ra);
  await a.append('s', turn(6, 2));
  const ra2 = (await a.revision('s')).revision;
  assert.notEqual(ra2, ra);
  // Deleted and recreated with the same events: still a new revision.
  await a.delete('s');
  assert.equal(await a.revision('s'), undefined);
  await a.create(meta('s'));
  await a.append('s', [...oneTurnLog(), ...turn(6, 2)]);
  const ra3 = (await a.revision('s')).revision;
  assert.notEqual(ra3, ra2);
  const listedA = (await a.list()).find((s) => s.header.id === 's').revision;
  assert.equal(listedA, ra3);
  await a.close();
  await b.close();
  // Reopened: the same revision for the same state (a cache stays valid), and a new one after
  // the next append; the recreated session never repeats the deleted one's revision.
  const again = await Store.open(dirA);
  assert.equal((await again.revision('s')).revision, ra3);
  assert.equal((await again.list()).find((s) => s.header.id === 's').revision, ra3);
  assert.equal((await again.resume('s', { repair: false })).revision, ra3);
  await again.append('s', turn(12, 3));
  const ra4 = (await again.revision('s')).revision;
  assert.ok(![ra, ra2, ra3].includes(ra4));
  await again.close();
  // A read-only open agrees.
  const ro = await Store.open(dirA, { readOnly: true });
  assert.equal((await ro.revision('s')).revision, ra4);
  await ro.close();
});

test('unicode and escapes round-trip', async (t) => {
  const store = await Store.open(tempDir(t));
  await store.create({ ...meta('u'), cwd: '/wörk/\u2028', agentPreset: 'p"q' });
  const text = 'héllo \u0000 \u001f "quoted" \\ \u2028 😀';
  const batch = [{ type: 'turn/start', seq: 0, time: -5, data: { turn: 1 } }, user(1, 2, 'u1', text)];
  await store.append('u', batch);
  assert.deepEqual(await store.readFrom('u'), batch);
  const r = await store.resume('u');
  assert.equal(r.header.cwd, '/wörk/\u2028');
  assert.equal(r.header.agentPreset, 'p"q');
  await store.close();
});

test("the README's agent loop runs", async (t) => {
  const store = await Store.open(tempDir(t), { durability: 'group' });
  await store.create({ version: 0, id: 'chat-1', createdAt: Date.now(), cwd: process.cwd() });
  let seq = 0, turn = 0;
  const ev = (type, data, surface) => ({ type, seq: seq++, time: Date.now(), data, ...(surface && { surfaceOp: 'append' }) });
  async function userTurn(text, callModel) {
    turn++;
    await store.append('chat-1', [ev('turn/start', { turn }), ev('user/message', { id: `u${turn}`, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } }, true)]);
    const { messages } = await store.resume('chat-1', { repair: false }); // surface, from the index
    const reply = await callModel(messages);
    await store.append('chat-1', [ev('step/start', { turn, step: 1 }),
      ev('assistant/message', { turn, step: 1, message: { id: `a${turn}`, role: 'assistant', content: reply, source: { kind: 'model', provider: 'p', model: 'm' } } }, true),
      ev('step/end', { turn, step: 1 }), ev('turn/end', { turn, reason: { kind: 'completed' } })]);
  }
  const seen = [];
  const model = async (messages) => {
    seen.push(messages.length);
    return [{ type: 'text', text: `reply to ${messages.at(-1).content[0].text}` }];
  };
  await userTurn('one', model);
  await userTurn('two', model);
  await store.flush();
  // The model saw 1 message, then 3; the open turn was never closed behind its back.
  assert.deepEqual(seen, [1, 3]);
  const r = await store.resume('chat-1');
  assert.equal(r.repaired, 0);
  assert.equal(r.messages.length, 4);
  assert.equal(r.messages[3].content[0].text, 'reply to two');
  await store.close();
});
