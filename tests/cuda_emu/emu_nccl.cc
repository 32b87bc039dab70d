/* NCCL for the CUDA emulator (include/nccl.h), over MPI on the emulated
 * device memory, which is host memory.
 *
 * Every rank of a communicator is an MPI process of MPI_COMM_WORLD (a
 * one-rank communicator needs no MPI). An operation outside a group is a
 * group of one. At the end of a group every rank sends every other rank a
 * description of the operations it queued (kind, count, type, op, root or
 * peer, and whether its own argument checks failed), so every rank can check
 * what real NCCL never checks and would hang or corrupt memory on: the
 * collectives must be the same on all ranks, in the same order; every send
 * must meet a receive of the same count and type on its peer, in order; no
 * rank may have passed a host pointer, a buffer shorter than its count or a
 * buffer of another device than the communicator's (the device current at
 * ncclCommInitRank).
 * A failed check is reported on stderr naming the ranks, and the group fails
 * on every rank (ncclInvalidUsage or ncclInvalidArgument), so no rank is
 * left waiting. Only then does data move (nonblocking point-to-point MPI,
 * collectives and send/recv under separate tags so that each keeps its own
 * order).
 *
 * Reductions add in a fixed order: rank 0's contribution, then rank 1's,
 * and so on, one rounding per step in the data type. Real NCCL's order
 * depends on its ring or tree algorithm, the channel count and the rank
 * count, so results are bit-identical across rank counts only here: nothing
 * in kvcpt may rest its bit-identity on NCCL's reductions.
 *
 * Streams: the emulator runs every launch and copy to completion at its
 * call, so the stream order is the host's call order, and a collective that
 * also completes at its call (or at ncclGroupEnd) is in the order real NCCL
 * would give it on the stream it was enqueued on. The stream must be 0 or a
 * live stream.
 *
 * Hangs: a wait for other ranks polls; it ends when ncclCommAbort is called
 * on the communicator (from another thread: a watchdog) or after
 * KVCPT_EMU_NCCL_TIMEOUT seconds (default 300, 0 = forever), naming the
 * ranks that never arrived, and the communicator's async error becomes
 * ncclRemoteError (ncclCommGetAsyncError), so a caller can bound a hang.
 * ncclCommAbort and ncclCommGetAsyncError touch no MPI; every other call
 * makes MPI calls on its own thread, so with MPI initialised without thread
 * support (comm.c's MPI_Init) NCCL must be called from the thread that also
 * makes the MPI calls. */
/* the C interface only: MPI's C++ bindings would need their own library */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

struct ncclComm {
    int rank, nranks;
    int device;   /* current at ncclCommInitRank: every buffer must be on it */
    MPI_Comm mpi; /* a duplicate of MPI_COMM_WORLD; MPI_COMM_NULL for one rank */
    std::atomic<int> aborted;
    std::atomic<int> async_error; /* an ncclResult_t */
    unsigned long long groups;    /* groups completed or failed, for messages */
};

namespace {

const char kIdMagic[] = "kvcpt-emu-nccl-id";
enum { TAG_HDR = 7101, TAG_OPS, TAG_COLL, TAG_P2P, TAG_INIT };
enum OpKind { OP_BROADCAST, OP_ALL_REDUCE, OP_REDUCE_SCATTER, OP_ALL_GATHER, OP_SEND, OP_RECV };
const char *const kOpName[] = {"ncclBroadcast", "ncclAllReduce", "ncclReduceScatter",
                               "ncclAllGather", "ncclSend",      "ncclRecv"};

/* what one rank tells the others about one queued operation */
struct OpDesc {
    int32_t kind, type, op, peer; /* peer: the root (broadcast) or the peer (send/recv); else -1 */
    uint64_t count;               /* as passed: recvcount for reduce-scatter, sendcount for all-gather */
    int32_t bad;                  /* this rank's own argument checks failed (it printed why) */
    int32_t pad;
};
struct Op {
    OpDesc d;
    const void *send;
    void *recv;
    ncclComm_t comm;
};
struct GroupHdr {
    char magic[8];
    uint64_t nops;
};

thread_local int group_depth = 0;
thread_local std::vector<Op> group_ops;

bool is_p2p(int kind) { return kind == OP_SEND || kind == OP_RECV; }

size_t type_size(int t) {
    switch (t) {
        case ncclInt8:
        case ncclUint8: return 1;
        case ncclFloat16:
        case ncclBfloat16: return 2;
        case ncclInt32:
        case ncclUint32:
        case ncclFloat32: return 4;
        case ncclInt64:
        case ncclUint64:
        case ncclFloat64: return 8;
        default: return 0;
    }
}
const char *type_name(int t) {
    switch (t) {
        case ncclInt8: return "ncclInt8";
        case ncclUint8: return "ncclUint8";
        case ncclInt32: return "ncclInt32";
        case ncclUint32: return "ncclUint32";
        case ncclInt64: return "ncclInt64";
        case ncclUint64: return "ncclUint64";
        case ncclFloat16: return "ncclFloat16";
        case ncclFloat32: return "ncclFloat32";
        case ncclFloat64: return "ncclFloat64";
        case ncclBfloat16: return "ncclBfloat16";
        default: return "an unknown type";
    }
}
const char *op_name(int op) {
    static const char *const names[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};
    return op >= 0 && op < ncclNumOps ? names[op] : "an unknown op";
}

std::string describe(const OpDesc &d) {
    char buf[200];
    switch (d.kind) {
        case OP_BROADCAST:
            snprintf(buf, sizeof buf, "ncclBroadcast(count=%llu, %s, root=%d)", (unsigned long long)d.count,
                     type_name(d.type), d.peer);
            break;
        case OP_ALL_REDUCE:
            snprintf(buf, sizeof buf, "ncclAllReduce(count=%llu, %s, %s)", (unsigned long long)d.count,
                     type_name(d.type), op_name(d.op));
            break;
        case OP_REDUCE_SCATTER:
            snprintf(buf, sizeof buf, "ncclReduceScatter(recvcount=%llu, %s, %s)", (unsigned long long)d.count,
                     type_name(d.type), op_name(d.op));
            break;
        case OP_ALL_GATHER:
            snprintf(buf, sizeof buf, "ncclAllGather(sendcount=%llu, %s)", (unsigned long long)d.count,
                     type_name(d.type));
            break;
        default:
            snprintf(buf, sizeof buf, "%s(count=%llu, %s, peer=%d)", kOpName[d.kind], (unsigned long long)d.count,
                     type_name(d.type), d.peer);
    }
    return buf;
}

double timeout_s(void) {
    const char *env = getenv("KVCPT_EMU_NCCL_TIMEOUT");
    if (!env || !*env) return 300.0;
    char *end;
    double v = strtod(env, &end);
    if (*end || v < 0) {
        fprintf(stderr, "emu nccl: KVCPT_EMU_NCCL_TIMEOUT=%s is not a number of seconds >= 0; using 300\n", env);
        return 300.0;
    }
    return v;
}
double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Waits for reqs (peer[i]: the rank reqs[i] talks to). On an abort or the
 * timeout, names the ranks still outstanding and returns the error; the
 * requests are then left in flight, and their buffers must stay allocated
 * (callers leak them: the job is about to end). */
ncclResult_t wait_all(ncclComm_t c, std::vector<MPI_Request> &reqs, const std::vector<int> &peer, const char *what) {
    const double limit = timeout_s(), t0 = now_s();
    for (long spins = 0;; spins++) {
        int done = 0;
        if (MPI_Testall((int)reqs.size(), reqs.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
            fprintf(stderr, "emu nccl: rank %d: MPI failed while %s\n", c->rank, what);
            c->async_error = ncclSystemError;
            return ncclSystemError;
        }
        if (done) return ncclSuccess;
        const bool aborted = c->aborted.load();
        if (aborted || (limit > 0 && now_s() - t0 > limit)) {
            std::string who;
            for (size_t i = 0; i < reqs.size(); i++) {
                int flag = 0;
                if (reqs[i] != MPI_REQUEST_NULL) MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
                if (reqs[i] != MPI_REQUEST_NULL && who.find(" " + std::to_string(peer[i]) + ",") == std::string::npos)
                    who += " " + std::to_string(peer[i]) + ",";
            }
            if (!who.empty()) who.pop_back();
            if (aborted)
                fprintf(stderr,
                        "emu nccl: rank %d: ncclCommAbort ended the wait while %s (still waiting for rank(s)%s)\n",
                        c->rank, what, who.c_str());
            else
                fprintf(
                    stderr,
                    "emu nccl: rank %d: rank(s)%s did not take part within %g s while %s: a rank is stopped, hung or "
                    "called a different operation (KVCPT_EMU_NCCL_TIMEOUT)\n",
                    c->rank, who.c_str(), limit, what);
            c->async_error = ncclRemoteError;
            return ncclRemoteError;
        }
        /* ranks are processes that may share a core: do not starve them */
        if (spins > 1000) usleep(spins > 100000 ? 1000 : 50);
    }
}

/* MPI counts are int: large buffers go as several messages, in order */
const size_t kChunk = (size_t)1 << 30;
void post(std::vector<MPI_Request> &reqs, std::vector<int> &peer, ncclComm_t c, bool is_send, const void *buf,
          size_t bytes, int rank, int tag) {
    for (size_t off = 0; off < bytes; off += kChunk) {
        int n = (int)(bytes - off < kChunk ? bytes - off : kChunk);
        MPI_Request rq;
        if (is_send) MPI_Isend((const char *)buf + off, n, MPI_BYTE, rank, tag, c->mpi, &rq);
        else MPI_Irecv((char *)buf + off, n, MPI_BYTE, rank, tag, c->mpi, &rq);
        reqs.push_back(rq);
        peer.push_back(rank);
    }
}

/* Checks that [p, p + bytes) lies in one live cudaMalloc allocation. */
bool check_buffer(const ncclComm *c, const OpDesc &d, const char *which, const void *p, size_t bytes) {
    if (bytes == 0) return true;
    size_t have = 0;
    int dev = -1;
    if (!emu_device_extent(p, &have, &dev)) {
        fprintf(stderr,
                "emu nccl: rank %d: %s's %s %p is not device memory (no live cudaMalloc allocation holds it; a GPU "
                "would fault or read garbage)\n",
                c->rank, describe(d).c_str(), which, p);
        return false;
    }
    if (have < bytes) {
        fprintf(stderr,
                "emu nccl: rank %d: %s's %s %p has %zu bytes up to the end of its cudaMalloc allocation, the operation "
                "needs %zu\n",
                c->rank, describe(d).c_str(), which, p, have, bytes);
        return false;
    }
    /* NCCL moves data with the communicator's device (its kernels, its
     * copy engines): another device's buffer faults without peer access */
    if (dev != c->device) {
        fprintf(stderr,
                "emu nccl: rank %d: %s's %s %p was allocated on device %d, but the communicator is on device %d "
                "(the device current at ncclCommInitRank)\n",
                c->rank, describe(d).c_str(), which, p, dev, c->device);
        return false;
    }
    return true;
}

/* This rank's own checks of one operation; false after printing why. */
bool check_op(ncclComm_t c, const OpDesc &d, const void *send, const void *recv, cudaStream_t st) {
    const size_t es = type_size(d.type);
    if (!es) {
        fprintf(stderr, "emu nccl: rank %d: %s: unknown data type %d\n", c->rank, kOpName[d.kind], d.type);
        return false;
    }
    bool reduces = d.kind == OP_ALL_REDUCE || d.kind == OP_REDUCE_SCATTER;
    if (reduces && (d.op < 0 || d.op >= ncclNumOps)) {
        fprintf(stderr, "emu nccl: rank %d: %s: unknown reduction op %d\n", c->rank, kOpName[d.kind], d.op);
        return false;
    }
    if (reduces && d.type == ncclFloat16) {
        fprintf(stderr, "emu nccl: rank %d: %s: reductions of ncclFloat16 are not emulated\n", c->rank,
                describe(d).c_str());
        return false;
    }
    if ((d.kind == OP_BROADCAST || is_p2p(d.kind)) && (d.peer < 0 || d.peer >= c->nranks)) {
        fprintf(stderr, "emu nccl: rank %d: %s: %s %d is not a rank of this %d-rank communicator\n", c->rank,
                describe(d).c_str(), d.kind == OP_BROADCAST ? "root" : "peer", d.peer, c->nranks);
        return false;
    }
    if (!emu_stream_valid(st)) {
        fprintf(stderr, "emu nccl: rank %d: %s: stream %p is neither 0 nor a live stream\n", c->rank,
                describe(d).c_str(), (void *)st);
        return false;
    }
    const size_t n = (size_t)c->nranks;
    if (d.count > SIZE_MAX / es / n) {
        fprintf(stderr, "emu nccl: rank %d: %s: the count overflows a size\n", c->rank, describe(d).c_str());
        return false;
    }
    const size_t b = (size_t)d.count * es;
    switch (d.kind) {
        case OP_BROADCAST:
            return (d.peer != c->rank || check_buffer(c, d, "sendbuff", send, b)) &&
                   check_buffer(c, d, "recvbuff", recv, b);
        case OP_ALL_REDUCE: return check_buffer(c, d, "sendbuff", send, b) && check_buffer(c, d, "recvbuff", recv, b);
        case OP_REDUCE_SCATTER:
            return check_buffer(c, d, "sendbuff", send, n * b) && check_buffer(c, d, "recvbuff", recv, b);
        case OP_ALL_GATHER:
            return check_buffer(c, d, "sendbuff", send, b) && check_buffer(c, d, "recvbuff", recv, n * b);
        case OP_SEND: return check_buffer(c, d, "sendbuff", send, b);
        default: return check_buffer(c, d, "recvbuff", recv, b);
    }
}

/* One rounding per step in the data type, in rank order. */
template <typename T> T combine(T a, T b, int op) {
    switch (op) {
        case ncclProd: return (T)(a * b);
        case ncclMax: return a > b ? a : b;
        case ncclMin: return a < b ? a : b;
        default: return (T)(a + b); /* sum, and avg before its division */
    }
}
template <typename T> void reduce_typed(const char *contrib, size_t stride, int n, size_t count, int op, void *out) {
    std::vector<T> acc(count);
    memcpy(acc.data(), contrib, count * sizeof(T));
    for (int r = 1; r < n; r++) {
        const T *x = (const T *)(contrib + (size_t)r * stride);
        for (size_t i = 0; i < count; i++) {
            T v;
            memcpy(&v, &x[i], sizeof v);
            acc[i] = combine(acc[i], v, op);
        }
    }
    if (op == ncclAvg)
        for (size_t i = 0; i < count; i++) acc[i] = (T)(acc[i] / (T)n);
    memcpy(out, acc.data(), count * sizeof(T));
}
float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
uint16_t float_to_bf16(float f) { /* round to nearest even, NaN kept quiet */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
void reduce_bf16(const char *contrib, size_t stride, int n, size_t count, int op, void *out) {
    std::vector<uint16_t> acc(count);
    memcpy(acc.data(), contrib, count * 2);
    for (int r = 1; r < n; r++) {
        const char *x = contrib + (size_t)r * stride;
        for (size_t i = 0; i < count; i++) {
            uint16_t v;
            memcpy(&v, x + 2 * i, 2);
            acc[i] = float_to_bf16(combine(bf16_to_float(acc[i]), bf16_to_float(v), op));
        }
    }
    if (op == ncclAvg)
        for (size_t i = 0; i < count; i++) acc[i] = float_to_bf16(bf16_to_float(acc[i]) / (float)n);
    memcpy(out, acc.data(), count * 2);
}
/* contrib holds n contributions of count elements, stride bytes apart */
void reduce(int type, const char *contrib, size_t stride, int n, size_t count, int op, void *out) {
    switch (type) {
        case ncclInt8: reduce_typed<int8_t>(contrib, stride, n, count, op, out); break;
        case ncclUint8: reduce_typed<uint8_t>(contrib, stride, n, count, op, out); break;
        case ncclInt32: reduce_typed<int32_t>(contrib, stride, n, count, op, out); break;
        case ncclUint32: reduce_typed<uint32_t>(contrib, stride, n, count, op, out); break;
        case ncclInt64: reduce_typed<int64_t>(contrib, stride, n, count, op, out); break;
        case ncclUint64: reduce_typed<uint64_t>(contrib, stride, n, count, op, out); break;
        case ncclFloat32: reduce_typed<float>(contrib, stride, n, count, op, out); break;
        case ncclFloat64: reduce_typed<double>(contrib, stride, n, count, op, out); break;
        default: reduce_bf16(contrib, stride, n, count, op, out); break;
    }
}

bool same_collective(const OpDesc &a, const OpDesc &b) {
    return a.kind == b.kind && a.type == b.type && a.count == b.count && a.peer == b.peer &&
           ((a.kind != OP_ALL_REDUCE && a.kind != OP_REDUCE_SCATTER) || a.op == b.op);
}

/* Every rank's descriptors -> the first mismatch as a message, "" if none. */
std::string find_mismatch(const std::vector<std::vector<OpDesc>> &all, unsigned long long group) {
    const int n = (int)all.size();
    char buf[600];
    std::vector<std::vector<OpDesc>> coll(n);
    for (int r = 0; r < n; r++)
        for (const OpDesc &d : all[r])
            if (!is_p2p(d.kind)) coll[r].push_back(d);
    for (int r = 1; r < n; r++) {
        size_t k = 0;
        while (k < coll[0].size() && k < coll[r].size() && same_collective(coll[0][k], coll[r][k])) k++;
        if (k == coll[0].size() && k == coll[r].size()) continue;
        std::string a = k < coll[0].size() ? describe(coll[0][k]) : "nothing more";
        std::string b = k < coll[r].size() ? describe(coll[r][k]) : "nothing more";
        snprintf(buf, sizeof buf,
                 "collective mismatch in operation %llu: as collective #%zu of it rank 0 calls %s but rank %d calls "
                 "%s (real NCCL would hang or corrupt memory)",
                 group + 1, k + 1, a.c_str(), r, b.c_str());
        return buf;
    }
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            std::vector<OpDesc> sends, recvs;
            for (const OpDesc &d : all[a])
                if (d.kind == OP_SEND && d.peer == b) sends.push_back(d);
            for (const OpDesc &d : all[b])
                if (d.kind == OP_RECV && d.peer == a) recvs.push_back(d);
            size_t k = 0;
            while (k < sends.size() && k < recvs.size() && sends[k].count == recvs[k].count &&
                   sends[k].type == recvs[k].type)
                k++;
            if (k == sends.size() && k == recvs.size()) continue;
            std::string s = k < sends.size() ? describe(sends[k]) : "no send";
            std::string rv = k < recvs.size() ? describe(recvs[k]) : "no receive";
            snprintf(buf, sizeof buf,
                     "send/recv mismatch in operation %llu: rank %d's send #%zu to rank %d is %s, but rank %d's "
                     "receive #%zu from rank %d is %s (real NCCL would hang or corrupt memory)",
                     group + 1, a, k + 1, b, s.c_str(), b, k + 1, a, rv.c_str());
            return buf;
        }
    return "";
}

/* The descriptors of every rank, rank order. */
ncclResult_t exchange(ncclComm_t c, const std::vector<OpDesc> &mine, std::vector<std::vector<OpDesc>> &all) {
    const int n = c->nranks;
    all.assign(n, {});
    all[c->rank] = mine;
    if (n == 1) return ncclSuccess;
    GroupHdr hdr = {}, *hdrs = new GroupHdr[n]; /* leaked if a wait fails: MPI may still write it */
    memcpy(hdr.magic, "kvncclg", 8);
    hdr.nops = mine.size();
    std::vector<MPI_Request> reqs;
    std::vector<int> peer;
    for (int r = 0; r < n; r++)
        if (r != c->rank) {
            post(reqs, peer, c, false, &hdrs[r], sizeof hdr, r, TAG_HDR);
            post(reqs, peer, c, true, &hdr, sizeof hdr, r, TAG_HDR);
        }
    char what[120];
    snprintf(what, sizeof what, "entering operation %llu (%s%s)", c->groups + 1,
             mine.empty() ? "an empty group" : kOpName[mine[0].kind], mine.size() > 1 ? ", ..." : "");
    ncclResult_t rc = wait_all(c, reqs, peer, what);
    if (rc != ncclSuccess) return rc;
    reqs.clear(), peer.clear();
    for (int r = 0; r < n; r++)
        if (r != c->rank) {
            all[r].resize(hdrs[r].nops);
            post(reqs, peer, c, false, all[r].data(), hdrs[r].nops * sizeof(OpDesc), r, TAG_OPS);
            post(reqs, peer, c, true, mine.data(), mine.size() * sizeof(OpDesc), r, TAG_OPS);
        }
    delete[] hdrs;
    return wait_all(c, reqs, peer, what);
}

/* Moves the data of a checked group; reductions land after every wait. */
ncclResult_t execute(ncclComm_t c, const std::vector<Op> &ops) {
    const int n = c->nranks, me = c->rank;
    std::vector<MPI_Request> reqs;
    std::vector<int> peer;
    std::vector<char *> scratch(ops.size(), nullptr); /* reductions: every rank's contribution */
    std::vector<const Op *> self_sends, self_recvs;   /* matched in order (checked by find_mismatch) */
    for (size_t i = 0; i < ops.size(); i++) {
        const Op &o = ops[i];
        const size_t b = (size_t)o.d.count * type_size(o.d.type);
        if (b == 0) continue;
        switch (o.d.kind) {
            case OP_BROADCAST:
                if (me == o.d.peer) {
                    for (int r = 0; r < n; r++)
                        if (r != me) post(reqs, peer, c, true, o.send, b, r, TAG_COLL);
                } else post(reqs, peer, c, false, o.recv, b, o.d.peer, TAG_COLL);
                break;
            case OP_ALL_GATHER:
                for (int r = 0; r < n; r++)
                    if (r != me) {
                        post(reqs, peer, c, true, o.send, b, r, TAG_COLL);
                        post(reqs, peer, c, false, (char *)o.recv + (size_t)r * b, b, r, TAG_COLL);
                    }
                break;
            case OP_ALL_REDUCE:
            case OP_REDUCE_SCATTER: {
                const bool all = o.d.kind == OP_ALL_REDUCE;
                scratch[i] = (char *)malloc((size_t)n * b);
                if (!scratch[i]) {
                    fprintf(stderr, "emu nccl: rank %d: out of host memory for %s\n", me, describe(o.d).c_str());
                    return ncclSystemError;
                }
                for (int r = 0; r < n; r++)
                    if (r != me) {
                        post(reqs, peer, c, true, (const char *)o.send + (all ? 0 : (size_t)r * b), b, r, TAG_COLL);
                        post(reqs, peer, c, false, scratch[i] + (size_t)r * b, b, r, TAG_COLL);
                    }
                break;
            }
        /* to itself: a copy below (a one-rank communicator has no MPI) */
            case OP_SEND:
                if (o.d.peer == me) self_sends.push_back(&o);
                else post(reqs, peer, c, true, o.send, b, o.d.peer, TAG_P2P);
                break;
            default:
                if (o.d.peer == me) self_recvs.push_back(&o);
                else post(reqs, peer, c, false, o.recv, b, o.d.peer, TAG_P2P);
                break;
        }
    }
    char what[80];
    snprintf(what, sizeof what, "moving the data of operation %llu", c->groups + 1);
    if (!reqs.empty()) {
        ncclResult_t rc = wait_all(c, reqs, peer, what);
        if (rc != ncclSuccess) return rc; /* scratch stays: receives may still land in it */
    }
    /* this rank's own parts; every transfer that reads a send buffer is done */
    for (size_t k = 0; k < self_sends.size() && k < self_recvs.size(); k++)
        memmove(self_recvs[k]->recv, self_sends[k]->send,
                (size_t)self_sends[k]->d.count * type_size(self_sends[k]->d.type));
    for (size_t i = 0; i < ops.size(); i++) {
        const Op &o = ops[i];
        const size_t b = (size_t)o.d.count * type_size(o.d.type);
        if (b == 0) continue;
        switch (o.d.kind) {
            case OP_BROADCAST:
                if (me == o.d.peer && o.send != o.recv) memmove(o.recv, o.send, b);
                break;
            case OP_ALL_GATHER:
                if ((const char *)o.recv + (size_t)me * b != o.send)
                    memmove((char *)o.recv + (size_t)me * b, o.send, b);
                break;
            case OP_ALL_REDUCE:
            case OP_REDUCE_SCATTER: {
                const bool all = o.d.kind == OP_ALL_REDUCE;
                memcpy(scratch[i] + (size_t)me * b, (const char *)o.send + (all ? 0 : (size_t)me * b), b);
                reduce(o.d.type, scratch[i], b, n, (size_t)o.d.count, o.d.op, o.recv);
                break;
            }
            default: break;
        }
        free(scratch[i]);
    }
    return ncclSuccess;
}

ncclResult_t run_group(std::vector<Op> &ops) {
    if (ops.empty()) return ncclSuccess;
    ncclComm_t c = ops[0].comm;
    for (const Op &o : ops)
        if (o.comm != c) {
            fprintf(stderr, "emu nccl: one group spans several communicators; the emulator supports one per group\n");
            return ncclInvalidUsage;
        }
    std::vector<OpDesc> mine;
    for (const Op &o : ops) mine.push_back(o.d);
    std::vector<std::vector<OpDesc>> all;
    ncclResult_t rc = exchange(c, mine, all);
    if (rc == ncclSuccess) {
        std::string bad;
        for (int r = 0; r < c->nranks; r++)
            for (const OpDesc &d : all[r])
                if (d.bad && bad.find(" " + std::to_string(r) + ",") == std::string::npos)
                    bad += " " + std::to_string(r) + ",";
        std::string mismatch = find_mismatch(all, c->groups);
        if (!bad.empty()) {
            bad.pop_back();
            fprintf(stderr,
                    "emu nccl: rank %d: operation %llu fails on every rank: invalid arguments on rank(s)%s (see "
                    "their messages)\n",
                    c->rank, c->groups + 1, bad.c_str());
            rc = ncclInvalidArgument;
        } else if (!mismatch.empty()) {
            fprintf(stderr, "emu nccl: rank %d: %s\n", c->rank, mismatch.c_str());
            rc = ncclInvalidUsage;
        } else rc = execute(c, ops);
    }
    if (rc != ncclSuccess && c->async_error == ncclSuccess) c->async_error = rc;
    c->groups++;
    return rc;
}

/* Queues one operation (or runs it, outside a group). */
ncclResult_t enqueue(OpKind kind, const void *send, void *recv, size_t count, ncclDataType_t type, int op, int peer,
                     ncclComm_t comm, cudaStream_t st) {
    if (!comm) {
        fprintf(stderr, "emu nccl: %s on a NULL communicator\n", kOpName[kind]);
        return ncclInvalidArgument;
    }
    if (comm->aborted) {
        fprintf(stderr, "emu nccl: rank %d: %s on a communicator that ncclCommAbort ended\n", comm->rank,
                kOpName[kind]);
        return ncclInvalidUsage;
    }
    Op o;
    o.d = OpDesc{(int32_t)kind, (int32_t)type, (int32_t)op, (int32_t)peer, (uint64_t)count, 0, 0};
    o.send = send, o.recv = recv, o.comm = comm;
    o.d.bad = !check_op(comm, o.d, send, recv, st);
    /* what it writes belongs to st until another stream is ordered after it */
    if (!o.d.bad && kind != OP_SEND)
        emu::stream_writes(st, recv, count * type_size(type) * (kind == OP_ALL_GATHER ? (size_t)comm->nranks : 1),
                           describe(o.d).c_str());
    if (group_depth > 0) {
        group_ops.push_back(o);
        return ncclSuccess;
    }
    std::vector<Op> one(1, o);
    return run_group(one);
}

} // namespace

extern "C" {

ncclResult_t ncclGetVersion(int *version) {
    if (!version) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
        case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
        case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
        case ncclInvalidArgument: return "invalid argument (the emulated NCCL printed why on stderr)";
        case ncclInvalidUsage: return "invalid usage (the emulated NCCL printed why on stderr)";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
        default: return "unknown result code";
    }
}

/* The id names the job: a magic text, then the creating process and time. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static std::atomic<unsigned> made{0};
    if (!id) return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, kIdMagic, sizeof kIdMagic);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t parts[4] = {(uint64_t)getpid(), (uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec, (uint64_t)made++};
    memcpy(id->internal + 32, parts, sizeof parts);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
    if (!out) return ncclInvalidArgument;
    *out = nullptr;
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        fprintf(stderr, "emu nccl: ncclCommInitRank: rank %d of %d ranks is not a valid rank\n", rank, nranks);
        return ncclInvalidArgument;
    }
    if (memcmp(id.internal, kIdMagic, sizeof kIdMagic) != 0) {
        fprintf(stderr,
                "emu nccl: rank %d: ncclCommInitRank: the ncclUniqueId was not made by ncclGetUniqueId "
                "(uninitialised or corrupted on its way)\n",
                rank);
        return ncclInvalidArgument;
    }
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
        fprintf(stderr, "emu nccl: rank %d: ncclCommInitRank: cudaGetDevice failed\n", rank);
        return ncclUnhandledCudaError;
    }
    ncclComm *c = new ncclComm;
    c->rank = rank, c->nranks = nranks, c->mpi = MPI_COMM_NULL, c->device = device;
    c->aborted = 0, c->async_error = ncclSuccess, c->groups = 0;
    if (nranks == 1) { /* a communicator of its own: NCCL needs no other process for it */
        *out = c;
        return ncclSuccess;
    }
    int inited = 0, world = 0, mpi_rank = -1;
    MPI_Initialized(&inited);
    if (!inited) {
        fprintf(stderr,
                "emu nccl: rank %d: ncclCommInitRank with %d ranks needs MPI: the emulator's ranks are the "
                "processes of MPI_COMM_WORLD (run under mpirun)\n",
                rank, nranks);
        delete c;
        return ncclInvalidUsage;
    }
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
    MPI_Request rq;
    if (MPI_Comm_idup(MPI_COMM_WORLD, &c->mpi, &rq) != MPI_SUCCESS) {
        delete c;
        return ncclSystemError;
    }
    std::vector<MPI_Request> reqs(1, rq);
    std::vector<int> peer(1, -1);
    ncclResult_t rc = wait_all(c, reqs, peer, "ncclCommInitRank (duplicating MPI_COMM_WORLD)");
    if (rc != ncclSuccess) return rc;
    /* every rank's view: the id, nranks and rank it was given, its MPI rank */
    struct Init {
        ncclUniqueId id;
        int32_t nranks, rank, mpi_rank, pad;
    } me = {id, nranks, rank, mpi_rank, 0};
    std::vector<Init> all((size_t)world);
    reqs.clear(), peer.clear();
    c->rank = mpi_rank, c->nranks = world; /* the MPI layout, for the exchange itself */
    for (int r = 0; r < world; r++)
        if (r != mpi_rank) {
            post(reqs, peer, c, false, &all[r], sizeof me, r, TAG_INIT);
            post(reqs, peer, c, true, &me, sizeof me, r, TAG_INIT);
        }
    all[mpi_rank] = me;
    rc = wait_all(c, reqs, peer, "ncclCommInitRank (comparing the ranks' arguments)");
    if (rc != ncclSuccess) return rc;
    c->rank = rank, c->nranks = nranks;
    for (int r = 0; r < world; r++) {
        const Init &v = all[r];
        const char *why = nullptr;
        if (v.nranks != world) why = "nranks differs from the MPI world size (the emulator's ranks are MPI_COMM_WORLD)";
        else if (v.rank != r) why = "its rank differs from its MPI rank";
        else if (memcmp(&v.id, &all[0].id, sizeof v.id) != 0)
            why =
                "its ncclUniqueId differs from rank 0's (one id, made once by ncclGetUniqueId, must reach every rank)";
        if (why) {
            fprintf(stderr,
                    "emu nccl: rank %d: ncclCommInitRank fails on every rank: MPI rank %d called it with "
                    "nranks=%d, rank=%d (MPI world %d): %s\n",
                    mpi_rank, r, v.nranks, v.rank, world, why);
            MPI_Comm_free(&c->mpi);
            delete c;
            return ncclInvalidUsage;
        }
    }
    *out = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    if (group_depth > 0) {
        fprintf(stderr, "emu nccl: rank %d: ncclCommDestroy inside a group (ncclGroupEnd was not called)\n", c->rank);
        return ncclInvalidUsage;
    }
    if (c->aborted) return ncclInvalidUsage; /* ncclCommAbort already ended it */
    if (c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
    delete c;
    return ncclSuccess;
}

/* Ends the communicator, from any thread: a call waiting in it returns with
 * an error. The handle stays allocated (a call on another thread may still
 * be reading it), and every later use of it is refused. */
ncclResult_t ncclCommAbort(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    c->aborted = 1;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err) {
    if (!c || !err) return ncclInvalidArgument;
    *err = (ncclResult_t)c->async_error.load();
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (group_depth <= 0) {
        fprintf(stderr, "emu nccl: ncclGroupEnd without ncclGroupStart\n");
        return ncclInvalidUsage;
    }
    if (--group_depth > 0) return ncclSuccess;
    std::vector<Op> ops;
    ops.swap(group_ops);
    return run_group(ops);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    return enqueue(OP_BROADCAST, sendbuff, recvbuff, count, datatype, -1, root, comm, stream);
}
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    return enqueue(OP_ALL_REDUCE, sendbuff, recvbuff, count, datatype, op, -1, comm, stream);
}
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    return enqueue(OP_REDUCE_SCATTER, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream);
}
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
    return enqueue(OP_ALL_GATHER, sendbuff, recvbuff, sendcount, datatype, -1, -1, comm, stream);
}
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    return enqueue(OP_SEND, sendbuff, nullptr, count, datatype, -1, peer, comm, stream);
}
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    return enqueue(OP_RECV, nullptr, recvbuff, count, datatype, -1, peer, comm, stream);
}
}
