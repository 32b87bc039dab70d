#ifndef KVCPT_TFEVENTS_H
#define KVCPT_TFEVENTS_H
/* TensorBoard event files, written by hand so that `tensorboard --logdir`
 * reads a run with no TensorFlow or protobuf library in kvcpt.
 *
 * A file is a sequence of TFRecords: u64 length (little-endian), u32
 * masked CRC-32C of those 8 bytes, the data, u32 masked CRC-32C of the data
 * (masked: ((crc >> 15) | (crc << 17)) + 0xa282ead8). Each record's data is
 * a tensorflow.Event protocol buffer: field 1 wall_time (double), 2 step
 * (int64), 3 file_version (string; the first record, "brain.Event:2"), 5
 * summary, a Summary whose repeated field 1 values are Summary.Value
 * messages of field 1 tag (string) and 2 simple_value (float). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    FILE *f;
    char path[4200];
} TfEvents;

/* CRC-32C (Castagnoli), as TFRecord frames use it; crc32c("123456789") is
 * 0xe3069283. */
uint32_t tfevents_crc32c(const void *p, size_t n);
/* Opens path: "w" makes a new file starting with the file_version record,
 * "a" appends to an existing one (a new one when there is none). */
void tfevents_open(TfEvents *e, const char *path, const char *mode);
/* One Event at step holding n scalars (tags[i], values[i] as float32),
 * flushed: TensorBoard shows a run as it goes, and a run that dies leaves
 * whole records. */
void tfevents_scalars(TfEvents *e, int64_t step, const char *const *tags, const double *values, int n);
void tfevents_close(TfEvents *e);
/* Keeps the records of steps <= step (and the file_version record), for a
 * resumed run: the file then reads as if the run had never stopped, as
 * log.jsonl does. A record cut short or failing its CRC ends what is kept,
 * with a warning (log.jsonl holds every step). No file: nothing to do. */
void tfevents_truncate(const char *path, int64_t step);

#endif
