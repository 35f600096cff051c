/* Lanes classifier: a cls_bpf filter (classic mode) under a NIC's HTB root that returns the HTB class id of
 * the packet's lane. Loaded by aiops/datapath/loader.py with bcc; map layouts in lanes.h.
 *
 * Classification, first match wins:
 *   1. explicit 5-tuple rules (exact, then any source port, then any source address and port)
 *   2. DSCP of the packet (NCCL_IB_TC / IP_TOS set by the job)
 *   3. the sending socket's cgroup v2 (bpf_skb_cgroup_id), deepest ancestor level first
 *   4. destination prefix in an LPM trie (peer sets -> vip, storage -> bulk)
 *   5. the default rule in config
 * Every rule lives in a map the control plane updates live; nothing here needs a reload.
 *
 * Fast path: a packet sent from a local socket finds its socket's last decision in socket storage
 * (sock_lane) and skips the stages when its tuple, DSCP and the rules' generation are unchanged: an
 * established flow pays one storage look-up instead of up to six map look-ups. Packets without a full socket
 * (forwarded, SYN-ACKs of request sockets, time-wait RSTs) are classified every time.
 *
 * Fail-open: whenever something is missing (no config, unparsable packet) the program returns 0, which in
 * classic mode means "no match" and HTB puts the packet into its default class; traffic always flows.
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/in.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/ipv6.h>
#include <uapi/linux/pkt_cls.h>
#include <linux/tcp.h>
#include <uapi/linux/udp.h>

#include "lanes.h"

BPF_ARRAY(config, struct lanes_config, 1);
BPF_HASH(tuple4_rules, struct tuple4_key, struct lane_match, MAX_TUPLE_RULES);
BPF_HASH(tuple6_rules, struct tuple_key, struct lane_match, MAX_TUPLE_RULES);
BPF_ARRAY(dscp_rules, struct dscp_entry, 64);
BPF_HASH(cgroup_rules, __u64, struct lane_match, MAX_CGROUP_RULES);
BPF_LPM_TRIE(prefix4_rules, struct prefix4_key, struct lane_match, MAX_PREFIX_RULES);
BPF_LPM_TRIE(prefix6_rules, struct prefix_key, struct lane_match, MAX_PREFIX_RULES);
BPF_PERCPU_ARRAY(stats, struct counters, STATS_SLOTS);
BPF_ARRAY(lane_budget, struct lane_budget, N_LANES);
/* lane of each TCP connection at its SYN, for attributing tcp_probe/retransmit samples to lanes */
BPF_TABLE("lru_hash", struct tuple_key, struct lane_match, flow_lane, FLOW_LANE_ENTRIES);
BPF_SK_STORAGE(sock_lane, struct sock_lane);


struct parsed {
    void *l3;                  /* the IPv4 or IPv6 header, for building keys only when a stage needs them */
    __u16 sport, dport;        /* host order; 0 when not TCP/UDP or not the first fragment */
    __u8 proto;
    __u8 dscp;
    __u8 ecn_capable;
    __u8 is_syn;
    __u8 is_ipv6;
};

/* 16-byte address words, IPv4 as v4-mapped (::ffff:a.b.c.d) */
static __always_inline void addr_words(struct parsed *p, __u32 *out, int dst) {
    if (p->is_ipv6) {
        struct ipv6hdr *ip6 = p->l3;
        __builtin_memcpy(out, dst ? (void *)&ip6->daddr : (void *)&ip6->saddr, 16);
        return;
    }
    struct iphdr *ip = p->l3;
    out[0] = 0;
    out[1] = 0;
    out[2] = bpf_htonl(0xffff);
    out[3] = dst ? ip->daddr : ip->saddr;
}

static __always_inline int parse_ports(void *l4, void *data_end, struct parsed *p) {
    if (p->proto == IPPROTO_TCP) {
        struct tcphdr *tcp = l4;
        if ((void *)(tcp + 1) > data_end)
            return 0;
        p->sport = bpf_ntohs(tcp->source);
        p->dport = bpf_ntohs(tcp->dest);
        p->is_syn = tcp->syn;
    } else if (p->proto == IPPROTO_UDP) {
        struct udphdr *udp = l4;
        if ((void *)(udp + 1) > data_end)
            return 0;
        p->sport = bpf_ntohs(udp->source);
        p->dport = bpf_ntohs(udp->dest);
    }
    return 0;
}

/* Returns 0 when the packet is IPv4/IPv6 and `p` is filled, -1 otherwise. */
static __always_inline int parse(struct __sk_buff *skb, struct parsed *p) {
    void *data = (void *)(long)skb->data;
    void *data_end = (void *)(long)skb->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > data_end)
        return -1;
    if (eth->h_proto == bpf_htons(ETH_P_IP)) {
        struct iphdr *ip = (void *)(eth + 1);
        if ((void *)(ip + 1) > data_end)
            return -1;
        p->l3 = ip;
        p->proto = ip->protocol;
        p->dscp = ip->tos >> 2;
        p->ecn_capable = (ip->tos & 3) != 0;
        /* ports only in the first fragment (offset 0); RFC 791 */
        if ((ip->frag_off & bpf_htons(0x1fff)) == 0 && ip->ihl == 5)
            parse_ports(ip + 1, data_end, p);
        return 0;
    }
    if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
        struct ipv6hdr *ip6 = (void *)(eth + 1);
        if ((void *)(ip6 + 1) > data_end)
            return -1;
        p->l3 = ip6;
        p->proto = ip6->nexthdr; /* extension headers: no ports, classified without them */
        __u32 tclass = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
        p->dscp = tclass >> 2;
        p->ecn_capable = (tclass & 3) != 0;
        p->is_ipv6 = 1;
        parse_ports(ip6 + 1, data_end, p);
        return 0;
    }
    return -1;
}

static __always_inline void build_tuple(struct parsed *p, struct tuple_key *key) {
    addr_words(p, key->saddr, 0);
    addr_words(p, key->daddr, 1);
    key->sport = p->sport;
    key->dport = p->dport;
    key->proto = p->proto;
}

/* exact, then any source port, then any source address and port (bcc cannot take map calls in a macro,
 * hence the two spelled-out copies) */
static __always_inline struct lane_match *match_tuple4(struct lanes_config *cfg, struct parsed *p) {
    struct lane_match *m;
    struct iphdr *ip = p->l3;
    struct tuple4_key key = {.saddr = ip->saddr, .daddr = ip->daddr, .sport = p->sport, .dport = p->dport,
                             .proto = p->proto};
    if (cfg->kinds & KIND_TUPLE_EXACT) {
        m = tuple4_rules.lookup(&key);
        if (m)
            return m;
    }
    key.sport = 0;
    if (cfg->kinds & KIND_TUPLE_ANY_SPORT) {
        m = tuple4_rules.lookup(&key);
        if (m)
            return m;
    }
    key.saddr = 0;
    if (cfg->kinds & KIND_TUPLE_ANY_SRC)
        return tuple4_rules.lookup(&key);
    return NULL;
}

static __always_inline struct lane_match *match_tuple6(struct lanes_config *cfg, struct parsed *p) {
    struct lane_match *m;
    struct tuple_key key = {};
    build_tuple(p, &key);
    if (cfg->kinds & KIND_TUPLE_EXACT) {
        m = tuple6_rules.lookup(&key);
        if (m)
            return m;
    }
    key.sport = 0;
    if (cfg->kinds & KIND_TUPLE_ANY_SPORT) {
        m = tuple6_rules.lookup(&key);
        if (m)
            return m;
    }
    key.saddr[0] = key.saddr[1] = key.saddr[2] = key.saddr[3] = 0;
    if (cfg->kinds & KIND_TUPLE_ANY_SRC)
        return tuple6_rules.lookup(&key);
    return NULL;
}

static __always_inline struct lane_match *match_cgroup(struct __sk_buff *skb, struct lanes_config *cfg) {
    __u64 id = bpf_skb_cgroup_id(skb);
    if (id == 0)
        return NULL; /* no socket (forwarded traffic) */
    struct lane_match *m = cgroup_rules.lookup(&id);
    if (m)
        return m;
#pragma unroll
    for (int level = MAX_CGROUP_LEVEL; level >= 1; level--) {
        if (!(cfg->cgroup_levels & (1u << level)))
            continue;
        __u64 ancestor = bpf_skb_ancestor_cgroup_id(skb, level);
        if (ancestor == 0 || ancestor == id)
            continue;
        m = cgroup_rules.lookup(&ancestor);
        if (m)
            return m;
    }
    return NULL;
}

static __always_inline struct lane_match *classify(struct __sk_buff *skb, struct lanes_config *cfg,
                                                   struct parsed *p) {
    struct lane_match *m;
    if (cfg->kinds & (KIND_TUPLE_EXACT | KIND_TUPLE_ANY_SPORT | KIND_TUPLE_ANY_SRC)) {
        m = p->is_ipv6 ? match_tuple6(cfg, p) : match_tuple4(cfg, p);
        if (m)
            return m;
    }
    if (cfg->kinds & KIND_DSCP) {
        __u32 dscp = p->dscp & 63;
        struct dscp_entry *d = dscp_rules.lookup(&dscp);
        if (d && d->valid)
            return &d->match;
    }
    if (cfg->kinds & KIND_CGROUP) {
        m = match_cgroup(skb, cfg);
        if (m)
            return m;
    }
    if (cfg->kinds & KIND_PREFIX) {
        if (p->is_ipv6) {
            struct prefix_key key6 = {.prefixlen = 128};
            addr_words(p, key6.addr, 1);
            m = prefix6_rules.lookup(&key6);
        } else {
            struct iphdr *ip = p->l3;
            struct prefix4_key key4 = {.prefixlen = 32, .addr = ip->daddr};
            m = prefix4_rules.lookup(&key4);
        }
        if (m)
            return m;
    }
    return &cfg->fallback;
}

static __always_inline int same_tuple(struct tuple_key *a, struct tuple_key *b) {
    return a->daddr[3] == b->daddr[3] && a->saddr[3] == b->saddr[3] && a->sport == b->sport &&
           a->dport == b->dport && a->proto == b->proto && a->daddr[0] == b->daddr[0] &&
           a->daddr[1] == b->daddr[1] && a->daddr[2] == b->daddr[2] && a->saddr[0] == b->saddr[0] &&
           a->saddr[1] == b->saddr[1] && a->saddr[2] == b->saddr[2];
}

/* The socket's cached decision when it still applies, else a fresh classification (cached for next time).
 * Build with -DAIOPS_NO_SOCK_CACHE to classify every packet (bench/classifier.py's worst case). */
static __always_inline struct lane_match decide(struct __sk_buff *skb, struct lanes_config *cfg,
                                                struct parsed *p) {
#ifdef AIOPS_NO_SOCK_CACHE
    return *classify(skb, cfg, p);
#else
    __u32 generation = cfg->generation;
    struct sock_lane *cached = NULL;
    struct bpf_sock *sk = skb->sk;
    if (sk && generation != 0)
        sk = bpf_sk_fullsock(sk);
    if (sk && generation != 0)
        cached = sock_lane.sk_storage_get(sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
    if (!cached)
        return *classify(skb, cfg, p);
    struct tuple_key tuple = {};
    build_tuple(p, &tuple);
    if (cached->generation == generation && cached->dscp == p->dscp && same_tuple(&cached->tuple, &tuple))
        return cached->match;
    struct lane_match decision = *classify(skb, cfg, p);
    /* plain stores: only this socket's packets write here, and a torn entry fails the check above */
    cached->tuple = tuple;
    cached->dscp = p->dscp;
    cached->match = decision;
    cached->generation = generation;
    return decision;
#endif
}

static __always_inline void count(struct counters *c, __u64 bytes, __u64 marked, __u64 not_ect) {
    if (!c)
        return;
    c->packets += 1;
    c->bytes += bytes;
    c->ce_marks += marked;
    c->not_ect += not_ect;
}

/* The ECN budget: a virtual queue drained at the lane's budget rate. A packet over budget (the virtual
 * queue is longer than threshold_ns) is marked CE. Concurrent CPUs race on vq_until_ns: the reset to `now`
 * is a plain store and the increment an atomic add, so a race loses at most one packet's worth of
 * backlog. That is accurate enough for a congestion signal and needs no lock.
 *
 * Most packets need no clock. The backlog seen at time t, max(until, t) - t, only shrinks as t grows, so
 * measured at clock_ns (an earlier reading, a lower bound of now) it is an upper bound of the true backlog:
 * when even that bound is within threshold_ns the packet is under budget, whatever the time. Only a packet
 * near the threshold reads the clock, so a lane below its budget reads it about once per threshold_ns of
 * budget bytes (2 ms at the default: once per 2.5 MB at 10 Gbit/s). The price: on the clock-free path an
 * emptied queue restarts from clock_ns instead of now, so a burst after an idle spell is told to slow
 * down after at most 2 x threshold_ns of backlog instead of 1 x. */
static __always_inline int over_budget(struct __sk_buff *skb, __u32 lane, __u64 len) {
    struct lane_budget *b = lane_budget.lookup(&lane);
    if (!b || b->rate_bytes_per_s == 0)
        return 0;
    __u64 delay_ns = len * 1000000000ULL / b->rate_bytes_per_s;
    __u64 earlier_ns = b->clock_ns;
    __u64 until = b->vq_until_ns;
    if (until < earlier_ns)
        until = earlier_ns;
    if (until + delay_ns - earlier_ns <= b->threshold_ns) {
        b->vq_until_ns = until + delay_ns;
        return 0;
    }
    /* TCP stamps every skb with its departure time on CLOCK_MONOTONIC (tcp_wstamp_ns, net/ipv4/tcp_output.c),
     * the clock of bpf_ktime_get_ns: use it when present, it saves a clock read. A departure time may lie
     * ahead of the clock (EDT pacing), so only a real reading becomes clock_ns, the lower bound. */
    __u64 now = skb->tstamp;
    if (skb->tstamp_type != BPF_SKB_TSTAMP_DELIVERY_MONO || now == 0) {
        now = bpf_ktime_get_ns();
        b->clock_ns = now;
    }
    until = b->vq_until_ns;
    if (until < now) {
        b->vq_until_ns = now;
        until = now;
    }
    __sync_fetch_and_add(&b->vq_until_ns, delay_ns);
    return until + delay_ns - now > b->threshold_ns;
}

static __always_inline void set_dscp(struct __sk_buff *skb, struct parsed *p, __u32 dscp) {
    __u16 old_word, new_word;
    if (bpf_skb_load_bytes(skb, ETH_HLEN, &old_word, 2) < 0)
        return;
    if (p->is_ipv6) {
        /* version(4) | traffic class(8) | flow label: DSCP is bits 4..9 of the first word */
        __u16 host = bpf_ntohs(old_word);
        host = (host & 0xf03f) | ((dscp & 63) << 6);
        new_word = bpf_htons(host);
        bpf_skb_store_bytes(skb, ETH_HLEN, &new_word, 2, 0);
        return;
    }
    __u16 host = bpf_ntohs(old_word);
    host = (host & 0xff03) | ((dscp & 63) << 2);
    new_word = bpf_htons(host);
    bpf_l3_csum_replace(skb, ETH_HLEN + offsetof(struct iphdr, check), old_word, new_word, 2);
    bpf_skb_store_bytes(skb, ETH_HLEN, &new_word, 2, 0);
}

int lanes_classify(struct __sk_buff *skb) {
    __u32 zero = 0;
    struct lanes_config *cfg = config.lookup(&zero);
    if (!cfg)
        return 0;
    struct parsed p = {};
    if (parse(skb, &p) < 0)
        return 0;
    struct lane_match decision = decide(skb, cfg, &p);
    struct lane_match *m = &decision;
    __u32 lane = m->lane;
    __u32 rule_index = m->rule_index;
    if (lane >= N_LANES || rule_index >= MAX_RULES)
        return 0;
    if (p.is_syn && p.proto == IPPROTO_TCP) {
        struct tuple_key flow = {};
        build_tuple(&p, &flow);
        flow_lane.update(&flow, m);
    }

    __u64 len = skb->len;
    __u64 marked = 0, not_ect = 0;
    if (lane != LANE_VIP && cfg->ecn_enabled && over_budget(skb, lane, len)) {
        if (p.ecn_capable && bpf_skb_ecn_set_ce(skb))
            marked = 1;
        else
            not_ect = 1;
    }
    __u32 slot = rule_index * N_LANES + lane;
    count(stats.lookup(&slot), len, marked, not_ect);
    if (lane == LANE_VIP && cfg->vip_dscp != DSCP_KEEP && p.dscp != cfg->vip_dscp)
        set_dscp(skb, &p, cfg->vip_dscp);
    /* constant indices: the verifier cannot always see the earlier lane < N_LANES check here */
    if (lane == LANE_VIP)
        return cfg->classid[LANE_VIP];
    if (lane == LANE_BULK)
        return cfg->classid[LANE_BULK];
    return cfg->classid[LANE_STANDARD];
}
