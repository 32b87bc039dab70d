/* The mpi backend of parallel/comm.h (comm_backend.h): CPU ranks started
 * by a launcher (mpirun, srun), every collective non-blocking and waited for
 * under the watchdog below. Linked where mpicc was found at build time. */
#include <limits.h>
#include <mpi.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/util.h"
#include "comm_backend.h"

#define MPI_CHECK(call)                                                                                                \
    do {                                                                                                               \
        int mpi_rc_ = (call);                                                                                          \
        if (mpi_rc_ != MPI_SUCCESS) {                                                                                  \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                                                       \
            int mpi_len_ = 0;                                                                                          \
            MPI_Error_string(mpi_rc_, mpi_msg_, &mpi_len_);                                                            \
            die("%s:%d: %s failed: %s", __FILE__, __LINE__, #call, mpi_msg_);                                          \
        }                                                                                                              \
    } while (0)

/* Notes in flight per observer (see the watchdog below): a ring, so an
 * observer that stops can hold up a sender only once the ring is full. */
#define NOTE_SLOTS 64
#define TAG_NOTE 7301
#define TAG_DONE 7302

/* The backend's own state (Comm.host_state). */
typedef struct {
    int mpi_owned;   /* we called MPI_Init, so we call MPI_Finalize */
    MPI_Request req; /* the background all-gather's */
    int *req_counts; /* must outlive the request: 2 x world */
    int64_t *seen;   /* (world) on an observer: the newest collective each rank announced */
    double *heard_s; /* (world) on an observer: when each rank's last note arrived */
    double noted_s;  /* when this rank last sent a note */
    MPI_Request note_req[2][NOTE_SLOTS]; /* notes to observers 0 and 1 */
    int64_t note_val[2][NOTE_SLOTS];
    int note_next[2];
    int64_t notes_sent[2]; /* to observers 0 and 1 */
    int64_t *notes_got;    /* (world) on an observer: notes received from each rank */
} CommMpi;

static CommMpi *mpi_of(const Comm *c) { return c->host_state; }

/* Ranks on one host split its cores between their OpenMP teams unless the
 * user said otherwise: N ranks x all cores each would thrash. */
static void share_cores(int local) {
    if (getenv("OMP_NUM_THREADS")) return;
    int cores = omp_get_num_procs();
    if (local > 1) omp_set_num_threads(cores / local > 1 ? cores / local : 1);
}

/* The watchdog. Every MPI collective is started non-blocking and waited for
 * with a deadline (comm_set_timeout), so a rank that stops (SIGSTOP, a hung
 * file system, a node gone silent) ends the job with a message instead of
 * hanging every other rank forever. To say which rank, ranks 0 and 1 observe:
 * each rank sends them a note (8 bytes: the number of the collective it is in)
 * when it enters a collective and then every timeout/8 while it waits inside.
 * An observer that times out names the ranks it has not heard from for half
 * the timeout (stopped between collectives or in the middle of one) apart
 * from those that are alive but waiting in an earlier collective.
 * Two observers, so that a stopped rank 0 is named too; the others wait a
 * little longer than the observers before ending the job, so the message
 * that names the rank is the one printed. */
static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int is_observer(const Comm *c, int rank) { return rank < 2 && rank < c->world; }

/* An observer takes every note that has arrived. */
static void drain_notes(Comm *c) {
    if (!is_observer(c, c->rank)) return;
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, TAG_NOTE, MPI_COMM_WORLD, &flag, &st));
        if (!flag) return;
        int64_t v;
        MPI_CHECK(MPI_Recv(&v, 1, MPI_INT64_T, st.MPI_SOURCE, TAG_NOTE, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        if (v > mpi_of(c)->seen[st.MPI_SOURCE]) mpi_of(c)->seen[st.MPI_SOURCE] = v;
        mpi_of(c)->heard_s[st.MPI_SOURCE] = monotonic_s();
        mpi_of(c)->notes_got[st.MPI_SOURCE]++;
    }
}

/* Appends "r" or "r (last heard in #n)" to a ", "-separated list; a full
 * list keeps its head (the count printed beside it says how many). */
static void list_rank(char *list, size_t cap, int r, int64_t last) {
    size_t len = strlen(list);
    if (len + 48 >= cap) return;
    if (last >= 0)
        snprintf(list + len, cap - len, "%s%d (last heard from in #%lld)", len ? ", " : "", r, (long long)last);
    else snprintf(list + len, cap - len, "%s%d", len ? ", " : "", r);
}

/* Ends the whole job after the watchdog's message. MPI_Abort can block when
 * mpirun is itself tearing the job down (it sends SIGCONT, SIGTERM, then
 * SIGKILL to the ranks, and may be gone before a rank that was stopped runs
 * again): SIGALRM's default action then ends this rank all the same, so that
 * no rank outlives the job. */
KV_NORETURN static void end_job(void) {
    signal(SIGALRM, SIG_DFL);
    alarm(10);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1); /* MPI_Abort does not return */
}

KV_NORETURN static void watchdog_fire(Comm *c, const char *what, double waited, double self_paused) {
    fflush(stdout);
    if (self_paused > 0) { /* this rank was the stopped one, now running again (mpirun's SIGCONT before SIGTERM) */
        fprintf(stderr,
                "kvcpt: error: rank %d was itself not running for %.1f s (stopped or starved) in collective #%lld "
                "(%s); ending the job (comm_timeout = %g s)\n",
                c->rank, self_paused, (long long)c->seq, what, c->timeout_s);
        fflush(stderr);
        end_job();
    }
    char silent[512] = "", behind[256] = "";
    int n_silent = 0, n_behind = 0;
    if (is_observer(c, c->rank)) {
        drain_notes(c);
        double now = monotonic_s();
        for (int r = 0; r < c->world; r++) {
            if (r == c->rank) continue;
            if (now - mpi_of(c)->heard_s[r] > c->timeout_s / 2) {
                n_silent++;
                list_rank(silent, sizeof silent, r, mpi_of(c)->seen[r]);
            } else if (mpi_of(c)->seen[r] < c->seq) {
                n_behind++;
                list_rank(behind, sizeof behind, r, -1);
            }
        }
    }
    /* one write, so that the ranks' messages do not interleave */
    char msg[1536];
    size_t n = 0;
    n += (size_t)snprintf(msg + n, sizeof msg - n,
                          "kvcpt: error: rank %d waited %.1f s in collective #%lld (%s) of %d ranks; ", c->rank, waited,
                          (long long)c->seq, what, c->world);
    if (n_silent && n < sizeof msg)
        n += (size_t)snprintf(msg + n, sizeof msg - n,
                              "silent for over %g s (stopped, hung, or slower than comm_timeout): rank%s %s; ",
                              c->timeout_s / 2, n_silent > 1 ? "s" : "", silent);
    if (n_behind && n < sizeof msg)
        n += (size_t)snprintf(msg + n, sizeof msg - n, "alive, still waiting in an earlier collective: rank%s %s; ",
                              n_behind > 1 ? "s" : "", behind);
    if (!n_silent && !n_behind && n < sizeof msg)
        n += (size_t)snprintf(msg + n, sizeof msg - n, "%s",
                              is_observer(c, c->rank) ? "every rank is inside it and alive, so MPI itself is stuck; "
                                                      : "ranks 0 and 1 name the silent ranks; ");
    if (n < sizeof msg) snprintf(msg + n, sizeof msg - n, "ending the job (comm_timeout = %g s)\n", c->timeout_s);
    fputs(msg, stderr);
    fflush(stderr);
    end_job();
}

/* The note `value` to each observer. A ring slot whose previous note has not
 * left yet is waited for (an observer that stopped fills the ring only after
 * NOTE_SLOTS notes, and then the wait is watched too). */
static void send_note(Comm *c, int64_t value, const char *what) {
    for (int o = 0; o < 2; o++) {
        if (!is_observer(c, o) || o == c->rank) continue;
        int slot = mpi_of(c)->note_next[o];
        mpi_of(c)->note_next[o] = (slot + 1) % NOTE_SLOTS;
        MPI_Request *rq = &mpi_of(c)->note_req[o][slot];
        double t0 = monotonic_s();
        for (int done = *rq == MPI_REQUEST_NULL; !done;) {
            MPI_CHECK(MPI_Test(rq, &done, MPI_STATUS_IGNORE));
            double waited = monotonic_s() - t0;
            if (!done && c->timeout_s > 0 && waited > c->timeout_s) watchdog_fire(c, what, waited, 0);
        }
        mpi_of(c)->note_val[o][slot] = value;
        MPI_CHECK(MPI_Isend(&mpi_of(c)->note_val[o][slot], 1, MPI_INT64_T, o, TAG_NOTE, MPI_COMM_WORLD, rq));
        mpi_of(c)->notes_sent[o]++;
    }
    mpi_of(c)->noted_s = monotonic_s();
}

/* Before each collective: its number, to the observers. */
static void announce(Comm *c, const char *what) {
    c->seq++;
    send_note(c, c->seq, what);
}

/* Polls req until it completes, at most `limit` seconds (0: forever). While
 * `inside` a collective: observers take notes, and everyone sends the
 * collective's number again every timeout/8 to say it is still alive.
 * Polling yields the core after the first millisecond: ranks may share cores. */
static void poll_request(Comm *c, MPI_Request *req, const char *what, double limit, int inside) {
    double t0 = monotonic_s(), prev = t0, paused = 0;
    for (long polls = 0;; polls++) {
        int done = 0;
        MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done) return;
        double now = monotonic_s(), waited = now - t0;
        /* a long gap between two polls: this process itself did not run */
        if (limit > 0 && now - prev > limit / 4 && now - prev > paused) paused = now - prev;
        prev = now;
        if (inside && (polls & 255) == 0) {
            drain_notes(c);
            if (c->timeout_s > 0 && now - mpi_of(c)->noted_s > c->timeout_s / 8) send_note(c, c->seq, what);
        }
        if (limit > 0 && waited > limit) watchdog_fire(c, what, waited, paused);
        if (waited > 1e-3) {
            struct timespec pause = {0, 20000}; /* 20 us */
            nanosleep(&pause, NULL);
        }
    }
}

/* Waits for one non-blocking collective: the observers at most the timeout,
 * the others a little longer (see above). */
static void wait_request(Comm *c, MPI_Request *req, const char *what) {
    double limit = c->timeout_s;
    if (limit > 0 && !is_observer(c, c->rank)) limit += limit < 10 ? limit / 2 : 5;
    poll_request(c, req, what, limit, 1);
    drain_notes(c);
}

/* At the end, so that no note is left unreceived at MPI_Finalize: each rank
 * tells each observer how many notes it sent it (its own tag, so a drain
 * during the last barrier cannot take it), and the observer takes notes
 * until it has that many from every rank. Each wait is watched. */
static void close_notes(Comm *c) {
    MPI_Request done_req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    for (int o = 0; o < 2; o++)
        if (is_observer(c, o) && o != c->rank)
            MPI_CHECK(MPI_Isend(&mpi_of(c)->notes_sent[o], 1, MPI_INT64_T, o, TAG_DONE, MPI_COMM_WORLD, &done_req[o]));
    if (is_observer(c, c->rank))
        for (int r = 0; r < c->world; r++) {
            if (r == c->rank) continue;
            int64_t expected = 0;
            MPI_Request rq;
            MPI_CHECK(MPI_Irecv(&expected, 1, MPI_INT64_T, r, TAG_DONE, MPI_COMM_WORLD, &rq));
            poll_request(c, &rq, "closing", c->timeout_s, 0);
            while (mpi_of(c)->notes_got[r] < expected) {
                int64_t v;
                MPI_CHECK(MPI_Irecv(&v, 1, MPI_INT64_T, r, TAG_NOTE, MPI_COMM_WORLD, &rq));
                poll_request(c, &rq, "closing", c->timeout_s, 0);
                mpi_of(c)->notes_got[r]++;
            }
        }
    for (int o = 0; o < 2; o++) {
        if (done_req[o] != MPI_REQUEST_NULL) poll_request(c, &done_req[o], "closing", c->timeout_s, 0);
        for (int i = 0; i < NOTE_SLOTS; i++)
            if (mpi_of(c)->note_req[o][i] != MPI_REQUEST_NULL)
                poll_request(c, &mpi_of(c)->note_req[o][i], "closing", c->timeout_s, 0);
    }
}
static MPI_Datatype mpi_type(CommType t) {
    switch (t) {
        case COMM_F32: return MPI_FLOAT;
        case COMM_F64: return MPI_DOUBLE;
        case COMM_I64: return MPI_INT64_T;
        case COMM_U8: return MPI_UINT8_T;
    }
    die("comm: unknown element type %d", (int)t);
}

/* MPI-3 counts are int: a unit larger than that must be split by the caller. */
static void mpi_counts_into(const Comm *c, const int64_t *v, int *out, const char *what) {
    for (int r = 0; r < c->world; r++) {
        KV_CHECK(v[r] >= 0 && v[r] <= INT_MAX,
                 "comm: %s[%d] = %lld does not fit MPI's int counts; hint: shard by smaller units", what, r,
                 (long long)v[r]);
        out[r] = (int)v[r];
    }
}

static int *mpi_counts(const Comm *c, const int64_t *v, const char *what) {
    int *out = xmalloc(sizeof(int) * (size_t)c->world);
    mpi_counts_into(c, v, out, what);
    return out;
}

static void mpi_all_gather_v(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                             const int64_t *displs) {
    int *ic = mpi_counts(c, counts, "count"), *id = mpi_counts(c, displs, "displacement");
    MPI_Request req;
    announce(c, "all-gather");
    MPI_CHECK(MPI_Iallgatherv(send, ic[c->rank], mpi_type(t), recv, ic, id, mpi_type(t), MPI_COMM_WORLD, &req));
    wait_request(c, &req, "all-gather");
    free(ic);
    free(id);
}

static void *mpi_open(Comm *c) {
    CommMpi *m = xcalloc(1, sizeof *m);
    int inited = 0;
    MPI_CHECK(MPI_Initialized(&inited));
    if (!inited) {
        MPI_CHECK(MPI_Init(NULL, NULL));
        m->mpi_owned = 1;
    }
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->world));
    /* the node-local rank from MPI itself (the ranks sharing memory),
     * not from a launcher's environment, which differs by launcher */
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &c->local_rank));
    MPI_CHECK(MPI_Comm_size(node, &c->local_world));
    MPI_CHECK(MPI_Comm_free(&node));
    m->seen = xcalloc((size_t)c->world, sizeof *m->seen);
    m->heard_s = xcalloc((size_t)c->world, sizeof *m->heard_s);
    m->notes_got = xcalloc((size_t)c->world, sizeof *m->notes_got);
    for (int o = 0; o < 2; o++)
        for (int i = 0; i < NOTE_SLOTS; i++) m->note_req[o][i] = MPI_REQUEST_NULL;
    share_cores(c->local_world);
    return m;
}

static void mpi_close(Comm *c) {
    CommMpi *m = mpi_of(c);
    comm_barrier(c); /* watched: MPI_Finalize itself is not, so every rank must be alive to reach it */
    close_notes(c);
    free(m->seen);
    free(m->heard_s);
    free(m->notes_got);
    free(m->req_counts);
    if (m->mpi_owned) MPI_Finalize();
    free(m);
    c->host_state = NULL;
}

static void mpi_all_gather_v_start(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                                   const int64_t *displs) {
    CommMpi *m = mpi_of(c);
    if (!m->req_counts) m->req_counts = xmalloc(sizeof(int) * 2 * (size_t)c->world);
    mpi_counts_into(c, counts, m->req_counts, "count");
    mpi_counts_into(c, displs, m->req_counts + c->world, "displacement");
    announce(c, "background all-gather");
    c->pending_what = "background all-gather";
    MPI_CHECK(MPI_Iallgatherv(send, m->req_counts[c->rank], mpi_type(t), recv, m->req_counts, m->req_counts + c->world,
                              mpi_type(t), MPI_COMM_WORLD, &m->req));
}

static void mpi_wait(Comm *c) { wait_request(c, &mpi_of(c)->req, c->pending_what); }

static void mpi_all_to_all_v(Comm *c, CommType t, const void *send, const int64_t *scounts, const int64_t *sdispls,
                             void *recv, const int64_t *rcounts, const int64_t *rdispls) {
    int *sc = mpi_counts(c, scounts, "send count"), *sd = mpi_counts(c, sdispls, "send displacement");
    int *rc = mpi_counts(c, rcounts, "receive count"), *rd = mpi_counts(c, rdispls, "receive displacement");
    MPI_Request req;
    announce(c, "all-to-all");
    MPI_CHECK(MPI_Ialltoallv(send, sc, sd, mpi_type(t), recv, rc, rd, mpi_type(t), MPI_COMM_WORLD, &req));
    wait_request(c, &req, "all-to-all");
    free(sc), free(sd), free(rc), free(rd);
}

static int64_t mpi_max_i64(Comm *c, int64_t v) {
    int64_t out = v;
    MPI_Request req;
    announce(c, "all-reduce max");
    MPI_CHECK(MPI_Iallreduce(&v, &out, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD, &req));
    wait_request(c, &req, "all-reduce max");
    return out;
}

static void mpi_barrier(Comm *c) {
    MPI_Request req;
    announce(c, "barrier");
    MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
    wait_request(c, &req, "barrier");
}

static const CommOps mpi_ops = {.name = "mpi",
                                .open = mpi_open,
                                .close = mpi_close,
                                .set_timeout = NULL,
                                .all_gather_v = mpi_all_gather_v,
                                .all_gather_v_start = mpi_all_gather_v_start,
                                .wait = mpi_wait,
                                .all_to_all_v = mpi_all_to_all_v,
                                .max_i64 = mpi_max_i64,
                                .barrier = mpi_barrier};

const CommOps *comm_mpi_ops(void) { return &mpi_ops; }
