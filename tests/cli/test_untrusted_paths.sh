#!/usr/bin/env bash
# Output paths are data, never code: an `out` directory whose name carries a
# shell quote break-out or a gnuplot one (train's loss.png, eval's eval.png)
# runs no command, and the PNGs are still rendered inside that directory.
. "$(dirname "$0")/../lib.sh" || exit 1
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 40 --out "$tmp/data" >/dev/null
have_gnuplot=0; command -v gnuplot >/dev/null && have_gnuplot=1

check() { # name out-dir marker png
    local name=$1 dir=$2 marker=$3 png=$4
    if [ -e "$marker" ]; then fail "$name" "a command in the path ran ($marker exists)"; return; fi
    if [ "$have_gnuplot" = 1 ] && [ ! -s "$dir/$png" ]; then fail "$name" "$dir/$png was not rendered"; return; fi
    ok "$name"
}

for kind in shell gnuplot; do
    if [ $kind = shell ]; then tr="$tmp/t';touch $tmp/PWNED_train;'"; ev="$tmp/e';touch $tmp/PWNED_eval;'x"
    else tr="$tmp/t'; system 'touch $tmp/PWNED_train'; '"; ev="$tmp/e'; system 'touch $tmp/PWNED_eval'; 'x"; fi
    $K train --set model=tiny --set data="$tmp/data" --set out="$tr" --set L=48 --set S=8 --set K=6 --set steps=2 --set warmup_steps=1 \
        --set global_batch=2 --set micro_batch=2 >"$tmp/train.log" 2>&1 || { fail "train, $kind quote in out" "$(tail -3 "$tmp/train.log")"; continue; }
    check "train with a $kind quote break-out in out runs nothing, plots inside it" "$tr" "$tmp/PWNED_train" loss.png
    $K eval --model "$tr/model" --data "$tmp/data" --L 48 --S 8 --max-docs 2 --policies full,streaming \
        --out "$ev" >"$tmp/eval.log" 2>&1 || { fail "eval, $kind quote in out" "$(tail -3 "$tmp/eval.log")"; continue; }
    check "eval with a $kind quote break-out in out runs nothing, plots inside it" "$ev" "$tmp/PWNED_eval" eval.png
    rm -f "$tmp/PWNED_train" "$tmp/PWNED_eval"
done

# a symbolic link planted where the program writes (a temporary, the log, the
# run's config copy) is refused, and the file it points to is left alone
planted() { # name link-path command...
    local name=$1 link=$2; shift 2
    mkdir -p "$(dirname "$link")" && echo "precious" >"$tmp/victim" && ln -sf "$tmp/victim" "$link"
    if "$@" >"$tmp/out" 2>"$tmp/err"; then fail "$name" "exited 0"
    elif [ "$(cat "$tmp/victim")" != "precious" ]; then fail "$name" "the link's target was written"
    elif grep -q "symbolic link" "$tmp/err"; then ok "$name"
    else fail "$name" "$(tail -2 "$tmp/err")"; fi
    rm -f "$link"
}
run_args=(--set model=tiny --set data="$tmp/data" --set L=48 --set S=8 --set K=6 --set steps=2 --set warmup_steps=1
          --set global_batch=2 --set micro_batch=2)
# --resume (no checkpoint: it starts fresh): a fresh run would refuse the
# planted file earlier, as an earlier run's, and never reach the write
planted "symlink at the run's log.jsonl refused" "$tmp/s1/log.jsonl" $K train "${run_args[@]}" --set out="$tmp/s1" --resume
planted "symlink at the run's train_config.json refused" "$tmp/s2/train_config.json" $K train "${run_args[@]}" --set out="$tmp/s2" --resume
$K train "${run_args[@]}" --set out="$tmp/s0" >/dev/null 2>&1
planted "symlink at eval.json.tmp refused" "$tmp/s3/eval.json.tmp" $K eval --model "$tmp/s0/model" --data "$tmp/data" \
    --L 48 --S 8 --max-docs 2 --policies full --out "$tmp/s3"
planted "symlink at a shard temporary of prepare refused" "$tmp/s4/train/shard_000000.bin.tmp" \
    $K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 20 --out "$tmp/s4"

# a hard link planted where the program writes a new file (a temporary, the
# run's config copy) is replaced, never written through: the file it shares
# its data with keeps its contents, and the run succeeds
hardlinked() { # name link-path command...
    local name=$1 link=$2; shift 2
    mkdir -p "$(dirname "$link")" && echo "precious" >"$tmp/hvictim" && ln -f "$tmp/hvictim" "$link"
    if ! "$@" >"$tmp/out" 2>"$tmp/err"; then fail "$name" "$(tail -2 "$tmp/err")"
    elif [ "$(cat "$tmp/hvictim")" != "precious" ]; then fail "$name" "the linked file was written through"
    else ok "$name"; fi
}
hardlinked "hard link at eval.json.tmp: replaced, the linked file untouched" "$tmp/h1/eval.json.tmp" \
    $K eval --model "$tmp/s0/model" --data "$tmp/data" --L 48 --S 8 --max-docs 2 --policies full --out "$tmp/h1"
hardlinked "hard link at the run's train_config.json: replaced, the linked file untouched" "$tmp/h2/train_config.json" \
    $K train "${run_args[@]}" --set out="$tmp/h2" --resume

# one trainer per run directory: while another holds out/train.lock (here the
# shell's flock, the same advisory lock), a second trainer refuses, naming it
mkdir -p "$tmp/busy"
if command -v flock >/dev/null; then
    (
        flock -n 9 || exit 3
        echo 424242 >&9
        $K train "${run_args[@]}" --set out="$tmp/busy" >"$tmp/out" 2>"$tmp/err"
        echo $? >"$tmp/rc"
    ) 9>"$tmp/busy/train.lock"
    if [ "$(cat "$tmp/rc" 2>/dev/null)" = 0 ]; then fail "second trainer on a busy run directory" "exited 0"
    elif grep -q "in use by another kvcpt train (pid 424242)" "$tmp/err"; then ok "a second trainer on a locked run directory refuses, naming the owner"
    else fail "second trainer on a busy run directory" "$(tail -2 "$tmp/err")"; fi
    $K train "${run_args[@]}" --set out="$tmp/busy" >/dev/null 2>&1 && ok "the lock is released with its holder: the next trainer runs" \
        || fail "lock release" "train failed after the holder ended"
else
    echo "skip - run directory lock: no flock command (util-linux)"
fi
