/* Map layouts of the lanes classifier, shared by bpf/lanes.bpf.c and its Python loader.
 *
 * The ctypes mirror is aiops/datapath/abi.py: change both together. The loader checks every
 * pinned map's key and value sizes against the mirror (BPF_OBJ_GET_INFO_BY_FD) before it touches a map.
 *
 * IPv4 and IPv6 have their own 5-tuple hash and LPM trie: IPv4 keys are 4-byte addresses, which hash and
 * compare faster than 16-byte ones (the common case pays for IPv4 only). flow_lane, written on SYNs only,
 * keeps 16-byte addresses with IPv4 as v4-mapped IPv6 (::ffff:a.b.c.d, RFC 4291 2.5.5.2).
 */
#ifndef AIOPS_LANES_H
#define AIOPS_LANES_H

#define LANE_VIP 0
#define LANE_STANDARD 1
#define LANE_BULK 2
#define N_LANES 3

#define MAX_RULES 256          /* per-rule counter slots; rule_index < MAX_RULES */
#define MAX_TUPLE_RULES 1024
#define MAX_CGROUP_RULES 1024
#define MAX_PREFIX_RULES 4096
#define MAX_CGROUP_LEVEL 8     /* ancestor levels searched for cgroup rules */
#define FLOW_LANE_ENTRIES 16384

/* lanes_config.kinds: which classification stages have rules (empty stages are skipped). */
#define KIND_TUPLE_EXACT 0x1   /* proto, saddr, daddr, sport, dport */
#define KIND_TUPLE_ANY_SPORT 0x2 /* sport = 0 in the key */
#define KIND_TUPLE_ANY_SRC 0x4 /* saddr = :: and sport = 0 in the key */
#define KIND_DSCP 0x8
#define KIND_CGROUP 0x10
#define KIND_PREFIX 0x20

#define DSCP_KEEP 0xff         /* lanes_config.vip_dscp: leave the DSCP of VIP packets alone */

struct lane_match {            /* value of every rule map */
    __u32 lane;                /* LANE_* */
    __u32 rule_index;          /* position in the policy: stats slot rule_index * N_LANES + lane */
};

struct tuple4_key {            /* tuple4_rules key; zeroed fields are wildcards per KIND_TUPLE_* */
    __u32 saddr;               /* network order */
    __u32 daddr;
    __u16 sport;               /* host order */
    __u16 dport;
    __u8 proto;
    __u8 pad[3];
};

struct prefix4_key {           /* prefix4_rules key (BPF_MAP_TYPE_LPM_TRIE) */
    __u32 prefixlen;
    __u32 addr;                /* network order */
};

struct tuple_key {             /* tuple6_rules and flow_lane key; zeroed fields are wildcards */
    __u32 saddr[4];            /* network order words */
    __u32 daddr[4];
    __u16 sport;               /* host order */
    __u16 dport;               /* host order */
    __u8 proto;                /* IPPROTO_TCP, IPPROTO_UDP */
    __u8 pad[3];
};

struct prefix_key {            /* prefix6_rules key (BPF_MAP_TYPE_LPM_TRIE) */
    __u32 prefixlen;
    __u32 addr[4];             /* network order words */
};

struct dscp_entry {            /* dscp_rules value, indexed by DSCP 0..63 */
    __u32 valid;
    struct lane_match match;
};

struct lanes_config {          /* config[0] */
    __u32 kinds;               /* KIND_* */
    __u32 cgroup_levels;       /* bit L set: some cgroup rule sits at ancestor level L */
    struct lane_match fallback;/* the default rule */
    __u32 classid[N_LANES];    /* HTB class id (major:minor) returned for each lane */
    __u32 vip_dscp;            /* DSCP written into VIP packets, or DSCP_KEEP */
    __u32 ecn_enabled;         /* mark CE on standard/bulk when their budget is exceeded */
    __u32 rule_count;          /* rules in the policy: readers sum stats over these slots only */
    __u32 generation;          /* bumped by every rule update (the control plane's change counter) */
};

/* One per-CPU counter update per packet: stats[rule_index * N_LANES + lane]. Per-lane totals are sums over
 * rules, per-rule totals sums over lanes (a live update can move a rule to another lane). */
#define STATS_SLOTS (MAX_RULES * N_LANES)

struct counters {              /* per-CPU value of stats */
    __u64 packets;
    __u64 bytes;
    __u64 ce_marks;            /* packets this program marked CE */
    __u64 not_ect;             /* over budget but not ECN-capable: could not be marked */
};

struct lane_budget {           /* lane_budget[lane]: the ECN token bucket, as a virtual queue */
    __u64 rate_bytes_per_s;    /* 0 disables marking for the lane */
    __u64 threshold_ns;        /* bucket depth in time: mark when the virtual queue is longer */
    __u64 vq_until_ns;         /* when the virtual queue drains (ktime); racy by design, see lanes.bpf.c */
    __u64 clock_ns;            /* the newest clock reading of this lane: a lower bound of now */
};

/* Per-socket cache of a classification (BPF_MAP_TYPE_SK_STORAGE, not pinned: it lives and dies with the
 * program and with each socket). Valid while the packet's tuple and DSCP equal the ones it was made for and
 * config.generation has not moved: a live rule update invalidates every entry at once. */
struct sock_lane {
    struct tuple_key tuple;    /* the packet it was made for (an unconnected UDP socket changes peers) */
    __u32 dscp;
    __u32 generation;          /* config.generation at classification; 0 = empty (sync starts at 1) */
    struct lane_match match;
};

#endif
