// Folding an idle tcp::Stream (Stream::fold, Stream(config, folded)) changes nothing the
// stream does. Read src/tcp/stream.hpp first.
//
// Two ends exchange messages with idle gaps between them over a lossy channel. Each end has
// a twin that gets the same calls and the same segments, and is folded and made again at
// every step where it is foldable. Every segment, deadline, verdict and count of a twin must
// equal its original's. Everything random comes from one seed; a failure prints it.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <queue>
#include <sstream>
#include <string>
#include <vector>

#include "io/sim/rng.hpp"
#include "tcp/channel.hpp"
#include "tcp/stream.hpp"

namespace iwcm::tcp {
namespace {

using std::chrono::milliseconds;
using test::Later;
using test::Packet;
using wire::SeqNumber;

constexpr std::uint64_t kSeeds = 300;
constexpr int kMessages = 25;  // each way
constexpr Instant kMaxTime = at_ms(3'600'000);

// What a stream shows of itself; a twin must show the same.
struct Observed {
    std::uint32_t snd_una = 0, snd_nxt = 0, snd_max = 0, rcv_nxt = 0;
    std::uint32_t snd_wnd = 0, rcv_wnd = 0, cwnd = 0, ssthresh = 0;
    std::optional<Duration> srtt;
    Duration rto{};
    std::optional<Instant> deadline;
    std::uint64_t retransmitted = 0, written = 0, acked = 0;
    std::size_t readable = 0, queued = 0;
    bool idle = false;
    friend bool operator==(const Observed&, const Observed&) = default;
};

Observed observe(const Stream& s) {
    return {s.snd_una().value(),
            s.snd_nxt().value(),
            s.snd_max().value(),
            s.rcv_nxt().value(),
            s.snd_wnd(),
            s.rcv_wnd(),
            s.cwnd(),
            s.ssthresh(),
            s.srtt(),
            s.rto(),
            s.next_deadline(),
            s.retransmitted_segments(),
            s.written_bytes(),
            s.acked_bytes(),
            s.readable_bytes(),
            s.bytes_queued(),
            s.idle()};
}

struct Totals {
    std::uint64_t folds = 0;
    std::uint64_t folds_with_rtt = 0;        // an RTT estimate crossed the fold
    std::uint64_t folds_with_keepalive = 0;  // ... a keepalive deadline did
    std::uint64_t retransmits = 0;
};

class FoldSim {
public:
    explicit FoldSim(std::uint64_t seed) : rng_(seed) {
        loss_ = static_cast<double>(rng_.below(10)) / 100.0;
        delay_ = milliseconds(1 + static_cast<std::int64_t>(rng_.below(30)));
        for (int side = 0; side < 2; ++side) {
            StreamConfig& c = config_[side];
            c.send_buffer = 16 * 1024;
            c.recv_buffer = 8 * 1024;
            c.ack_delay = rng_.chance(0.5) ? milliseconds(40) : Duration::zero();
            // Odd seeds keep connections alive: the keepalive deadline crosses folds, and
            // probes leave from streams made again from folded state.
            if (seed % 2 == 1) {
                c.keepalive = true;
                c.keepalive_idle = milliseconds(300);
                c.keepalive_interval = milliseconds(100);
            }
        }
        const std::uint16_t mss = rng_.chance(0.5) ? 536 : 1460;
        std::array<StreamInit, 2> init;
        for (int side = 0; side < 2; ++side) {
            init[side].tcb.snd_una = init[side].tcb.snd_max =
                SeqNumber(static_cast<std::uint32_t>(rng_.next_u64()));
            init[side].tcb.mss = mss;
        }
        for (int side = 0; side < 2; ++side) {
            init[side].tcb.rcv_nxt = init[1 - side].tcb.snd_una;
            init[side].tcb.snd_wnd = config_[1 - side].recv_buffer;
            s_[side].emplace(config_[side], init[side], now_);
            // The twin's sequence variables outlive it, as a connection's do its stream.
            twin_[side].emplace(config_[side], init[side], now_, &twin_tcb_[side]);
        }
    }

    // "" or what went wrong.
    std::string run(Totals& t) {
        for (int step = 0; step < 1'000'000 && now_ < kMaxTime; ++step) {
            for (int side = 0; side < 2; ++side) {
                if (auto err = app(side); !err.empty()) return err;
                if (auto err = transmit(side); !err.empty()) return err;
                if (auto err = fold(side, t); !err.empty()) return err;
            }
            if (done()) {
                for (int side = 0; side < 2; ++side)
                    t.retransmits += s(side).retransmitted_segments();
                return {};
            }
            if (auto err = advance(); !err.empty()) return err;
        }
        return "stuck";
    }

private:
    Stream& s(int side) { return *s_[side]; }
    Stream& twin(int side) { return *twin_[side]; }

    std::string differs(int side, const char* where) {
        if (observe(s(side)) == observe(twin(side))) return {};
        std::ostringstream os;
        os << "side " << side << ": the twin differs after " << where << " at "
           << now_.time_since_epoch().count() / 1000000 << " ms";
        return os.str();
    }

    std::string app(int side) {
        if (sent_[side] < kMessages && now_ >= next_send_[side]) {
            std::vector<std::byte> msg(1 + rng_.below(6000));
            for (auto& b : msg) b = static_cast<std::byte>(rng_.next_u64());
            const std::size_t a = s(side).write(msg);
            const std::size_t b = twin(side).write(msg);
            if (a != b) return "write took different counts";
            data_[side].insert(data_[side].end(), msg.begin(),
                               msg.begin() + static_cast<std::ptrdiff_t>(a));
            ++sent_[side];
            // Mostly a gap long enough for everything to be acknowledged, sometimes none.
            next_send_[side] = now_ + milliseconds(rng_.below(4) == 0 ? 0 : rng_.below(1500));
        }
        while (s(side).readable_bytes() > 0) {
            const auto r = s(side).readable();
            const auto rt = twin(side).readable();
            if (!std::equal(r.begin(), r.end(), rt.begin(), rt.end())) return "readable differs";
            got_[side].insert(got_[side].end(), r.begin(), r.end());
            s(side).consume(r.size());
            twin(side).consume(r.size());
        }
        return differs(side, "the application");
    }

    std::string transmit(int side) {
        for (;;) {
            auto a = s(side).poll_segment(now_);
            auto b = twin(side).poll_segment(now_);
            if (a.has_value() != b.has_value()) return "one polled a segment, the twin not";
            if (!a) break;
            const std::vector<std::byte> pa(a->payload.begin(), a->payload.end());
            const std::vector<std::byte> pb(b->payload.begin(), b->payload.end());
            if (a->seq != b->seq || a->ack != b->ack || a->flags != b->flags ||
                a->window != b->window || pa != pb || !a->pieces.empty()) {
                return "side " + std::to_string(side) + ": the twin sent another segment";
            }
            if (rng_.chance(loss_)) continue;
            wire_.push(
                Packet{now_ + delay_, order_++, 1 - side, a->seq, a->ack, a->flags, a->window, pa});
        }
        return differs(side, "polling");
    }

    std::string fold(int side, Totals& t) {
        if (s(side).foldable() != twin(side).foldable()) return "foldable differs";
        if (!twin(side).foldable()) return {};
        const FoldedStream f = twin(side).fold();
        const Tcb tcb = twin_tcb_[side];
        twin_[side].emplace(config_[side], f, twin_tcb_[side]);
        if (!(twin_tcb_[side] == tcb)) return "unfolding moved the sequence variables";
        if (!(twin(side).fold() == f)) return "folding again gives another state";
        ++t.folds;
        if (f.has_srtt) ++t.folds_with_rtt;
        if (f.keepalive_at != kInstantNever) ++t.folds_with_keepalive;
        return differs(side, "a fold");
    }

    std::string advance() {
        Instant next = kInstantNever;
        if (!wire_.empty()) next = wire_.top().at;
        for (int side = 0; side < 2; ++side) {
            if (auto d = s(side).next_deadline()) next = std::min(next, *d);
            if (sent_[side] < kMessages) next = std::min(next, next_send_[side]);
        }
        if (next == kInstantNever) return "nothing left to happen";
        now_ = std::max(now_, next);
        while (!wire_.empty() && wire_.top().at <= now_) {
            const Packet p = wire_.top();
            wire_.pop();
            const SegmentIn in{p.seq, p.ack, p.flags, p.window, p.payload};
            const Arrival a = s(p.to).on_segment(now_, in);
            const Arrival b = twin(p.to).on_segment(now_, in);
            s(p.to).check_invariants();
            twin(p.to).check_invariants();
            if (a.verdict != b.verdict || a.acked != b.acked || a.readable != b.readable ||
                a.fin != b.fin) {
                return "the twin took a segment otherwise";
            }
            if (auto err = differs(p.to, "a segment"); !err.empty()) return err;
        }
        for (int side = 0; side < 2; ++side) {
            const auto d = s(side).next_deadline();
            if (!d || *d > now_) continue;
            if (s(side).on_timer(now_) != twin(side).on_timer(now_)) return "timeouts differ";
            if (auto err = differs(side, "a timer"); !err.empty()) return err;
        }
        return {};
    }

    bool done() const {
        for (int side = 0; side < 2; ++side) {
            if (sent_[side] < kMessages || got_[1 - side].size() != data_[side].size()) {
                return false;
            }
        }
        return wire_.empty() && got_[0] == data_[1] && got_[1] == data_[0];
    }

    io::Rng rng_;
    double loss_ = 0;
    Duration delay_{};
    std::array<StreamConfig, 2> config_;
    Instant now_ = at_ms(0);
    std::array<std::optional<Stream>, 2> s_;
    std::array<std::optional<Stream>, 2> twin_;
    std::array<Tcb, 2> twin_tcb_;
    std::array<int, 2> sent_{};
    std::array<Instant, 2> next_send_{};
    std::array<std::vector<std::byte>, 2> data_;
    std::array<std::vector<std::byte>, 2> got_;
    std::priority_queue<Packet, std::vector<Packet>, Later> wire_;
    std::uint64_t order_ = 0;
};

TEST(StreamFold, AFoldedTwinSendsAndCountsWhatItsOriginalDoes) {
    Totals t;
    for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
        FoldSim sim(seed);
        const std::string err = sim.run(t);
        ASSERT_EQ(err, "") << "seed " << seed;
    }
    std::printf("folds %llu, with an RTT %llu, with keepalive %llu, retransmits %llu\n",
                static_cast<unsigned long long>(t.folds),
                static_cast<unsigned long long>(t.folds_with_rtt),
                static_cast<unsigned long long>(t.folds_with_keepalive),
                static_cast<unsigned long long>(t.retransmits));
    // The run folded often, across RTT estimates and keepalive deadlines, and lost segments.
    EXPECT_GT(t.folds, kSeeds * 10);
    EXPECT_GT(t.folds_with_rtt, kSeeds * 5);
    EXPECT_GT(t.folds_with_keepalive, kSeeds * 2);
    EXPECT_GT(t.retransmits, kSeeds);
}

StreamInit idle_init() {
    StreamInit i;
    i.tcb.snd_una = i.tcb.snd_max = SeqNumber(1000);
    i.tcb.rcv_nxt = SeqNumber(50000);
    i.tcb.snd_wnd = 60000;
    i.tcb.mss = 1000;
    return i;
}

const StreamConfig& plain_config() {
    static const StreamConfig c;
    return c;
}

TEST(StreamFold, AStreamWithBytesToSendOrReadOrAFinDoesNotFold) {
    const std::vector<std::byte> bytes(10);
    {
        Tcb tcb;  // a stream folds only on a Tcb that outlives it
        Stream s(plain_config(), idle_init(), at_ms(0), &tcb);
        EXPECT_TRUE(s.foldable());
        s.write(bytes);  // queued, not sent
        EXPECT_FALSE(s.foldable());
        ASSERT_TRUE(s.poll_segment(at_ms(0)).has_value());  // in flight
        EXPECT_FALSE(s.foldable());
        s.on_segment(
            at_ms(10),
            SegmentIn{SeqNumber(50000), SeqNumber(1010), wire::tcp_flags::kAck, 60000, {}});
        EXPECT_TRUE(s.foldable());  // acknowledged, with an RTT sample
        EXPECT_TRUE(s.fold().has_srtt);
    }
    {
        Stream s(plain_config(), idle_init(), at_ms(0));
        s.on_segment(at_ms(0),
                     SegmentIn{SeqNumber(50000), SeqNumber(1000),
                               wire::tcp_flags::kAck | wire::tcp_flags::kPsh, 60000, bytes});
        EXPECT_FALSE(s.foldable());  // unread, and an ACK owed
        s.consume(bytes.size());
        EXPECT_FALSE(s.foldable());  // the ACK is still owed, delayed
        EXPECT_EQ(s.next_deadline(), at_ms(40));
        s.on_timer(at_ms(40));
        ASSERT_TRUE(s.poll_segment(at_ms(40)).has_value());
        EXPECT_TRUE(s.foldable());
    }
    {
        Stream s(plain_config(), idle_init(), at_ms(0));
        s.close();
        EXPECT_FALSE(s.foldable());
    }
    {
        StreamInit held = idle_init();
        held.hold_data_until = at_ms(500);
        Stream s(plain_config(), held, at_ms(0));
        EXPECT_FALSE(s.foldable());  // waiting for the peer's first byte
    }
}

}  // namespace
}  // namespace iwcm::tcp
