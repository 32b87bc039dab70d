#include "model_source.h"

#include <ctype.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/util.h"
#include "gguf.h"
#include "gguf_import.h"
#include "model_file.h"

int model_source_is_gguf(const char *spec) { return gguf_file_detect(spec); }

/* org/name with the characters the hub allows, and not a path people type
 * for local files (./x, ../x, ~/x, /x). */
static int looks_like_hub_id(const char *s) {
    const char *slash = strchr(s, '/');
    if (!slash || slash == s || !slash[1] || strchr(slash + 1, '/') || s[0] == '.' || s[0] == '~') return 0;
    for (const char *p = s; *p; p++)
        if (p != slash && !isalnum((unsigned char)*p) && !strchr("._-", *p)) return 0;
    return 1;
}

/* A value naming no file: a hub id gets the advice; anything else the
 * caller's own "no such file" message. */
static void refuse_hub_id(const char *spec, const char *what) {
    struct stat st;
    if (config_is_preset(spec) || stat(spec, &st) == 0 || !looks_like_hub_id(spec)) return;
    die("%s is '%s', which is no file or directory here and reads like a Hugging Face hub id; kvcpt does not "
        "download models: download it (e.g. `huggingface-cli download %s --local-dir DIR`) and give DIR, or convert "
        "a llama.cpp GGUF file with `kvcpt convert --from FILE.gguf --to DIR` (or give FILE.gguf itself); "
        "`make setup` installs SmolLM2-135M as third_party/models/smollm2-135m",
        what, spec, spec);
}

void model_source_config(DecoderConfig *c, const char *spec, const char *what) {
    if (model_source_is_gguf(spec)) {
        gguf_read_config(spec, c);
        return;
    }
    refuse_hub_id(spec, what);
    struct stat st;
    if (!config_is_preset(spec) && stat(spec, &st) != 0)
        die("%s is '%s', which is no file or directory here, and no preset has that name (presets: %s)", what, spec,
            config_preset_names());
    config_load(c, spec);
}

void model_source_load_fp32(const char *spec, const DecoderConfig *cfg, const ParamLayout *pl, float *params) {
    if (model_source_is_gguf(spec)) gguf_load_fp32(spec, cfg, pl, params);
    else model_file_load_fp32(spec, cfg, pl, params);
}

void model_source_tokenizer_path(const char *spec, const char *what, char *path, size_t n) {
    if (model_source_is_gguf(spec))
        die("%s is the GGUF file '%s'; this command reads a tokenizer.json: `kvcpt convert --from %s --to DIR` "
            "writes the model with one, then give DIR",
            what, spec, spec);
    if (config_is_preset(spec))
        die("%s is the preset '%s', which has no tokenizer: give a model directory holding tokenizer.json", what, spec);
    refuse_hub_id(spec, what);
    struct stat st;
    if (stat(spec, &st) != 0 || !S_ISDIR(st.st_mode))
        die("%s is '%s', which is not a model directory (one holding config.json and tokenizer.json)", what, spec);
    path_fmt(path, n, "%s/tokenizer.json", spec);
    if (file_size(path) < 0)
        die("%s '%s' holds no tokenizer.json; give the tokenizer with --tokenizer, or copy the model's tokenizer "
            "files into it",
            what, spec);
}
