// Unit tests of tcp::Stream::write_record: how records are cut into
// segments, first sent and resent. Read src/tcp/stream.hpp first (the rule
// is in write_record's comment). A segment is checked as (offset from the
// first byte, length), and its payload against the bytes written there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <ostream>
#include <set>
#include <vector>

#include "iwcm/assert.hpp"
#include "tcp/stream.hpp"

namespace iwcm::tcp {
namespace {

using wire::SeqNumber;
namespace f = wire::tcp_flags;

constexpr std::uint32_t kIss = 7000;
constexpr std::uint32_t kIrs = 90000;
constexpr std::uint16_t kMss = 1000;

// A data segment as where it starts (offset from kIss) and how long it is.
struct Cut {
    std::uint32_t off = 0;
    std::uint32_t len = 0;
    friend bool operator==(const Cut&, const Cut&) = default;
};

std::ostream& operator<<(std::ostream& os, const Cut& c) {
    return os << "[" << c.off << ", +" << c.len << ")";
}

// A stream with the records written so far, all bytes numbered from kIss.
class Sender {
public:
    explicit Sender(std::uint32_t snd_wnd = 60000, std::uint32_t send_buffer = 64 * 1024,
                    std::uint32_t iss = kIss, std::uint16_t offload = 0, bool mss_pieces = false)
        : iss_(iss) {
        config_.send_buffer = send_buffer;
        config_.segment_offload = offload;
        config_.offload_mss_pieces = mss_pieces;
        config_.recv_buffer = 16 * 1024;
        StreamInit i;
        i.tcb.snd_una = i.tcb.snd_max = SeqNumber(iss);
        i.tcb.rcv_nxt = SeqNumber(kIrs);
        i.tcb.snd_wnd = snd_wnd;
        i.tcb.mss = kMss;
        stream_.emplace(config_, i, at_ms(0));
    }

    Stream& s() { return *stream_; }

    // Writes a record of n bytes (distinct values), true if it was taken.
    bool record(std::size_t n) { return put(n, true); }
    // The same with its middle held by reference (as an FPDU's payload in
    // registered memory): two bytes copied in, the middle, four copied in.
    bool record_by_ref(std::size_t n) {
        IWCM_ASSERT(n > 6);
        std::vector<std::byte>& region = regions_.emplace_back(n);
        for (std::size_t i = 0; i < n; ++i) {
            region[i] = static_cast<std::byte>((bytes_.size() + i) * 13 % 251);
        }
        const std::span<const std::byte> all(region);
        const std::span<const std::byte> parts[] = {all.first(2), all.subspan(2, n - 6),
                                                    all.last(4)};
        const bool taken = stream_->write_record(parts, 0b010);
        if (taken) {
            bytes_.insert(bytes_.end(), region.begin(), region.end());
        } else {
            regions_.pop_back();
        }
        return taken;
    }
    // Changes the byte at offset `off` of the `record`-th referenced record;
    // with `expected` the segments are to carry the new value.
    void change(std::size_t record, std::size_t off, bool expected) {
        std::vector<std::byte>& region = regions_.at(record);
        region.at(off) = ~region.at(off);
        std::size_t start = 0;  // where the record starts among the bytes
        if (expected) {
            for (std::size_t i = 0; i < record; ++i) start += regions_[i].size();
            bytes_.at(start + off) = region[off];
        }
    }
    std::size_t plain(std::size_t n) { return put(n, false) ? n : 0; }
    // Plain bytes held by reference (Stream::write_ref): the bytes taken.
    std::size_t plain_by_ref(std::size_t n) {
        std::vector<std::byte>& region = regions_.emplace_back(n);
        for (std::size_t i = 0; i < n; ++i) {
            region[i] = static_cast<std::byte>((bytes_.size() + i) * 13 % 251);
        }
        const std::size_t taken = stream_->write_ref(region);
        region.resize(taken);  // no reallocation: the stream's view stays valid
        bytes_.insert(bytes_.end(), region.begin(), region.end());
        return taken;
    }

    // Every data segment poll_segment gives now; each payload must be the
    // bytes written at its offset.
    std::vector<Cut> sent(Instant now) {
        std::vector<Cut> out;
        for (int i = 0; i < 1000; ++i) {
            auto seg = stream_->poll_segment(now);
            stream_->check_invariants();
            if (!seg) return out;
            if (seg->len == 0) continue;
            const auto off = static_cast<std::uint32_t>(seg->seq - SeqNumber(iss_));
            const std::uint32_t len = seg->len;
            // One run of the buffer, or pieces (some held by reference).
            std::vector<std::byte> got(seg->payload.begin(), seg->payload.end());
            EXPECT_TRUE(got.empty() != seg->pieces.empty());
            for (auto piece : seg->pieces) got.insert(got.end(), piece.begin(), piece.end());
            EXPECT_EQ(got.size(), len);
            EXPECT_LE(std::size_t{off} + len, bytes_.size());
            EXPECT_TRUE(std::equal(got.begin(), got.end(), bytes_.begin() + off))
                << "payload of " << Cut{off, len};
            out.push_back({off, len});
        }
        ADD_FAILURE() << "poll_segment never ran dry";
        return out;
    }

    // The peer acknowledges up to offset `off` with window `wnd`.
    Arrival ack(Instant now, std::uint32_t off, std::uint16_t wnd = 60000) {
        const Arrival a =
            stream_->on_segment(now, {SeqNumber(kIrs), SeqNumber(iss_ + off), f::kAck, wnd, {}});
        stream_->check_invariants();
        return a;
    }

private:
    bool put(std::size_t n, bool as_record) {
        std::vector<std::byte> data(n);
        for (std::size_t i = 0; i < n; ++i) {
            data[i] = static_cast<std::byte>((bytes_.size() + i) * 13 % 251);
        }
        const bool taken = as_record ? stream_->write_record(data) : stream_->write(data) == n;
        if (taken) bytes_.insert(bytes_.end(), data.begin(), data.end());
        return taken;
    }

    std::uint32_t iss_;
    StreamConfig config_;  // the stream's, kept by reference: before it
    std::optional<Stream> stream_;
    std::vector<std::byte> bytes_;
    std::deque<std::vector<std::byte>> regions_;  // each stays where it is
};

TEST(StreamRecord, EachSizeLeavesAsWholeSegments) {
    Sender t;
    for (std::size_t n : std::vector<std::size_t>{1, kMss - 1, kMss, 2 * kMss + 7}) {
        ASSERT_TRUE(t.record(n));
    }
    // A record up to an MSS is one segment; a longer one MSS-sized pieces.
    EXPECT_EQ(
        t.sent(at_ms(0)),
        (std::vector<Cut>{{0, 1}, {1, 999}, {1000, 1000}, {2000, 1000}, {3000, 1000}, {4000, 7}}));
    EXPECT_EQ(t.s().mss(), kMss);
}

TEST(StreamRecord, SmallRecordsAreNotCoalesced) {
    Sender t;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(t.record(100));
    EXPECT_EQ(t.sent(at_ms(0)), (std::vector<Cut>{{0, 100}, {100, 100}, {200, 100}}));
    // More records while those are in flight: sent at once, one segment each.
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(t.record(300));
    EXPECT_EQ(t.sent(at_ms(1)), (std::vector<Cut>{{300, 300}, {600, 300}, {900, 300}}));
}

TEST(StreamRecord, ManyRecordsInFlightWrapTheRing) {
    Sender t;
    std::vector<Cut> want;
    for (std::uint32_t i = 0; i < 100; ++i) {
        ASSERT_TRUE(t.record(10));
        want.push_back({10 * i, 10});
    }
    EXPECT_EQ(t.sent(at_ms(0)), want);
    // Half acknowledged (their ends dropped), a hundred more written.
    t.ack(at_ms(10), 500);
    want.clear();
    for (std::uint32_t i = 100; i < 200; ++i) {
        ASSERT_TRUE(t.record(10));
        want.push_back({10 * i, 10});
    }
    EXPECT_EQ(t.sent(at_ms(10)), want);
}

TEST(StreamRecord, PlainBytesAroundRecordsStayApart) {
    Sender t;
    // Plain bytes before a record end where it starts; those after the last
    // record are segmented as usual (an MSS, then the rest).
    ASSERT_EQ(t.plain(1500), 1500U);
    ASSERT_TRUE(t.record(300));
    ASSERT_EQ(t.plain(1500), 1500U);
    EXPECT_EQ(t.sent(at_ms(0)),
              (std::vector<Cut>{{0, 1000}, {1000, 500}, {1500, 300}, {1800, 1000}, {2800, 500}}));
}

TEST(StreamRecord, WriteRecordIsAllOrNothing) {
    Sender t(60000, 3000);
    EXPECT_FALSE(t.record(0));
    ASSERT_TRUE(t.record(2000));
    EXPECT_EQ(t.s().send_space(), 1000U);
    EXPECT_FALSE(t.record(1001));  // more than the space: nothing taken
    EXPECT_EQ(t.s().bytes_queued(), 2000U);
    EXPECT_TRUE(t.record(1000));
    EXPECT_EQ(t.s().send_space(), 0U);
    EXPECT_FALSE(t.record(1));
    t.sent(at_ms(0));
    t.ack(at_ms(10), 2000);
    EXPECT_TRUE(t.record(1));
    t.s().close();
    EXPECT_FALSE(t.record(1));  // nothing after close()
    EXPECT_EQ(t.s().bytes_queued(), 1001U);
}

TEST(StreamRecord, FastRetransmitResendsExactlyTheLostRecord) {
    Sender t;
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(t.record(700));
    EXPECT_EQ(t.sent(at_ms(0)).size(), 10U);
    for (int i = 0; i < 3; ++i) t.ack(at_ms(10 + i), 0);  // three duplicate ACKs
    // Plain bytes would resend an MSS (1000); the record is 700.
    EXPECT_EQ(t.sent(at_ms(12)), (std::vector<Cut>{{0, 700}}));
    EXPECT_EQ(t.s().retransmitted_segments(), 1U);
}

TEST(StreamRecord, PartialAckInsideARecordResendsToItsEnd) {
    Sender t;
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(t.record(900));
    EXPECT_EQ(t.sent(at_ms(0)).size(), 10U);
    for (int i = 0; i < 3; ++i) t.ack(at_ms(10 + i), 0);
    EXPECT_EQ(t.sent(at_ms(12)), (std::vector<Cut>{{0, 900}}));
    // NewReno partial ACK half way into the second record (the peer took
    // part of a segment): the rest of that record, from SND.UNA to its end.
    t.ack(at_ms(20), 1350);
    EXPECT_EQ(t.sent(at_ms(20)), (std::vector<Cut>{{1350, 450}}));
}

TEST(StreamRecord, RtoFromInsideARecordStopsAtItsEnd) {
    Sender t;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(t.record(1000));
    EXPECT_EQ(t.sent(at_ms(0)).size(), 3U);
    t.ack(at_ms(10), 400);
    // A loss probe comes first (the last record again); then the RTO goes
    // back to SND.UNA.
    Instant now = at_ms(10);
    for (int i = 0; i < 4 && t.s().snd_nxt() != t.s().snd_una(); ++i) {
        now = t.s().next_deadline().value_or(kInstantNever);
        t.s().on_timer(now);
        if (t.s().snd_nxt() != t.s().snd_una()) {
            EXPECT_EQ(t.sent(now), (std::vector<Cut>{{2000, 1000}}));
        }
    }
    ASSERT_EQ(t.s().snd_nxt(), t.s().snd_una());
    // cwnd is one MSS: the rest of the first record alone, not 1000 bytes
    // running into the second.
    EXPECT_EQ(t.sent(now), (std::vector<Cut>{{400, 600}}));
}

TEST(StreamRecord, GoBackAfterRtoKeepsSegmentsAligned) {
    Sender t;
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(t.record(700));
    EXPECT_EQ(t.sent(at_ms(0)).size(), 8U);
    // No RTT sample yet, so no loss probe: the first expiry is the RTO.
    ASSERT_EQ(t.s().next_deadline(), at_ms(1000));
    t.s().on_timer(at_ms(1000));
    ASSERT_EQ(t.s().cwnd(), kMss);
    // One MSS of room: one 700-byte record; the next waits for the ACK
    // rather than going as 300 bytes.
    EXPECT_EQ(t.sent(at_ms(1000)), (std::vector<Cut>{{0, 700}}));
    t.ack(at_ms(1010), 700);  // slow start: cwnd 1700
    EXPECT_EQ(t.sent(at_ms(1010)), (std::vector<Cut>{{700, 700}, {1400, 700}}));
    t.ack(at_ms(1020), 2100);
    for (const Cut& c : t.sent(at_ms(1020))) {
        EXPECT_EQ(c.off % 700, 0U) << c;
        EXPECT_EQ(c.len, 700U) << c;
    }
}

TEST(StreamRecord, LossProbeResendsTheLastRecordOrPiece) {
    Sender t;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(t.record(600));
    EXPECT_EQ(t.sent(at_ms(0)).size(), 3U);
    t.ack(at_ms(10), 600);  // SRTT 10 ms: the probe is due at 30 ms
    ASSERT_EQ(t.s().next_deadline(), at_ms(30));
    t.s().on_timer(at_ms(30));
    // Plain bytes would resend the last MSS (200 of it from the second record).
    EXPECT_EQ(t.sent(at_ms(30)), (std::vector<Cut>{{1200, 600}}));

    Sender big;
    ASSERT_TRUE(big.record(2500));
    EXPECT_EQ(big.sent(at_ms(0)), (std::vector<Cut>{{0, 1000}, {1000, 1000}, {2000, 500}}));
    big.ack(at_ms(10), 1000);
    ASSERT_EQ(big.s().next_deadline(), at_ms(30));
    big.s().on_timer(at_ms(30));
    EXPECT_EQ(big.sent(at_ms(30)), (std::vector<Cut>{{2000, 500}}));
}

TEST(StreamRecord, ShortRecordIsSendableButNeverAFractionOfOne) {
    Sender t(2500);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(t.record(900));
    // 2500 of window: two records; 700 left is not the third record (with
    // plain bytes the sender's silly-window rule would send it: more than
    // half the window).
    EXPECT_EQ(t.sent(at_ms(0)), (std::vector<Cut>{{0, 900}, {900, 900}}));
    t.ack(at_ms(10), 900, 2500);
    EXPECT_EQ(t.sent(at_ms(10)), (std::vector<Cut>{{1800, 900}}));
    // Nothing in flight and a window narrower than the record: no ACK would
    // come, so the window's share goes (a documented split).
    t.ack(at_ms(20), 2700, 500);
    EXPECT_EQ(t.sent(at_ms(20)), (std::vector<Cut>{{2700, 500}}));
    t.ack(at_ms(30), 3200, 5000);
    EXPECT_EQ(t.sent(at_ms(30)), (std::vector<Cut>{{3200, 400}, {3600, 900}}));
}

TEST(StreamRecord, NoShareOfTheWindowSplitsARecordInFlight) {
    Sender t(1200);
    ASSERT_TRUE(t.record(300));
    ASSERT_TRUE(t.record(1000));
    // 900 bytes of room is more than half the largest window, which lets
    // plain bytes go (RFC 9293 3.8.6.2.1, Fs = 1/2); a record waits.
    EXPECT_EQ(t.sent(at_ms(0)), (std::vector<Cut>{{0, 300}}));
    t.ack(at_ms(10), 300, 1200);
    EXPECT_EQ(t.sent(at_ms(10)), (std::vector<Cut>{{300, 1000}}));
}

TEST(StreamRecord, ZeroWindowProbeTakesOneByteOfARecord) {
    Sender t(0);
    ASSERT_TRUE(t.record(500));
    EXPECT_EQ(t.sent(at_ms(0)), std::vector<Cut>{});
    ASSERT_EQ(t.s().next_deadline(), at_ms(1000));
    t.s().on_timer(at_ms(1000));
    EXPECT_EQ(t.sent(at_ms(1000)), (std::vector<Cut>{{0, 1}}));  // RFC 9293 3.8.6.1
    // The peer takes the byte and opens: the rest of the record in one segment.
    t.ack(at_ms(1001), 1, 5000);
    EXPECT_EQ(t.sent(at_ms(1001)), (std::vector<Cut>{{1, 499}}));
}

TEST(StreamRecord, RecordAfterHandOffBytesIsSegmentedApart) {
    // Bytes sent before the hand-off (an RTR) are not joined to a record
    // when both are retransmitted.
    StreamConfig c;
    StreamInit i;
    i.tcb.snd_una = SeqNumber(kIss);
    i.tcb.snd_max = SeqNumber(kIss + 20);
    i.tcb.rcv_nxt = SeqNumber(kIrs);
    i.tcb.snd_wnd = 60000;
    i.tcb.mss = kMss;
    const std::vector<std::byte> rtr(20, std::byte{0x5a});
    i.unacked = rtr;
    Stream s(c, i, at_ms(0));
    const std::vector<std::byte> rec(100, std::byte{0xa5});
    ASSERT_TRUE(s.write_record(rec));
    auto first = s.poll_segment(at_ms(0));
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->seq, SeqNumber(kIss + 20));
    EXPECT_EQ(first->payload.size(), 100U);
    s.on_timer(at_ms(1000));
    auto again = s.poll_segment(at_ms(1000));
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->seq, SeqNumber(kIss));
    EXPECT_EQ(again->payload.size(), 20U);
}

TEST(StreamRecord, EndsAcrossTheSequenceWrap) {
    // The first byte 250 below 2^32: two records end before the wrap, the
    // third spans it (sequence 0 is its 51st byte), the rest end after it.
    Sender t(60000, 64 * 1024, 0xFFFFFF06U);
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(t.record(100));
    EXPECT_EQ(
        t.sent(at_ms(0)),
        (std::vector<Cut>{{0, 100}, {100, 100}, {200, 100}, {300, 100}, {400, 100}, {500, 100}}));
    // The second record was lost: duplicate ACKs (early retransmit, RFC
    // 5827: one is enough with one segment's worth out) resend it alone.
    t.ack(at_ms(10), 100);
    for (int i = 0; i < 3; ++i) t.ack(at_ms(11 + i), 100);
    EXPECT_EQ(t.sent(at_ms(13)), (std::vector<Cut>{{100, 100}}));
    t.ack(at_ms(20), 250);  // a partial ACK at sequence 0, inside the third record
    EXPECT_EQ(t.sent(at_ms(20)), (std::vector<Cut>{{250, 50}}));
}

// Segmentation offload: segments join whole records up to the offload
// (rounded to MSS multiples) and the window; a record longer than that goes
// in MSS-sized pieces from its start, so no segment ends inside a piece.
TEST(StreamRecord, OffloadJoinsWholeRecordsOnly) {
    Sender t(60000, 64 * 1024, kIss, 5500);  // offload: 5 MSS of 1000
    for (std::size_t n : std::vector<std::size_t>{300, 300, 300, 2500, 1000, 100, 900, 800}) {
        ASSERT_TRUE(t.record(n));
    }
    // Ends at 300 600 900 3400 4400 4500 5400 6200: the last within 5000
    // from 0 is 4500, then the rest (1700).
    EXPECT_EQ(t.sent(at_ms(0)), (std::vector<Cut>{{0, 4500}, {4500, 1700}}));
}

TEST(StreamRecord, OffloadCutsALongRecordInMssPieces) {
    Sender t(60000, 64 * 1024, kIss, 5500);
    ASSERT_TRUE(t.record(7000));
    ASSERT_TRUE(t.record(300));
    // 5 pieces of the long record; then its last 2 pieces and the short record.
    EXPECT_EQ(t.sent(at_ms(0)), (std::vector<Cut>{{0, 5000}, {5000, 2300}}));
    // Without offload the same records leave MSS by MSS.
    Sender u;
    ASSERT_TRUE(u.record(7000));
    ASSERT_TRUE(u.record(300));
    EXPECT_EQ(u.sent(at_ms(0)).size(), 8U);
}

TEST(StreamRecord, OffloadCutsPlainBytesInMssMultiples) {
    Sender t(60000, 64 * 1024, kIss, 5500);
    ASSERT_EQ(t.plain(12345), 12345U);
    // The initial window (10 MSS) then the window's rest: 5000, 5000, then
    // nothing until an ACK; all of it once the window opens.
    EXPECT_EQ(t.sent(at_ms(0)), (std::vector<Cut>{{0, 5000}, {5000, 5000}}));
    t.ack(at_ms(5), 10000);
    EXPECT_EQ(t.sent(at_ms(5)), (std::vector<Cut>{{10000, 2345}}));
}

TEST(StreamRecord, OffloadRetransmitsAtTheMss) {
    Sender t(60000, 64 * 1024, kIss, 5500);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(t.record(1000));
    EXPECT_EQ(t.sent(at_ms(0)), (std::vector<Cut>{{0, 5000}}));
    // The RTO: back to SND.UNA, one MSS (cwnd is one segment now).
    t.s().on_timer(at_ms(1000));
    EXPECT_EQ(t.sent(at_ms(1000)), (std::vector<Cut>{{0, 1000}}));
}

// Where a link that segments (GSO, TSO) cuts the segments `cuts`: every `mss` bytes of each.
std::vector<std::uint32_t> wire_cuts(const std::vector<Cut>& cuts, std::uint32_t mss) {
    std::vector<std::uint32_t> starts;
    for (const Cut& c : cuts)
        for (std::uint32_t at = 0; at < c.len; at += mss) starts.push_back(c.off + at);
    return starts;
}

// For a wire that cuts every MSS (StreamConfig::offload_mss_pieces): a long segment joins
// only pieces of exactly one MSS but its last, so that, cut every MSS as the kernel cuts a
// GSO frame, each segment of the wire starts where a record (or an MSS-sized piece of a long
// one) starts, as MPA with markers off needs of every FPDU.
TEST(StreamRecord, OffloadForAWireKeepsEveryRecordAtTheStartOfAWireSegment) {
    const std::vector<std::size_t> records = {1000, 1000, 1000, 300,  1000, 1000,
                                              2500, 1000, 700,  1000, 1000, 1000};
    // Where records start, and the MSS-sized pieces of the long one (at 5300).
    std::set<std::uint32_t> starts;
    std::uint32_t at = 0;
    for (std::size_t n : records) {
        for (std::uint32_t p = 0; p < n; p += kMss) starts.insert(at + p);
        at += static_cast<std::uint32_t>(n);
    }
    Sender t(60000, 64 * 1024, kIss, 5500, true);
    for (std::size_t n : records) ASSERT_TRUE(t.record(n));
    const std::vector<Cut> sent = t.sent(at_ms(0));
    // Three whole MSS and the short record; two, then the long record's three pieces (the
    // last short); one and the short one. The next record waits for the initial window.
    EXPECT_EQ(sent, (std::vector<Cut>{{0, 3300}, {3300, 4500}, {7800, 1700}}));
    for (std::uint32_t cut : wire_cuts(sent, kMss)) EXPECT_TRUE(starts.contains(cut)) << cut;
    // The in-memory rule (whole records up to the cap) would join them otherwise: cut
    // every MSS, its segments would start inside records.
    Sender u(60000, 64 * 1024, kIss, 5500, false);
    for (std::size_t n : records) ASSERT_TRUE(u.record(n));
    const std::vector<std::uint32_t> memory = wire_cuts(u.sent(at_ms(0)), kMss);
    EXPECT_FALSE(std::all_of(memory.begin(), memory.end(),
                             [&](std::uint32_t c) { return starts.contains(c); }));
}

TEST(StreamRecord, OffloadForAWireCutsPlainBytesAsForMemory) {
    Sender t(60000, 64 * 1024, kIss, 5500, true);
    ASSERT_EQ(t.plain(12345), 12345U);
    EXPECT_EQ(t.sent(at_ms(0)), (std::vector<Cut>{{0, 5000}, {5000, 5000}}));
    t.ack(at_ms(5), 10000);
    EXPECT_EQ(t.sent(at_ms(5)), (std::vector<Cut>{{10000, 2345}}));
}

// ---- records held by reference (Stream::write_record with by_ref)

TEST(StreamRecordByRef, SegmentsAreCutAsForCopiedRecords) {
    Sender t;
    for (std::size_t n : std::vector<std::size_t>{7, kMss - 1, kMss, 2 * kMss + 7}) {
        ASSERT_TRUE(t.record_by_ref(n));
    }
    ASSERT_TRUE(t.record(10));  // a copied one after them
    EXPECT_EQ(t.s().ref_bytes(), 1U + 993 + 994 + 2001);
    EXPECT_EQ(t.s().written_bytes(), 7U + 999 + 1000 + 2007 + 10);
    EXPECT_EQ(
        t.sent(at_ms(0)),
        (std::vector<Cut>{
            {0, 7}, {7, 999}, {1006, 1000}, {2006, 1000}, {3006, 1000}, {4006, 7}, {4013, 10}}));
    // Acknowledged into the middle of the long record's reference: what is
    // held by reference shrinks by exactly the referenced bytes acknowledged.
    t.ack(at_ms(10), 2500);
    EXPECT_EQ(t.s().acked_bytes(), 2500U);
    EXPECT_EQ(t.s().ref_bytes(), 2001U - (2500 - 2006 - 2));
    t.ack(at_ms(11), 4023);
    EXPECT_EQ(t.s().ref_bytes(), 0U);
    EXPECT_EQ(t.s().acked_bytes(), t.s().written_bytes());
}

TEST(StreamRecordByRef, RetransmissionRereadsTheMemory) {
    Sender t;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(t.record_by_ref(800));
    EXPECT_EQ(t.sent(at_ms(0)).size(), 3U);
    // The memory changes after the first transmission (the caller broke the
    // contract, which shows where a retransmission reads from).
    t.change(1, 400, true);
    ASSERT_EQ(t.s().next_deadline(), at_ms(1000));
    t.s().on_timer(at_ms(1000));
    EXPECT_EQ(t.sent(at_ms(1000)), (std::vector<Cut>{{0, 800}}));
    t.ack(at_ms(1010), 800);
    EXPECT_EQ(t.sent(at_ms(1010)), (std::vector<Cut>{{800, 800}, {1600, 800}}));
    EXPECT_EQ(t.s().retransmitted_segments(), 3U);
}

TEST(StreamRecordByRef, OwnRefsCopiesSoTheMemoryMayGo) {
    Sender t;
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(t.record_by_ref(600));
    ASSERT_TRUE(t.record(50));
    EXPECT_EQ(t.sent(at_ms(0)).size(), 5U);
    t.ack(at_ms(5), 900);  // half way into the second record's reference
    EXPECT_EQ(t.s().ref_bytes(), 594U - 298 + 2 * 594);
    const std::size_t held = t.s().ref_bytes();
    EXPECT_EQ(t.s().own_refs(), held);
    EXPECT_EQ(t.s().ref_bytes(), 0U);
    EXPECT_EQ(t.s().written_bytes(), 2450U);
    // The memory changes: the retransmissions carry the bytes as they were.
    t.change(1, 500, false);
    t.change(3, 10, false);
    Instant now = at_ms(5);
    for (int i = 0; i < 4 && t.s().snd_nxt() != t.s().snd_una(); ++i) {
        now = t.s().next_deadline().value_or(kInstantNever);
        t.s().on_timer(now);
        (void)t.sent(now);
    }
    t.ack(now, 1200);
    t.ack(now, 2450);
    (void)t.sent(now);
    EXPECT_EQ(t.s().acked_bytes(), 2450U);
}

TEST(StreamRecordByRef, OffloadJoinsReferencedRecords) {
    Sender t(60000, 64 * 1024, kIss, 4 * kMss);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(t.record_by_ref(700));
    // Five records of 700 in one offloaded segment (at most 4 MSS): 3500 bytes.
    EXPECT_EQ(t.sent(at_ms(0)), (std::vector<Cut>{{0, 3500}}));
}

TEST(StreamRecordByRef, ZeroWindowProbesReachTheReferencedBytes) {
    Sender t(0);
    ASSERT_TRUE(t.record_by_ref(100));
    EXPECT_EQ(t.sent(at_ms(0)), std::vector<Cut>{});
    // One byte per probe (RFC 9293 3.8.6.1): the third is the first held by reference.
    for (std::uint32_t i = 0; i < 3; ++i) {
        const Instant now = t.s().next_deadline().value_or(kInstantNever);
        t.s().on_timer(now);
        EXPECT_EQ(t.sent(now), (std::vector<Cut>{{i, 1}}));
        t.ack(now, i + 1, 0);
    }
    t.ack(at_ms(100000), 3, 5000);
    EXPECT_EQ(t.sent(at_ms(100000)), (std::vector<Cut>{{3, 97}}));
}

// ---- plain bytes held by reference (Stream::write_ref, Core::send_ref)

TEST(StreamWriteRef, PlainBytesAreCutAtTheMssAcrossReferences) {
    Sender t;
    EXPECT_EQ(t.plain(500), 500U);
    EXPECT_EQ(t.plain_by_ref(2500), 2500U);
    EXPECT_EQ(t.plain(300), 300U);
    EXPECT_EQ(t.plain_by_ref(700), 700U);
    EXPECT_EQ(t.s().ref_bytes(), 3200U);
    EXPECT_EQ(t.s().written_bytes(), 4000U);
    // No record ends: MSS-sized segments whatever the pieces they gather.
    EXPECT_EQ(t.sent(at_ms(0)),
              (std::vector<Cut>{{0, 1000}, {1000, 1000}, {2000, 1000}, {3000, 1000}}));
    t.ack(at_ms(10), 2000);
    EXPECT_EQ(t.s().ref_bytes(), 3200U - 1500);
    t.ack(at_ms(11), 4000);
    EXPECT_EQ(t.s().ref_bytes(), 0U);
    EXPECT_EQ(t.s().acked_bytes(), 4000U);
}

TEST(StreamWriteRef, TakesWhatTheSendSpaceAllows) {
    Sender t(60000, 4000);
    EXPECT_EQ(t.plain_by_ref(5000), 4000U);
    EXPECT_EQ(t.s().send_space(), 0U);
    EXPECT_EQ(t.plain(10), 0U);
    EXPECT_EQ(t.plain_by_ref(10), 0U);
    EXPECT_EQ(t.sent(at_ms(0)).size(), 4U);
    t.ack(at_ms(10), 1000);
    EXPECT_EQ(t.s().send_space(), 1000U);
    EXPECT_EQ(t.plain_by_ref(1500), 1000U);
    EXPECT_EQ(t.s().ref_bytes(), 4000U);
}

TEST(StreamWriteRef, RetransmissionRereadsTheMemory) {
    Sender t;
    EXPECT_EQ(t.plain_by_ref(2000), 2000U);
    EXPECT_EQ(t.sent(at_ms(0)).size(), 2U);
    t.change(0, 10, true);
    t.s().on_timer(at_ms(1000));
    EXPECT_EQ(t.sent(at_ms(1000)), (std::vector<Cut>{{0, 1000}}));
    EXPECT_EQ(t.s().retransmitted_segments(), 1U);
}

TEST(StreamWriteRef, OffloadCutsReferencedBytesInMssMultiples) {
    Sender t(60000, 64 * 1024, kIss, 5500);
    EXPECT_EQ(t.plain_by_ref(4000), 4000U);
    EXPECT_EQ(t.plain_by_ref(8345), 8345U);
    // As for copied plain bytes (OffloadCutsPlainBytesInMssMultiples).
    EXPECT_EQ(t.sent(at_ms(0)), (std::vector<Cut>{{0, 5000}, {5000, 5000}}));
    t.ack(at_ms(5), 10000);
    EXPECT_EQ(t.sent(at_ms(5)), (std::vector<Cut>{{10000, 2345}}));
}

}  // namespace
}  // namespace iwcm::tcp
