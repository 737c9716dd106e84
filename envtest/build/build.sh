#!/usr/bin/env bash
# Build the real Kubernetes of the `kube` test tier from source: kube-apiserver and
# kube-controller-manager from k8s.io/kubernetes, and etcd from go.etcd.io/etcd/server/v3, at the
# versions go.mod pins (go.sum pins their sums), through the Go module proxy. Nothing prebuilt is
# downloaded.
#
#   envtest/build/build.sh           build when missing, then print the three paths
#   envtest/build/build.sh --check   print the paths when built; exit 3 (printing why) when not
#
# The binaries go to a cache outside the repository, keyed by the versions and by go.sum, so a
# second run (or a second clone) is instant:
#   ${KUBE_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/kyma-controlplane/kube}/<key>/bin/
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

version_of() {  # "require M vX" or, in a require block, "M vX"
  awk -v m="$1" '$1 == "require" { $1 = ""; $0 = $0 } $1 == m && $2 ~ /^v/ { print $2; exit }' "$here/go.mod"
}
k8s=$(version_of k8s.io/kubernetes)
etcd=$(version_of go.etcd.io/etcd/server/v3)
[ -n "$k8s" ] && [ -n "$etcd" ] || { echo "build.sh: go.mod pins no k8s.io/kubernetes or etcd version" >&2; exit 2; }
sums=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)
cache=${KUBE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kyma-controlplane/kube}
bin="$cache/k8s-$k8s-etcd-$etcd-$sums/bin"
binaries=(etcd kube-apiserver kube-controller-manager)

built() { for b in "${binaries[@]}"; do [ -x "$bin/$b" ] || return 1; done; }
print_paths() { for b in "${binaries[@]}"; do echo "$b=$bin/$b"; done; }

if [ "${1:-}" = "--check" ]; then
  if built; then print_paths; exit 0; fi
  echo "build.sh: the Kubernetes $k8s binaries are not built yet (run: make kube)" >&2
  exit 3
fi
if built; then print_paths; exit 0; fi

command -v go >/dev/null || { echo "build.sh: Go is not installed: the kube test tier needs it (go 1.26)" >&2; exit 3; }
echo "build.sh: building Kubernetes $k8s (kube-apiserver, kube-controller-manager) and etcd $etcd" \
  "from source into $bin; the first build takes several minutes" >&2
start=$(date +%s)
tmp="$bin.tmp.$$"
rm -rf "$tmp" && mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
# A build cache of its own, removed afterwards: compiling Kubernetes leaves about 3.6 GB there,
# and only these three binaries are used later (the module downloads stay in GOMODCACHE).
export GOCACHE="$tmp/go-build"
cd "$here"
# Release builds stamp the version into component-base; a module build must do it by hand, or
# the servers report v0.0.0-master (and clients warn about the skew).
minor=${k8s#v1.}; minor=${minor%%.*}
stamp="-X k8s.io/component-base/version.gitVersion=$k8s -X k8s.io/component-base/version.gitMajor=1"
stamp="$stamp -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
export GOFLAGS="-mod=readonly -trimpath" CGO_ENABLED=0
go build -ldflags "-s -w $stamp" -o "$tmp/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
go build -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
mkdir -p "$bin"
for b in "${binaries[@]}"; do mv "$tmp/$b" "$bin/$b"; done
echo "build.sh: built in $(( $(date +%s) - start )) s" >&2
print_paths
