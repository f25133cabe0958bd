#!/usr/bin/env bash
# The lanes' end-to-end, runner-boundary, development-sandbox and audit tests again, where most
# agents run: as root without CAP_SYS_ADMIN (capsh), inside a default container's limits (no
# CAP_SYS_ADMIN and a seccomp profile refusing namespaces:
# crates/toolyard-exec/examples/container_jail.rs), and as an unprivileged user. Every lane must
# run commands in each, with what confinement holds there.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [[ $(id -u) != 0 ]]; then
  echo "tests/confined: needs root to drop capabilities and switch users; run as root" >&2
  exit 1
fi
command -v capsh >/dev/null || { apt-get update -qq && apt-get install -y -qq libcap2-bin; }
command -v setpriv >/dev/null || { apt-get update -qq && apt-get install -y -qq util-linux; }

cargo build -q -p toolyard --bin toolyard
cargo build -q -p toolyard-exec --example container_jail
tests=$(cargo test -q -p toolyard --test lanes_e2e --test runner_boundary --test dev_sandbox_e2e \
  --test audit_e2e --test egress_e2e --no-run \
  --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])')

# Copies anyone may run: the checkout may sit in a directory only root can enter.
dir=$(mktemp -d /tmp/toolyard-confined.XXXXXX)
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
install -m 755 target/debug/toolyard target/debug/examples/container_jail "$dir/"
for t in $tests; do install -m 755 "$t" "$dir/"; done
export TOOLYARD_TEST_BIN="$dir/toolyard"
# The unprivileged user's own home and temp dir.
install -d -m 700 -o 65534 -g 65534 "$dir/nobody"

status=0
echo "-- doctor inside a default container's limits says what holds there"
report=$("$dir/container_jail" "$dir/toolyard" doctor)
grep -q "no-net: no network namespace here: the seccomp filter" <<<"$report" || {
  echo "doctor did not say how no-net isolates in a container:" >&2
  echo "$report" >&2
  status=1
}
grep -q "net:    every connection through Toolyard's egress gate.*no network namespace here, so Landlock" <<<"$report" || {
  echo "doctor did not say how the net lane's egress gate holds in a container:" >&2
  echo "$report" >&2
  status=1
}
for t in $tests; do
  name=$(basename "$t")
  echo "-- $name as root without CAP_SYS_ADMIN"
  capsh --drop=cap_sys_admin -- -c "$dir/$name --test-threads=2 -q" || status=1
  echo "-- $name in a default container's seccomp profile, without CAP_SYS_ADMIN"
  "$dir/container_jail" "$dir/$name" --test-threads=2 -q || status=1
  echo "-- $name as an unprivileged user (nobody)"
  setpriv --reuid=65534 --regid=65534 --clear-groups \
    env HOME="$dir/nobody" TMPDIR="$dir/nobody" "$dir/$name" --test-threads=2 -q || status=1
done
exit $status
