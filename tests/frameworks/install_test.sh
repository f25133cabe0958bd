#!/usr/bin/env bash
# The packages from scripts/package.sh, installed where no Rust toolchain is: a fresh venv
# (pip install the wheel) and a fresh npm prefix (npm install the tarball), PATH without
# cargo; `toolyard serve` answers tools/list from each, and through `npx`.
# Usage: install_test.sh VENV_DIR NPM_PREFIX   (both made fresh; the dist files must exist)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="$1"
prefix="$2"
whl="$(ls "$repo"/target/dist/toolyard-*.whl)"
tgz="$(ls "$repo"/target/dist/toolyard-*.tgz)"

# Only system directories: no ~/.cargo/bin, no target/.
clean_path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
for d in ${clean_path//:/ }; do
  if [[ -x "$d/cargo" || -x "$d/rustc" ]]; then
    echo "install_test: $d has cargo or rustc; this test needs a PATH without a Rust toolchain" >&2
    exit 1
  fi
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ws" "$work/state" "$work/home"
run_clean() {
  env -i PATH="$1:$clean_path" HOME="$work/home" TOOLYARD_STATE_DIR="$work/state" \
    npm_config_cache="$work/npm-cache" npm_config_update_notifier=false "${@:2}"
}

echo "-- pip install $(basename "$whl") into a fresh venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --no-index "$whl"
! run_clean "$venv/bin" sh -c 'command -v cargo' >/dev/null
run_clean "$venv/bin" sh -c "cd '$work/ws' && command -v toolyard && python3 '$here/mcp_probe.py' --expect read_file --expect grep -- toolyard serve"
run_clean "$venv/bin" python -c "import toolyard, sys; print(toolyard.find_toolyard_bin()); sys.exit(not toolyard.find_toolyard_bin().startswith('$venv/'))"

echo "-- npm install $(basename "$tgz") into a fresh prefix"
rm -rf "$prefix"
mkdir -p "$prefix"
(cd "$prefix" && echo '{"private": true}' > package.json &&
  run_clean "" npm install --no-audit --no-fund --loglevel=error "$tgz")
run_clean "$prefix/node_modules/.bin" sh -c "cd '$work/ws' && command -v toolyard && python3 '$here/mcp_probe.py' --expect read_file -- toolyard serve"
run_clean "" sh -c "cd '$prefix' && python3 '$here/mcp_probe.py' --expect read_file -- npx --no-install toolyard serve -w '$work/ws'"
run_clean "" node -e "const {binaryPath} = require('$prefix/node_modules/toolyard'); require('fs').accessSync(binaryPath, require('fs').constants.X_OK); console.log(binaryPath)"
echo "-- npx straight from the tarball (no prefix)"
run_clean "" sh -c "cd '$work/ws' && python3 '$here/mcp_probe.py' --expect read_file -- npx --yes --package '$tgz' toolyard serve"
echo "install_test: the wheel and the npm package serve tools/list without cargo on PATH"
