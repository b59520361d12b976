// Neighbour resolution: ARP and IPv6 ND. Read first: neighbor.hpp.
#include "io/net/neighbor.hpp"

#include <algorithm>

#include "iwcm/assert.hpp"
#include "wire/arp.hpp"
#include "wire/ethernet.hpp"
#include "wire/icmpv6.hpp"
#include "wire/ipv6.hpp"

namespace iwcm::io {

namespace {

// ff02::1, the link-local all-nodes group (RFC 4291 section 2.7.1).
const Ipv6Addr kAllNodes{{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01}};

}  // namespace

const char* to_string(NeighborStatus status) {
    switch (status) {
        case NeighborStatus::kUnknown: return "unknown";
        case NeighborStatus::kPending: return "pending";
        case NeighborStatus::kResolved: return "resolved";
        case NeighborStatus::kFailed: return "failed";
    }
    return "?";
}

NeighborTable::NeighborTable(MacAddr mac, std::uint16_t vlan, NeighborConfig config)
    : mac_(mac), vlan_(vlan), config_(config) {
    IWCM_ASSERT(!mac.is_multicast());
    IWCM_ASSERT(vlan == kNoVlan || vlan <= wire::kVlanIdMax);
    IWCM_ASSERT(config.max_probes > 0);
}

void NeighborTable::add_address(IpAddr addr) {
    IWCM_ASSERT(!addr.is_unspecified());
    if (!is_local(addr)) local_.push_back(addr);
}

bool NeighborTable::is_local(IpAddr addr) const {
    return std::find(local_.begin(), local_.end(), addr) != local_.end();
}

// ---------------------------------------------------------------- arrival

bool NeighborTable::receive(Instant now, std::span<const std::byte> frame) {
    auto eth = wire::parse_ethernet(frame);
    if (!eth) return false;
    const std::uint16_t vlan = eth->repr.vlan ? eth->repr.vlan->id : kNoVlan;
    if (vlan != vlan_) return false;
    const MacAddr& dst = eth->repr.dst;
    if (dst != mac_ && !dst.is_multicast()) return false;
    if (eth->repr.ethertype == wire::kEtherTypeArp) return receive_arp(now, eth->payload);
    if (eth->repr.ethertype == wire::kEtherTypeIpv6)
        return receive_icmpv6(now, eth->repr.src, eth->payload);
    return false;
}

// RFC 826 "Packet Reception": if the target is us, merge the sender's
// mapping (create it), and answer a request. A reply updates an entry we have.
bool NeighborTable::receive_arp(Instant now, std::span<const std::byte> payload) {
    auto arp = wire::parse_arp(payload);
    if (!arp) {
        ++counters_.ignored;
        return true;
    }
    const bool for_us = is_local(IpAddr(arp->target_ip));
    const bool sender_known = IpAddr(arp->sender_ip).is_unspecified() == false;
    if (sender_known) update(now, IpAddr(arp->sender_ip), arp->sender_mac, for_us);
    if (!for_us) {
        ++counters_.ignored;
        return true;
    }
    if (arp->op == wire::ArpOp::kRequest) {
        send_arp(false, arp->sender_mac, arp->target_ip, arp->sender_mac, arp->sender_ip);
        ++counters_.arp_replies_sent;
    }
    return true;
}

// RFC 4861 7.1 validation (hop limit 255 here, the rest in parse_nd), 7.2.3
// (answer a solicitation for our address; learn from its source link-layer
// option) and 7.2.5 (an advertisement updates an entry we have).
bool NeighborTable::receive_icmpv6(Instant now, const MacAddr& eth_src,
                                   std::span<const std::byte> packet) {
    auto ip = wire::parse_ipv6(packet);
    if (!ip || ip->repr.next_header != wire::kIpProtoIcmpv6) return false;
    auto nd = wire::parse_nd(ip->payload, ip->repr.src, ip->repr.dst);
    if (!nd) {
        // Other ICMPv6 (router solicitations, MLD, echo): not ours to answer.
        ++counters_.ignored;
        return true;
    }
    if (ip->repr.hop_limit != wire::kNdHopLimit) {
        ++counters_.ignored;
        return true;
    }
    const bool for_us = is_local(IpAddr(nd->target));
    const bool src_unspecified = IpAddr(ip->repr.src).is_unspecified();
    if (nd->kind == wire::NdKind::kAdvertisement) {
        if (nd->lladdr)
            update(now, IpAddr(nd->target), *nd->lladdr, false);
        else
            ++counters_.ignored;
        return true;
    }
    if (!for_us) {
        ++counters_.ignored;
        return true;
    }
    if (nd->lladdr && !src_unspecified) update(now, IpAddr(ip->repr.src), *nd->lladdr, true);
    if (src_unspecified) {
        // Duplicate address detection by someone else: tell all nodes.
        send_nd(false, wire::ipv6_multicast_mac(kAllNodes), nd->target, kAllNodes, nd->target,
                false);
    } else {
        // A unicast solicitation (reachability probe) may carry no option:
        // answer the Ethernet source.
        const MacAddr to = nd->lladdr ? *nd->lladdr : eth_src;
        send_nd(false, to, nd->target, ip->repr.src, nd->target, true);
    }
    ++counters_.advertisements_sent;
    return true;
}

void NeighborTable::update(Instant now, const IpAddr& ip, const MacAddr& mac, bool create) {
    if (mac.is_multicast() || is_local(ip)) return;
    auto it = entries_.find(ip);
    if (it == entries_.end()) {
        if (!create) return;
        trim(now);
        if (entries_.size() >= config_.max_entries) return;
        it = entries_.emplace(ip, Entry{}).first;
    }
    Entry& e = it->second;
    if (e.status != NeighborStatus::kResolved || e.mac != mac) ++counters_.learned;
    e.status = NeighborStatus::kResolved;
    e.mac = mac;
    e.probes = 0;
    e.expires = now + config_.lifetime;
}

void NeighborTable::learn(Instant now, IpAddr ip, MacAddr mac) {
    update(now, ip, mac, true);
}

// ---------------------------------------------------------------- resolution

NeighborStatus NeighborTable::resolve(Instant now, IpAddr target, IpAddr source) {
    IWCM_ASSERT(target.family() == source.family());
    IWCM_ASSERT(is_local(source));
    auto it = entries_.find(target);
    if (it != entries_.end()) {
        Entry& e = it->second;
        if (e.status == NeighborStatus::kPending) return e.status;
        if (e.status == NeighborStatus::kResolved && now < e.expires) return e.status;
    } else {
        trim(now);
        if (entries_.size() >= config_.max_entries) return NeighborStatus::kFailed;
        it = entries_.emplace(target, Entry{}).first;
    }
    Entry& e = it->second;
    e.status = NeighborStatus::kPending;
    e.source = source;
    e.probes = 0;
    send_probe(target, e);
    e.next_probe = now + config_.retry_interval;
    return e.status;
}

NeighborStatus NeighborTable::status(Instant now, IpAddr target) const {
    auto it = entries_.find(target);
    if (it == entries_.end()) return NeighborStatus::kUnknown;
    const Entry& e = it->second;
    if (e.status == NeighborStatus::kResolved && now >= e.expires) return NeighborStatus::kUnknown;
    return e.status;
}

std::optional<MacAddr> NeighborTable::lookup(Instant now, IpAddr target) const {
    if (status(now, target) != NeighborStatus::kResolved) return std::nullopt;
    return entries_.at(target).mac;
}

void NeighborTable::send_probe(const IpAddr& target, Entry& e) {
    ++e.probes;
    if (target.is_v4()) {
        send_arp(true, MacAddr::broadcast(), e.source.v4(), MacAddr{}, target.v4());
        ++counters_.arp_requests_sent;
    } else {
        const Ipv6Addr group = wire::solicited_node_multicast(target.v6());
        send_nd(true, wire::ipv6_multicast_mac(group), e.source.v6(), group, target.v6(), false);
        ++counters_.solicitations_sent;
    }
}

// ---------------------------------------------------------------- announcements

void NeighborTable::announce(Instant now, IpAddr addr) {
    IWCM_ASSERT(is_local(addr));
    if (config_.announce_count == 0) return;
    std::erase_if(announcements_, [&](const Announcement& a) { return a.addr == addr; });
    send_announcement(addr);
    if (config_.announce_count > 1)
        announcements_.push_back(
            {addr, now + config_.announce_interval, config_.announce_count - 1});
}

// RFC 5227 section 2.3 (IPv4) and RFC 4861 section 7.2.6 (IPv6).
void NeighborTable::send_announcement(const IpAddr& addr) {
    if (addr.is_v4()) {
        send_arp(true, MacAddr::broadcast(), addr.v4(), MacAddr{}, addr.v4());
    } else {
        send_nd(false, wire::ipv6_multicast_mac(kAllNodes), addr.v6(), kAllNodes, addr.v6(), false);
    }
    ++counters_.announcements_sent;
}

void NeighborTable::on_timer(Instant now) {
    for (Announcement& a : announcements_) {
        if (now < a.next) continue;
        send_announcement(a.addr);
        --a.left;
        a.next = now + config_.announce_interval;
    }
    std::erase_if(announcements_, [](const Announcement& a) { return a.left == 0; });
    for (auto& [ip, e] : entries_) {
        if (e.status != NeighborStatus::kPending || now < e.next_probe) continue;
        if (e.probes >= config_.max_probes) {
            e.status = NeighborStatus::kFailed;
            ++counters_.failures;
            continue;
        }
        send_probe(ip, e);
        e.next_probe = now + config_.retry_interval;
    }
    trim(now);
}

std::optional<Instant> NeighborTable::next_deadline() const {
    std::optional<Instant> next;
    for (const Announcement& a : announcements_)
        if (!next || a.next < *next) next = a.next;
    for (const auto& [ip, e] : entries_) {
        if (e.status != NeighborStatus::kPending) continue;
        if (!next || e.next_probe < *next) next = e.next_probe;
    }
    return next;
}

// Expired resolved entries go; failed ones stay (for status()) until the
// table needs room.
void NeighborTable::trim(Instant now) {
    std::erase_if(entries_, [&](const auto& kv) {
        return kv.second.status == NeighborStatus::kResolved && now >= kv.second.expires;
    });
    if (entries_.size() < config_.max_entries) return;
    std::erase_if(entries_,
                  [](const auto& kv) { return kv.second.status == NeighborStatus::kFailed; });
}

// ---------------------------------------------------------------- output

std::vector<std::byte>& NeighborTable::new_frame(const MacAddr& dst, std::uint16_t ethertype,
                                                 std::size_t payload_len, std::size_t& offset) {
    if (tx_.size() >= config_.max_queued_frames) tx_.pop_front();
    wire::EthernetRepr eth{dst, mac_, std::nullopt, ethertype};
    if (vlan_ != kNoVlan) eth.vlan = wire::VlanTag{vlan_, 0, false};
    offset = eth.header_len();
    auto& f = tx_.emplace_back(offset + payload_len);
    eth.emit(f);
    return f;
}

void NeighborTable::send_arp(bool request, const MacAddr& dst, const Ipv4Addr& src_ip,
                             const MacAddr& target_mac, const Ipv4Addr& target_ip) {
    wire::ArpRepr arp{request ? wire::ArpOp::kRequest : wire::ArpOp::kReply, mac_, src_ip,
                      target_mac, target_ip};
    std::size_t off = 0;
    auto& f = new_frame(dst, wire::kEtherTypeArp, wire::kArpLen, off);
    arp.emit(std::span<std::byte>(f).subspan(off));
}

void NeighborTable::send_nd(bool solicit, const MacAddr& dst_mac, const Ipv6Addr& src,
                            const Ipv6Addr& dst, const Ipv6Addr& target, bool solicited) {
    wire::NdRepr nd;
    nd.kind = solicit ? wire::NdKind::kSolicitation : wire::NdKind::kAdvertisement;
    nd.target = target;
    nd.solicited = solicited;
    nd.override_flag = !solicit;
    nd.lladdr = mac_;
    wire::Ipv6Repr ip;
    ip.src = src;
    ip.dst = dst;
    ip.next_header = wire::kIpProtoIcmpv6;
    ip.hop_limit = wire::kNdHopLimit;
    ip.payload_len = static_cast<std::uint16_t>(nd.buffer_len());
    std::size_t off = 0;
    auto& f =
        new_frame(dst_mac, wire::kEtherTypeIpv6, wire::Ipv6Repr::kHeaderLen + nd.buffer_len(), off);
    auto out = std::span<std::byte>(f).subspan(off);
    ip.emit(out);
    nd.emit(src, dst, out.subspan(wire::Ipv6Repr::kHeaderLen));
}

std::optional<std::span<const std::byte>> NeighborTable::poll_transmit() {
    if (tx_.empty()) return std::nullopt;
    current_ = std::move(tx_.front());
    tx_.pop_front();
    return std::span<const std::byte>(current_);
}

}  // namespace iwcm::io
