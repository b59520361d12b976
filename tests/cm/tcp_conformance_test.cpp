// RFC 9293 and RFC 5961 on the wire, the same rules before the hand-off (the MPA exchange,
// the node's TCP) and after it (tcp::Stream): the peer's zero window holds our bytes back and
// is probed on the persist timer (RFC 9293 3.8.6.1, RFC 6298 backoff); an ACK older than
// SND.UNA - MAX.SND.WND is dropped with a rate-limited challenge ACK (RFC 5961 5.2 and 7); an
// ACK of bytes never sent is dropped with an ACK (RFC 9293 3.10.7.4). Whole frames compared.
#include <cerrno>
#include <string>
#include <vector>

#include "cm/dut.hpp"

namespace iwcm::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

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

// The responder's answer to request_v1({}): revision 1, no CRC, no private data.
std::vector<std::byte> v1_reply() {
    wire::MpaRepr m;
    m.kind = wire::MpaKind::kReply;
    m.revision = 1;
    return emitted(m);
}

// What connect_active's peer answers the DUT's request with: revision 2, IRD/ORD 1, no RTR.
std::vector<std::byte> v2_reply() {
    wire::MpaRepr m;
    m.kind = wire::MpaKind::kReply;
    m.revision = 2;
    m.v2 = wire::MpaV2Params{1, 1, false, false, false, false};
    return emitted(m);
}

// A responder whose peer shut its window after sending its revision-1 request, the
// application's accept() made: the reply waits. Returns the reply's first octet's sequence.
wire::SeqNumber reply_behind_zero_window(Dut& d) {
    const Ev req = d.to_mpareq_rcvd(request_v1({}));
    d.feed(peer_ack(d, d.dut_nxt, 0));
    expect_nothing_sent(d);
    EXPECT_TRUE(d.core.accept(d.now, req.conn, {}).has_value());
    const auto e = d.evs();
    EXPECT_EQ(e.size(), 1u);
    if (!e.empty()) {
        EXPECT_EQ(e[0].type, EventType::kEstablished);
    }
    return d.dut_nxt;
}

// The persist timer's probes from now, on the stream's timing: the first at the RTO (1 s,
// no RTT sample yet), each later one after twice the wait before it. Each is this whole
// frame at its instant, nothing between, and the peer answers each with its window still
// shut and the octet not taken.
void expect_probes(Dut& d, const Frame& probe, int count) {
    Duration at = d.now.time_since_epoch();
    for (int k = 0; k < count; ++k) {
        SCOPED_TRACE(::testing::Message() << "probe " << k + 1);
        at += seconds(1 << k);
        quiet_until(d, at);
        expect_sent(d, {probe});
        d.feed(peer_ack(d, d.dut_nxt, 0));
        expect_nothing_sent(d);
    }
}

// ---------------------------------------------------------------- before the hand-off

TEST(ZeroWindowBeforeHandoff, MpaReplyWaitsWithProbesAndLeavesWhenTheWindowOpens) {
    Dut d;
    reply_behind_zero_window(d);
    expect_nothing_sent(d);  // nothing into a zero window
    const std::vector<std::byte> reply = v1_reply();
    const Frame probe =
        d.sent_frame(tf::kAck | tf::kPsh, d.dut_nxt, d.peer_nxt, std::span(reply).first(1));
    expect_probes(d, probe, 5);
    EXPECT_EQ(d.core.stats().window_probes, 5u);
    // The window opens: the whole reply leaves at once, from SND.NXT.
    d.feed(peer_ack(d, d.dut_nxt, 65535));
    expect_sent(d, {d.sent_frame(tf::kAck | tf::kPsh, d.dut_nxt, d.peer_nxt, reply)});
    d.dut_nxt += static_cast<std::uint32_t>(reply.size());
    // Acknowledged: no probe, no retransmission follows.
    d.seg(tf::kAck);
    d.advance(seconds(300));
    expect_nothing_sent(d);
    EXPECT_EQ(*d.core.state(d.conn), CmState::kEstablished);
}

TEST(ZeroWindowBeforeHandoff, MpaRequestWaitsWithProbesAndLeavesWhenTheWindowOpens) {
    Dut open;  // the same connect() into an open window: the request's bytes
    const std::vector<std::byte> request = open.to_mpareq_sent().payload;
    Dut d;
    d.to_syn_sent();
    auto syn_ack = d.frame(tf::kSyn | tf::kAck, wire::SeqNumber(d.peer_iss), d.dut_nxt);
    syn_ack.tcp.options.mss = 1460;
    syn_ack.tcp.options.window_scale = 7;
    syn_ack.tcp.window = 0;
    d.feed(syn_ack);
    // The handshake's ACK goes alone; the request waits behind the window.
    expect_sent(d, {d.sent_ack()});
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
    const Frame probe =
        d.sent_frame(tf::kAck | tf::kPsh, d.dut_nxt, d.peer_nxt, std::span(request).first(1));
    expect_probes(d, probe, 3);  // the reply timer (10 s) still runs
    d.feed(peer_ack(d, d.dut_nxt, 65535));
    expect_sent(d, {d.sent_frame(tf::kAck | tf::kPsh, d.dut_nxt, d.peer_nxt, request)});
    d.dut_nxt += static_cast<std::uint32_t>(request.size());
    // The responder's reply completes the exchange.
    const std::vector<std::byte> reply = v2_reply();
    d.seg(tf::kAck | tf::kPsh, reply);
    expect_sent(d, {d.sent_ack()});
    const auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kEstablished);
}

// RFC 9293 3.10.7.4: the probe's octet may be taken, and an ACK of it is no ACK of unsent
// data; one octet further is. The bytes then go on from the octet after it.
TEST(ZeroWindowBeforeHandoff, TheProbesOctetMayBeAcknowledgedAndNoMore) {
    Dut d;
    const wire::SeqNumber first = reply_behind_zero_window(d);
    const std::vector<std::byte> reply = v1_reply();
    const Duration t0 = d.now.time_since_epoch();
    quiet_until(d, t0 + seconds(1));
    expect_sent(d,
                {d.sent_frame(tf::kAck | tf::kPsh, first, d.peer_nxt, std::span(reply).first(1))});
    d.feed(peer_ack(d, first + 2, 0));  // past the probe's octet: never sent
    expect_sent(d, {d.sent_ack()});
    EXPECT_EQ(d.core.stats().drops(DropReason::kBadAck), 1u);
    d.feed(peer_ack(d, first + 1, 0));  // the octet taken, the window shut again
    expect_nothing_sent(d);
    d.dut_nxt = first + 1;
    // The persist timer goes on backing off: the next probe is the next octet.
    quiet_until(d, t0 + seconds(3));
    expect_sent(d, {d.sent_frame(tf::kAck | tf::kPsh, d.dut_nxt, d.peer_nxt,
                                 std::span(reply).subspan(1, 1))});
    d.feed(peer_ack(d, d.dut_nxt, 65535));
    expect_sent(
        d, {d.sent_frame(tf::kAck | tf::kPsh, d.dut_nxt, d.peer_nxt, std::span(reply).subspan(1))});
}

// As the stream gives up (Linux's tcp_probe_timer): max_retransmits probes without an
// acceptable ACK end the connection with a reset, as spent retransmissions do.
TEST(ZeroWindowBeforeHandoff, UnansweredProbesGiveTheConnectionUp) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.stream.max_retransmits = 2;
    Dut d(cfg);
    const wire::SeqNumber first = reply_behind_zero_window(d);
    const std::vector<std::byte> reply = v1_reply();
    const Frame probe =
        d.sent_frame(tf::kAck | tf::kPsh, first, d.peer_nxt, std::span(reply).first(1));
    const Duration t0 = d.now.time_since_epoch();
    quiet_until(d, t0 + seconds(1));
    expect_sent(d, {probe});
    quiet_until(d, t0 + seconds(3));
    expect_sent(d, {probe});
    quiet_until(d, t0 + seconds(7));
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, first, d.peer_nxt)});
    const auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(e[0].status, -ETIMEDOUT);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

// A graceful close whose FIN waits behind the reply a shut window holds back, then an
// abortive one: the reset goes at the reply's first octet, and the closed node has nothing
// left waiting (no queued FIN without bytes before it: the engine's invariants, checked
// after every command in the debug and sanitizer builds).
TEST(ZeroWindowBeforeHandoff, AnAbortAfterAGracefulCloseLeavesNothingWaiting) {
    Dut d;
    const wire::SeqNumber first = reply_behind_zero_window(d);
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
    expect_nothing_sent(d);  // the FIN waits behind the reply
    EXPECT_EQ(*d.core.state(d.conn), CmState::kFinWait1);
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kAbortive).has_value());
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, first, d.peer_nxt)});
    const auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    d.advance(seconds(300));
    expect_nothing_sent(d);
}

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

// RFC 5961 4.2: a SYN in a synchronised state draws a challenge ACK whatever its sequence
// number, inside the window or far outside it, from the per-second budget (1 here); the
// connection goes on. `ack` is the ACK frame the DUT answers with.
void expect_syns_challenged(Dut& d, const Frame& ack) {
    const std::uint32_t offsets[] = {k2To30, 0};
    for (const std::uint32_t off : offsets) {
        d.feed(d.frame(tf::kSyn, d.peer_nxt + off, wire::SeqNumber(0)));
    }
    expect_sent(d, {ack});  // the first challenged; the second over the budget
    EXPECT_EQ(d.core.stats().challenge_acks_sent, 1u);
    EXPECT_EQ(d.core.stats().challenge_acks_limited, 1u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kUnexpected), 2u);
    EXPECT_EQ(d.core.stats().resets_sent, 0u);
    d.advance(seconds(1));  // the next second's budget
    d.feed(d.frame(tf::kSyn, d.peer_nxt + k2To30, wire::SeqNumber(0)));
    expect_sent(d, {ack});
    EXPECT_EQ(d.core.stats().challenge_acks_sent, 2u);
}

TEST(SynBeforeHandoff, ASynInOrOutOfTheWindowDrawsAChallengeAck) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.challenge_ack_limit = 1;
    Dut d(cfg);
    d.to_mpareq_sent();
    d.feed(peer_ack(d, d.dut_nxt, 65535));  // the request is in: nothing to retransmit
    expect_nothing_sent(d);
    expect_syns_challenged(d, d.sent_ack());
    EXPECT_EQ(*d.core.state(d.conn), CmState::kMpaReqSent);
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

TEST(ZeroWindowAfterHandoff, BytesWaitWithProbesAndLeaveWhenTheWindowOpens) {
    Dut d(immediate_acks());
    stream_up(d);
    d.feed(peer_ack(d, d.dut_nxt, 0));
    ASSERT_EQ(d.core.send(d.now, d.conn, bytes("abc")).value_or(0), 3u);
    expect_nothing_sent(d);
    const Frame probe = stream_frame(d, tf::kAck | tf::kPsh, d.dut_nxt, bytes("a"));
    expect_probes(d, probe, 5);
    d.feed(peer_ack(d, d.dut_nxt, 65535));
    expect_sent(d, {stream_frame(d, tf::kAck | tf::kPsh, d.dut_nxt, bytes("abc"))});
}

// An MPA reply the peer's window held back is the stream's once handed off: it leaves when
// the window opens, even while the responder's own data waits for the peer's first FPDU
// (MpaConfig::responder_send_wait), and that data only after it.
TEST(ZeroWindowAfterHandoff, HeldBackMpaReplyLeavesBeforeTheResponderMaySend) {
    Dut d(immediate_acks());
    reply_behind_zero_window(d);
    ASSERT_TRUE(d.core.handoff(d.conn, {}).has_value());
    expect_nothing_sent(d);
    ASSERT_EQ(d.core.send(d.now, d.conn, bytes("fpdu")).value_or(0), 4u);
    expect_nothing_sent(d);
    const std::vector<std::byte> reply = v1_reply();
    d.advance(milliseconds(10));
    d.feed(peer_ack(d, d.dut_nxt, 65535));
    expect_sent(d, {stream_frame(d, tf::kAck | tf::kPsh, d.dut_nxt, reply)});
    d.dut_nxt += static_cast<std::uint32_t>(reply.size());
    d.seg(tf::kAck | tf::kPsh, bytes("peer"));
    expect_sent(d, {stream_frame(d, tf::kAck | tf::kPsh, d.dut_nxt, bytes("fpdu"))});
}

// The kExternal data path is handed the reply the window held back, to send first.
TEST(ZeroWindowAfterHandoff, ExternalHandoffHandsOverTheHeldBackReply) {
    Dut d;
    const wire::SeqNumber first = reply_behind_zero_window(d);
    HandoffParams hp;
    hp.mode = HandoffMode::kExternal;
    auto ctx = d.core.handoff(d.conn, hp);
    ASSERT_TRUE(ctx.has_value());
    const std::vector<std::byte> reply = v1_reply();
    EXPECT_EQ(std::vector<std::byte>(ctx->pending_tx.begin(), ctx->pending_tx.end()), reply);
    EXPECT_EQ(ctx->snd_nxt, (first + static_cast<std::uint32_t>(reply.size())).value());
    // The core sends none of it, probe or reply, and takes the data path's ACK of it.
    d.advance(seconds(60));
    expect_nothing_sent(d);
    d.feed(peer_ack(d, first + static_cast<std::uint32_t>(reply.size()), 65535));
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.stats().drops(DropReason::kBadAck), 0u);
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

TEST(SynAfterHandoff, ASynInOrOutOfTheWindowDrawsAChallengeAck) {
    CoreConfig cfg = immediate_acks();
    cfg.challenge_ack_limit = 1;
    Dut d(cfg);
    stream_up(d);
    expect_syns_challenged(d, stream_frame(d, tf::kAck, d.dut_nxt));
    EXPECT_EQ(*d.core.state(d.conn), CmState::kOffloaded);
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
