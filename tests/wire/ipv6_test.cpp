// IPv6: golden header from a Linux SYN, refusal of extension headers, lengths.
//
// Read first: src/wire/ipv6.hpp.
#include "wire/ipv6.hpp"

#include <gtest/gtest.h>

#include "wire/wire_test_util.hpp"

namespace iwcm::wire {
namespace {

using test::Buffer;

Buffer linux6_syn_packet() {
    auto frame = test::read_hex_fixture("linux6_syn");
    return Buffer(frame.begin() + 14, frame.end());
}

TEST(Ipv6, Deconstruct) {
    const Buffer p = linux6_syn_packet();
    ASSERT_EQ(p.size(), 80u);
    auto r = parse_ipv6(p);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->repr.src, *Ipv6Addr::parse("fd77::1"));
    EXPECT_EQ(r->repr.dst, *Ipv6Addr::parse("fd77::2"));
    EXPECT_EQ(r->repr.next_header, 6);
    EXPECT_EQ(r->repr.hop_limit, 64);
    EXPECT_EQ(r->repr.traffic_class, 0);
    EXPECT_EQ(r->repr.payload_len, 40);
    EXPECT_EQ(r->payload.size(), 40u);
    EXPECT_EQ(r->repr.flow_label, load_be32(p, 0) & 0xFFFFF);
    EXPECT_NE(r->repr.flow_label, 0u);  // Linux hashes a flow label for each connection
}

TEST(Ipv6, Construct) {
    const Buffer p = linux6_syn_packet();
    auto parsed = parse_ipv6(p);
    ASSERT_TRUE(parsed);
    Ipv6Repr r{*Ipv6Addr::parse("fd77::1"),
               *Ipv6Addr::parse("fd77::2"),
               6,
               64,
               0,
               parsed->repr.flow_label,
               40};
    Buffer out(Ipv6Repr::kHeaderLen);
    r.emit(out);
    EXPECT_EQ(to_hex(out), to_hex(Bytes(p).first(40)));
}

TEST(Ipv6, RoundTripFields) {
    Ipv6Repr r{
        *Ipv6Addr::parse("2001:db8::1"), *Ipv6Addr::parse("fe80::abcd"), 58, 255, 0xB9, 0xABCDE, 2};
    Buffer out(42);
    r.emit(out);
    auto p = parse_ipv6(out);
    ASSERT_TRUE(p) << p.error().to_string();
    EXPECT_EQ(p->repr, r);
    EXPECT_EQ(p->payload.size(), 2u);
}

TEST(Ipv6, Truncated) {
    const Buffer p = linux6_syn_packet();
    for (std::size_t n = 0; n < p.size(); ++n) {
        auto r = parse_ipv6(Bytes(p).first(n));
        ASSERT_FALSE(r) << n;
        EXPECT_STRNE(r.error().field, "");
        EXPECT_LE(r.error().offset, n);
    }
}

TEST(Ipv6, ImpossibleLength) {
    Buffer p = linux6_syn_packet();
    store_be16(p, 4, 41);
    auto r = parse_ipv6(p);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().field, "payload_length");
    EXPECT_EQ(r.error().offset, 4u);
}

TEST(Ipv6, LongerBufferIsCut) {
    Buffer p = linux6_syn_packet();
    p.resize(p.size() + 3);
    auto r = parse_ipv6(p);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->payload.size(), 40u);
}

TEST(Ipv6, ExtensionHeaderRejected) {
    for (std::uint8_t next : {0, 43, 44, 50, 51, 60, 17}) {
        Buffer p = linux6_syn_packet();
        p[6] = static_cast<std::byte>(next);
        auto r = parse_ipv6(p);
        ASSERT_FALSE(r) << int{next};
        EXPECT_STREQ(r.error().reason, "extension header not supported");
        EXPECT_EQ(r.error().offset, 6u);
    }
}

TEST(Ipv6, BadVersion) {
    Buffer p = linux6_syn_packet();
    p[0] = std::byte{0x40};
    auto r = parse_ipv6(p);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().field, "version");
}

}  // namespace
}  // namespace iwcm::wire
