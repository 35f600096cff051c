/* TCP flow telemetry from tracepoints (no kprobes): tcp:tcp_probe gives srtt and cwnd on every ACK a sender
 * processes, tcp:tcp_retransmit_skb every retransmission. Per-CPU hash keyed by the flow; the collector
 * (collectors/ebpf/tcp_probe.py) reads and clears it every interval, so the map stays small and the cost per
 * event is one per-CPU hash update. Field layouts come from tracefs at load time (bcc), not from headers.
 */
#include <uapi/linux/bpf.h>
#include <linux/socket.h>

struct flow_key {
    __u32 saddr[4];            /* network order; IPv4 as v4-mapped IPv6 */
    __u32 daddr[4];
    __u16 sport;               /* host order (the tracepoints store ntohs) */
    __u16 dport;
    __u32 pad;
};

struct flow_stats {
    __u64 samples;             /* tcp_probe events */
    __u64 srtt_us_sum;
    __u64 srtt_us_max;
    __u64 cwnd_sum;
    __u64 cwnd_last;
    __u64 last_ns;             /* ktime of the last tcp_probe event (picks the freshest CPU's cwnd) */
    __u64 retransmits;
};

BPF_PERCPU_HASH(flows, struct flow_key, struct flow_stats, 16384);

static __always_inline void from_sockaddr(__u32 *out, const __u8 *sockaddr, __u16 family) {
    if (family == AF_INET) {
        out[0] = 0;
        out[1] = 0;
        out[2] = bpf_htonl(0xffff);
        __builtin_memcpy(&out[3], sockaddr + 4, 4); /* struct sockaddr_in: family, port, addr */
    } else {
        __builtin_memcpy(out, sockaddr + 8, 16); /* struct sockaddr_in6: family, port, flowinfo, addr */
    }
}

static __always_inline struct flow_stats *stats_for(struct flow_key *key) {
    struct flow_stats zero = {};
    struct flow_stats *s = flows.lookup(key);
    if (s)
        return s;
    flows.update(key, &zero);
    return flows.lookup(key);
}

TRACEPOINT_PROBE(tcp, tcp_probe) {
    struct flow_key key = {};
    if (args->family != AF_INET && args->family != AF_INET6)
        return 0;
    from_sockaddr(key.saddr, args->saddr, args->family);
    from_sockaddr(key.daddr, args->daddr, args->family);
    key.sport = args->sport;
    key.dport = args->dport;
    struct flow_stats *s = stats_for(&key);
    if (!s)
        return 0;
    s->samples += 1;
    s->srtt_us_sum += args->srtt;
    if (args->srtt > s->srtt_us_max)
        s->srtt_us_max = args->srtt;
    s->cwnd_sum += args->snd_cwnd;
    s->cwnd_last = args->snd_cwnd;
    s->last_ns = bpf_ktime_get_ns();
    return 0;
}

TRACEPOINT_PROBE(tcp, tcp_retransmit_skb) {
    struct flow_key key = {};
    if (args->family == AF_INET) {
        key.saddr[2] = key.daddr[2] = bpf_htonl(0xffff);
        __builtin_memcpy(&key.saddr[3], args->saddr, 4);
        __builtin_memcpy(&key.daddr[3], args->daddr, 4);
    } else if (args->family == AF_INET6) {
        __builtin_memcpy(key.saddr, args->saddr_v6, 16);
        __builtin_memcpy(key.daddr, args->daddr_v6, 16);
    } else {
        return 0;
    }
    key.sport = args->sport;
    key.dport = args->dport;
    struct flow_stats *s = stats_for(&key);
    if (s)
        s->retransmits += 1;
    return 0;
}
