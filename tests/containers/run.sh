#!/usr/bin/env bash
# The lanes and the journal end to end through a real container engine (issue 15): installs
# podman from Debian's packages when missing, builds a runner image FROM scratch (no registry),
# starts it from a Kubernetes Pod manifest with `podman kube play --network none`, and runs
# crates/toolyard/tests/containers_e2e.rs, whose server reaches its runners with
# `podman exec -i POD-runner toolyard runner --lane {lane} --workspace /workspace`.
# Skips (exit 0, saying why) only where podman cannot be installed or run; under CI=true that
# is a failure. Leaves no pod, container or image behind.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=tests/containers

skip() {
  if [[ ${CI:-} == true ]]; then
    echo "tests/containers: cannot run here, and CI must run them: $*" >&2
    exit 1
  fi
  echo "tests/containers: SKIPPED: $*"
  exit 0
}

[[ $(id -u) == 0 ]] || skip "needs root to install podman and run rootful pods (run as root)"
pkgs=(podman runc conmon catatonit uidmap busybox-static)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  command -v apt-get >/dev/null || skip "podman is not installed and there is no apt-get to install ${missing[*]}"
  echo "-- installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi
export CONTAINERS_CONF=$PWD/$here/containers.conf
podman info >/dev/null 2>&1 || skip "podman is installed but cannot run here: $(podman info 2>&1 | tail -1)"

# The binary that goes into the image, and the test binary: one build of each.
bins=$(cargo test -q -p toolyard --test containers_e2e --test journal_e2e --no-run --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        kind, name = m["target"]["kind"], m["target"]["name"]
        if kind == ["test"] or (kind == ["bin"] and name == "toolyard"):
            print(name, m["executable"])')
toolyard=$(awk '$1 == "toolyard" {print $2}' <<<"$bins")
testbin=$(awk '$1 == "containers_e2e" {print $2}' <<<"$bins")
journalbin=$(awk '$1 == "journal_e2e" {print $2}' <<<"$bins")
[[ -x $toolyard && -x $testbin && -x $journalbin ]] || { echo "tests/containers: build gave no binaries: $bins" >&2; exit 1; }

dir=$(mktemp -d /tmp/toolyard-containers.XXXXXX)
tag=localhost/toolyard-runner:e2e-$$
pod=toolyard-e2e-$$
images_before=$(podman images -q --no-trunc | sort -u)
cleanup() {
  podman pod rm -f -t 0 "$pod" >/dev/null 2>&1 || true
  podman rmi -f "$tag" >/dev/null 2>&1 || true
  # The infra (pause) image kube play built from catatonit, if it was not there before.
  for id in $(comm -13 <(echo "$images_before") <(podman images -q --no-trunc | sort -u)); do
    podman rmi -f "$id" >/dev/null 2>&1 || true
  done
  rm -rf "$dir"
}
trap cleanup EXIT
chmod 755 "$dir"
# The pod's /workspace: a host directory nobody owns, not the server's --workspace.
install -d -m 755 -o 65534 -g 65534 "$dir/ws"

echo "-- image FROM scratch: toolyard, its libraries, busybox-static"
bash $here/image.sh "$toolyard" "$tag" >/dev/null
echo "-- pod from a Kubernetes Pod manifest: podman kube play --network none"
bash $here/pod.sh "$pod" "$tag" "$dir/ws" > "$dir/pod.yaml"
podman kube play --network none "$dir/pod.yaml" >/dev/null

TOOLYARD_E2E_POD=$pod TOOLYARD_E2E_CONTAINER=$pod-runner TOOLYARD_E2E_POD_WS=$dir/ws \
  "$testbin" --test-threads=1
echo "-- the journal's end-to-end tests, the runners in the pod through podman exec -i"
TOOLYARD_E2E_LINK=podman:$pod-runner:$dir/ws "$journalbin" --test-threads=1
