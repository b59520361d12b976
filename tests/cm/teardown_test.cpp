// Teardown: the FIN handshake from either side, TIME_WAIT on the close timer,
// abortive close, RST in established states, FIN retransmission. Every frame the DUT sends
// after the connection is set up is compared whole.
#include <cerrno>
#include <source_location>

#include "cm/dut.hpp"

namespace iwcm::test {
namespace {

// An abortive close: one RST at SND.NXT, the application's last event, and
// the node gone at once.
void expect_abort(Dut& d, std::source_location at = std::source_location::current()) {
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)}, at);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

// Our FIN at SND.NXT, acknowledging all the peer sent.
Frame our_fin(const Dut& d) {
    return d.sent_frame(tf::kFin | tf::kAck, d.dut_nxt, d.peer_nxt);
}

// Our FIN sent and acknowledged.
void to_fin_wait2(Dut& d) {
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
    expect_sent(d, {our_fin(d)});
    d.dut_nxt += 1;
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    ASSERT_EQ(*d.core.state(d.conn), CmState::kFinWait2);
}

TEST(Established, LocalGracefulClose) {
    Dut d;
    connect_active(d);
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
    expect_sent(d, {our_fin(d)});
    EXPECT_EQ(*d.core.state(d.conn), CmState::kFinWait1);
    d.dut_nxt += 1;
    d.seg(tf::kAck);  // FIN_WAIT2
    EXPECT_EQ(*d.core.state(d.conn), CmState::kFinWait2);
    expect_nothing_sent(d);
    d.seg(tf::kFin | tf::kAck);
    expect_sent(d, {d.sent_ack()});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(e[0].status, 0);
    EXPECT_EQ(e[0].state, CmState::kTimeWait);
    // TIME_WAIT holds the node 100 ms on the close timer, and re-ACKs a
    // retransmitted FIN meanwhile.
    d.feed(d.frame(tf::kFin | tf::kAck, d.peer_nxt + static_cast<std::uint32_t>(-1), d.dut_nxt));
    expect_sent(d, {d.sent_ack()});
    EXPECT_EQ(d.core.live_nodes(), 1u);
    d.advance(std::chrono::milliseconds(99));
    EXPECT_EQ(d.core.live_nodes(), 1u);
    d.advance(std::chrono::milliseconds(1));
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

// A data path closes after its TERMINATE and again when its queue pair goes:
// the second graceful close, in any state past our FIN, sends nothing and
// changes nothing (issue 37: it used to turn into a reset right after the FIN).
TEST(Established, SecondGracefulCloseAfterOurFinIsHarmless) {
    Dut d;
    connect_active(d);
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
    expect_sent(d, {our_fin(d)});
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
    expect_nothing_sent(d);
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(*d.core.state(d.conn), CmState::kFinWait1);
    d.dut_nxt += 1;
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    ASSERT_EQ(*d.core.state(d.conn), CmState::kFinWait2);
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
    expect_nothing_sent(d);
    EXPECT_EQ(*d.core.state(d.conn), CmState::kFinWait2);
    EXPECT_EQ(d.core.stats().resets_sent, 0u);
    d.seg(tf::kFin | tf::kAck);
    expect_sent(d, {d.sent_ack()});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(e[0].status, 0);
}

// An abortive close still cuts a closing connection short.
TEST(Established, AbortiveCloseInFinWait2SendsRst) {
    Dut d;
    connect_active(d);
    to_fin_wait2(d);
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kAbortive).has_value());
    expect_abort(d);
}

TEST(Established, PeerCloseGoesCloseWaitThenLastAck) {
    Dut d;
    connect_active(d);
    d.seg(tf::kFin | tf::kAck);
    // The driver answers a peer's FIN with its own at once.
    expect_sent(d, {our_fin(d)});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(e[0].state, CmState::kCloseWait);
    d.dut_nxt += 1;
    EXPECT_EQ(d.core.live_nodes(), 1u);
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
    const std::pair<CmState, CmState> expected[] = {{CmState::kEstablished, CmState::kCloseWait},
                                                    {CmState::kCloseWait, CmState::kLastAck},
                                                    {CmState::kLastAck, CmState::kClosed}};
    for (auto& t : expected)
        EXPECT_NE(std::find(d.transitions.begin(), d.transitions.end(), t), d.transitions.end());
}

TEST(Established, SimultaneousCloseGoesThroughClosing) {
    Dut d;
    connect_active(d);
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
    expect_sent(d, {our_fin(d)});
    // The peer's FIN crosses ours: it does not acknowledge our FIN yet.
    d.feed(d.frame(tf::kFin | tf::kAck, d.peer_nxt, d.dut_nxt));
    d.peer_nxt += 1;
    EXPECT_EQ(*d.core.state(d.conn), CmState::kClosing);
    expect_sent(d, {d.sent_frame(tf::kAck, d.dut_nxt + 1, d.peer_nxt)});
    d.dut_nxt += 1;
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].state, CmState::kTimeWait);
    d.advance(std::chrono::milliseconds(100));
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(Established, FinRetransmittedThenResetWhenExhausted) {
    Dut d;
    connect_active(d);
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
    const Frame fin = our_fin(d);
    const std::vector<Sent> first = expect_sent(d, {fin});
    ASSERT_EQ(first.size(), 1u);
    // Backoff 1, 2, 4, 8, 12, 12, 12, 12 s: the same FIN at 1, 3, 7, 15, 27, 39, 51, 63 s.
    for (int t : {1, 3, 7, 15, 27, 39, 51, 63}) {
        SCOPED_TRACE(::testing::Message() << "at " << t << " s");
        quiet_until(d, std::chrono::seconds(t));
        const std::vector<Sent> again = expect_sent(d, {fin});
        if (again.size() == 1u) {
            EXPECT_EQ(again[0].raw, first[0].raw);
        }
    }
    // FIN_WAIT1 out of retries 12 s later: a reset (irdma_retrans_expired), after our FIN.
    quiet_until(d, std::chrono::seconds(75));
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt + 1, d.peer_nxt)});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(e[0].status, -ETIMEDOUT);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(Established, AbortiveCloseSendsRstAndFreesAtOnce) {
    Dut d;
    connect_active(d);
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kAbortive).has_value());
    expect_abort(d);
    EXPECT_EQ(d.core.disconnect(d.now, d.conn, DisconnectMode::kAbortive).error(),
              ApiError::kStaleHandle);
}

TEST(Established, ExactRstResetsAndReports) {
    Dut d;
    connect_active(d);
    d.feed(d.frame(tf::kRst, d.peer_nxt, wire::SeqNumber(0)));
    expect_nothing_sent(d);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(e[0].status, -ECONNRESET);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(Offloaded, HandoffStopsRetransmissionButFinAndRstStillWork) {
    Dut d;
    connect_active(d);
    auto h = d.core.handoff(d.conn, HandoffParams{HandoffMode::kExternal});
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->snd_nxt, d.dut_nxt.value());
    EXPECT_EQ(h->rcv_nxt, d.peer_nxt.value());
    EXPECT_EQ(h->snd_wscale, 7);
    EXPECT_EQ(h->rcv_wscale, 2);
    EXPECT_EQ(h->mss, 1460);
    EXPECT_TRUE(h->initiator);
    EXPECT_EQ(*d.core.state(d.conn), CmState::kOffloaded);
    // Payload now belongs to the data path: not taken, not acknowledged.
    d.feed(d.frame(tf::kAck | tf::kPsh, d.peer_nxt, d.dut_nxt), bytes("rdma data"));
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.stats().drops(DropReason::kDataAfterHandoff), 1u);
    d.seg(tf::kFin | tf::kAck);
    expect_sent(d, {our_fin(d)});
}

TEST(Teardown, AddressDownResetsEverythingOnIt) {
    Dut d;
    connect_active(d);
    auto n = d.core.remove_address(d.now, ip_b());
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(*n, 1u);
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_FALSE(d.core.is_local(ip_b()));
}

}  // namespace
}  // namespace iwcm::test

namespace iwcm::test {
namespace {

TEST(LastAck, RetriesExhaustedSendsReset) {
    Dut d;
    connect_active(d);
    d.seg(tf::kFin | tf::kAck);  // the peer closes; we answer FIN: LAST_ACK
    const Frame fin = our_fin(d);
    expect_sent(d, {fin});
    d.evs();
    d.advance(std::chrono::seconds(80));
    // 8 FIN retransmissions, then the reset after the FIN.
    expect_sent(d, {fin, fin, fin, fin, fin, fin, fin, fin,
                    d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt + 1, d.peer_nxt)});
    EXPECT_TRUE(d.evs().empty());  // the application heard of the close already
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(Closing, RetriesExhaustedDropsQuietly) {
    Dut d;
    connect_active(d);
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
    expect_sent(d, {our_fin(d)});
    d.feed(d.frame(tf::kFin | tf::kAck, d.peer_nxt, d.dut_nxt));  // crosses our FIN
    d.peer_nxt += 1;
    expect_sent(d, {d.sent_frame(tf::kAck, d.dut_nxt + 1, d.peer_nxt)});
    d.advance(std::chrono::seconds(80));
    // FIN retransmissions, acknowledging the peer's FIN; no reset (irdma_retrans_expired).
    const Frame fin = our_fin(d);
    expect_sent(d, {fin, fin, fin, fin, fin, fin, fin, fin});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(e[0].status, -ETIMEDOUT);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

}  // namespace
}  // namespace iwcm::test

namespace iwcm::test {
namespace {

bool saw(const Dut& d, CmState from, CmState to) {
    return std::find(d.transitions.begin(), d.transitions.end(), std::make_pair(from, to)) !=
           d.transitions.end();
}

TEST(FinWait2, PeerThatNeverClosesIsResetAfterItsRetransmissionsWouldEnd) {
    Dut d;
    connect_active(d);
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
    expect_sent(d, {our_fin(d)});
    d.dut_nxt += 1;
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    EXPECT_EQ(*d.core.state(d.conn), CmState::kFinWait2);
    // 75 s: what the peer's retransmissions could last.
    quiet_until(d, d.now.time_since_epoch() + std::chrono::seconds(75));
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_TRUE(saw(d, CmState::kFinWait2, CmState::kClosed));
}

TEST(MpaReqSent, PeerFinInsteadOfReplyIsAReset) {
    Dut d;
    d.to_mpareq_sent();
    d.seg(tf::kFin | tf::kAck);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kRejected);
    EXPECT_EQ(e[0].status, -ECONNRESET);
    expect_sent(d, {our_fin(d)});
    EXPECT_TRUE(saw(d, CmState::kMpaReqSent, CmState::kCloseWait));
    d.dut_nxt += 1;
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(MpaReqWait, DestroyListenResetsPassiveNodeWaitingForRequest) {
    Dut d;
    d.to_mpareq_wait();
    ASSERT_TRUE(d.core.destroy_listen(d.now, d.listener).has_value());
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)});
    EXPECT_TRUE(d.evs().empty());
    EXPECT_TRUE(saw(d, CmState::kMpaReqWait, CmState::kListenerDestroyed));
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(Offloaded, GracefulAndAbortiveClose) {
    for (auto mode : {DisconnectMode::kGraceful, DisconnectMode::kAbortive}) {
        Dut d;
        connect_active(d);
        ASSERT_TRUE(d.core.handoff(d.conn, HandoffParams{HandoffMode::kExternal}).has_value());
        ASSERT_TRUE(d.core.disconnect(d.now, d.conn, mode).has_value());
        if (mode == DisconnectMode::kGraceful) {
            expect_sent(d, {our_fin(d)});
            EXPECT_TRUE(saw(d, CmState::kOffloaded, CmState::kFinWait1));
        } else {
            expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)});
            EXPECT_TRUE(saw(d, CmState::kOffloaded, CmState::kClosed));
            EXPECT_EQ(d.core.live_nodes() - d.core.queued_events(), 0u);
        }
    }
}

}  // namespace
}  // namespace iwcm::test
