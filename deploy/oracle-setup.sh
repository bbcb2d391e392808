#!/bin/sh
# oracle-setup.sh DIR — installs the llama.cpp oracle that layermesh's comparison tests run against.
#
# What it sets up in DIR (by convention `.oracle/` at the repository root, which git ignores):
#   DIR/node_modules/...        npm package node-llama-cpp@3.21.1 (exact version, no install scripts),
#                               whose @node-llama-cpp/linux-x64 package carries the prebuilt CPU
#                               libraries of llama.cpp release v0.4.0
#   DIR/lib -> .../bins/linux-x64   a symlink to those libraries (libllama.v0.4.0.so, libggml*.so)
#   DIR/include/                llama.h and ggml/include/*.h of the llama.cpp source bundled in the
#                               package (llama/gitRelease.bundle), checked to be commit
#                               80fb11ac73e66d89eae2c6a91d8a77428fa733ed
#
# Then:  meson setup build -Dllama_oracle=$PWD/.oracle
#
# Idempotent: a second run checks what is there and changes nothing. It exits non-zero with a
# message saying what is missing when npm cannot install the package (no registry, no network),
# when the libraries or the bundle are absent, or when the bundle holds another commit.
set -eu

NLC_VERSION=3.21.1
LLAMA_RELEASE=v0.4.0
LLAMA_COMMIT=80fb11ac73e66d89eae2c6a91d8a77428fa733ed

die() {
	echo "oracle-setup: error: $*" >&2
	exit 1
}
say() {
	echo "oracle-setup: $*"
}

[ $# -eq 1 ] || {
	echo "usage: $0 DIR   (by convention DIR is .oracle at the repository root)" >&2
	exit 2
}
command -v npm >/dev/null 2>&1 || die "npm is not installed (Debian: apt-get install npm)"
command -v git >/dev/null 2>&1 || die "git is not installed"

mkdir -p "$1" || die "cannot create $1"
DIR=$(cd "$1" && pwd)
PKG="$DIR/node_modules/node-llama-cpp"
BINS="$DIR/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
BUNDLE="$PKG/llama/gitRelease.bundle"

installed_version() {
	[ -f "$PKG/package.json" ] || return 0
	sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$PKG/package.json" | head -n 1
}

# 1. The npm package, exactly this version.
have=$(installed_version)
if [ "$have" = "$NLC_VERSION" ] && [ -f "$BINS/libllama.$LLAMA_RELEASE.so" ]; then
	say "node-llama-cpp@$NLC_VERSION already installed in $DIR"
else
	say "installing node-llama-cpp@$NLC_VERSION into $DIR (about 730 MB)"
	log="$DIR/npm-install.log"
	if ! npm install --prefix "$DIR" -E --ignore-scripts --no-audit --no-fund \
		"node-llama-cpp@$NLC_VERSION" >"$log" 2>&1; then
		tail -n 20 "$log" >&2
		die "npm could not install node-llama-cpp@$NLC_VERSION (is the npm registry reachable? see $log)"
	fi
	have=$(installed_version)
	[ "$have" = "$NLC_VERSION" ] ||
		die "npm installed node-llama-cpp '$have', expected $NLC_VERSION"
fi

# 2. The prebuilt linux-x64 libraries.
for lib in "libllama.$LLAMA_RELEASE.so" "libggml.$LLAMA_RELEASE.so" libggml-base.so \
	libggml-cpu-x64.so; do
	[ -f "$BINS/$lib" ] || die "missing $BINS/$lib (did npm skip the optional package @node-llama-cpp/linux-x64?)"
done
ln -sfn "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64" "$DIR/lib"
say "libraries: $DIR/lib -> $BINS"

# 3. The headers of the pinned commit, from the bundled source.
[ -f "$BUNDLE" ] || die "missing $BUNDLE (the llama.cpp source bundle of node-llama-cpp)"
stamp="$DIR/include/.commit"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$LLAMA_COMMIT" ] && [ -f "$DIR/include/llama.h" ] &&
	[ -f "$DIR/include/ggml.h" ]; then
	say "headers of $LLAMA_COMMIT already in $DIR/include"
else
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	git clone -q --bare "$BUNDLE" "$tmp/src.git" 2>"$tmp/err" ||
		die "git could not read $BUNDLE: $(cat "$tmp/err")"
	git --git-dir="$tmp/src.git" cat-file -e "$LLAMA_COMMIT^{commit}" 2>/dev/null ||
		die "$BUNDLE does not contain commit $LLAMA_COMMIT"
	head=$(git --git-dir="$tmp/src.git" rev-parse HEAD)
	[ "$head" = "$LLAMA_COMMIT" ] ||
		die "$BUNDLE is at $head, expected $LLAMA_COMMIT"
	mkdir -p "$tmp/out"
	git --git-dir="$tmp/src.git" archive "$LLAMA_COMMIT" include/llama.h ggml/include |
		tar -x -C "$tmp/out" || die "git archive of $LLAMA_COMMIT failed"
	rm -rf "$DIR/include"
	mkdir -p "$DIR/include"
	cp "$tmp/out/include/llama.h" "$tmp/out/ggml/include/"*.h "$DIR/include/"
	echo "$LLAMA_COMMIT" >"$stamp"
	say "headers: llama.h and $(ls "$tmp/out/ggml/include" | wc -l) ggml headers of $LLAMA_COMMIT -> $DIR/include"
fi

say "done; configure with: meson setup build -Dllama_oracle=$DIR"
