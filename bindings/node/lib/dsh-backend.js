'use strict';
// dsh's storage-backend interface (the durable primitives under dsh's persistence
// coordinator) on top of the sessionlog binding. See README.md ("dsh backend" and "Not yet")
// for what this first version can and cannot promise.

module.exports = function define({ SessionlogError }) {
  function checkSignal(signal) {
    if (signal && signal.aborted) throw signal.reason;
  }

  function notFound(e) {
    return e instanceof SessionlogError && e.code === 'SESSION_NOT_FOUND';
  }

  /**
   * A dsh storage backend on `store` (a `Store` opened read-write; open it with
   * `{invariants: 'off', repairOnResume: false}` so that the engine leaves validation and
   * repair to dsh's coordinator as far as it can).
   */
  function dshBackend(store, options = {}) {
    const name = options.name ?? 'sessionlog';
    const closeStore = options.closeStore ?? true;

    async function read(id, fromSeq) {
      try {
        return await store.read(id, fromSeq);
      } catch (e) {
        if (notFound(e)) return undefined;
        throw e;
      }
    }

    return {
      name,

      async loadStored(id, signal) {
        checkSignal(signal);
        const r = await read(id, 0);
        // A session with no events is the shell of a create whose first batch never
        // committed: dsh's backends never show one.
        if (r === undefined || r.length === 0) return undefined;
        // The engine cuts a torn tail when the store is opened, before any load: there is
        // never a torn tail left to report here (README, "Not yet").
        return { meta: r.header, events: r.events, revision: r.revision };
      },

      async readStoredRevision(id, signal) {
        checkSignal(signal);
        const r = await store.revision(id);
        if (r === undefined || r.length === 0) return undefined;
        return r.revision;
      },

      async loadStoredFrom(id, fromSeq, signal) {
        checkSignal(signal);
        if (!Number.isSafeInteger(fromSeq) || fromSeq < 0) {
          throw new TypeError(`fromSeq must be a non-negative safe integer, got ${fromSeq}`);
        }
        const r = await read(id, fromSeq);
        if (r === undefined || r.length === 0) return undefined;
        return { meta: r.header, events: r.events };
      },

      async appendBatch(meta, events, isMaterialized) {
        const id = meta.id;
        if (!Array.isArray(events) || events.length === 0) {
          throw new SessionlogError('INVALID_ARGUMENT', `session ${id} append needs a non-empty batch`);
        }
        for (let i = 1; i < events.length; i++) {
          if (events[i].seq !== events[0].seq + i) {
            throw new SessionlogError(
              'SEQ_MISMATCH',
              `session ${id} append batch has a seq gap: expected ${events[0].seq + i} at index ${i}, got ${events[i].seq}`,
              { got: events[i].seq, expected: events[0].seq + i },
            );
          }
        }
        try {
          if (!isMaterialized) await store.createWithBatch(meta, events);
          else await store.append(id, events);
        } catch (e) {
          if (e instanceof SessionlogError && e.code === 'SEQ_MISMATCH' && e.got === events[0].seq) {
            throw new SessionlogError(
              'SEQ_MISMATCH',
              `session ${id} append starts at seq ${e.got}, stored next seq is ${e.expected}`,
              { got: e.got, expected: e.expected },
            );
          }
          throw e;
        }
      },

      async commitRepair(meta, tornMarker, closers) {
        if (tornMarker !== undefined) {
          // This backend never hands out a marker: the engine cut the torn tail at open.
          throw new SessionlogError(
            'STALE_REPAIR',
            `repair is stale: session ${meta.id} has no torn tail in this store (its tail was cut when the store was opened); load it again`,
          );
        }
        if (!closers || closers.length === 0) return;
        const current = await store.revision(meta.id);
        if (current === undefined) {
          throw new SessionlogError('SESSION_NOT_FOUND', `session ${meta.id} repair: metadata row is missing`);
        }
        await this.appendBatch(meta, closers, true);
      },

      async list(signal) {
        checkSignal(signal);
        return (await store.list()).filter((s) => s.eventCount > 0).map((s) => s.header);
      },

      async listSnapshots(signal) {
        checkSignal(signal);
        return (await store.list())
          .filter((s) => s.eventCount > 0)
          .map((s) => ({ header: s.header, revision: s.revision }));
      },

      // One store holds every session: there is no file per session to locate.
      locate() {
        return undefined;
      },

      async close() {
        if (closeStore) await store.close();
      },
    };
  }

  return { dshBackend };
};
