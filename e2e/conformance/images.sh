#!/usr/bin/env bash
# Builds, offline, every image the conformance suite pulls, under the exact
# reference it asks for (test/utils/image/manifest.go of k8s.io/kubernetes
# at the version bonsai reports), as `docker save` archives in OUT_DIR for
# bonsai to import from <data-dir>/images. Each image is real software:
# agnhost compiled from the same k8s.io/kubernetes module, Debian's
# busybox-static, Debian's nginx, dig and getent with the libraries they
# load. docs/conformance.md lists every image, what it is built from, and
# what no image here serves.
#
# usage: images.sh OUT_DIR AGNHOST_BINARY K8S_MODULE_DIR
set -euo pipefail

out=$1 agnhost=$2 kmod=$3
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

die() { echo "images.sh: $*" >&2; exit 1; }

busybox=""
for p in /bin/busybox /usr/bin/busybox; do
	# A static busybox: Debian's plain busybox would need its libc.
	if [ -x "$p" ] && ! readelf -l "$p" 2>/dev/null | grep -q INTERP; then busybox=$p; break; fi
done
[ -n "$busybox" ] || die "a static busybox (Debian package busybox-static) is not installed"
for b in bash nginx dig getent curl; do
	command -v "$b" >/dev/null || die "$b is not installed (make conformance installs it with apt)"
done

# add_busybox ROOT: Debian's static busybox with every applet in /bin,
# and Debian's bash as /bin/sh and /bin/bash: bookworm's busybox (1.35)
# ash drops the environment variables whose names are not shell
# identifiers (data-1, $_-x), which the images upstream builds pass on
# and the tests of ConfigMap and Secret envFrom prefixes read with `sh -c
# env`.
add_busybox() {
	local root=$1
	mkdir -p "$root/bin"
	cp "$busybox" "$root/bin/busybox"
	add_elf "$root" /bin/bash /bin/bash
	ln -s bash "$root/bin/sh"
	for a in $("$busybox" --list); do
		[ "$a" = busybox ] || [ -e "$root/bin/$a" ] || [ -L "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"
	done
}

# add_elf ROOT BINARY [DEST]: a dynamically linked program with the
# libraries (and the loader) it is linked against, at their host paths.
add_elf() {
	local root=$1 bin=$2 dest=${3:-$2}
	mkdir -p "$root$(dirname "$dest")"
	cp -L "$bin" "$root$dest"
	for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
		mkdir -p "$root$(dirname "$lib")"
		cp -L "$lib" "$root$lib"
	done
}

# add_base ROOT: the directories and files every image has.
add_base() {
	local root=$1
	mkdir -p "$root"/{etc,tmp,root,proc,sys,dev,home,var/tmp,run,usr/bin,usr/sbin,usr/local/bin}
	chmod 1777 "$root/tmp" "$root/var/tmp"
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' >"$root/etc/passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
	printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
}

# archive ROOT REF... -- CONFIG_JSON: one-layer `docker save` archive of
# ROOT named by every REF, with CONFIG_JSON as the image's config.
archive() {
	local root=$1; shift
	local refs=()
	while [ "$1" != -- ]; do refs+=("$1"); shift; done
	shift
	local cfg=$1 name
	name=$(echo "${refs[0]}" | sed 's|.*/||; s|:|-|')
	local d="$work/$name.archive"
	mkdir -p "$d"
	# The root's own entries, not ".": the image's / keeps the mode the
	# runtime gives it, whatever the mode of this temporary directory.
	(cd "$root" && tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$d/layer.tar" -- *)
	local diff
	diff=$(sha256sum "$d/layer.tar" | cut -d' ' -f1)
	mkdir -p "$d/$diff"
	mv "$d/layer.tar" "$d/$diff/layer.tar"
	printf '{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$cfg" "$diff" >"$d/config.json"
	local csum
	csum=$(sha256sum "$d/config.json" | cut -d' ' -f1)
	mv "$d/config.json" "$d/$csum.json"
	local tags
	tags=$(printf '"%s",' "${refs[@]}")
	printf '[{"Config":"%s.json","RepoTags":[%s],"Layers":["%s/layer.tar"]}]' "$csum" "${tags%,}" "$diff" >"$d/manifest.json"
	(cd "$d" && tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$out/$name.tar" -- *)
	echo "built ${refs[*]} ($(du -h "$out/$name.tar" | cut -f1))"
}

path='"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]'
e2e=registry.k8s.io/e2e-test-images

# busybox: Debian's busybox-static, `sh` by default, as upstream's.
r=$work/busybox; add_base "$r"; add_busybox "$r"
archive "$r" $e2e/busybox:1.37.0-2 -- "{$path,\"Cmd\":[\"sh\"]}"

# nonroot: the busybox image run as uid 1234 (upstream: USER 1234).
archive "$r" $e2e/nonroot:1.5 -- "{$path,\"Cmd\":[\"sh\"],\"User\":\"1234\"}"

# agnhost: the test server of the same k8s.io/kubernetes module, with the
# tools its tests exec in it (upstream's alpine image has bind-tools, curl,
# netcat, iproute2, bash): busybox's applets (sh, nc, ip, nslookup, wget),
# Debian's curl and dig with their libraries, porter's certificate, and
# the user and group upstream's Dockerfile adds.
agn=$work/agnhost; add_base "$agn"; add_busybox "$agn"
add_elf "$agn" "$(command -v curl)" /usr/bin/curl
add_elf "$agn" "$(command -v dig)" /usr/bin/dig
add_elf "$agn" "$(command -v getent)" /usr/bin/getent
cp "$agnhost" "$agn/agnhost"
ln -s agnhost "$agn/agnhost-2"
cp "$kmod/test/images/agnhost/porter/localhost.crt" "$kmod/test/images/agnhost/porter/localhost.key" "$agn/"
mkdir -p "$agn/uploads"
echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >>"$agn/etc/passwd"
printf 'user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' >>"$agn/etc/group"
chmod -R u+w "$agn"
# The previous agnhost (AgnhostPrev) is served by the same build: its
# tests use subcommands both have.
archive "$agn" $e2e/agnhost:2.66.1 $e2e/agnhost:2.55 -- "{$path,\"Entrypoint\":[\"/agnhost\"],\"Cmd\":[\"pause\"]}"

# kitten, nautilus: agnhost's test-webserver serving their page and picture.
for img in kitten nautilus; do
	r=$work/$img
	cp -a "$agn" "$r"
	cp "$kmod/test/images/$img/html/"* "$r/"
	chmod -R u+w "$r"
	archive "$r" $e2e/$img:1.8 -- "{$path,\"Entrypoint\":[\"/agnhost\"],\"Cmd\":[\"test-webserver\"]}"
done

# pause: agnhost's pause subcommand, which waits for SIGINT or SIGTERM and
# exits 0 as upstream's pause does.
r=$work/pause; add_base "$r"
cp "$agnhost" "$r/pause"
archive "$r" registry.k8s.io/pause:3.10.2 -- "{$path,\"Entrypoint\":[\"/pause\",\"pause\"]}"

# nginx: Debian's nginx and its libraries with busybox, serving a page on
# port 80 in the foreground as the nginx image does.
r=$work/nginx; add_base "$r"; add_busybox "$r"
add_elf "$r" "$(command -v nginx)" /usr/sbin/nginx
mkdir -p "$r"/etc/nginx "$r"/var/log/nginx "$r"/var/lib/nginx/body "$r"/var/cache/nginx "$r"/usr/share/nginx/html
cp /etc/nginx/mime.types "$r/etc/nginx/"
echo 'nginx:x:101:101:nginx:/var/cache/nginx:/bin/false' >>"$r/etc/passwd"
echo 'nginx:x:101:' >>"$r/etc/group"
cat >"$r/etc/nginx/nginx.conf" <<'EOF'
user nginx;
worker_processes 1;
error_log /dev/stderr notice;
pid /run/nginx.pid;
events { worker_connections 1024; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log /dev/stdout;
    client_body_temp_path /var/lib/nginx/body;
    server {
        listen 80;
        listen [::]:80;
        server_name localhost;
        location / { root /usr/share/nginx/html; index index.html; }
    }
}
EOF
echo '<html><head><title>Welcome to nginx!</title></head><body><h1>Welcome to nginx!</h1></body></html>' >"$r/usr/share/nginx/html/index.html"
archive "$r" $e2e/nginx:1.27.0-2 $e2e/nginx:1.28.0-2 -- "{$path,\"Cmd\":[\"nginx\",\"-g\",\"daemon off;\"],\"StopSignal\":\"SIGQUIT\",\"ExposedPorts\":{\"80/tcp\":{}}}"

# glibc-dns-testing: upstream's Debian image with dnsutils; here Debian's
# dig and getent (glibc's resolver) with their libraries, and busybox.
r=$work/glibc; add_base "$r"; add_busybox "$r"
add_elf "$r" "$(command -v dig)" /usr/bin/dig
add_elf "$r" "$(command -v getent)" /usr/bin/getent
archive "$r" $e2e/glibc-dns-testing:2.1.1 -- "{$path,\"Cmd\":[\"sh\"]}"
