#ifndef KVCPT_CKPT_H
#define KVCPT_CKPT_H
/* Native training checkpoints: <run_dir>/ckpt/step_00000123/ holds one file
 * per rank (rank_00000.bin) and manifest.json. A rank file is a table of
 * named opaque sections ("params" = the rank's slice of the flat fp32
 * buffer, "optim" = the optimizer's own bytes, "data_pos", "rng", ...),
 * each with its own checksum. The manifest is written last, after every
 * rank file exists; a directory without one is incomplete and ignored.
 * Every file is written to a temporary name, synced, then renamed.
 *
 * Rank file (little-endian): 0 "KVCPTCKP", 8 u32 version (1), 12 u32
 * section count, 16 i64 step, 24 u32 rank, 28 u32 world size, 32 u64 table
 * offset; section bytes 64-byte aligned; at the table offset, per section:
 * name[32] NUL-padded, u64 offset, u64 bytes, u64 checksum; the table ends
 * the file. The manifest's per-file checksum covers header and table (which
 * carry the section checksums). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../model/params.h"
#include "mapped_file.h"

#define CKPT_MAX_SECTIONS 64
#define CKPT_NAME_LEN 32

typedef struct {
    char name[CKPT_NAME_LEN];
    int64_t offset, bytes;
    uint64_t checksum;
} CkptSection;

typedef struct {
    char file[32]; /* rank_00000.bin */
    int rank;
    int64_t bytes;
    uint64_t checksum;
} CkptFileInfo;

typedef struct {
    FILE *f;
    char dir[4096], path[4200], tmp[4300];
    int64_t step;
    int rank, world;
    CkptSection s[CKPT_MAX_SECTIONS];
    int n;
    int64_t pos;
} CkptWriter;

/* 64-bit checksum of a byte range (not cryptographic; detects corruption). */
uint64_t ckpt_checksum(const void *p, int64_t n);
/* Hash of every tensor name, shape and offset: a resume must match it. */
uint64_t param_layout_hash(const ParamLayout *pl);

void ckpt_step_dir(char *out, size_t n, const char *run_dir, int64_t step);
void ckpt_writer_begin(CkptWriter *w, const char *run_dir, int64_t step, int rank, int world);
void ckpt_add_section(CkptWriter *w, const char *name, const void *data, int64_t bytes);
/* Publishes this rank's file; the result goes to whoever writes the manifest. */
CkptFileInfo ckpt_writer_finish(CkptWriter *w);
/* Rank 0, once all files of the step exist: writes manifest.json, then keeps
 * the newest keep_last complete checkpoints (0 keeps all). */
void ckpt_write_manifest(const char *run_dir, int64_t step, int world, uint64_t layout_hash, const CkptFileInfo *files,
                         int n_files, int keep_last);
void ckpt_prune(const char *run_dir, int keep_last);

/* Newest complete checkpoint: 1 with its directory and step, or 0. */
int ckpt_find_latest(const char *run_dir, char *out, size_t n, int64_t *step);

typedef struct {
    MappedFile map;
    CkptSection *s;
    int n;
    int64_t step;
    int rank, world;
} CkptReader;

/* Parses a rank file image; no I/O. Returns 0 or -1 with err set. */
int ckpt_parse(CkptReader *r, const uint8_t *buf, int64_t size, const char *origin, char *err, int errlen);
/* Opens step_dir's file for rank after checking it against the manifest
 * (world size, size, checksum and, when nonzero, the layout hash). Dies with
 * a message naming the file on any mismatch. */
void ckpt_reader_open(CkptReader *r, const char *step_dir, int rank, int world, uint64_t layout_hash);
/* The world size step_dir's manifest records (the ranks that wrote it). */
int ckpt_manifest_world(const char *step_dir);
/* Section bytes (checksum verified), or NULL when absent. */
const void *ckpt_get_section(const CkptReader *r, const char *name, int64_t *bytes);
/* Copies a section that must exist with exactly `bytes` bytes. */
void ckpt_read_section(const CkptReader *r, const char *name, void *dst, int64_t bytes);
void ckpt_reader_close(CkptReader *r);

#endif
