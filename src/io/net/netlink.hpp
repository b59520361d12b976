// The kernel's tables over rtnetlink: links, addresses, routes, neighbours,
// and their change notifications. Used when the CM shares the host's address
// (the kernel owns the address, answers ARP / ND and keeps the neighbour
// cache; the CM reads them here instead of keeping its own).
//
// Read first: netlink(7) (message framing, NLM_F_* flags, NLMSG_ERROR acks,
// multicast groups), rtnetlink(7) (RTM_* messages and their attributes), and
// for resolve() the kernel's net/core/neighbour.c (neigh_add, __neigh_update,
// neigh_event_send).
//
// One Rtnl owns two NETLINK_ROUTE sockets, both non-blocking and close-on-exec:
//  * the request socket: each call sends one request with a fresh sequence
//    number and reads the answer (the NLMSG_ERROR ack, the one reply, or a
//    dump up to NLMSG_DONE) with that sequence number, waiting at most
//    kRequestTimeout in poll(2). Anything else read there is skipped.
//  * the notification socket (fd(), for epoll): subscribe() joins the groups
//    RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR and RTNLGRP_NEIGH;
//    poll_changes() drains what is queued without blocking.
// A socket belongs to the network namespace its thread was in at open().
//
// What each call sends and reads:
//  * link(name): RTM_GETLINK with IFLA_IFNAME (as `ip link show NAME`); reads
//    one RTM_NEWLINK: ifi_index, ifi_flags (IFF_UP, IFF_LOWER_UP), IFLA_IFNAME,
//    IFLA_ADDRESS (MAC), IFLA_MTU, IFLA_OPERSTATE. link(index) likewise with
//    ifi_index set.
//  * addresses(ifindex): RTM_GETADDR dump (NLM_F_DUMP, AF_UNSPEC), as
//    `ip addr show`; reads every RTM_NEWADDR and keeps those of ifindex:
//    IFA_LOCAL (IPv4; IFA_ADDRESS is the peer on point-to-point links) or
//    IFA_ADDRESS (IPv6), ifa_prefixlen, ifa_scope, flags (IFA_FLAGS, else
//    ifa_flags: IFA_F_TENTATIVE, IFA_F_DADFAILED, ...).
//  * route(dst, oif): RTM_GETROUTE with RTA_DST (full-length prefix) and,
//    when oif is not 0, RTA_OIF, as `ip route get DST [oif IF]`; reads one RTM_NEWROUTE: RTA_OIF,
//    RTA_GATEWAY (only when the route is via a gateway), RTA_PREFSRC, rtm_type (a local,
//    unreachable, blackhole or prohibit route is an error naming it).
//  * neighbor(ifindex, ip): RTM_GETNEIGH with NDA_DST and ndm_ifindex, as
//    `ip neigh get IP dev IF`; reads one RTM_NEWNEIGH: ndm_state (NUD_*),
//    NDA_LLADDR. ENOENT (no entry) is not an error: state NUD_NONE, no MAC.
//  * resolve(ifindex, ip): first neighbor() (above); then, unless the entry is
//    PERMANENT or NOARP, RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_ACK, ndm_flags
//    NTF_USE, ndm_state 0, NDA_DST, no NDA_LLADDR; reads the ack. The kernel
//    creates the entry if missing and calls neigh_event_send() on it, as if a
//    packet were waiting: a new or FAILED entry goes INCOMPLETE and the kernel
//    sends ARP requests / neighbour solicitations itself (mcast_solicit, 3, at
//    retrans_time_ms, 1 s, apart), then REACHABLE on an answer or FAILED; a
//    STALE one goes DELAY (its MAC still valid) and after
//    delay_first_probe_time (5 s) PROBE (unicast) and REACHABLE; a REACHABLE,
//    DELAY, PROBE or INCOMPLETE one is left as it is. We send nothing. The
//    outcome arrives as a kNeighbor change, or is read with neighbor().
//    PERMANENT entries are skipped because NTF_USE on one turned it into an
//    INCOMPLETE entry that probes (seen on 6.18; the tests check that resolve()
//    leaves it PERMANENT). The check and the request are two messages: an
//    entry made PERMANENT in between is not protected.
//    IPv6: with no packet to take a source from, the kernel solicits from the
//    link's link-local address and sends nothing while that is tentative
//    (DAD, 1-2 s after the link comes up): the entry then goes FAILED.
//  * subscribe(): joins the groups, sets SO_RCVBUF, and reads every link
//    with an RTM_GETLINK dump (each link's LinkInfo::up() then).
//  * poll_changes(): reads RTM_NEWLINK / RTM_DELLINK (kLinkUp / kLinkDown,
//    only when a link's LinkInfo::up() differs from what subscribe() read or
//    the last change said, or the first time a new link is seen; a deleted
//    link is kLinkDown; an MTU change of an up link reports nothing),
//    RTM_NEWADDR / RTM_DELADDR (kAddrAdded / kAddrRemoved). kAddrAdded means
//    the address is usable: an IPv6 address the kernel announces as
//    tentative (DAD running or failed) is not reported until the kernel
//    announces it again when DAD ends; kAddrAdded may repeat for an address
//    already reported (its lifetimes changed). `ip link set down` removes
//    the link's IPv6 addresses unless keep_addr_on_down is set. RTM_NEWNEIGH
//    (kNeighbor) and RTM_DELNEIGH (kNeighborRemoved). When the socket's
//    queue overflowed (ENOBUFS) kOverrun is reported: some changes were lost,
//    re-read the tables.
// Errors name the step, the object and the errno text (or the kernel's
// extended ack message when it gave one).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "iwcm/address.hpp"
#include "iwcm/result.hpp"

struct nlmsghdr;

namespace iwcm::io {

struct LinkInfo {
    int index = 0;
    std::string name;
    MacAddr mac;  // zero when the link has no hardware address
    std::uint32_t mtu = 0;
    bool admin_up = false;       // IFF_UP (`ip link set up`)
    bool carrier = false;        // IFF_LOWER_UP (the veth peer is up, a cable is in)
    std::uint8_t operstate = 0;  // IF_OPER_* (RFC 2863): IF_OPER_UNKNOWN 0, IF_OPER_UP 6
    // The link carries traffic: administratively up, with a carrier, and
    // operational (IF_OPER_UP, or IF_OPER_UNKNOWN for links that do not track
    // it, like lo and TUN/TAP). The kernel sets IF_OPER_UP in its link watch,
    // a moment after the carrier, when it has activated the link's queue;
    // frames sent before that are dropped.
    bool up() const;
};

struct AddrInfo {
    IpAddr addr;
    std::uint8_t prefix = 0;
    int ifindex = 0;
    std::uint8_t scope = 0;   // RT_SCOPE_UNIVERSE 0, RT_SCOPE_LINK 253, RT_SCOPE_HOST 254
    std::uint32_t flags = 0;  // IFA_F_*
    // IPv6 duplicate address detection still running (and the address not
    // optimistic, RFC 4429) or failed: not usable (yet).
    bool tentative() const;
};

struct RouteInfo {
    int oif = 0;
    std::optional<IpAddr> gateway;  // empty: the destination is on-link
    std::optional<IpAddr> prefsrc;  // the source address the kernel would pick
    // The address to resolve on `oif` to reach the destination.
    IpAddr next_hop(const IpAddr& dst) const { return gateway ? *gateway : dst; }
};

struct NeighborInfo {
    std::uint16_t state = 0;     // NUD_* (linux/neighbour.h); 0 is NUD_NONE: no entry
    std::optional<MacAddr> mac;  // set when the state is valid (see has_valid_mac)
    // REACHABLE, STALE, DELAY, PROBE, PERMANENT or NOARP: the MAC may be used.
    static bool has_valid_mac(std::uint16_t state);
};

// "REACHABLE", "INCOMPLETE", "STALE|NOARP", ... ("NONE" for 0).
std::string nud_state_name(std::uint16_t state);

struct Change {
    enum class Kind : std::uint8_t {
        kLinkUp,
        kLinkDown,
        kAddrAdded,
        kAddrRemoved,
        kNeighbor,         // new or changed entry: state (and mac when valid)
        kNeighborRemoved,  // the entry was deleted (garbage collected, `ip neigh del`)
        kOverrun,          // notifications were lost: re-read what matters
    };
    Kind kind = Kind::kOverrun;
    int ifindex = 0;
    IpAddr addr;              // kAddr*, kNeighbor*
    std::uint8_t prefix = 0;  // kAddr*
    std::uint32_t flags = 0;  // kAddr*: IFA_F_*
    MacAddr mac;              // kLink* (the link's MAC), kNeighbor (when valid)
    std::uint16_t state = 0;  // kNeighbor*: NUD_*
};
const char* to_string(Change::Kind kind);

class Rtnl {
public:
    static constexpr std::chrono::milliseconds kRequestTimeout{2000};

    // Opens the two sockets in the calling thread's network namespace.
    static Expected<Rtnl, std::string> open();
    Rtnl(Rtnl&& other) noexcept;
    Rtnl& operator=(Rtnl&& other) noexcept;
    Rtnl(const Rtnl&) = delete;
    Rtnl& operator=(const Rtnl&) = delete;
    ~Rtnl();

    // The notification socket, readable when poll_changes() has something.
    int fd() const { return notify_fd_; }

    Expected<LinkInfo, std::string> link(const std::string& ifname);
    Expected<LinkInfo, std::string> link(int ifindex);
    // Every address of ifindex, both families, in the kernel's order.
    Expected<std::vector<AddrInfo>, std::string> addresses(int ifindex);
    // oif (when not 0) is sent as RTA_OIF: needed for an IPv6 link-local dst.
    Expected<RouteInfo, std::string> route(const IpAddr& dst, int oif = 0);
    Expected<NeighborInfo, std::string> neighbor(int ifindex, const IpAddr& ip);
    // Asks the kernel to resolve ip on ifindex (see the file comment). Returns
    // once the kernel acknowledged the request, not when the entry resolved.
    Expected<void, std::string> resolve(int ifindex, const IpAddr& ip);

    // Joins the notification groups, asks for a 1 MiB receive queue (best
    // effort: net.core.rmem_max caps it), and reads every link's state with an
    // RTM_GETLINK dump, so that kLinkUp / kLinkDown report edges only.
    // Changes before this call are not seen: subscribe first, then read the
    // tables you track.
    Expected<void, std::string> subscribe();
    // Every change queued on fd() now, oldest first; empty when none.
    std::vector<Change> poll_changes();

private:
    using Replies = std::vector<std::vector<std::byte>>;
    Rtnl(int request_fd, int notify_fd) : request_fd_(request_fd), notify_fd_(notify_fd) {}
    // A dump request (NLM_F_DUMP), retried while the kernel marks it
    // inconsistent (NLM_F_DUMP_INTR: the table changed during the dump).
    Expected<void, std::string> dump(std::span<std::byte> request, const char* step,
                                     Replies& replies);
    Expected<LinkInfo, std::string> link_query(std::span<std::byte> request,
                                               const std::string& step);
    // Sends one request (its nlmsg_seq is set here) and collects the answer's
    // messages (without the final ack / NLMSG_DONE) into `replies`. A negative
    // ack's errno goes to *kernel_error when given.
    Expected<void, std::string> transact(std::span<std::byte> request, const char* step,
                                         Replies& replies, int* kernel_error = nullptr);
    // One notification into `out` (nothing for an unchanged link or another family).
    void decode(const nlmsghdr* h, std::vector<Change>& out);
    void close_all();

    int request_fd_ = -1;
    int notify_fd_ = -1;
    std::uint32_t seq_ = 0;
    std::map<int, bool> link_up_;  // last known "up" per link, for kLinkUp / kLinkDown
};

}  // namespace iwcm::io
