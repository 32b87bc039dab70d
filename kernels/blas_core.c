#include "blas_core.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../common/util.h"

/* Set beside OPENBLAS_CORETYPE by the restart: the core the library had
 * picked, so that the restarted program can say why it runs on another. */
#define PICK_VAR "KVCPT_OPENBLAS_PICK"

CpuIsa cpu_isa_detect(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    /* OpenBLAS's SkylakeX kernels use F, BW, VL and DQ; the checks include
     * the OS's saving of the vector state (XCR0) */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq"))
        return CPU_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CPU_ISA_AVX2;
    if (__builtin_cpu_supports("avx")) return CPU_ISA_AVX;
#endif
    return CPU_ISA_SSE;
}

const char *cpu_isa_name(CpuIsa isa) {
    static const char *names[] = {"sse", "avx", "avx2", "avx512"};
    return isa >= CPU_ISA_SSE && isa <= CPU_ISA_AVX512 ? names[isa] : "unknown";
}

CpuIsa blas_core_isa(const char *core) {
    /* OpenBLAS's x86-64 core names (driver/others/dynamic.c) by the widest
     * instructions their kernels use; the rest are SSE-level */
    static const struct {
        const char *name;
        CpuIsa isa;
    } cores[] = {
        {"SkylakeX", CPU_ISA_AVX512}, {"Cooperlake", CPU_ISA_AVX512}, {"SapphireRapids", CPU_ISA_AVX512},
        {"Haswell", CPU_ISA_AVX2},    {"Zen", CPU_ISA_AVX2},          {"Excavator", CPU_ISA_AVX2},
        {"Sandybridge", CPU_ISA_AVX}, {"Bulldozer", CPU_ISA_AVX},     {"Piledriver", CPU_ISA_AVX},
        {"Steamroller", CPU_ISA_AVX},
    };
    if (!core) return CPU_ISA_SSE;
    for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++)
        if (strcasecmp(core, cores[i].name) == 0) return cores[i].isa;
    return CPU_ISA_SSE;
}

const char *blas_core_choose(CpuIsa cpu, const char *library_core, const char *user_coretype) {
    if (user_coretype && user_coretype[0]) return NULL;
    if (blas_core_isa(library_core) >= cpu) return NULL;
    switch (cpu) {
        case CPU_ISA_AVX512: return "SkylakeX";
        case CPU_ISA_AVX2: return "Haswell";
        case CPU_ISA_AVX: return "Sandybridge";
        default: return NULL;
    }
}

int blas_core_restart_vars(RestartVar vars[2]) {
    const char *library_core = openblas_get_corename();
    const char *core = blas_core_choose(cpu_isa_detect(), library_core, getenv("OPENBLAS_CORETYPE"));
    if (!core) return 0;
    /* a library built for one core (no DYNAMIC_ARCH) ignores the variable;
     * the restarted program then reports the core it has */
    vars[0] = (RestartVar){"OPENBLAS_CORETYPE", core, 0};
    vars[1] = (RestartVar){PICK_VAR, library_core ? library_core : "?", 0};
    return 2;
}

const char *blas_core_name(void) { return openblas_get_corename(); }

/* Who chose the running core: the user's OPENBLAS_CORETYPE, the restart
 * (the variable equals what it set and the library's pick is recorded), or
 * the library. */
static const char *chosen_by(const char **library_pick) {
    const char *set = getenv("OPENBLAS_CORETYPE"), *pick = getenv(PICK_VAR);
    *library_pick = NULL;
    if (!set || !set[0]) return "openblas";
    if (pick && pick[0] && blas_core_choose(cpu_isa_detect(), pick, NULL) &&
        strcasecmp(blas_core_choose(cpu_isa_detect(), pick, NULL), set) == 0) {
        *library_pick = pick;
        return "kvcpt";
    }
    return "OPENBLAS_CORETYPE";
}

const char *blas_core_summary(void) {
    static char line[256];
    const char *pick, *by = chosen_by(&pick), *core = openblas_get_corename();
    const char *isa = cpu_isa_name(cpu_isa_detect());
    if (strcmp(by, "kvcpt") == 0)
        snprintf(line, sizeof line, "OpenBLAS core %s, chosen by kvcpt: OpenBLAS picked %s on a CPU with %s", core,
                 pick, isa);
    else if (strcmp(by, "OPENBLAS_CORETYPE") == 0)
        snprintf(line, sizeof line, "OpenBLAS core %s, set by OPENBLAS_CORETYPE=%s (CPU: %s)", core,
                 getenv("OPENBLAS_CORETYPE"), isa);
    else snprintf(line, sizeof line, "OpenBLAS core %s, OpenBLAS's own pick (CPU: %s)", core, isa);
    return line;
}

/* /proc/cpuinfo's first "model name" ("AMD EPYC"), or "unknown". */
static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            const char *v = strchr(line, ':') + 1;
            while (*v == ' ' || *v == '\t') v++;
            snprintf(out, n, "%.*s", (int)strcspn(v, "\n"), v);
            break;
        }
    fclose(f);
}

json_t *blas_core_json(void) {
    const char *pick, *by = chosen_by(&pick);
    char model[256];
    cpu_model(model, sizeof model);
    json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:I}", "core", openblas_get_corename(), "chosen_by", by, "cpu_isa",
                          cpu_isa_name(cpu_isa_detect()), "cpu_model", model, "logical_cpus",
                          (json_int_t)sysconf(_SC_NPROCESSORS_ONLN));
    if (j && pick && json_object_set_new(j, "library_pick", json_string(pick)) != 0) {
        json_decref(j);
        j = NULL;
    }
    if (!j) die("blas: cannot describe the BLAS core");
    return j;
}

char *blas_core_json_text(void) {
    json_t *j = blas_core_json();
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!text) die("blas: cannot describe the BLAS core");
    return text;
}
