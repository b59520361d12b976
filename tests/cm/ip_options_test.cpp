// IPv4 options, IPv6 extension headers and fragments at the engine, on exact
// frames: a SYN with options or extension headers gets exactly the SYN-ACK a
// plain SYN gets; a fragment is dropped, counted, and answered with nothing; each
// parse failure's kind gives its drop reason.
//
// Read first: src/wire/ipv4.hpp, src/wire/ipv6.hpp (what is skipped and what is
// refused), tests/cm/dut.hpp.
#include "cm/dut.hpp"
#include "wire/checksum.hpp"
#include "wire/ip_extras.hpp"

namespace iwcm::test {
namespace {

using Buffer = std::vector<std::byte>;
using wire::hex_bytes;

constexpr const char* kRouterAlert = "94 04 00 00";
// Hop-by-hop (Router Alert), destination options, routing type 2 with segments
// left 0, TCP.
constexpr const char* kIpv6Chain =
    "3c 00 05 02 00 00 01 00"
    "2b 00 01 04 00 00 00 00"
    "06 02 02 00 00 00 00 00 fd 00 00 00 00 00 00 00 00 00 00 00 00 00 00 09";

Buffer emit(const wire::FrameRepr& f, std::span<const std::byte> payload = {}) {
    Buffer b(wire::tcp_frame_len(f, payload.size()));
    wire::emit_tcp_frame(f, payload, b);
    return b;
}

// The peer's SYN as Dut::to_syn_rcvd builds it.
Buffer syn(const Dut& d) {
    auto f = d.frame(tf::kSyn, wire::SeqNumber(d.peer_iss), wire::SeqNumber(0));
    f.tcp.options.mss = 1460;
    f.tcp.options.window_scale = 7;
    return emit(f);
}

void use_ipv6(Dut& d) {
    ASSERT_TRUE(d.core.add_address(*IpAddr::parse("fd00::2")).has_value());
    d.self.addr = *IpAddr::parse("fd00::2");
    d.peer.addr = *IpAddr::parse("fd00::1");
}

// Listens, feeds one frame and returns what the DUT sent.
std::vector<Sent> answer(Dut& d, const Buffer& frame) {
    auto l = d.core.listen({d.self, 0});
    EXPECT_TRUE(l.has_value());
    d.core.receive(d.now, frame);
    return d.out();
}

TEST(IpOptions, SynWithIpv4OptionGetsThePlainSynAck) {
    Dut plain;
    Dut with_option;
    auto expected = answer(plain, syn(plain));
    ASSERT_EQ(expected.size(), 1u);
    const Buffer s = wire::test::with_ipv4_options(syn(with_option), hex_bytes(kRouterAlert));
    ASSERT_EQ(s[14], std::byte{0x46});
    auto got = answer(with_option, s);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(wire::to_hex(got[0].raw), wire::to_hex(expected[0].raw));
    EXPECT_TRUE(got[0].flags(tf::kSyn | tf::kAck));
    EXPECT_EQ(got[0].raw[14], std::byte{0x45});  // our answer carries no options
    EXPECT_EQ(with_option.core.stats().syns_received, 1u);
    EXPECT_EQ(with_option.core.stats().drops_total(), 0u);
    EXPECT_EQ(with_option.transitions, plain.transitions);
}

TEST(IpOptions, SynWithIpv6ExtensionHeadersGetsThePlainSynAck) {
    Dut plain;
    Dut with_exts;
    use_ipv6(plain);
    use_ipv6(with_exts);
    auto expected = answer(plain, syn(plain));
    ASSERT_EQ(expected.size(), 1u);
    const Buffer s = wire::test::with_ipv6_extensions(syn(with_exts), 0, hex_bytes(kIpv6Chain));
    auto got = answer(with_exts, s);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(wire::to_hex(got[0].raw), wire::to_hex(expected[0].raw));
    EXPECT_TRUE(got[0].flags(tf::kSyn | tf::kAck));
    EXPECT_EQ(got[0].raw[14 + 6], std::byte{6});  // next header TCP: no extension headers
    EXPECT_EQ(got[0].raw.size(), 14u + 40u + got[0].tcp().header_len());
    EXPECT_EQ(with_exts.core.stats().drops_total(), 0u);
}

// Options on every segment of the passive handshake and the MPA request: the
// connect request is reported as without them.
TEST(IpOptions, WholePassiveOpenWithIpv4Options) {
    Dut d;
    auto sa = answer(d, wire::test::with_ipv4_options(syn(d), hex_bytes(kRouterAlert)));
    ASSERT_EQ(sa.size(), 1u);
    d.dut_nxt = sa[0].tcp().seq + 1;
    const Buffer opts = hex_bytes("01 01 94 04 00 00 00 00");
    d.core.receive(
        d.now, wire::test::with_ipv4_options(emit(d.frame(tf::kAck, d.peer_nxt, d.dut_nxt)), opts));
    EXPECT_TRUE(d.out().empty());
    const Buffer pd = bytes("hi");
    const wire::MpaRepr req = request_v2(pd);
    Buffer m(req.buffer_len());
    req.emit(m);
    d.core.receive(d.now, wire::test::with_ipv4_options(
                              emit(d.frame(tf::kAck | tf::kPsh, d.peer_nxt, d.dut_nxt), m), opts));
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kConnectRequest);
    EXPECT_EQ(text(e[0].pdata), "hi");
    EXPECT_EQ(d.core.stats().drops_total(), 0u);
}

// A SYN in a fragment: dropped and counted as kFragment, nothing sent, no node.
TEST(IpOptions, FragmentDroppedAndCounted) {
    for (std::uint16_t flags : {std::uint16_t{0x2000}, std::uint16_t{0x0001}}) {
        Dut d;
        Buffer s = syn(d);
        wire::MutBytes ip = wire::MutBytes(s).subspan(14);
        wire::store_be16(ip, 6, flags);
        wire::store_be16(ip, 10, 0);
        wire::store_be16(ip, 10, wire::internet_checksum(ip.first(20)));
        EXPECT_TRUE(answer(d, s).empty()) << flags;
        EXPECT_TRUE(d.evs().empty());
        EXPECT_EQ(d.core.stats().drops(DropReason::kFragment), 1u) << flags;
        EXPECT_EQ(d.core.stats().drops_total(), 1u);
        EXPECT_EQ(d.core.stats().syns_received, 0u);
        EXPECT_EQ(d.core.live_nodes(), 0u);
    }
    Dut d;
    use_ipv6(d);
    const Buffer frag = hex_bytes("06 00 00 00 00 00 00 00");  // atomic: offset 0, M clear
    EXPECT_TRUE(answer(d, wire::test::with_ipv6_extensions(syn(d), 44, frag)).empty());
    EXPECT_EQ(d.core.stats().drops(DropReason::kFragment), 1u);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

// Each kind of parse failure gives its drop reason (the engine's switch on
// wire::ParseErrorKind), and nothing is answered.
TEST(IpOptions, ParseFailureKindsGiveTheirDropReasons) {
    struct Case {
        const char* name;
        Buffer frame;
        DropReason reason;
    };
    Dut v4;
    Dut v6;
    use_ipv6(v6);
    const Buffer plain4 = syn(v4);
    const Buffer plain6 = syn(v6);
    Buffer bad_sum = wire::test::with_ipv4_options(plain4, hex_bytes(kRouterAlert));
    bad_sum[14 + 23] = std::byte{1};  // inside the option, under the header checksum
    Buffer arp = plain4;
    wire::store_be16(arp, 12, wire::kEtherTypeArp);
    const Buffer ah = hex_bytes("06 04 00 00 00 00 01 00 00 00 00 01" + std::string(24, '0'));
    const Case cases[] = {
        {"source route", wire::test::with_ipv4_options(plain4, hex_bytes("83 03 04 00")),
         DropReason::kMalformed},
        {"option length 1", wire::test::with_ipv4_options(plain4, hex_bytes("94 01 00 00")),
         DropReason::kMalformed},
        {"bad checksum", bad_sum, DropReason::kBadChecksum},
        {"not IP", arp, DropReason::kNotTcp},
        {"routing, segments left 1",
         wire::test::with_ipv6_extensions(plain6, 43, hex_bytes("06 00 00 01 00 00 00 00")),
         DropReason::kMalformed},
        {"TCP behind AH", wire::test::with_ipv6_extensions(plain6, 51, ah), DropReason::kNotTcp},
    };
    auto l4 = v4.core.listen({v4.self, 0});
    auto l6 = v6.core.listen({v6.self, 0});
    ASSERT_TRUE(l4 && l6);
    for (const Case& c : cases) {
        Dut& d = c.frame.size() > 14 && c.frame[12] == std::byte{0x86} ? v6 : v4;
        const Stats before = d.core.stats();
        d.core.receive(d.now, c.frame);
        EXPECT_TRUE(d.out().empty()) << c.name;
        EXPECT_EQ(d.core.stats().drops(c.reason), before.drops(c.reason) + 1) << c.name;
        EXPECT_EQ(d.core.stats().drops_total(), before.drops_total() + 1) << c.name;
    }
    EXPECT_EQ(v4.core.live_nodes() + v6.core.live_nodes(), 0u);
}

}  // namespace
}  // namespace iwcm::test
