#!/usr/bin/env bash
# Run every test: the Rust workspace (unit, property, adversarial, and end-to-end tests that
# start the real binary), then the MCP end-to-end tests with the official Python SDK, the MCP
# Inspector smoke test, and the official MCP conformance suite. Installs what they need first.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v git >/dev/null || need_apt+=(git)
command -v python3 >/dev/null || need_apt+=(python3 python3-pip)
command -v npx >/dev/null || need_apt+=(nodejs npm)
# The real workloads (crates/toolyard/tests/real_work.rs): C through make, a venv with pip.
command -v cc >/dev/null || need_apt+=(gcc)
command -v make >/dev/null || need_apt+=(make)
python3 -c 'import ensurepip' 2>/dev/null || need_apt+=(python3-venv)
if ((${#need_apt[@]})); then
  apt-get update -qq && apt-get install -y -qq "${need_apt[@]}"
fi
python3 -m pip install -q 'mcp==2.3.0' pytest

echo "== no two modules of one crate import each other"
python3 scripts/module-cycles.py

# The user's own state directory: no test may leave anything in it (checked at the end).
real_state="${XDG_STATE_HOME:-$HOME/.local/state}/toolyard"
state_before=$( (find "$real_state" -mindepth 2 -maxdepth 2 2>/dev/null || true) | sort)

echo "== cargo test"
cargo build --workspace --bins --quiet
cargo test --workspace --no-fail-fast

echo "== the journal's end-to-end tests again, the runners behind a command link (a wrapper script)"
TOOLYARD_E2E_LINK=wrapper cargo test -p toolyard --test journal_e2e

echo "== the Kubernetes link (feature kube): its pod lifecycle against a scripted API server"
# Not in the workspace run: kube-rs is heavy. About 30 s on a warm cache; the end-to-end test
# through a real cluster in it runs only when KUBECONFIG is set.
cargo test -p toolyard-remote --features kube

echo "== MCP end-to-end (Python SDK)"
python3 -m pytest tests/mcp -q -p no:cacheprovider

echo "== Lanes without CAP_SYS_ADMIN, in a container's seccomp profile, and as an unprivileged user"
bash tests/confined/run.sh

echo "== Runners in a real container engine: a podman pod from a Kubernetes Pod manifest, podman exec -i"
bash tests/containers/run.sh

echo "== Real clients (Claude Code, Codex CLI) against a scripted model on 127.0.0.1"
bash tests/clients/run.sh

echo "== Installs without cargo (wheel, npm, npx), seed 002's Python API on the wheel, six agent frameworks"
# Packages the debug binary `cargo build --workspace --bins` made above (a release build would
# add about a quarter of an hour); `bash scripts/package.sh` alone packages the release one.
# Installs: pip into one venv and npm into one prefix, in parallel, pinned
# (tests/frameworks/requirements.txt, tests/frameworks/package-lock.json).
TOOLYARD_PACKAGE_BIN=target/debug/toolyard bash tests/frameworks/run.sh

echo "== Language servers: diagnostics in each change's result, navigation, rename, the sandbox (real servers)"
# Pinned, into a prefix of the build tree (no global install): about 60 MB, 10-20 s. clangd
# from Debian alongside (its LLVM libraries are already on this machine's image: 9 MB to fetch,
# 57 MB installed, about 30 s with apt-get update).
lsp_prefix="$PWD/target/lsp-servers"
command -v clangd >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends clangd; } &
clangd_install=$!
npm install --prefix "$lsp_prefix" --no-audit --no-fund --loglevel=error \
  pyright@1.1.414 typescript-language-server@5.1.3 typescript@5.9.3
wait "$clangd_install"
# TOOLYARD_LSP_REQUIRE=1: a test whose server is missing fails here instead of skipping.
export_lsp=(env PATH="$lsp_prefix/node_modules/.bin:$PATH" TOOLYARD_LSP_REQUIRE=1)
"${export_lsp[@]}" cargo test -p toolyard-lsp
"${export_lsp[@]}" cargo test -p toolyard --test lsp_e2e

echo "== command undo end to end again, the runners behind a command link (a wrapper script)"
TOOLYARD_E2E_LINK=wrapper cargo test -p toolyard --test command_undo_e2e
echo "== The net lane's egress gate: curl, git over HTTP, pip and npm through it, end to end"
# The workspace run above skips these (saying so) where curl is missing.
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl; }
cargo test -p toolyard-egress
cargo test -p toolyard --test egress_e2e

echo "== MCP Inspector smoke test"
bash tests/inspector/smoke.sh

echo "== MCP conformance suite"
# Built last, in the same target dir: the fixtures are compiled in only with the `conformance`
# feature and served only with TOOLYARD_MCP_CONFORMANCE=1.
CONFORMANCE_TARGET_DIR=target bash tests/conformance/run.sh

echo "== the user's state directory is untouched"
state_after=$( (find "$real_state" -mindepth 2 -maxdepth 2 2>/dev/null || true) | sort)
new=$(comm -13 <(echo "$state_before") <(echo "$state_after"))
if [[ -n "$new" ]]; then
  echo "tests wrote into the real state directory $real_state:" >&2
  echo "$new" >&2
  exit 1
fi
