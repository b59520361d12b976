// Unit tests of tcp::Stream, one suite per behaviour. Read src/tcp/stream.hpp
// first. Segments are compared whole (seq, ack, flags, window, payload); time
// is virtual and handed in.
#include "tcp/stream.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <ostream>
#include <type_traits>
#include <vector>

namespace iwcm::tcp {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using wire::SeqNumber;
namespace f = wire::tcp_flags;
using Verdict = Arrival::Verdict;

constexpr std::uint32_t kIss = 1000;   // our snd_una at hand-off
constexpr std::uint32_t kIrs = 50000;  // the peer's rcv_nxt at hand-off
constexpr std::uint16_t kMss = 1000;

std::vector<std::byte> pattern(std::size_t n, std::uint32_t from = 0) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((from + i) * 7 % 251);
    return v;
}

// A segment as a value, for whole-segment comparisons.
struct Seg {
    std::uint32_t seq = 0;
    std::uint32_t ack = 0;
    std::uint8_t flags = 0;
    std::uint16_t window = 0;
    std::vector<std::byte> payload;
    friend bool operator==(const Seg&, const Seg&) = default;
};

std::ostream& operator<<(std::ostream& os, const Seg& s) {
    return os << "{seq " << s.seq << " ack " << s.ack << " flags 0x" << std::hex << int{s.flags}
              << std::dec << " win " << s.window << " len " << s.payload.size() << "}";
}

Seg seg_of(const SegmentOut& out) {
    return {out.seq.value(), out.ack.value(), out.flags, out.window,
            std::vector<std::byte>(out.payload.begin(), out.payload.end())};
}

// Our data segment carrying bytes [off, off + n) of pattern() from kIss.
Seg data_seg(std::uint32_t off, std::uint32_t n, std::uint32_t ack, std::uint16_t window) {
    return {kIss + off, ack, f::kAck | f::kPsh, window, pattern(n, off)};
}

Seg ack_seg(std::uint32_t seq, std::uint32_t ack, std::uint16_t window) {
    return {seq, ack, f::kAck, window, {}};
}

std::vector<Seg> drain(Stream& s, Instant now) {
    std::vector<Seg> out;
    for (int i = 0; i < 1000; ++i) {
        auto seg = s.poll_segment(now);
        s.check_invariants();  // release builds leave the stream's own checks out
        if (!seg) return out;
        out.push_back(seg_of(*seg));
    }
    ADD_FAILURE() << "poll_segment never ran dry";
    return out;
}

void expect_sent(Stream& s, Instant now, const std::vector<Seg>& want) {
    EXPECT_EQ(drain(s, now), want);
}

void expect_nothing_sent(Stream& s, Instant now) {
    EXPECT_EQ(drain(s, now), std::vector<Seg>{});
}

// The stream's next deadline, which the test expects to exist.
Instant deadline(const Stream& s) {
    const auto d = s.next_deadline();
    EXPECT_TRUE(d.has_value());
    return d.value_or(kInstantNever);
}

// A segment from the peer (its payload must outlive the call).
SegmentIn from_peer(std::uint32_t seq, std::uint32_t ack, std::uint16_t window,
                    std::span<const std::byte> payload = {}, std::uint8_t flags = f::kAck) {
    return {SeqNumber(seq), SeqNumber(ack), flags, window, payload};
}

// The settings most tests use; a stream keeps them by reference, so they live for good.
const StreamConfig& config() {
    static const StreamConfig c = [] {
        StreamConfig d;
        d.send_buffer = 64 * 1024;
        d.recv_buffer = 16 * 1024;
        return d;
    }();
    return c;
}

StreamInit init(std::uint32_t snd_wnd = 60000) {
    StreamInit i;
    i.tcb.snd_una = i.tcb.snd_max = SeqNumber(kIss);
    i.tcb.rcv_nxt = SeqNumber(kIrs);
    i.tcb.snd_wnd = snd_wnd;
    i.tcb.mss = kMss;
    return i;
}

constexpr std::uint16_t kWin16k = 16 * 1024;  // our full window with config()

// ---------------------------------------------------------------- sending

TEST(StreamSend, SegmentsAtMssWithPshAndOurWindow) {
    Stream s(config(), init(), at_ms(0));
    const auto data = pattern(2500);
    EXPECT_EQ(s.write(data), 2500U);
    expect_sent(s, at_ms(0),
                {data_seg(0, 1000, kIrs, kWin16k), data_seg(1000, 1000, kIrs, kWin16k),
                 data_seg(2000, 500, kIrs, kWin16k)});
    EXPECT_EQ(s.snd_nxt(), SeqNumber(kIss + 2500));
    EXPECT_EQ(s.bytes_in_flight(), 2500U);
    EXPECT_EQ(s.next_deadline(), at_ms(1000));  // RFC 6298 2.1: RTO 1 s
}

// The send buffer, released when empty, takes a page for fewer bytes than a segment (a
// request, an answer) and its whole size in one step once more come, or at once for a full
// segment; the bytes written before the growth go out unchanged.
TEST(StreamSend, AFewBytesTakeAPageAndMoreTheWholeBuffer) {
    Stream s(config(), init(), at_ms(0));
    const auto all = pattern(4100);
    EXPECT_EQ(s.write(std::span<const std::byte>(all).first(100)), 100U);
    EXPECT_FALSE(s.write_moves_bytes(4096 - 100));  // the page holds them
    EXPECT_TRUE(s.write_moves_bytes(4096 - 100 + 1));
    EXPECT_EQ(s.write(std::span<const std::byte>(all).subspan(100)), 4000U);
    // Grown to the whole 64 KiB at once.
    EXPECT_FALSE(s.write_moves_bytes(64 * 1024 - 4100));
    expect_sent(s, at_ms(0),
                {data_seg(0, 1000, kIrs, kWin16k), data_seg(1000, 1000, kIrs, kWin16k),
                 data_seg(2000, 1000, kIrs, kWin16k), data_seg(3000, 1000, kIrs, kWin16k),
                 data_seg(4000, 100, kIrs, kWin16k)});
    // Everything acknowledged: released. A full segment now takes the whole buffer.
    s.on_segment(at_ms(1), from_peer(kIrs, kIss + 4100, 60000));
    EXPECT_EQ(s.bytes_queued(), 0U);
    EXPECT_EQ(s.write(pattern(1000, 4100)), 1000U);
    EXPECT_FALSE(s.write_moves_bytes(64 * 1024 - 1000));
}

TEST(StreamSend, WriteIsBoundedBySendBuffer) {
    StreamConfig c = config();
    c.send_buffer = 3000;
    Stream s(c, init(), at_ms(0));
    const auto data = pattern(5000);
    EXPECT_EQ(s.write(data), 3000U);
    EXPECT_EQ(s.send_space(), 0U);
    EXPECT_EQ(s.write(data), 0U);
    drain(s, at_ms(0));
    EXPECT_EQ(s.on_segment(at_ms(10), from_peer(kIrs, kIss + 1000, 60000)).acked, true);
    EXPECT_EQ(s.send_space(), 1000U);
    EXPECT_EQ(s.bytes_queued(), 2000U);
    s.close();
    EXPECT_EQ(s.write(data), 0U);  // nothing after close()
}

TEST(StreamSend, PeerWindowLimitsSendAndAWindowUpdateResumes) {
    Stream s(config(), init(1500), at_ms(0));
    const auto data = pattern(4000);
    s.write(data);
    // The 500 bytes left in the window wait while data is in flight (RFC
    // 9293 3.8.6.2.1, less than half the largest window).
    expect_sent(s, at_ms(0), {data_seg(0, 1000, kIrs, kWin16k)});
    // The peer takes the first 1000 and keeps the same right edge: with
    // nothing in flight no ACK would come, so the short segment goes.
    s.on_segment(at_ms(10), from_peer(kIrs, kIss + 1000, 500));
    expect_sent(s, at_ms(10), {data_seg(1000, 500, kIrs, kWin16k)});
    // A window update (same ACK, larger window) lets the rest go.
    s.on_segment(at_ms(11), from_peer(kIrs, kIss + 1000, 5000));
    expect_sent(s, at_ms(11),
                {data_seg(1500, 1000, kIrs, kWin16k), data_seg(2500, 1000, kIrs, kWin16k),
                 data_seg(3500, 500, kIrs, kWin16k)});
}

TEST(StreamSend, WindowUpdateRuleIgnoresOlderSegments) {
    Stream s(config(), init(1000), at_ms(0));
    const auto in = pattern(150);
    s.on_segment(at_ms(1), from_peer(kIrs, kIss, 3000, std::span(in).first(100)));
    EXPECT_EQ(s.snd_wnd(), 3000U);
    s.on_segment(at_ms(2), from_peer(kIrs + 100, kIss, 5000));
    EXPECT_EQ(s.snd_wnd(), 5000U);
    // RFC 9293: a reordered older segment (SEG.SEQ < SND.WL1) is taken but
    // does not update the window.
    const auto a =
        s.on_segment(at_ms(3), from_peer(kIrs + 50, kIss, 100, std::span(in).subspan(50)));
    EXPECT_EQ(a.verdict, Verdict::kAccepted);
    EXPECT_EQ(s.readable_bytes(), 150U);
    EXPECT_EQ(s.snd_wnd(), 5000U);
}

TEST(StreamSend, InitialWindowIsTenSegments) {
    Stream s(config(), init(), at_ms(0));
    EXPECT_EQ(s.cwnd(), 10U * kMss);  // RFC 6928
    const auto data = pattern(20000);
    s.write(data);
    EXPECT_EQ(drain(s, at_ms(0)).size(), 10U);
    EXPECT_EQ(s.bytes_in_flight(), 10000U);
}

TEST(StreamSend, UnackedBytesOfTheHandOffAreRetransmitted) {
    StreamInit i = init();
    const auto rtr = pattern(20);
    i.tcb.snd_max = SeqNumber(kIss + 20);
    i.unacked = rtr;
    const auto early = pattern(5, 99);
    i.received = early;
    Stream s(config(), i, at_ms(0));
    EXPECT_EQ(std::vector<std::byte>(s.readable().begin(), s.readable().end()), early);
    EXPECT_EQ(s.next_deadline(), at_ms(1000));
    EXPECT_EQ(s.on_timer(at_ms(1000)), Stream::Timeout::kNone);
    expect_sent(s, at_ms(1000), {data_seg(0, 20, kIrs, kWin16k - 5)});
    EXPECT_EQ(s.retransmitted_segments(), 1U);
}

// ---------------------------------------------------------------- RTO

TEST(StreamRto, BacksOffRetransmitsFirstSegmentAndGivesUp) {
    StreamConfig c = config();
    c.max_retransmits = 3;
    Stream s(c, init(), at_ms(0));
    const auto data = pattern(1500);
    s.write(data);
    drain(s, at_ms(0));
    std::int64_t t = 0;
    for (int i = 0; i < 3; ++i) {
        t += 1000 << i;  // 1 s, 2 s, 4 s
        ASSERT_EQ(s.next_deadline(), at_ms(t)) << "expiry " << i;
        EXPECT_EQ(s.on_timer(at_ms(t)), Stream::Timeout::kNone);
        EXPECT_EQ(s.cwnd(), kMss);  // the loss window
        // Go back to SND.UNA; cwnd lets one segment out.
        expect_sent(s, at_ms(t), {data_seg(0, 1000, kIrs, kWin16k)});
    }
    EXPECT_EQ(s.rto(), seconds(8));
    EXPECT_EQ(s.retransmitted_segments(), 3U);
    t += 8000;
    EXPECT_EQ(s.next_deadline(), at_ms(t));
    EXPECT_EQ(s.on_timer(at_ms(t)), Stream::Timeout::kGiveUp);
}

TEST(StreamRto, BackoffStopsAtRtoMax) {
    StreamConfig c = config();
    c.rto_max = seconds(3);
    Stream s(c, init(), at_ms(0));
    const auto data = pattern(10);
    s.write(data);
    drain(s, at_ms(0));
    s.on_timer(at_ms(1000));
    EXPECT_EQ(s.rto(), seconds(2));
    s.on_timer(at_ms(3000));
    EXPECT_EQ(s.rto(), seconds(3));
    EXPECT_EQ(s.next_deadline(), at_ms(6000));
}

TEST(StreamRto, KarnTakesNoSampleFromARetransmission) {
    Stream s(config(), init(), at_ms(0));
    const auto data = pattern(2000);
    s.write(std::span(data).first(1000));
    drain(s, at_ms(0));
    s.on_timer(at_ms(1000));
    drain(s, at_ms(1000));
    // The ACK may answer either transmission: no sample, the backoff stays.
    s.on_segment(at_ms(1100), from_peer(kIrs, kIss + 1000, 60000));
    EXPECT_EQ(s.srtt(), std::nullopt);
    EXPECT_EQ(s.rto(), seconds(2));
    // The next new segment is timed.
    s.write(std::span(data).subspan(1000));
    drain(s, at_ms(1200));
    s.on_segment(at_ms(1300), from_peer(kIrs, kIss + 2000, 60000));
    EXPECT_EQ(s.srtt(), milliseconds(100));
    EXPECT_EQ(s.rto(), milliseconds(300));
}

TEST(StreamRto, SrttRttvarAndRtoAfterKnownSamples) {
    Stream s(config(), init(), at_ms(0));
    const auto data = pattern(3000);
    s.write(std::span(data).first(1000));
    drain(s, at_ms(0));
    s.on_segment(at_ms(100), from_peer(kIrs, kIss + 1000, 60000));
    // RFC 6298 2.2: SRTT 100, RTTVAR 50, RTO = 100 + 4*50.
    EXPECT_EQ(s.srtt(), milliseconds(100));
    EXPECT_EQ(s.rto(), milliseconds(300));
    s.write(std::span(data).subspan(1000, 1000));
    drain(s, at_ms(100));
    s.on_segment(at_ms(300), from_peer(kIrs, kIss + 2000, 60000));
    // 2.3: RTTVAR = 3/4*50 + 1/4*|100-200| = 62.5; SRTT = 7/8*100 + 1/8*200 = 112.5.
    EXPECT_EQ(s.srtt(), std::chrono::microseconds(112500));
    EXPECT_EQ(s.rto(), std::chrono::microseconds(112500 + 250000));
}

TEST(StreamRto, ClampedToRtoMinAndRtoMax) {
    const auto data = pattern(10);
    Stream fast(config(), init(), at_ms(0));
    fast.write(data);
    drain(fast, at_ms(0));
    fast.on_segment(at_ms(1), from_peer(kIrs, kIss + 10, 60000));
    EXPECT_EQ(fast.srtt(), milliseconds(1));
    EXPECT_EQ(fast.rto(), milliseconds(200));  // 1 + max(G, 4*0.5) = 3 ms, floored
    Stream slow(config(), init(), at_ms(0));
    slow.write(data);
    drain(slow, at_ms(0));
    slow.on_segment(at_ms(30000), from_peer(kIrs, kIss + 10, 60000));
    EXPECT_EQ(slow.rto(), seconds(60));  // 30 + 4*15 = 90 s, capped
}

TEST(StreamRto, TimerRestartsOnNewAckAndStopsWhenAllAcked) {
    Stream s(config(), init(), at_ms(0));
    const auto data = pattern(2000);
    s.write(data);
    drain(s, at_ms(0));
    EXPECT_EQ(s.next_deadline(), at_ms(1000));
    s.on_segment(at_ms(500), from_peer(kIrs, kIss + 1000, 60000));
    EXPECT_EQ(s.rto(), milliseconds(1500));  // RFC 6298 2.2: 500 + 4 * 250
    // RFC 6298 5.3 restarts the RTO, but the loss probe comes first (RFC
    // 8985 7.2: 2 * SRTT, plus 200 ms for a lone segment in flight).
    EXPECT_EQ(s.next_deadline(), at_ms(500) + milliseconds(1200));
    s.on_segment(at_ms(600), from_peer(kIrs, kIss + 2000, 60000));
    EXPECT_EQ(s.next_deadline(), std::nullopt);  // 5.2
    EXPECT_TRUE(s.idle());
}

// ---------------------------------------------------------------- congestion

TEST(StreamCongestion, SlowStartGrowsByOneMssPerAck) {
    Stream s(config(), init(), at_ms(0));
    const auto data = pattern(40000);
    s.write(data);
    drain(s, at_ms(0));
    s.on_segment(at_ms(10), from_peer(kIrs, kIss + 1000, 60000));
    EXPECT_EQ(s.cwnd(), 11000U);
    // An ACK of two segments grows cwnd by min(N, SMSS) only.
    s.on_segment(at_ms(11), from_peer(kIrs, kIss + 3000, 60000));
    EXPECT_EQ(s.cwnd(), 12000U);
    // The flight may now be 12 segments; 7 are out, so 5 more go.
    EXPECT_EQ(drain(s, at_ms(11)).size(), 5U);
}

// Puts `s` in fast recovery: 10 segments out, the first lost, 3 dup ACKs.
void enter_fast_recovery(Stream& s, const std::vector<std::byte>& data) {
    s.write(data);
    ASSERT_EQ(drain(s, at_ms(0)).size(), 10U);
    for (int i = 0; i < 2; ++i) {
        s.on_segment(at_ms(10 + i), from_peer(kIrs, kIss, 60000));
        expect_nothing_sent(s, at_ms(10 + i));
    }
    s.on_segment(at_ms(12), from_peer(kIrs, kIss, 60000));
}

TEST(StreamCongestion, FastRetransmitOnTheThirdDupAck) {
    Stream s(config(), init(), at_ms(0));
    const auto data = pattern(10000);
    enter_fast_recovery(s, data);
    expect_sent(s, at_ms(12), {data_seg(0, 1000, kIrs, kWin16k)});
    EXPECT_EQ(s.ssthresh(), 5000U);  // FlightSize / 2
    EXPECT_EQ(s.cwnd(), 8000U);      // ssthresh + 3*SMSS
    EXPECT_EQ(s.retransmitted_segments(), 1U);
    // A fourth dup ACK inflates cwnd by one MSS.
    s.on_segment(at_ms(13), from_peer(kIrs, kIss, 60000));
    EXPECT_EQ(s.cwnd(), 9000U);
}

TEST(StreamCongestion, NewRenoPartialAckRetransmitsTheNextHole) {
    Stream s(config(), init(), at_ms(0));
    const auto data = pattern(10000);
    enter_fast_recovery(s, data);
    drain(s, at_ms(12));
    // Partial ACK: segments 0 and 1 arrive, 2 was lost too.
    auto a = s.on_segment(at_ms(20), from_peer(kIrs, kIss + 2000, 60000));
    EXPECT_TRUE(a.acked);
    expect_sent(s, at_ms(20), {data_seg(2000, 1000, kIrs, kWin16k)});
    EXPECT_EQ(s.cwnd(), 8000U - 2000U + 1000U);  // deflate by 2000, add one MSS
    // The full ACK ends recovery: cwnd = min(ssthresh, max(FlightSize, SMSS) + SMSS).
    s.on_segment(at_ms(30), from_peer(kIrs, kIss + 10000, 60000));
    EXPECT_EQ(s.cwnd(), 2000U);
    EXPECT_EQ(s.ssthresh(), 5000U);
    EXPECT_EQ(s.retransmitted_segments(), 2U);
}

// Sends a duplicate ACK of the first byte (window unchanged) at `ms`.
void dup_ack(Stream& s, std::int64_t ms) {
    s.on_segment(at_ms(ms), from_peer(kIrs, kIss, 60000));
}

// Writes `data` at time 0 and expects it to go out in `segments` segments.
void write_and_send(Stream& s, std::span<const std::byte> data, std::size_t segments) {
    s.write(data);
    EXPECT_EQ(drain(s, at_ms(0)).size(), segments);
}

TEST(StreamLimitedTransmit, OneNewSegmentOnEachOfTheFirstTwoDupAcks) {
    Stream s(config(), init(), at_ms(0));
    const auto data = pattern(20000);
    write_and_send(s, data, 10);
    // RFC 3042: cwnd stays, one new full segment per duplicate ACK.
    dup_ack(s, 10);
    expect_sent(s, at_ms(10), {data_seg(10000, 1000, kIrs, kWin16k)});
    dup_ack(s, 11);
    expect_sent(s, at_ms(11), {data_seg(11000, 1000, kIrs, kWin16k)});
    EXPECT_EQ(s.cwnd(), 10000U);
    dup_ack(s, 12);
    expect_sent(s, at_ms(12), {data_seg(0, 1000, kIrs, kWin16k)});
    // RFC 5681 3.2: the limited-transmit bytes are not in FlightSize.
    EXPECT_EQ(s.ssthresh(), 5000U);
    EXPECT_EQ(s.cwnd(), 8000U);
}

TEST(StreamLimitedTransmit, OnlyWhereThePeersWindowAllows) {
    Stream s(config(), init(10500), at_ms(0));
    const auto data = pattern(20000);
    write_and_send(s, data, 10);
    s.on_segment(at_ms(10), from_peer(kIrs, kIss, 10500));
    expect_nothing_sent(s, at_ms(10));
}

TEST(StreamSillyWindow, ShortSegmentWaitsWhileDataIsInFlight) {
    Stream s(config(), init(2500), at_ms(0));
    const auto data = pattern(10000);
    s.write(data);
    // RFC 9293 3.8.6.2.1: 500 of 2500 is neither an MSS nor half the window.
    expect_sent(s, at_ms(0),
                {data_seg(0, 1000, kIrs, kWin16k), data_seg(1000, 1000, kIrs, kWin16k)});
    s.on_segment(at_ms(10), from_peer(kIrs, kIss + 1000, 2500));
    expect_sent(s, at_ms(10), {data_seg(2000, 1000, kIrs, kWin16k)});
    s.on_segment(at_ms(20), from_peer(kIrs, kIss + 3000, 2500));
    expect_sent(s, at_ms(20),
                {data_seg(3000, 1000, kIrs, kWin16k), data_seg(4000, 1000, kIrs, kWin16k)});
}

// A full send buffer's short tail is no push: the writer had more than fitted, and the ACK
// that frees room brings it. With nothing more written, the tail goes on that ACK.
TEST(StreamSillyWindow, FullSendBuffersTailWaitsForTheAckThatFreesRoom) {
    StreamConfig c = config();
    c.send_buffer = 3500;
    Stream s(c, init(), at_ms(0));
    const auto data = pattern(6000);
    EXPECT_EQ(s.write(data), 3500U);
    expect_sent(s, at_ms(0),
                {data_seg(0, 1000, kIrs, kWin16k), data_seg(1000, 1000, kIrs, kWin16k),
                 data_seg(2000, 1000, kIrs, kWin16k)});
    s.on_segment(at_ms(10), from_peer(kIrs, kIss + 1000, 60000));
    EXPECT_EQ(s.write(std::span(data).subspan(3500)), 1000U);
    expect_sent(s, at_ms(10), {data_seg(3000, 1000, kIrs, kWin16k)});
    s.on_segment(at_ms(20), from_peer(kIrs, kIss + 2000, 60000));
    expect_sent(s, at_ms(20), {data_seg(4000, 500, kIrs, kWin16k)});
}

TEST(StreamSillyWindow, NoFractionOfAnMssAfterRecovery) {
    // After fast recovery cwnd = min(ssthresh, FlightSize + SMSS) is 4.5
    // segments here: the half segment is never sent on its own.
    Stream s(config(), init(), at_ms(0));
    const auto data = pattern(30000);
    write_and_send(s, std::span(data).first(9000), 9);
    for (int ms = 10; ms < 13; ++ms) dup_ack(s, ms);
    expect_sent(s, at_ms(12), {data_seg(0, 1000, kIrs, kWin16k)});
    EXPECT_EQ(s.ssthresh(), 4500U);
    s.write(std::span(data).subspan(9000));
    std::vector<Seg> sent;
    for (int ms = 13; ms < 19; ++ms) {
        dup_ack(s, ms);
        for (Seg& g : drain(s, at_ms(ms))) sent.push_back(std::move(g));
    }
    EXPECT_EQ(s.cwnd(), 13500U);
    EXPECT_EQ(sent,
              (std::vector<Seg>{
                  data_seg(9000, 1000, kIrs, kWin16k), data_seg(10000, 1000, kIrs, kWin16k),
                  data_seg(11000, 1000, kIrs, kWin16k), data_seg(12000, 1000, kIrs, kWin16k)}));
    s.on_segment(at_ms(20), from_peer(kIrs, kIss + 9000, 60000));
    EXPECT_EQ(s.cwnd(), 4500U);
    expect_nothing_sent(s, at_ms(20));  // 500 bytes of room, 4000 in flight
    s.on_segment(at_ms(21), from_peer(kIrs, kIss + 10000, 60000));
    expect_sent(s, at_ms(21), {data_seg(13000, 1000, kIrs, kWin16k)});
}

TEST(StreamEarlyRetransmit, FewSegmentsOutNeedFewerDupAcks) {
    // RFC 5827: fewer than four segments out and nothing new to send: the
    // threshold is one less than the segments out.
    Stream s(config(), init(), at_ms(0));
    const auto data = pattern(3000);
    write_and_send(s, data, 3);
    dup_ack(s, 10);
    expect_nothing_sent(s, at_ms(10));
    dup_ack(s, 11);
    expect_sent(s, at_ms(11), {data_seg(0, 1000, kIrs, kWin16k)});
    EXPECT_EQ(s.ssthresh(), 2000U);
    EXPECT_EQ(s.cwnd(), 4000U);  // ssthresh + the two segments that left
    // Two segments out: the first duplicate ACK is enough.
    Stream two(config(), init(), at_ms(0));
    write_and_send(two, std::span(data).first(2000), 2);
    dup_ack(two, 10);
    expect_sent(two, at_ms(10), {data_seg(0, 1000, kIrs, kWin16k)});
}

TEST(StreamTailLossProbe, RetransmitsTheLastSegmentAfterTwoSrtt) {
    Stream s(config(), init(), at_ms(0));
    const auto data = pattern(3000);
    s.write(data);
    drain(s, at_ms(0));
    s.on_segment(at_ms(10), from_peer(kIrs, kIss + 1000, 60000));  // SRTT 10 ms
    EXPECT_EQ(s.rto(), milliseconds(200));
    // RFC 8985 7.2: PTO = 2 * SRTT; then 7.3: nothing new, so the last segment.
    EXPECT_EQ(s.next_deadline(), at_ms(30));
    EXPECT_EQ(s.on_timer(at_ms(30)), Stream::Timeout::kNone);
    expect_sent(s, at_ms(30), {data_seg(2000, 1000, kIrs, kWin16k)});
    EXPECT_EQ(s.next_deadline(), at_ms(230));  // the RTO, not another probe
    // The probe was acknowledged and no DSACK can say the original was not
    // lost (7.4): cwnd falls as in fast recovery.
    s.on_segment(at_ms(35), from_peer(kIrs, kIss + 3000, 60000));
    EXPECT_EQ(s.ssthresh(), 2000U);
    EXPECT_EQ(s.cwnd(), 2000U);
    EXPECT_EQ(s.next_deadline(), std::nullopt);
}

TEST(StreamTailLossProbe, SendsNewDataBeyondCwndWhenThePeerTakesIt) {
    StreamConfig c = config();
    c.initial_window_segments = 2;
    Stream s(c, init(), at_ms(0));
    const auto data = pattern(5000);
    write_and_send(s, data, 2);
    s.on_segment(at_ms(10), from_peer(kIrs, kIss + 1000, 60000));
    expect_sent(s, at_ms(10),
                {data_seg(2000, 1000, kIrs, kWin16k), data_seg(3000, 1000, kIrs, kWin16k)});
    EXPECT_EQ(s.cwnd(), 3000U);
    EXPECT_EQ(s.next_deadline(), at_ms(30));
    s.on_timer(at_ms(30));
    expect_sent(s, at_ms(30), {data_seg(4000, 1000, kIrs, kWin16k)});
    // New data repaired nothing: no reduction, slow start goes on.
    s.on_segment(at_ms(35), from_peer(kIrs, kIss + 5000, 60000));
    EXPECT_EQ(s.cwnd(), 4000U);
}

TEST(StreamCongestion, RtoSetsLossWindowAndHalvesFlight) {
    Stream s(config(), init(), at_ms(0));
    const auto data = pattern(8000);
    s.write(data);
    drain(s, at_ms(0));
    s.on_timer(at_ms(1000));
    EXPECT_EQ(s.cwnd(), 1000U);
    EXPECT_EQ(s.ssthresh(), 4000U);
    EXPECT_EQ(s.snd_nxt(), SeqNumber(kIss));
    EXPECT_EQ(s.snd_max(), SeqNumber(kIss + 8000));
    expect_sent(s, at_ms(1000), {data_seg(0, 1000, kIrs, kWin16k)});
    // Dup ACKs after an RTO do not start a fast retransmit (RFC 6582 "recover").
    for (int i = 0; i < 4; ++i) s.on_segment(at_ms(1001), from_peer(kIrs, kIss, 60000));
    EXPECT_EQ(s.cwnd(), 1000U);
    expect_nothing_sent(s, at_ms(1001));
}

// ---------------------------------------------------------------- zero window

TEST(StreamPersist, ZeroWindowProbesBackOffAndReopen) {
    Stream s(config(), init(2000), at_ms(0));
    const auto data = pattern(5000);
    s.write(data);
    drain(s, at_ms(0));
    // The peer takes both segments and closes its window.
    s.on_segment(at_ms(100), from_peer(kIrs, kIss + 2000, 0));
    expect_nothing_sent(s, at_ms(100));
    const Instant first = at_ms(100) + s.rto();
    ASSERT_EQ(s.next_deadline(), first);
    EXPECT_EQ(s.on_timer(first), Stream::Timeout::kNone);
    // RFC 9293 3.8.6.1: one octet of new data, SND.NXT unchanged.
    expect_sent(s, first, {data_seg(2000, 1, kIrs, kWin16k)});
    EXPECT_EQ(s.snd_nxt(), SeqNumber(kIss + 2000));
    EXPECT_EQ(s.snd_max(), SeqNumber(kIss + 2001));
    const Instant second = first + 2 * s.rto();
    EXPECT_EQ(s.next_deadline(), second);
    // The peer answers: still zero.
    s.on_segment(second - milliseconds(1), from_peer(kIrs, kIss + 2000, 0));
    s.on_timer(second);
    expect_sent(s, second, {data_seg(2000, 1, kIrs, kWin16k)});
    EXPECT_EQ(s.next_deadline(), second + 4 * s.rto());
    // The window opens: data resumes at SND.NXT.
    s.on_segment(second + milliseconds(1), from_peer(kIrs, kIss + 2000, 2000));
    expect_sent(s, second + milliseconds(1),
                {data_seg(2000, 1000, kIrs, kWin16k), data_seg(3000, 1000, kIrs, kWin16k)});
}

TEST(StreamPersist, UnansweredProbesGiveUpAnsweredOnesDoNot) {
    StreamConfig c = config();
    c.max_retransmits = 3;
    c.rto_max = seconds(4);
    Stream s(c, init(0), at_ms(0));
    const auto data = pattern(100);
    s.write(data);
    expect_nothing_sent(s, at_ms(0));
    // Answered probes: many more than max_retransmits, no give-up.
    for (int i = 0; i < 8; ++i) {
        const Instant t = deadline(s);
        ASSERT_EQ(s.on_timer(t), Stream::Timeout::kNone) << i;
        expect_sent(s, t, {data_seg(0, 1, kIrs, kWin16k)});
        s.on_segment(t + milliseconds(1), from_peer(kIrs, kIss, 0));
    }
    // Unanswered: three probes, then the fourth expiry gives up.
    for (int i = 0; i < 3; ++i) {
        const Instant t = deadline(s);
        ASSERT_EQ(s.on_timer(t), Stream::Timeout::kNone) << i;
        drain(s, t);
    }
    EXPECT_EQ(s.on_timer(deadline(s)), Stream::Timeout::kGiveUp);
}

// After our close a zero window answered for ever would hold the FIN back
// for ever: answered probes count then, and max_retransmits of them give up
// (the core resets the connection).
TEST(StreamPersist, AfterOurCloseAnsweredProbesGiveUpToo) {
    StreamConfig c = config();
    c.max_retransmits = 3;
    c.rto_max = seconds(4);
    Stream s(c, init(0), at_ms(0));
    const auto data = pattern(100);
    s.write(data);
    s.close();
    expect_nothing_sent(s, at_ms(0));
    for (int i = 0; i < 3; ++i) {
        const Instant t = deadline(s);
        ASSERT_EQ(s.on_timer(t), Stream::Timeout::kNone) << i;
        expect_sent(s, t, {data_seg(0, 1, kIrs, kWin16k)});
        s.on_segment(t + milliseconds(1), from_peer(kIrs, kIss, 0));  // still zero
    }
    EXPECT_EQ(s.on_timer(deadline(s)), Stream::Timeout::kGiveUp);
}

TEST(StreamPersist, ProbeAcceptedByThePeerAdvancesSndUna) {
    Stream s(config(), init(0), at_ms(0));
    const auto data = pattern(3000);
    s.write(data);
    // write() takes no time: the persist timer starts at the next poll.
    expect_nothing_sent(s, at_ms(0));
    ASSERT_EQ(s.next_deadline(), at_ms(1000));
    s.on_timer(at_ms(1000));
    expect_sent(s, at_ms(1000), {data_seg(0, 1, kIrs, kWin16k)});
    const auto a = s.on_segment(at_ms(1001), from_peer(kIrs, kIss + 1, 1500));
    EXPECT_TRUE(a.acked);
    // The 500 left in the window wait for the first segment's ACK (no silly window).
    expect_sent(s, at_ms(1001), {data_seg(1, 1000, kIrs, kWin16k)});
    s.on_segment(at_ms(1002), from_peer(kIrs, kIss + 1001, 1500));
    expect_sent(s, at_ms(1002), {data_seg(1001, 1000, kIrs, kWin16k)});
}

// ---------------------------------------------------------------- ACK validation

TEST(StreamAckCheck, AckOfUnsentDataIsDroppedWithAnAck) {
    Stream s(config(), init(), at_ms(0));
    const auto payload = pattern(100);
    const auto a = s.on_segment(at_ms(1), from_peer(kIrs, kIss + 1, 60000, payload));
    EXPECT_EQ(a.verdict, Verdict::kAckUnsent);
    EXPECT_EQ(s.readable_bytes(), 0U);  // the data goes with it
    expect_sent(s, at_ms(1), {ack_seg(kIss, kIrs, kWin16k)});
}

// RFC 5961 5.2's answer is a challenge ACK, which section 7 limits: the stream leaves it to
// its owner (the core sends it within the budget its RST and SYN answers share).
TEST(StreamAckCheck, AckTooOldIsDroppedAndLeftForTheOwnerToAnswer) {
    Stream s(config(), init(2000), at_ms(0));
    const auto data = pattern(8000);
    s.write(data);
    for (std::uint32_t acked = 2000; acked <= 8000; acked += 2000) {
        drain(s, at_ms(0));
        s.on_segment(at_ms(1), from_peer(kIrs, kIss + acked, 2000));
    }
    ASSERT_EQ(s.snd_una(), SeqNumber(kIss + 8000));
    const auto payload = pattern(100);
    // SND.UNA - MAX.SND.WND = kIss + 6000; one below is too old.
    auto a = s.on_segment(at_ms(2), from_peer(kIrs, kIss + 5999, 2000, payload));
    EXPECT_EQ(a.verdict, Verdict::kAckTooOld);
    EXPECT_EQ(s.readable_bytes(), 0U);
    expect_nothing_sent(s, at_ms(2));
    // At the bound it is an old duplicate: accepted, its data taken.
    a = s.on_segment(at_ms(3), from_peer(kIrs, kIss + 6000, 2000, payload));
    EXPECT_EQ(a.verdict, Verdict::kAccepted);
    EXPECT_EQ(s.readable_bytes(), 100U);
}

TEST(StreamAckCheck, OldDuplicateStillDeliversItsAck) {
    // A peer whose SND.NXT lags our RCV.NXT (it went back after an RTO, or we
    // took its probe octet and the ACK was lost) sends ACKs one octet old.
    Stream s(config(), init(), at_ms(0));
    const auto out = pattern(2000);
    s.write(out);
    drain(s, at_ms(0));
    const auto in = pattern(100);
    s.on_segment(at_ms(1), from_peer(kIrs, kIss, 60000, in));
    drain(s, at_ms(1));
    auto a = s.on_segment(at_ms(2), from_peer(kIrs + 99, kIss + 2000, 30000));
    EXPECT_EQ(a.verdict, Verdict::kOutOfWindow);
    EXPECT_TRUE(a.acked);
    EXPECT_EQ(s.snd_una(), SeqNumber(kIss + 2000));
    EXPECT_EQ(s.snd_wnd(), 30000U);
    expect_sent(s, at_ms(2), {ack_seg(kIss + 2000, kIrs + 100, kWin16k - 100)});
    // One older than a whole buffer is ignored, and so is an invalid ACK.
    s.write(out);
    drain(s, at_ms(3));
    a = s.on_segment(at_ms(4), from_peer(kIrs + 100 - kWin16k - 1, kIss + 3000, 30000));
    EXPECT_FALSE(a.acked);
    a = s.on_segment(at_ms(4), from_peer(kIrs + 50, kIss + 5000, 30000));
    EXPECT_FALSE(a.acked);
    EXPECT_EQ(s.snd_una(), SeqNumber(kIss + 2000));
}

TEST(StreamAckCheck, SegmentWithoutAckIsDropped) {
    Stream s(config(), init(), at_ms(0));
    const auto payload = pattern(100);
    const auto a = s.on_segment(at_ms(1), from_peer(kIrs, 0, 60000, payload, f::kPsh));
    EXPECT_EQ(a.verdict, Verdict::kNoAck);
    EXPECT_EQ(s.readable_bytes(), 0U);
    expect_nothing_sent(s, at_ms(1));
}

// ---------------------------------------------------------------- receiving

// The receive buffer, released when empty, takes a page for a few bytes and grows to its
// whole size when more come: the bytes already in it, readable and out of order, move with it.
TEST(StreamReceive, BytesInAPageBufferSurviveItsGrowth) {
    Stream s(config(), init(), at_ms(0));
    const auto all = pattern(4200);
    const auto piece = [&](std::size_t off, std::size_t n) {
        return std::span<const std::byte>(all).subspan(off, n);
    };
    s.on_segment(at_ms(1), from_peer(kIrs, kIss, 60000, piece(0, 100)));
    // Out of order, past the page: the buffer grows with 100 readable bytes in it.
    s.on_segment(at_ms(2), from_peer(kIrs + 3300, kIss, 60000, piece(3300, 900)));
    EXPECT_EQ(s.out_of_order_bytes(), 900U);
    for (std::uint32_t off = 100; off < 3300; off += 800)
        s.on_segment(at_ms(3), from_peer(kIrs + off, kIss, 60000, piece(off, 800)));
    s.check_invariants();
    EXPECT_EQ(s.out_of_order_bytes(), 0U);
    EXPECT_EQ(std::vector<std::byte>(s.readable().begin(), s.readable().end()), all);
    // Read, the buffer is released; the next bytes land in a page again, whole.
    s.consume(all.size());
    const auto next = pattern(64, 4200);
    s.on_segment(at_ms(4), from_peer(kIrs + 4200, kIss, 60000, next));
    EXPECT_EQ(std::vector<std::byte>(s.readable().begin(), s.readable().end()), next);
}

TEST(StreamReceive, OutOfOrderIsHeldAndDeliveredWhenTheHoleFills) {
    StreamConfig c = config();
    c.ack_delay = milliseconds(40);
    Stream s(c, init(), at_ms(0));
    const auto a = pattern(1000, 0), b = pattern(1000, 1000), c2 = pattern(500, 2500);
    // Segment 2 first: held, and a duplicate ACK at once (RFC 5681 4.2).
    auto r = s.on_segment(at_ms(1), from_peer(kIrs + 1000, kIss, 60000, b));
    EXPECT_FALSE(r.readable);
    EXPECT_EQ(s.out_of_order_bytes(), 1000U);
    EXPECT_EQ(s.readable_bytes(), 0U);
    expect_sent(s, at_ms(1), {ack_seg(kIss, kIrs, kWin16k)});
    // Another hole-leaving segment, overlapping nothing.
    s.on_segment(at_ms(2), from_peer(kIrs + 2500, kIss, 60000, c2));
    EXPECT_EQ(s.out_of_order_bytes(), 1500U);
    drain(s, at_ms(2));
    // The first segment fills the first hole: 2000 readable, ACK at once.
    r = s.on_segment(at_ms(3), from_peer(kIrs, kIss, 60000, a));
    EXPECT_TRUE(r.readable);
    EXPECT_EQ(s.readable_bytes(), 2000U);
    EXPECT_EQ(s.out_of_order_bytes(), 500U);
    expect_sent(s, at_ms(3), {ack_seg(kIss, kIrs + 2000, kWin16k - 2000)});
    std::vector<std::byte> got(s.readable().begin(), s.readable().end());
    EXPECT_EQ(got, pattern(2000));
    // A duplicate of segment 1: acknowledged, never delivered twice.
    r = s.on_segment(at_ms(4), from_peer(kIrs, kIss, 60000, a));
    EXPECT_EQ(r.verdict, Verdict::kOutOfWindow);
    EXPECT_EQ(s.readable_bytes(), 2000U);
    expect_sent(s, at_ms(4), {ack_seg(kIss, kIrs + 2000, kWin16k - 2000)});
    // Data overlapping the delivered part and the last hole: only new bytes count.
    const auto mid = pattern(1000, 1500);
    s.on_segment(at_ms(5), from_peer(kIrs + 1500, kIss, 60000, mid));
    EXPECT_EQ(s.readable_bytes(), 3000U);
    EXPECT_EQ(s.out_of_order_bytes(), 0U);
    got.assign(s.readable().begin(), s.readable().end());
    EXPECT_EQ(got, pattern(3000));
}

TEST(StreamReceive, SegmentBeyondTheWindowIsAckedAndDropped) {
    Stream s(config(), init(), at_ms(0));
    const auto payload = pattern(100);
    const auto r = s.on_segment(at_ms(1), from_peer(kIrs + kWin16k, kIss, 60000, payload));
    EXPECT_EQ(r.verdict, Verdict::kOutOfWindow);
    EXPECT_EQ(s.out_of_order_bytes(), 0U);
    expect_sent(s, at_ms(1), {ack_seg(kIss, kIrs, kWin16k)});
    EXPECT_TRUE(s.acceptable(SeqNumber(kIrs + kWin16k - 1), 1));
    EXPECT_FALSE(s.acceptable(SeqNumber(kIrs - 1), 1));
}

TEST(StreamReceive, EmptySegmentsOutsideTheWindowAreAnsweredAtMostTwiceASecond) {
    // Two ends whose ACKs each lie outside the other's window would answer
    // each other forever (Linux's tcp_oow_rate_limited): an empty one is
    // answered once per 500 ms, data every time.
    Stream s(config(), init(), at_ms(0));
    const auto beyond = SeqNumber(kIrs + kWin16k + 10).value();
    EXPECT_EQ(s.on_segment(at_ms(1), from_peer(beyond, kIss, 60000)).verdict,
              Verdict::kOutOfWindow);
    expect_sent(s, at_ms(1), {ack_seg(kIss, kIrs, kWin16k)});
    s.on_segment(at_ms(2), from_peer(beyond, kIss, 60000));
    s.on_segment(at_ms(500), from_peer(beyond, kIss, 60000));
    expect_nothing_sent(s, at_ms(500));
    const auto payload = pattern(10);
    s.on_segment(at_ms(502), from_peer(beyond, kIss, 60000, payload));
    expect_sent(s, at_ms(502), {ack_seg(kIss, kIrs, kWin16k)});
    s.on_segment(at_ms(503), from_peer(beyond, kIss, 60000));
    expect_sent(s, at_ms(503), {ack_seg(kIss, kIrs, kWin16k)});
}

TEST(StreamReceive, BytesBeyondTheWindowAreTrimmed) {
    StreamConfig c = config();
    c.recv_buffer = 4000;
    Stream s(c, init(), at_ms(0));
    const auto payload = pattern(1500);
    s.on_segment(at_ms(1), from_peer(kIrs + 3000, kIss, 60000, payload));
    EXPECT_EQ(s.out_of_order_bytes(), 1000U);
    expect_sent(s, at_ms(1), {ack_seg(kIss, kIrs, 4000)});
}

TEST(StreamReceive, WindowShrinksAsBytesWaitAndReopensAfterConsume) {
    StreamConfig c = config();
    c.recv_buffer = 4000;
    c.ack_delay = Duration::zero();
    Stream s(c, init(), at_ms(0));
    const auto payload = pattern(4000);
    for (std::uint32_t i = 0; i < 4; ++i) {
        s.on_segment(at_ms(1), from_peer(kIrs + i * 1000, kIss, 60000,
                                         std::span(payload).subspan(i * 1000, 1000)));
        expect_sent(
            s, at_ms(1),
            {ack_seg(kIss, kIrs + (i + 1) * 1000, static_cast<std::uint16_t>(3000 - i * 1000))});
    }
    EXPECT_EQ(s.rcv_wnd(), 0U);
    // More data into the zero window: not taken, acknowledged.
    EXPECT_EQ(s.on_segment(at_ms(2), from_peer(kIrs + 4000, kIss, 60000, payload)).readable, false);
    expect_sent(s, at_ms(2), {ack_seg(kIss, kIrs + 4000, 0)});
    // Reading less than min(RCV.BUFF/2, MSS) does not open the window (SWS).
    s.consume(500);
    EXPECT_EQ(s.rcv_wnd(), 0U);
    expect_nothing_sent(s, at_ms(3));
    // Reading enough queues a window update.
    s.consume(700);
    expect_sent(s, at_ms(4), {ack_seg(kIss, kIrs + 4000, 1200)});
    EXPECT_EQ(s.readable_bytes(), 2800U);
}

TEST(StreamReceive, ZeroWindowStillTakesTheAckOfASegment) {
    StreamConfig c = config();
    c.recv_buffer = 1000;
    c.ack_delay = Duration::zero();
    Stream s(c, init(), at_ms(0));
    const auto out = pattern(500);
    s.write(out);
    drain(s, at_ms(0));
    const auto in = pattern(1000);
    s.on_segment(at_ms(1), from_peer(kIrs, kIss, 60000, in));
    drain(s, at_ms(1));
    ASSERT_EQ(s.rcv_wnd(), 0U);
    // Data at RCV.NXT into the zero window: data dropped, ACK processed.
    const auto a = s.on_segment(at_ms(2), from_peer(kIrs + 1000, kIss + 500, 60000, in));
    EXPECT_TRUE(a.acked);
    EXPECT_FALSE(a.readable);
    EXPECT_EQ(s.readable_bytes(), 1000U);
}

TEST(StreamReceive, DelayedAckTiming) {
    Stream s(config(), init(), at_ms(0));  // ack_delay 40 ms
    const auto payload = pattern(3000);
    s.on_segment(at_ms(10), from_peer(kIrs, kIss, 60000, std::span(payload).first(1000)));
    expect_nothing_sent(s, at_ms(10));
    EXPECT_EQ(s.next_deadline(), at_ms(50));
    EXPECT_FALSE(s.idle());
    EXPECT_EQ(s.on_timer(at_ms(50)), Stream::Timeout::kNone);
    expect_sent(s, at_ms(50), {ack_seg(kIss, kIrs + 1000, kWin16k - 1000)});
    EXPECT_EQ(s.next_deadline(), std::nullopt);
    // Two full segments: the second is acknowledged at once.
    s.on_segment(at_ms(60),
                 from_peer(kIrs + 1000, kIss, 60000, std::span(payload).subspan(1000, 1000)));
    expect_nothing_sent(s, at_ms(60));
    s.on_segment(at_ms(61), from_peer(kIrs + 2000, kIss, 60000, std::span(payload).subspan(2000)));
    expect_sent(s, at_ms(61), {ack_seg(kIss, kIrs + 3000, kWin16k - 3000)});
    EXPECT_EQ(s.next_deadline(), std::nullopt);
}

// ---------------------------------------------------------------- FIN

TEST(StreamFin, PeerFinInOrderIsAckedAtOnce) {
    Stream s(config(), init(), at_ms(0));
    const auto payload = pattern(300);
    const auto a = s.on_segment(at_ms(1), from_peer(kIrs, kIss, 60000, payload, f::kAck | f::kFin));
    EXPECT_TRUE(a.fin);
    EXPECT_TRUE(a.readable);
    EXPECT_TRUE(s.fin_received());
    EXPECT_EQ(s.rcv_nxt(), SeqNumber(kIrs + 301));
    // The right edge stays where it was: the FIN took one sequence number.
    expect_sent(s, at_ms(1), {ack_seg(kIss, kIrs + 301, kWin16k - 301)});
    // The FIN again: acknowledged again, reported once.
    const auto again =
        s.on_segment(at_ms(2), from_peer(kIrs, kIss, 60000, payload, f::kAck | f::kFin));
    EXPECT_FALSE(again.fin);
    EXPECT_EQ(s.readable_bytes(), 300U);
    expect_sent(s, at_ms(2), {ack_seg(kIss, kIrs + 301, kWin16k - 301)});
}

TEST(StreamFin, PeerFinAfterOutOfOrderDataWaitsForTheHole) {
    Stream s(config(), init(), at_ms(0));
    const auto payload = pattern(2000);
    auto a = s.on_segment(at_ms(1), from_peer(kIrs + 1000, kIss, 60000,
                                              std::span(payload).subspan(1000), f::kAck | f::kFin));
    EXPECT_FALSE(a.fin);
    EXPECT_FALSE(s.fin_received());
    drain(s, at_ms(1));
    // Data past the FIN is ignored.
    const auto beyond = pattern(10);
    s.on_segment(at_ms(2), from_peer(kIrs + 2001, kIss, 60000, beyond));
    EXPECT_EQ(s.out_of_order_bytes(), 1000U);
    drain(s, at_ms(2));
    a = s.on_segment(at_ms(3), from_peer(kIrs, kIss, 60000, std::span(payload).first(1000)));
    EXPECT_TRUE(a.fin);
    EXPECT_EQ(s.readable_bytes(), 2000U);
    EXPECT_EQ(s.rcv_nxt(), SeqNumber(kIrs + 2001));
    expect_sent(s, at_ms(3), {ack_seg(kIss, kIrs + 2001, kWin16k - 2001)});
    std::vector<std::byte> got(s.readable().begin(), s.readable().end());
    EXPECT_EQ(got, payload);
}

TEST(StreamFin, OurFinFollowsDataIsRetransmittedAndAcked) {
    Stream s(config(), init(), at_ms(0));
    const auto data = pattern(500);
    s.write(data);
    s.close();
    Seg with_fin = data_seg(0, 500, kIrs, kWin16k);
    with_fin.flags |= f::kFin;
    expect_sent(s, at_ms(0), {with_fin});
    EXPECT_TRUE(s.fin_sent());
    EXPECT_EQ(s.snd_max(), SeqNumber(kIss + 501));
    // Lost: the RTO sends data and FIN again.
    s.on_timer(at_ms(1000));
    expect_sent(s, at_ms(1000), {with_fin});
    // The data only is acknowledged; then the FIN alone goes on the next RTO.
    auto a = s.on_segment(at_ms(1100), from_peer(kIrs, kIss + 500, 60000));
    EXPECT_TRUE(a.acked);
    EXPECT_FALSE(a.fin_acked);
    const Instant t = deadline(s);
    EXPECT_EQ(t, at_ms(1100) + seconds(2));  // restarted, still backed off (Karn)
    s.on_timer(t);
    expect_sent(s, t, {Seg{kIss + 500, kIrs, f::kAck | f::kFin, kWin16k, {}}});
    a = s.on_segment(at_ms(9000), from_peer(kIrs, kIss + 501, 60000));
    EXPECT_TRUE(a.fin_acked);
    EXPECT_TRUE(s.fin_acked());
    EXPECT_TRUE(s.idle());
    EXPECT_EQ(s.next_deadline(), std::nullopt);
}

TEST(StreamFin, FinNeedsNoWindow) {
    Stream s(config(), init(0), at_ms(0));
    s.close();
    expect_sent(s, at_ms(0), {Seg{kIss, kIrs, f::kAck | f::kFin, kWin16k, {}}});
}

// ---------------------------------------------------------------- keepalive

const StreamConfig& keepalive_config() {
    static const StreamConfig c = [] {
        StreamConfig d = config();
        d.keepalive = true;
        d.keepalive_idle = seconds(10);
        d.keepalive_interval = seconds(1);
        d.keepalive_probes = 3;
        return d;
    }();
    return c;
}

TEST(StreamKeepalive, ProbesThenGivesUp) {
    Stream s(keepalive_config(), init(), at_ms(0));
    EXPECT_EQ(s.next_deadline(), at_ms(10000));
    for (int i = 0; i < 3; ++i) {
        const Instant t = at_ms(10000 + 1000 * i);
        ASSERT_EQ(s.next_deadline(), t);
        EXPECT_EQ(s.on_timer(t), Stream::Timeout::kNone);
        // RFC 9293 3.8.4: <SEQ=SND.NXT-1><ACK=RCV.NXT>, no data.
        expect_sent(s, t, {ack_seg(kIss - 1, kIrs, kWin16k)});
    }
    EXPECT_EQ(s.next_deadline(), at_ms(13000));
    EXPECT_EQ(s.on_timer(at_ms(13000)), Stream::Timeout::kGiveUp);
}

TEST(StreamKeepalive, AnAnswerResetsTheCount) {
    Stream s(keepalive_config(), init(), at_ms(0));
    s.on_timer(at_ms(10000));
    drain(s, at_ms(10000));
    s.on_timer(at_ms(11000));
    drain(s, at_ms(11000));
    // The peer answers the probe (an ACK of SND.NXT): idle again from now.
    s.on_segment(at_ms(11500), from_peer(kIrs, kIss, 60000));
    EXPECT_EQ(s.next_deadline(), at_ms(21500));
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(s.on_timer(deadline(s)), Stream::Timeout::kNone);
    }
    EXPECT_EQ(s.on_timer(deadline(s)), Stream::Timeout::kGiveUp);
}

TEST(StreamKeepalive, OffByDefaultAndQuietWhileDataIsOutstanding) {
    Stream off(config(), init(), at_ms(0));
    EXPECT_EQ(off.next_deadline(), std::nullopt);
    Stream s(keepalive_config(), init(), at_ms(0));
    const auto data = pattern(10);
    s.write(data);
    drain(s, at_ms(9000));
    // The RTO is due before the keepalive and no probe is ever sent while
    // data is outstanding.
    EXPECT_EQ(s.next_deadline(), at_ms(10000));
    s.on_timer(at_ms(10000));
    expect_sent(s, at_ms(10000), {data_seg(0, 10, kIrs, kWin16k)});
}

TEST(StreamKeepalive, ProbeIsAnsweredByTheReceiver) {
    Stream s(config(), init(), at_ms(0));
    // The peer's keepalive: SEQ = RCV.NXT - 1, not acceptable, so an ACK goes back.
    const auto a = s.on_segment(at_ms(1), from_peer(kIrs - 1, kIss, 60000));
    EXPECT_EQ(a.verdict, Verdict::kOutOfWindow);
    expect_sent(s, at_ms(1), {ack_seg(kIss, kIrs, kWin16k)});
}

// ---------------------------------------------------------------- the responder's hold
// StreamInit::hold_data_until (RFC 5044 section 7.1, MpaConfig::responder_send_wait).

StreamInit held(std::uint32_t snd_wnd = 60000) {
    StreamInit i = init(snd_wnd);
    i.hold_data_until = at_ms(100);
    return i;
}

TEST(StreamHold, DataWaitsForThePeersFirstByteAndAcksStillGo) {
    Stream s(config(), held(), at_ms(0));
    const auto data = pattern(1500);
    EXPECT_EQ(s.write(data), 1500U);
    expect_nothing_sent(s, at_ms(0));
    EXPECT_EQ(s.next_deadline(), at_ms(100));
    // The peer's first bytes: acknowledged, and our data follows at once.
    const auto theirs = pattern(24);
    s.on_segment(at_ms(30), from_peer(kIrs, kIss, 60000, theirs));
    s.force_ack();
    expect_sent(s, at_ms(30),
                {Seg{kIss, kIrs + 24, f::kAck | f::kPsh, kWin16k - 24, pattern(1000)},
                 Seg{kIss + 1000, kIrs + 24, f::kAck | f::kPsh, kWin16k - 24, pattern(500, 1000)}});
    EXPECT_EQ(s.next_deadline(), at_ms(1030));  // the RTO, no hold left
}

TEST(StreamHold, DataGoesWhenTheHoldRunsOut) {
    Stream s(config(), held(), at_ms(0));
    EXPECT_EQ(s.write(pattern(500)), 500U);
    expect_nothing_sent(s, at_ms(99));
    s.on_timer(at_ms(99));
    expect_nothing_sent(s, at_ms(99));
    EXPECT_EQ(deadline(s), at_ms(100));
    s.on_timer(at_ms(100));
    expect_sent(s, at_ms(100), {data_seg(0, 500, kIrs, kWin16k)});
}

TEST(StreamHold, ThePeersFinEndsItAndAnEmptyAckDoesNot) {
    Stream s(config(), held(), at_ms(0));
    EXPECT_EQ(s.write(pattern(500)), 500U);
    s.on_segment(at_ms(10), from_peer(kIrs, kIss, 60000));
    expect_nothing_sent(s, at_ms(10));
    s.on_segment(at_ms(20), from_peer(kIrs, kIss, 60000, {}, f::kAck | f::kFin));
    expect_sent(s, at_ms(20), {data_seg(0, 500, kIrs + 1, kWin16k - 1)});  // the edge stays
}

// Bytes the peer sent before the hand-off are its first FPDU: no hold at all.
TEST(StreamHold, BytesReceivedBeforeTheHandOffMeanNoHold) {
    StreamInit i = held();
    const auto theirs = pattern(24);
    i.received = theirs;
    i.tcb.rcv_nxt = SeqNumber(kIrs + 24);
    Stream s(config(), i, at_ms(0));
    EXPECT_EQ(s.write(pattern(500)), 500U);
    expect_sent(s, at_ms(0), {data_seg(0, 500, kIrs + 24, kWin16k - 24)});
}

// Neither a loss probe nor a zero-window probe carries new data while the hold lasts.
TEST(StreamHold, NoProbeSendsNewData) {
    Stream s(config(), held(0), at_ms(0));
    EXPECT_EQ(s.write(pattern(500)), 500U);
    for (int ms = 0; ms < 100; ms += 10) {
        s.on_timer(at_ms(ms));
        expect_nothing_sent(s, at_ms(ms));
    }
    s.on_timer(at_ms(100));
    expect_nothing_sent(s, at_ms(100));  // the window is zero: the persist timer takes over
    const Instant probe = deadline(s);
    s.on_timer(probe);
    expect_sent(s, probe, {Seg{kIss, kIrs, f::kAck | f::kPsh, kWin16k, pattern(1)}});
}

// A connection's whole TCP state lives here from its hand-off on: the settings are the
// owner's, kept by reference, and the records' ends and bytes held by reference cost a
// pointer each until used.
TEST(StreamSize, IsModest) {
    EXPECT_LE(sizeof(Stream), 320U) << sizeof(Stream);
    // Settings that would die before the stream are refused at compile time.
    static_assert(!std::is_constructible_v<Stream, StreamConfig&&, const StreamInit&, Instant>);
    static_assert(std::is_constructible_v<Stream, const StreamConfig&, const StreamInit&, Instant>);
}

}  // namespace
}  // namespace iwcm::tcp
