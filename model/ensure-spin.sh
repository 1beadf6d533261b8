#!/usr/bin/env bash
# Installs what `make model` needs when it is missing: the SPIN model checker
# (Debian package "spin") and a C compiler for its verifiers, with apt-get as
# root or through `sudo -n`; otherwise says exactly what to install.
set -euo pipefail
missing=()
command -v spin >/dev/null 2>&1 || missing+=(spin)
command -v gcc >/dev/null 2>&1 || command -v cc >/dev/null 2>&1 || missing+=(gcc)
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=none
if [ "$(id -u)" = 0 ]; then
	sudo=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
	sudo="sudo -n"
fi
if [ "$sudo" != none ] && command -v apt-get >/dev/null 2>&1; then
	install() { $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
	if install || { $sudo apt-get update -qq && install; }; then
		exit 0
	fi
fi
echo "make model needs: ${missing[*]}. Install with: sudo apt-get install ${missing[*]}" >&2
exit 1
