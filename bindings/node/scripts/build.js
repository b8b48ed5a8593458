#!/usr/bin/env node
// Builds the addon from source with cargo and copies it to ./sessionlog.node.
// No npm dependency: `cargo build --release -p sessionlog-node` in the workspace, then a copy
// of target/release/lib<name>.so (.dylib on macOS, <name>.dll on Windows).
'use strict';

const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const here = path.resolve(__dirname, '..');
const crate = 'sessionlog-node';
const lib = 'sessionlog_node';

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { cwd: here, stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8', ...opts });
  if (r.error) {
    if (r.error.code === 'ENOENT') {
      console.error(`sessionlog: ${cmd} was not found on PATH; install Rust (cargo) to build the addon from source`);
    } else {
      console.error(`sessionlog: running ${cmd} failed: ${r.error.message}`);
    }
    process.exit(1);
  }
  if (r.status !== 0) {
    console.error(`sessionlog: ${cmd} ${args.join(' ')} exited with ${r.status}`);
    process.exit(r.status || 1);
  }
  return r.stdout;
}

// Where cargo puts its output (honours CARGO_TARGET_DIR and the workspace's target/).
const metadata = JSON.parse(run('cargo', ['metadata', '--format-version', '1', '--no-deps']));
const targetDir = metadata.target_directory;

const args = ['build', '--release', '-p', crate];
if (process.env.SESSIONLOG_CARGO_ARGS) args.push(...process.env.SESSIONLOG_CARGO_ARGS.split(/\s+/).filter(Boolean));
run('cargo', args, { stdio: ['ignore', 'inherit', 'inherit'] });

const file =
  process.platform === 'win32' ? `${lib}.dll` : process.platform === 'darwin' ? `lib${lib}.dylib` : `lib${lib}.so`;
const built = path.join(targetDir, 'release', file);
if (!fs.existsSync(built)) {
  console.error(`sessionlog: cargo finished but ${built} does not exist`);
  process.exit(1);
}
const dest = path.join(here, 'sessionlog.node');
// Copy to a temporary name and rename, so a running process never maps a half-written file.
const tmp = `${dest}.${process.pid}.tmp`;
fs.copyFileSync(built, tmp);
fs.renameSync(tmp, dest);
console.error(`sessionlog: built ${path.relative(process.cwd(), dest) || dest}`);
