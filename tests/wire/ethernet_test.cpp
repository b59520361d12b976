// Ethernet II and 802.1Q: golden bytes both ways, truncation.
//
// Read first: src/wire/ethernet.hpp.
#include "wire/ethernet.hpp"

#include <gtest/gtest.h>

#include "wire/wire_test_util.hpp"

namespace iwcm::wire {
namespace {

using test::Buffer;

const MacAddr kDst{{0x2a, 0xe8, 0x3f, 0x24, 0x1d, 0xb7}};
const MacAddr kSrc{{0x36, 0xd2, 0xb7, 0xb2, 0xab, 0x40}};

TEST(Ethernet, Deconstruct) {
    // The first bytes of the Linux SYN fixture, plus two payload bytes.
    const auto frame = hex_bytes("2a e8 3f 24 1d b7 36 d2 b7 b2 ab 40 08 00 45 00");
    auto f = parse_ethernet(frame);
    ASSERT_TRUE(f) << f.error().to_string();
    EXPECT_EQ(f->repr.dst, kDst);
    EXPECT_EQ(f->repr.src, kSrc);
    EXPECT_FALSE(f->repr.vlan);
    EXPECT_EQ(f->repr.ethertype, kEtherTypeIpv4);
    ASSERT_EQ(f->payload.size(), 2u);
    EXPECT_EQ(f->payload[0], std::byte{0x45});
}

TEST(Ethernet, Construct) {
    EthernetRepr r{kDst, kSrc, std::nullopt, kEtherTypeIpv6};
    Buffer out(r.header_len());
    r.emit(out);
    EXPECT_EQ(to_hex(out), "2ae83f241db736d2b7b2ab4086dd");
}

TEST(Ethernet, VlanDeconstruct) {
    // PCP 5, DEI 1, VID 0x123: TCI = 101 1 0001 0010 0011 = 0xB123.
    const auto frame = hex_bytes("ff ff ff ff ff ff 02 00 00 00 00 01 81 00 b1 23 08 00 aa");
    auto f = parse_ethernet(frame);
    ASSERT_TRUE(f) << f.error().to_string();
    ASSERT_TRUE(f->repr.vlan);
    EXPECT_EQ(f->repr.vlan->id, 0x123);
    EXPECT_EQ(f->repr.vlan->priority, 5);
    EXPECT_TRUE(f->repr.vlan->dei);
    EXPECT_EQ(f->repr.ethertype, kEtherTypeIpv4);
    EXPECT_EQ(f->repr.header_len(), 18u);
    EXPECT_EQ(f->payload.size(), 1u);
}

TEST(Ethernet, VlanConstruct) {
    EthernetRepr r{MacAddr::broadcast(), MacAddr{{2, 0, 0, 0, 0, 1}}, VlanTag{0x123, 5, true},
                   kEtherTypeIpv4};
    Buffer out(r.header_len());
    r.emit(out);
    EXPECT_EQ(to_hex(out), "ffffffffffff0200000000018100b1230800");
}

TEST(Ethernet, VlanRoundTripEveryPriority) {
    for (std::uint8_t pcp = 0; pcp < 8; ++pcp) {
        EthernetRepr r{kDst, kSrc,
                       VlanTag{static_cast<std::uint16_t>(0xFFF - pcp), pcp, pcp % 2 == 0},
                       kEtherTypeArp};
        Buffer out(r.header_len());
        r.emit(out);
        auto f = parse_ethernet(out);
        ASSERT_TRUE(f);
        EXPECT_EQ(f->repr, r);
    }
}

// The core reads the VLAN before the parse, to prefetch the connection's slot
// (src/cm/tcp.cpp): it must find the id the parse finds, or untagged where the parse does.
TEST(Ethernet, PeekVlanIdAgreesWithTheParse) {
    constexpr std::uint16_t kUntagged = 0xFFFF;
    const auto tagged = hex_bytes("ff ff ff ff ff ff 02 00 00 00 00 01 81 00 b1 23 08 00 aa");
    EXPECT_EQ(peek_vlan_id(tagged, kUntagged), 0x123);
    const auto plain = hex_bytes("2a e8 3f 24 1d b7 36 d2 b7 b2 ab 40 08 00 45 00 00 28 aa");
    EXPECT_EQ(peek_vlan_id(plain, kUntagged), kUntagged);
    // An 802.1ad outer tag is not a VLAN here: the parse leaves it as the ethertype.
    const auto qinq = hex_bytes("ff ff ff ff ff ff 02 00 00 00 00 01 88 a8 b1 23 81 00 aa");
    EXPECT_EQ(peek_vlan_id(qinq, kUntagged), kUntagged);
    EXPECT_FALSE(parse_ethernet(qinq)->repr.vlan);
    // Every TCI under the 802.1Q TPID, and every type word with a TCI that would read as VID
    // 0x123 were it a tag.
    auto frame = tagged;
    for (std::uint32_t v = 0; v <= 0xFFFF; ++v) {
        for (std::size_t off : {kEthernetTciOff, kEthernetTypeOff}) {
            frame = tagged;
            frame[off] = static_cast<std::byte>(v >> 8);
            frame[off + 1] = static_cast<std::byte>(v & 0xFF);
            auto f = parse_ethernet(frame);
            ASSERT_TRUE(f) << v;
            const std::uint16_t id = f->repr.vlan ? f->repr.vlan->id : kUntagged;
            ASSERT_EQ(peek_vlan_id(frame, kUntagged), id) << "offset " << off << " value " << v;
        }
    }
}

TEST(Ethernet, Truncated) {
    const auto frame = hex_bytes("ff ff ff ff ff ff 02 00 00 00 00 01 81 00 b1 23 08 00");
    for (std::size_t n = 0; n < frame.size(); ++n) {
        auto f = parse_ethernet(Bytes(frame).first(n));
        ASSERT_FALSE(f) << n;
        EXPECT_STREQ(f.error().layer, "ethernet");
        EXPECT_LE(f.error().offset, n);
    }
    EXPECT_TRUE(parse_ethernet(frame));
}

}  // namespace
}  // namespace iwcm::wire
