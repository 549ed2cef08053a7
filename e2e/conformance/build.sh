#!/usr/bin/env bash
# Builds, once per Kubernetes version, what the conformance harness runs,
# into CACHE_DIR: upstream's e2e.test (go test -c k8s.io/kubernetes/test/e2e,
# unmodified), the ginkgo CLI, kubectl and agnhost from the same
# k8s.io/kubernetes module through the Go module proxy, and the images
# images.sh builds. A file already in the cache is not built again.
#
# usage: build.sh KUBE_VERSION CACHE_DIR
set -euo pipefail

kver=$1 cache=$2
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
have=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
if [ "$have" != "$kver" ]; then
	echo "conformance: e2e/conformance/go.mod requires k8s.io/kubernetes $have but bonsai reports $kver: change the require and the v0 of every replace" >&2
	exit 1
fi
mkdir -p "$cache"
export CGO_ENABLED=0
# The version stamp upstream's build (hack/lib/version.sh) links in: the
# suite reads it (Pod Security fixtures of the restricted level at this
# minor, [MinimumKubeletVersion] checks), kubectl prints it.
major=${kver#v}; major=${major%%.*}
minor=${kver#v*.}; minor=${minor%%.*}
v=k8s.io/component-base/version
ldflags="-s -w -X $v.gitVersion=$kver -X $v.gitMajor=$major -X $v.gitMinor=$minor -X $v.gitTreeState=clean"

build() { # NAME PACKAGE GO-COMMAND...
	local name=$1 pkg=$2; shift 2
	# Built, and stamped with this version (a binary of an older build.sh
	# is not).
	[ -x "$cache/$name" ] && grep -qaF "$kver" "$cache/$name.stamp" 2>/dev/null && return
	local t0
	t0=$(date +%s)
	nice go "$@" -trimpath -ldflags "$ldflags" -o "$cache/$name.tmp" "$pkg"
	mv "$cache/$name.tmp" "$cache/$name"
	echo "$kver $ldflags" >"$cache/$name.stamp"
	echo "conformance: built $name in $(($(date +%s) - t0))s"
}
build e2e.test k8s.io/kubernetes/test/e2e test -c
build ginkgo github.com/onsi/ginkgo/v2/ginkgo build
build kubectl k8s.io/kubernetes/cmd/kubectl build
build agnhost k8s.io/kubernetes/test/images/agnhost build

# The images, rebuilt when images.sh changes.
stamp=$(sha256sum images.sh | cut -c1-16)
if [ "$(cat "$cache/images/.stamp" 2>/dev/null)" != "$stamp" ]; then
	rm -rf "$cache/images"
	bash images.sh "$cache/images.tmp" "$cache/agnhost" "$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
	echo "$stamp" >"$cache/images.tmp/.stamp"
	mv "$cache/images.tmp" "$cache/images"
fi
