#!/usr/bin/env bash
# The conformance harness: starts bonsai (its own containerd and data dir,
# on free ports and non-default ranges) with the images images.sh built,
# runs upstream's e2e.test on the [Conformance] tests (or FOCUS) with its
# kubeconfig, and writes the JUnit report, the log, the summary line and
# the failures into OUT. Everything e2e.test talks to is bonsai's API on
# 127.0.0.1 and pods on bonsai's own bridge: every registry is mirrored to
# a closed loopback port, so no pull leaves the machine.
#
# usage: run.sh BONSAI_BINARY CACHE_DIR OUT_DIR
# env: FOCUS (default '\[Conformance\]'), SKIP_EXTRA (a regexp skipped on
#      top of skip.txt), TIMEOUT (ginkgo's, default 3h), KEEP=1 leaves the
#      data dir for a look after the run.
set -euo pipefail

bonsai=$(realpath "$1") cache=$(realpath "$2") out=$3
here=$(cd "$(dirname "$0")" && pwd)
focus=${FOCUS:-'\[Conformance\]'}
mkdir -p "$out"
out=$(realpath "$out")

[ "$(id -u)" = 0 ] || { echo "conformance: needs root (containerd, network namespaces, nftables)" >&2; exit 1; }
for f in e2e.test kubectl; do
	[ -x "$cache/$f" ] || { echo "conformance: $cache/$f missing: run make conformance" >&2; exit 1; }
done

# Free ports, picked now; non-default ranges and a bridge of the harness's
# own so bonsai tests running beside it on this host do not collide.
read -r api kubelet http https < <(python3 -c '
import socket
ss=[socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1",0))
print(*[s.getsockname()[1] for s in ss])')
bridge=cfbr0
flags=(--https-listen-port "$api" --kubelet-port "$kubelet" --ingress-http-port "$http" --ingress-https-port "$https"
	--cluster-cidr 10.251.0.0/16 --service-cidr 10.250.0.0/16 --pod-bridge "$bridge" --pod-network builtin)

data=$(mktemp -d /var/tmp/bonsai-conformance.XXXXXX)
mkdir -p "$data/images"
cp "$cache"/images/*.tar "$data/images/"
printf '' >"$data/config.yaml"
# Every registry mirrored to a closed loopback port, and never pulled
# from directly: a test that needs an image this harness did not build
# fails on a local connection refused, not on the internet.
printf 'mirrors:\n  "*":\n    endpoint:\n      - http://127.0.0.1:9\n' >"$data/registries.yaml"

common=(--data-dir "$data" "${flags[@]}" --kubelet-root-dir "$data/kubelet"
	--container-runtime-endpoint "$data/no-containerd.sock")

pid=""
cleanup() {
	set +e
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	"$bonsai" server --config "$data/config.yaml" "${common[@]}" --cleanup >>"$out/bonsai.log" 2>&1
	# Shims (and their containers) of this data dir's containerd.
	for p in $(pgrep -f "containerd-shim.*$data"); do kill -9 "$p"; done
	awk -v d="$data" '$2 ~ "^"d {print $2}' /proc/self/mounts | sort -r | while read -r m; do umount -l "$m"; done
	if [ "${KEEP:-}" = 1 ]; then echo "conformance: data dir kept at $data"; else rm -rf "$data"; fi
}
trap cleanup EXIT

start=$(date +%s)
"$bonsai" server --config "$data/config.yaml" "${common[@]}" --disable-default-registry-endpoint >"$out/bonsai.log" 2>&1 &
pid=$!

export KUBECONFIG=$data/kubeconfig.yaml
ready=""
for _ in $(seq 1 240); do
	kill -0 "$pid" 2>/dev/null || { echo "conformance: bonsai exited:" >&2; tail -20 "$out/bonsai.log" >&2; exit 1; }
	if [ -f "$KUBECONFIG" ] && "$cache/kubectl" wait --for=condition=Ready node --all --timeout=1s >/dev/null 2>&1 \
		&& "$cache/kubectl" get sa default >/dev/null 2>&1; then
		ready=1; break
	fi
	sleep 0.5
done
[ -n "$ready" ] || { echo "conformance: bonsai's node not Ready after 120s" >&2; tail -20 "$out/bonsai.log" >&2; exit 1; }
echo "conformance: bonsai $("$bonsai" version 2>/dev/null | head -1) on 127.0.0.1:$api, node Ready after $(($(date +%s) - start))s"

# skip.txt: one test per line, "name<TAB>reason"; names are matched
# literally.
skip=$(grep -v '^#' "$here/skip.txt" | grep -v '^$' | cut -f1 | python3 -c '
import re, sys
print("|".join(re.escape(l.rstrip("\n")) for l in sys.stdin))')
[ -n "${SKIP_EXTRA:-}" ] && skip="${skip:+$skip|}$SKIP_EXTRA"

rm -f "$out/junit.xml" "$out/summary.txt" "$out/failures.txt"
t0=$(date +%s)
set +e
PATH=$cache:$PATH "$cache/e2e.test" \
	--kubeconfig "$KUBECONFIG" \
	--kubectl-path "$cache/kubectl" \
	--provider skeleton \
	--report-dir "$out" \
	--ginkgo.focus "$focus" \
	${skip:+--ginkgo.skip "$skip"} \
	--ginkgo.junit-report "$out/junit.xml" \
	--ginkgo.timeout "${TIMEOUT:-3h}" \
	--ginkgo.no-color \
	--ginkgo.v \
	--dump-logs-on-failure=false \
	--non-blocking-taints node-role.kubernetes.io/control-plane \
	>"$out/e2e.log" 2>&1
rc=$?
set -e
wall=$(($(date +%s) - t0))
echo "conformance: e2e.test exited $rc; report $out/junit.xml, log $out/e2e.log, bonsai's log $out/bonsai.log"
python3 "$here/summary.py" "$out/junit.xml" "$out/failures.txt" "$wall" "$focus" >"$out/summary.txt"
cat "$out/failures.txt" "$out/summary.txt"
grep -q ' 0 failed' "$out/summary.txt"
