/* Per-rank timing: uprobe + uretprobe pairs on libnccl's collective entry points and libcudart's
 * synchronisation calls, attached by library file (every process that maps it, pid -1), aggregated here per
 * (process, probe): calls, nanoseconds blocked between entry and return, and bytes (collectives: count x the
 * datatype's size). No per-call output: aiops/profile/rank_probes.py reads the maps once per window.
 *
 * The `gate` (one u32 set by the reader) says when a window is open (aiops/profile/duty.py's Cycler attaches
 * the links a little before and detaches the hot ones after). A return seen while the gate is closed adds
 * nothing (the reader adds the time of calls still open at the close itself, from `starts`, clipped there).
 *
 * ncclCommInitRank / ncclCommInitRankConfig (INIT_MASK) are recorded whatever the gate: their rank (3rd
 * integer register: the 128-byte ncclUniqueId before it is passed in memory, SysV x86-64 ABI) and nranks, the
 * largest communicator a process joins being its world.
 *
 * cudaMemcpy (kind copy) is timed like the synchronisation calls: it returns when the copy is done.
 *
 * Probe numbers are the index of aiops/profile/rank_probes.py's RANK_PROBES; BYTES_ARG2_MASK: count and
 * datatype are the 2nd and 3rd arguments (ncclSend/ncclRecv), otherwise the 3rd and 4th (ncclAllReduce, ...).
 */
#include <uapi/linux/ptrace.h>

#define MAX_PROBES 16

struct rank_key {
    __u32 tgid;
    __u32 probe;
};

struct rank_value {
    __u64 calls;
    __u64 blocked_ns;
    __u64 bytes;
};

struct start_key {
    __u64 pid_tgid;
    __u32 probe;
    __u32 pad;
};

struct comm_info {
    __s32 rank;
    __s32 nranks;
};

BPF_HASH(counts, struct rank_key, struct rank_value, 8192);
BPF_HASH(starts, struct start_key, __u64, 16384);   /* open call -> bpf_ktime_get_ns() at entry */
BPF_HASH(ranks, __u32, struct comm_info, 4096);     /* tgid -> its widest communicator */
BPF_ARRAY(gate, __u32, 1);

static __always_inline int gate_open(void) {
    int zero = 0;
    __u32 *open = gate.lookup(&zero);
    return open && *open;
}

static __always_inline __u64 datatype_bytes(__u64 datatype) {
    /* ncclDataType_t (nccl.h): int8 uint8 int32 uint32 int64 uint64 float16 float32 float64 bfloat16
     * float8e4m3 float8e5m2 */
    switch (datatype) {
    case 0: case 1: case 10: case 11: return 1;
    case 6: case 9: return 2;
    case 2: case 3: case 7: return 4;
    case 4: case 5: case 8: return 8;
    default: return 0;
    }
}

static __always_inline int on_entry(struct pt_regs *ctx, __u32 probe) {
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    __u32 tgid = pid_tgid >> 32;
    if (INIT_MASK & (1u << probe)) {
        struct comm_info info = {};
        info.nranks = (__s32)PT_REGS_PARM2(ctx);
        info.rank = (__s32)PT_REGS_PARM3(ctx);
        struct comm_info *seen = ranks.lookup(&tgid);
        if (!seen || seen->nranks <= info.nranks)
            ranks.update(&tgid, &info);
    }
    if (!gate_open())
        return 0;
    struct rank_key key = {.tgid = tgid, .probe = probe};
    struct rank_value zero = {};
    struct rank_value *value = counts.lookup_or_try_init(&key, &zero);
    if (value) {
        __sync_fetch_and_add(&value->calls, 1);
        __u64 bytes = 0;
        if (BYTES_ARG2_MASK & (1u << probe))
            bytes = PT_REGS_PARM2(ctx) * datatype_bytes(PT_REGS_PARM3(ctx));
        else if (BYTES_ARG3_MASK & (1u << probe))
            bytes = PT_REGS_PARM3(ctx) * datatype_bytes(PT_REGS_PARM4(ctx));
        if (bytes)
            __sync_fetch_and_add(&value->bytes, bytes);
    }
    struct start_key start = {.pid_tgid = pid_tgid, .probe = probe};
    __u64 now = bpf_ktime_get_ns();
    starts.update(&start, &now);
    return 0;
}

static __always_inline int on_return(struct pt_regs *ctx, __u32 probe) {
    struct start_key start = {.pid_tgid = bpf_get_current_pid_tgid(), .probe = probe};
    __u64 *started = starts.lookup(&start);
    if (!started)
        return 0;
    __u64 blocked_ns = bpf_ktime_get_ns() - *started;
    starts.delete(&start);
    if (!gate_open())
        return 0;  /* the reader counted it up to the close */
    struct rank_key key = {.tgid = start.pid_tgid >> 32, .probe = probe};
    struct rank_value zero = {};
    struct rank_value *value = counts.lookup_or_try_init(&key, &zero);
    if (value)
        __sync_fetch_and_add(&value->blocked_ns, blocked_ns);
    return 0;
}

#define PROBE(N)                                                                   \
    int probe_entry_##N(struct pt_regs *ctx) { return on_entry(ctx, N); }         \
    int probe_return_##N(struct pt_regs *ctx) { return on_return(ctx, N); }

PROBE(0) PROBE(1) PROBE(2) PROBE(3) PROBE(4) PROBE(5) PROBE(6) PROBE(7)
PROBE(8) PROBE(9) PROBE(10) PROBE(11) PROBE(12)
