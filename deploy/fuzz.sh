#!/usr/bin/env bash
# deploy/fuzz.sh — a bounded libFuzzer run of every target in tests/fuzz (fuzz_<name>.c), in a
# clang-14 build with AddressSanitizer and UndefinedBehaviorSanitizer (build-fuzz/). The whole
# tree is built there with -Dwerror=true, so this is also the clang -Werror check.
#
#   deploy/fuzz.sh [SECONDS]    each target fuzzes for SECONDS (default 45), one after another
#
# Each target starts from a copy of its committed seed corpus (tests/fuzz/corpus/<name>; the
# committed corpus is never written) and its dictionary (tests/fuzz/<name>.dict) when there is
# one; runs are bounded by libFuzzer's -max_total_time and by a hard `timeout`. For each target
# the executions and executions per second of libFuzzer's final stats are printed. A crash, a
# sanitizer report, a leak, an input slower than 10 s or a hard timeout fails the run; the
# input that caused it stays under build-fuzz/fuzz-run/<name>/ and is named in the message
# (replay it with build-fuzz/tests/fuzz/fuzz_<name> FILE, or build/tests/fuzz/replay_<name> FILE);
# an input of at most 4 KiB is printed there in base64 too, for a run whose files are gone (CI).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
log() { printf 'fuzz: %s\n' "$*" >&2; }
die() { printf 'fuzz: error: %s\n' "$*" >&2; exit 1; }

secs=${1:-45}
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -eq 0 ]; then
	die "SECONDS must be a positive integer, got '$secs'"
fi
command -v clang-14 >/dev/null || die "clang-14 is missing (deploy/setup.sh installs clang-14 and libclang-rt-14-dev)"

targets=()
for src in tests/fuzz/fuzz_*.c; do
	name=${src#tests/fuzz/fuzz_}
	targets+=("${name%.c}")
done
[ ${#targets[@]} -gt 0 ] || die "no fuzz targets in tests/fuzz"

# The shared data directory as the normal build knows it, when there is one.
shared=
if [ -d build ]; then
	shared=$(meson introspect build --buildoptions 2>/dev/null |
		jq -r '.[] | select(.name == "shared_dir") | .value' 2>/dev/null || true)
fi
# -Dcuda=disabled: build/ compiles kernels/cuda once (where nvcc is found); this build checks
# the C code under clang.
opts=(-Dfuzz=true "-Db_sanitize=address,undefined" -Db_lundef=false -Dwerror=true -Dllama_oracle=
	"-Dshared_dir=$shared" -Dcuda=disabled)
# The root meson.build refuses -Dfuzz=true with a compiler other than clang.
if [ -d build-fuzz ]; then
	meson configure build-fuzz "${opts[@]}" >/dev/null
else
	CC=clang-14 meson setup build-fuzz "${opts[@]}" >/dev/null
fi
# Everything, not only the targets: build-fuzz is also the check that the whole tree builds
# warning-free with clang-14 -Werror (the normal builds use gcc).
log "building everything with clang-14 -Werror, fuzz targets ${targets[*]/#/fuzz_} (build-fuzz/)"
ninja -C build-fuzz

# A value of libFuzzer's final stats (-print_final_stats=1) from a run's log.
final_stat() { sed -n "s/^stat::$2: *//p" "$1" | tail -n 1; }

work=build-fuzz/fuzz-run
print_max=4096 # bytes of a failing input printed in base64 (about 60 lines)
rm -rf "$work"
failed=()
printf '%-8s %12s %10s %10s %8s\n' target executions 'execs/s' 'new units' 'rss MB'
for name in "${targets[@]}"; do
	dir=$work/$name
	mkdir -p "$dir/corpus" "$dir/artifacts"
	if [ -d "tests/fuzz/corpus/$name" ]; then
		cp -R "tests/fuzz/corpus/$name/." "$dir/corpus/"
	fi
	args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
		-artifact_prefix="$dir/artifacts/")
	if [ -f "tests/fuzz/$name.dict" ]; then args+=(-dict="tests/fuzz/$name.dict"); fi
	rc=0
	timeout --kill-after=10 $((secs + 120)) "build-fuzz/tests/fuzz/fuzz_$name" "${args[@]}" \
		"$dir/corpus" >"$dir/log" 2>&1 || rc=$?
	printf '%-8s %12s %10s %10s %8s\n' "$name" \
		"$(final_stat "$dir/log" number_of_executed_units)" \
		"$(final_stat "$dir/log" average_exec_per_sec)" \
		"$(final_stat "$dir/log" new_units_added)" "$(final_stat "$dir/log" peak_rss_mb)"
	if [ "$rc" -ne 0 ]; then
		failed+=("$name")
		log "fuzz_$name FAILED (exit $rc$([ "$rc" -ge 124 ] && echo ': hard timeout'))"
		grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$dir/log" | head -n 5 >&2 || true
		for a in "$dir"/artifacts/*; do
			[ -e "$a" ] || continue
			log "  the input that failed is kept: $a"
			# CI keeps only this output: a small input is printed too, so that a finding
			# can be replayed from the log alone.
			if [ "$(stat -c %s "$a")" -le "$print_max" ]; then
				log "  its bytes in base64 (base64 -d >FILE; build/tests/fuzz/replay_$name FILE):"
				base64 -w 96 "$a" | sed 's/^/fuzz:     /' >&2
			fi
		done
		log "  full log: $dir/log"
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	die "fuzz targets failed: ${failed[*]}"
fi
log "all ${#targets[@]} targets ran ${secs}s each without a finding"
