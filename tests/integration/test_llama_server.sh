#!/usr/bin/env bash
# llama.cpp's own server tests against a real mesh: tools/server/tests of the llama.cpp source
# that node-llama-cpp@3.21.1 bundles (release v0.4.0, the oracle's; deploy/oracle-setup.sh),
# extracted from the bundle into the build directory at test time (never copied into this
# repository) and run with Debian's pytest, pointed at the mesh by DEBUG_EXTERNAL=1.
#
# The mesh serves the project's default model, stories260K (the model those tests expect), over
# two workers on loopback, set up as the tests' tinyllama2 preset sets up llama-server: 512
# positions over 2 slots (256 each), the default seed 42 (llama-server's --seed: [coordinator]
# seed), the model named tinyllama-2 (llama-server's --alias: here a link of that name to the
# file). The files run: unit/test_tokenize.py, test_basic.py,
# test_completion.py, test_chat_completion.py and test_tool_call.py, less the tests marked slow,
# as llama.cpp's own CI runs them (tests.sh: -m "not slow"; those fetch multi-GB models from a
# hub at run time, which this machine cannot reach and the mesh does not need).
#
# The failures must be exactly the tests listed in llama_server_xfail.txt, each with its reason
# (llama_server/compare.py): a failure not listed fails the check, and so does a listed test
# that passes (the list is trimmed as features land, so what passes stays passing) or is not
# run; a test listed as "flaky:" (its outcome rests on a random draw) may go either way.
#
# Skipped (exit 77, with the reason) when the bundle, python3's pytest or requests are missing;
# deploy/setup.sh test installs all of them. LM_LLAMA_BUNDLE names the bundle (default: the
# oracle's, from meson's llama_oracle option, or .oracle/ at the repository root).
source "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py=/usr/bin/python3
[ -x "$py" ] || py=python3
bundle=${LM_LLAMA_BUNDLE:-$root/.oracle/node_modules/node-llama-cpp/llama/gitRelease.bundle}
commit=80fb11ac73e66d89eae2c6a91d8a77428fa733ed
files=(unit/test_tokenize.py unit/test_basic.py unit/test_completion.py
	unit/test_chat_completion.py unit/test_tool_call.py)

skip() {
	echo "SKIP: $*"
	exit 77
}
[ -f "$bundle" ] || skip "no llama.cpp source bundle at $bundle (deploy/oracle-setup.sh installs it)"
"$py" -c 'import pytest, requests' 2>/dev/null ||
	skip "$py lacks pytest or requests (Debian: apt-get install python3-pytest python3-requests)"
# utils.py and conftest.py import these too (neither is used against an external server).
"$py" -c 'import filelock, wget' 2>/dev/null ||
	skip "$py lacks filelock or wget (Debian: apt-get install python3-filelock python3-wget)"

# The tests, extracted once per build directory and commit.
dest="${LM_BUILD_DIR:-$LM_TMP}/llama-server-tests/$commit"
if [ ! -f "$dest/.done" ]; then
	rm -rf "$dest" "$LM_TMP/bundle.git"
	mkdir -p "$dest"
	git init -q --bare "$LM_TMP/bundle.git"
	git -C "$LM_TMP/bundle.git" fetch -q "$bundle" "$commit:refs/heads/src" ||
		fail "the bundle $bundle does not hold llama.cpp $commit"
	git -C "$LM_TMP/bundle.git" archive src tools/server/tests | tar -x -C "$dest" ||
		fail "could not extract tools/server/tests from $bundle"
	touch "$dest/.done"
fi
tests="$dest/tools/server/tests"

dir="$LM_TMP/llama"
mkdir -p "$dir"
ln -s "$LM_SHARED/models/stories260K.gguf" "$dir/tinyllama-2.gguf"
port=$(lm_port)
LM_SLOTS=2 LM_MAX_SEQ=256 LM_SEED=42 lm_mesh_toml "$dir/mesh.toml" "$dir/tinyllama-2.gguf" ipc "$port" 0:2 2:5
lm_up "$dir/mesh.toml" "$dir/up.log"

# Each test is bounded by pytest-timeout where it is installed (python3-pytest-timeout), the
# whole run by timeout(1) in any case.
bound=()
"$py" -c 'import pytest_timeout' 2>/dev/null && bound=(--timeout=60)
echo "== llama.cpp's server tests (${files[*]}) against $LM_URL"
rc=0
# (No bytecode: the stand-in's would land in the source tree.)
(cd "$tests" && DEBUG_EXTERNAL=1 PORT=$port PYTHONPATH="$here/llama_server" PYTHONDONTWRITEBYTECODE=1 \
	timeout -k 10 420 "$py" -m pytest -p no:cacheprovider -q -m "not slow" "${bound[@]}" \
	--junitxml="$dir/junit.xml" "${files[@]}" >"$dir/pytest.log" 2>&1) || rc=$?
tail -n 3 "$dir/pytest.log"
# pytest: 0 all passed, 1 some failed; anything else (an interrupted or broken run) is ours.
if [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then
	tail -n 60 "$dir/pytest.log" >&2
	fail "pytest exited with $rc"
fi
[ -f "$dir/junit.xml" ] || fail "pytest wrote no report"
if ! "$py" "$here/llama_server/compare.py" "$dir/junit.xml" "$here/llama_server_xfail.txt"; then
	# The reasons of the unexpected failures.
	grep -E '^(FAILED|ERROR) ' "$dir/pytest.log" | head -n 40 >&2 || true
	fail "llama.cpp's server tests differ from llama_server_xfail.txt"
fi
lm_down "$dir"
echo "PASS: llama.cpp's server tests, failures as listed"
