#!/usr/bin/env bash
# Toolyard inside the real clients (Claude Code, Codex CLI), driven by a scripted
# model on loopback. Needs python3 with pytest, node + npm, and the Toolyard binary
# (TOOLYARD_BIN, default <repo>/target/debug/toolyard). Extra args go to pytest.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export TOOLYARD_BIN="${TOOLYARD_BIN:-$repo/target/debug/toolyard}"

if [[ ! -x "$TOOLYARD_BIN" ]]; then
  echo "tests/clients: no Toolyard binary at $TOOLYARD_BIN; run cargo build -p toolyard or set TOOLYARD_BIN" >&2
  exit 1
fi

npm ci --prefix "$here" --no-audit --no-fund --loglevel=error

bin="$here/node_modules/.bin"
# Never let the clients see the real home, even for --version.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

if ! HOME="$scratch" "$bin/claude" --version >/dev/null 2>&1; then
  # A newer npm may skip the postinstall that puts Claude Code's native binary in place.
  (cd "$here/node_modules/@anthropic-ai/claude-code" && node install.cjs)
fi
echo "claude:   $(HOME="$scratch" "$bin/claude" --version)"
echo "codex:    $(HOME="$scratch" CODEX_HOME="$scratch" "$bin/codex" --version 2>/dev/null)"
echo "toolyard: $("$TOOLYARD_BIN" --version)"

cd "$repo"
python3 -m pytest "$here" -q -p no:cacheprovider "$@"
