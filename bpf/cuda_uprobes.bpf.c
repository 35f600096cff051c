/* AI flame graphs: uprobes on the CUDA runtime / driver API and NCCL in one target process, plus an on-CPU
 * sampler (cpu-clock perf event) for the same process. Everything is aggregated here, in BPF maps keyed by
 * (user stack id, caller address, probe): no per-event output. aiops/profile/stacks.py reads the maps
 * once per slice (default 100 ms) and takes differences, so each slice can be joined with a GPU utilisation
 * sample.
 *
 * The `gate` (one u32, set by the reader) opens and closes the counting windows of the duty-cycled mode
 * (aiops/profile/duty.py): the uprobes are attached a little before a window and detached after it (a detach
 * takes ~90 ms per link on 6.18, serialised in the kernel), and only the gate says exactly when counting ran,
 * the same instant for every probe. The on-CPU sampler is not gated.
 *
 * TARGET_TGID and SYNC_MASK are set with -D by aiops/profile/probes.py. Probe numbers 0..MAX_PROBES-1 are
 * uprobes (the table lives in aiops/profile/probes.py); CPU_SAMPLE_PROBE is the on-CPU sampler.
 *
 * Why the caller address: at a uprobe on a function's first instruction the callee has not pushed its frame
 * yet, so the kernel's frame-pointer walk (perf_callchain_user, arch/x86/events/core.c) goes from the probed
 * IP straight to the caller's caller: the direct caller's return address sits at [sp] and is read here.
 */
#include <uapi/linux/ptrace.h>
#include <uapi/linux/bpf_perf_event.h>

#define MAX_PROBES 16
#define CPU_SAMPLE_PROBE 31

struct stack_key {
    __s32 user_stack_id;      /* negative: the walk failed (-EFAULT, -EEXIST when the table is full) */
    __u32 probe;
    __u64 caller_ip;          /* return address at [sp] on entry; 0 for CPU samples */
};

struct stack_value {
    __u64 calls;              /* entries (uprobes) or samples (CPU_SAMPLE_PROBE) */
    __u64 blocked_ns;         /* summed entry-to-return time, sync probes only */
};

struct call_start {
    __u64 start_ns;
    struct stack_key key;
};

BPF_STACK_TRACE(stacks, 16384);
BPF_HASH(counts, struct stack_key, struct stack_value, 16384);
BPF_HASH(starts, __u64, struct call_start, 8192);   /* pid_tgid -> open sync call */
BPF_ARRAY(gate, __u32, 1);                          /* 1: count (a window is open), 0: return at once */

static __always_inline int gate_open(void) {
    int zero = 0;
    __u32 *open = gate.lookup(&zero);
    return open && *open;
}

static __always_inline void add(struct stack_key *key, __u64 calls, __u64 blocked_ns) {
    struct stack_value zero = {};
    struct stack_value *value = counts.lookup_or_try_init(key, &zero);
    if (value) {
        __sync_fetch_and_add(&value->calls, calls);
        __sync_fetch_and_add(&value->blocked_ns, blocked_ns);
    }
}

static __always_inline int on_entry(struct pt_regs *ctx, __u32 probe) {
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    if ((pid_tgid >> 32) != TARGET_TGID)
        return 0;
    if (!gate_open()) {
        /* no start may outlive a closed gate: a return seen later must not pair with an older entry */
        if (SYNC_MASK & (1u << probe))
            starts.delete(&pid_tgid);
        return 0;
    }
    struct stack_key key = {};
    key.user_stack_id = stacks.get_stackid(ctx, BPF_F_USER_STACK);
    key.probe = probe;
    bpf_probe_read_user(&key.caller_ip, sizeof(key.caller_ip), (void *)PT_REGS_SP(ctx));
    add(&key, 1, 0);
    if (SYNC_MASK & (1u << probe)) {
        struct call_start start = {};
        start.start_ns = bpf_ktime_get_ns();
        start.key = key;
        starts.update(&pid_tgid, &start);
    }
    return 0;
}

static __always_inline int on_return(struct pt_regs *ctx, __u32 probe) {
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    struct call_start *start = starts.lookup(&pid_tgid);
    if (!start || start->key.probe != probe)
        return 0;
    struct stack_key key = start->key;
    __u64 blocked_ns = bpf_ktime_get_ns() - start->start_ns;
    starts.delete(&pid_tgid);
    add(&key, 0, blocked_ns);
    return 0;
}

#define PROBE(N)                                                                   \
    int probe_entry_##N(struct pt_regs *ctx) { return on_entry(ctx, N); }         \
    int probe_return_##N(struct pt_regs *ctx) { return on_return(ctx, N); }

PROBE(0) PROBE(1) PROBE(2) PROBE(3) PROBE(4) PROBE(5) PROBE(6) PROBE(7)
PROBE(8) PROBE(9) PROBE(10) PROBE(11) PROBE(12) PROBE(13) PROBE(14) PROBE(15)

int cpu_sample(struct bpf_perf_event_data *ctx) {
    __u64 pid_tgid = bpf_get_current_pid_tgid();
    if ((pid_tgid >> 32) != TARGET_TGID)
        return 0;
    struct stack_key key = {};
    key.user_stack_id = stacks.get_stackid(&ctx->regs, BPF_F_USER_STACK);
    key.probe = CPU_SAMPLE_PROBE;
    add(&key, 1, 0);
    return 0;
}
