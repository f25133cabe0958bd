#!/usr/bin/env bash
# Smoke test with the MCP Inspector in CLI mode: list the tools of `toolyard serve` and call one,
# over stdio and over streamable HTTP.
#
#   bash tests/inspector/smoke.sh        (TOOLYARD_BIN overrides target/debug/toolyard)
set -euo pipefail
cd "$(dirname "$0")/../.."

INSPECTOR="@modelcontextprotocol/inspector@${INSPECTOR_VERSION:-0.21.2}"
BIN="${TOOLYARD_BIN:-target/debug/toolyard}"
[[ -x "$BIN" ]] || cargo build --quiet -p toolyard
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"

work="$(mktemp -d)"
cleanup() {
  if [[ -n "${server_pid:-}" ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/ws" "$work/state"
echo "hello from the inspector smoke test" > "$work/ws/hello.txt"

inspect() { npx -y "$INSPECTOR" --cli "$@" 2>/dev/null; }
fail() { echo "inspector smoke: FAIL: $*" >&2; exit 1; }

# stdio
out="$(inspect -e TOOLYARD_STATE_DIR="$work/state" "$BIN" serve --workspace "$work/ws" --method tools/list)"
grep -q '"name": "read_file"' <<<"$out" || fail "stdio tools/list has no read_file: ${out:0:400}"
grep -q '"readOnlyHint": true' <<<"$out" || fail "stdio tools/list lacks annotations"

out="$(inspect -e TOOLYARD_STATE_DIR="$work/state" "$BIN" serve --workspace "$work/ws" \
  --method tools/call --tool-name read_file --tool-arg path=hello.txt)"
grep -q 'hello from the inspector smoke test' <<<"$out" || fail "stdio read_file: ${out:0:400}"
grep -q '"isError": false' <<<"$out" || fail "stdio read_file reported an error"

# streamable HTTP
# No token (the inspector's CLI is given none): a scratch server that lives only for this script.
TOOLYARD_STATE_DIR="$work/state" "$BIN" serve --workspace "$work/ws" --http 127.0.0.1:0 \
  --trust-every-local-process 2>"$work/server.log" &
server_pid=$!
url=""
for _ in $(seq 1 200); do
  url="$(grep -o 'http://[^ ]*/mcp' "$work/server.log" | head -1 || true)"
  [[ -n "$url" ]] && break
  sleep 0.05
done
[[ -n "$url" ]] || fail "toolyard serve --http did not report its address"

out="$(inspect "$url" --transport http --method tools/list)"
grep -q '"name": "read_file"' <<<"$out" || fail "http tools/list has no read_file: ${out:0:400}"
out="$(inspect "$url" --transport http --method tools/call --tool-name read_file --tool-arg path=../etc/passwd)"
grep -q '"isError": true' <<<"$out" || fail "http: a path outside the workspace was not an error result: ${out:0:400}"

echo "inspector smoke: OK (stdio and http: tools/list, tools/call)"
