'use strict';
// Fixtures in dsh's event shapes (dsh's contract suite: `meta`, `oneTurnLog`).

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

function tempDir(t, prefix = 'sessionlog-node-') {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  if (t && typeof t.after === 'function') t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const meta = (id, cwd) => (cwd === undefined ? { version: 0, id, createdAt: 1000 } : { version: 0, id, createdAt: 1000, cwd });

const user = (seq, time, id, text) => ({
  type: 'user/message',
  seq,
  time,
  data: { id, role: 'user', content: [{ type: 'text', text }], source: { kind: 'user' } },
  surfaceOp: 'append',
});

const assistant = (seq, time, turn, step, id, content) => ({
  type: 'assistant/message',
  seq,
  time,
  data: { turn, step, message: { id, role: 'assistant', content, source: { kind: 'model', provider: 'mock', model: 'mock' } } },
  surfaceOp: 'append',
});

function oneTurnLog() {
  return [
    { type: 'turn/start', seq: 0, time: 1, data: { turn: 1 } },
    user(1, 2, 'one-turn-user', 'hi'),
    { type: 'step/start', seq: 2, time: 3, data: { turn: 1, step: 1 } },
    assistant(3, 4, 1, 1, 'one-turn-assistant', [{ type: 'text', text: 'hello' }]),
    { type: 'step/end', seq: 4, time: 5, data: { turn: 1, step: 1 } },
    { type: 'turn/end', seq: 5, time: 6, data: { turn: 1, reason: { kind: 'completed' } } },
  ];
}

/** One complete turn starting at `seq` (turn number `turn`): 6 events. */
function turn(seq, turnNo, text = `message ${turnNo}`) {
  const t = 1000 + seq;
  return [
    { type: 'turn/start', seq, time: t, data: { turn: turnNo } },
    user(seq + 1, t + 1, `u-${turnNo}-${seq}`, text),
    { type: 'step/start', seq: seq + 2, time: t + 2, data: { turn: turnNo, step: 1 } },
    assistant(seq + 3, t + 3, turnNo, 1, `a-${turnNo}-${seq}`, [{ type: 'text', text: `reply ${turnNo}` }]),
    { type: 'step/end', seq: seq + 4, time: t + 4, data: { turn: turnNo, step: 1 } },
    { type: 'turn/end', seq: seq + 5, time: t + 5, data: { turn: turnNo, reason: { kind: 'completed' } } },
  ];
}

module.exports = { tempDir, meta, user, assistant, oneTurnLog, turn };
