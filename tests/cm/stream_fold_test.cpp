// An idle byte stream after a kStream hand-off folds (CoreConfig::stream_fold_after,
// cm::NodeStream::fold) and is made again by what needs it live: on the wire nothing shows
// but the frames the stream would have sent anyway. (That a folded tcp::Stream behaves as
// the stream it was: tests/tcp/stream_fold_test.cpp.)
#include <algorithm>
#include <string>
#include <vector>

#include "cm/dut.hpp"
#include "cm/stream_helpers.hpp"

namespace iwcm::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// What stream_info tells, as one comparable value.
struct Info {
    std::size_t send_space, queued, readable;
    std::uint32_t snd_una, snd_nxt, rcv_nxt, snd_wnd, rcv_wnd, cwnd, ssthresh;
    Duration srtt, rto;
    std::uint64_t retransmitted, written, acked;
    friend bool operator==(const Info&, const Info&) = default;
};

Info info_of(const Dut& d) {
    const auto i = d.core.stream_info(d.conn);
    EXPECT_TRUE(i.has_value());
    if (!i) return {};
    return {i->send_space,
            i->queued,
            i->readable,
            i->snd_una,
            i->snd_nxt,
            i->rcv_nxt,
            i->snd_wnd,
            i->rcv_wnd,
            i->cwnd,
            i->ssthresh,
            i->srtt,
            i->rto,
            i->retransmitted_segments,
            i->written,
            i->acked};
}

// Sends "abc" and has the peer acknowledge it after 30 ms: the stream has an RTT sample
// to carry across the fold.
void exchange(Dut& d) {
    ASSERT_EQ(d.core.send(d.now, d.conn, bytes("abc")).value_or(0), 3u);
    expect_sent(d, {stream_seg(d, tf::kAck | tf::kPsh, d.dut_nxt, bytes("abc"))});
    d.advance(milliseconds(30));
    d.dut_nxt += 3;
    d.seg(tf::kAck);
    expect_nothing_sent(d);
}

// Advances to the stream timer's expiry, which folds the idle stream.
void fold(Dut& d) {
    const auto due = d.core.next_deadline();
    ASSERT_TRUE(due.has_value());
    const std::uint64_t folds = d.core.stats().streams_folded;
    d.advance(*due - d.now);
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.stats().streams_folded, folds + 1);
}

TEST(StreamFold, AnIdleStreamFoldsAtTheDelayAndKeepsWhatItTells) {
    Dut d(immediate_acks());
    stream_up(d);
    // Idle from the hand-off, and no timer armed before: the fold is due
    // stream_fold_after later (the wheel may wake the core before it: nothing happens then).
    const Instant fold_at = d.now + d.core.config().stream_fold_after;
    while (d.core.stats().streams_folded == 0) {
        const auto due = d.core.next_deadline();
        ASSERT_TRUE(due.has_value());
        EXPECT_LE(*due, fold_at + milliseconds(1));
        d.advance(*due - d.now);
        expect_nothing_sent(d);
    }
    EXPECT_GE(d.now, fold_at);
    EXPECT_EQ(d.core.stats().streams_folded, 1u);
    // After an exchange, it folds again, and keeps what stream_info tells: the RTT
    // estimate among it.
    exchange(d);
    EXPECT_EQ(d.core.stats().streams_unfolded, 1u);
    const Info before = info_of(d);
    EXPECT_GT(before.srtt, Duration::zero());
    fold(d);
    // Folded: no deadline, nothing to read, and stream_info tells what it told.
    EXPECT_FALSE(d.core.next_deadline().has_value());
    EXPECT_EQ(d.core.peek(d.conn)->size(), 0u);
    EXPECT_EQ(info_of(d), before);
    EXPECT_EQ(d.core.stats().streams_unfolded, 1u);
}

TEST(StreamFold, ThePeersBytesMakeItAgainAndAreAcknowledgedAsBefore) {
    Dut d(immediate_acks());
    stream_up(d);
    exchange(d);
    const std::uint16_t window = stream_window(d);
    fold(d);
    d.seg(tf::kAck | tf::kPsh, bytes("hello"));
    EXPECT_EQ(d.core.stats().streams_unfolded, 1u);
    // The ACK acknowledges the five bytes with the window the stream offered, less them.
    expect_sent(d, {d.sent_frame(tf::kAck, d.dut_nxt, d.peer_nxt).with_window(stream_window(d))});
    EXPECT_LE(stream_window(d), window);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kReadable);
    EXPECT_EQ(text(*d.core.peek(d.conn)), "hello");
}

TEST(StreamFold, ASendMakesItAgainWithTheMeasuredRto) {
    Dut d(immediate_acks());
    stream_up(d);
    exchange(d);
    const Duration rto = info_of(d).rto;
    fold(d);
    ASSERT_EQ(d.core.send(d.now, d.conn, bytes("xyz")).value_or(0), 3u);
    EXPECT_EQ(d.core.stats().streams_unfolded, 1u);
    const Frame xyz = stream_seg(d, tf::kAck | tf::kPsh, d.dut_nxt, bytes("xyz"));
    expect_sent(d, {xyz});
    // Unanswered, the bytes go again after the RTO the 30 ms sample gave, not the
    // initial 1 s: the estimate crossed the fold.
    EXPECT_LT(rto, seconds(1));
    d.advance(rto - milliseconds(1));
    expect_nothing_sent(d);
    d.advance(milliseconds(2));
    expect_sent(d, {xyz});
}

TEST(StreamFold, AGracefulCloseSendsTheFinWhereTheStreamStands) {
    Dut d(immediate_acks());
    stream_up(d);
    exchange(d);
    fold(d);
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
    expect_sent(d, {stream_seg(d, tf::kFin | tf::kAck, d.dut_nxt)});
    EXPECT_EQ(*d.core.state(d.conn), CmState::kFinWait1);
}

TEST(StreamFold, AnAbortResetsAtTheStreamsSequenceAndWindow) {
    Dut d(immediate_acks());
    stream_up(d);
    exchange(d);
    const std::uint16_t window = stream_window(d);
    fold(d);
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kAbortive).has_value());
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt).with_window(window)});
    // A reset drops the stream without making it again.
    EXPECT_EQ(d.core.stats().streams_unfolded, 0u);
}

TEST(StreamFold, KeepaliveProbesLeaveFromAFoldedStream) {
    Dut d(immediate_acks());
    HandoffParams hp;
    StreamConfig sc = d.core.config().stream;
    sc.keepalive = true;
    sc.keepalive_idle = seconds(10);
    sc.keepalive_interval = seconds(1);
    hp.stream = sc;
    stream_up(d, hp);
    const Instant idle_at = d.now;
    fold(d);
    // The folded stream's one deadline is keepalive's, 10 s from the hand-off (the wheel
    // may wake the core before it: nothing happens then).
    const Instant probe_at = idle_at + seconds(10);
    while (d.now < probe_at) {
        const auto due = d.core.next_deadline();
        ASSERT_TRUE(due.has_value());
        d.advance(*due - d.now);
        if (d.now < probe_at) expect_nothing_sent(d);
    }
    EXPECT_LT(d.now, probe_at + milliseconds(2));
    // RFC 9293 3.8.4: <SEQ=SND.NXT-1><ACK=RCV.NXT>, no data.
    expect_sent(d, {stream_seg(d, tf::kAck, d.dut_nxt + 0xFFFFFFFFu)});
    EXPECT_EQ(d.core.stats().streams_unfolded, 1u);
    // The peer answers: idle again, the stream folds again at its next expiry.
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    fold(d);
}

TEST(StreamFold, UnreadBytesOrAWaitingEventKeepItLive) {
    Dut d(immediate_acks());
    stream_up(d);
    d.seg(tf::kAck | tf::kPsh, bytes("unread"));
    expect_sent(d, {stream_seg(d, tf::kAck, d.dut_nxt)});
    d.advance(seconds(5));
    EXPECT_EQ(d.core.stats().streams_folded, 0u);
    // The kReadable polled and the bytes read: idle, and it folds.
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    std::array<std::byte, 16> buf{};
    ASSERT_EQ(d.core.recv(d.now, d.conn, buf).value_or(0), 6u);
    fold(d);
}

TEST(StreamFold, NeverWithTheDelayAtItsMaximum) {
    CoreConfig c = immediate_acks();
    c.stream_fold_after = Duration::max();
    Dut d(c);
    stream_up(d);
    exchange(d);
    d.advance(seconds(3600));
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.stats().streams_folded, 0u);
    EXPECT_FALSE(d.core.next_deadline().has_value());
}

}  // namespace
}  // namespace iwcm::test
