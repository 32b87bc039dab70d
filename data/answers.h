#ifndef KVCPT_ANSWERS_H
#define KVCPT_ANSWERS_H
/* Which targets of a synthetic recall sequence can be predicted, and how.
 *
 * A dataset whose manifest carries "answers" (kvcpt prepare --synthetic mqar)
 * is built from records "marker v1 .. vN": markers come from a fixed id range
 * and are distinct within the record list, so a marker seen for the second
 * time asks for the values of its first record. A target is
 *   ANSWER_FIRST  the first value after a repeated marker: predicting it
 *                 needs a jump to that marker's record (a content lookup);
 *   ANSWER_REST   a later value of a repeated record: the lookup continues
 *                 from the previous value;
 *   ANSWER_NONE   anything else (markers, values of a first occurrence,
 *                 BOS): random, so no model can predict it.
 * The trainer can put the loss on answers only (loss_on=answers); eval
 * reports PPL and top-1 accuracy per class and per decode step. */
#include <stdint.h>

typedef enum { ANSWER_NONE = 0, ANSWER_FIRST = 1, ANSWER_REST = 2, ANSWER_CLASSES = 3 } AnswerClass;

typedef struct {
    int present;        /* 0: the dataset defines no answers */
    uint32_t marker_lo; /* markers are ids [marker_lo, marker_hi) */
    uint32_t marker_hi;
    int64_t values;     /* value tokens after each marker */
} AnswerRule;

struct json_t;
/* From the manifest's "answers" object (absent: present = 0); dies naming
 * the manifest and the bad field. */
AnswerRule answer_rule_from_json(const struct json_t *answers, const char *mpath);
struct json_t *answer_rule_to_json(const AnswerRule *r);
/* cls[t] = class of tok[t] as a prediction target, t in [0, n); the
 * sequence is read from tok[0], so a record that began before it counts as
 * a first occurrence. */
void answer_classify(const AnswerRule *r, const uint32_t *tok, int64_t n, uint8_t *cls);
/* Next-token targets of a sample of T + 1 tokens: targets[i] = sample[i+1]
 * where that token is an answer, -1 (no loss) elsewhere; cls: T + 1 bytes
 * of scratch. */
void answer_targets(const AnswerRule *r, const uint32_t *sample, int64_t T, uint8_t *cls, int32_t *targets);
const char *answer_class_name(AnswerClass c);
#endif
