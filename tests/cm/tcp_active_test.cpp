// SYN_SENT and the synchronised-state rules, on exact frames
// (RFC 9293 3.10.7.3 and 3.10.7.4, RFC 5961).
#include <cerrno>

#include "cm/dut.hpp"

namespace iwcm::test {
namespace {

// The connect ended with one event of `type` and `status`, and nothing of it is left.
void expect_connect_ended(Dut& d, EventType type, int status) {
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, type);
    EXPECT_EQ(e[0].status, status);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

TEST(SynSent, ConnectSendsSynWithDriverOptions) {
    Dut d;
    Sent syn = d.to_syn_sent();
    EXPECT_TRUE(syn.flags(tf::kSyn));
    EXPECT_EQ(syn.tcp().options.mss, 1460);
    EXPECT_EQ(syn.tcp().options.window_scale, 2);
    EXPECT_EQ(syn.tcp().window, 64240);
    EXPECT_EQ(syn.repr.eth.dst, kMacA);
    EXPECT_EQ(*d.core.state(d.conn), CmState::kSynSent);
}

TEST(SynSent, IsnFollowsRfc6528KeyAndClock) {
    // Same tuple and secret: the ISN moves with the clock (4 us ticks); another
    // secret gives another ISN.
    Dut a(config_for(kMacB, 1));
    Dut b(config_for(kMacB, 1));
    Dut c(config_for(kMacB, 2));
    b.now = Instant{std::chrono::microseconds(400)};
    auto sa = a.to_syn_sent().tcp().seq.value();
    auto sb = b.to_syn_sent().tcp().seq.value();
    auto sc = c.to_syn_sent().tcp().seq.value();
    EXPECT_EQ(sb - sa, 100u);
    EXPECT_NE(sa, sc);
}

TEST(SynSent, SynAckCompletesHandshakeAndSendsMpaRequest) {
    Dut d;
    Sent req = d.to_mpareq_sent();
    EXPECT_TRUE(req.flags(tf::kAck | tf::kPsh));
    EXPECT_EQ(req.tcp().ack.value(), d.peer_iss + 1);
    // Window now scaled by our shift of 2: 64240 >> 2.
    EXPECT_EQ(req.tcp().window, 64240 >> 2);
    auto m = parse_mpa_or_fail(req.payload);
    EXPECT_EQ(m.kind, wire::MpaKind::kRequest);
    EXPECT_EQ(m.revision, 2);
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
}

TEST(SynSent, RstWithGoodAckIsConnectionRefused) {
    Dut d;
    d.to_syn_sent();
    d.feed(d.frame(tf::kRst | tf::kAck, wire::SeqNumber(0), d.dut_nxt));
    expect_connect_ended(d, EventType::kRejected, -ECONNREFUSED);
    EXPECT_EQ(d.core.state(d.conn).error(), ApiError::kStaleHandle);
    EXPECT_EQ(d.core.stats().connect_refused_retries, 0u);
}

// CoreConfig::connect_refused_grace: each reset SYN goes again, the same bytes, 10, 20 and
// 40 ms after its reset; the reset after the last wait that fits in the grace ends it.
TEST(SynSent, RefusedSynGoesAgainWithinTheGrace) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.connect_refused_grace = std::chrono::milliseconds(70);
    Dut d(cfg);
    const Sent syn = d.to_syn_sent();
    for (int wait_ms : {10, 20, 40}) {
        d.feed(d.frame(tf::kRst | tf::kAck, wire::SeqNumber(0), d.dut_nxt));
        EXPECT_TRUE(d.evs().empty()) << "reported before the wait of " << wait_ms << " ms";
        EXPECT_EQ(*d.core.state(d.conn), CmState::kSynSent);
        d.advance(std::chrono::milliseconds(wait_ms - 1));
        EXPECT_TRUE(d.out().empty()) << "early in the wait of " << wait_ms << " ms";
        d.advance(std::chrono::milliseconds(1));
        auto o = d.out();
        ASSERT_EQ(o.size(), 1u) << "after the wait of " << wait_ms << " ms";
        EXPECT_EQ(o[0].raw, syn.raw);
    }
    d.feed(d.frame(tf::kRst | tf::kAck, wire::SeqNumber(0), d.dut_nxt));
    expect_connect_ended(d, EventType::kRejected, -ECONNREFUSED);
    EXPECT_EQ(d.core.stats().connect_refused_retries, 3u);
    EXPECT_EQ(d.core.stats().resets_received, 4u);
    EXPECT_EQ(d.core.stats().retransmissions, 0u);
}

// A SYN sent again after a reset is answered this time: the connection goes on as any, and
// unanswered it would have been retransmitted on the usual schedule, from its new sending.
TEST(SynSent, RefusedSynAnsweredTheSecondTime) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.connect_refused_grace = std::chrono::milliseconds(500);
    Dut d(cfg);
    const Sent syn = d.to_syn_sent();
    d.advance(std::chrono::milliseconds(300));
    d.feed(d.frame(tf::kRst | tf::kAck, wire::SeqNumber(0), d.dut_nxt));
    d.advance(std::chrono::milliseconds(10));
    ASSERT_EQ(d.out().size(), 1u);
    // The first SYN's retransmission (due 1 s after it) is gone; the new one is due 1 s
    // after the SYN went again.
    d.advance(std::chrono::milliseconds(999));
    EXPECT_TRUE(d.out().empty());
    d.advance(std::chrono::milliseconds(1));
    auto again = d.out();
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].raw, syn.raw);
    auto sa = d.frame(tf::kSyn | tf::kAck, wire::SeqNumber(d.peer_iss), d.dut_nxt);
    sa.tcp.options.mss = 1460;
    d.feed(sa);
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(parse_mpa_or_fail(o[0].payload).kind, wire::MpaKind::kRequest);
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(d.core.stats().connect_refused_retries, 1u);
}

// Given up while it waits to send its SYN again, the connection sends nothing more.
TEST(SynSent, RefusedSynWaitEndsWithTheConnection) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.connect_refused_grace = std::chrono::milliseconds(500);
    Dut d(cfg);
    d.to_syn_sent();
    d.feed(d.frame(tf::kRst | tf::kAck, wire::SeqNumber(0), d.dut_nxt));
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kAbortive).has_value());
    d.evs();
    d.advance(std::chrono::seconds(2));
    EXPECT_TRUE(d.out().empty());
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

TEST(SynSent, RstWithoutAckIsIgnored) {
    Dut d;
    d.to_syn_sent();
    d.feed(d.frame(tf::kRst, wire::SeqNumber(0), wire::SeqNumber(0)));
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(*d.core.state(d.conn), CmState::kSynSent);
}

TEST(SynSent, BadAckGetsRst) {
    Dut d;
    d.to_syn_sent();
    d.feed(d.frame(tf::kSyn | tf::kAck, wire::SeqNumber(d.peer_iss), d.dut_nxt + 99));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].flags(tf::kRst));
    EXPECT_EQ(o[0].tcp().seq, d.dut_nxt + 99);
    EXPECT_EQ(*d.core.state(d.conn), CmState::kSynSent);
}

TEST(SynSent, SimultaneousOpenIsResetAndReported) {
    Dut d;
    d.to_syn_sent();
    d.feed(d.frame(tf::kSyn, wire::SeqNumber(d.peer_iss), wire::SeqNumber(0)));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].flags(tf::kRst | tf::kAck));
    EXPECT_EQ(o[0].tcp().seq, d.dut_nxt);
    EXPECT_EQ(o[0].tcp().ack.value(), d.peer_iss + 1);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kConnectError);
    EXPECT_EQ(e[0].status, -ECONNABORTED);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(SynSent, FullBackoffThenUnreachable) {
    Dut d;
    Sent syn = d.to_syn_sent();
    const int at_s[] = {1, 3, 7, 15, 27, 39, 51, 63};
    for (int t : at_s) {
        d.advance(std::chrono::seconds(t) - d.now.time_since_epoch() -
                  std::chrono::milliseconds(1));
        EXPECT_TRUE(d.out().empty()) << "early at " << t << " s";
        d.advance(std::chrono::milliseconds(1));
        auto o = d.out();
        ASSERT_EQ(o.size(), 1u) << "at " << t << " s";
        EXPECT_EQ(o[0].raw, syn.raw);
    }
    d.advance(std::chrono::seconds(75) - d.now.time_since_epoch());
    expect_connect_ended(d, EventType::kUnreachable, -ETIMEDOUT);
    EXPECT_EQ(d.core.stats().retransmissions, 8u);
    EXPECT_EQ(d.core.stats().connect_errors, 1u);
}

TEST(Synchronized, OutOfWindowSegmentGetsAckAndIsDropped) {
    Dut d;
    d.to_mpareq_sent();
    d.feed(d.frame(tf::kAck, d.peer_nxt + 100000, d.dut_nxt), bytes("junk"));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].flags(tf::kAck));
    EXPECT_EQ(o[0].tcp().ack, d.peer_nxt);
    EXPECT_EQ(d.core.stats().drops(DropReason::kOutOfWindow), 1u);
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
}

TEST(Synchronized, OutOfWindowRstIsDroppedSilently) {
    Dut d;
    d.to_mpareq_sent();
    d.feed(d.frame(tf::kRst, d.peer_nxt + 100000, wire::SeqNumber(0)));
    EXPECT_TRUE(d.out().empty());
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
}

TEST(Synchronized, InWindowRstGetsChallengeAck) {
    Dut d;
    d.to_mpareq_sent();
    d.feed(d.frame(tf::kRst, d.peer_nxt + 1, wire::SeqNumber(0)));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].flags(tf::kAck));
    EXPECT_EQ(o[0].tcp().ack, d.peer_nxt);
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
    EXPECT_EQ(d.core.stats().drops(DropReason::kRstIgnored), 1u);
}

TEST(Synchronized, SynGetsChallengeAckNotReset) {
    Dut d;
    d.to_mpareq_sent();
    d.feed(d.frame(tf::kSyn, d.peer_nxt, wire::SeqNumber(0)));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].flags(tf::kAck));
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
}

TEST(Synchronized, AckOfUnsentDataGetsAckAndIsDropped) {
    Dut d;
    d.to_mpareq_sent();
    d.feed(d.frame(tf::kAck, d.peer_nxt, d.dut_nxt + 1000));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].flags(tf::kAck));
    EXPECT_EQ(d.core.stats().drops(DropReason::kBadAck), 1u);
}

TEST(Synchronized, OutOfOrderDataGetsDuplicateAck) {
    Dut d;
    d.to_mpareq_sent();
    d.feed(d.frame(tf::kAck, d.peer_nxt + 5, d.dut_nxt), bytes("later"));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o[0].tcp().ack, d.peer_nxt);
    EXPECT_TRUE(d.evs().empty());
}

TEST(Synchronized, MpaRequestRetransmittedUntilAcked) {
    Dut d;
    Sent req = d.to_mpareq_sent();
    d.advance(std::chrono::seconds(1));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o[0].payload, req.payload);
    EXPECT_EQ(o[0].tcp().seq, req.tcp().seq);
    d.seg(tf::kAck);  // acknowledges the request
    d.advance(std::chrono::seconds(5));
    EXPECT_TRUE(d.out().empty());
    EXPECT_EQ(d.core.stats().retransmissions, 1u);
}

TEST(Synchronized, ExactRstWhileWaitingForReplyRetriesAtRevision1) {
    Dut d;
    d.to_mpareq_sent();
    d.feed(d.frame(tf::kRst, d.peer_nxt, wire::SeqNumber(0)));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].flags(tf::kSyn));  // a fresh connection
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(d.core.stats().mpa_v1_fallbacks, 1u);
    d.dut_nxt = o[0].tcp().seq + 1;
    auto sa = d.frame(tf::kSyn | tf::kAck, wire::SeqNumber(5000), d.dut_nxt);
    sa.tcp.options.mss = 1460;
    d.peer_nxt = wire::SeqNumber(5001);
    d.feed(sa);
    o = d.out();
    ASSERT_EQ(o.size(), 1u);
    auto m = parse_mpa_or_fail(o[0].payload);
    EXPECT_EQ(m.revision, 1);
    EXPECT_FALSE(m.v2.has_value());
    // A second reset ends it: no third try.
    d.dut_nxt += static_cast<std::uint32_t>(o[0].payload.size());
    d.feed(d.frame(tf::kRst, d.peer_nxt, wire::SeqNumber(0)));
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kRejected);
    EXPECT_EQ(e[0].status, -ECONNRESET);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(Synchronized, FallbackCanBeTurnedOff) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.mpa.fallback_to_v1 = false;
    Dut d(cfg);
    d.to_mpareq_sent();
    d.feed(d.frame(tf::kRst, d.peer_nxt, wire::SeqNumber(0)));
    EXPECT_TRUE(d.out().empty());
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kRejected);
}

}  // namespace
}  // namespace iwcm::test
