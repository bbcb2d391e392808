#!/usr/bin/env bash
# The mesh against the single process: for stories260K and a synthetic grouped-query model,
# every contiguous fence over 1 to 5 workers, over ipc:// and tcp://127.0.0.1, must produce
# exactly the greedy ids of `layermesh run`; stopping `layermesh up` must leave no worker and no
# ipc file behind.
source "$(dirname "$0")/lib.sh"

prompts=("Once upon a time" "The cat" "Tom had 3 red apples!")

synth="$LM_TMP/synth-gqa.gguf"
"$LM_BIN" synth --out "$synth" --dim 128 --layers 5 --heads 8 --kv-heads 2 --ffn 256 \
	--vocab 512 --type q8_0 --seed 7 --vocab-from "$LM_SHARED/models/stories260K.gguf" \
	>/dev/null

# Every composition of 5 layers into contiguous ranges: "0:5", "0:1 1:5", ...
fences() {
	local mask
	for ((mask = 0; mask < 16; mask++)); do
		local start=0 out="" c
		for c in 1 2 3 4; do
			if (((mask >> (c - 1)) & 1)); then
				out+="$start:$c "
				start=$c
			fi
		done
		echo "${out}$start:5"
	done
}

n=0
for model in "$LM_SHARED/models/stories260K.gguf" "$synth"; do
	declare -A want=()
	for p in "${prompts[@]}"; do
		want[$p]=$("$LM_BIN" run --model "$model" --prompt "$p" --temp 0 -n 40 --ctx 256 \
			--ids 2>/dev/null)
	done
	for transport in ipc tcp; do
		while read -r fence; do
			dir="$LM_TMP/m$n"
			mkdir -p "$dir"
			n=$((n + 1))
			lm_mesh_toml "$dir/mesh.toml" "$model" "$transport" "$(lm_port)" $fence
			lm_up "$dir/mesh.toml" "$dir/up.log"
			for p in "${prompts[@]}"; do
				got=$("$LM_BIN" generate --url "$LM_URL" --prompt "$p" --temp 0 -n 40 \
					--ids 2>/dev/null) || fail "generate failed on fence [$fence] ($transport)"
				[ "$got" = "${want[$p]}" ] || {
					cat "$dir/up.log" >&2
					fail "$(basename "$model") fence [$fence] over $transport: '$p' gave
  $got
instead of
  ${want[$p]}"
				}
			done
			lm_down "$dir"
			echo "ok $(basename "$model") [$fence] $transport"
		done < <(fences)
	done
	unset want
done
echo "all $n meshes matched the single process"
