/* Which OpenBLAS core kvcpt runs on (kernels/blas_core.h): the CPU's
 * instruction set and the core OpenBLAS picked in, the core to set out;
 * a user's OPENBLAS_CORETYPE always kept. Then the running program's own
 * answer, which the suite's other tests run under. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/blas_core.h"
#include "../testlib.h"

static void choice(CpuIsa cpu, const char *library, const char *user, const char *want) {
    const char *got = blas_core_choose(cpu, library, user);
    char name[160];
    snprintf(name, sizeof name, "CPU %s, OpenBLAS picked %s, OPENBLAS_CORETYPE %s -> %s", cpu_isa_name(cpu),
             library ? library : "(nothing)", user ? user : "(unset)", want ? want : "keep");
    int ok = (!got && !want) || (got && want && strcmp(got, want) == 0);
    tl_result(ok, name, "got %s", got ? got : "keep");
}

int main(void) {
    /* the reviewer's VM: an AVX-512 Xeon whose model OpenBLAS 0.3.21 does not know */
    choice(CPU_ISA_AVX512, "Prescott", NULL, "SkylakeX");
    choice(CPU_ISA_AVX512, "Core2", NULL, "SkylakeX");
    choice(CPU_ISA_AVX512, "Sandybridge", NULL, "SkylakeX");
    choice(CPU_ISA_AVX512, "Haswell", NULL, "SkylakeX");
    choice(CPU_ISA_AVX2, "Prescott", NULL, "Haswell");
    choice(CPU_ISA_AVX2, "Nehalem", NULL, "Haswell");
    choice(CPU_ISA_AVX2, "Sandybridge", NULL, "Haswell");
    choice(CPU_ISA_AVX, "Prescott", NULL, "Sandybridge");
    choice(CPU_ISA_AVX, "unknown-name", NULL, "Sandybridge");
    choice(CPU_ISA_AVX512, NULL, NULL, "SkylakeX");
    /* a core at or above the CPU's level stands */
    choice(CPU_ISA_AVX512, "SkylakeX", NULL, NULL);
    choice(CPU_ISA_AVX512, "Cooperlake", NULL, NULL);
    choice(CPU_ISA_AVX512, "SapphireRapids", NULL, NULL);
    choice(CPU_ISA_AVX2, "Haswell", NULL, NULL);
    choice(CPU_ISA_AVX2, "Zen", NULL, NULL);
    choice(CPU_ISA_AVX2, "SkylakeX", NULL, NULL);
    choice(CPU_ISA_AVX, "Sandybridge", NULL, NULL);
    choice(CPU_ISA_SSE, "Prescott", NULL, NULL); /* nothing better to run */
    /* a value the user set is kept, whatever it is */
    choice(CPU_ISA_AVX512, "Prescott", "Prescott", NULL);
    choice(CPU_ISA_AVX512, "Haswell", "Haswell", NULL);
    choice(CPU_ISA_AVX2, "Prescott", "Zen", NULL);
    choice(CPU_ISA_AVX512, "Prescott", "", "SkylakeX"); /* set but empty: OpenBLAS ignores it too */

    tl_result(blas_core_isa("sandybridge") == CPU_ISA_AVX && blas_core_isa("HASWELL") == CPU_ISA_AVX2,
              "core names compare without case (OpenBLAS prints Sandybridge, users write SandyBridge)", "");

    /* the running program: the core it reports is the one the variable
     * named, or, unset, one the CPU's instructions cover */
    const char *set = getenv("OPENBLAS_CORETYPE"), *now = blas_core_name();
    char *text = blas_core_json_text();
    const char *pick = getenv("KVCPT_OPENBLAS_PICK"); /* tests/run.sh passes kvcpt's choice on */
    if (set && set[0])
        tl_result(strcasecmp(now, set) == 0 &&
                      strstr(text, pick ? "\"chosen_by\":\"kvcpt\"" : "\"chosen_by\":\"OPENBLAS_CORETYPE\""),
                  "OPENBLAS_CORETYPE is the running core and is reported as set by the user (or kvcpt's choice)",
                  "running %s, set %s: %s", now, set, text);
    else
        tl_result(strstr(text, "\"chosen_by\":\"openblas\"") != NULL,
                  "an unset OPENBLAS_CORETYPE is reported as OpenBLAS's pick", "%s", text);
    tl_result(strstr(blas_core_summary(), now) != NULL, "the summary line names the running core", "%s",
              blas_core_summary());
    free(text);
    return tl_finish();
}
