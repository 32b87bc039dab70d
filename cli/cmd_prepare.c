/* `kvcpt prepare`: text corpora -> tokenized train/dev/test shards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../checkpoints/model_source.h"
#include "../common/options.h"
#include "../common/util.h"
#include "../data/prepare.h"
#include "../data/splits.h"
#include "../data/synthetic.h"
#include "../data/tokenizer.h"
#include "commands.h"

int cmd_prepare(int argc, char **argv) {
    StringList inputs = {0};
    const char *out = NULL, *tokenizer = NULL, *model = NULL;
    int64_t min_tokens = 1, shard_tokens = (int64_t)1 << 28, threads = 0, seed = 0;
    int allow_special = 0, allow_empty = 0;
    const char *synthetic = NULL, *split = "80,10,10";
    int64_t vocab = 64, doc_tokens = 1057, query_tail = 33, docs = 400, copy_offset = 0, values = 7, markers = 0;
    const Option opts[] = {
        {"input", OPT_STRINGS, &inputs, "FILE_OR_DIR",
         "JSON Lines {\"text\": ...} (.jsonl/.json), or .txt; .zst streamed; repeatable"},
        {"out", OPT_STRING, &out, "DIR", "output: DIR/{train,dev,test}/shard_*.bin and DIR/manifest.json"},
        {"min-tokens", OPT_POSITIVE, &min_tokens, "N",
         "drop documents shorter than N tokens (with the BOS, when the tokenizer adds one; use L+S+1)"},
        {"tokenizer", OPT_STRING, &tokenizer, "PATH",
         "tokenizer.json; absent: --model's, else the one `make setup` installs"},
        {"model", OPT_STRING, &model, "DIR",
         "a model directory whose tokenizer.json to use (the model you will train or evaluate)"},
        {"threads", OPT_COUNT, &threads, "N", "tokenizer threads; 0: all cores"},
        {"shard-tokens", OPT_POSITIVE, &shard_tokens, "N", "start a new shard beyond N tokens (2^28 = 1 GiB)"},
        {"allow-special", OPT_FLAG, &allow_special, NULL, "spelled-out special tokens in the text become their ids"},
        {"split", OPT_STRING, &split, "T,D,S|none",
         "percent of the documents in train, dev and test (a 0 share is not "
         "written), or none: all in train, for a corpus too small to hold any back"},
        {"split-seed", OPT_INT, &seed, "N", "salt of the train/dev/test hash"},
        {"allow-empty", OPT_FLAG, &allow_empty, NULL, "write the dataset even when no document is kept"},
        {"synthetic", OPT_STRING, &synthetic, "TASK",
         "instead of text: generate a long-range task, recall, copy or mqar (no tokenizer)"},
        {"vocab", OPT_POSITIVE, &vocab, "N", "synthetic: vocabulary size"},
        {"doc-tokens", OPT_POSITIVE, &doc_tokens, "N", "synthetic: tokens per document, BOS included"},
        {"query-tail", OPT_COUNT, &query_tail, "N",
         "synthetic: tail tokens: recall (marker key value) queries, the copied span, or mqar's repeated records"},
        {"copy-offset", OPT_COUNT, &copy_offset, "N",
         "synthetic copy: each tail token repeats the one N back; 0: a span from a random start"},
        {"values", OPT_POSITIVE, &values, "N", "synthetic mqar: value tokens after each marker"},
        {"markers", OPT_COUNT, &markers, "N",
         "synthetic mqar: marker ids 3..N+2 (a fixed range across stages); 0: the records per document"},
        {"docs", OPT_POSITIVE, &docs, "N", "synthetic: documents over all splits"},
        {0},
    };
    if (options_parse("prepare",
                      "Tokenize text into uint32 train/dev/test shards (by a hash of each document; --split).", opts,
                      argc, argv))
        return 0;
    SplitShares shares = split_shares_parse(split, "--split");
    /* each thread holds its own encoder and output buffers: beyond a few per
     * core they only cost memory (libgomp itself failed at 100000) */
    KV_CHECK(threads >= 0 && threads <= 1024, "kvcpt prepare: --threads must be 0 (all cores) to 1024 (got %lld)",
             (long long)threads);
    if (synthetic) {
        SyntheticTask task = synthetic_task_parse(synthetic);
        KV_CHECK(out, "kvcpt prepare: --out DIR is required");
        SyntheticOptions so = {.out_dir = out,
                               .task = task,
                               .vocab = vocab,
                               .doc_tokens = doc_tokens,
                               .query_tail = query_tail,
                               .copy_offset = copy_offset,
                               .values = values,
                               .markers = markers,
                               .docs = docs,
                               .seed = (uint64_t)seed,
                               .shares = &shares};
        synthetic_write(&so);
        printf("prepare: wrote %lld synthetic %s documents of %lld tokens (vocab %lld) to %s\n", (long long)docs,
               synthetic_task_name(task), (long long)doc_tokens, (long long)vocab, out);
        return 0;
    }
    KV_CHECK(!(tokenizer && model), "kvcpt prepare: give --model (its tokenizer.json) or --tokenizer, not both");
    char *tok_path;
    if (model) {
        char path[4200];
        model_source_tokenizer_path(model, "kvcpt prepare: --model", path, sizeof path);
        tok_path = xstrdup(path);
    } else {
        tok_path = tokenizer ? xstrdup(tokenizer) : tokenizer_default_path();
    }
    PrepareOptions o = {
        .inputs = inputs.items,
        .n_inputs = inputs.count,
        .out_dir = out,
        .tokenizer_path = tok_path,
        .min_tokens = min_tokens,
        .shard_tokens = shard_tokens,
        .threads = (int)threads,
        .allow_special = allow_special,
        .split_seed = (uint64_t)seed,
        .shares = &shares,
        .allow_empty = allow_empty,
    };
    prepare_run(&o);
    free(tok_path);
    free((void *)inputs.items);
    return 0;
}
