// IPv6: golden header from a Linux SYN, lengths, and extension headers: a golden
// chain of hop-by-hop, destination options and routing types 0 and 2 skipped;
// truncated, oversized, misplaced and too many headers, unknown "discard"
// options, segments left and fragments refused with their kinds; AH, ESP and No
// Next Header reported as the upper layer.
//
// Read first: src/wire/ipv6.hpp.
#include "wire/ipv6.hpp"

#include <gtest/gtest.h>

#include <string>

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
    EXPECT_EQ(r.error().kind, ParseErrorKind::kBadLength);
    EXPECT_EQ(r.error().offset, 4u);
}

TEST(Ipv6, LongerBufferIsCut) {
    Buffer p = linux6_syn_packet();
    p.resize(p.size() + 3);
    auto r = parse_ipv6(p);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->payload.size(), 40u);
}

// The fixed header, payload length 68, next header 0 (hop-by-hop), then:
constexpr const char* kIpv6Fixed =
    "60 00 00 00 00 44 00 40"
    "20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 01"
    "20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 02";
// hop-by-hop (next 60): Router Alert (type 5, 2 bytes), PadN of 0 bytes;
constexpr const char* kHopByHop = "3c 00 05 02 00 00 01 00";
// destination options (next 43): PadN of 4 bytes;
constexpr const char* kDestOpts = "2b 00 01 04 00 00 00 00";
// routing type 0 (next 43), segments left 0, one address;
constexpr const char* kRouting0 =
    "2b 02 00 00 00 00 00 00 20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 03";
// routing type 2 (next 6, TCP), segments left 0, a home address; then 4 bytes.
constexpr const char* kRouting2 =
    "06 02 02 00 00 00 00 00 20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 04";

Buffer chain_packet() {
    std::string hex = std::string(kIpv6Fixed) + kHopByHop + kDestOpts + kRouting0 + kRouting2;
    return hex_bytes(hex + "de ad be ef");
}

// A packet whose extension headers are `exts` (each names its own next header),
// the first named by `first`, followed by four payload bytes.
Buffer packet_with(std::uint8_t first, const std::string& exts) {
    Buffer p = hex_bytes(std::string(kIpv6Fixed) + exts + "de ad be ef");
    store_be16(p, 4, static_cast<std::uint16_t>(p.size() - 40));
    p[6] = static_cast<std::byte>(first);
    return p;
}

TEST(Ipv6, ExtensionHeaderChainSkipped) {
    const Buffer p = chain_packet();
    ASSERT_EQ(p.size(), 40u + 64u + 4u);
    auto r = parse_ipv6(p);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->repr.next_header, kIpProtoTcp);
    EXPECT_EQ(r->repr.payload_len, 4);
    EXPECT_EQ(to_hex(r->payload), "deadbeef");
    EXPECT_EQ(r->extensions.size(), 64u);
    EXPECT_EQ(r->extensions.data(), p.data() + 40);
    EXPECT_EQ(r->repr.dst, *Ipv6Addr::parse("2001:db8::2"));  // not a routing header's
    // Emitted again: the fixed header alone, next header TCP, payload length 4.
    Buffer out(Ipv6Repr::kHeaderLen);
    r->repr.emit(out);
    Buffer expected(p.begin(), p.begin() + 40);
    store_be16(expected, 4, 4);
    expected[6] = std::byte{kIpProtoTcp};
    EXPECT_EQ(to_hex(out), to_hex(expected));
}

TEST(Ipv6, UnknownSkippableOptionSkipped) {
    // Type 0x1e: high bits 00, "skip over this option".
    const Buffer pkt =
        packet_with(60, "06 00 1e 04 aa bb cc dd");  // the result's views point into it
    auto r = parse_ipv6(pkt);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(to_hex(r->payload), "deadbeef");
}

TEST(Ipv6, MalformedExtensionHeadersRefused) {
    struct Case {
        std::uint8_t first;
        std::string exts;
        ParseErrorKind kind;
        std::size_t offset;
        const char* reason;
    };
    const Case cases[] = {
        // Unknown options whose type asks for a discard (01, 10, 11), Jumbo Payload among them.
        {60, "06 00 42 04 00 00 00 00", ParseErrorKind::kBadOption, 42,
         "unrecognised option asks for a discard"},
        {60, "06 00 9e 04 00 00 00 00", ParseErrorKind::kBadOption, 42,
         "unrecognised option asks for a discard"},
        {0, "06 00 c2 04 00 01 00 00", ParseErrorKind::kBadOption, 42,
         "unrecognised option asks for a discard"},
        // An option running past its header, one whose length byte is missing.
        {60, "06 00 01 05 00 00 00 00", ParseErrorKind::kBadOption, 43,
         "option runs past the header"},
        {60, "06 00 00 00 00 00 00 05", ParseErrorKind::kBadOption, 47,
         "option length byte missing"},
        // Hop-by-hop after another header.
        {60, "00 00 01 04 00 00 00 00 06 00 01 04 00 00 00 00", ParseErrorKind::kBadValue, 40,
         "hop-by-hop options not first"},
        // A routing header for a later hop.
        {43, "06 00 00 01 00 00 00 00", ParseErrorKind::kBadValue, 43,
         "routing header with segments left"},
        // Fragments, atomic or not.
        {44, "06 00 00 00 00 00 00 01", ParseErrorKind::kFragment, 40, "fragments not supported"},
        {44, "06 00 00 01 00 00 00 01", ParseErrorKind::kFragment, 40, "fragments not supported"},
        {0, "2c 00 01 04 00 00 00 00 06 00 00 00 00 00 00 01", ParseErrorKind::kFragment, 48,
         "fragments not supported"},
    };
    for (const Case& c : cases) {
        auto r = parse_ipv6(packet_with(c.first, c.exts));
        ASSERT_FALSE(r) << c.exts;
        EXPECT_EQ(r.error().kind, c.kind) << c.exts << ": " << r.error().to_string();
        EXPECT_EQ(r.error().offset, c.offset) << c.exts;
        EXPECT_STREQ(r.error().reason, c.reason) << c.exts;
    }
}

TEST(Ipv6, ExtensionHeaderPastThePayloadRefused) {
    // Header length 1 says 16 bytes; the payload length leaves 12 (8 + 4 bytes).
    auto r = parse_ipv6(packet_with(60, "06 01 01 04 00 00 00 00"));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, ParseErrorKind::kBadLength);
    EXPECT_STREQ(r.error().field, "hdr_ext_len");
    EXPECT_EQ(r.error().offset, 41u);
    // The largest header length, 2048 bytes, in a small packet.
    r = parse_ipv6(packet_with(60, "06 ff 01 04 00 00 00 00"));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, ParseErrorKind::kBadLength);
    // A payload length that ends inside the first two bytes of a header.
    Buffer p = packet_with(60, "06 00 01 04 00 00 00 00");
    store_be16(p, 4, 1);
    r = parse_ipv6(p);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, ParseErrorKind::kBadLength);
    EXPECT_STREQ(r.error().field, "extension_header");
    EXPECT_EQ(r.error().offset, 40u);
}

TEST(Ipv6, AtMostEightExtensionHeaders) {
    std::string eight;
    for (int i = 0; i < 7; ++i) eight += "3c 00 01 04 00 00 00 00";
    const Buffer pkt = packet_with(60, eight + "06 00 01 04 00 00 00 00");
    auto r = parse_ipv6(pkt);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->extensions.size(), 64u);
    r = parse_ipv6(packet_with(60, eight + "3c 00 01 04 00 00 00 00 06 00 01 04 00 00 00 00"));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, ParseErrorKind::kBadValue);
    EXPECT_STREQ(r.error().reason, "more than 8 extension headers");
    EXPECT_EQ(r.error().offset, 40u + 7u * 8u);  // the eighth header's next header
}

TEST(Ipv6, OtherNextHeadersEndTheWalk) {
    // AH, ESP, No Next Header, UDP: reported as the upper layer, not walked.
    for (std::uint8_t next : {51, 50, 59, 17}) {
        Buffer p = linux6_syn_packet();
        p[6] = static_cast<std::byte>(next);
        auto r = parse_ipv6(p);
        ASSERT_TRUE(r) << int{next};
        EXPECT_EQ(r->repr.next_header, next);
        EXPECT_EQ(r->payload.size(), 40u);
        EXPECT_TRUE(r->extensions.empty());
    }
    // The same after a destination options header.
    const Buffer pkt = packet_with(60, "33 00 01 04 00 00 00 00");
    auto r = parse_ipv6(pkt);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->repr.next_header, 51);
    EXPECT_EQ(to_hex(r->payload), "deadbeef");
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
