#ifndef KVCPT_EVAL_PROVENANCE_H
#define KVCPT_EVAL_PROVENANCE_H
/* How an eval.json was made, as fields a script can read back and run
 * again (scripts/eval_rerun.py): the command line and working directory,
 * the code, the data (directory, split, manifest and tokenizer SHA-256),
 * each model's files with their SHA-256, and the parameters of every
 * policy variant. */
#include <jansson.h>
#include <stdint.h>

#include "policy.h"

/* The parts known before any model is loaded; models and timing are added
 * with the calls below. argv is the eval command's (argv[0] = "eval"). */
json_t *eval_provenance_new(int argc, char **argv, const char *data, const char *split);
/* A model: its path and, for each file its weights or config are read
 * from (config.json, *.safetensors and their index, model.kvcpt, or the
 * GGUF file itself), name, bytes and SHA-256 of the whole file. */
void eval_provenance_add_model(json_t *prov, const char *spec);
/* One policy variant: registry name and every PolicyOptions field (the
 * budget is the run's K, per context in each result). */
void eval_provenance_add_policy(json_t *prov, const char *name, const PolicyOptions *o);
#endif
