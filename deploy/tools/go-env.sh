# Sourced by the install-*.sh scripts that build a tool with Go from the module proxy (Helm, SeaweedFS):
# `go_env NAME` finds Go (on PATH, or where Debian's and the upstream tarball put it), installs Debian's
# golang-go when there is none, and sets the build environment. NAME prefixes what it says on stderr.
go_env() {
  if ! command -v go >/dev/null 2>&1; then
    for g in /usr/local/go/bin/go /usr/lib/go/bin/go; do [ -x "$g" ] && PATH="$(dirname "$g"):$PATH" && break; done
  fi
  if ! command -v go >/dev/null 2>&1; then
    echo "$1: installing Go from Debian (golang-go)" >&2
    local sudo
    sudo=$([ "$(id -u)" = 0 ] || echo sudo)  # apt-get needs root
    $sudo apt-get update -q >&2 && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends golang-go >&2
  fi
  # A module's go.mod may need a newer Go than the one installed: GOTOOLCHAIN=auto fetches that toolchain as a
  # module. Static binaries, no VCS stamping (the module cache has no .git).
  export PATH GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--buildvcs=false}"
}
