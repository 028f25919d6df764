#!/usr/bin/env bash
# Puts a helm binary at $LAGWATCH_CACHE/helm/<version>/helm (default ~/.cache/lagwatch) and prints its path.
# Debian has no helm package, so it is built with Go from the module proxy (helm.sh/helm/v3/cmd/helm), once:
# later runs find the cached binary and return at once. A helm already on PATH at the same version is used as is.
set -euo pipefail
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE="${LAGWATCH_CACHE:-$HOME/.cache/lagwatch}/helm/$HELM_VERSION"
BIN="$CACHE/helm"

if command -v helm >/dev/null 2>&1 && helm version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
  command -v helm
  exit 0
fi
if [ -x "$BIN" ] && "$BIN" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
  echo "$BIN"
  exit 0
fi
# shellcheck source=go-env.sh
source "$(dirname "$0")/go-env.sh"
go_env install-helm
mkdir -p "$CACHE"
echo "install-helm: building helm $HELM_VERSION with $(go version | cut -d' ' -f3) from the Go module proxy" \
  "(one time, about 3-6 minutes on 2 cores; cached in $CACHE)" >&2
start=$SECONDS
# As helm's own Makefile does: the Kubernetes version that `helm template` and `helm lint` assume is the one of
# the client-go it is built with (else v1.20, and charts needing a newer Kubernetes fail to render).
gomod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
k8s_minor=$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod")
[ -n "$k8s_minor" ] || { echo "install-helm: no k8s.io/client-go in $gomod" >&2; exit 1; }
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in pkg/lint/rules pkg/chartutil; do
  ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$k8s_minor"
done
GOBIN="$CACHE" go install -trimpath -p 2 -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
echo "install-helm: built in $((SECONDS - start)) s: $("$BIN" version --short)" >&2
echo "$BIN"
