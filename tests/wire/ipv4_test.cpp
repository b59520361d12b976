// IPv4: golden header from a Linux SYN, options skipped (golden headers with a
// Router Alert and with NOP/EOL padding), refusals of malformed options, source
// routes, fragments, bad checksums and impossible lengths, each with its kind.
//
// Read first: src/wire/ipv4.hpp.
#include "wire/ipv4.hpp"

#include <gtest/gtest.h>

#include "iwcm/address.hpp"
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

void fix_header_checksum(Buffer& p, std::size_t header_len = 20) {
    p[10] = p[11] = std::byte{0};
    const std::uint16_t c = internet_checksum(Bytes(p).first(header_len));
    store_be16(p, 10, c);
}

// IpAddr keeps a v4 address in the first 4 of its 16 bytes, the rest zero (what the
// comparisons and the table's hash read), however it was built; it orders by family first.
TEST(IpAddr, V4AddressBytesAndOrder) {
    const IpAddr a = Ipv4Addr{{10, 0, 0, 2}};
    constexpr IpAddr b = Ipv4Addr{{10, 0, 0, 2}};  // built at compile time, byte by byte
    EXPECT_EQ(a, b);
    const std::array<std::uint8_t, 16> raw{10, 0, 0, 2};
    EXPECT_EQ(a.raw(), raw);
    EXPECT_EQ(a.v4(), (Ipv4Addr{{10, 0, 0, 2}}));
    const IpAddr c = Ipv4Addr{{10, 0, 0, 3}};
    EXPECT_NE(a, c);
    EXPECT_LT(a, c);
    // Every v4 address orders before every v6 one, whatever their bytes.
    Ipv6Addr low{};
    low.bytes[15] = 1;
    const IpAddr six = low;
    const IpAddr high = Ipv4Addr{{255, 255, 255, 255}};
    EXPECT_LT(high, six);
    EXPECT_EQ(high <=> six, std::strong_ordering::less);
    EXPECT_NE(IpAddr(Ipv4Addr{}), IpAddr(Ipv6Addr{}));  // the same zero bytes, not the same
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

// A header with one Router Alert option (RFC 2113: 0x94 0x04 0x0000), IHL 6,
// total length 28, then four payload bytes.
constexpr const char* kRouterAlertPacket =
    "46 00 00 1c 12 34 40 00 40 06 7f 07 0a 4d 00 01 0a 4d 00 02"
    "94 04 00 00"
    "de ad be ef";

TEST(Ipv4, RouterAlertOptionSkipped) {
    const Buffer p = hex_bytes(kRouterAlertPacket);
    auto r = parse_ipv4(p);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(to_hex(r->options), "94040000");
    EXPECT_EQ(to_hex(r->payload), "deadbeef");
    EXPECT_EQ(r->repr.payload_len, 4);
    EXPECT_EQ(r->repr.ident, 0x1234);
    EXPECT_EQ(r->repr.src, (Ipv4Addr{{10, 77, 0, 1}}));
    // Emitted again the header has no options: IHL 5, total 24, a new checksum.
    Buffer out(Ipv4Repr::kHeaderLen);
    r->repr.emit(out);
    EXPECT_EQ(to_hex(out), "4500001812344000400614100a4d00010a4d0002");
}

TEST(Ipv4, NopAndEolPaddingSkipped) {
    // NOP, Router Alert, EOL, two bytes of padding: IHL 7.
    const Buffer p = hex_bytes(
        "47 00 00 20 12 34 40 00 40 06 0c 74 0a 4d 00 01 0a 4d 00 02"
        "01 94 04 00 00 00 00 00"
        "de ad be ef");
    auto r = parse_ipv4(p);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->options.size(), 8u);
    EXPECT_EQ(to_hex(r->payload), "deadbeef");
    // After EOL nothing is read, not even an impossible option.
    const Buffer q = hex_bytes(
        "46 00 00 1c 12 34 40 00 40 06 12 0d 0a 4d 00 01 0a 4d 00 02"
        "00 ff ff ff"
        "de ad be ef");
    auto s = parse_ipv4(q);
    ASSERT_TRUE(s) << s.error().to_string();
    EXPECT_EQ(to_hex(s->payload), "deadbeef");
}

TEST(Ipv4, MalformedOptionsRefused) {
    struct Case {
        const char* options;
        std::size_t offset;
        const char* reason;
    };
    const Case cases[] = {
        {"01 01 01 94", 23, "option length byte missing"},
        {"94 01 00 00", 21, "option length below 2"},
        {"94 08 00 00", 21, "option runs past the header"},
        {"83 03 04 00", 20, "source route refused"},  // loose source route
        {"89 03 04 00", 20, "source route refused"},  // strict source route
    };
    for (const Case& c : cases) {
        Buffer p = hex_bytes(kRouterAlertPacket);
        const Buffer o = hex_bytes(c.options);
        std::copy(o.begin(), o.end(), p.begin() + 20);
        fix_header_checksum(p, 24);
        auto r = parse_ipv4(p);
        ASSERT_FALSE(r) << c.options;
        EXPECT_EQ(r.error().kind, ParseErrorKind::kBadOption) << c.options;
        EXPECT_EQ(r.error().offset, c.offset) << c.options;
        EXPECT_STREQ(r.error().reason, c.reason);
    }
}

TEST(Ipv4, OptionsBeyondTheBufferOrLengthRefused) {
    Buffer p = hex_bytes(kRouterAlertPacket);
    auto r = parse_ipv4(Bytes(p).first(22));  // IHL 6 needs 24 bytes
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, ParseErrorKind::kTruncated);
    EXPECT_STREQ(r.error().field, "options");
    p[0] = std::byte{0x4F};  // IHL 15: 60 bytes, more than the packet
    r = parse_ipv4(p);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, ParseErrorKind::kTruncated);
    p = hex_bytes(kRouterAlertPacket);
    store_be16(p, 2, 22);  // total length inside the options
    fix_header_checksum(p, 24);
    r = parse_ipv4(p);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, ParseErrorKind::kBadLength);
    EXPECT_STREQ(r.error().reason, "total length below header length");
}

TEST(Ipv4, ChecksumCoversTheOptions) {
    Buffer p = hex_bytes(kRouterAlertPacket);
    p[23] = std::byte{1};  // the Router Alert's value changes, the checksum does not
    auto r = parse_ipv4(p);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, ParseErrorKind::kBadChecksum);
}

TEST(Ipv4, FragmentsRejected) {
    for (std::uint16_t flags :
         {std::uint16_t{0x2000}, std::uint16_t{0x4001}, std::uint16_t{0x0100}}) {
        Buffer p = linux_syn_packet();
        store_be16(p, 6, flags);
        fix_header_checksum(p);
        auto r = parse_ipv4(p);
        ASSERT_FALSE(r) << flags;
        EXPECT_EQ(r.error().kind, ParseErrorKind::kFragment);
        EXPECT_STREQ(r.error().reason, "fragments not supported");
        EXPECT_EQ(r.error().offset, 6u);
    }
    // A fragment with options is still a fragment.
    Buffer p = hex_bytes(kRouterAlertPacket);
    store_be16(p, 6, 0x2000);
    fix_header_checksum(p, 24);
    auto r = parse_ipv4(p);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, ParseErrorKind::kFragment);
}

TEST(Ipv4, BadChecksum) {
    Buffer p = linux_syn_packet();
    p[8] = std::byte{63};  // the TTL changes, the checksum does not
    auto r = parse_ipv4(p);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().field, "checksum");
    EXPECT_EQ(r.error().kind, ParseErrorKind::kBadChecksum);
    EXPECT_EQ(r.error().offset, 10u);
}

TEST(Ipv4, BadVersion) {
    Buffer p = linux_syn_packet();
    p[0] = std::byte{0x65};
    fix_header_checksum(p);
    auto r = parse_ipv4(p);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().field, "version");
    EXPECT_EQ(r.error().kind, ParseErrorKind::kBadValue);
}

TEST(Ipv4, IhlBelowFiveRefused) {
    Buffer p = linux_syn_packet();
    p[0] = std::byte{0x44};
    fix_header_checksum(p);
    auto r = parse_ipv4(p);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().field, "ihl");
    EXPECT_EQ(r.error().kind, ParseErrorKind::kBadLength);
}

}  // namespace
}  // namespace iwcm::wire
