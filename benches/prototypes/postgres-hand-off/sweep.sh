#!/usr/bin/env bash
# The PostgreSQL hand-off design, bare, against one-row UPDATE commits from the same
# client on the local PostgreSQL (postgres@127.0.0.1:5432/test, schema
# proto53, made again here): 1, 16 and 64 tasks in up to 4 processes (PROCS
# sets fewer), 5 runs of 3 s each, alternating; one JSON line per run
# (rate, transactions per unit). GATE=1 runs the variant with a gate
# (gate.sql) instead of the look after queueing.
set -euo pipefail
cd "$(dirname "$0")"
[ -d node_modules ] || npm install --no-audit --no-fund --silent
psql -q -h 127.0.0.1 -U postgres -d test -v ON_ERROR_STOP=1 -f schema.sql
if [ -n "${GATE:-}" ]; then
  psql -q -h 127.0.0.1 -U postgres -d test -v ON_ERROR_STOP=1 -f gate.sql
fi
for tasks in 1 16 64; do
  for _ in 1 2 3 4 5; do
    node run.js proto "$tasks" 3
    if [ "$tasks" -le 16 ]; then node run.js anchor "$tasks" 3; fi
  done
done
