#!/usr/bin/env bash
# Checks the HTTP service against its own OpenAPI document with schemathesis
# (PyPI): generated requests for every operation, no 5xx, and every
# response matching the documented schema. Runs a server on a free port, on
# the memory store or on the store `SCHEMATHESIS_STORE` names (e.g.
# `--sqlite /tmp/st.db`, whose two-phase tickets the store keeps);
# schemathesis lives in a virtualenv under target/.
#
#   bash semaphore-cli/scripts/schemathesis.sh [extra schemathesis args]
set -euo pipefail
cd "$(dirname "$0")/../.."

venv=target/schemathesis-venv
if [ ! -x "$venv/bin/st" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'schemathesis==4.32.5'
fi

cargo build -q -p semaphore-cli
log=$(mktemp)
# shellcheck disable=SC2086 # the store's flag and its argument
target/debug/semaphore serve ${SCHEMATHESIS_STORE:---memory} --listen 127.0.0.1:0 --max-wait 1s >"$log" &
server=$!
trap 'kill $server 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 100); do
  grep -q '^listening on ' "$log" && break
  sleep 0.05
done
base=$(sed -n 's/^listening on \(http:[^ ]*\).*/\1/p' "$log")

# The checks: no 5xx but the documented ones, and every status code,
# content type, header and body as documented.
"$venv/bin/st" --config-file semaphore-cli/scripts/schemathesis.toml run "$base/openapi.json" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
  --max-examples "${SCHEMATHESIS_EXAMPLES:-50}" \
  --request-timeout 10 \
  "$@"
