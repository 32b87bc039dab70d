/* The compute-backend registry (common/backend.h) with two made-up
 * accelerators registered the way backends/NAME/backend.c registers one:
 * how --device and device=auto resolve, what is refused and how it is
 * named, and that the trainer reaches a backend's engine through its entry
 * alone (train_mode_resolve + train_engine_create name no backend). */
#include <string.h>

#include "../../common/backend.h"
#include "../../train/train_config.h"
#include "../../train/train_engine.h"
#include "../../train/train_mode.h"
#include "../testlib.h"

static int fake_devices;
static int fake_count(void) { return fake_devices; }

static TrainMode created_mode = (TrainMode)-1;
static int engine_token;
static TrainEngine fake_engine_create(TrainMode mode, const TrainConfig *c, Decoder *model, Fsdp *fsdp, Comm *comm) {
    created_mode = mode;
    return (TrainEngine){.ctx = &engine_token};
}
static const TrainDevice fake_train = {.engine_create = fake_engine_create};

static const Backend absent = {.name = "absent",
                               .label = "ABSENT",
                               .kind = BACKEND_ACCEL,
                               .compiled = 0,
                               .built_for = "its compiler was not found",
                               .hint = "install its compiler"};
static const Backend fake = {.name = "fake",
                             .label = "FAKE",
                             .kind = BACKEND_ACCEL,
                             .compiled = 1,
                             .built_for = "nothing",
                             .device_count = fake_count,
                             .train = &fake_train};
/* compiled, with devices, but no training engine */
static const Backend bare = {.name = "bare",
                             .label = "BARE",
                             .kind = BACKEND_ACCEL,
                             .compiled = 1,
                             .built_for = "nothing",
                             .device_count = fake_count};

static void resolve(void *name) { backend_resolve((const char *)name); }
static void require_accel(void *who) { backend_require_accel((const char *)who); }
static void register_again(void *b) { backend_register((const Backend *)b); }
static void train_on_bare(void *arg) {
    TrainConfig c;
    train_config_defaults(&c);
    train_engine_create(&bare, TRAIN_ACCEL_FP32, &c, NULL, NULL, NULL);
}

int main(void) {
    const Backend *b = backend_resolve(NULL);
    tl_result(b->kind == BACKEND_HOST && strcmp(b->name, "cpu") == 0, "auto with no accelerator registered: the host",
              "got %s", b->name);
    tl_expect_death("no accelerator registered: a command that needs one is refused", require_accel, "bench ops",
                    "bench ops: this binary was built without an accelerator backend");

    backend_register(&absent);
    backend_register(&fake);
    backend_register(NULL); /* a stand-in that registers nothing */

    fake_devices = 0;
    tl_result(backend_resolve("auto") == backend_resolve("cpu"), "auto with no device visible: the host",
              "not the host");
    tl_expect_death("--device fake with no device visible: refused by the backend's label", resolve, "fake",
                    "--device fake: no FAKE device is visible");
    tl_expect_death("--device of a backend registered but not built: refused with its hint", resolve, "absent",
                    "--device absent: this binary was built without the ABSENT backend; hint: install its compiler");
    tl_expect_death("an unknown --device: the registered names are listed", resolve, "bogus",
                    "--device must be cpu, absent or fake (got 'bogus')");
    tl_expect_death("a command that needs an accelerator, none visible: refused", require_accel, "bench ops",
                    "bench ops: no FAKE device is visible");
    tl_expect_death("a second backend of one name: refused", register_again, (void *)&fake,
                    "a second backend named 'fake'");
    tl_result(backend_known("auto") && backend_known("cpu") && backend_known("fake") && backend_known("absent") &&
                  !backend_known("bogus"),
              "config 'device' accepts auto, cpu and the registered names, built or not", "backend_known disagrees");

    fake_devices = 2;
    tl_result(backend_resolve(NULL) == &fake, "auto with a device visible: the first built accelerator", "got %s",
              backend_resolve(NULL)->name);
    tl_result(backend_resolve("fake") == &fake && backend_resolve("cpu")->kind == BACKEND_HOST,
              "--device fake and --device cpu resolve to their entries", "wrong entry");
    tl_result(backend_require_accel("bench ops") == &fake, "a command that needs an accelerator gets the visible one",
              "wrong entry");

    /* the trainer, knowing no backend by name, runs the one config 'device' names */
    TrainConfig c;
    train_config_defaults(&c);
    snprintf(c.device, sizeof c.device, "fake");
    const Backend *be = NULL;
    TrainMode mode = train_mode_resolve(&c, 0, 1, &be);
    TrainEngine e = train_engine_create(be, mode, &c, NULL, NULL, NULL);
    tl_result(be == &fake && mode == TRAIN_ACCEL_FP32 && created_mode == TRAIN_ACCEL_FP32 && e.ctx == &engine_token,
              "device=fake: the trainer's engine comes from the fake backend's train seam",
              "backend %s, mode %d, created %d", be ? be->name : "none", (int)mode, (int)created_mode);
    char desc[160];
    train_mode_describe(mode, be, desc, sizeof desc);
    tl_result(strcmp(desc, "fake (master and optimizer sharded on the GPUs)") == 0,
              "the startup line names the backend config 'device' resolved to", "got '%s'", desc);
    snprintf(c.device, sizeof c.device, "cpu");
    tl_result(train_mode_resolve(&c, 0, 1, &be) == TRAIN_HOST && be->kind == BACKEND_HOST, "device=cpu: the host mode",
              "not the host");

    backend_register(&bare);
    tl_expect_death("an accelerator with no training engine: train refuses by its label", train_on_bare, NULL,
                    "train: the BARE backend has no training engine");
    return tl_finish();
}
