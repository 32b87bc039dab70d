#ifndef KVCPT_EVAL_DOC_PICK_H
#define KVCPT_EVAL_DOC_PICK_H
/* Which documents of a split `kvcpt eval` scores at a context, in which
 * order, and what each one's scored window is made of.
 *
 * A document is eligible at context L with S scored tokens when it has at
 * least L + S + 1 tokens and, with a copy-share limit, when at most that
 * share of its S scored tokens copy an earlier 8-token sequence of the
 * window (doc_copy_share). The pick takes eligible documents until it has
 * the number wanted:
 *   first       in the split's order (the split holds its inputs one after
 *               another, so the first input fills the pick before the next);
 *   interleave  round robin over the inputs recorded in the manifest
 *               (prepare's kept_per_split), each input's documents in their
 *               order: one eligible document of every input in turn, an
 *               input with none left passed over, so every input that has
 *               eligible documents is in the pick, in equal numbers until it
 *               runs out. */
#include <stdint.h>

#include "../data/data_split.h"

enum { DOC_PICK_FIRST, DOC_PICK_INTERLEAVE };
extern const char *const doc_pick_names[2];

/* The n-grams a copy is counted over. */
#define DOC_COPY_NGRAM 8

/* The inputs of one split, from its manifest. A split is read in parts:
 * one, or for `--split all` each split the data has (train, dev, test, as
 * data_split_open concatenates them); in part k input i holds the documents
 * first[i * n_parts + k] .. that + count[i * n_parts + k] - 1. */
typedef struct {
    int n;                  /* inputs */
    int n_parts;            /* 1, or the splits "all" spans */
    char **path;            /* (n) as the manifest records it */
    int64_t *first, *count; /* (n, n_parts) */
} DocSources;

/* Reads the manifest of data_dir for split; returns 0 (s->n = 0) when the
 * manifest records no kept_per_split (prepared before it existed); dies on
 * a malformed entry or counts that do not add up to the split's, naming the
 * manifest and the input. */
int doc_sources_load(DocSources *s, const char *data_dir, const char *split, int64_t split_docs);
void doc_sources_free(DocSources *s);
/* The input index of document d, or -1 when the sources are unknown. */
int doc_source_of(const DocSources *s, int64_t d);

/* The share of positions t in [start, end) of tok whose DOC_COPY_NGRAM
 * tokens ending at t (tok[t-7..t]) also end at some earlier position j < t
 * of tok: a token the window's own past predicts by copying. Positions
 * before the first whole n-gram count as not copied. */
double doc_copy_share(const uint32_t *tok, int64_t start, int64_t end);

typedef struct {
    int64_t n;              /* documents picked */
    int64_t *doc;           /* (n) their indices in the split, in pick order */
    double *copy_share;     /* (n) each one's copy share at this context */
    int64_t skipped_short;  /* documents passed over as shorter than L + S + 1 */
    int64_t skipped_copy;   /* documents passed over for a copy share above the limit */
} DocPick;

/* Picks up to want documents (see above) for context L and S scored tokens.
 * max_copy in [0, 1]; 1 passes every document. Interleaving needs sources
 * (s->n > 0). Each candidate's first L + S tokens are read for its copy share. */
void doc_pick(DocPick *out, const DataSplit *split, const DocSources *s, int how, int64_t L, int64_t S, int64_t want,
              double max_copy);
void doc_pick_free(DocPick *p);
#endif
