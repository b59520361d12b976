// TCP: sequence arithmetic, the Linux SYN both ways, options good and bad.
//
// Read first: src/wire/tcp.hpp, RFC 9293 sections 3.1 and 3.4, RFC 7323.
#include "wire/tcp.hpp"

#include <gtest/gtest.h>

#include "wire/checksum.hpp"
#include "wire/wire_test_util.hpp"

namespace iwcm::wire {
namespace {

using test::Buffer;

const IpPseudoHeader kLinuxPh{Ipv4Addr{{10, 77, 0, 1}}, Ipv4Addr{{10, 77, 0, 2}}};
const IpPseudoHeader kPh{Ipv4Addr{{10, 0, 0, 1}}, Ipv4Addr{{10, 0, 0, 2}}};

// The TCP segment of tests/fixtures/linux_syn.hex.
Buffer linux_syn_segment() {
    auto frame = test::read_hex_fixture("linux_syn");
    return Buffer(frame.begin() + 34, frame.end());
}

// A segment with hand-written option bytes (padded by the caller) and a good checksum.
Buffer raw_segment(const Buffer& options, Bytes payload = {}) {
    Buffer s(20 + options.size() + payload.size());
    store_be16(s, 0, 1000);
    store_be16(s, 2, 2000);
    store_be32(s, 4, 1);
    store_u8(s, 12, static_cast<std::uint8_t>(((20 + options.size()) / 4) << 4));
    store_u8(s, 13, tcp_flags::kSyn);
    store_be16(s, 14, 1024);
    store_bytes(s, 20, options);
    store_bytes(s, 20 + options.size(), payload);
    store_be16(s, 16, tcp_checksum(kPh.src, kPh.dst, s));
    return s;
}

TEST(SeqNumber, WrapAwareComparison) {
    const SeqNumber a(0xFFFFFFF0u);
    const SeqNumber b = a + 0x20;
    EXPECT_EQ(b.value(), 0x10u);
    EXPECT_TRUE(a < b);
    EXPECT_TRUE(a <= b);
    EXPECT_TRUE(b > a);
    EXPECT_TRUE(b >= a);
    EXPECT_FALSE(b < a);
    EXPECT_EQ(b - a, 0x20);
    EXPECT_EQ(a - b, -0x20);
    EXPECT_TRUE(a <= a && a >= a && !(a < a));
    SeqNumber c(5);
    c += 10;
    EXPECT_EQ(c, SeqNumber(15));
    static_assert(SeqNumber(1) < SeqNumber(2));
    static_assert(SeqNumber(0x80000000u) - SeqNumber(0) == INT32_MIN);
}

TEST(Tcp, Deconstruct) {
    const Buffer s = linux_syn_segment();
    auto t = parse_tcp(s, kLinuxPh);
    ASSERT_TRUE(t) << t.error().to_string();
    const TcpRepr& r = t->repr;
    EXPECT_EQ(r.src_port, 57018);
    EXPECT_EQ(r.dst_port, 7174);
    EXPECT_EQ(r.seq.value(), 0xF06E35EDu);
    EXPECT_EQ(r.ack.value(), 0u);
    EXPECT_EQ(r.flags, tcp_flags::kSyn);
    EXPECT_TRUE(r.has(tcp_flags::kSyn));
    EXPECT_FALSE(r.has(tcp_flags::kAck));
    EXPECT_EQ(r.window, 64240);
    EXPECT_EQ(r.options.mss, 1460);
    EXPECT_EQ(r.options.window_scale, 10);
    EXPECT_TRUE(r.options.sack_permitted);
    ASSERT_TRUE(r.options.timestamps);
    EXPECT_EQ(r.options.timestamps->value, 4166597203u);
    EXPECT_EQ(r.options.timestamps->echo, 0u);
    EXPECT_TRUE(t->payload.empty());
}

TEST(Tcp, Construct) {
    const Buffer s = linux_syn_segment();
    TcpRepr r;
    r.src_port = 57018;
    r.dst_port = 7174;
    r.seq = SeqNumber(0xF06E35EDu);
    r.flags = tcp_flags::kSyn;
    r.window = 64240;
    r.options.mss = 1460;
    r.options.window_scale = 10;
    r.options.sack_permitted = true;
    r.options.timestamps = TcpTimestamps{4166597203u, 0};
    ASSERT_EQ(r.header_len(), 40u);
    Buffer out(r.header_len());
    EXPECT_EQ(emit_tcp(r, {}, kLinuxPh, out), 40u);
    EXPECT_EQ(to_hex(out), to_hex(s));
}

TEST(Tcp, OptionCombinationsRoundTrip) {
    for (int mask = 0; mask < 16; ++mask) {
        TcpRepr r;
        r.src_port = 1;
        r.dst_port = 2;
        r.seq = SeqNumber(0xFFFFFFFFu);
        r.ack = SeqNumber(7);
        r.flags = tcp_flags::kAck | tcp_flags::kPsh;
        r.window = 0xFFFF;
        r.urgent = 3;
        if (mask & 1) r.options.mss = 9000;
        if (mask & 2) r.options.window_scale = 14;
        if (mask & 4) r.options.sack_permitted = true;
        if (mask & 8) r.options.timestamps = TcpTimestamps{1, 0xFFFFFFFFu};
        const auto payload = hex_bytes("de ad be ef 01");
        Buffer out(r.header_len() + payload.size());
        ASSERT_EQ(r.header_len() % 4, 0u) << mask;
        ASSERT_EQ(emit_tcp(r, payload, kPh, out), out.size());
        auto t = parse_tcp(out, kPh);
        ASSERT_TRUE(t) << mask << " " << t.error().to_string();
        EXPECT_EQ(t->repr, r) << mask;
        EXPECT_EQ(to_hex(t->payload), "deadbeef01");
    }
}

TEST(Tcp, LinuxOptionLayouts) {
    TcpOptions o;
    o.timestamps = TcpTimestamps{0x01020304, 0x05060708};
    TcpRepr r;
    r.options = o;
    Buffer out(r.header_len());
    emit_tcp(r, {}, kPh, out);
    EXPECT_EQ(to_hex(Bytes(out).subspan(20)), "0101080a0102030405060708");  // a Linux ACK
    r.options = TcpOptions{};
    r.options.sack_permitted = true;
    r.options.mss = 536;
    out.assign(r.header_len(), std::byte{0});
    emit_tcp(r, {}, kPh, out);
    EXPECT_EQ(to_hex(Bytes(out).subspan(20)), "0204021801010402");
}

TEST(Tcp, Truncated) {
    const Buffer s = linux_syn_segment();
    for (std::size_t n = 0; n < s.size(); ++n) {
        auto t = parse_tcp(Bytes(s).first(n), kLinuxPh);
        ASSERT_FALSE(t) << n;
        EXPECT_STRNE(t.error().field, "");
        EXPECT_LE(t.error().offset, n);
    }
}

TEST(Tcp, ImpossibleLength) {
    Buffer s = raw_segment({});
    store_u8(s, 12, 4 << 4);
    auto t = parse_tcp(s, kPh);
    ASSERT_FALSE(t);
    EXPECT_STREQ(t.error().reason, "data offset below 5");
    store_u8(s, 12, 6 << 4);
    t = parse_tcp(s, kPh);
    ASSERT_FALSE(t);
    EXPECT_STREQ(t.error().reason, "data offset beyond the segment");
    EXPECT_EQ(t.error().offset, 12u);
}

TEST(Tcp, BadChecksum) {
    Buffer s = linux_syn_segment();
    s[14] ^= std::byte{0x01};  // the window changes, the checksum does not
    auto t = parse_tcp(s, kLinuxPh);
    ASSERT_FALSE(t);
    EXPECT_STREQ(t.error().field, "checksum");
    EXPECT_EQ(t.error().offset, 16u);
}

TEST(Tcp, ChecksumCoversThePseudoHeader) {
    const Buffer s = linux_syn_segment();
    const IpPseudoHeader other{Ipv4Addr{{10, 77, 0, 1}}, Ipv4Addr{{10, 77, 0, 3}}};
    EXPECT_FALSE(parse_tcp(s, other));
    const IpPseudoHeader v6{*Ipv6Addr::parse("fd77::1"), *Ipv6Addr::parse("fd77::2")};
    EXPECT_FALSE(parse_tcp(s, v6));
    // A ones'-complement sum cannot tell ::a4d:1 from 10.77.0.1: zero words add
    // nothing and both pseudo-headers sum the same length and protocol.
    const IpPseudoHeader same_sum{*Ipv6Addr::parse("::a4d:1"), *Ipv6Addr::parse("::a4d:2")};
    EXPECT_TRUE(parse_tcp(s, same_sum));
}

TEST(Tcp, UnknownOptionsSkipped) {
    // Kind 30 (MPTCP) length 4, a SACK block (kind 5, length 10), then MSS.
    const auto s =
        raw_segment(hex_bytes("1e 04 aa bb 05 0a 00 00 00 01 00 00 00 02 02 04 05 b4"
                              "00 00"));
    auto t = parse_tcp(s, kPh);
    ASSERT_TRUE(t) << t.error().to_string();
    EXPECT_EQ(t->repr.options.mss, 1460);
    EXPECT_FALSE(t->repr.options.window_scale);
}

TEST(Tcp, EolEndsOptions) {
    // After EOL the bytes are padding, even if they look like a bad option.
    const auto s = raw_segment(hex_bytes("03 03 07 00 02 00 ff ff"));
    auto t = parse_tcp(s, kPh);
    ASSERT_TRUE(t) << t.error().to_string();
    EXPECT_EQ(t->repr.options.window_scale, 7);
    EXPECT_FALSE(t->repr.options.mss);
}

struct BadOption {
    const char* hex;
    const char* field;
    std::size_t offset;
};

TEST(Tcp, MalformedOptionLengthsRejected) {
    const BadOption cases[] = {
        {"01 01 01 fe", "option_length", 23},                  // length byte missing at the end
        {"fe 00 00 00", "option_length", 21},                  // length 0
        {"fe 01 00 00", "option_length", 21},                  // length 1
        {"fe 08 00 00", "option_length", 21},                  // runs past the header
        {"02 03 05 00", "option_mss", 21},                     // MSS length 3
        {"03 04 07 00", "option_window_scale", 21},            // window scale length 4
        {"04 03 00 00", "option_sack_permitted", 21},          // SACK-permitted length 3
        {"08 08 00 00 00 00 00 00", "option_timestamps", 21},  // timestamps length 8
    };
    for (const auto& c : cases) {
        auto t = parse_tcp(raw_segment(hex_bytes(c.hex)), kPh);
        ASSERT_FALSE(t) << c.hex;
        EXPECT_STREQ(t.error().field, c.field) << c.hex;
        EXPECT_EQ(t.error().offset, c.offset) << c.hex;
    }
}

TEST(Tcp, PayloadAfterOptions) {
    const auto payload = hex_bytes("01 02 03");
    const auto s = raw_segment(hex_bytes("02 04 05 b4"), payload);
    auto t = parse_tcp(s, kPh);
    ASSERT_TRUE(t);
    EXPECT_EQ(to_hex(t->payload), "010203");
}

}  // namespace
}  // namespace iwcm::wire
