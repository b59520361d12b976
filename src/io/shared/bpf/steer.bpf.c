// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
// The XDP program of shared-address mode: it hands the CM's TCP segments to
// the CM's AF_XDP socket and passes everything else to the kernel.
//
// Read first: src/io/shared/xsk.hpp (who loads it and fills its maps), the kernel's
// Documentation/networking/af_xdp.rst, and bpf_redirect_map in bpf-helpers(7).
// A segment is the CM's when its destination (address, port) is in cm_ports,
// or (unspecified address of its family, port) is: a wildcard listener. The
// CM puts there its listening ports and the local ports of its own
// connections; the kernel's own sockets never hold these ports because the CM
// reserves each of them with a bound kernel socket (src/io/shared/ports.hpp).
//
// Parsed: Ethernet, at most one 802.1Q tag, IPv4 with options (not a later
// fragment), IPv6 whose next header is TCP (extension headers are not
// followed: such a packet goes to the kernel), TCP. A packet the program
// cannot read to its TCP ports is passed.
//
// If no AF_XDP socket is bound for the receive queue (the CM died), the
// redirect's fallback action is XDP_PASS: the kernel sees the segment, and
// answers with a reset as for any port without a listener.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
// libbpf's helpers after the kernel's types they use.
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

// The key of cm_ports; the same layout as PortKey in src/io/shared/xsk.cpp.
struct cm_port_key {
    __u8 family;  // 4 or 6
    __u8 pad;
    __be16 port;
    __u8 addr[16];  // IPv4 in the first 4 bytes, the rest zero
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __type(key, struct cm_port_key);
    __type(value, __u32);
    __uint(max_entries, 65536);
} cm_ports SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_XSKMAP);
    __type(key, __u32);
    __type(value, __u32);
    __uint(max_entries, 64);
} cm_xsks SEC(".maps");

struct vlan_tag {
    __be16 tci;
    __be16 proto;
};

static __always_inline int is_ours(struct cm_port_key *key) {
    if (bpf_map_lookup_elem(&cm_ports, key)) return 1;
    __builtin_memset(key->addr, 0, sizeof key->addr);
    return bpf_map_lookup_elem(&cm_ports, key) != 0;
}

SEC("xdp")
int iwcm_steer(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end) return XDP_PASS;
    void *next = eth + 1;
    __be16 proto = eth->h_proto;
    if (proto == bpf_htons(ETH_P_8021Q)) {
        struct vlan_tag *tag = next;
        if ((void *)(tag + 1) > end) return XDP_PASS;
        proto = tag->proto;
        next = tag + 1;
    }
    struct cm_port_key key = {};
    if (proto == bpf_htons(ETH_P_IP)) {
        struct iphdr *ip = next;
        if ((void *)(ip + 1) > end) return XDP_PASS;
        if (ip->protocol != IPPROTO_TCP || ip->ihl < 5) return XDP_PASS;
        // A later fragment has no TCP header; the kernel reassembles.
        if (ip->frag_off & bpf_htons(0x1FFF)) return XDP_PASS;
        key.family = 4;
        __builtin_memcpy(key.addr, &ip->daddr, 4);
        next = (__u8 *)ip + ip->ihl * 4;
    } else if (proto == bpf_htons(ETH_P_IPV6)) {
        struct ipv6hdr *ip6 = next;
        if ((void *)(ip6 + 1) > end) return XDP_PASS;
        if (ip6->nexthdr != IPPROTO_TCP) return XDP_PASS;
        key.family = 6;
        __builtin_memcpy(key.addr, &ip6->daddr, 16);
        next = ip6 + 1;
    } else {
        return XDP_PASS;
    }
    struct tcphdr *tcp = next;
    if ((void *)(tcp + 1) > end) return XDP_PASS;
    key.port = tcp->dest;
    if (!is_ours(&key)) return XDP_PASS;
    return bpf_redirect_map(&cm_xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
