#ifndef KVCPT_PARALLEL_MIN_H
#define KVCPT_PARALLEL_MIN_H
/* Below this many floats of work a row- or element-wise kernel runs on the
 * calling thread: a parallel region's fork and join (with
 * OMP_WAIT_POLICY=passive, a futex wake of each sleeping thread, and on a
 * loaded machine a wait for a core) costs more than the work. A decode step
 * of a few rows runs a dozen such kernels per layer. Each row or element is
 * computed the same way on any thread, so the bits do not change. */
#define KERNEL_PARALLEL_MIN_FLOATS (1 << 16)
#endif
