#!/usr/bin/env bash
# Runs `lagwatch ARGS...` in an image's root filesystem the way the chart's pipeline CronJob runs it, without a
# container engine (what deploy/README.md reports was run in the pipeline image):
#     sudo deploy/tools/run-like-cronjob.sh localhost/lagwatch-spark:0.1.0 /path/to/lake pipeline report --lake /lake
# The root filesystem read-only; uid and gid 10001; the image's environment only (HOME=/tmp) and /tmp an empty tmpfs;
# its own PID, UTS and network namespaces, the network being loopback only (no route: nothing can be downloaded);
# LAKE_DIR bind-mounted read-write at /lake (it must be writable by uid 10001). Needs root and buildah (vfs storage).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 IMAGE LAKE_DIR [lagwatch ARGS...]" >&2
  exit 2
fi
IMAGE=$1
LAKE=$(realpath "$2")
shift 2
BUILDAH=(buildah --storage-driver vfs)

ctr=$("${BUILDAH[@]}" from --quiet "$IMAGE")
work=$(mktemp -d)
cleanup() {
  "${BUILDAH[@]}" umount "$ctr" >/dev/null || true
  "${BUILDAH[@]}" rm "$ctr" >/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
rootfs=$("${BUILDAH[@]}" mount "$ctr")
mapfile -t image_env < <("${BUILDAH[@]}" inspect --type container --format '{{range .OCIv1.Config.Env}}{{println .}}{{end}}' "$ctr" | sed '/^$/d')
mkdir -p "$rootfs/lake" "$work/root"
printf '127.0.0.1 localhost\n127.0.1.1 lagwatch-pipeline-job\n' >"$work/hosts"

unshare --mount --net --pid --uts --fork bash -euc '
  rootfs=$1 work=$2 lake=$3
  shift 3
  hostname lagwatch-pipeline-job
  ip link set lo up
  root=$work/root
  mount --make-rprivate /
  mount --bind "$rootfs" "$root"
  mount -o remount,bind,ro "$root"
  mount -t proc proc "$root/proc"
  mount -t sysfs -o ro sysfs "$root/sys"
  mount --rbind /dev "$root/dev"
  mount -t tmpfs -o size=8g,mode=1777 tmpfs "$root/tmp"
  mount --bind "$work/hosts" "$root/etc/hosts"
  mount --bind "$lake" "$root/lake"
  n=$1
  shift
  env=("${@:1:$n}")
  shift "$n"
  chroot --userspec=10001:10001 --groups=10001 "$root" /usr/bin/env -i "${env[@]}" sh -c "cd /tmp && exec lagwatch \"\$@\"" lagwatch "$@"
' bash "$rootfs" "$work" "$LAKE" "${#image_env[@]}" "${image_env[@]}" "$@"
