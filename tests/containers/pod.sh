#!/usr/bin/env bash
# Print a plain Kubernetes v1/Pod manifest for one runner pod: the image from image.sh, running
# as nobody (uid 65534: the runner sandboxes itself fully as non-root, see README), sleeping until
# `podman exec -i` / `kubectl exec -i` starts runners in it, with a host directory at /workspace.
#
#   tests/containers/pod.sh POD_NAME IMAGE HOST_DIR > pod.yaml
#   podman kube play --network none pod.yaml    # the container is then POD_NAME-runner
set -euo pipefail
name=${1:?usage: pod.sh POD_NAME IMAGE HOST_DIR}
image=${2:?usage: pod.sh POD_NAME IMAGE HOST_DIR}
dir=${3:?usage: pod.sh POD_NAME IMAGE HOST_DIR}
cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $name
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  securityContext:
    runAsUser: 65534
    runAsGroup: 65534
  containers:
    - name: runner
      image: $image
      command: ["sleep", "infinity"]
      env:
        - name: HOME
          value: /tmp
        - name: TOOLYARD_STATE_DIR
          value: /tmp/toolyard-state
      volumeMounts:
        - name: workspace
          mountPath: /workspace
  volumes:
    - name: workspace
      hostPath:
        path: $dir
        type: Directory
YAML
