#!/usr/bin/env bash
# Run every test: the Rust workspace (unit, property, adversarial and end-to-end tests that
# start the real binary). Installs what the tests need first.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v git >/dev/null || { apt-get update -qq && apt-get install -y -qq git; }

cargo build --workspace --bins --quiet
cargo test --workspace --no-fail-fast
