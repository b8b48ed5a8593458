#!/usr/bin/env node
// First version of the binding's benchmark (issue 13): events/s at dsh's four flush points per
// turn for 1 and 16 sessions, and resume time, next to a plain Node JSONL-per-session writer
// that fsyncs each batch. Usage: node bench/bench.js [--turns N] [--sizes 10000,100000] [--dir D]
'use strict';

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Store } = require('..');

const args = process.argv.slice(2);
const arg = (name, def) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : def;
};
const TURNS = Number(arg('turns', '50'));
const SIZES = arg('sizes', '10000,100000').split(',').map(Number);
const ROOT = fs.mkdtempSync(path.join(arg('dir', os.tmpdir()), 'sessionlog-bench-'));

// One turn as dsh writes it: four flush points (write-behind batches).
function turnBatches(seq, turn) {
  const t = Date.now();
  const ev = (type, data, extra) => ({ type, seq: seq++, time: t, data, ...extra });
  const b1 = [
    ev('turn/start', { turn }),
    ev('user/message', { id: `u${turn}`, role: 'user', content: [{ type: 'text', text: `please look at file ${turn}` }], source: { kind: 'user' } }, { surfaceOp: 'append' }),
  ];
  const b2 = [ev('step/start', { turn, step: 1 })];
  for (let i = 0; i < 8; i++) b2.push(ev('assistant/chunk', { turn, step: 1, chunk: { type: 'text-delta', index: 0, text: `chunk ${i} ` } }));
  const call = `call-${turn}`;
  b2.push(
    ev('assistant/message', {
      turn, step: 1,
      message: { id: `a${turn}-1`, role: 'assistant', content: [{ type: 'text', text: 'reading it' }, { type: 'tool-call', id: call, name: 'read', arguments: '{"path":"a.txt"}' }], source: { kind: 'model', provider: 'p', model: 'm' } },
    }, { surfaceOp: 'append' }),
  );
  const callSeq = seq;
  const b3 = [
    ev('tool/call', { turn, step: 1, callId: call, name: 'read', arguments: '{"path":"a.txt"}' }),
    ev('tool/result', {
      turn, step: 1,
      message: { id: `r${turn}`, role: 'user', content: [{ type: 'tool-result', toolCallId: call, content: [{ type: 'text', text: 'x'.repeat(400) }], isError: false }], source: { kind: 'tool', callId: call } },
    }, { sourceEventSeqs: [callSeq], surfaceOp: 'append' }),
    ev('step/end', { turn, step: 1 }),
  ];
  const b4 = [
    ev('step/start', { turn, step: 2 }),
    ev('assistant/message', { turn, step: 2, message: { id: `a${turn}-2`, role: 'assistant', content: [{ type: 'text', text: 'done' }], source: { kind: 'model', provider: 'p', model: 'm' } } }, { surfaceOp: 'append' }),
    ev('step/end', { turn, step: 2 }),
    ev('turn/end', { turn, reason: { kind: 'completed' } }),
  ];
  return { batches: [b1, b2, b3, b4], next: seq };
}

async function sessionlogWriters(sessions, durability) {
  const dir = fs.mkdtempSync(path.join(ROOT, 'sl-'));
  const store = await Store.open(dir, { durability });
  const ids = Array.from({ length: sessions }, (_, i) => `s${i}`);
  await Promise.all(ids.map((id) => store.create({ version: 0, id, createdAt: Date.now() })));
  let events = 0;
  const start = process.hrtime.bigint();
  await Promise.all(
    ids.map(async (id) => {
      let seq = 0;
      for (let turn = 1; turn <= TURNS; turn++) {
        const { batches, next } = turnBatches(seq, turn);
        for (const b of batches) {
          await store.append(id, b);
          events += b.length;
        }
        seq = next;
      }
    }),
  );
  await store.flush();
  const ms = Number(process.hrtime.bigint() - start) / 1e6;
  await store.close();
  return { events, ms };
}

async function jsonlWriters(sessions) {
  const dir = fs.mkdtempSync(path.join(ROOT, 'jsonl-'));
  const handles = await Promise.all(
    Array.from({ length: sessions }, (_, i) => fs.promises.open(path.join(dir, `s${i}.jsonl`), 'a')),
  );
  let events = 0;
  const start = process.hrtime.bigint();
  await Promise.all(
    handles.map(async (fh) => {
      let seq = 0;
      for (let turn = 1; turn <= TURNS; turn++) {
        const { batches, next } = turnBatches(seq, turn);
        for (const b of batches) {
          await fh.write(b.map((e) => JSON.stringify(e)).join('\n') + '\n');
          await fh.sync();
          events += b.length;
        }
        seq = next;
      }
    }),
  );
  const ms = Number(process.hrtime.bigint() - start) / 1e6;
  await Promise.all(handles.map((h) => h.close()));
  return { events, ms };
}

async function resumeTimes(size) {
  const dir = fs.mkdtempSync(path.join(ROOT, 'resume-'));
  // Populated in 'group' mode, one batch per turn. (Populated in 'buffered' mode, frames hold
  // ~1 MiB and Session::messages decodes one frame per surface node: see README.)
  let store = await Store.open(dir, { durability: 'group' });
  await store.create({ version: 0, id: 'big', createdAt: Date.now() });
  const jsonl = path.join(dir, 'big.jsonl');
  const out = fs.openSync(jsonl, 'w');
  let seq = 0;
  for (let turn = 1; seq < size; turn++) {
    const { batches, next } = turnBatches(seq, turn);
    const all = batches.flat();
    await store.append('big', all);
    fs.writeSync(out, all.map((e) => JSON.stringify(e)).join('\n') + '\n');
    seq = next;
  }
  fs.closeSync(out);
  await store.close();

  let start = process.hrtime.bigint();
  store = await Store.open(dir);
  const r = await store.resume('big');
  const slMs = Number(process.hrtime.bigint() - start) / 1e6;
  await store.close();

  start = process.hrtime.bigint();
  const lines = fs.readFileSync(jsonl, 'utf8').split('\n');
  const events = [];
  for (const l of lines) if (l) events.push(JSON.parse(l));
  const jsonlMs = Number(process.hrtime.bigint() - start) / 1e6;
  return { events: seq, messages: r.messages.length, slMs, jsonlMs, parsed: events.length };
}

(async () => {
  const rate = (r) => Math.round(r.events / (r.ms / 1000));
  console.log(`machine: ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ${os.platform()} ${os.release()}, node ${process.version}; dir ${ROOT}`);
  console.log(`writes: ${TURNS} turns per session, 4 flush points per turn (19 events)`);
  console.log('| writer | sessions | events | ms | events/s |');
  console.log('|---|---|---|---|---|');
  for (const sessions of [1, 16]) {
    for (const durability of ['sync', 'group']) {
      const r = await sessionlogWriters(sessions, durability);
      console.log(`| sessionlog (${durability}) | ${sessions} | ${r.events} | ${r.ms.toFixed(0)} | ${rate(r)} |`);
    }
    const j = await jsonlWriters(sessions);
    console.log(`| JSONL + fsync per batch | ${sessions} | ${j.events} | ${j.ms.toFixed(0)} | ${rate(j)} |`);
  }
  console.log('\n| events | sessionlog open + resume (ms) | messages | JSONL read + parse (ms) |');
  console.log('|---|---|---|---|');
  for (const size of SIZES) {
    const r = await resumeTimes(size);
    console.log(`| ${r.events} | ${r.slMs.toFixed(1)} | ${r.messages} | ${r.jsonlMs.toFixed(1)} |`);
  }
  fs.rmSync(ROOT, { recursive: true, force: true });
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
