#!/usr/bin/env bash
# The Redis store's common path, bare (proto), with the store's duties (full),
# and with them on the one-hash layout (hash), against npm redis-semaphore on
# the local Redis (127.0.0.1:6379): 1, 16 and 64 tasks in up to 4 processes,
# 5 runs of 3 s each, alternating; one JSON line per run (pairs/s, server CPU
# per pair).
set -euo pipefail
cd "$(dirname "$0")"
[ -d node_modules ] || npm install --no-audit --no-fund --silent
for tasks in 1 16 64; do
  for _ in 1 2 3 4 5; do
    for kind in peer proto full hash; do node run.js "$kind" "$tasks" 3; done
  done
done
