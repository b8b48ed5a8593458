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
    // Torn tails: the engine cuts a never-committed operation when the store opens and names
    // the sessions it held (`recoveryReport().tornSessions`). Until dsh's coordinator commits
    // its repair, such a session is reported with a torn marker, as dsh's backends report a
    // torn tail still on disk. Pending cuts, by id (loaded once).
    let pending;
    async function pendingCut(id, length) {
      if (pending === undefined) {
        pending = new Map();
        for (const t of (await store.recoveryReport()).tornSessions ?? []) pending.set(t.id, t);
      }
      const cut = pending.get(id);
      // Anything appended since means the cut was dealt with another way.
      if (cut !== undefined && cut.firstSeq !== length) {
        pending.delete(id);
        return undefined;
      }
      return cut;
    }
    const markerOf = (cut) => ({ kind: 'sessionlog-cut', id: cut.id, firstSeq: cut.firstSeq, events: cut.events });

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
        const cut = await pendingCut(id, r.length);
        const loaded = { meta: r.header, events: r.events, revision: r.revision };
        if (cut !== undefined) loaded.tornMarker = markerOf(cut);
        return loaded;
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
          // Verbatim: the coordinator validates on load; the backend checks only seqs and JSON.
          if (!isMaterialized) await store.createWithBatch(meta, events, { verbatim: true });
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
        const stale = (why) => new SessionlogError('STALE_REPAIR', `repair of session ${meta.id} is stale: ${why}; load it again`);
        const current = await store.revision(meta.id);
        if (current === undefined) {
          throw new SessionlogError('SESSION_NOT_FOUND', `session ${meta.id} repair: metadata row is missing`);
        }
        const cut = await pendingCut(meta.id, current.length);
        if (tornMarker !== undefined) {
          if (cut === undefined || tornMarker?.firstSeq !== cut.firstSeq || tornMarker?.id !== meta.id) {
            throw stale('its torn marker no longer matches the stored tail');
          }
        } else if (cut !== undefined) {
          throw stale(`a torn tail from seq ${cut.firstSeq} is there now and the repair omits it`);
        }
        if (closers && closers.length > 0) {
          if (closers[0].seq !== current.length) {
            throw stale(`its first closer has seq ${closers[0].seq}, stored next seq is ${current.length}`);
          }
          await this.appendBatch(meta, closers, true);
        }
        // The engine cut the tail when the store opened; the repair is now complete.
        if (cut !== undefined) pending.delete(meta.id);
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
