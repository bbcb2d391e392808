#!/usr/bin/env bash
# deploy/test.sh — every test of layermesh, in the order that fails fastest. Run it through
# `deploy/setup.sh test`, which installs what it needs and builds build/ first.
#
#   1. formatting of the C sources (clang-format-14, the checked-in .clang-format), the include
#      layers and the length of functions
#   2. the whole suite on the normal build (unit, oracle comparisons, integration)
#   3. the whole suite again under AddressSanitizer and UndefinedBehaviorSanitizer
#   4. every libFuzzer target for LM_FUZZ_SECONDS each (default 45; deploy/fuzz.sh), in a
#      clang-14 -Werror build of the whole tree with both sanitizers; LM_FUZZ_SECONDS=0 skips it
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# Each line says how long the run has taken so far ($SECONDS), to see where CI time goes.
log() { printf 'test: [%ds] %s\n' "$SECONDS" "$*" >&2; }

log "clang-format check"
files=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh' | grep -v '_data\.c$' || true)
if [ -n "$files" ]; then
	clang-format-14 --dry-run --Werror $files
fi

log "include layers (tools/check_layers.py), the coordinator's calls (tools/check_calls.py) and function lengths (tools/long_functions.py)"
python3 tools/check_layers.py
python3 tools/check_calls.py
long=$(python3 tools/long_functions.py 150)
if [ -n "$long" ]; then
	printf 'functions past 150 lines (split them, or say above them why they are past the ~150-line guide):\n%s\n' \
		"$long" >&2
	exit 1
fi
# The coordinator's guide is 100 lines.
long=$(python3 tools/long_functions.py 100 $(git ls-files 'coordinator/*.c'))
if [ -n "$long" ]; then
	printf 'coordinator functions past 100 lines (split them):\n%s\n' "$long" >&2
	exit 1
fi

log "meson test (build/)"
meson test -C build --print-errorlogs --num-processes 2

log "meson test under ASan+UBSan (build-asan/)"
# The llama.cpp comparisons ran above; the prebuilt llama.cpp libraries are not instrumented,
# so the sanitizer build leaves them out and checks layermesh's own code.
shared=$(meson introspect build --buildoptions | jq -r '.[] | select(.name == "shared_dir") | .value')
# -Dcuda=disabled: the CUDA code is compiled in build/ (where nvcc is found) and needs a GPU to
# run; the sanitizers check the host code, and a second nvcc build would only add minutes.
opts=(-Db_sanitize=address,undefined -Db_lundef=false -Dwerror=true -Dllama_oracle=
	"-Dshared_dir=$shared" -Dcuda=disabled)
if [ -d build-asan ]; then meson configure build-asan "${opts[@]}" >/dev/null
else meson setup build-asan "${opts[@]}" >/dev/null; fi
ninja -C build-asan
# CRITERION_JOBS=1: Criterion's runner, running a file's tests side by side, now and then leaves
# 48 bytes of its own unfreed (every frame inside libcriterion.so.3; 6 of 10 runs of three
# test_planner tests with timeouts, 0 of 10 one at a time), which LeakSanitizer rightly fails;
# meson already runs two test files at once on the two cores.
# tests/lsan.supp: NNG's listeners freed on its threads after a close (the file says why).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	LSAN_OPTIONS="suppressions=$here/tests/lsan.supp" \
	CRITERION_JOBS=1 meson test -C build-asan --print-errorlogs --num-processes 2 --timeout-multiplier 3

fuzz_secs=${LM_FUZZ_SECONDS:-45}
if [ "$fuzz_secs" -gt 0 ]; then
	log "fuzzing every target for ${fuzz_secs}s (build-fuzz/)"
	deploy/fuzz.sh "$fuzz_secs"
fi

log "all tests passed"
