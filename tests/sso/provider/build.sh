#!/usr/bin/env bash
# Build the OpenID provider of the `sso` test tier: ORY Hydra (github.com/ory/hydra/v2, a certified
# OpenID Connect provider) at the version go.mod pins as a tool (go.sum pins every module), through
# the Go module proxy. Nothing prebuilt is downloaded; the tests run it with their own login and
# consent app (tests/sso/provider_app.py), which signs test users in.
#
#   tests/sso/provider/build.sh           build when missing, then print the path
#   tests/sso/provider/build.sh --check   print the path when built; exit 3 (saying why) when not
#
# Built with SQLite (cgo, Hydra's own `sqlite` build tags) so a test's provider keeps its state in
# memory (DSN=memory) and needs no database server. The binary goes to a cache outside the
# repository, keyed by the pinned version and go.mod/go.sum, so a second run (or clone) is instant:
#   ${SSO_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/kyma-controlplane/sso}/<key>/bin/hydra
#
# go.mod replaces github.com/gobuffalo/pop/v6 as Hydra's own go.mod does (a module's replace lines
# apply only in the main module); `go get -tool github.com/ory/hydra/v2@vX.Y.Z && go mod tidy`
# pins another version (check Hydra's go.mod for a changed replace first).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

module=github.com/ory/hydra/v2
version=$(awk -v m="$module" '$1 == "require" { $1 = ""; $0 = $0 } $1 == m && $2 ~ /^v/ { print $2; exit }' "$here/go.mod")
[ -n "$version" ] || { echo "build.sh: go.mod pins no $module version" >&2; exit 2; }
sums=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)
cache=${SSO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kyma-controlplane/sso}
bin="$cache/hydra-$version-$sums/bin"
binary="$bin/hydra"

if [ "${1:-}" = "--check" ]; then
  if [ -x "$binary" ]; then echo "hydra=$binary"; exit 0; fi
  echo "build.sh: ORY Hydra $version is not built yet (run: make sso)" >&2
  exit 3
fi
if [ -x "$binary" ]; then echo "hydra=$binary"; exit 0; fi

command -v go >/dev/null || { echo "build.sh: Go is not installed: the sso tier needs it (go 1.26)" >&2; exit 3; }
command -v gcc >/dev/null || command -v cc >/dev/null || { echo "build.sh: a C compiler is missing (Hydra's SQLite needs cgo)" >&2; exit 3; }
echo "build.sh: building ORY Hydra $version (the sso tier's OpenID provider) into $bin" >&2
start=$(date +%s)
tmp="$bin.tmp.$$"
rm -rf "$tmp" && mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
cd "$here"
export GOFLAGS="-mod=readonly -trimpath" CGO_ENABLED=1
go build -tags sqlite,sqlite_omit_load_extension \
  -ldflags "-s -w -X $module/driver/config.Version=$version" -o "$tmp/hydra" "$module"
mkdir -p "$bin"
mv "$tmp/hydra" "$binary"
echo "build.sh: built in $(( $(date +%s) - start )) s" >&2
echo "hydra=$binary"
