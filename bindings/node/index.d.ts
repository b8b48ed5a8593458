// TypeScript declarations for the `sessionlog` package.

/** dsh's session header (`SessionHeader`); unknown keys are kept. */
export interface SessionHeader {
  version: 0;
  id: string;
  createdAt: number;
  cwd?: string;
  parentSession?: string;
  seedLength?: number;
  origin?: 'subagent';
  delegationDepth?: number;
  agentPreset?: string;
  owner?: string;
  [extra: string]: unknown;
}

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

export type SurfaceOp = 'append' | { op: 'replace'; start: number; end: number };

/** dsh's event envelope (`SessionEvent`). */
export interface SessionEvent {
  type: string;
  seq: number;
  time: number;
  data: JsonValue;
  sourceEventSeqs?: number[];
  surfaceOp?: SurfaceOp;
  ignorable?: true;
}

export type Durability = 'sync' | 'group' | 'buffered';

export interface StoreOptions {
  /** When an append is durable: 'sync' (default) before it resolves; 'group' within `groupDelayMs`; 'buffered' at flush/close. */
  durability?: Durability;
  /** 'group' only: the longest an append waits to become durable (default 10 ms). */
  groupDelayMs?: number;
  /** Open shared and read-only: no recovery writes, no appends. */
  readOnly?: boolean;
  /** When dsh's turn/step/tool invariants are enforced on append (default 'always'). */
  invariants?: 'always' | 'debug' | 'off';
  /** `resume` appends dsh's crash closers to a log that ends inside an open turn (default true). */
  repairOnResume?: boolean;
  /** Run the segment GC in the background every this many ms when sessions were deleted (default: never; `gc()` on demand). */
  gcIntervalMs?: number;
  /** Segment file size before the log rolls over to a new segment (default 64 MiB). */
  segmentBytes?: number;
  /**
   * Index entries of durable appends that may wait for one index commit (default 4096, at most
   * 1048576; 0 commits with every write). Fewer, larger commits cost less CPU per event; the
   * waiting entries' events stay in memory, and a crash loses none of them (recovery indexes the log).
   */
  deferredIndexEntries?: number;
}

/** What `gc()` did (or, with `dryRun`, would do). */
export interface GcReport {
  dryRun: boolean;
  /** Segment numbers compacted. */
  compacted: number[];
  freed: number;
  sizeBefore: number;
  sizeAfter: number;
  recordsDropped: number;
}

/** Stable error codes (the `code` of a `SessionlogError`). */
export type ErrorCode =
  | 'ADDON_NOT_BUILT'
  | 'GC'
  | 'INVALID_ARGUMENT'
  | 'INVALID_OPTIONS'
  | 'INVALID_HEADER'
  | 'INVALID_EVENT'
  | 'INVALID_JSON'
  | 'SEQ_MISMATCH'
  | 'SEMANTICS'
  | 'TOO_LARGE'
  | 'SESSION_NOT_FOUND'
  | 'SESSION_EXISTS'
  | 'SESSION_ALREADY_EXISTS'
  | 'SESSION_NOT_LIVE'
  | 'INVALID_BOUNDARY'
  | 'OPEN_TURN'
  | 'STORE_LOCKED'
  | 'STORE_CLOSED'
  | 'ALREADY_OPEN'
  | 'READ_ONLY'
  | 'NOT_FOUND'
  | 'UNSUPPORTED_FORMAT'
  | 'CORRUPTION'
  | 'NEEDS_REPAIR'
  | 'INDEX'
  | 'IO'
  | 'WRITER_FAILED'
  | 'DERIVE'
  | 'NOT_LOADABLE'
  | 'UNREPRESENTABLE'
  | 'STALE_REPAIR'
  | 'INTERNAL';

export class SessionlogError extends Error {
  readonly name: 'SessionlogError';
  readonly code: ErrorCode;
  /** SEQ_MISMATCH: the seq given and the seq expected. */
  readonly got?: number;
  readonly expected?: number;
  /** INVALID_JSON: the offending event's type and seq. */
  readonly eventType?: string;
  readonly seq?: number;
}

export interface AppendResult {
  appended: number;
  lastSeq?: number;
  length: number;
  /** True when the batch was durable before the call resolved. */
  durable?: boolean;
  revision: string;
}

export interface Resumed {
  header: SessionHeader;
  length: number;
  /** Model-visible node seqs, in order (from the index, no replay). */
  surface: number[];
  /** dsh's `deriveMessages()`. */
  messages: JsonValue[];
  /** The surface node each message came from. */
  messageSeqs: number[];
  /** Crash closers appended by this resume. */
  repaired: number;
  revision: string;
  events?: SessionEvent[];
}

export interface Listed {
  header: SessionHeader;
  /** Stored without session semantics (`create(header, {verbatim: true})`, dshBackend). */
  verbatim: boolean;
  eventCount: number;
  dataBytes: number;
  lastTime: number;
  surfaceLength: number;
  replaceGeneration: number;
  revision: string;
  /** dsh's title (the `title` projection). */
  title: JsonValue;
  /** dsh's session stats (the `sessionStats` projection). */
  stats: JsonValue;
  /** Every projection's view, by key. */
  views: Record<string, JsonValue>;
}

export interface RecoveryReport {
  framesScanned: number;
  eventsRecovered: number;
  tornOperationFrames: number;
  indexRebuilt: boolean;
  truncated: null | { segment: number; offset: number; reason: string };
  /** Sessions whose never-committed events were cut at open (from the whole frames of a torn multi-frame operation). */
  tornSessions: { id: string; firstSeq: number; events: number }[];
}

export class Store {
  private constructor();
  static open(dir: string, options?: StoreOptions): Promise<Store>;
  readonly dir: string;
  /** `verbatim`: store events exactly as given (seq, JSON and size checks only). */
  create(header: SessionHeader, options?: { verbatim?: boolean }): Promise<{ revision: string }>;
  append(id: string, events: SessionEvent[] | string): Promise<AppendResult>;
  createWithBatch(header: SessionHeader, events: SessionEvent[], options?: { verbatim?: boolean }): Promise<AppendResult>;
  flush(): Promise<void>;
  /** `repair: false`: never append closers (the view of a live, mid-turn session). */
  resume(id: string, options?: { events?: boolean; repair?: boolean }): Promise<Resumed>;
  readFrom(id: string, fromSeq?: number): Promise<SessionEvent[]>;
  read(id: string, fromSeq?: number): Promise<{ header: SessionHeader; length: number; events: SessionEvent[]; revision: string }>;
  revision(id: string): Promise<{ length: number; revision: string } | undefined>;
  /** A verbatim parent forks at any seedLength (0 included) with `childHeader` as given. */
  fork(parentId: string, childHeader: SessionHeader, seedLength: number): Promise<{ header: SessionHeader; length: number; revision: string }>;
  list(): Promise<Listed[]>;
  delete(id: string): Promise<void>;
  gc(options?: { dryRun?: boolean }): Promise<GcReport>;
  recoveryReport(): Promise<RecoveryReport>;
  close(): Promise<void>;
}

/** dsh's storage-backend interface (see README: "dsh backend", "Not yet"). */
export interface DshBackend {
  readonly name: string;
  loadStored(id: string, signal?: AbortSignal): Promise<{ meta: SessionHeader; events: SessionEvent[]; revision: string; tornMarker?: unknown } | undefined>;
  readStoredRevision(id: string, signal?: AbortSignal): Promise<string | undefined>;
  loadStoredFrom(id: string, fromSeq: number, signal?: AbortSignal): Promise<{ meta: SessionHeader; events: SessionEvent[] } | undefined>;
  appendBatch(meta: SessionHeader, events: SessionEvent[], isMaterialized: boolean): Promise<void>;
  commitRepair(meta: SessionHeader, tornMarker: unknown, closers: SessionEvent[]): Promise<void>;
  list(signal?: AbortSignal): Promise<SessionHeader[]>;
  listSnapshots(signal?: AbortSignal): Promise<{ header: SessionHeader; revision: string }[]>;
  locate(meta: SessionHeader): { kind: string; path: string } | undefined;
  close(): Promise<void>;
}

export function dshBackend(store: Store, options?: { name?: string; closeStore?: boolean }): DshBackend;

/** Throws a SessionlogError (INVALID_JSON) unless `value` is lossless JSON as dsh defines it. */
export function assertJson(value: unknown, where: string): void;
