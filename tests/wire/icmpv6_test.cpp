// ICMPv6 neighbour discovery: a Linux solicitation, our own NS and NA, checksums.
//
// Read first: src/wire/icmpv6.hpp. The golden frame is the kernel's duplicate
// address detection probe (source ::, no link-layer option, a nonce option
// of type 14 that the parser must skip), as tshark printed it.
#include <gtest/gtest.h>

#include "wire/checksum.hpp"
#include "wire/ethernet.hpp"
#include "wire/icmpv6.hpp"
#include "wire/ipv6.hpp"

namespace iwcm::wire {
namespace {

const char* kLinuxDadProbe =
    "33 33 ff 4e e6 7d 26 81 fd 9c 50 d9 86 dd"
    "60 00 00 00 00 20 3a ff 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "ff 02 00 00 00 00 00 00 00 00 00 01 ff 4e e6 7d"
    "87 00 c1 4b 00 00 00 00 fe 80 00 00 00 00 00 00 64 6e d2 ff fe 4e e6 7d"
    "0e 01 ae 5a 39 7b c1 f5";

const Ipv6Addr kA = *Ipv6Addr::parse("fd99::1");
const Ipv6Addr kB = *Ipv6Addr::parse("fd99::2");
const MacAddr kMac = *MacAddr::parse("02:00:00:00:00:02");

TEST(Icmpv6, DeconstructLinuxDadProbe) {
    const auto frame = hex_bytes(kLinuxDadProbe);
    auto eth = parse_ethernet(frame);
    ASSERT_TRUE(eth);
    auto ip = parse_ipv6(eth->payload);
    ASSERT_TRUE(ip) << ip.error().to_string();
    EXPECT_EQ(ip->repr.hop_limit, kNdHopLimit);
    auto nd = parse_nd(ip->payload, ip->repr.src, ip->repr.dst);
    ASSERT_TRUE(nd) << nd.error().to_string();
    EXPECT_EQ(nd->kind, NdKind::kSolicitation);
    EXPECT_EQ(nd->target, *Ipv6Addr::parse("fe80::646e:d2ff:fe4e:e67d"));
    EXPECT_FALSE(nd->lladdr);
    EXPECT_EQ(ip->repr.dst, solicited_node_multicast(nd->target));
    EXPECT_EQ(eth->repr.dst, ipv6_multicast_mac(ip->repr.dst));
}

TEST(Icmpv6, SolicitationRoundTrip) {
    NdRepr ns;
    ns.kind = NdKind::kSolicitation;
    ns.target = kB;
    ns.lladdr = kMac;
    const Ipv6Addr group = solicited_node_multicast(kB);
    EXPECT_EQ(group, *Ipv6Addr::parse("ff02::1:ff00:2"));
    std::vector<std::byte> out(ns.buffer_len());
    ns.emit(kA, group, out);
    EXPECT_EQ(to_hex(Bytes(out).subspan(0, 2)), "8700");
    EXPECT_EQ(to_hex(Bytes(out).subspan(24)), "0101020000000002");
    auto back = parse_nd(out, kA, group);
    ASSERT_TRUE(back) << back.error().to_string();
    EXPECT_EQ(*back, ns);
}

TEST(Icmpv6, AdvertisementRoundTripWithFlags) {
    NdRepr na;
    na.kind = NdKind::kAdvertisement;
    na.target = kB;
    na.solicited = true;
    na.override_flag = true;
    na.lladdr = kMac;
    std::vector<std::byte> out(na.buffer_len());
    na.emit(kB, kA, out);
    EXPECT_EQ(to_hex(Bytes(out).subspan(4, 4)), "60000000");
    EXPECT_EQ(to_hex(Bytes(out).subspan(24, 2)), "0201");
    auto back = parse_nd(out, kB, kA);
    ASSERT_TRUE(back);
    EXPECT_EQ(*back, na);
}

TEST(Icmpv6, BadChecksumAndWrongAddressesRefused) {
    NdRepr ns;
    ns.target = kB;
    ns.lladdr = kMac;
    std::vector<std::byte> out(ns.buffer_len());
    ns.emit(kA, kB, out);
    EXPECT_FALSE(parse_nd(out, kA, kA));  // the pseudo-header covers the addresses
    out[10] ^= std::byte{1};
    auto r = parse_nd(out, kA, kB);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().field, "checksum");
}

TEST(Icmpv6, TruncatedAndBadOptionsRefused) {
    NdRepr ns;
    ns.target = kB;
    ns.lladdr = kMac;
    std::vector<std::byte> out(ns.buffer_len());
    ns.emit(kA, kB, out);
    for (std::size_t n = 0; n < kNdMinLen; ++n)
        EXPECT_FALSE(parse_nd(Bytes(out).first(n), kA, kB)) << n;
    // An option of length 0 (RFC 4861 section 4.6: must be silently discarded).
    std::vector<std::byte> zero = out;
    zero[25] = std::byte{0};
    zero[2] = zero[3] = std::byte{0};
    store_be16(zero, 2,
               internet_checksum(zero, pseudo_header_sum(IpAddr(kA), IpAddr(kB), kIpProtoIcmpv6,
                                                         static_cast<std::uint32_t>(zero.size()))));
    auto r = parse_nd(zero, kA, kB);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().field, "option_length");
}

TEST(Icmpv6, OtherTypesAreNotNeighbourDiscovery) {
    const auto echo = hex_bytes("80 00 00 00 00 01 00 01");  // echo request
    auto r = parse_nd(echo, kA, kB);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().reason, "not neighbour discovery");
}

}  // namespace
}  // namespace iwcm::wire
