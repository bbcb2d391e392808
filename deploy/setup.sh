#!/usr/bin/env bash
# deploy/setup.sh — set layermesh up on a fresh Debian 12 machine, then do one job.
#
#   deploy/setup.sh run    install, build, and run the main job on the default model
#   deploy/setup.sh test   install (with the llama.cpp oracle), build, and run every test
#   deploy/setup.sh build  install and build only
#
# Packages come from Debian 12 (apt-get, as root or through sudo); the llama.cpp oracle used by
# the comparison tests comes from the npm registry (node-llama-cpp@3.21.1, see
# deploy/oracle-setup.sh), and so does the Kubernetes manifests' checker (kubernetes-models@5.1.0
# and yaml@2.9.1, pinned with their dependencies by deploy/k8s/check/package-lock.json) and the
# API's reference clients (@huggingface/jinja@0.5.11, the Jinja renderer chat templates are held
# to, and openai@6.49.0, the official SDK; tests/node/package-lock.json).
# Everything else is built from this repository with meson.
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
	clang-14 libclang-rt-14-dev clang-format-14 iproute2 curl jq
	systemd strace python3 systemd-container debootstrap openssl
)
# The API's tests: headless Chromium (CORS), promtool (the /metrics page); pytest and what
# llama.cpp's server tests import (test_llama_server.sh); wrk for bench/http_wrk.sh.
test_packages=(chromium prometheus wrk python3-pytest python3-requests python3-filelock
	python3-wget python3-pytest-timeout)

install_packages() {
	local missing=()
	for p in "${packages[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$p")
	done
	# node and npm are needed only for the oracle and the manifests' checker; a machine may have
	# its own node already.
	if [ "$job" = test ] && ! command -v npm >/dev/null; then missing+=(nodejs npm); fi
	if [ "$job" = test ]; then
		for p in "${test_packages[@]}"; do
			dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
				missing+=("$p")
		done
	fi
	if [ ${#missing[@]} -eq 0 ]; then
		log "Debian packages: all present"
		return
	fi
	log "installing Debian packages: ${missing[*]}"
	as_root apt-get update -q
	DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends \
		"${missing[@]}"
}

# The project's shared data: the default model, llama.cpp's reference outputs and the tokenizer
# vectors. It sits beside the checkout (../shared); a clone made elsewhere from such a checkout
# finds it beside its origin. LM_SHARED overrides both.
find_shared() {
	local origin c
	origin=$(git -C "$here" config --get remote.origin.url 2>/dev/null || true)
	for c in "${LM_SHARED:-}" "$here/../shared" ${origin:+"$origin/../shared"}; do
		if [ -n "$c" ] && [ -f "$c/models/stories260K.gguf" ]; then
			(cd "$c" && pwd)
			return
		fi
	done
}
shared=$(find_shared)

# The default model, checked against its pinned sha256 so a corrupted or different file is
# caught before anything runs.
model_sha256=6f18a48dd537c7d548566e7127ff301c9e1ee16d05bf3adf35c519d93feb7458
install_model() {
	mkdir -p models
	local dst=models/stories260K.gguf
	if [ ! -f "$dst" ]; then
		[ -n "$shared" ] || die "the default model is missing: put the project's shared data \
directory beside the checkout (../shared) or name it in LM_SHARED (README.md, 'The default model')"
		cp "$shared/models/stories260K.gguf" "$dst"
		log "copied $shared/models/stories260K.gguf -> $dst"
	fi
	echo "$model_sha256  $dst" | sha256sum -c --quiet - ||
		die "$dst does not have the pinned sha256 $model_sha256"
}

# The Kubernetes manifests' checker (tests/integration/test_k8s.sh): the exact packages of
# deploy/k8s/check/package-lock.json, without install scripts.
install_k8s_check() {
	local dir=deploy/k8s/check v
	v=$(sed -n 's/^  "version": "\(.*\)",$/\1/p' \
		"$dir/node_modules/kubernetes-models/package.json" 2>/dev/null || true)
	if [ "$v" = 5.1.0 ] && [ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]
	then
		log "Kubernetes manifests' checker: present"
		return
	fi
	log "installing the Kubernetes manifests' checker (npm ci in $dir)"
	(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) ||
		die "npm ci in $dir failed (is the npm registry reachable?)"
}

# The API's reference clients (tests/node): the exact packages of its package-lock.json.
install_node_tests() {
	local dir=tests/node
	if [ -f "$dir/node_modules/.package-lock.json" ] &&
		[ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]; then
		log "the API's reference clients (tests/node): present"
		return
	fi
	log "installing the API's reference clients (npm ci in $dir)"
	(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) ||
		die "npm ci in $dir failed (is the npm registry reachable?)"
}

build() {
	local opts=(-Dwerror=true "-Dshared_dir=$shared")
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
	# The main job: the default mesh (mesh.toml: stories260K over three workers) comes up,
	# one prompt goes through it, and it comes down again.
	build/coordinator/layermesh up mesh.toml &
	up=$!
	trap 'kill -TERM $up 2>/dev/null; wait $up 2>/dev/null' EXIT
	url=http://$(sed -n 's/^http = "\(.*\)"/\1/p' mesh.toml | head -n 1)
	for _ in $(seq 300); do
		curl -sf "$url/readyz" >/dev/null 2>&1 && break
		kill -0 $up 2>/dev/null || die "the mesh did not come up (see above)"
		sleep 0.1
	done
	build/coordinator/layermesh generate --url "$url" \
		--prompt "${LM_PROMPT:-Once upon a time}" "$@"
	;;
test)
	deploy/oracle-setup.sh "$here/.oracle"
	install_k8s_check
	install_node_tests
	build
	exec deploy/test.sh "$@"
	;;
*)
	die "unknown job '$job' (run, test or build)"
	;;
esac
