#!/usr/bin/env bash
# Toolyard where agent builders are, installed as they would install it (no cargo on PATH):
#   1. the wheel and the npm package (scripts/package.sh) serve tools/list from a fresh venv, a
#      fresh npm prefix and npx (install_test.sh);
#   2. seed 002's Python API (python/tests) against the wheel installed in a fresh venv;
#   3. real agents of six frameworks with Toolyard as their tools and a scripted model
#      (test_frameworks.py), versions pinned in requirements.txt and package-lock.json.
# TOOLYARD_PACKAGE_BIN=PATH packages that binary instead of building the release one.
# Extra arguments go to the framework tests' pytest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

bash "$repo/scripts/package.sh"

# The installs, in parallel: pip into one venv, npm into one prefix.
python3 -m venv "$work/venv"
(
  "$work/venv/bin/python" -m pip install -q --disable-pip-version-check "$repo"/target/dist/toolyard-*.whl
  "$work/venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
) > "$work/pip.log" 2>&1 &
pip_pid=$!
npm ci --prefix "$here" --no-audit --no-fund --loglevel=error > "$work/npm.log" 2>&1 &
npm_pid=$!
bash "$here/install_test.sh" "$work/pkg-venv" "$work/pkg-npm"
wait "$pip_pid" || { cat "$work/pip.log" >&2; exit 1; }
wait "$npm_pid" || { cat "$work/npm.log" >&2; exit 1; }

# The tests import toolyard from the venv (the wheel), never from python/ in the checkout.
unset TOOLYARD_BIN
export PATH="$work/venv/bin:$PATH"
echo "-- seed 002's Python API, against the installed wheel"
(cd "$work" && python -m pytest "$repo/python/tests" -q -p no:cacheprovider --rootdir "$repo/python/tests")
echo "-- agent frameworks with Toolyard as their tools, a scripted model on 127.0.0.1"
(cd "$here" && python -m pytest "$here/test_frameworks.py" -q -p no:cacheprovider "$@")
