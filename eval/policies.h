#ifndef KVCPT_POLICIES_H
#define KVCPT_POLICIES_H
/* Constructors of the policies in the registry (one file each), which
 * eval/policy.c's registry calls. Declared over the incomplete type so
 * that this header needs nothing of eval/policy.h: the policies include
 * policy.h themselves, and policy.c and its policies never include each
 * other. */
typedef struct Policy Policy;
void policy_full_create(Policy *p);      /* eval/policy_full.c */
void policy_streaming_create(Policy *p); /* eval/policy_streaming.c */
void policy_snapkv_create(Policy *p);    /* eval/policy_snapkv.c */
void policy_refreshkv_create(Policy *p); /* eval/policy_refreshkv.c */
void policy_h2o_create(Policy *p);       /* eval/policy_h2o.c */
void policy_tova_create(Policy *p);      /* eval/policy_tova.c */
void policy_restkv_create(Policy *p);    /* eval/policy_restkv.c */
void policy_kvec_create(Policy *p);      /* eval/policy_kvec.c */
/* eval/policy_once.c: p (already created) chooses at the first decode step
 * only; every later step reads that choice plus every token decoded since
 * (opt.once: how kvpress compresses once after the prefill). */
void policy_once_wrap(Policy *p);
#endif
