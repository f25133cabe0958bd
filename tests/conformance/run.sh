#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, server mode) against
# `toolyard serve --http`, with the suite's fixture tools/resources/prompts compiled in through
# the `conformance` cargo feature of toolyard-mcp (a separate target dir, so the normal binary
# never contains them) and switched on with TOOLYARD_MCP_CONFORMANCE=1.
#
#   bash tests/conformance/run.sh [extra conformance args, e.g. --scenario tools-call-with-progress]
#
# Exits non-zero when any scenario fails.
set -euo pipefail
cd "$(dirname "$0")/../.."

SUITE_VERSION="${CONFORMANCE_VERSION:-0.1.16}"
TARGET_DIR="${CONFORMANCE_TARGET_DIR:-target/conformance}"

if [[ -z "${TOOLYARD_BIN:-}" ]]; then
  CARGO_TARGET_DIR="$TARGET_DIR" cargo build --quiet -p toolyard --features toolyard-mcp/conformance
  TOOLYARD_BIN="$TARGET_DIR/debug/toolyard"
fi

work="$(mktemp -d)"
cleanup() {
  if [[ -n "${server_pid:-}" ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/ws" "$work/state"

# No token: the suite sends none. The server lives only for this script, on a scratch workspace.
TOOLYARD_MCP_CONFORMANCE=1 TOOLYARD_STATE_DIR="$work/state" \
  "$TOOLYARD_BIN" serve --workspace "$work/ws" --http 127.0.0.1:0 --trust-every-local-process \
  2>"$work/server.log" &
server_pid=$!

url=""
for _ in $(seq 1 200); do
  url="$(grep -o 'http://[^ ]*/mcp' "$work/server.log" | head -1 || true)"
  [[ -n "$url" ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.05
done
[[ -n "$url" ]] || { echo "toolyard serve did not report its address" >&2; cat "$work/server.log" >&2; exit 1; }
echo "conformance: server at $url" >&2

# The suite needs Node >= 22 (fs.globSync); with an older node, npx fetches node@22 for it.
node_major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
pkgs=(-p "@modelcontextprotocol/conformance@$SUITE_VERSION")
if (( node_major < 22 )); then pkgs=(-p node@22 "${pkgs[@]}"); fi

cd "$work"   # the suite writes results/ into the current directory
# Every scenario, the pending ones (json-schema-2020-12, server-sse-polling) included, unless the
# caller narrows it (e.g. --scenario tools-call-with-progress).
if (( $# == 0 )); then set -- --suite all; fi
npx -y "${pkgs[@]}" -- conformance server --url "$url" "$@"
