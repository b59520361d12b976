// Checksum offload (CoreConfig::checksum_offload): the frames of a whole setup are the same
// with and without it but for the checksum fields, a corrupted frame is dropped without it,
// and the hosts of a real wire refuse a core that has it.
//
// Read first: include/iwcm/config.hpp (checksum_offload), src/wire/frame.hpp.
#include <algorithm>

#include "cm/harness.hpp"
#include "io/loop/event_loop.hpp"

namespace iwcm::test {
namespace {

constexpr std::size_t kIpOff = 14;  // untagged IPv4 frames
constexpr std::size_t kIpChecksum = kIpOff + 10;
constexpr std::size_t kTcpChecksum = kIpOff + 20 + 16;

CoreConfig offloading(MacAddr mac, std::uint8_t secret, bool offload) {
    CoreConfig c = config_for(mac, secret);
    c.checksum_offload = offload;
    return c;
}

// Every frame of one setup (SYN to RTR and its ACK) and a graceful close, in order, as sent.
std::vector<std::vector<std::byte>> setup_frames(bool offload) {
    Pair p(offloading(kMacA, 1, offload), offloading(kMacB, 2, offload));
    std::vector<std::vector<std::byte>> frames;
    p.lose = [&frames](bool, const std::vector<std::byte>& f) {
        frames.push_back(f);
        return false;
    };
    EXPECT_TRUE(p.b.listen({{ip_b(), 4791}, 0}).has_value());
    auto cp = p.connect_params();
    auto pdata = bytes("private data of the request");
    cp.private_data = pdata;
    auto c = p.a.connect(p.now, cp);
    EXPECT_TRUE(c.has_value());
    p.pump();
    auto eb = events(p.b);
    EXPECT_EQ(eb.size(), 1u);
    if (eb.size() != 1) return frames;
    EXPECT_TRUE(p.b.accept(p.now, eb[0].conn, AcceptParams{}).has_value());
    p.pump();
    auto ea = events(p.a);
    EXPECT_EQ(ea.size(), 1u);
    if (!ea.empty()) {
        EXPECT_EQ(ea[0].type, EventType::kEstablished);
    }
    EXPECT_EQ(events(p.b).size(), 1u);  // established
    EXPECT_TRUE(p.a.disconnect(p.now, *c, DisconnectMode::kGraceful).has_value());
    p.advance(p.now + std::chrono::seconds(1));
    EXPECT_EQ(events(p.a).size(), 1u);  // disconnected
    EXPECT_EQ(events(p.b).size(), 1u);
    EXPECT_EQ(p.a.live_nodes(), 0u);
    EXPECT_EQ(p.b.live_nodes(), 0u);
    EXPECT_EQ(p.a.stats().drops_total() + p.b.stats().drops_total(), 0u);
    return frames;
}

TEST(ChecksumOffload, FramesDifferOnlyInTheChecksumFields) {
    const auto full = setup_frames(false);
    const auto off = setup_frames(true);
    ASSERT_EQ(full.size(), off.size());
    ASSERT_GE(full.size(), 8u);  // the setup's six frames and the close
    for (std::size_t n = 0; n < full.size(); ++n) {
        ASSERT_EQ(full[n].size(), off[n].size()) << "frame " << n;
        for (std::size_t i = 0; i < full[n].size(); ++i) {
            const bool checksum = i == kIpChecksum || i == kIpChecksum + 1 || i == kTcpChecksum ||
                                  i == kTcpChecksum + 1;
            if (checksum) {
                EXPECT_EQ(off[n][i], std::byte{0}) << "frame " << n << " byte " << i;
            } else {
                EXPECT_EQ(off[n][i], full[n][i]) << "frame " << n << " byte " << i;
            }
        }
        // Without the offload both checksums are there and good; with it the frame is
        // refused by a verifying parser and taken, the same, by one that trusts the link.
        EXPECT_TRUE(wire::parse_tcp_frame(full[n])) << "frame " << n;
        auto refused = wire::parse_tcp_frame(off[n]);
        ASSERT_FALSE(refused) << "frame " << n;
        EXPECT_EQ(refused.error().kind, wire::ParseErrorKind::kBadChecksum);
        EXPECT_TRUE(wire::parse_tcp_frame(off[n], wire::Checksums::kOffload)) << "frame " << n;
    }
}

// The SYN of a core without the offload, one bit of its window flipped: a verifying core
// drops it as a bad checksum and answers nothing; a core with the offload would take it,
// which is why nothing that can corrupt a frame may lead to such a core.
TEST(ChecksumOffload, CorruptedFrameDroppedOnlyWhenVerifying) {
    for (bool offload : {false, true}) {
        Pair p(offloading(kMacA, 1, offload), offloading(kMacB, 2, offload));
        ASSERT_TRUE(p.b.listen({{ip_b(), 4791}, 0}).has_value());
        ASSERT_TRUE(p.a.connect(p.now, p.connect_params()).has_value());
        auto syn = p.a.poll_transmit();
        ASSERT_TRUE(syn.has_value());
        std::vector<std::byte> frame(syn->begin(), syn->end());
        ASSERT_FALSE(p.a.poll_transmit().has_value());
        frame[kIpOff + 20 + 14] ^= std::byte{0x04};  // the TCP window's high byte
        const std::uint64_t bad = p.b.stats().drops(DropReason::kBadChecksum);
        p.b.receive(p.now, frame);
        if (offload) {
            EXPECT_EQ(p.b.stats().drops(DropReason::kBadChecksum), bad);
            EXPECT_EQ(p.b.poll_transmit().has_value(), true);  // the SYN-ACK
        } else {
            EXPECT_EQ(p.b.stats().drops(DropReason::kBadChecksum), bad + 1);
            EXPECT_FALSE(p.b.poll_transmit().has_value());
        }
    }
}

TEST(ChecksumOffload, OffByDefaultAndRefusedOnADevice) {
    CoreConfig c;
    EXPECT_FALSE(c.checksum_offload);
    EXPECT_FALSE(io::offload_refused(c, "tap0").has_value());
    c.checksum_offload = true;
    auto why = io::offload_refused(c, "tap0");
    ASSERT_TRUE(why.has_value());
    EXPECT_EQ(*why, "checksum offload is only for the in-memory link, not tap0");
}

}  // namespace
}  // namespace iwcm::test
