// RFC 9293 and RFC 5961 on the wire, the same rules before the hand-off (the MPA exchange,
// the node's TCP) and after it (tcp::Stream): an ACK older than SND.UNA - MAX.SND.WND is
// dropped with a rate-limited challenge ACK (RFC 5961 5.2 and 7); an ACK of bytes never sent
// is dropped with an ACK (RFC 9293 3.10.7.4). Whole frames compared.
#include <string>
#include <vector>

#include "cm/dut.hpp"

namespace iwcm::test {
namespace {

constexpr std::uint32_t k2To30 = 1U << 30;

// A bare ACK from the peer at its sequence, acknowledging `ack`, offering `window`.
wire::FrameRepr peer_ack(const Dut& d, wire::SeqNumber ack, std::uint16_t window) {
    auto f = d.frame(tf::kAck, d.peer_nxt, ack);
    f.tcp.window = window;
    return f;
}

std::vector<std::byte> emitted(const wire::MpaRepr& m) {
    std::vector<std::byte> b(m.buffer_len());
    m.emit(b);
    return b;
}

// What connect_active's peer answers the DUT's request with: revision 2, IRD/ORD 1, no RTR.
std::vector<std::byte> v2_reply() {
    wire::MpaRepr m;
    m.kind = wire::MpaKind::kReply;
    m.revision = 2;
    m.v2 = wire::MpaV2Params{1, 1, false, false, false, false};
    return emitted(m);
}

// ---------------------------------------------------------------- before the hand-off

// RFC 5961 5.2 (blind data injection): the MPA reply acknowledging 2^30 before SND.UNA is
// discarded with a challenge ACK; within the same second the budget (1 here) is spent and
// the next goes unanswered; at exactly SND.UNA - MAX.SND.WND the ACK is an old duplicate
// and the reply is taken.
TEST(AckValidationBeforeHandoff, AckOlderThanTheWindowIsDroppedWithAChallengeAck) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.challenge_ack_limit = 1;
    Dut d(cfg);
    const Sent request = d.to_mpareq_sent();
    const wire::SeqNumber snd_una = request.tcp().seq;  // the request is not acknowledged
    const std::vector<std::byte> reply = v2_reply();
    // MAX.SND.WND: the SYN-ACK's window, unscaled (RFC 7323 2.2).
    constexpr std::uint32_t kMaxWnd = 65535;
    d.feed(d.frame(tf::kAck | tf::kPsh, d.peer_nxt, snd_una + (0U - k2To30)), reply);
    expect_sent(d, {d.sent_ack()});
    EXPECT_EQ(d.core.stats().challenge_acks_sent, 1u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kBadAck), 1u);
    d.feed(d.frame(tf::kAck | tf::kPsh, d.peer_nxt, snd_una + (0U - kMaxWnd - 1)), reply);
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.stats().challenge_acks_limited, 1u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kBadAck), 2u);
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
    d.feed(d.frame(tf::kAck | tf::kPsh, d.peer_nxt, snd_una + (0U - kMaxWnd)), reply);
    d.peer_nxt += static_cast<std::uint32_t>(reply.size());
    expect_sent(d, {d.sent_ack()});
    const auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kEstablished);
}

// RFC 9293 3.10.7.4: the reply acknowledging a byte past SND.NXT is dropped with an ACK,
// each time (an ACK, not a challenge: no budget spent); the same reply acknowledging what
// was sent is taken.
TEST(AckValidationBeforeHandoff, AckOfUnsentDataIsDroppedWithAnAck) {
    Dut d;
    d.to_mpareq_sent();
    const std::vector<std::byte> reply = v2_reply();
    for (int k = 0; k < 2; ++k) {
        d.feed(d.frame(tf::kAck | tf::kPsh, d.peer_nxt, d.dut_nxt + 1), reply);
        expect_sent(d, {d.sent_ack()});
    }
    EXPECT_EQ(d.core.stats().drops(DropReason::kBadAck), 2u);
    EXPECT_EQ(d.core.stats().challenge_acks_sent, 0u);
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
    d.seg(tf::kAck | tf::kPsh, reply);
    expect_sent(d, {d.sent_ack()});
    const auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kEstablished);
}

// ---------------------------------------------------------------- after the hand-off

// Connected as initiator (MPA v2, no RTR), then handed off as a stream.
void stream_up(Dut& d) {
    connect_active(d);
    ASSERT_TRUE(d.core.handoff(d.conn, {}).has_value());
    expect_nothing_sent(d);
}

// A stream's frame: the window is the stream's (its buffer's free space, scaled).
Frame stream_frame(const Dut& d, std::uint8_t flags, wire::SeqNumber seq,
                   std::span<const std::byte> payload = {}) {
    const std::uint32_t wnd = d.core.stream_info(d.conn)->rcv_wnd >> d.core.config().rcv_wscale;
    return d.sent_frame(flags, seq, d.peer_nxt, payload)
        .with_window(static_cast<std::uint16_t>(std::min<std::uint32_t>(wnd, 65535)));
}

// RFC 5961 5.2 after the hand-off: the stream's MAX.SND.WND is the connection's (the window
// the peer offered before it shrank at the hand-off), and its challenge ACKs share the
// core's budget.
TEST(AckValidationAfterHandoff, AckOlderThanTheWindowIsDroppedWithAChallengeAck) {
    CoreConfig cfg = immediate_acks();
    cfg.challenge_ack_limit = 1;
    Dut d(cfg);
    connect_active(d);
    // The largest window so far is 65535 << 7; the peer now offers less.
    constexpr std::uint32_t kMaxWnd = 65535U << 7;
    d.feed(peer_ack(d, d.dut_nxt, 100));
    ASSERT_TRUE(d.core.handoff(d.conn, {}).has_value());
    expect_nothing_sent(d);
    const wire::SeqNumber snd_una = d.dut_nxt;
    d.feed(d.frame(tf::kAck | tf::kPsh, d.peer_nxt, snd_una + (0U - k2To30)), bytes("zz"));
    expect_sent(d, {stream_frame(d, tf::kAck, d.dut_nxt)});
    EXPECT_EQ(d.core.stats().challenge_acks_sent, 1u);
    d.feed(d.frame(tf::kAck | tf::kPsh, d.peer_nxt, snd_una + (0U - kMaxWnd - 1)), bytes("zz"));
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.stats().challenge_acks_limited, 1u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kBadAck), 2u);
    EXPECT_EQ(d.core.stream_info(d.conn)->readable, 0u);
    d.feed(d.frame(tf::kAck | tf::kPsh, d.peer_nxt, snd_una + (0U - kMaxWnd)), bytes("zz"));
    d.peer_nxt += 2;
    expect_sent(d, {stream_frame(d, tf::kAck, d.dut_nxt)});
    EXPECT_EQ(d.core.stream_info(d.conn)->readable, 2u);
}

TEST(AckValidationAfterHandoff, AckOfUnsentDataIsDroppedWithAnAck) {
    Dut d(immediate_acks());
    stream_up(d);
    for (int k = 0; k < 2; ++k) {
        d.feed(d.frame(tf::kAck | tf::kPsh, d.peer_nxt, d.dut_nxt + 1), bytes("zz"));
        expect_sent(d, {stream_frame(d, tf::kAck, d.dut_nxt)});
    }
    EXPECT_EQ(d.core.stats().drops(DropReason::kBadAck), 2u);
    EXPECT_EQ(d.core.stats().challenge_acks_sent, 0u);
    EXPECT_EQ(d.core.stream_info(d.conn)->readable, 0u);
    d.seg(tf::kAck | tf::kPsh, bytes("zz"));
    expect_sent(d, {stream_frame(d, tf::kAck, d.dut_nxt)});
    EXPECT_EQ(d.core.stream_info(d.conn)->readable, 2u);
}

}  // namespace
}  // namespace iwcm::test
