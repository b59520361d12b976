// The byte stream after a kStream hand-off, on the wire: the DUT's segments
// carry the stream's sequence numbers, window and ACKs; FIN, RST and close
// after data happen where the data left the sequence; events tell the
// application what changed. (tcp::Stream's own rules: tests/tcp/.)
#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "cm/dut.hpp"
#include "cm/stream_helpers.hpp"

namespace iwcm::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A hand-off whose stream has a 4096-byte send buffer.
HandoffParams small_send_buffer() {
    HandoffParams hp;
    StreamConfig sc;
    sc.send_buffer = 4096;
    hp.stream = sc;
    return hp;
}

TEST(Stream, PeerBytesAreAcknowledgedAndReadableInOrder) {
    Dut d(immediate_acks());
    stream_up(d);
    d.seg(tf::kAck | tf::kPsh, bytes("hello"));
    // The window is the stream's: the buffer's free space, its right edge
    // where it was (five bytes wait, so the field is below the maximum).
    EXPECT_EQ(stream_window(d), d.core.stream_info(d.conn)->rcv_wnd >> 2);
    EXPECT_LT(stream_window(d), 65535);
    expect_sent(d, {stream_ack(d)});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kReadable);
    EXPECT_EQ(text(*d.core.peek(d.conn)), "hello");
    // A second arrival before the read: the first kReadable was polled, so
    // one more tells of the new bytes; a third while that one waits adds none.
    d.seg(tf::kAck | tf::kPsh, bytes(" world"));
    expect_sent(d, {stream_ack(d)});
    d.seg(tf::kAck | tf::kPsh, bytes("!"));
    expect_sent(d, {stream_ack(d)});
    e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kReadable);
    // Nothing new arrived: no event, however the stream is stirred.
    d.core.on_timer(d.now);
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(d.core.stream_info(d.conn)->readable, 12u);
    std::array<std::byte, 64> buf{};
    auto n = d.core.recv(d.now, d.conn, buf);
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(text(std::span(buf).first(*n)), "hello world!");
    EXPECT_EQ(d.core.peek(d.conn)->size(), 0u);
    // Once read, the next arrival is told again.
    d.seg(tf::kAck | tf::kPsh, bytes("!"));
    expect_sent(d, {stream_ack(d)});
    e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kReadable);
}

TEST(Stream, SendUsesTheStreamsSequenceAndIsRetransmittedOnTimeout) {
    Dut d(immediate_acks());
    stream_up(d);
    const std::uint64_t before = d.core.stats().retransmissions;
    EXPECT_EQ(send_text(d, "abc"), 3u);
    const Frame abc = stream_seg(d, tf::kAck | tf::kPsh, d.dut_nxt, bytes("abc"));
    expect_sent(d, {abc});
    // No ACK: the first RTO (1 s, no RTT sample yet) sends the same bytes again.
    d.advance(milliseconds(999));
    expect_nothing_sent(d);
    d.advance(milliseconds(1));
    expect_sent(d, {abc});
    EXPECT_EQ(d.core.stream_info(d.conn)->retransmitted_segments, 1u);
    // The core's count of segments sent again includes the stream's.
    EXPECT_EQ(d.core.stats().retransmissions, before + 1);
    d.dut_nxt += 3;
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.stream_info(d.conn)->queued, 0u);
    // Idle: what is left is the fold, when the stream timer next expires: here the RTO
    // armed before, whose deadline has gone. The folded stream has no deadline.
    ASSERT_TRUE(d.core.next_deadline().has_value());
    d.advance(*d.core.next_deadline() - d.now);
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.stats().streams_folded, 1u);
    EXPECT_FALSE(d.core.next_deadline().has_value());
}

TEST(Stream, PeerFinAfterDataClosesAtTheRightSequence) {
    Dut d(immediate_acks());
    stream_up(d);
    EXPECT_EQ(send_text(d, "xyz"), 3u);
    expect_sent(d, {stream_seg(d, tf::kAck | tf::kPsh, d.dut_nxt, bytes("xyz"))});
    // The peer sends data and its FIN, not yet acknowledging our bytes.
    d.feed(d.frame(tf::kAck | tf::kPsh | tf::kFin, d.peer_nxt, d.dut_nxt), bytes("data"));
    d.peer_nxt += 5;
    // Our FIN follows our three bytes and acknowledges the peer's FIN.
    expect_sent(d, {stream_seg(d, tf::kFin | tf::kAck, d.dut_nxt + 3)});
    // The bytes stay readable while the terminal event waits and once it is polled.
    auto e1 = d.core.poll_event();
    ASSERT_TRUE(e1.has_value());
    EXPECT_EQ(e1->type, EventType::kReadable);
    auto e2 = d.core.poll_event();
    ASSERT_TRUE(e2.has_value());
    EXPECT_EQ(e2->type, EventType::kDisconnected);
    EXPECT_EQ(e2->status, 0);
    EXPECT_EQ(e2->state, CmState::kCloseWait);  // then LAST_ACK with our FIN
    EXPECT_EQ(text(*d.core.peek(d.conn)), "data");
    EXPECT_TRUE(d.core.stream_info(d.conn)->fin_received);
    EXPECT_EQ(d.core.send(d.now, d.conn, bytes("late")).error(), ApiError::kStaleHandle);
    EXPECT_FALSE(d.core.poll_event().has_value());
    // The peer acknowledges everything: the node goes.
    d.dut_nxt += 4;
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.peek(d.conn).error(), ApiError::kStaleHandle);
}

TEST(Stream, RstMustMatchTheStreamsRcvNxt) {
    Dut d(immediate_acks());
    stream_up(d);
    wire::SeqNumber handoff_rcv = d.peer_nxt;
    d.seg(tf::kAck | tf::kPsh, bytes("0123456789"));
    expect_sent(d, {stream_ack(d)});
    d.evs();
    // At the hand-off's rcv_nxt, now behind the window: dropped in silence
    // (RFC 5961 3.2), where the engine before streams answered it.
    d.feed(d.frame(tf::kRst, handoff_rcv, d.dut_nxt));
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.stats().drops(DropReason::kOutOfWindow), 1u);
    // In the window but not exact: a challenge ACK at today's rcv_nxt.
    d.feed(d.frame(tf::kRst, d.peer_nxt + 5, d.dut_nxt));
    expect_sent(d, {stream_ack(d)});
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(d.core.stats().challenge_acks_sent, 1u);
    d.feed(d.frame(tf::kRst, d.peer_nxt, d.dut_nxt));
    expect_nothing_sent(d);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(e[0].status, -ECONNRESET);
}

TEST(Stream, GracefulDisconnectSendsFinAfterQueuedBytes) {
    Dut d(immediate_acks());
    stream_up(d);
    EXPECT_EQ(send_text(d, "abcd"), 4u);
    expect_sent(d, {stream_seg(d, tf::kAck | tf::kPsh, d.dut_nxt, bytes("abcd"))});
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
    expect_sent(d, {stream_seg(d, tf::kFin | tf::kAck, d.dut_nxt + 4)});
    EXPECT_EQ(*d.core.state(d.conn), CmState::kFinWait1);
    EXPECT_EQ(d.core.send(d.now, d.conn, bytes("more")).error(), ApiError::kWrongState);
    d.dut_nxt += 5;
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    EXPECT_EQ(*d.core.state(d.conn), CmState::kFinWait2);
    d.seg(tf::kAck | tf::kFin);
    const Frame last_ack = stream_ack(d);
    expect_sent(d, {last_ack});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(e[0].state, CmState::kTimeWait);
    // A stream's TIME_WAIT (120 s, not the driver's 100 ms) re-ACKs a
    // retransmitted FIN, whose arrival restarts it (RFC 9293).
    d.advance(seconds(100));
    expect_nothing_sent(d);
    d.feed(d.frame(tf::kAck | tf::kFin, d.peer_nxt + static_cast<std::uint32_t>(-1), d.dut_nxt));
    expect_sent(d, {last_ack});
    d.advance(seconds(119));
    EXPECT_EQ(d.core.live_nodes(), 1u);
    d.advance(seconds(1));
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

// The one event the DUT queued: kDisconnected with `status`, told in `state`.
void expect_disconnected(Dut& d, int status, CmState state) {
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(e[0].status, status);
    EXPECT_EQ(e[0].state, state);
}

// A stream's FIN_WAIT2 waits as long as the peer's retransmissions of its FIN could last
// (our own RTO doubling from 1 s to the 60 s cap, 15 retransmissions: 663 s), so a FIN that
// comes through late still closes cleanly; after that, a reset and -ECONNABORTED.
TEST(Stream, FinWait2WaitsAsLongAsTheStreamsRetransmissions) {
    for (bool fin_comes : {true, false}) {
        Dut d(immediate_acks());
        stream_up(d);
        ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
        expect_sent(d, {stream_seg(d, tf::kFin | tf::kAck, d.dut_nxt)});
        d.dut_nxt += 1;
        d.seg(tf::kAck);
        expect_nothing_sent(d);
        ASSERT_EQ(*d.core.state(d.conn), CmState::kFinWait2);
        quiet_until(d, d.now.time_since_epoch() + seconds(662));
        EXPECT_EQ(d.core.live_nodes(), 1u);
        if (fin_comes) {
            d.seg(tf::kAck | tf::kFin);
            expect_sent(d, {stream_ack(d)});
            expect_disconnected(d, 0, CmState::kTimeWait);
            continue;
        }
        const Frame reset = stream_seg(d, tf::kRst | tf::kAck, d.dut_nxt);
        d.advance(seconds(1));
        expect_sent(d, {reset});
        expect_disconnected(d, -ECONNABORTED, CmState::kClosed);
        EXPECT_EQ(d.core.live_nodes(), 0u);
    }
}

// CLOSING, then a reset at rcv_nxt: the peer's FIN acknowledges `acked` of our 4 bytes;
// the application hears kDisconnected with `status`, and nothing is left.
void reset_in_closing(std::uint32_t acked, int status) {
    Dut d(immediate_acks());
    stream_up(d);
    EXPECT_EQ(send_text(d, "abcd"), 4u);
    expect_sent(d, {stream_seg(d, tf::kAck | tf::kPsh, d.dut_nxt, bytes("abcd"))});
    EXPECT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
    expect_sent(d, {stream_seg(d, tf::kFin | tf::kAck, d.dut_nxt + 4)});
    d.feed(d.frame(tf::kAck | tf::kFin, d.peer_nxt, d.dut_nxt + acked));
    d.peer_nxt += 1;
    EXPECT_EQ(*d.core.state(d.conn), CmState::kClosing);
    expect_sent(d, {stream_seg(d, tf::kAck, d.dut_nxt + 5)});  // after our FIN
    EXPECT_TRUE(d.evs().empty());
    d.feed(d.frame(tf::kRst, d.peer_nxt, d.dut_nxt + acked));
    expect_nothing_sent(d);
    expect_disconnected(d, status, CmState::kClosing);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

// Under loss a peer's TIME_WAIT can end before our backed-off FIN reaches it; its reset then
// closes a connection that lost nothing (every byte but the FIN acknowledged).
TEST(Stream, ResetInClosingWithEveryByteAckedIsAClose) {
    reset_in_closing(4, 0);
}

TEST(Stream, ResetInClosingWithBytesUnackedIsAReset) {
    reset_in_closing(2, -ECONNRESET);
}

TEST(Stream, AckOfUnsentDataIsAnsweredAndDropped) {
    Dut d(immediate_acks());
    stream_up(d);
    d.feed(d.frame(tf::kAck | tf::kPsh, d.peer_nxt, d.dut_nxt + 100), bytes("zz"));
    expect_sent(d, {stream_ack(d)});  // at peer_nxt: the bytes were not taken
    EXPECT_EQ(d.core.stats().drops(DropReason::kBadAck), 1u);
    EXPECT_TRUE(d.evs().empty());
}

TEST(Stream, OutOfOrderBytesAreDeliveredWhenTheHoleFills) {
    Dut d(immediate_acks());
    stream_up(d);
    d.feed(d.frame(tf::kAck | tf::kPsh, d.peer_nxt + 5, d.dut_nxt), bytes("world"));
    expect_sent(d, {stream_ack(d)});  // a duplicate ACK at once
    EXPECT_TRUE(d.evs().empty());
    d.seg(tf::kAck | tf::kPsh, bytes("hello"));
    d.peer_nxt += 5;
    expect_sent(d, {stream_ack(d)});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kReadable);
    EXPECT_EQ(text(*d.core.peek(d.conn)), "helloworld");
    // The same bytes again: acknowledged, not delivered twice.
    d.feed(d.frame(tf::kAck | tf::kPsh, d.peer_nxt + static_cast<std::uint32_t>(-10), d.dut_nxt),
           bytes("helloworld"));
    expect_sent(d, {stream_ack(d)});
    EXPECT_EQ(d.core.stream_info(d.conn)->readable, 10u);
}

// A stream whose peer advertises a zero window, with "abc" queued: returns
// the peer's ACK that keeps it shut.
wire::FrameRepr shut_window(Dut& d) {
    stream_up(d);
    auto closed = d.frame(tf::kAck, d.peer_nxt, d.dut_nxt);
    closed.tcp.window = 0;
    d.feed(closed);
    EXPECT_EQ(send_text(d, "abc"), 3u);
    return closed;
}

TEST(Stream, ZeroWindowIsProbedUntilItOpens) {
    Dut d(immediate_acks());
    auto closed = shut_window(d);
    expect_nothing_sent(d);  // nothing into a zero window
    const Frame probe = stream_seg(d, tf::kAck | tf::kPsh, d.dut_nxt, bytes("a"));  // one byte
    quiet_until(d, d.now.time_since_epoch() + seconds(1));
    expect_sent(d, {probe});
    d.feed(closed);  // still closed
    expect_nothing_sent(d);
    quiet_until(d, d.now.time_since_epoch() + seconds(2));  // the probe interval backs off
    expect_sent(d, {probe});
    auto open = d.frame(tf::kAck, d.peer_nxt, d.dut_nxt);
    d.feed(open);
    expect_sent(d, {stream_seg(d, tf::kAck | tf::kPsh, d.dut_nxt, bytes("abc"))});
}

// An abort while a zero-window probe's byte is out: SND.NXT lies past the
// peer's window, where its RST would be dropped (RFC 9293 3.10.7.4); the RST
// goes at the window's right edge (here SND.UNA), as Linux's tcp_acceptable_seq.
TEST(Stream, ResetAfterAZeroWindowProbeGoesAtTheWindowEdge) {
    Dut d(immediate_acks());
    auto closed = shut_window(d);
    d.advance(seconds(1));
    // The probe, at SND.UNA.
    expect_sent(d, {stream_seg(d, tf::kAck | tf::kPsh, d.dut_nxt, bytes("a"))});
    d.feed(closed);  // not taken: the window stays shut, SND.UNA stays
    expect_nothing_sent(d);
    const Frame reset = stream_seg(d, tf::kRst | tf::kAck, d.dut_nxt);
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kAbortive).has_value());
    expect_sent(d, {reset});
}

// A hand-off whose stream keeps the connection alive: after `idle`, `probes` probes
// `interval` apart.
HandoffParams keepalive(Duration idle, Duration interval, std::uint8_t probes) {
    HandoffParams hp;
    StreamConfig sc;
    sc.keepalive = true;
    sc.keepalive_idle = idle;
    sc.keepalive_interval = interval;
    sc.keepalive_probes = probes;
    hp.stream = sc;
    return hp;
}

TEST(Stream, KeepaliveProbesAndGivesUp) {
    Dut d(immediate_acks());
    stream_up(d, keepalive(seconds(10), seconds(1), 3));
    // A bare ACK at SND.NXT - 1.
    const Frame probe = stream_seg(d, tf::kAck, d.dut_nxt + static_cast<std::uint32_t>(-1));
    const Frame reset = stream_seg(d, tf::kRst | tf::kAck, d.dut_nxt);
    d.advance(seconds(10));
    expect_sent(d, {probe});
    d.seg(tf::kAck);  // the peer is alive: idle again
    expect_nothing_sent(d);
    d.advance(seconds(10));
    expect_sent(d, {probe});
    d.advance(seconds(3));  // three probes unanswered
    expect_sent(d, {probe, probe, reset});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(e[0].status, -ETIMEDOUT);
}

// RFC 9293 section 3.8.4 as Linux does it (tcp_keepalive_timer, tcp_write_wakeup): after
// `idle` without a segment from the peer, a bare ACK at SND.NXT - 1 (an old byte's
// sequence, which the peer must answer); then one every `interval`; after `probes`
// unanswered ones, a reset at SND.NXT. Each whole frame, each at its instant, no more.
TEST(Stream, KeepaliveProbesAreWholeFramesAtTheirSpacing) {
    Dut d(immediate_acks());
    stream_up(d, keepalive(seconds(10), seconds(2), 4));
    const Duration t0 = d.now.time_since_epoch();
    // The stream's window: its buffer's free space, scaled, at most the field's maximum.
    const std::uint32_t wnd = d.core.stream_info(d.conn)->rcv_wnd >> d.core.config().rcv_wscale;
    const auto window = static_cast<std::uint16_t>(std::min<std::uint32_t>(wnd, 65535));
    const Frame probe =
        d.sent_frame(tf::kAck, d.dut_nxt + static_cast<std::uint32_t>(-1), d.peer_nxt)
            .with_window(window);
    for (int k = 0; k < 4; ++k) {
        SCOPED_TRACE(::testing::Message() << "probe " << k + 1);
        quiet_until(d, t0 + seconds(10 + 2 * k));
        expect_sent(d, {probe});
        EXPECT_TRUE(d.evs().empty());
    }
    // The fourth probe's interval runs out unanswered: the connection is given up.
    quiet_until(d, t0 + seconds(10 + 2 * 4));
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt).with_window(window)});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    EXPECT_EQ(e[0].status, -ETIMEDOUT);
    d.advance(seconds(60));
    expect_nothing_sent(d);
}

TEST(Stream, BeforeHandoffTheWindowShrinksAsBytesWait) {
    Dut d(immediate_acks());
    connect_active(d);
    // Established, not handed off: the peer pushes more than rcv_wnd.
    const std::uint32_t wnd = d.core.config().rcv_wnd;
    std::vector<std::byte> chunk(1460, std::byte{0x5a});
    std::uint32_t pushed = 0;
    wire::SeqNumber start = d.peer_nxt;
    std::optional<Sent> last;
    while (pushed < wnd + 10 * 1460) {
        d.feed(d.frame(tf::kAck | tf::kPsh, d.peer_nxt, d.dut_nxt), chunk);
        d.peer_nxt += 1460;
        pushed += 1460;
        for (auto& s : d.out()) last = s;
    }
    ASSERT_TRUE(last.has_value());
    EXPECT_EQ(last->tcp().ack, start + wnd);  // no more than the window was taken
    EXPECT_EQ(last->tcp().window, 0);
    // The hand-off makes them readable and opens the window again.
    ASSERT_TRUE(d.core.handoff(d.conn).has_value());
    EXPECT_EQ(d.core.stream_info(d.conn)->readable, wnd);
}

TEST(Stream, MisuseIsAnErrorNotUndefined) {
    Dut d(immediate_acks());
    EXPECT_EQ(d.core.send(d.now, ConnHandle{}, bytes("x")).error(), ApiError::kInvalidHandle);
    EXPECT_EQ(d.core.peek(ConnHandle{3, 1}).error(), ApiError::kInvalidHandle);
    d.to_mpareq_sent(d.connect_params());
    // Not handed off yet.
    EXPECT_EQ(d.core.send(d.now, d.conn, bytes("x")).error(), ApiError::kWrongState);
    EXPECT_EQ(d.core.peek(d.conn).error(), ApiError::kWrongState);
    Dut ext(immediate_acks());
    stream_up(ext, HandoffParams{HandoffMode::kExternal});
    EXPECT_EQ(ext.core.send(ext.now, ext.conn, bytes("x")).error(), ApiError::kWrongState);
    Dut s(immediate_acks());
    stream_up(s);
    EXPECT_EQ(s.core.consume(s.now, s.conn, 1).error(), ApiError::kInvalidArgument);
    // A second hand-off returns the context again; the mode stays.
    EXPECT_TRUE(s.core.handoff(s.conn, HandoffParams{HandoffMode::kExternal}).has_value());
    EXPECT_EQ(send_text(s, "ok"), 2u);
}

TEST(Stream, SendBufferFullArmsOneWritableEvent) {
    Dut d(immediate_acks());
    stream_up(d, small_send_buffer());
    std::vector<std::byte> big(10000, std::byte{1});
    auto n = d.core.send(d.now, d.conn, big);
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(*n, 4096u);
    EXPECT_EQ(d.core.send(d.now, d.conn, big).value_or(1), 0u);
    auto o = d.out();
    EXPECT_FALSE(o.empty());
    EXPECT_TRUE(d.evs().empty());
    std::uint32_t sent = 0;
    for (auto& s : o) sent += static_cast<std::uint32_t>(s.payload.size());
    d.dut_nxt += sent;
    d.seg(tf::kAck);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kWritable);
    EXPECT_GT(d.core.stream_info(d.conn)->send_space, 0u);
}

// Records of `sizes` bytes (each a distinct fill byte), all taken.
std::vector<std::vector<std::byte>> send_records(Dut& d, std::initializer_list<std::size_t> sizes) {
    std::vector<std::vector<std::byte>> out;
    for (std::size_t n : sizes) {
        out.emplace_back(n, static_cast<std::byte>(out.size() + 1));
        auto r = d.core.send_record(d.now, d.conn, out.back());
        EXPECT_TRUE(r.has_value() && *r) << n;
    }
    return out;
}

TEST(Stream, EachRecordLeavesAsItsOwnSegments) {
    Dut d(immediate_acks());
    stream_up(d);
    const std::size_t mss = d.core.stream_info(d.conn)->mss;
    ASSERT_EQ(mss, 1460u);  // the peer's MSS; our 1500-byte MTU allows as much
    const auto recs = send_records(d, {1, mss - 1, mss, 2 * mss + 7, 5, 5});
    // One segment per record up to an MSS (never two records in one), a
    // longer record in MSS-sized pieces.
    std::vector<std::vector<std::byte>> want;
    for (const auto& r : recs) {
        for (std::size_t at = 0; at < r.size(); at += mss) {
            const std::size_t n = std::min(mss, r.size() - at);
            want.emplace_back(r.begin() + static_cast<std::ptrdiff_t>(at),
                              r.begin() + static_cast<std::ptrdiff_t>(at + n));
        }
    }
    std::vector<std::vector<std::byte>> got;
    wire::SeqNumber seq = d.dut_nxt;
    for (const Sent& s : d.out()) {
        EXPECT_EQ(s.tcp().seq, seq);
        seq += static_cast<std::uint32_t>(s.payload.size());
        got.emplace_back(s.payload.begin(), s.payload.end());
    }
    EXPECT_EQ(got, want);
}

// A record given in pieces is gathered: one segment holding them in order.
TEST(Stream, RecordInPiecesLeavesAsOneSegment) {
    Dut d(immediate_acks());
    stream_up(d);
    const auto head = bytes("head:"), body = bytes("the payload"), tail = bytes(":crc!");
    const std::span<const std::byte> parts[] = {head, body, tail};
    auto taken = d.core.send_record(d.now, d.conn, parts);
    ASSERT_TRUE(taken.has_value());
    EXPECT_TRUE(*taken);
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(text(o[0].payload), "head:the payload:crc!");
    // All or nothing, as for one piece: an empty record is refused.
    const std::span<const std::byte> none[] = {std::span<const std::byte>{}};
    EXPECT_EQ(d.core.send_record(d.now, d.conn, none).error(), ApiError::kInvalidArgument);
}

TEST(Stream, StreamInfoMssIsWhereRecordsAreCut) {
    // A 1000-byte MTU leaves 960 bytes of payload, below the peer's 1460.
    CoreConfig c = immediate_acks();
    c.mtu = 1000;
    Dut d(c);
    stream_up(d);
    ASSERT_EQ(d.core.stream_info(d.conn)->mss, 960u);
    send_records(d, {960, 961});
    auto o = d.out();
    ASSERT_EQ(o.size(), 3u);
    EXPECT_EQ(o[0].payload.size(), 960u);
    EXPECT_EQ(o[1].payload.size(), 960u);
    EXPECT_EQ(o[2].payload.size(), 1u);
}

TEST(Stream, RecordThatDoesNotFitIsRefusedWholeAndWritableFollows) {
    Dut d(immediate_acks());
    stream_up(d, small_send_buffer());
    send_records(d, {3000});
    const std::vector<std::byte> next(2000, std::byte{9});
    auto r = d.core.send_record(d.now, d.conn, next);
    ASSERT_TRUE(r.has_value());
    EXPECT_FALSE(*r);
    EXPECT_EQ(d.core.stream_info(d.conn)->queued, 3000u);  // nothing of it taken
    ASSERT_EQ(d.out().size(), 3u);                         // 1460 + 1460 + 80
    EXPECT_TRUE(d.evs().empty());
    // 500 bytes acknowledged: 1596 free, not enough for the record.
    d.dut_nxt += 500;
    d.seg(tf::kAck);
    EXPECT_TRUE(d.evs().empty());
    // 1500: 2596 free, enough.
    d.dut_nxt += 1000;
    d.seg(tf::kAck);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kWritable);
    r = d.core.send_record(d.now, d.conn, next);
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(*r);
}

TEST(Stream, SendRecordMisuseIsAnError) {
    const std::vector<std::byte> one(1, std::byte{1});
    Dut d(immediate_acks());
    EXPECT_EQ(d.core.send_record(d.now, ConnHandle{}, one).error(), ApiError::kInvalidHandle);
    d.to_mpareq_sent(d.connect_params());
    EXPECT_EQ(d.core.send_record(d.now, d.conn, one).error(), ApiError::kWrongState);
    Dut ext(immediate_acks());
    stream_up(ext, HandoffParams{HandoffMode::kExternal});
    EXPECT_EQ(ext.core.send_record(ext.now, ext.conn, one).error(), ApiError::kWrongState);
    Dut s(immediate_acks());
    stream_up(s);
    EXPECT_EQ(s.core.send_record(s.now, s.conn, std::span<const std::byte>{}).error(),
              ApiError::kInvalidArgument);
    const std::vector<std::byte> huge(s.core.config().stream.send_buffer + 1);
    EXPECT_EQ(s.core.send_record(s.now, s.conn, huge).error(), ApiError::kInvalidArgument);
    ASSERT_TRUE(s.core.disconnect(s.now, s.conn, DisconnectMode::kGraceful).has_value());
    EXPECT_EQ(s.core.send_record(s.now, s.conn, one).error(), ApiError::kWrongState);
}

// send_ref: the segments are written from the caller's memory (a byte changed there shows
// in the retransmission), nothing is copied in, and the memory is free once acknowledged.
TEST(Stream, SendRefSendsFromTheCallersMemoryUntilAcked) {
    Dut d(immediate_acks());
    stream_up(d, small_send_buffer());
    std::vector<std::byte> mem(5000);
    for (std::size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<std::byte>(i * 7);
    auto n = d.core.send_ref(d.now, d.conn, mem);
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(*n, 4096u);  // the send buffer's room, as send() takes
    auto info = d.core.stream_info(d.conn);
    EXPECT_EQ(info->by_reference, 4096u);
    EXPECT_EQ(info->copied_in, 0u);
    EXPECT_EQ(info->written, 4096u);
    const wire::SeqNumber base = d.dut_nxt;
    auto o = d.out();
    ASSERT_FALSE(o.empty());
    // No ACK: the RTO resends the first segment, read again from the memory.
    mem[5] = ~mem[5];
    d.advance(seconds(1));
    auto again = d.out();
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].tcp().seq, base);
    ASSERT_GT(again[0].payload.size(), 5u);
    EXPECT_EQ(again[0].payload[5], mem[5]);
    EXPECT_NE(again[0].payload[5], o[0].payload[5]);
    // ACKed as it leaves: every segment carries the memory's bytes at its offset (the first
    // one as the retransmission has it).
    o[0] = again[0];
    for (int round = 0; round < 20 && d.core.stream_info(d.conn)->acked < 4096; ++round) {
        for (auto& f : o) {
            const std::uint32_t off = f.tcp().seq - base;
            ASSERT_LE(off + f.payload.size(), 4096u);
            EXPECT_TRUE(std::equal(f.payload.begin(), f.payload.end(), mem.begin() + off));
            if (off + f.payload.size() > static_cast<std::uint32_t>(d.dut_nxt - base))
                d.dut_nxt = base + static_cast<std::uint32_t>(off + f.payload.size());
        }
        d.seg(tf::kAck);
        o = d.out();
    }
    info = d.core.stream_info(d.conn);
    EXPECT_EQ(info->acked, 4096u);
    EXPECT_EQ(info->by_reference, 0u);
    EXPECT_EQ(info->copied_in, 0u);
    EXPECT_GE(info->copied_to_frames, 4096u);  // into the frames only
}

// The peer closes first while bytes held by reference are unacknowledged: kDisconnected
// makes the handle stale, so the core copies them then; the caller's memory may change.
TEST(Stream, SendRefBytesAreCopiedWhenTheHandleGoesStale) {
    Dut d(immediate_acks());
    stream_up(d);
    std::vector<std::byte> mem = bytes("by reference");
    ASSERT_EQ(d.core.send_ref(d.now, d.conn, mem).value_or(0), mem.size());
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    d.seg(tf::kAck | tf::kFin);  // acknowledges nothing of ours
    EXPECT_EQ(d.evs().at(0).type, EventType::kDisconnected);
    EXPECT_EQ(d.core.send_ref(d.now, d.conn, mem).error(), ApiError::kStaleHandle);
    std::fill(mem.begin(), mem.end(), std::byte{0});
    (void)d.out();
    // Retransmitted after the RTO: the bytes as they were sent.
    d.advance(seconds(1));
    o = d.out();
    ASSERT_FALSE(o.empty());
    EXPECT_EQ(o[0].tcp().seq, d.dut_nxt);
    EXPECT_EQ(text(o[0].payload), "by reference");
}

TEST(Stream, SendRefMisuseIsAnError) {
    const std::vector<std::byte> one(1, std::byte{1});
    Dut d(immediate_acks());
    EXPECT_EQ(d.core.send_ref(d.now, ConnHandle{}, one).error(), ApiError::kInvalidHandle);
    d.to_mpareq_sent(d.connect_params());
    EXPECT_EQ(d.core.send_ref(d.now, d.conn, one).error(), ApiError::kWrongState);
    Dut s(immediate_acks());
    stream_up(s);
    EXPECT_EQ(s.core.send_ref(s.now, s.conn, std::span<const std::byte>{}).value_or(1), 0u);
    ASSERT_TRUE(s.core.disconnect(s.now, s.conn, DisconnectMode::kGraceful).has_value());
    EXPECT_EQ(s.core.send_ref(s.now, s.conn, one).error(), ApiError::kWrongState);
}

// A StreamSink that takes what it is offered, and may call back into the core from inside
// on_in_order or ack_now, which its contract forbids.
struct CallingSink : StreamSink {
    Core* core = nullptr;
    bool call_in_order = false;
    bool call_in_ack_now = false;
    std::string taken;
    std::size_t on_in_order(ConnHandle conn, std::span<const std::byte> b) override {
        if (call_in_order) (void)core->stream_info(conn);
        taken += text(b);
        return b.size();
    }
    bool ack_now(ConnHandle conn) override {
        if (call_in_ack_now) (void)core->flush(Instant{}, conn);
        return false;
    }
};

TEST(StreamSinkContract, ASinkThatKeepsOutOfTheCoreTakesTheBytesAndCommandsGoOn) {
    Dut d(immediate_acks());
    stream_up(d);
    CallingSink sink;
    sink.core = &d.core;
    ASSERT_TRUE(d.core.set_stream_sink(d.conn, &sink));
    d.seg(tf::kAck | tf::kPsh, bytes("hello"));
    EXPECT_EQ(sink.taken, "hello");
    // The sink has returned: commands are taken again.
    EXPECT_EQ(send_text(d, "back"), 4u);
    EXPECT_EQ(d.core.stream_info(d.conn)->readable, 0u);
}

TEST(StreamSinkContractDeathTest, ASinkCallingIntoTheCoreIsCaughtAtTheCommand) {
    Dut d(immediate_acks());
    stream_up(d);
    CallingSink sink;
    sink.core = &d.core;
    sink.call_in_order = true;
    ASSERT_TRUE(d.core.set_stream_sink(d.conn, &sink));
    EXPECT_DEATH(d.seg(tf::kAck | tf::kPsh, bytes("hello")), "a StreamSink called into the core");
}

TEST(StreamSinkContractDeathTest, ASinkCallingIntoTheCoreFromAckNowIsCaught) {
    Dut d(immediate_acks());
    stream_up(d);
    CallingSink sink;
    sink.core = &d.core;
    ASSERT_TRUE(d.core.set_stream_sink(d.conn, &sink));
    d.seg(tf::kAck | tf::kPsh, bytes("abc"));
    ASSERT_EQ(sink.taken, "abc");
    // Without a sink the next bytes are buffered, for consume() to read.
    ASSERT_TRUE(d.core.set_stream_sink(d.conn, nullptr));
    d.seg(tf::kAck | tf::kPsh, bytes("def"));
    ASSERT_EQ(d.core.stream_info(d.conn)->readable, 3u);
    ASSERT_TRUE(d.core.set_stream_sink(d.conn, &sink));
    sink.call_in_ack_now = true;
    // consume() asks the sink's ack_now, inside which the sink calls flush().
    EXPECT_DEATH((void)d.core.consume(d.now, d.conn, 3), "a StreamSink called into the core");
}

}  // namespace
}  // namespace iwcm::test
