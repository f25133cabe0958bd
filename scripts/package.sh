#!/usr/bin/env bash
# Build installable packages that need no Rust toolchain, into target/dist/:
#   toolyard-VERSION-py3-none-PLATFORM.whl  the Python package + the binary (pip puts it on PATH)
#   toolyard-VERSION.tgz                     an npm package whose `bin` is the binary (npx toolyard)
# Usage: bash scripts/package.sh            (builds the release binary: cargo build --release)
#        TOOLYARD_PACKAGE_BIN=PATH bash scripts/package.sh   (package that binary instead)
# Needs python3 and npm; no network.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"

bin="${TOOLYARD_PACKAGE_BIN:-}"
if [[ -z "$bin" ]]; then
  nice cargo build --release -p toolyard --quiet
  bin="$repo/target/release/toolyard"
fi
[[ -x "$bin" ]] || { echo "package.sh: no executable binary at $bin" >&2; exit 1; }
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)"
[[ -n "$version" ]] || { echo "package.sh: no version in Cargo.toml" >&2; exit 1; }

dist="$repo/target/dist"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$dist"
rm -f "$dist"/toolyard-*.whl "$dist"/toolyard-*.tgz

# Debug info is for backtraces in a checkout; the packages carry the stripped binary.
if command -v strip >/dev/null; then
  strip -o "$stage/toolyard" "$bin"
else
  echo "package.sh: no strip (binutils) on PATH; packaging the binary with its debug info" >&2
  cp "$bin" "$stage/toolyard"
fi
chmod 0755 "$stage/toolyard"

python3 python/build_wheel.py --binary "$stage/toolyard" --version "$version" --out "$dist" >/dev/null

# npm: the binary itself is the `bin` entry (npm links it into PATH, executable), as esbuild's
# and biome's platform packages carry theirs; `require("toolyard").binaryPath` finds it.
npm_dir="$stage/npm"
mkdir -p "$npm_dir/bin"
cp "$stage/toolyard" "$npm_dir/bin/toolyard"
case "$(uname -m)" in x86_64) cpu=x64 ;; aarch64) cpu=arm64 ;; *) cpu="$(uname -m)" ;; esac
cat > "$npm_dir/package.json" <<JSON
{
  "name": "toolyard",
  "version": "$version",
  "description": "Safe, fast, faithful tools for LLM coding agents: the toolyard binary (MCP server and CLI)",
  "license": "MIT OR Apache-2.0",
  "bin": { "toolyard": "bin/toolyard" },
  "main": "index.js",
  "files": ["bin/toolyard", "index.js", "README.md"],
  "os": ["linux"],
  "cpu": ["$cpu"]
}
JSON
cat > "$npm_dir/index.js" <<'JS'
// The path of the toolyard binary this package carries.
const path = require("path");
module.exports = { binaryPath: path.join(__dirname, "bin", "toolyard") };
JS
cat > "$npm_dir/README.md" <<'MD'
# toolyard

The Toolyard binary for Linux: `npx toolyard serve` is an MCP server (stdio) with Toolyard's
tools; `npx toolyard call TOOL JSON` calls one. `require("toolyard").binaryPath` is its path.
MD
(cd "$npm_dir" && npm pack --pack-destination "$dist" --silent >/dev/null)

ls -l "$dist"/toolyard-*.whl "$dist"/toolyard-*.tgz
