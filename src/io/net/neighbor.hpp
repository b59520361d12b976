// Neighbour resolution for the connection manager's own addresses: ARP for
// IPv4 and neighbour discovery for IPv6, sans-I/O like the core.
//
// Read first: RFC 826 (ARP and its merge rule), RFC 4861 sections 7.2.3 to
// 7.2.5 (answering a solicitation, receiving an advertisement), 7.3
// (reachability, here simplified to a fixed lifetime) and src/wire/arp.hpp,
// src/wire/icmpv6.hpp. The table
//  * answers ARP requests and neighbour solicitations for the addresses added
//    with add_address() (the CM's own, separate from the kernel's);
//  * resolves a peer's MAC on request: an ARP request (broadcast) or a
//    neighbour solicitation (to the solicited-node multicast group), resent
//    every retry_interval, at most max_probes times, then kFailed;
//  * learns mappings from replies, advertisements, and requests or
//    solicitations aimed at us (the sender will talk to us next), and forgets
//    them after `lifetime`;
//  * announces an address of ours on request (announce()): a gratuitous ARP
//    (RFC 5227 section 2.3: an ARP request, broadcast, sender and target IP
//    both our address, target MAC zero) or an unsolicited neighbour
//    advertisement (RFC 4861 section 7.2.6: to all-nodes ff02::1, Override
//    set, Solicited clear, our MAC in the target link-layer option), sent
//    announce_count times, announce_interval apart, so that a peer holding a
//    stale MAC for the address (the CM restarted with another MAC) updates it.
// Frames not on our VLAN (kNoVlan: untagged only) are not consumed; frames
// that are ARP or ICMPv6 ND are consumed whether or not they concern us.
// Like iwcm::Core it reads no clock and does no I/O: receive(now, frame),
// on_timer(now), next_deadline(), poll_transmit().
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "iwcm/address.hpp"
#include "iwcm/events.hpp"
#include "iwcm/time.hpp"

namespace iwcm::io {

struct NeighborConfig {
    std::chrono::milliseconds retry_interval{1000};
    unsigned max_probes = 3;
    std::chrono::seconds lifetime{60};
    std::size_t max_entries = 1024;
    std::size_t max_queued_frames = 256;
    // RFC 5227 section 1.1: ANNOUNCE_NUM 2, ANNOUNCE_INTERVAL 2 s.
    unsigned announce_count = 2;
    std::chrono::milliseconds announce_interval{2000};
};

enum class NeighborStatus : std::uint8_t { kUnknown, kPending, kResolved, kFailed };
const char* to_string(NeighborStatus status);

struct NeighborCounters {
    std::uint64_t arp_requests_sent = 0;
    std::uint64_t arp_replies_sent = 0;
    std::uint64_t solicitations_sent = 0;
    std::uint64_t advertisements_sent = 0;  // answers to solicitations
    std::uint64_t announcements_sent = 0;   // gratuitous ARPs, unsolicited advertisements
    std::uint64_t learned = 0;
    std::uint64_t failures = 0;
    std::uint64_t ignored = 0;  // ARP / ND frames not for us or malformed
};

class NeighborTable {
public:
    NeighborTable(MacAddr mac, std::uint16_t vlan, NeighborConfig config = {});

    void add_address(IpAddr addr);
    bool is_local(IpAddr addr) const;
    MacAddr mac() const { return mac_; }
    std::uint16_t vlan() const { return vlan_; }

    // Handles an ARP or ICMPv6 ND frame on our VLAN: returns true when the
    // frame was one (consumed here), false for anything else (for the core).
    bool receive(Instant now, std::span<const std::byte> frame);

    // Starts resolving `target` from our address `source` (same family) unless
    // it is resolved or being resolved; a failed entry starts over.
    NeighborStatus resolve(Instant now, IpAddr target, IpAddr source);
    NeighborStatus status(Instant now, IpAddr target) const;
    // Announces our address `addr` (added before): the first announcement
    // now, the others from on_timer(). Announcing it again starts over.
    void announce(Instant now, IpAddr addr);
    std::optional<MacAddr> lookup(Instant now, IpAddr target) const;
    // Records a mapping (for example one the core learnt from a SYN).
    void learn(Instant now, IpAddr ip, MacAddr mac);

    void on_timer(Instant now);
    std::optional<Instant> next_deadline() const;
    // The next frame to send; valid until the next call of any member.
    std::optional<std::span<const std::byte>> poll_transmit();

    const NeighborCounters& counters() const { return counters_; }
    std::size_t size() const { return entries_.size(); }

private:
    struct Entry {
        NeighborStatus status = NeighborStatus::kUnknown;
        MacAddr mac;
        IpAddr source;
        Instant expires{};     // kResolved: forgotten after this
        Instant next_probe{};  // kPending: the next request goes out then
        unsigned probes = 0;
    };

    struct Announcement {
        IpAddr addr;
        Instant next{};
        unsigned left = 0;
    };

    void send_announcement(const IpAddr& addr);
    bool receive_arp(Instant now, std::span<const std::byte> payload);
    bool receive_icmpv6(Instant now, const MacAddr& eth_src, std::span<const std::byte> packet);
    void send_probe(const IpAddr& target, Entry& e);
    void send_arp(bool request, const MacAddr& dst, const Ipv4Addr& src_ip,
                  const MacAddr& target_mac, const Ipv4Addr& target_ip);
    void send_nd(bool solicit, const MacAddr& dst_mac, const Ipv6Addr& src, const Ipv6Addr& dst,
                 const Ipv6Addr& target, bool solicited);
    std::vector<std::byte>& new_frame(const MacAddr& dst, std::uint16_t ethertype,
                                      std::size_t payload_len, std::size_t& offset);
    void update(Instant now, const IpAddr& ip, const MacAddr& mac, bool create);
    void trim(Instant now);

    MacAddr mac_;
    std::uint16_t vlan_;
    NeighborConfig config_;
    std::vector<IpAddr> local_;
    std::map<IpAddr, Entry> entries_;
    std::vector<Announcement> announcements_;  // with announcements left to send
    std::deque<std::vector<std::byte>> tx_;
    std::vector<std::byte> current_;
    NeighborCounters counters_;
};

}  // namespace iwcm::io
