// Throughput of a tcp::Stream sender through a lossy channel: one way bulk
// data over a link with a short delay (a LAN), random loss both ways, the
// reader always reading. Read src/tcp/stream.hpp first.
//
// The figure printed is bytes per virtual second; the assertions are what a
// sound sender guarantees whatever the loss draws: every byte arrives in
// order, no sub-MSS segment goes out before the last one (sender-side
// silly-window avoidance, RFC 9293 3.8.6.2.1), and few losses wait for the
// retransmission timer (RFC 3042 Limited Transmit, tail loss probes).
// With records (write_record) the sender is also checked segment by segment:
// no segment carries bytes of two records, and a record of at most an MSS
// always goes whole. IWCM_LOSS_SEEDS=<n> changes the number of seeds
// (default 20).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <queue>
#include <vector>

#include "io/sim/rng.hpp"
#include "tcp/channel.hpp"
#include "tcp/stream.hpp"

namespace iwcm::tcp {
namespace {

using wire::SeqNumber;

struct Link {
    double loss = 0;
    Duration delay{};
    std::uint32_t buffer = 0;
    std::uint16_t mss = 1460;
    std::size_t bytes = 0;
    std::uint32_t record_max = 0;  // 0: plain write(); else records of 1..record_max bytes
};

// What one run measured.
struct Figures {
    std::size_t delivered = 0;
    Duration elapsed{};
    std::uint64_t segments = 0;  // data segments the sender sent
    std::uint64_t retransmitted = 0;
    std::uint64_t timeouts = 0;        // timer expiries that went back to SND.UNA
    std::uint64_t short_segments = 0;  // new data below the MSS, not the last bytes
    std::uint64_t crossing = 0;        // segments with bytes of two records
    std::uint64_t split = 0;           // segments with part of a record of at most an MSS
    bool in_order = true;
};

using test::Later;
using test::Packet;

class OneWay {
public:
    OneWay(std::uint64_t seed, const Link& link) : rng_(seed), link_(link) {
        data_.resize(link.bytes);
        for (auto& b : data_) b = static_cast<std::byte>(rng_.next_u64());
        config_.send_buffer = config_.recv_buffer = link.buffer;
        StreamInit a;
        a.tcb.snd_una = a.tcb.snd_max = SeqNumber(static_cast<std::uint32_t>(rng_.next_u64()));
        a.tcb.rcv_nxt = SeqNumber(static_cast<std::uint32_t>(rng_.next_u64()));
        a.tcb.mss = link.mss;
        a.tcb.rcv_wscale = a.tcb.snd_wscale = 3;
        a.tcb.snd_wnd = link.buffer;
        StreamInit b = a;
        std::swap(b.tcb.snd_una, b.tcb.rcv_nxt);
        b.tcb.snd_max = b.tcb.snd_una;
        first_seq_ = a.tcb.snd_una;
        streams_[0].emplace(config_, a, now_);
        streams_[1].emplace(config_, b, now_);
    }

    Figures run() {
        Figures fig;
        for (int step = 0; step < 10'000'000 && !done(); ++step) {
            feed();
            for (int side = 0; side < 2; ++side) transmit(side, fig);
            if (!advance(fig)) break;
        }
        fig.delivered = received_.size();
        fig.in_order = received_ == data_;
        fig.elapsed = now_ - at_ms(0);
        return fig;
    }

private:
    bool done() const { return received_.size() == data_.size(); }

    void feed() {
        Stream& s = *streams_[0];
        if (link_.record_max == 0) written_ += s.write(std::span(data_).subspan(written_));
        while (link_.record_max > 0 && written_ < data_.size()) {
            if (next_record_ == 0) next_record_ = 1 + rng_.below(link_.record_max);
            const std::size_t n = std::min(next_record_, data_.size() - written_);
            if (!s.write_record(std::span(data_).subspan(written_, n))) break;
            written_ += n;
            record_ends_.push_back(written_);
            next_record_ = 0;
        }
        Stream& r = *streams_[1];
        while (r.readable_bytes() > 0) {
            const auto v = r.readable();
            received_.insert(received_.end(), v.begin(), v.end());
            r.consume(v.size());
        }
    }

    void transmit(int side, Figures& fig) {
        while (auto seg = streams_[side]->poll_segment(now_)) {
            streams_[side]->check_invariants();
            if (side == 0 && !seg->payload.empty()) {
                ++fig.segments;
                const auto off = static_cast<std::size_t>(seg->seq - first_seq_);
                const bool last = off + seg->payload.size() == data_.size();
                const bool fresh = seg->seq >= sent_end_;
                if (fresh && !last && seg->payload.size() < link_.mss) ++fig.short_segments;
                if (fresh) sent_end_ = seg->seq + static_cast<std::uint32_t>(seg->payload.size());
                if (link_.record_max > 0) check_record(off, seg->payload.size(), fig);
            }
            if (rng_.chance(link_.loss)) continue;
            wire_.push(Packet{now_ + link_.delay, order_++, 1 - side, seg->seq, seg->ack,
                              seg->flags, seg->window,
                              std::vector<std::byte>(seg->payload.begin(), seg->payload.end())});
        }
    }

    // The segment [off, off + len) of a record stream: inside one record,
    // and the whole record when it is at most an MSS long.
    void check_record(std::size_t off, std::size_t len, Figures& fig) const {
        const auto it = std::upper_bound(record_ends_.begin(), record_ends_.end(), off);
        if (it == record_ends_.end()) {
            ++fig.crossing;  // bytes past the last record: never written
            return;
        }
        const std::size_t start = it == record_ends_.begin() ? 0 : *(it - 1);
        if (off + len > *it) ++fig.crossing;
        if (*it - start <= link_.mss && (off != start || off + len != *it)) ++fig.split;
    }

    bool advance(Figures& fig) {
        Instant next = wire_.empty() ? kInstantNever : wire_.top().at;
        for (auto& s : streams_) {
            if (auto d = s->next_deadline()) next = std::min(next, *d);
        }
        if (next == kInstantNever) return false;
        now_ = std::max(now_, next);
        while (!wire_.empty() && wire_.top().at <= now_) {
            const Packet p = wire_.top();
            wire_.pop();
            streams_[p.to]->on_segment(now_, {p.seq, p.ack, p.flags, p.window, p.payload});
            // Release builds leave the stream's own checks out: every step is checked here.
            streams_[p.to]->check_invariants();
            // As the core does: what a segment calls for goes out before the
            // next one is read (one duplicate ACK per out-of-order segment).
            feed();
            transmit(p.to, fig);
        }
        for (int side = 0; side < 2; ++side) {
            Stream& s = *streams_[side];
            const auto d = s.next_deadline();
            if (!d || *d > now_) continue;
            const bool flying = s.snd_nxt() > s.snd_una();
            if (s.on_timer(now_) == Stream::Timeout::kGiveUp) return false;
            s.check_invariants();
            if (side == 0 && flying && s.snd_nxt() == s.snd_una()) ++fig.timeouts;
        }
        return true;
    }

    io::Rng rng_;
    Link link_;
    Instant now_ = at_ms(0);
    StreamConfig config_;  // both streams', kept by reference: before them
    std::array<std::optional<Stream>, 2> streams_;
    std::vector<std::byte> data_;
    std::vector<std::byte> received_;
    std::size_t written_ = 0;
    std::size_t next_record_ = 0;           // the size of the record waiting for room
    std::vector<std::size_t> record_ends_;  // offsets after each record written
    SeqNumber first_seq_;
    SeqNumber sent_end_;
    std::priority_queue<Packet, std::vector<Packet>, Later> wire_;
    std::uint64_t order_ = 0;
};

std::uint64_t seeds() {
    const char* v = std::getenv("IWCM_LOSS_SEEDS");
    return v != nullptr ? std::strtoull(v, nullptr, 10) : 20;
}

// A LAN (100 us each way) losing 5 % of the segments each way, 256 KiB buffers.
Link lan_at_five_percent() {
    Link link;
    link.loss = 0.05;
    link.delay = std::chrono::microseconds(100);
    link.buffer = 256 * 1024;
    return link;
}

// Runs `link` with every seed, each delivering all bytes in order and (with
// records) never crossing or splitting one; returns the figures summed.
Figures run_seeds(const Link& link) {
    Figures sum;
    for (std::uint64_t seed = 1; seed <= seeds(); ++seed) {
        const Figures f = OneWay(seed, link).run();
        EXPECT_EQ(f.delivered, link.bytes) << "seed " << seed;
        EXPECT_TRUE(f.in_order) << "seed " << seed;
        EXPECT_EQ(f.crossing, 0U) << "seed " << seed;
        EXPECT_EQ(f.split, 0U) << "seed " << seed;
        if (f.delivered != link.bytes || !f.in_order) break;
        sum.elapsed += f.elapsed;
        sum.segments += f.segments;
        sum.retransmitted += f.retransmitted;
        sum.timeouts += f.timeouts;
        sum.short_segments += f.short_segments;
        sum.crossing += f.crossing;
        sum.split += f.split;
    }
    return sum;
}

TEST(StreamLoss, FivePercentEachWayOnALan) {
    Link link = lan_at_five_percent();
    link.bytes = 5 * 1000 * 1000;
    const std::uint64_t n = seeds();
    const Figures sum = run_seeds(link);
    // No short segment before the last bytes (without sender-side silly
    // window avoidance: 1845 in these seeds), and fewer than one timeout per
    // hundred data segments (without limited transmit, early retransmit and
    // loss probes: 884 timeouts in 74702 segments).
    EXPECT_EQ(sum.short_segments, 0U);
    EXPECT_LT(sum.timeouts * 100, sum.segments);
    const double secs = std::chrono::duration<double>(sum.elapsed).count();
    std::printf(
        "%llu seeds of %zu bytes at 5 %% loss, 100 us: %.2f MB per virtual second, "
        "%llu data segments, %llu timeouts, %llu short segments\n",
        static_cast<unsigned long long>(n), link.bytes,
        static_cast<double>(link.bytes) * static_cast<double>(n) / secs / 1e6,
        static_cast<unsigned long long>(sum.segments),
        static_cast<unsigned long long>(sum.timeouts),
        static_cast<unsigned long long>(sum.short_segments));
}

TEST(StreamLoss, RecordsStayWholeAtFivePercentEachWay) {
    Link link = lan_at_five_percent();
    link.bytes = 1000 * 1000;
    // Mostly records up to an MSS (MPA FPDUs), some longer ones.
    link.record_max = 1700;
    const std::uint64_t n = seeds();
    const Figures sum = run_seeds(link);
    std::printf(
        "%llu seeds of %zu bytes in records of 1..%u bytes at 5 %% loss: "
        "%llu data segments, %llu timeouts, %llu crossing, %llu split\n",
        static_cast<unsigned long long>(n), link.bytes, link.record_max,
        static_cast<unsigned long long>(sum.segments),
        static_cast<unsigned long long>(sum.timeouts),
        static_cast<unsigned long long>(sum.crossing), static_cast<unsigned long long>(sum.split));
}

}  // namespace
}  // namespace iwcm::tcp
