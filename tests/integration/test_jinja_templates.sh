#!/usr/bin/env bash
# The Jinja engine (coordinator/api/jinja.h) against @huggingface/jinja (npm, pinned in
# tests/node/package.json): the 68 templates of llama.cpp v0.4.0's models/templates/ (kept in
# tests/chat/templates/) and the 7 of ../shared/chat-templates/, each over every chat request of
# tests/chat/jinja_corpus.json (system or none, multi-turn, content parts, white space, unicode,
# tool definitions, assistant turns with tool calls, tool results, reasoning, roles a template
# refuses, with and without the generation prompt, and the templates' own knobs through
# chat_template_kwargs: enable_thinking, reasoning_effort, thinking, builtin_tools, documents,
# model_identity, functions, datetime, ...).
# The same again over the 40 conversations of tests/chat/conversations.json (those of
# test_chat_templates.sh).
# Then 40 random conversations of tests/chat/random_conversations.py (a fixed seed) over every
# template, and 400 random templates of tests/chat/random_templates.py (a fixed seed), which
# reach the corners real templates leave alone: operators, filters and methods on every kind of
# value.
# Every case must render byte for byte the same, or be refused by both with the same message.
# Prints one line per template and corpus.
source "$(dirname "$0")/lib.sh"

root=$(cd "$(dirname "$0")/../.." && pwd)
node_dir="$root/tests/node"
if ! command -v node >/dev/null; then
	echo "SKIP: node is not installed (deploy/setup.sh test installs it)"
	exit 77
fi
if [ ! -f "$node_dir/node_modules/@huggingface/jinja/package.json" ]; then
	echo "SKIP: @huggingface/jinja is not installed (npm ci in tests/node; deploy/setup.sh does it)"
	exit 77
fi
templates=("$root"/tests/chat/templates/*.jinja)
[ "${#templates[@]}" = 68 ] || fail "expected the 68 templates of llama.cpp v0.4.0, found ${#templates[@]}"
shared=()
[ -d "$LM_SHARED/chat-templates" ] && shared=("$LM_SHARED"/chat-templates/*.jinja)
for corpus in jinja_corpus.json conversations.json; do
	echo "== tests/chat/$corpus"
	node "$node_dir/render_jinja.mjs" "$LM_BIN" "$root/tests/chat/$corpus" \
		"${templates[@]}" "${shared[@]}" ||
		fail "the engine and @huggingface/jinja disagree on $corpus (above)"
done
echo "== 40 random conversations"
python3 "$root/tests/chat/random_conversations.py" 20261206 40 "$LM_TMP/conversations.json"
node "$node_dir/render_jinja.mjs" "$LM_BIN" "$LM_TMP/conversations.json" "${templates[@]}" \
	"${shared[@]}" >"$LM_TMP/conversations.txt" ||
	{ grep -v '^PASS' "$LM_TMP/conversations.txt"; fail "a random conversation differs"; }
tail -n 1 "$LM_TMP/conversations.txt"
echo "== 400 random templates"
python3 "$root/tests/chat/random_templates.py" 20261206 400 "$LM_TMP/random"
node "$node_dir/render_jinja.mjs" "$LM_BIN" "$LM_TMP/random/corpus.json" "$LM_TMP"/random/*.jinja \
	>"$LM_TMP/random.txt" || { grep -v '^PASS' "$LM_TMP/random.txt"; fail "a random template differs"; }
tail -n 1 "$LM_TMP/random.txt"
echo "ok: every template renders every case as @huggingface/jinja does"
