#!/usr/bin/env bash
# make deps: installs, once, everything the whole suite and the heavier
# proofs can use, so that no test installs anything itself:
#   Debian packages (apt-get, as root or through sudo -n):
#     mariadb-server galera-4 rsync  the test database, the Galera cluster of make chaos-cluster
#     chromium chromium-driver       the checkout page's browser test (demo)
#     nodejs npm                     the browser client's tests (clients/js) and the OpenAPI linter
#     spin gcc                       the protocol model (make model, make proofs)
#     prometheus                     promtool, which checks the alert rules (metrics)
#     docker-compose                 validates docker-compose.yml (cmd/gateway)
#     curl                           runs the README's quick start as written (cmd/gateway)
#   npm: @redocly/cli, the OpenAPI linter (api), into the user's cache directory.
# Without root or sudo it prints the one command to run and installs nothing.
# What is already there is left alone; run it again at any time.
set -euo pipefail
cd "$(dirname "$0")/.."

# Keep in step with api/openapi_lint_test.go.
REDOCLY_VERSION=2.77.0

packages=()
need() { command -v "$1" >/dev/null 2>&1 || packages+=("$2"); }
need mariadbd mariadb-server
[ -e /usr/lib/galera/libgalera_smm.so ] || [ -e /usr/lib/libgalera_smm.so ] || packages+=(galera-4)
need rsync rsync
need chromium chromium
need chromedriver chromium-driver
need node nodejs
need npm npm
need spin spin
command -v gcc >/dev/null 2>&1 || command -v cc >/dev/null 2>&1 || packages+=(gcc)
need promtool prometheus
need docker-compose docker-compose
need curl curl

if [ ${#packages[@]} -gt 0 ]; then
	sudo=none
	if [ "$(id -u)" = 0 ]; then
		sudo=""
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo="sudo -n"
	fi
	if [ "$sudo" = none ] || ! command -v apt-get >/dev/null 2>&1; then
		echo "make deps: missing ${packages[*]}; install them with: sudo apt-get install ${packages[*]}" >&2
		exit 1
	fi
	echo "make deps: installing with apt-get: ${packages[*]}"
	install() { $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
	if ! install "${packages[@]}"; then
		$sudo apt-get update -qq
		# One at a time after the update, so that one package a distribution
		# lacks does not stop the others.
		for p in "${packages[@]}"; do
			install "$p" || echo "make deps: apt-get could not install $p; the tests that need it will say so" >&2
		done
	fi
fi

cache=${XDG_CACHE_HOME:-$HOME/.cache}
dir=$cache/gateway-test-tools/redocly-cli-$REDOCLY_VERSION
if [ ! -x "$dir/node_modules/.bin/redocly" ]; then
	if command -v npm >/dev/null 2>&1; then
		echo "make deps: installing @redocly/cli@$REDOCLY_VERSION into $dir"
		mkdir -p "$(dirname "$dir")"
		tmp=$(mktemp -d "$(dirname "$dir")/install-XXXXXX")
		if npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error "@redocly/cli@$REDOCLY_VERSION" >/dev/null; then
			rm -rf "$dir" && mv "$tmp" "$dir"
		else
			rm -rf "$tmp"
			echo "make deps: npm could not install @redocly/cli@$REDOCLY_VERSION; the OpenAPI lint test will say so" >&2
		fi
	fi
fi
echo "make deps: done"
