#!/usr/bin/env bash
# Puts SeaweedFS's `weed` (Apache-2.0), the S3-compatible server the lake's tests run against, at
# $LAGWATCH_CACHE/seaweedfs/<version>/weed (default ~/.cache/lagwatch) and prints its path. Debian has no package,
# so it is built with Go from the module proxy, once: later runs find the cached binary and return at once.
# `go install module@version` refuses it (its go.mod has a replace directive), so the module is downloaded and
# built in place, where its go.mod applies. About 8-9 minutes on 2 cores, 2.7 GB of memory at peak; 164 MB.
set -euo pipefail
SEAWEEDFS_VERSION="${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}"  # `weed version`: 30GB 4.53
CACHE="${LAGWATCH_CACHE:-$HOME/.cache/lagwatch}/seaweedfs/$SEAWEEDFS_VERSION"
BIN="$CACHE/weed"

if [ -x "$BIN" ] && [ -f "$CACHE/.built" ] && "$BIN" version >/dev/null 2>&1; then
  echo "$BIN"
  exit 0
fi
# shellcheck source=go-env.sh
source "$(dirname "$0")/go-env.sh"
go_env install-seaweedfs
mkdir -p "$CACHE"
echo "install-seaweedfs: building SeaweedFS $SEAWEEDFS_VERSION with $(go version | cut -d' ' -f3) from the Go module" \
  "proxy (one time, about 8-9 minutes on 2 cores; cached in $CACHE)" >&2
start=$SECONDS
dir=$(go mod download -json "github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$dir" ] || { echo "install-seaweedfs: go mod download gave no directory" >&2; exit 1; }
# The module cache is read-only and may be shared: build from it without writing there.
(cd "$dir" && go build -trimpath -p "${SEAWEEDFS_BUILD_JOBS:-2}" -ldflags "-s -w" -o "$BIN.tmp" ./weed) >&2
mv "$BIN.tmp" "$BIN"
touch "$CACHE/.built"
echo "install-seaweedfs: built in $((SECONDS - start)) s: $("$BIN" version | head -1)" >&2
echo "$BIN"
