#!/usr/bin/env bash
# Build the Go test server of the interop tests (main.go): upstream's WatchEvent listener,
# github.com/kyma-project/runtime-watcher/listener at the version go.mod pins, behind a mutual-TLS
# front. Built from source through the Go module proxy; nothing prebuilt is downloaded.
#
#   tests/interop/upstream-listener/build.sh           build when missing, then print the path
#   tests/interop/upstream-listener/build.sh --check   print the path when built; exit 3 (saying why) when not
#
# The binary goes to a cache outside the repository, keyed by the pinned version and by the sources
# (go.mod, go.sum, *.go), so a second run (or a second clone) is instant:
#   ${INTEROP_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/kyma-controlplane/interop}/<key>/bin/upstream-listener
#
# Checksums: go.sum pins every module, upstream's listener included, and a build only checks the
# downloads against it. The checksum database (sum.golang.org, reached through the proxy) has no
# record of github.com/kyma-project/runtime-watcher/listener (its lookup answers 404), so pinning a
# new version needs the database skipped for that one module:
#   GONOSUMDB=github.com/kyma-project/runtime-watcher/listener GOFLAGS=-mod=mod \
#     go get github.com/kyma-project/runtime-watcher/listener@vX.Y.Z && go mod tidy
# and the h1: sum it writes to go.sum is then the only guard: compare it with the upstream tag's
# files before committing it (tests/interop/README.md says how v1.4.3's was checked).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

module=github.com/kyma-project/runtime-watcher/listener
version=$(awk -v m="$module" '$1 == "require" { $1 = ""; $0 = $0 } $1 == m && $2 ~ /^v/ { print $2; exit }' "$here/go.mod")
[ -n "$version" ] || { echo "build.sh: go.mod pins no $module version" >&2; exit 2; }
sums=$(cat "$here/go.mod" "$here/go.sum" "$here"/*.go | sha256sum | cut -c1-12)
cache=${INTEROP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kyma-controlplane/interop}
bin="$cache/listener-$version-$sums/bin"
binary="$bin/upstream-listener"

if [ "${1:-}" = "--check" ]; then
  if [ -x "$binary" ]; then echo "upstream-listener=$binary"; exit 0; fi
  echo "build.sh: upstream's listener $version is not built yet (run: make interop)" >&2
  exit 3
fi
if [ -x "$binary" ]; then echo "upstream-listener=$binary"; exit 0; fi

command -v go >/dev/null || { echo "build.sh: Go is not installed: the gobuild tests need it (go 1.26)" >&2; exit 3; }
echo "build.sh: building upstream's listener $version (test server) into $bin" >&2
start=$(date +%s)
tmp="$bin.tmp.$$"
rm -rf "$tmp" && mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
cd "$here"
export GOFLAGS="-mod=readonly -trimpath" CGO_ENABLED=0
go build -ldflags "-s -w" -o "$tmp/upstream-listener" .
mkdir -p "$bin"
mv "$tmp/upstream-listener" "$binary"
echo "build.sh: built in $(( $(date +%s) - start )) s" >&2
echo "upstream-listener=$binary"
