#!/usr/bin/env bash
# Installs the Debian packages named as arguments, and only those missing:
# `apt-get update` is slow and needs the network, so a machine that already
# has everything never runs it. As non-root it only says what is missing
# and fails, so nothing half-works for lack of a package.
set -euo pipefail

missing=()
for pkg in "$@"; do
	# dpkg also knows removed-but-configured packages; only "install ok
	# installed" means the files are there.
	if ! dpkg -s "$pkg" 2>/dev/null | grep -qx 'Status: install ok installed'; then
		missing+=("$pkg")
	fi
done
if ((${#missing[@]} == 0)); then
	exit 0
fi
if ((EUID != 0)); then
	echo "missing Debian packages: ${missing[*]}" >&2
	echo "install them as root: apt-get install ${missing[*]}" >&2
	exit 1
fi
echo "installing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Another apt run (unattended upgrades, a parallel job) may hold the lock
# for a while; wait for it rather than fail.
apt=(apt-get -q -y -o DPkg::Lock::Timeout=300)
"${apt[@]}" update </dev/null
"${apt[@]}" install --no-install-recommends "${missing[@]}" </dev/null
