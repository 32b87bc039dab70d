/* `kvcpt bench attention`: time of kvcpt's CUDA attention kernels (the
 * RefreshKV selection, forward, backward; the fp32 engine's and the bf16
 * engine's on bf16 inputs, tensor-core, CUDA-core or cuDNN as KVCPT_ATTN or
 * --attn chooses: model/attn_impl.h; cuDNN's fused SDPA beside them where
 * the build has it) at one layer's shape,
 * by default Llama-3.1-8B's at the CPT length, beside PyTorch's
 * scaled_dot_product_attention on the same shape in one run
 * (scripts/bench_attention_torch.py, bf16, plain causal: SDPA has no
 * RefreshKV mask that keeps its fused kernels), with the ratio of the bf16
 * kernels' TFLOP/s to SDPA's. Figures only; nothing is asserted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/backend.h"
#include "../common/options.h"
#include "../common/subprocess.h"
#include "../common/util.h"
#include "bench.h"
#include "bench_backend.h"

/* Runs the SDPA peer on the same shape (bf16, causal); fills *fwd_ms and
 * *bwd_ms, or why it has none; *backends (heap, the caller frees it) the
 * peer's word on which SDPA backend ran and each backend's times, as
 * JSON members to print after a comma, or NULL when it gave none. */
static int run_peer(const BenchAttn *a, double *fwd_ms, double *bwd_ms, char *torch_version, size_t vcap, char *why,
                    size_t why_cap, char **backends) {
    *backends = NULL;
    char script[4200], log_path[] = "/tmp/kvcpt_bench_attention_log_XXXXXX";
    exe_dir_path(script, sizeof script, "scripts/bench_attention_torch.py");
    int log_fd = mkstemp(log_path);
    KV_CHECK(log_fd >= 0, "bench attention: cannot create a temporary file %s", log_path);
    close(log_fd);
    char sb[24], st[24], sh[24], skv[24], sd[24], sr[24];
    snprintf(sb, sizeof sb, "%lld", (long long)a->batch);
    snprintf(st, sizeof st, "%lld", (long long)a->seq);
    snprintf(sh, sizeof sh, "%lld", (long long)a->heads);
    snprintf(skv, sizeof skv, "%lld", (long long)a->kv_heads);
    snprintf(sd, sizeof sd, "%lld", (long long)a->head_dim);
    snprintf(sr, sizeof sr, "%lld", (long long)a->reps);
    const char *argv[] = {a->python,    script, "--seq",   st,     "--batch", sb, "--heads", sh,  "--kv-heads", skv,
                          "--head-dim", sd,     "--dtype", "bf16", "--reps",  sr, "--json",  NULL};
    fprintf(stderr, "bench attention: running the PyTorch peer (%s %s)\n", a->python, script);
    char line[4096], err[512];
    int rc = subprocess_run(argv, NULL, log_path, line, sizeof line);
    subprocess_last_line(log_path, err, sizeof err);
    unlink(log_path);
    if (rc != 0) {
        if (rc < 0 && !subprocess_found(a->python))
            snprintf(why, why_cap, "%s not found (run 'make setup', or pass --python)", a->python);
        else snprintf(why, why_cap, "%s %s failed%s%s", a->python, script, err[0] ? ": " : "", err);
        return 0;
    }
    json_t *res = json_loads(line, 0, NULL);
    json_t *f = res ? json_object_get(res, "forward_ms") : NULL, *b = res ? json_object_get(res, "backward_ms") : NULL;
    if (!json_is_number(f) || !json_is_number(b)) {
        snprintf(why, why_cap, "%s printed no forward_ms/backward_ms", script);
        json_decref(res);
        return 0;
    }
    *fwd_ms = json_number_value(f);
    *bwd_ms = json_number_value(b);
    const char *v = json_string_value(json_object_get(res, "torch"));
    snprintf(torch_version, vcap, "%s", v ? v : "?");
    json_t *chosen = json_object_get(res, "sdpa_backend"), *each = json_object_get(res, "sdpa_backends");
    if (json_is_string(chosen) && json_is_object(each)) {
        json_t *o = json_pack("{sOsO}", "torch_sdpa_backend", chosen, "torch_sdpa_backends", each);
        char *text = json_dumps(o, JSON_COMPACT);
        /* the members alone: the object's braces dropped */
        size_t n = text ? strlen(text) : 0;
        if (n >= 2) {
            text[n - 1] = '\0';
            *backends = xstrdup(text + 1);
        }
        free(text);
        json_decref(o);
    }
    json_decref(res);
    return 1;
}

int bench_attention(int argc, char **argv) {
    BenchAttn a = {.batch = 1,
                   .seq = 8242,
                   .heads = 32,
                   .kv_heads = 8,
                   .head_dim = 128,
                   .L = 8192,
                   .K = 2048,
                   .pool = 7,
                   .evict = 0,
                   .restride = 0,
                   .reps = 3,
                   .json = 0,
                   .no_peers = 0,
                   .python = NULL};
    const char *python = NULL, *attn = NULL;
    const Option opts[] = {
        {"batch", OPT_INT, &a.batch, "B", "sequences"},
        {"seq", OPT_INT, &a.seq, "T", "tokens per sequence"},
        {"heads", OPT_INT, &a.heads, "N", "query heads"},
        {"kv-heads", OPT_INT, &a.kv_heads, "N", "key/value heads"},
        {"head-dim", OPT_INT, &a.head_dim, "D", "head dimension"},
        {"L", OPT_INT, &a.L, "N", "RefreshKV prefill length; 0 = plain causal"},
        {"K", OPT_INT, &a.K, "N", "selected keys per KV head"},
        {"pool", OPT_INT, &a.pool, "N", "selection max-pool kernel"},
        {"evict", OPT_INT, &a.evict, "0|1", "1: rows >= L keep kept + local keys <= K, as the eval's cache"},
        {"restride", OPT_INT, &a.restride, "R",
         "R > 0: full rows every R steps that re-select (the eval's --refresh-fixed R)"},
        {"reps", OPT_INT, &a.reps, "N", "timed calls per kernel, after one warm-up"},
        {"attn", OPT_STRING, &attn, "IMPL",
         "the bf16 engine's attention kernels timed in the bf16 row: mma (tensor cores; head dims 16, 32, 64, 128), "
         "cuda-core (the fp32 engine's CUDA-core kernels reading bf16) or cudnn (cuDNN's fused SDPA through its "
         "graph API; not yet validated on a GPU); absent or auto: $" DECODER_ATTN_ENV
         " when set, else mma where the head dim allows. cuDNN's row is timed beside the others wherever it runs"},
        {"no-peers", OPT_FLAG, &a.no_peers, NULL, "skip the PyTorch SDPA peer"},
        {"python", OPT_STRING, &python, "PATH",
         "the peer's interpreter; absent: $KVCPT_PYTHON, else third_party/venv/bin/python if present, else python3"},
        {"json", OPT_FLAG, &a.json, NULL, "print one JSON object"},
        {0},
    };
    if (options_parse("bench attention",
                      "Time of the CUDA attention kernels at one layer's shape (default Llama-3.1-8B at T = 8242 with "
                      "the CPT mask), beside PyTorch SDPA (bf16, causal) on the same shape and cuDNN's fused SDPA "
                      "(bf16, the same mask) where this build has cuDNN. The bf16 row runs the bf16 engine's "
                      "attention implementation, mma (tensor cores), cuda-core or cudnn (--attn, $KVCPT_ATTN), and "
                      "names it.",
                      opts, argc, argv))
        return 0;
    KV_CHECK(
        a.batch >= 1 && a.seq >= 1 && a.heads >= 1 && a.kv_heads >= 1 && a.head_dim >= 1 && a.reps >= 1 && a.L >= 0 &&
            a.K >= 1,
        "bench attention: --batch, --seq, --heads, --kv-heads, --head-dim, --reps, --K must be positive and --L >= 0");
    char default_python[4200];
    if (!python) python = getenv("KVCPT_PYTHON");
    if (!python) {
        /* the project's venv where it exists, else the machine's python3 (a
         * GPU machine with torch installed system-wide has no venv) */
        exe_dir_path(default_python, sizeof default_python, "third_party/venv/bin/python");
        python = access(default_python, X_OK) == 0 ? default_python : "python3";
    }
    a.python = python;
    a.attn =
        decoder_attn_impl_resolve(attn ? decoder_attn_impl_parse(attn, "bench attention --attn") : DECODER_ATTN_AUTO,
                                  "bench attention --attn", 1, a.head_dim);
    const BenchAttentionDevice *cu =
        bench_hooks(backend_require_accel("bench attention"), "bench attention")->attention;
    BenchAttnTimes times = {0};
    cu->kernels(&a, &times);
    if (!a.no_peers) {
        double pf = 0, pb = 0;
        char version[64] = "", why[9000] = "", *backends = NULL;
        const double pt =
            4.0 * (double)a.head_dim * (double)(a.batch * a.heads) * (double)a.seq * (double)(a.seq + 1) / 2.0;
        int have = run_peer(&a, &pf, &pb, version, sizeof version, why, sizeof why, &backends);
        if (a.json) {
            if (have) {
                printf(",\"torch_version\":\"%s\",\"torch_attn\":\"sdpa bf16 causal\",\"torch_forward_ms\":%.4f,"
                       "\"torch_backward_ms\":%.4f,\"torch_forward_tflops\":%.2f,\"torch_backward_tflops\":%.2f",
                       version, pf, pb, pt / pf / 1e9, 2.5 * pt / pb / 1e9);
                if (backends) printf(",%s", backends);
                if (times.engine_forward_tflops > 0)
                    printf(",\"bf16_vs_sdpa_forward\":%.4f,\"bf16_vs_sdpa_backward\":%.4f",
                           times.engine_forward_tflops / (pt / pf / 1e9),
                           times.engine_backward_tflops / (2.5 * pt / pb / 1e9));
            } else {
                json_t *w = json_string(why);
                char *ws = json_dumps(w, JSON_ENCODE_ANY);
                printf(",\"torch_forward_ms\":null,\"torch_why\":%s", ws);
                free(ws);
                json_decref(w);
            }
        } else if (have) {
            printf("  PyTorch %s SDPA (bf16, causal, same shape): forward %.3f ms (%.1f TFLOP/s), backward %.3f ms "
                   "(%.1f TFLOP/s)\n",
                   version, pf, pt / pf / 1e9, pb, 2.5 * pt / pb / 1e9);
            if (backends) printf("  SDPA backends (the default call's, then each alone): %s\n", backends);
            if (times.engine_forward_tflops > 0)
                printf("  bf16 kernels / SDPA (TFLOP/s, each on the pairs it visits): forward %.3f, backward %.3f\n",
                       times.engine_forward_tflops / (pt / pf / 1e9),
                       times.engine_backward_tflops / (2.5 * pt / pb / 1e9));
        } else printf("  PyTorch SDPA peer: %s; kvcpt's figures alone\n", why);
        free(backends);
    }
    if (a.json) printf("}\n");
    return 0;
}
