#!/usr/bin/env bash
# The README's "your own model and text" recipe, its lines as written (taken
# from the README between its recipe marker and the end of that code block),
# on SmolLM2-135M's GGUF (`make setup`) and four of the repository's docs as
# my-texts/, with runs/my moved into a temporary directory and the CPT cut to
# 2 steps (the README's is 10) to keep the suite short. It checks that
#   - every line succeeds, in order (bash -e);
#   - the converted model is a Hugging Face directory with its tokenizer, and
#     so is the CPT's final model;
#   - eval prints every policy before -> after with the paired ratio, and
#     writes eval.json with two models;
#   - transformers opens the CPT model and generates text after the prompt.
# A README edit that breaks a line, or a change of kvcpt that breaks the
# recipe, fails here. Skips when the GGUF or transformers is missing.
. "$(dirname "$0")/../lib.sh" || exit 1
py=third_party/venv/bin/python
gguf=third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$gguf" ] || { echo "skip - README recipe: $gguf is missing (make setup)"; exit 0; }
python_has "$py" transformers torch || { echo "skip - README recipe: $py lacks transformers or torch (make setup)"; exit 0; }
export OMP_NUM_THREADS=2 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TQDM_DISABLE=1

# the block: from the marker's code fence to its closing fence
awk '/<!-- recipe: your own model/ {on = 1; next} on && /^```sh/ {inside = 1; next} inside && /^```/ {exit} inside' \
    README.md >"$tmp/recipe.txt"
n=$(grep -c . "$tmp/recipe.txt")
grep -q '^\./kvcpt train ' "$tmp/recipe.txt" && [ "$n" -ge 5 ] || { fail "README recipe" "no recipe block found ($n lines)"; exit 0; }
mkdir -p "$tmp/texts"
for f in docs/model.md docs/optim.md docs/data.md docs/sharding.md; do cp "$f" "$tmp/texts/$(basename "$f" .md).txt"; done
# runs/my -> $tmp/my, my-texts/ -> $tmp/texts/, and 2 CPT steps
sed -e "s#runs/my#$tmp/my#g" -e "s#my-texts/#$tmp/texts/#g" -e '/^\.\/kvcpt train /s/$/ --set steps=2/' \
    "$tmp/recipe.txt" >"$tmp/recipe.sh"
if bash -e "$tmp/recipe.sh" >"$tmp/out" 2>"$tmp/err"; then
    ok "README recipe: its $n lines run in order"
else
    fail "README recipe" "$(tail -3 "$tmp/err")"; exit 0
fi
for d in "$tmp/my/model" "$tmp/my/cpt/model"; do
    [ -s "$d/config.json" ] && [ -s "$d/model.safetensors" ] && [ -s "$d/tokenizer.json" ] \
        && ok "README recipe: ${d#"$tmp"/} is a Hugging Face directory with its tokenizer" \
        || fail "README recipe: ${d#"$tmp"/}" "$(ls "$d" 2>&1 | tr '\n' ' ')"
done
rows=$(grep -cE '^(full|streaming|h2o|snapkv|tova|refreshkv|restkv|kvec) .*\| [0-9.]+ -> [0-9.]+ x[0-9.]+ \[' "$tmp/out")
models=$(/usr/bin/python3 -c "import json,sys;print(len({r['model'] for r in json.load(open(sys.argv[1]))['results']}))" \
    "$tmp/my/eval/eval.json" 2>&1)
[ "$rows" -ge 8 ] && [ "$models" = 2 ] && ok "README recipe: eval prints $rows policies before -> after with the paired ratio" \
    || fail "README recipe: eval" "$rows before -> after rows, models in eval.json: $models"
gen=$(grep '^The capital of France is' "$tmp/out" | head -1)
[ ${#gen} -gt 30 ] && ok "README recipe: transformers generates from the CPT model ('${gen:0:60}')" \
    || fail "README recipe: generation" "'$gen' $(tail -2 "$tmp/err")"
