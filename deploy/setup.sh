#!/usr/bin/env bash
# deploy/setup.sh — set layermesh up on a fresh Debian 12 machine, then do one job.
#
#   deploy/setup.sh run    install, build, and run the main job on the default model
#   deploy/setup.sh test   install (with the llama.cpp oracle), build, and run every test
#   deploy/setup.sh build  install and build only
#
# Packages come from Debian 12 (apt-get, as root or through sudo); the llama.cpp oracle used by
# the comparison tests comes from the npm registry (node-llama-cpp@3.21.1, see
# deploy/oracle-setup.sh). Everything else is built from this repository with meson.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
job=${1:-build}
shift || true

log() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"
	elif command -v sudo >/dev/null; then sudo "$@"
	else die "need root (or sudo) to run: $*"
	fi
}

packages=(
	build-essential meson ninja-build pkg-config git ca-certificates
	libuv1-dev libnng-dev libmsgpack-dev libcriterion-dev libcjson-dev
	clang-14 libclang-rt-14-dev clang-format-14 iproute2
)

install_packages() {
	local missing=()
	for p in "${packages[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$p")
	done
	# node and npm are needed only for the oracle; a machine may have its own node already.
	if [ "$job" = test ] && ! command -v npm >/dev/null; then missing+=(nodejs npm); fi
	if [ ${#missing[@]} -eq 0 ]; then
		log "Debian packages: all present"
		return
	fi
	log "installing Debian packages: ${missing[*]}"
	as_root apt-get update -q
	DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends \
		"${missing[@]}"
}

# The default model. The shared copy next to the checkout is used when present; its checksum
# is pinned here so a corrupted or different file is caught before anything runs.
model_sha256=6f18a48dd537c7d548566e7127ff301c9e1ee16d05bf3adf35c519d93feb7458
install_model() {
	mkdir -p models
	local dst=models/stories260K.gguf src=${LM_SHARED:-$here/../shared}/models/stories260K.gguf
	if [ ! -f "$dst" ]; then
		[ -f "$src" ] || die "the default model is missing: expected $src (see README.md, 'The default model')"
		cp "$src" "$dst"
		log "copied $src -> $dst"
	fi
	echo "$model_sha256  $dst" | sha256sum -c --quiet - ||
		die "$dst does not have the pinned sha256 $model_sha256"
}

build() {
	local opts=(-Dwerror=true)
	if [ -d .oracle/include ]; then opts+=("-Dllama_oracle=$here/.oracle"); fi
	if [ -d build ]; then
		meson configure build "${opts[@]}" >/dev/null
	else
		meson setup build "${opts[@]}" >/dev/null
	fi
	log "building (build/)"
	ninja -C build
}

install_packages
install_model
case "$job" in
build)
	build
	;;
run)
	build
	exec build/coordinator/layermesh run --model models/stories260K.gguf \
		--prompt "${LM_PROMPT:-Once upon a time}" "$@"
	;;
test)
	deploy/oracle-setup.sh "$here/.oracle"
	build
	exec deploy/test.sh "$@"
	;;
*)
	die "unknown job '$job' (run, test or build)"
	;;
esac
