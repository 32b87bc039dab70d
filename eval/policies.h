#ifndef KVCPT_POLICIES_H
#define KVCPT_POLICIES_H
/* Constructors of the policies in the registry (one file each). */
#include "policy.h"
void policy_full_create(Policy *p);      /* eval/policy_full.c */
void policy_streaming_create(Policy *p); /* eval/policy_streaming.c */
void policy_snapkv_create(Policy *p);    /* eval/policy_snapkv.c */
void policy_refreshkv_create(Policy *p); /* eval/policy_refreshkv.c */
#endif
