#!/usr/bin/env bash
# The launchers (launch/*.sh, through launch/lib/env.sh) check every
# environment variable before any work: a bad value (empty, not an integer,
# out of range, an empty list item, a repeat, an unknown name, a combination
# the stages would refuse later) exits 1 naming the variable, with no Python
# traceback, no stage run and nothing created. They run here from a copy of
# launch/ beside stand-ins for kvcpt and mpirun that record their arguments
# and fail, so a launcher that passes its checks stops at its first command.
. "$(dirname "$0")/../lib.sh" || exit 1
R="$tmp/repo"
mkdir -p "$R" "$tmp/bin" "$tmp/model"
cp -r launch "$R/"
for tool in kvcpt bin/mpirun; do
    dst="$R/kvcpt"
    [ "$tool" = kvcpt ] || dst="$tmp/$tool"
    printf '#!/bin/sh\necho "%s $*" >>"%s"\nexit 1\n' "${tool#bin/}" "$tmp/calls" >"$dst" && chmod +x "$dst"
done
touch "$tmp/model/model.safetensors" "$tmp/model/tokenizer.json" "$tmp/hosts"
echo '{"max_position_embeddings": 8192}' >"$tmp/model/config.json"
clean=$(ls -A "$R")

run() { # launcher, VAR=value...: runs it in a clean environment; its stderr in $tmp/err, status in rc
    local l=$1
    shift
    rm -f "$tmp/calls" && rm -rf "$R/runs"
    (cd "$R" && env -i PATH="$tmp/bin:/usr/bin:/bin" "$@" bash "launch/$l.sh" cfg.json) >/dev/null 2>"$tmp/err" && rc=0 || rc=$?
}

refused() { # launcher, text the message must hold (it names the variable), VAR=value...
    local l=$1 want=$2
    shift 2
    run "$l" "$@"
    if [ "$rc" -ge 1 ] && [ "$rc" -le 127 ] && grep -qF -- "$l: $want" "$tmp/err" && ! grep -q Traceback "$tmp/err" &&
        [ ! -e "$tmp/calls" ] && [ "$(ls -A "$R")" = "$clean" ]; then
        ok "$l $*: refused before any work ($(head -1 "$tmp/err"))"
    else
        fail "$l $*" "exit $rc, want '$l: $want', no command run and nothing created; stderr: $(head -3 "$tmp/err"); ran: $(cat "$tmp/calls" 2>/dev/null); created: $(ls -A "$R" | tr '\n' ' ')"
    fi
}

started() { # launcher, text its first command line must hold, VAR=value...: the checks pass
    local l=$1 want=$2
    shift 2
    run "$l" "$@"
    if grep -qF -- "$want" "$tmp/calls" 2>/dev/null; then ok "$l ${*:-(defaults)}: accepted, the first command ran ($want)"
    else fail "$l ${*:-(defaults)}: accepted" "want a command with '$want'; ran: $(cat "$tmp/calls" 2>/dev/null); stderr: $(head -3 "$tmp/err")"; fi
}

# realmodel.sh: the three forms found (CONTEXTS= became the default and failed
# in prepare; CONTEXTS=,, reached a traceback in realmodel_table.py; SEEDS=,
# failed only in the summary), then each kind of bad value
refused realmodel "CONTEXTS is empty" CONTEXTS=
refused realmodel "CONTEXTS is ',,', which holds an empty item" CONTEXTS=,,
refused realmodel "SEEDS is ',', which holds an empty item" SEEDS=,
refused realmodel "CONTEXTS holds 'abc'" CONTEXTS=1024,abc
refused realmodel "CONTEXTS holds '4'" CONTEXTS=4
refused realmodel "CONTEXTS holds '08'" CONTEXTS=08
refused realmodel "CONTEXTS lists '1024' twice" CONTEXTS=1024,2048,1024
refused realmodel "CONTEXTS is '1024,', which holds an empty item" CONTEXTS=1024,
refused realmodel "S is '-1'" S=-1
refused realmodel "EVAL_DOCS is 'all'" EVAL_DOCS=all
refused realmodel "QC is '5,,10'" QC=5,,10
refused realmodel "CPT_STEPS is '-2'" CPT_STEPS=-2
refused realmodel "CPT_LR is '0'" CPT_LR=0
refused realmodel "CPT_LR is '5e-6x'" CPT_LR=5e-6x
refused realmodel "CPT_BATCH is empty" CPT_BATCH=
refused realmodel "SEEDS is empty" SEEDS=
refused realmodel "MASK_SEEDS is replaced by ARMS" MASK_SEEDS=1,2
refused realmodel "CPT_MASKS is replaced by ARMS" CPT_MASKS=evict
refused realmodel "ARMS holds 'bogus'" ARMS=mask,bogus
refused realmodel "ARMS holds 'restride0'" ARMS=mask,restride0
refused realmodel "ARMS is empty" ARMS=
refused realmodel "PICK holds 'last'" PICK=last
refused realmodel "MAX_COPY_SHARE holds '1.5'" MAX_COPY_SHARE=1.5
refused realmodel "CPT_L is '16384', not an integer in [8, 8192]" CPT_L=16384
refused realmodel "CPT_WARMUP is 'x'" CPT_WARMUP=x
refused realmodel "OUT is empty" OUT=
refused realmodel "MODEL is empty" MODEL=
refused realmodel "DEVICE holds 'gpu'" DEVICE=gpu
refused realmodel "DEVICE is 'cpu,cuda'; one of cpu, cuda" DEVICE=cpu,cuda
refused realmodel "DEVICE is empty" DEVICE=
refused realmodel "KVCPT is '$tmp/none', which is not an executable" KVCPT="$tmp/none"
started realmodel "kvcpt prepare --input ../shared/corpus --tokenizer $tmp/model/tokenizer.json --min-tokens 8243" \
    MODEL="$tmp/model"
started realmodel "--min-tokens 265" MODEL="$tmp/model" CONTEXTS=256,128 S=8 EVAL_DOCS=0 QC=5 CPT_STEPS=2 \
    ARMS=mask,causal,evict,restride10,evict+restride5 SEEDS=1,2 PICK=first MAX_COPY_SHARE=0.5 CPT_L=128 CPT_LR=1e-4

# demo.sh
refused demo "L is empty" L=
refused demo "L is 'abc'" L=abc
refused demo "S is '0'" S=0
refused demo "K is '2000', not an integer in [1, 1024]" K=2000
refused demo "SEED is '-1'" SEED=-1
refused demo "VALUES is 5; VALUES + 1 must divide 64" VALUES=5
refused demo "MARKERS is 10; stage 3 needs 24" MARKERS=10
refused demo "VOCAB is 100; MARKERS (128) marker ids and 2 value ids need VOCAB >= 133" VOCAB=100
refused demo "LONG_TAIL is 7; L + S - LONG_TAIL must be a multiple of VALUES + 1 = 8" LONG_TAIL=7
refused demo "L is 8; with VALUES 7" L=8
refused demo "STEPS_3 is '1e2'" STEPS_3=1e2
refused demo "CPT_LR is empty" CPT_LR=
refused demo "EVAL_DOCS is '-1'" EVAL_DOCS=-1
started demo "kvcpt prepare --synthetic mqar --vocab 256 --markers 128 --values 1 --doc-tokens 33 --query-tail 24"
started demo "--vocab 64 --markers 48 --values 1" L=256 S=16 VALUES=3 MARKERS=48 VOCAB=64 SEED=2 CPT_LR=2e-5

# realtext.sh and the training launchers
refused realtext "CONTEXTS is ',,', which holds an empty item" CONTEXTS=,,
refused realtext "NP is '0'" NP=0
refused realtext "BATCH is 6; each of the NP = 4 ranks" BATCH=6 NP=4
refused realtext "WARMUP is 'x'" WARMUP=x
refused realtext "K is '9000'" K=9000
started realtext "kvcpt prepare --input ../shared/corpus --min-tokens 8243"
refused train-1node "NP is '0'" NP=0
refused train-1node "NP is empty" NP=
started train-1node "-np 3 --bind-to none ./kvcpt train --config cfg.json" NP=3
refused train-multinode "HOSTFILE is not set" NP=4
refused train-multinode "HOSTFILE is '$tmp/none', which is not a file" HOSTFILE="$tmp/none" NP=4
refused train-multinode "NP is not set" HOSTFILE="$tmp/hosts"
refused train-multinode "PER_NODE is '0'" HOSTFILE="$tmp/hosts" NP=4 PER_NODE=0
started train-multinode "mpirun --hostfile $tmp/hosts -np 16 --map-by ppr:8:node" HOSTFILE="$tmp/hosts" NP=16
