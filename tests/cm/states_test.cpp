// Per-state suites for the states the other files leave without one: each drives the DUT
// into its state and checks the exact frames and events of the state's main events (the
// peer's FIN in order, an RST at rcv_nxt and one elsewhere in the window, a SYN, a timeout).
// The suites of SYN_SENT, SYN_RCVD, MPAREQ_SENT, MPAREQ_RCVD, ESTABLISHED and OFFLOADED
// live in tcp_*_test.cpp, mpa_test.cpp, teardown_test.cpp and stream_test.cpp.
//
// Read first: tests/cm/dut.hpp (the DUT and expect_sent), docs/design.md "Node states".
#include <algorithm>
#include <cerrno>

#include "cm/dut.hpp"

namespace iwcm::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

bool passed(const Dut& d, CmState from, CmState to) {
    return std::find(d.transitions.begin(), d.transitions.end(), std::make_pair(from, to)) !=
           d.transitions.end();
}

// One event of this type, status and state.
void expect_event(Dut& d, EventType type, int status, CmState state) {
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, type);
    EXPECT_EQ(e[0].status, status);
    EXPECT_EQ(e[0].state, state);
}

// The sequence number just before s (a retransmitted FIN's).
wire::SeqNumber before(wire::SeqNumber s) {
    return s + static_cast<std::uint32_t>(-1);
}

// The peer's segment at `seq` acknowledging `ack` (not necessarily all the DUT sent).
void feed_at(Dut& d, std::uint8_t flags, wire::SeqNumber seq, wire::SeqNumber ack) {
    d.feed(d.frame(flags, seq, ack));
}

// FIN_WAIT1: connected, then disconnect(). Returns the sequence number of our FIN; the
// peer's view (dut_nxt) stays before it, so d.seg() does not acknowledge it.
wire::SeqNumber to_fin_wait1(Dut& d) {
    connect_active(d);
    EXPECT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
    expect_sent(d, {d.sent_frame(tf::kFin | tf::kAck, d.dut_nxt, d.peer_nxt)});
    return d.dut_nxt;
}

// LAST_ACK: connected, then the peer's FIN, answered by ours at once.
wire::SeqNumber to_last_ack(Dut& d) {
    connect_active(d);
    d.seg(tf::kFin | tf::kAck);
    expect_sent(d, {d.sent_frame(tf::kFin | tf::kAck, d.dut_nxt, d.peer_nxt)});
    expect_event(d, EventType::kDisconnected, 0, CmState::kCloseWait);
    return d.dut_nxt;
}

// ---------------------------------------------------------------- MPAREQ_WAIT

TEST(MpaReqWait, HandshakeAckEntersIt) {
    Dut d;
    d.to_mpareq_wait();
    EXPECT_TRUE(passed(d, CmState::kSynRcvd, CmState::kMpaReqWait));
    EXPECT_EQ(d.core.pending_timers(), 1u);  // the request wait
}

TEST(MpaReqWait, InOrderFinEndsTheSetupWithOurFin) {
    Dut d;
    d.to_mpareq_wait();
    d.seg(tf::kFin | tf::kAck);
    // The driver answers a FIN with its own at once (CLOSE_WAIT -> LAST_ACK); nobody above
    // knows the node, so no event.
    expect_sent(d, {d.sent_frame(tf::kFin | tf::kAck, d.dut_nxt, d.peer_nxt)});
    EXPECT_TRUE(d.evs().empty());
    EXPECT_TRUE(passed(d, CmState::kMpaReqWait, CmState::kCloseWait));
    EXPECT_TRUE(passed(d, CmState::kCloseWait, CmState::kLastAck));
    EXPECT_EQ(d.core.stats().passive_errors, 1u);
    d.dut_nxt += 1;
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

TEST(MpaReqWait, ExactRstClosesSilently) {
    Dut d;
    d.to_mpareq_wait();
    d.seg(tf::kRst);
    expect_nothing_sent(d);
    EXPECT_TRUE(d.evs().empty());
    EXPECT_TRUE(passed(d, CmState::kMpaReqWait, CmState::kClosed));
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(MpaReqWait, InWindowRstGetsChallengeAck) {
    Dut d;
    d.to_mpareq_wait();
    feed_at(d, tf::kRst, d.peer_nxt + 10, wire::SeqNumber(0));
    expect_sent(d, {d.sent_ack()});
    EXPECT_EQ(d.core.live_nodes(), 1u);
    EXPECT_EQ(d.transitions.back(), std::make_pair(CmState::kSynRcvd, CmState::kMpaReqWait));
}

TEST(MpaReqWait, SynGetsChallengeAck) {
    Dut d;
    d.to_mpareq_wait();
    feed_at(d, tf::kSyn, d.peer_nxt, wire::SeqNumber(0));
    expect_sent(d, {d.sent_ack()});
    EXPECT_EQ(d.core.live_nodes(), 1u);
}

// ---------------------------------------------------------------- FIN_WAIT1

TEST(FinWait1, FinNotAckingOursGoesClosing) {
    Dut d;
    wire::SeqNumber fin = to_fin_wait1(d);
    d.seg(tf::kFin | tf::kAck);  // acknowledges up to our FIN, not the FIN
    expect_sent(d, {d.sent_frame(tf::kAck, fin + 1, d.peer_nxt)});
    EXPECT_TRUE(passed(d, CmState::kFinWait1, CmState::kClosing));
    EXPECT_TRUE(d.evs().empty());  // told at TIME_WAIT
}

TEST(FinWait1, FinAckingOursGoesThroughFinWait2ToTimeWait) {
    Dut d;
    wire::SeqNumber fin = to_fin_wait1(d);
    d.dut_nxt = fin + 1;
    d.seg(tf::kFin | tf::kAck);
    expect_sent(d, {d.sent_ack()});
    expect_event(d, EventType::kDisconnected, 0, CmState::kTimeWait);
    EXPECT_TRUE(passed(d, CmState::kFinWait1, CmState::kFinWait2));
    EXPECT_TRUE(passed(d, CmState::kFinWait2, CmState::kTimeWait));
}

TEST(FinWait1, ExactRstReportsTheReset) {
    Dut d;
    to_fin_wait1(d);
    d.seg(tf::kRst);
    expect_nothing_sent(d);
    // An event carries the state the node was in when it ended.
    expect_event(d, EventType::kDisconnected, -ECONNRESET, CmState::kFinWait1);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(FinWait1, InWindowRstGetsChallengeAck) {
    Dut d;
    wire::SeqNumber fin = to_fin_wait1(d);
    feed_at(d, tf::kRst, d.peer_nxt + 5, wire::SeqNumber(0));
    expect_sent(d, {d.sent_frame(tf::kAck, fin + 1, d.peer_nxt)});
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(*d.core.state(d.conn), CmState::kFinWait1);
}

TEST(FinWait1, SynGetsChallengeAck) {
    Dut d;
    wire::SeqNumber fin = to_fin_wait1(d);
    feed_at(d, tf::kSyn, d.peer_nxt, wire::SeqNumber(0));
    expect_sent(d, {d.sent_frame(tf::kAck, fin + 1, d.peer_nxt)});
    EXPECT_EQ(*d.core.state(d.conn), CmState::kFinWait1);
}

TEST(FinWait1, FinRetransmittedOnTheSendTimer) {
    Dut d;
    wire::SeqNumber fin = to_fin_wait1(d);
    quiet_until(d, d.now.time_since_epoch() + d.core.config().retransmit.initial);
    expect_sent(d, {d.sent_frame(tf::kFin | tf::kAck, fin, d.peer_nxt)});
}

TEST(FinWait1, PeerTextIsStillTakenAndAcknowledged) {
    Dut d;
    wire::SeqNumber fin = to_fin_wait1(d);
    const auto text = bytes("half-close");
    d.seg(tf::kAck | tf::kPsh, text);
    // The bytes wait in rx, read by nobody: the window we advertise shrinks by them.
    const CoreConfig& c = d.core.config();
    const auto wnd = static_cast<std::uint16_t>((c.rcv_wnd - text.size()) >> c.rcv_wscale);
    expect_sent(d, {d.sent_frame(tf::kAck, fin + 1, d.peer_nxt).with_window(wnd)});
    EXPECT_EQ(*d.core.state(d.conn), CmState::kFinWait1);
}

// ---------------------------------------------------------------- FIN_WAIT2

TEST(FinWait2, InOrderFinIsAckedAndEntersTimeWait) {
    Dut d;
    wire::SeqNumber fin = to_fin_wait1(d);
    d.dut_nxt = fin + 1;
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    EXPECT_EQ(*d.core.state(d.conn), CmState::kFinWait2);
    d.seg(tf::kFin | tf::kAck);
    expect_sent(d, {d.sent_ack()});
    expect_event(d, EventType::kDisconnected, 0, CmState::kTimeWait);
}

TEST(FinWait2, ExactRstReportsTheReset) {
    Dut d;
    wire::SeqNumber fin = to_fin_wait1(d);
    d.dut_nxt = fin + 1;
    d.seg(tf::kAck);
    d.seg(tf::kRst);
    expect_nothing_sent(d);
    expect_event(d, EventType::kDisconnected, -ECONNRESET, CmState::kFinWait2);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

// ---------------------------------------------------------------- CLOSE_WAIT

// CLOSE_WAIT is passed through: our FIN follows the peer's at once (irdma_handle_fin_pkt).
TEST(CloseWait, PeerFinIsAnsweredWithOurFinAtOnce) {
    Dut d;
    to_last_ack(d);
    EXPECT_TRUE(passed(d, CmState::kEstablished, CmState::kCloseWait));
    EXPECT_TRUE(passed(d, CmState::kCloseWait, CmState::kLastAck));
}

// ---------------------------------------------------------------- LAST_ACK

TEST(LastAck, AckOfOurFinCloses) {
    Dut d;
    wire::SeqNumber fin = to_last_ack(d);
    d.dut_nxt = fin + 1;
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

TEST(LastAck, RetransmittedFinIsAcked) {
    Dut d;
    wire::SeqNumber fin = to_last_ack(d);
    feed_at(d, tf::kFin | tf::kAck, before(d.peer_nxt), fin);
    expect_sent(d, {d.sent_frame(tf::kAck, fin + 1, d.peer_nxt)});
    EXPECT_EQ(d.core.live_nodes(), 1u);
}

TEST(LastAck, ExactRstClosesWithoutAnotherEvent) {
    Dut d;
    to_last_ack(d);
    d.seg(tf::kRst);
    expect_nothing_sent(d);
    EXPECT_TRUE(d.evs().empty());  // the application heard kDisconnected already
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(LastAck, InWindowRstAndSynGetChallengeAcks) {
    Dut d;
    wire::SeqNumber fin = to_last_ack(d);
    feed_at(d, tf::kRst, d.peer_nxt + 3, wire::SeqNumber(0));
    expect_sent(d, {d.sent_frame(tf::kAck, fin + 1, d.peer_nxt)});
    feed_at(d, tf::kSyn, d.peer_nxt, wire::SeqNumber(0));
    expect_sent(d, {d.sent_frame(tf::kAck, fin + 1, d.peer_nxt)});
    EXPECT_EQ(d.core.live_nodes(), 1u);
}

TEST(LastAck, FinRetransmittedOnTheSendTimer) {
    Dut d;
    wire::SeqNumber fin = to_last_ack(d);
    quiet_until(d, d.now.time_since_epoch() + d.core.config().retransmit.initial);
    expect_sent(d, {d.sent_frame(tf::kFin | tf::kAck, fin, d.peer_nxt)});
}

// ---------------------------------------------------------------- CLOSING

// CLOSING: both FINs crossed; ours is not acknowledged yet.
wire::SeqNumber to_closing(Dut& d) {
    wire::SeqNumber fin = to_fin_wait1(d);
    d.seg(tf::kFin | tf::kAck);
    expect_sent(d, {d.sent_frame(tf::kAck, fin + 1, d.peer_nxt)});
    EXPECT_EQ(*d.core.state(d.conn), CmState::kClosing);
    return fin;
}

TEST(Closing, AckOfOurFinEntersTimeWait) {
    Dut d;
    wire::SeqNumber fin = to_closing(d);
    d.dut_nxt = fin + 1;
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    expect_event(d, EventType::kDisconnected, 0, CmState::kTimeWait);
}

TEST(Closing, RetransmittedFinIsAcked) {
    Dut d;
    wire::SeqNumber fin = to_closing(d);
    feed_at(d, tf::kFin | tf::kAck, before(d.peer_nxt), fin);
    expect_sent(d, {d.sent_frame(tf::kAck, fin + 1, d.peer_nxt)});
    EXPECT_EQ(*d.core.state(d.conn), CmState::kClosing);
}

// Every byte but our FIN was acknowledged, and the peer had closed: the reset ends a clean
// close (tests/cm/stream_test.cpp has the case with bytes unacknowledged).
TEST(Closing, ExactRstAfterAllButOurFinWasAckedIsAClose) {
    Dut d;
    to_closing(d);
    d.seg(tf::kRst);
    expect_nothing_sent(d);
    expect_event(d, EventType::kDisconnected, 0, CmState::kClosing);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

TEST(Closing, SynGetsChallengeAck) {
    Dut d;
    wire::SeqNumber fin = to_closing(d);
    feed_at(d, tf::kSyn, d.peer_nxt, wire::SeqNumber(0));
    expect_sent(d, {d.sent_frame(tf::kAck, fin + 1, d.peer_nxt)});
}

// ---------------------------------------------------------------- TIME_WAIT

// TIME_WAIT: we closed first, the peer acknowledged and closed too.
void to_time_wait(Dut& d) {
    wire::SeqNumber fin = to_fin_wait1(d);
    d.dut_nxt = fin + 1;
    d.seg(tf::kFin | tf::kAck);
    expect_sent(d, {d.sent_ack()});
    expect_event(d, EventType::kDisconnected, 0, CmState::kTimeWait);
}

TEST(TimeWait, CloseEntryEndsItAfterOneTenthOfASecond) {
    Dut d;
    to_time_wait(d);
    EXPECT_EQ(d.core.live_nodes(), 1u);
    quiet_until(d, d.now.time_since_epoch() + milliseconds(100));
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

TEST(TimeWait, RetransmittedFinIsAckedAgain) {
    Dut d;
    to_time_wait(d);
    feed_at(d, tf::kFin | tf::kAck, before(d.peer_nxt), d.dut_nxt);
    expect_sent(d, {d.sent_ack()});
    EXPECT_TRUE(d.evs().empty());
}

TEST(TimeWait, ExactRstClosesWithoutAnotherEvent) {
    Dut d;
    to_time_wait(d);
    d.seg(tf::kRst);
    expect_nothing_sent(d);
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

TEST(TimeWait, InWindowRstAndSynGetChallengeAcks) {
    Dut d;
    to_time_wait(d);
    feed_at(d, tf::kRst, d.peer_nxt + 7, wire::SeqNumber(0));
    expect_sent(d, {d.sent_ack()});
    feed_at(d, tf::kSyn, d.peer_nxt, wire::SeqNumber(0));
    expect_sent(d, {d.sent_ack()});
    EXPECT_EQ(d.core.live_nodes(), 1u);
}

// ---------------------------------------------------------------- MPAREJ_RCVD

wire::MpaRepr reject_reply() {
    wire::MpaRepr m = reply_v2(wire::kIrdOrdNone, wire::kIrdOrdNone, false, 0);
    m.reject = true;
    return m;
}

// MPAREJ_RCVD is passed through: the graceful close follows the reject at once.
TEST(MpaRejRcvd, RejectReplyIsReportedThenOurFin) {
    Dut d;
    d.to_mpareq_sent();
    d.send_mpa(reject_reply());
    expect_sent(d, {d.sent_frame(tf::kFin | tf::kAck, d.dut_nxt, d.peer_nxt)});
    expect_event(d, EventType::kRejected, -ECONNREFUSED, CmState::kMpaRejRcvd);
    EXPECT_TRUE(passed(d, CmState::kMpaReqSent, CmState::kMpaRejRcvd));
    EXPECT_TRUE(passed(d, CmState::kMpaRejRcvd, CmState::kFinWait1));
    EXPECT_EQ(d.core.stats().connect_errors, 1u);
}

TEST(MpaRejRcvd, RejectWithFinGoesOnToClosing) {
    Dut d;
    d.to_mpareq_sent();
    std::vector<std::byte> b(reject_reply().buffer_len());
    reject_reply().emit(b);
    const wire::SeqNumber before_fin = d.peer_nxt + static_cast<std::uint32_t>(b.size());
    d.seg(tf::kFin | tf::kAck | tf::kPsh, b);
    // Our FIN goes out as the reject is read; the peer's FIN, next in the segment, crosses it.
    expect_sent(d, {d.sent_frame(tf::kFin | tf::kAck, d.dut_nxt, before_fin),
                    d.sent_frame(tf::kAck, d.dut_nxt + 1, d.peer_nxt)});
    expect_event(d, EventType::kRejected, -ECONNREFUSED, CmState::kMpaRejRcvd);
    EXPECT_TRUE(passed(d, CmState::kFinWait1, CmState::kClosing));
}

// ---------------------------------------------------------------- ONE_SIDE_ESTABLISHED

// A peer-to-peer responder after accept(): the reply is out and acknowledged.
void to_one_side_established(Dut& d) {
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("x")));
    accept_and_take_reply(d, e, {}, 1);
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    EXPECT_EQ(*d.core.state(d.conn), CmState::kOneSideEstablished);
}

TEST(OneSideEstablished, InOrderFinFailsTheSetupWithOurFin) {
    Dut d;
    to_one_side_established(d);
    d.seg(tf::kFin | tf::kAck);
    expect_sent(d, {d.sent_frame(tf::kFin | tf::kAck, d.dut_nxt, d.peer_nxt)});
    expect_event(d, EventType::kConnectError, -ECONNRESET, CmState::kCloseWait);
    EXPECT_EQ(d.core.stats().passive_errors, 1u);
}

TEST(OneSideEstablished, ExactRstReportsAConnectError) {
    Dut d;
    to_one_side_established(d);
    d.seg(tf::kRst);
    expect_nothing_sent(d);
    expect_event(d, EventType::kConnectError, -ECONNRESET, CmState::kOneSideEstablished);
}

TEST(OneSideEstablished, InWindowRstAndSynGetChallengeAcks) {
    Dut d;
    to_one_side_established(d);
    feed_at(d, tf::kRst, d.peer_nxt + 1, wire::SeqNumber(0));
    expect_sent(d, {d.sent_ack()});
    feed_at(d, tf::kSyn, d.peer_nxt, wire::SeqNumber(0));
    expect_sent(d, {d.sent_ack()});
    EXPECT_EQ(*d.core.state(d.conn), CmState::kOneSideEstablished);
}

// ---------------------------------------------------------------- LISTENER_DESTROYED

// LISTENER_DESTROYED is passed through: the node is reset and closed at once.
TEST(ListenerDestroyed, UnansweredRequestIsResetAndReported) {
    Dut d;
    d.to_mpareq_rcvd(request_v2(bytes("x")));
    ASSERT_TRUE(d.core.destroy_listen(d.now, d.listener).has_value());
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)});
    expect_event(d, EventType::kConnectError, -ECONNABORTED, CmState::kListenerDestroyed);
    EXPECT_TRUE(passed(d, CmState::kMpaReqRcvd, CmState::kListenerDestroyed));
    EXPECT_TRUE(passed(d, CmState::kListenerDestroyed, CmState::kClosed));
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(ListenerDestroyed, HalfOpenNodeIsResetQuietly) {
    Dut d;
    d.to_syn_rcvd();
    ASSERT_TRUE(d.core.destroy_listen(d.now, d.listener).has_value());
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)});
    EXPECT_TRUE(d.evs().empty());
    EXPECT_TRUE(passed(d, CmState::kSynRcvd, CmState::kListenerDestroyed));
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

}  // namespace
}  // namespace iwcm::test
