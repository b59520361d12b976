// ARP: golden bytes from the Linux kernel, both ways; refusals.
//
// Read first: src/wire/arp.hpp. The golden request is the kernel's (a bridge
// in a test namespace asking for the CM's address), as tshark printed it.
#include <gtest/gtest.h>

#include "wire/arp.hpp"
#include "wire/ethernet.hpp"

namespace iwcm::wire {
namespace {

// Ethernet header + ARP request "who has 10.99.1.2? tell 10.99.1.1".
const char* kLinuxRequest =
    "ff ff ff ff ff ff 26 81 fd 9c 50 d9 08 06"
    "00 01 08 00 06 04 00 01 26 81 fd 9c 50 d9 0a 63 01 01"
    "00 00 00 00 00 00 0a 63 01 02";

TEST(Arp, Deconstruct) {
    const auto frame = hex_bytes(kLinuxRequest);
    auto eth = parse_ethernet(frame);
    ASSERT_TRUE(eth);
    ASSERT_EQ(eth->repr.ethertype, kEtherTypeArp);
    auto arp = parse_arp(eth->payload);
    ASSERT_TRUE(arp) << arp.error().to_string();
    EXPECT_EQ(arp->op, ArpOp::kRequest);
    EXPECT_EQ(arp->sender_mac, *MacAddr::parse("26:81:fd:9c:50:d9"));
    EXPECT_EQ(arp->sender_ip, *Ipv4Addr::parse("10.99.1.1"));
    EXPECT_EQ(arp->target_mac, MacAddr{});
    EXPECT_EQ(arp->target_ip, *Ipv4Addr::parse("10.99.1.2"));
}

TEST(Arp, Construct) {
    ArpRepr r{ArpOp::kRequest, *MacAddr::parse("26:81:fd:9c:50:d9"), *Ipv4Addr::parse("10.99.1.1"),
              MacAddr{}, *Ipv4Addr::parse("10.99.1.2")};
    std::vector<std::byte> out(kArpLen);
    r.emit(out);
    const auto golden = hex_bytes(kLinuxRequest);
    EXPECT_EQ(to_hex(out), to_hex(Bytes(golden).subspan(kEthernetHeaderLen)));
}

TEST(Arp, ReplyRoundTrip) {
    ArpRepr r{ArpOp::kReply, *MacAddr::parse("02:00:0a:63:01:02"), *Ipv4Addr::parse("10.99.1.2"),
              *MacAddr::parse("26:81:fd:9c:50:d9"), *Ipv4Addr::parse("10.99.1.1")};
    std::vector<std::byte> out(kArpLen + 18, std::byte{0});  // with Ethernet padding after it
    r.emit(out);
    auto back = parse_arp(out);
    ASSERT_TRUE(back);
    EXPECT_EQ(*back, r);
}

TEST(Arp, Truncated) {
    const auto frame = hex_bytes(kLinuxRequest);
    for (std::size_t n = 0; n < kArpLen; ++n) {
        auto r = parse_arp(Bytes(frame).subspan(kEthernetHeaderLen, n));
        ASSERT_FALSE(r) << n;
        EXPECT_STREQ(r.error().layer, "arp");
    }
}

TEST(Arp, RefusesOtherHardwareProtocolAndOpcodes) {
    auto frame = hex_bytes(kLinuxRequest);
    auto arp = [&] { return parse_arp(Bytes(frame).subspan(kEthernetHeaderLen)); };
    frame[14 + 1] = std::byte{6};  // IEEE 802 hardware type
    EXPECT_STREQ(arp().error().field, "htype");
    frame[14 + 1] = std::byte{1};
    frame[14 + 2] = std::byte{0x86};  // IPv6 protocol type
    EXPECT_STREQ(arp().error().field, "ptype");
    frame[14 + 2] = std::byte{0x08};
    frame[14 + 5] = std::byte{16};
    EXPECT_STREQ(arp().error().field, "plen");
    frame[14 + 5] = std::byte{4};
    frame[14 + 7] = std::byte{3};  // RARP request
    EXPECT_STREQ(arp().error().field, "opcode");
    frame[14 + 7] = std::byte{2};
    EXPECT_TRUE(arp());
}

}  // namespace
}  // namespace iwcm::wire
