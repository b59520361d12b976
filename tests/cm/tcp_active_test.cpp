// SYN_SENT and the synchronised-state rules, on exact frames
// (RFC 9293 3.10.7.3 and 3.10.7.4, RFC 5961). Every frame the DUT sends is compared whole.
#include <cerrno>
#include <source_location>
#include <vector>

#include "cm/dut.hpp"

namespace iwcm::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// The connect ended with one event of `type` and `status`, and nothing of it is left.
void expect_connect_ended(Dut& d, EventType type, int status) {
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, type);
    EXPECT_EQ(e[0].status, status);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

std::vector<std::byte> mpa_bytes(const wire::MpaRepr& m) {
    std::vector<std::byte> b(m.buffer_len());
    m.emit(b);
    return b;
}

// The MPA request connect_params() makes the DUT send: revision 2, IRD and ORD 1, the
// peer-to-peer bit with every RTR type offered, no CRC, no private data.
std::vector<std::byte> default_request() {
    return mpa_bytes(request_v2({}, 1, 1));
}

// The SYN connect() sends, as expected and as it went (a SYN sent again is the same bytes).
struct FirstSyn {
    Frame want;
    Sent sent;
};

// connect(): the DUT sends exactly its SYN, at the ISN RFC 6528 gives the tuple now.
FirstSyn syn_sent(Dut& d, std::source_location at = std::source_location::current()) {
    FirstSyn s{d.sent_syn(tf::kSyn, d.isn(), wire::SeqNumber(0)), {}};
    d.start_connect();
    const std::vector<Sent> got = expect_sent(d, {s.want}, at);
    if (!got.empty()) s.sent = got[0];
    return s;
}

// The DUT sends its SYN again: the whole frame expected, byte for byte the first one.
void expect_syn_again(Dut& d, const FirstSyn& syn,
                      std::source_location at = std::source_location::current()) {
    const std::vector<Sent> got = expect_sent(d, {syn.want}, at);
    if (got.size() == 1 && got[0].raw != syn.sent.raw)
        ADD_FAILURE_AT(at.file_name(), static_cast<int>(at.line())) << "not the first SYN's bytes";
}

// ... the peer's SYN-ACK (window shift 7): the DUT sends exactly the ACK of it carrying the
// MPA request (MPAREQ_SENT), its window scaled. Returns that frame; dut_nxt moves past it.
Frame mpareq_sent(Dut& d, std::source_location at = std::source_location::current()) {
    syn_sent(d, at);
    d.syn_ack();
    const Frame req = d.sent_frame(tf::kAck | tf::kPsh, d.dut_nxt, d.peer_nxt, default_request());
    expect_sent(d, {req}, at);
    d.dut_nxt += static_cast<std::uint32_t>(req.payload.size());
    return req;
}

TEST(SynSent, ConnectSendsSynWithDriverOptions) {
    Dut d;
    // The driver's options: MSS 1460 (MTU 1500 - 40), window shift 2, and the window 64240
    // unscaled as in every SYN; the sequence is RFC 6528's ISN.
    Frame syn = d.sent_frame(tf::kSyn, d.isn(), wire::SeqNumber(0));
    syn.repr.tcp.options = {1460, 2, false, std::nullopt};
    syn.repr.tcp.window = 64240;
    d.start_connect();
    expect_sent(d, {syn});
    EXPECT_EQ(*d.core.state(d.conn), CmState::kSynSent);
}

TEST(SynSent, IsnFollowsRfc6528KeyAndClock) {
    // Same tuple and secret: the ISN moves with the clock (4 us ticks); another
    // secret gives another ISN.
    Dut a(config_for(kMacB, 1));
    Dut b(config_for(kMacB, 1));
    Dut c(config_for(kMacB, 2));
    b.now = Instant{std::chrono::microseconds(400)};
    const wire::SeqNumber isn = a.isn();
    a.start_connect();
    expect_sent(a, {a.sent_syn(tf::kSyn, isn, wire::SeqNumber(0))});
    b.start_connect();
    expect_sent(b, {b.sent_syn(tf::kSyn, isn + 100, wire::SeqNumber(0))});
    EXPECT_NE(c.isn(), isn);
    c.start_connect();
    expect_sent(c, {c.sent_syn(tf::kSyn, c.isn(), wire::SeqNumber(0))});
}

TEST(SynSent, SynAckCompletesHandshakeAndSendsMpaRequest) {
    Dut d;
    const wire::SeqNumber isn = d.isn();
    syn_sent(d);
    d.syn_ack();  // window shift 7
    // The ACK of the SYN-ACK carries the request; the window is now scaled by our shift of
    // 2: 64240 >> 2.
    expect_sent(d, {d.sent_frame(tf::kAck | tf::kPsh, isn + 1, wire::SeqNumber(d.peer_iss + 1),
                                 default_request())
                        .with_window(64240 >> 2)});
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
}

TEST(SynSent, RstWithGoodAckIsConnectionRefused) {
    Dut d;
    syn_sent(d);
    d.feed(d.frame(tf::kRst | tf::kAck, wire::SeqNumber(0), d.dut_nxt));
    expect_nothing_sent(d);
    expect_connect_ended(d, EventType::kRejected, -ECONNREFUSED);
    EXPECT_EQ(d.core.state(d.conn).error(), ApiError::kStaleHandle);
    EXPECT_EQ(d.core.stats().connect_refused_retries, 0u);
}

// CoreConfig::connect_refused_grace: each reset SYN goes again, the same bytes, 10, 20 and
// 40 ms after its reset; the reset after the last wait that fits in the grace ends it.
TEST(SynSent, RefusedSynGoesAgainWithinTheGrace) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.connect_refused_grace = milliseconds(70);
    Dut d(cfg);
    const FirstSyn syn = syn_sent(d);
    for (int wait_ms : {10, 20, 40}) {
        SCOPED_TRACE(::testing::Message() << "the wait of " << wait_ms << " ms");
        d.feed(d.frame(tf::kRst | tf::kAck, wire::SeqNumber(0), d.dut_nxt));
        EXPECT_TRUE(d.evs().empty()) << "reported before the wait";
        EXPECT_EQ(*d.core.state(d.conn), CmState::kSynSent);
        d.advance(milliseconds(wait_ms - 1));
        expect_nothing_sent(d);
        d.advance(milliseconds(1));
        expect_syn_again(d, syn);
    }
    d.feed(d.frame(tf::kRst | tf::kAck, wire::SeqNumber(0), d.dut_nxt));
    expect_nothing_sent(d);
    expect_connect_ended(d, EventType::kRejected, -ECONNREFUSED);
    EXPECT_EQ(d.core.stats().connect_refused_retries, 3u);
    EXPECT_EQ(d.core.stats().resets_received, 4u);
    EXPECT_EQ(d.core.stats().retransmissions, 0u);
}

// A SYN sent again after a reset is answered this time: the connection goes on as any, and
// unanswered it would have been retransmitted on the usual schedule, from its new sending.
TEST(SynSent, RefusedSynAnsweredTheSecondTime) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.connect_refused_grace = milliseconds(500);
    Dut d(cfg);
    const FirstSyn syn = syn_sent(d);
    d.advance(milliseconds(300));
    expect_nothing_sent(d);
    d.feed(d.frame(tf::kRst | tf::kAck, wire::SeqNumber(0), d.dut_nxt));
    d.advance(milliseconds(10));
    expect_syn_again(d, syn);
    // The first SYN's retransmission (due 1 s after it) is gone; the new one is due 1 s
    // after the SYN went again.
    d.advance(milliseconds(999));
    expect_nothing_sent(d);
    d.advance(milliseconds(1));
    expect_syn_again(d, syn);
    d.syn_ack(std::nullopt);  // no window shift: ours goes unscaled too
    expect_sent(d, {d.sent_frame(tf::kAck | tf::kPsh, d.dut_nxt, d.peer_nxt, default_request())
                        .with_window(64240)});
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(d.core.stats().connect_refused_retries, 1u);
}

// Given up while it waits to send its SYN again, the connection sends nothing more.
TEST(SynSent, RefusedSynWaitEndsWithTheConnection) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.connect_refused_grace = milliseconds(500);
    Dut d(cfg);
    syn_sent(d);
    d.feed(d.frame(tf::kRst | tf::kAck, wire::SeqNumber(0), d.dut_nxt));
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kAbortive).has_value());
    d.evs();
    d.advance(seconds(2));
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

TEST(SynSent, RstWithoutAckIsIgnored) {
    Dut d;
    syn_sent(d);
    d.feed(d.frame(tf::kRst, wire::SeqNumber(0), wire::SeqNumber(0)));
    expect_nothing_sent(d);
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(*d.core.state(d.conn), CmState::kSynSent);
}

TEST(SynSent, BadAckGetsRst) {
    Dut d;
    syn_sent(d);
    d.feed(d.frame(tf::kSyn | tf::kAck, wire::SeqNumber(d.peer_iss), d.dut_nxt + 99));
    // RFC 9293 3.10.7.3: <SEQ=SEG.ACK><CTL=RST>, from no connection: no window.
    expect_sent(d, {d.sent_frame(tf::kRst, d.dut_nxt + 99, wire::SeqNumber(0)).with_window(0)});
    EXPECT_EQ(*d.core.state(d.conn), CmState::kSynSent);
}

TEST(SynSent, SimultaneousOpenIsResetAndReported) {
    Dut d;
    syn_sent(d);
    d.feed(d.frame(tf::kSyn, wire::SeqNumber(d.peer_iss), wire::SeqNumber(0)));
    // No window shift agreed: the window goes unscaled.
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, wire::SeqNumber(d.peer_iss + 1))
                        .with_window(64240)});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kConnectError);
    EXPECT_EQ(e[0].status, -ECONNABORTED);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(SynSent, FullBackoffThenUnreachable) {
    Dut d;
    const FirstSyn syn = syn_sent(d);
    const int at_s[] = {1, 3, 7, 15, 27, 39, 51, 63};
    for (int t : at_s) {
        SCOPED_TRACE(::testing::Message() << "at " << t << " s");
        quiet_until(d, seconds(t));
        expect_syn_again(d, syn);
    }
    // Given up at 75 s (12 s after the last), without a frame.
    d.advance(seconds(75) - d.now.time_since_epoch() - milliseconds(1));
    EXPECT_TRUE(d.evs().empty()) << "given up before 75 s";
    d.advance(milliseconds(1));
    expect_nothing_sent(d);
    expect_connect_ended(d, EventType::kUnreachable, -ETIMEDOUT);
    EXPECT_EQ(d.core.stats().retransmissions, 8u);
    EXPECT_EQ(d.core.stats().connect_errors, 1u);
}

TEST(Synchronized, OutOfWindowSegmentGetsAckAndIsDropped) {
    Dut d;
    mpareq_sent(d);
    d.feed(d.frame(tf::kAck, d.peer_nxt + 100000, d.dut_nxt), bytes("junk"));
    expect_sent(d, {d.sent_ack()});
    EXPECT_EQ(d.core.stats().drops(DropReason::kOutOfWindow), 1u);
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
}

TEST(Synchronized, OutOfWindowRstIsDroppedSilently) {
    Dut d;
    mpareq_sent(d);
    d.feed(d.frame(tf::kRst, d.peer_nxt + 100000, wire::SeqNumber(0)));
    expect_nothing_sent(d);
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
}

TEST(Synchronized, InWindowRstGetsChallengeAck) {
    Dut d;
    mpareq_sent(d);
    d.feed(d.frame(tf::kRst, d.peer_nxt + 1, wire::SeqNumber(0)));
    expect_sent(d, {d.sent_ack()});
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
    EXPECT_EQ(d.core.stats().drops(DropReason::kRstIgnored), 1u);
}

TEST(Synchronized, SynGetsChallengeAckNotReset) {
    Dut d;
    mpareq_sent(d);
    d.feed(d.frame(tf::kSyn, d.peer_nxt, wire::SeqNumber(0)));
    expect_sent(d, {d.sent_ack()});
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
}

TEST(Synchronized, AckOfUnsentDataGetsAckAndIsDropped) {
    Dut d;
    mpareq_sent(d);
    d.feed(d.frame(tf::kAck, d.peer_nxt, d.dut_nxt + 1000));
    expect_sent(d, {d.sent_ack()});
    EXPECT_EQ(d.core.stats().drops(DropReason::kBadAck), 1u);
}

TEST(Synchronized, OutOfOrderDataGetsDuplicateAck) {
    Dut d;
    mpareq_sent(d);
    d.feed(d.frame(tf::kAck, d.peer_nxt + 5, d.dut_nxt), bytes("later"));
    expect_sent(d, {d.sent_ack()});
    EXPECT_TRUE(d.evs().empty());
}

TEST(Synchronized, MpaRequestRetransmittedUntilAcked) {
    Dut d;
    const Frame req = mpareq_sent(d);
    quiet_until(d, seconds(1));
    expect_sent(d, {req});
    d.seg(tf::kAck);  // acknowledges the request
    d.advance(seconds(5));
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.stats().retransmissions, 1u);
}

TEST(Synchronized, ExactRstWhileWaitingForReplyRetriesAtRevision1) {
    Dut d;
    mpareq_sent(d);
    d.feed(d.frame(tf::kRst, d.peer_nxt, wire::SeqNumber(0)));
    // A fresh connection on the same tuple: its SYN one past the ISN the tuple has now.
    const Frame syn = d.sent_syn(tf::kSyn, d.isn() + 1, wire::SeqNumber(0));
    expect_sent(d, {syn});
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(d.core.stats().mpa_v1_fallbacks, 1u);
    d.dut_nxt = syn.repr.tcp.seq + 1;
    d.peer_iss = 5000;
    d.peer_nxt = wire::SeqNumber(5001);
    d.syn_ack(std::nullopt);
    // The request at revision 1 (no IRD/ORD word), the window unscaled.
    const std::vector<std::byte> v1 = mpa_bytes(request_v1({}));
    expect_sent(d,
                {d.sent_frame(tf::kAck | tf::kPsh, d.dut_nxt, d.peer_nxt, v1).with_window(64240)});
    // A second reset ends it: no third try.
    d.dut_nxt += static_cast<std::uint32_t>(v1.size());
    d.feed(d.frame(tf::kRst, d.peer_nxt, wire::SeqNumber(0)));
    expect_nothing_sent(d);
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
    mpareq_sent(d);
    d.feed(d.frame(tf::kRst, d.peer_nxt, wire::SeqNumber(0)));
    expect_nothing_sent(d);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kRejected);
}

}  // namespace
}  // namespace iwcm::test
