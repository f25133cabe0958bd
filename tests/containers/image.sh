#!/usr/bin/env bash
# Build a runner image FROM scratch (no registry needed): the toolyard binary, the libraries ldd
# names for it, busybox-static with a link per applet (sh, sleep, cat, wget, httpd, ...), an
# /etc/passwd with nobody, a world-writable /tmp and an empty /workspace.
#
#   tests/containers/image.sh TOOLYARD_BINARY IMAGE_TAG
set -euo pipefail
bin=${1:?usage: image.sh TOOLYARD_BINARY IMAGE_TAG}
tag=${2:?usage: image.sh TOOLYARD_BINARY IMAGE_TAG}
busybox=$(command -v busybox) || { echo "image.sh: busybox (busybox-static) is not installed" >&2; exit 1; }
if ldd "$busybox" >/dev/null 2>&1; then
  echo "image.sh: $busybox is dynamically linked; install busybox-static" >&2
  exit 1
fi

ctx=$(mktemp -d /tmp/toolyard-image.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
root=$ctx/root
mkdir -p "$root"/{bin,usr/local/bin,etc,workspace}
install -d -m 1777 "$root/tmp"
install -m 755 "$bin" "$root/usr/local/bin/toolyard"
# A debug build's symbols would make the image hundreds of MiB; the runner needs none of them.
if command -v strip >/dev/null; then strip "$root/usr/local/bin/toolyard"; fi
# Every library the binary loads, at the same path (the loader's path is baked into the binary).
for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
install -m 755 "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
  [[ -e $root/bin/$applet ]] || ln -s busybox "$root/bin/$applet"
done
cat > "$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/tmp:/bin/sh
PASSWD
cat > "$root/etc/group" <<'GROUP'
root:x:0:
nogroup:x:65534:
GROUP
printf 'FROM scratch\nCOPY root/ /\nENV PATH=/usr/local/bin:/bin\n' > "$ctx/Containerfile"
podman build -q -t "$tag" "$ctx" >/dev/null
echo "$tag"
