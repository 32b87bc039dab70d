#include "nccl_watchdog.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "../common/util.h"
#include "nccl_check.h"

/* Operations in flight that are watched: a ring, so that the fast path
 * never waits for the device until this many are queued ahead of it. */
#define WATCH_SLOTS 1024

typedef enum { SLOT_ENQUEUING = 1, SLOT_RECORDED = 2 } SlotState;

typedef struct {
    cudaEvent_t done;  /* recorded after the operation on its stream; created at the slot's first use */
    double enqueued_s; /* monotonic host time of nccl_watchdog_enter */
    const char *what;
    int state; /* SlotState: ENQUEUING while the host is inside the NCCL calls */
} WatchSlot;

struct NcclWatchdog {
    ncclComm_t comm;
    int rank, world, device;
    double timeout_s;
    double poll_s;  /* the thread's period */
    double pause_s; /* a gap between two polls longer than this: this process did not run */
    pthread_t thread;
    pthread_mutex_t mu; /* guards the fields below and every slot */
    pthread_cond_t wake;
    int stop;
    int64_t head, tail;             /* operations [tail, head) are watched; operation k is slots[k % WATCH_SLOTS] */
    WatchSlot slots[WATCH_SLOTS];
    NcclWatchdog *next;             /* in the list of live watchdogs (exit handler) */
};

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static WatchSlot *slot_of(NcclWatchdog *w, int64_t k) { return &w->slots[k % WATCH_SLOTS]; }

/* Prints why, aborts the communicator (which makes a call of another thread
 * that waits inside it return) and ends the process. The main thread may be
 * blocked anywhere, so the process ends here without exit handlers. */
KV_NORETURN static void fire(NcclWatchdog *w, const char *why) {
    fputs(why, stderr);
    fflush(stderr);
    /* ncclCommAbort can itself hang on a broken fabric (and stdout on a
     * full pipe): SIGALRM's default action then ends the process all the same */
    alarm(30);
    fflush(stdout);
    ncclResult_t rc = ncclCommAbort(w->comm);
    if (rc != ncclSuccess)
        fprintf(stderr, "kvcpt: rank %d: ncclCommAbort failed: %s\n", w->rank, ncclGetErrorString(rc));
    _exit(1);
}

/* The oldest watched operation has not finished after the timeout. */
KV_NORETURN static void fire_timeout(NcclWatchdog *w, const WatchSlot *s, int64_t k, double waited, double paused) {
    char msg[640];
    if (paused > 0) /* stopped and continued (mpirun sends SIGCONT before ending a job) */
        snprintf(msg, sizeof msg,
                 "kvcpt: error: rank %d of %d was itself not running for %.1f s (stopped or starved) while NCCL %s "
                 "(operation #%lld on this communicator) waited %.1f s; aborting the NCCL communicator and ending the "
                 "job (comm_timeout = %g s)\n",
                 w->rank, w->world, paused, s->what, (long long)k + 1, waited, w->timeout_s);
    else
        snprintf(msg, sizeof msg,
                 "kvcpt: error: rank %d of %d: NCCL %s (operation #%lld on this communicator) has not finished %.1f s "
                 "after it was enqueued%s: a rank is stopped, hung or dead, or never called it; aborting the NCCL "
                 "communicator and ending the job (comm_timeout = %g s)\n",
                 w->rank, w->world, s->what, (long long)k + 1, waited,
                 s->state == SLOT_ENQUEUING ? " (the host is still inside the NCCL call)" : "", w->timeout_s);
    fire(w, msg);
}

/* NCCL reports an error of its own (a peer gone, a network error). */
KV_NORETURN static void fire_async(NcclWatchdog *w, ncclResult_t err, double now) {
    char msg[640], during[200] = "no operation in flight";
    if (w->tail < w->head) {
        const WatchSlot *s = slot_of(w, w->tail);
        snprintf(during, sizeof during, "NCCL %s (operation #%lld) in flight for %.1f s", s->what,
                 (long long)w->tail + 1, now - s->enqueued_s);
    }
    snprintf(msg, sizeof msg,
             "kvcpt: error: rank %d of %d: NCCL reports an asynchronous error: %s (%s); aborting the NCCL communicator "
             "and ending the job\n",
             w->rank, w->world, ncclGetErrorString(err), during);
    fire(w, msg);
}

/* Retires the finished operations at the tail (one stream: they finish in
 * order), then judges the oldest unfinished one and NCCL's own error. */
static void check(NcclWatchdog *w, double now, double paused, double paused_at) {
    while (w->tail < w->head) {
        WatchSlot *s = slot_of(w, w->tail);
        if (s->state != SLOT_RECORDED) break;
        cudaError_t q = cudaEventQuery(s->done);
        if (q == cudaErrorNotReady) break;
        if (q != cudaSuccess) { /* a device error: the device is lost to this process */
            char msg[512];
            snprintf(msg, sizeof msg,
                     "kvcpt: error: rank %d of %d: waiting for NCCL %s (operation #%lld): cudaEventQuery failed: %s; "
                     "aborting the NCCL communicator and ending the job\n",
                     w->rank, w->world, s->what, (long long)w->tail + 1, cudaGetErrorString(q));
            fire(w, msg);
        }
        w->tail++;
    }
    if (w->tail < w->head) {
        const WatchSlot *s = slot_of(w, w->tail);
        double waited = now - s->enqueued_s;
        if (waited > w->timeout_s) fire_timeout(w, s, w->tail, waited, paused_at > s->enqueued_s ? paused : 0);
    }
    ncclResult_t err = ncclSuccess, rc = ncclCommGetAsyncError(w->comm, &err);
    if (rc != ncclSuccess) err = rc;
    if (err != ncclSuccess && err != ncclInProgress) fire_async(w, err, now);
}

static void *watch_main(void *arg) {
    NcclWatchdog *w = arg;
    cudaError_t e = cudaSetDevice(w->device);
    if (e != cudaSuccess) { /* only this thread's view: the operations themselves go on unwatched */
        fprintf(stderr,
                "kvcpt: warning: rank %d: the NCCL watchdog cannot select device %d (%s): NCCL operations are "
                "not watched\n",
                w->rank, w->device, cudaGetErrorString(e));
        return NULL;
    }
    double prev = monotonic_s(), paused = 0, paused_at = 0;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        double now = monotonic_s();
        if (now - prev > w->pause_s) paused = now - prev, paused_at = now;
        prev = now;
        check(w, now, paused, paused_at);
        double until = now + w->poll_s;
        struct timespec ts = {(time_t)until, (long)((until - (double)(time_t)until) * 1e9)};
        pthread_cond_timedwait(&w->wake, &w->mu, &ts);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* The live watchdogs, stopped before the process's exit handlers tear the
 * CUDA runtime down under their threads (a die() on the main thread). */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static NcclWatchdog *live;
static pthread_once_t exit_hook_once = PTHREAD_ONCE_INIT;

static void halt(NcclWatchdog *w) {
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    int rc = pthread_join(w->thread, NULL);
    if (rc != 0) fprintf(stderr, "kvcpt: warning: rank %d: joining the NCCL watchdog failed (%d)\n", w->rank, rc);
}

static void halt_all_at_exit(void) {
    pthread_mutex_lock(&live_mu);
    for (NcclWatchdog *w = live; w; w = w->next) halt(w);
    live = NULL;
    pthread_mutex_unlock(&live_mu);
}

static void register_exit_hook(void) {
    if (atexit(halt_all_at_exit) != 0)
        fprintf(stderr, "kvcpt: warning: cannot register the NCCL watchdog's exit handler\n");
}

NcclWatchdog *nccl_watchdog_start(ncclComm_t comm, int rank, int world, int device, double timeout_s) {
    KV_CHECK(timeout_s > 0, "nccl watchdog: timeout must be > 0 seconds (got %g)", timeout_s);
    NcclWatchdog *w = xcalloc(1, sizeof *w);
    w->comm = comm, w->rank = rank, w->world = world, w->device = device, w->timeout_s = timeout_s;
    w->poll_s = timeout_s / 20 < 0.1 ? timeout_s / 20 : 0.1;
    w->pause_s = timeout_s / 4 > 10 * w->poll_s ? timeout_s / 4 : 10 * w->poll_s;
    pthread_condattr_t ca;
    KV_CHECK(pthread_condattr_init(&ca) == 0 && pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
                 pthread_cond_init(&w->wake, &ca) == 0 && pthread_mutex_init(&w->mu, NULL) == 0,
             "nccl watchdog: rank %d: cannot set up its mutex and condition variable", rank);
    pthread_condattr_destroy(&ca);
    KV_CHECK(pthread_once(&exit_hook_once, register_exit_hook) == 0, "nccl watchdog: pthread_once failed");
    int rc = pthread_create(&w->thread, NULL, watch_main, w);
    KV_CHECK(rc == 0, "nccl watchdog: rank %d: pthread_create failed (%d)", rank, rc);
    pthread_mutex_lock(&live_mu);
    w->next = live, live = w;
    pthread_mutex_unlock(&live_mu);
    return w;
}

void nccl_watchdog_stop(NcclWatchdog *w) {
    if (!w) return;
    pthread_mutex_lock(&live_mu);
    for (NcclWatchdog **p = &live; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    pthread_mutex_unlock(&live_mu);
    halt(w);
    for (int i = 0; i < WATCH_SLOTS; i++)
        if (w->slots[i].done) CUDA_CHECK(cudaEventDestroy(w->slots[i].done));
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* Every die() below comes with the mutex released: the exit handler takes it. */
int64_t nccl_watchdog_enter(NcclWatchdog *w, const char *what) {
    pthread_mutex_lock(&w->mu);
    while (w->head - w->tail == WATCH_SLOTS) {
        /* a whole ring in flight: wait for the oldest (still watched, so a
         * hang there fires all the same) */
        int64_t k = w->tail;
        int recorded = slot_of(w, k)->state == SLOT_RECORDED;
        cudaEvent_t ev = slot_of(w, k)->done;
        pthread_mutex_unlock(&w->mu);
        KV_CHECK(recorded, "nccl watchdog: rank %d: operation #%lld was entered but never left", w->rank,
                 (long long)k + 1);
        CUDA_CHECK(cudaEventSynchronize(ev));
        pthread_mutex_lock(&w->mu);
        if (w->tail == k) w->tail++;
    }
    /* only this thread moves head, and the thread reads no slot at or past it */
    int64_t k = w->head;
    pthread_mutex_unlock(&w->mu);
    WatchSlot *s = slot_of(w, k);
    if (!s->done) CUDA_CHECK(cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming));
    pthread_mutex_lock(&w->mu);
    s->enqueued_s = monotonic_s(), s->what = what, s->state = SLOT_ENQUEUING;
    w->head = k + 1;
    pthread_mutex_unlock(&w->mu);
    return k;
}

void nccl_watchdog_leave(NcclWatchdog *w, int64_t ticket, cudaStream_t stream) {
    WatchSlot *s = slot_of(w, ticket);
    /* the thread queries the event only once the slot says RECORDED */
    CUDA_CHECK(cudaEventRecord(s->done, stream));
    pthread_mutex_lock(&w->mu);
    s->state = SLOT_RECORDED;
    pthread_mutex_unlock(&w->mu);
}
