#ifndef KVCPT_DATASET_DIR_H
#define KVCPT_DATASET_DIR_H
/* Where `kvcpt prepare` builds a dataset, and how the new one replaces the
 * previous one in OUT only once it is complete.
 *
 * The dataset is written into OUT.tmp-PID, beside OUT (same parent, after
 * resolving links, so every rename stays on one file system). An error
 * before the end removes that directory and leaves OUT as it was. At the
 * end the dataset entries (manifest.json, train/, dev/, test/; nothing
 * else in OUT is touched) are swapped: OUT/manifest.json, then the split
 * directories, move to OUT.old-PID; the new split directories move in;
 * the new manifest.json moves in last; OUT.old-PID is removed.
 *
 * Killed during the swap, OUT has no manifest.json, so no reader takes it
 * for a dataset; the previous dataset is whole in OUT.old-PID (move its
 * entries back to keep it), the new one is in OUT.tmp-PID and OUT. Such
 * leftovers, and an OUT.tmp-PID of a run killed while it built, belong to
 * a process that no longer exists: the next prepare into OUT removes them. */

typedef struct {
    char *out;  /* OUT, links resolved */
    char *tmp;  /* OUT.tmp-PID: the dataset being built */
    char *old;  /* OUT.old-PID: the previous dataset during the swap */
} DatasetDir;

/* Creates OUT if needed, removes dead runs' leftovers beside it and creates
 * the empty build directory. */
void dataset_dir_begin(DatasetDir *d, const char *out_dir);
/* Swaps the complete dataset in d->tmp into d->out (see above). */
void dataset_dir_publish(DatasetDir *d);
void dataset_dir_free(DatasetDir *d);

#endif
