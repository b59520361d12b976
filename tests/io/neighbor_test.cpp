// The neighbour table: answering ARP and ND for our addresses, resolving with
// retries, expiry, VLAN tags, ignoring what is not ours.
//
// Read first: src/io/net/neighbor.hpp. Frames are built with the wire emitters and
// checked with the wire parsers; time is handed in (at_ms).
#include <gtest/gtest.h>

#include "io/net/neighbor.hpp"
#include "wire/arp.hpp"
#include "wire/bytes.hpp"
#include "wire/ethernet.hpp"
#include "wire/icmpv6.hpp"
#include "wire/ipv6.hpp"

namespace iwcm::io {
namespace {

const MacAddr kOurMac = *MacAddr::parse("02:00:0a:63:01:02");
const MacAddr kPeerMac = *MacAddr::parse("26:81:fd:9c:50:d9");
const IpAddr kOur4 = *IpAddr::parse("10.99.1.2");
const IpAddr kPeer4 = *IpAddr::parse("10.99.1.1");
const IpAddr kOur6 = *IpAddr::parse("fd99::2");
const IpAddr kPeer6 = *IpAddr::parse("fd99::1");

using Frame = std::vector<std::byte>;

Frame eth_frame(const MacAddr& dst, const MacAddr& src, std::uint16_t type, std::uint16_t vlan,
                std::size_t len) {
    wire::EthernetRepr e{dst, src, std::nullopt, type};
    if (vlan != kNoVlan) e.vlan = wire::VlanTag{vlan, 0, false};
    Frame f(e.header_len() + len);
    e.emit(f);
    return f;
}

Frame arp_frame(wire::ArpOp op, const MacAddr& dst, const MacAddr& smac, IpAddr sip,
                const MacAddr& tmac, IpAddr tip, std::uint16_t vlan = kNoVlan) {
    Frame f = eth_frame(dst, smac, wire::kEtherTypeArp, vlan, wire::kArpLen);
    wire::ArpRepr a{op, smac, sip.v4(), tmac, tip.v4()};
    a.emit(std::span<std::byte>(f).last(wire::kArpLen));
    return f;
}

Frame nd_frame(const wire::NdRepr& nd, const MacAddr& dst_mac, const MacAddr& src_mac,
               const Ipv6Addr& src, const Ipv6Addr& dst, std::uint8_t hop_limit = 255) {
    const std::size_t len = wire::Ipv6Repr::kHeaderLen + nd.buffer_len();
    Frame f = eth_frame(dst_mac, src_mac, wire::kEtherTypeIpv6, kNoVlan, len);
    auto out = std::span<std::byte>(f).last(len);
    wire::Ipv6Repr ip;
    ip.src = src;
    ip.dst = dst;
    ip.next_header = wire::kIpProtoIcmpv6;
    ip.hop_limit = hop_limit;
    ip.payload_len = static_cast<std::uint16_t>(nd.buffer_len());
    ip.emit(out);
    nd.emit(src, dst, out.subspan(wire::Ipv6Repr::kHeaderLen));
    return f;
}

std::vector<Frame> drain(NeighborTable& t) {
    std::vector<Frame> out;
    while (auto f = t.poll_transmit()) out.emplace_back(f->begin(), f->end());
    return out;
}

NeighborTable make_table(std::uint16_t vlan = kNoVlan) {
    NeighborTable t(kOurMac, vlan);
    t.add_address(kOur4);
    t.add_address(kOur6);
    return t;
}

TEST(Neighbor, AnswersArpRequestForOurAddressAndLearnsTheSender) {
    auto t = make_table();
    auto req = arp_frame(wire::ArpOp::kRequest, MacAddr::broadcast(), kPeerMac, kPeer4, {}, kOur4);
    EXPECT_TRUE(t.receive(at_ms(0), req));
    auto out = drain(t);
    ASSERT_EQ(out.size(), 1u);
    auto eth = wire::parse_ethernet(out[0]);
    ASSERT_TRUE(eth);
    EXPECT_EQ(eth->repr.dst, kPeerMac);
    EXPECT_EQ(eth->repr.src, kOurMac);
    auto arp = wire::parse_arp(eth->payload);
    ASSERT_TRUE(arp);
    EXPECT_EQ(arp->op, wire::ArpOp::kReply);
    EXPECT_EQ(IpAddr(arp->sender_ip), kOur4);
    EXPECT_EQ(arp->sender_mac, kOurMac);
    EXPECT_EQ(IpAddr(arp->target_ip), kPeer4);
    EXPECT_EQ(t.lookup(at_ms(1), kPeer4), kPeerMac);
    EXPECT_EQ(t.counters().arp_replies_sent, 1u);
}

TEST(Neighbor, IgnoresArpForOtherAddressesAndOtherFrames) {
    auto t = make_table();
    auto other = arp_frame(wire::ArpOp::kRequest, MacAddr::broadcast(), kPeerMac, kPeer4, {},
                           *IpAddr::parse("10.99.1.3"));
    EXPECT_TRUE(t.receive(at_ms(0), other));  // ARP: consumed, not answered
    EXPECT_TRUE(drain(t).empty());
    EXPECT_FALSE(t.lookup(at_ms(0), kPeer4));  // no entry created for a request not for us
    Frame ip = eth_frame(kOurMac, kPeerMac, wire::kEtherTypeIpv4, kNoVlan, 20);
    EXPECT_FALSE(t.receive(at_ms(0), ip));  // IPv4: for the core
    // Another host's unicast ARP is not ours to look at.
    auto unicast = arp_frame(wire::ArpOp::kRequest, *MacAddr::parse("02:00:00:00:00:99"), kPeerMac,
                             kPeer4, {}, kOur4);
    EXPECT_FALSE(t.receive(at_ms(0), unicast));
}

TEST(Neighbor, ResolvesWithArpAndRetries) {
    auto t = make_table();
    EXPECT_EQ(t.resolve(at_ms(0), kPeer4, kOur4), NeighborStatus::kPending);
    auto out = drain(t);
    ASSERT_EQ(out.size(), 1u);
    auto eth = wire::parse_ethernet(out[0]);
    EXPECT_TRUE(eth->repr.dst.is_broadcast());
    auto arp = wire::parse_arp(eth->payload);
    EXPECT_EQ(arp->op, wire::ArpOp::kRequest);
    EXPECT_EQ(IpAddr(arp->target_ip), kPeer4);
    EXPECT_EQ(t.next_deadline(), at_ms(1000));
    t.on_timer(at_ms(1000));
    EXPECT_EQ(drain(t).size(), 1u);  // second probe
    auto reply = arp_frame(wire::ArpOp::kReply, kOurMac, kPeerMac, kPeer4, kOurMac, kOur4);
    EXPECT_TRUE(t.receive(at_ms(1500), reply));
    EXPECT_EQ(t.status(at_ms(1500), kPeer4), NeighborStatus::kResolved);
    EXPECT_EQ(t.lookup(at_ms(1500), kPeer4), kPeerMac);
    EXPECT_FALSE(t.next_deadline());
    // A resolved entry does not probe again until it expires (60 s).
    EXPECT_EQ(t.resolve(at_ms(2000), kPeer4, kOur4), NeighborStatus::kResolved);
    EXPECT_TRUE(drain(t).empty());
    EXPECT_EQ(t.status(at_ms(61'500), kPeer4), NeighborStatus::kUnknown);
    EXPECT_EQ(t.resolve(at_ms(61'500), kPeer4, kOur4), NeighborStatus::kPending);
}

TEST(Neighbor, ResolutionFailsAfterMaxProbes) {
    auto t = make_table();
    t.resolve(at_ms(0), kPeer4, kOur4);
    t.on_timer(at_ms(1000));
    t.on_timer(at_ms(2000));
    EXPECT_EQ(drain(t).size(), 3u);
    EXPECT_EQ(t.status(at_ms(2500), kPeer4), NeighborStatus::kPending);
    t.on_timer(at_ms(3000));
    EXPECT_EQ(t.status(at_ms(3000), kPeer4), NeighborStatus::kFailed);
    EXPECT_TRUE(drain(t).empty());
    EXPECT_FALSE(t.next_deadline());
    EXPECT_EQ(t.counters().failures, 1u);
    // Asked again, it starts over.
    EXPECT_EQ(t.resolve(at_ms(4000), kPeer4, kOur4), NeighborStatus::kPending);
}

TEST(Neighbor, AnswersSolicitationWithSolicitedAdvertisement) {
    auto t = make_table();
    wire::NdRepr ns;
    ns.target = kOur6.v6();
    ns.lladdr = kPeerMac;
    const Ipv6Addr group = wire::solicited_node_multicast(kOur6.v6());
    EXPECT_TRUE(t.receive(
        at_ms(0), nd_frame(ns, wire::ipv6_multicast_mac(group), kPeerMac, kPeer6.v6(), group)));
    auto out = drain(t);
    ASSERT_EQ(out.size(), 1u);
    auto eth = wire::parse_ethernet(out[0]);
    EXPECT_EQ(eth->repr.dst, kPeerMac);
    auto ip = wire::parse_ipv6(eth->payload);
    ASSERT_TRUE(ip);
    EXPECT_EQ(ip->repr.hop_limit, 255);
    EXPECT_EQ(IpAddr(ip->repr.dst), kPeer6);
    auto na = wire::parse_nd(ip->payload, ip->repr.src, ip->repr.dst);
    ASSERT_TRUE(na) << na.error().to_string();
    EXPECT_EQ(na->kind, wire::NdKind::kAdvertisement);
    EXPECT_TRUE(na->solicited);
    EXPECT_TRUE(na->override_flag);
    EXPECT_EQ(na->lladdr, kOurMac);
    EXPECT_EQ(IpAddr(na->target), kOur6);
    EXPECT_EQ(t.lookup(at_ms(0), kPeer6), kPeerMac);
}

TEST(Neighbor, IgnoresSolicitationWithWrongHopLimit) {
    auto t = make_table();
    wire::NdRepr ns;
    ns.target = kOur6.v6();
    ns.lladdr = kPeerMac;
    const Ipv6Addr group = wire::solicited_node_multicast(kOur6.v6());
    EXPECT_TRUE(t.receive(
        at_ms(0), nd_frame(ns, wire::ipv6_multicast_mac(group), kPeerMac, kPeer6.v6(), group, 64)));
    EXPECT_TRUE(drain(t).empty());
}

TEST(Neighbor, ResolvesIpv6WithSolicitationToSolicitedNodeGroup) {
    auto t = make_table();
    t.resolve(at_ms(0), kPeer6, kOur6);
    auto out = drain(t);
    ASSERT_EQ(out.size(), 1u);
    auto eth = wire::parse_ethernet(out[0]);
    const Ipv6Addr group = wire::solicited_node_multicast(kPeer6.v6());
    EXPECT_EQ(eth->repr.dst, wire::ipv6_multicast_mac(group));
    auto ip = wire::parse_ipv6(eth->payload);
    EXPECT_EQ(ip->repr.dst, group);
    auto ns = wire::parse_nd(ip->payload, ip->repr.src, ip->repr.dst);
    ASSERT_TRUE(ns);
    EXPECT_EQ(ns->kind, wire::NdKind::kSolicitation);
    EXPECT_EQ(IpAddr(ns->target), kPeer6);
    EXPECT_EQ(ns->lladdr, kOurMac);
    wire::NdRepr na;
    na.kind = wire::NdKind::kAdvertisement;
    na.target = kPeer6.v6();
    na.solicited = true;
    na.lladdr = kPeerMac;
    EXPECT_TRUE(t.receive(at_ms(5), nd_frame(na, kOurMac, kPeerMac, kPeer6.v6(), kOur6.v6())));
    EXPECT_EQ(t.lookup(at_ms(5), kPeer6), kPeerMac);
}

TEST(Neighbor, VlanTaggedBothWays) {
    auto t = make_table(100);
    auto untagged =
        arp_frame(wire::ArpOp::kRequest, MacAddr::broadcast(), kPeerMac, kPeer4, {}, kOur4);
    EXPECT_FALSE(t.receive(at_ms(0), untagged));
    auto other_vlan =
        arp_frame(wire::ArpOp::kRequest, MacAddr::broadcast(), kPeerMac, kPeer4, {}, kOur4, 200);
    EXPECT_FALSE(t.receive(at_ms(0), other_vlan));
    EXPECT_TRUE(drain(t).empty());
    auto tagged =
        arp_frame(wire::ArpOp::kRequest, MacAddr::broadcast(), kPeerMac, kPeer4, {}, kOur4, 100);
    EXPECT_TRUE(t.receive(at_ms(0), tagged));
    auto out = drain(t);
    ASSERT_EQ(out.size(), 1u);
    auto eth = wire::parse_ethernet(out[0]);
    ASSERT_TRUE(eth->repr.vlan);
    EXPECT_EQ(eth->repr.vlan->id, 100);
    t.resolve(at_ms(0), *IpAddr::parse("10.99.1.7"), kOur4);
    out = drain(t);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(wire::parse_ethernet(out[0])->repr.vlan->id, 100);
}

// RFC 5227 section 2.3: an ARP request, broadcast, sender and target IP both
// 10.99.1.2, target MAC zero. Written out by hand, field by field.
const char* kGratuitousArp =
    "ff ff ff ff ff ff  02 00 0a 63 01 02  08 06"  // Ethernet: broadcast, from us, ARP
    "00 01 08 00 06 04 00 01"                      // Ethernet / IPv4, request
    "02 00 0a 63 01 02  0a 63 01 02"               // sender: our MAC, 10.99.1.2
    "00 00 00 00 00 00  0a 63 01 02";              // target: zero MAC, 10.99.1.2

// RFC 4861 section 7.2.6: from fd99::2 to all-nodes ff02::1 (33:33:00:00:00:01),
// hop limit 255, Override set, Solicited and Router clear, the target
// link-layer address option with our MAC. The checksum was computed apart
// (RFC 4443 section 2.3 over the pseudo-header).
const char* kUnsolicitedAdvert =
    "33 33 00 00 00 01  02 00 0a 63 01 02  86 dd"      // Ethernet: all-nodes, IPv6
    "60 00 00 00 00 20 3a ff"                          // 32 bytes of ICMPv6, hop 255
    "fd 99 00 00 00 00 00 00 00 00 00 00 00 00 00 02"  // source fd99::2
    "ff 02 00 00 00 00 00 00 00 00 00 00 00 00 00 01"  // destination ff02::1
    "88 00 4e 03 20 00 00 00"                          // NA, checksum, O
    "fd 99 00 00 00 00 00 00 00 00 00 00 00 00 00 02"  // target fd99::2
    "02 01 02 00 0a 63 01 02";                         // target LL option

TEST(Neighbor, AnnouncesIpv4TwiceTwoSecondsApart) {
    auto t = make_table();
    t.announce(at_ms(0), kOur4);
    auto out = drain(t);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], wire::hex_bytes(kGratuitousArp));
    EXPECT_EQ(t.next_deadline(), at_ms(2000));
    t.on_timer(at_ms(1999));
    EXPECT_TRUE(drain(t).empty());
    t.on_timer(at_ms(2000));
    out = drain(t);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], wire::hex_bytes(kGratuitousArp));
    EXPECT_FALSE(t.next_deadline());  // ANNOUNCE_NUM is 2: done
    t.on_timer(at_ms(10'000));
    EXPECT_TRUE(drain(t).empty());
    EXPECT_EQ(t.counters().announcements_sent, 2u);
    EXPECT_EQ(t.counters().arp_requests_sent, 0u);  // not a resolution
}

TEST(Neighbor, AnnouncesIpv6WithUnsolicitedOverrideAdvertisement) {
    auto t = make_table();
    t.announce(at_ms(0), kOur6);
    t.on_timer(at_ms(2000));
    auto out = drain(t);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0], wire::hex_bytes(kUnsolicitedAdvert));
    EXPECT_EQ(out[1], wire::hex_bytes(kUnsolicitedAdvert));
    // Our own parser agrees with the hand-written bytes.
    auto eth = wire::parse_ethernet(out[0]);
    auto ip = wire::parse_ipv6(eth->payload);
    auto na = wire::parse_nd(ip->payload, ip->repr.src, ip->repr.dst);
    ASSERT_TRUE(na) << na.error().to_string();
    EXPECT_TRUE(na->override_flag);
    EXPECT_FALSE(na->solicited);
    EXPECT_EQ(t.counters().announcements_sent, 2u);
    EXPECT_EQ(t.counters().advertisements_sent, 0u);  // answers to solicitations only
}

TEST(Neighbor, AnnouncementsCarryTheVlanTag) {
    auto t = make_table(100);
    t.announce(at_ms(0), kOur4);
    auto out = drain(t);
    ASSERT_EQ(out.size(), 1u);
    // The same frame with 802.1Q tag 100 (priority 0) after the source MAC.
    auto golden = wire::hex_bytes(kGratuitousArp);
    const auto tag = wire::hex_bytes("81 00 00 64");
    golden.insert(golden.begin() + 12, tag.begin(), tag.end());
    EXPECT_EQ(out[0], golden);
}

TEST(Neighbor, AnnouncingTwoAddressesAndAgainStartsOver) {
    NeighborConfig cfg;
    cfg.announce_count = 3;
    cfg.announce_interval = std::chrono::milliseconds(500);
    NeighborTable t(kOurMac, kNoVlan, cfg);
    t.add_address(kOur4);
    t.add_address(kOur6);
    t.announce(at_ms(0), kOur4);
    t.announce(at_ms(100), kOur6);
    t.announce(at_ms(200), kOur4);  // again: three more from 200 ms, none left from the first
    EXPECT_EQ(drain(t).size(), 3u);
    EXPECT_EQ(t.next_deadline(), at_ms(600));
    std::vector<Frame> sent;
    for (int ms = 0; ms <= 5000; ms += 50) {
        t.on_timer(at_ms(ms));
        for (auto& f : drain(t)) sent.push_back(f);
    }
    // IPv6 at 600 and 1100, IPv4 at 700 and 1200.
    ASSERT_EQ(sent.size(), 4u);
    EXPECT_EQ(sent[0], wire::hex_bytes(kUnsolicitedAdvert));
    EXPECT_EQ(sent[1], wire::hex_bytes(kGratuitousArp));
    EXPECT_EQ(t.counters().announcements_sent, 7u);
    EXPECT_FALSE(t.next_deadline());
}

TEST(Neighbor, NoAnnouncementWhenTheCountIsZero) {
    NeighborConfig cfg;
    cfg.announce_count = 0;
    NeighborTable t(kOurMac, kNoVlan, cfg);
    t.add_address(kOur4);
    t.announce(at_ms(0), kOur4);
    EXPECT_TRUE(drain(t).empty());
    EXPECT_FALSE(t.next_deadline());
}

}  // namespace
}  // namespace iwcm::io
