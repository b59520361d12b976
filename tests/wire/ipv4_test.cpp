// IPv4: golden header from a Linux SYN, refusals of options, fragments, bad
// checksums and impossible lengths.
//
// Read first: src/wire/ipv4.hpp.
#include "wire/ipv4.hpp"

#include <gtest/gtest.h>

#include "wire/checksum.hpp"
#include "wire/wire_test_util.hpp"

namespace iwcm::wire {
namespace {

using test::Buffer;

// The IPv4 header and TCP SYN of tests/fixtures/linux_syn.hex.
Buffer linux_syn_packet() {
    auto frame = test::read_hex_fixture("linux_syn");
    return Buffer(frame.begin() + 14, frame.end());
}

void fix_header_checksum(Buffer& p) {
    p[10] = p[11] = std::byte{0};
    const std::uint16_t c = internet_checksum(Bytes(p).first(20));
    store_be16(p, 10, c);
}

TEST(Ipv4, Deconstruct) {
    const Buffer p = linux_syn_packet();
    ASSERT_EQ(p.size(), 60u);
    auto r = parse_ipv4(p);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->repr.src, (Ipv4Addr{{10, 77, 0, 1}}));
    EXPECT_EQ(r->repr.dst, (Ipv4Addr{{10, 77, 0, 2}}));
    EXPECT_EQ(r->repr.protocol, 6);
    EXPECT_EQ(r->repr.ttl, 64);
    EXPECT_EQ(r->repr.tos, 0);
    EXPECT_EQ(r->repr.ident, 0x614A);
    EXPECT_TRUE(r->repr.dont_fragment);
    EXPECT_EQ(r->repr.payload_len, 40);
    EXPECT_EQ(r->payload.size(), 40u);
    EXPECT_EQ(r->payload.data(), p.data() + 20);
}

TEST(Ipv4, Construct) {
    const Buffer p = linux_syn_packet();
    Ipv4Repr r{Ipv4Addr{{10, 77, 0, 1}}, Ipv4Addr{{10, 77, 0, 2}}, 6, 64, 0, 0x614A, true, 40};
    Buffer out(Ipv4Repr::kHeaderLen);
    r.emit(out);
    EXPECT_EQ(to_hex(out), to_hex(Bytes(p).first(20)));
}

TEST(Ipv4, RoundTripFields) {
    Ipv4Repr r{Ipv4Addr{{192, 168, 1, 2}}, Ipv4Addr{{172, 16, 0, 9}}, 6, 1, 0xB8, 0xFFFF, false, 3};
    Buffer out(23, std::byte{0x77});
    r.emit(out);
    auto p = parse_ipv4(out);
    ASSERT_TRUE(p) << p.error().to_string();
    EXPECT_EQ(p->repr, r);
    EXPECT_EQ(p->payload.size(), 3u);
}

TEST(Ipv4, Truncated) {
    const Buffer p = linux_syn_packet();
    for (std::size_t n = 0; n < p.size(); ++n) {
        auto r = parse_ipv4(Bytes(p).first(n));
        ASSERT_FALSE(r) << n;
        EXPECT_STRNE(r.error().field, "");
        EXPECT_LE(r.error().offset, n);
    }
}

TEST(Ipv4, EthernetPaddingIsCut) {
    Buffer p = linux_syn_packet();
    p.resize(p.size() + 6, std::byte{0});
    auto r = parse_ipv4(p);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->payload.size(), 40u);
}

TEST(Ipv4, ImpossibleLength) {
    Buffer p = linux_syn_packet();
    store_be16(p, 2, 19);
    fix_header_checksum(p);
    auto r = parse_ipv4(p);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().field, "total_length");
    EXPECT_EQ(r.error().offset, 2u);
    store_be16(p, 2, 61);
    fix_header_checksum(p);
    r = parse_ipv4(p);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().reason, "total length beyond the buffer");
}

TEST(Ipv4, OptionsRejected) {
    Buffer p = linux_syn_packet();
    p[0] = std::byte{0x46};
    fix_header_checksum(p);
    auto r = parse_ipv4(p);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().field, "ihl");
    EXPECT_STREQ(r.error().reason, "IP options not supported");
    p[0] = std::byte{0x44};
    fix_header_checksum(p);
    EXPECT_FALSE(parse_ipv4(p));
}

TEST(Ipv4, FragmentsRejected) {
    for (std::uint16_t flags :
         {std::uint16_t{0x2000}, std::uint16_t{0x4001}, std::uint16_t{0x0100}}) {
        Buffer p = linux_syn_packet();
        store_be16(p, 6, flags);
        fix_header_checksum(p);
        auto r = parse_ipv4(p);
        ASSERT_FALSE(r) << flags;
        EXPECT_STREQ(r.error().reason, "fragments not supported");
        EXPECT_EQ(r.error().offset, 6u);
    }
}

TEST(Ipv4, BadChecksum) {
    Buffer p = linux_syn_packet();
    p[8] = std::byte{63};  // the TTL changes, the checksum does not
    auto r = parse_ipv4(p);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().field, "checksum");
    EXPECT_EQ(r.error().offset, 10u);
}

TEST(Ipv4, BadVersion) {
    Buffer p = linux_syn_packet();
    p[0] = std::byte{0x65};
    fix_header_checksum(p);
    auto r = parse_ipv4(p);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().field, "version");
}

}  // namespace
}  // namespace iwcm::wire
