// Tests of the deterministic random numbers (src/io/sim/rng.hpp) and the simulated
// Ethernet segment (src/io/sim/sim.hpp). Read sim.hpp's file comment first: these
// tests check its model (collect / advance / dispatch), its fault semantics
// and replay by seed, using small fake hosts instead of iwcm::Core.
#include "io/sim/sim.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <type_traits>
#include <vector>

#include "io/sim/rng.hpp"
#include "iwcm/core.hpp"

namespace iwcm::io {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using Bytes = std::vector<std::byte>;

// The adapter must compile against the real core's header; constructing it
// would need the core library, which these tests deliberately do not use.
static_assert(std::is_base_of_v<SimHost, CoreHost>);
static_assert(std::is_constructible_v<CoreHost, Core&>);
static_assert(!std::is_copy_constructible_v<SimNetwork>);

constexpr std::uint16_t kTestEtherType = 0x88B5;  // IEEE 802 local experimental

MacAddr mac_of(std::uint8_t n) {
    return {{0x02, 0x00, 0x00, 0x00, 0x00, n}};
}

// An Ethernet frame whose payload starts with a 32-bit tag, padded to 60 bytes.
Bytes make_frame(MacAddr dst, MacAddr src, std::uint32_t tag, std::size_t payload_len = 46) {
    Bytes f;
    for (auto b : dst.bytes) f.push_back(std::byte{b});
    for (auto b : src.bytes) f.push_back(std::byte{b});
    f.push_back(std::byte{kTestEtherType >> 8});
    f.push_back(std::byte{kTestEtherType & 0xff});
    for (int shift = 24; shift >= 0; shift -= 8) f.push_back(std::byte(tag >> shift));
    for (std::size_t i = 4; i < payload_len; ++i) f.push_back(std::byte(i * 7 + tag));
    return f;
}

std::uint32_t tag_of(std::span<const std::byte> f) {
    EXPECT_GE(f.size(), 18u);
    std::uint32_t tag = 0;
    for (std::size_t i = 14; i < 18; ++i) tag = (tag << 8) | std::to_integer<std::uint32_t>(f[i]);
    return tag;
}

struct Received {
    Instant at;
    Bytes bytes;
};

// A scriptable host: an outbox, a set of deadlines, and hooks called on
// receive and on timer. It records everything it sees.
class FakeHost final : public SimHost {
public:
    using OnReceive = std::function<void(FakeHost&, Instant, std::span<const std::byte>)>;
    using OnTimer = std::function<void(FakeHost&, Instant)>;

    explicit FakeHost(MacAddr mac) : mac_(mac) {}

    MacAddr mac() const override { return mac_; }
    void receive(Instant now, std::span<const std::byte> frame) override {
        received.push_back({now, Bytes(frame.begin(), frame.end())});
        if (on_receive) on_receive(*this, now, frame);
    }
    void on_timer(Instant now) override {
        EXPECT_FALSE(deadlines_.empty());
        EXPECT_LE(*deadlines_.begin(), now);
        while (!deadlines_.empty() && *deadlines_.begin() <= now)
            deadlines_.erase(deadlines_.begin());
        fired.push_back(now);
        if (on_tick) on_tick(*this, now);
    }
    std::optional<Instant> next_deadline() const override {
        if (deadlines_.empty()) return std::nullopt;
        return *deadlines_.begin();
    }
    std::optional<std::span<const std::byte>> poll_transmit() override {
        if (outbox_.empty()) return std::nullopt;
        current_ = std::move(outbox_.front());
        outbox_.pop_front();
        return std::span<const std::byte>(current_);
    }

    void send(Bytes frame) { outbox_.push_back(std::move(frame)); }
    void send_to(MacAddr dst, std::uint32_t tag) { send(make_frame(dst, mac_, tag)); }
    void schedule(Instant at) { deadlines_.insert(at); }

    std::vector<std::uint32_t> received_tags() const {
        std::vector<std::uint32_t> tags;
        for (const auto& r : received) tags.push_back(tag_of(r.bytes));
        return tags;
    }

    OnReceive on_receive;
    OnTimer on_tick;
    std::vector<Received> received;
    std::vector<Instant> fired;

private:
    MacAddr mac_;
    std::deque<Bytes> outbox_;
    Bytes current_;
    std::multiset<Instant> deadlines_;
};

// FNV-1a over every field of every record: the fingerprint of a run.
struct RecordHasher {
    std::uint64_t hash = 0xcbf29ce484222325ULL;
    std::size_t records = 0;

    void mix(std::uint64_t v) {
        for (int i = 0; i < 8; ++i) {
            hash ^= (v >> (8 * i)) & 0xff;
            hash *= 0x100000001b3ULL;
        }
    }
    void operator()(const FrameRecord& r) {
        ++records;
        mix(static_cast<std::uint64_t>(r.sent.time_since_epoch().count()));
        mix(static_cast<std::uint64_t>(r.delivered.time_since_epoch().count()));
        mix(r.from);
        mix(r.to);
        mix(static_cast<std::uint64_t>(r.fate));
        mix(r.bytes.size());
        for (auto b : r.bytes) mix(std::to_integer<std::uint64_t>(b));
    }
};

// ---------------------------------------------------------------- Rng

TEST(Rng, GoldenValuesPinTheAlgorithm) {
    // Computed independently (Python) from the published splitmix64 and
    // xoshiro256** definitions: any standard library must give these.
    std::uint64_t sm = 0;
    EXPECT_EQ(splitmix64(sm), 0xe220a8397b1dcdafULL);
    Rng zero(0);
    EXPECT_EQ(zero.next_u64(), 0x99ec5f36cb75f2b4ULL);
    EXPECT_EQ(zero.next_u64(), 0xbf6e1f784956452aULL);
    EXPECT_EQ(zero.next_u64(), 0x1a5f849d4933e6e0ULL);
    EXPECT_EQ(zero.next_u64(), 0x6aa594f1262d2d2cULL);
    Rng answer(42);
    EXPECT_EQ(answer.next_u64(), 0x15780b2e0c2ec716ULL);
    EXPECT_EQ(answer.next_u64(), 0x6104d9866d113a7eULL);
}

TEST(Rng, SameSeedSameStreamDifferentSeedDifferentStream) {
    Rng a(1234), b(1234), c(1235);
    int equal_to_c = 0;
    for (int i = 0; i < 1000; ++i) {
        const std::uint64_t va = a.next_u64();
        EXPECT_EQ(va, b.next_u64());
        if (va == c.next_u64()) ++equal_to_c;
    }
    EXPECT_EQ(equal_to_c, 0);
}

TEST(Rng, BelowStaysInBounds) {
    Rng rng(7);
    const std::uint64_t big = (std::uint64_t{1} << 63) + 1;  // worst case for rejection
    for (const std::uint64_t n :
         {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{3}, std::uint64_t{7},
          std::uint64_t{1000}, big, std::numeric_limits<std::uint64_t>::max()}) {
        std::uint64_t max_seen = 0;
        for (int i = 0; i < 10'000; ++i) {
            const std::uint64_t v = rng.below(n);
            ASSERT_LT(v, n) << "n=" << n;
            max_seen = std::max(max_seen, v);
        }
        if (n == 1) {
            EXPECT_EQ(max_seen, 0u);
        }
        if (n == 7) {
            EXPECT_EQ(max_seen, 6u);
        }
        if (n == big) {
            EXPECT_GE(max_seen, std::uint64_t{1} << 62);
        }
    }
}

TEST(Rng, BelowIsRoughlyUniform) {
    Rng rng(99);
    std::array<int, 10> buckets{};
    constexpr int kDraws = 100'000;
    for (int i = 0; i < kDraws; ++i) ++buckets[rng.below(10)];
    // Each bucket: mean 10000, standard deviation about 95; 500 is over 5 sigma.
    for (int count : buckets) EXPECT_NEAR(count, kDraws / 10, 500);
}

TEST(Rng, ChanceFrequencyMatchesProbability) {
    Rng rng(2024);
    constexpr int kDraws = 100'000;
    int hits = 0;
    for (int i = 0; i < kDraws; ++i) hits += rng.chance(0.3) ? 1 : 0;
    // Standard deviation of the frequency: sqrt(0.21 / 1e5) = 0.00145.
    EXPECT_NEAR(static_cast<double>(hits) / kDraws, 0.3, 0.01);
    for (int i = 0; i < 1000; ++i) {
        EXPECT_FALSE(rng.chance(0.0));
        EXPECT_TRUE(rng.chance(1.0));
    }
}

TEST(Rng, UnitIsInHalfOpenRangeWithMeanOneHalf) {
    Rng rng(5);
    double sum = 0;
    double lo = 1, hi = 0;
    constexpr int kDraws = 100'000;
    for (int i = 0; i < kDraws; ++i) {
        const double u = rng.unit();
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
        sum += u;
        lo = std::min(lo, u);
        hi = std::max(hi, u);
    }
    EXPECT_NEAR(sum / kDraws, 0.5, 0.005);  // sigma is 0.0009
    EXPECT_LT(lo, 0.001);
    EXPECT_GT(hi, 0.999);
}

TEST(Rng, ForkIsDeterministicAndIndependent) {
    Rng parent_a(77), parent_b(77);
    Rng child_a = parent_a.fork();
    Rng child_b = parent_b.fork();
    int child_equals_parent = 0;
    for (int i = 0; i < 1000; ++i) {
        const std::uint64_t ca = child_a.next_u64();
        EXPECT_EQ(ca, child_b.next_u64());
        if (ca == parent_a.next_u64()) ++child_equals_parent;
    }
    EXPECT_EQ(child_equals_parent, 0);
    // The fork advanced the parent by exactly one draw.
    Rng fresh(77);
    fresh.next_u64();
    Rng parent_c(77);
    (void)parent_c.fork();
    EXPECT_EQ(fresh.next_u64(), parent_c.next_u64());
}

// ---------------------------------------------------------------- SimNetwork

// Two hosts, A (id 0) and B (id 1); B answers every frame with tag + 1000.
struct PingPong {
    FakeHost a{mac_of(1)};
    FakeHost b{mac_of(2)};
    SimNetwork net;

    explicit PingPong(std::uint64_t seed = 1, Instant start = kInstantZero) : net(seed, start) {
        EXPECT_EQ(net.add_host(a), 0u);
        EXPECT_EQ(net.add_host(b), 1u);
        b.on_receive = [](FakeHost& self, Instant, std::span<const std::byte> f) {
            self.send_to(mac_of(1), tag_of(f) + 1000);
        };
    }
};

TEST(SimNetwork, PingPongArrivesAtExactLatency) {
    PingPong p;
    std::vector<FrameRecord> records;
    p.net.set_observer([&](const FrameRecord& r) { records.push_back(r); });
    p.a.send_to(mac_of(2), 1);
    const std::size_t steps = p.net.run();
    EXPECT_GT(steps, 0u);
    EXPECT_LT(steps, 10u);

    ASSERT_EQ(p.b.received.size(), 1u);
    EXPECT_EQ(p.b.received[0].at, kInstantZero + microseconds(50));
    EXPECT_EQ(tag_of(p.b.received[0].bytes), 1u);
    EXPECT_EQ(p.b.received[0].bytes, make_frame(mac_of(2), mac_of(1), 1));
    ASSERT_EQ(p.a.received.size(), 1u);
    EXPECT_EQ(p.a.received[0].at, kInstantZero + microseconds(100));
    EXPECT_EQ(tag_of(p.a.received[0].bytes), 1001u);
    EXPECT_EQ(p.net.now(), kInstantZero + microseconds(100));

    ASSERT_EQ(records.size(), 2u);
    EXPECT_EQ(records[0].from, 0u);
    EXPECT_EQ(records[0].to, 1u);
    EXPECT_EQ(records[0].sent, kInstantZero);
    EXPECT_EQ(records[0].delivered, kInstantZero + microseconds(50));
    EXPECT_EQ(records[0].fate, FrameFate::kDelivered);
    EXPECT_EQ(records[1].from, 1u);
    EXPECT_EQ(records[1].sent, kInstantZero + microseconds(50));
    EXPECT_EQ(records[1].delivered, kInstantZero + microseconds(100));

    const auto& c = p.net.counters();
    EXPECT_EQ(c.sent, 2u);
    EXPECT_EQ(c.delivered, 2u);
    EXPECT_EQ(c.lost + c.duplicated + c.corrupted + c.reordered + c.runts + c.unroutable, 0u);
    EXPECT_EQ(p.net.in_flight(), 0u);
    EXPECT_FALSE(p.net.step());
}

TEST(SimNetwork, RepeatedPingPongFromNonZeroStartAndOtherLatency) {
    PingPong p(1, at_ms(1000));
    p.net.set_faults(LinkFaults{.latency = microseconds(7)});
    // A answers each pong with the next ping until ten rounds are done.
    p.a.on_receive = [](FakeHost& self, Instant, std::span<const std::byte> f) {
        const std::uint32_t round = tag_of(f) - 1000;
        if (round < 10) self.send_to(mac_of(2), round + 1);
    };
    p.a.send_to(mac_of(2), 1);
    EXPECT_LT(p.net.run(), 100u);
    ASSERT_EQ(p.a.received.size(), 10u);
    for (std::size_t k = 0; k < 10; ++k) {
        EXPECT_EQ(p.b.received[k].at, at_ms(1000) + microseconds(14 * k + 7));
        EXPECT_EQ(p.a.received[k].at, at_ms(1000) + microseconds(14 * k + 14));
    }
}

TEST(SimNetwork, TotalLossDeliversNothing) {
    PingPong p;
    p.net.set_faults(LinkFaults{.loss = 1.0});
    std::size_t lost_records = 0;
    p.net.set_observer([&](const FrameRecord& r) {
        EXPECT_EQ(r.fate, FrameFate::kLost);
        EXPECT_EQ(r.delivered, kInstantNever);
        ++lost_records;
    });
    for (std::uint32_t i = 0; i < 100; ++i) p.a.send_to(mac_of(2), i);
    p.net.run();
    EXPECT_TRUE(p.b.received.empty());
    EXPECT_TRUE(p.a.received.empty());
    EXPECT_EQ(p.net.counters().sent, 100u);
    EXPECT_EQ(p.net.counters().lost, 100u);
    EXPECT_EQ(p.net.counters().delivered, 0u);
    EXPECT_EQ(lost_records, 100u);
    EXPECT_EQ(p.net.now(), kInstantZero);  // nothing ever arrived: time did not move
}

TEST(SimNetwork, PartialLossLosesAboutTheRightShare) {
    FakeHost a(mac_of(1)), b(mac_of(2));
    SimNetwork net(31);
    net.add_host(a);
    net.add_host(b);
    net.set_faults(LinkFaults{.loss = 0.25});
    for (std::uint32_t i = 0; i < 4000; ++i) a.send_to(mac_of(2), i);
    net.run();
    const auto& c = net.counters();
    EXPECT_EQ(c.lost + c.delivered, 4000u);
    EXPECT_EQ(b.received.size(), c.delivered);
    EXPECT_NEAR(static_cast<double>(c.lost) / 4000.0, 0.25, 0.04);  // sigma 0.007
}

TEST(SimNetwork, DuplicationDeliversEveryFrameTwice) {
    FakeHost a(mac_of(1)), b(mac_of(2));
    SimNetwork net(3);
    net.add_host(a);
    net.add_host(b);
    net.set_faults(LinkFaults{.duplicate = 1.0});
    std::map<FrameFate, int> fates;
    net.set_observer([&](const FrameRecord& r) { ++fates[r.fate]; });
    for (std::uint32_t i = 0; i < 50; ++i) a.send_to(mac_of(2), i);
    net.run();
    ASSERT_EQ(b.received.size(), 100u);
    std::map<std::uint32_t, int> copies;
    for (const auto& r : b.received) {
        ++copies[tag_of(r.bytes)];
        EXPECT_EQ(r.bytes, make_frame(mac_of(2), mac_of(1), tag_of(r.bytes)));
    }
    ASSERT_EQ(copies.size(), 50u);
    for (const auto& [tag, n] : copies) EXPECT_EQ(n, 2) << "tag " << tag;
    EXPECT_EQ(net.counters().duplicated, 50u);
    EXPECT_EQ(net.counters().delivered, 100u);
    EXPECT_EQ(fates[FrameFate::kDelivered], 50);
    EXPECT_EQ(fates[FrameFate::kDuplicated], 50);
}

TEST(SimNetwork, CorruptionFlipsOneToThreeBitsOfOneByte) {
    FakeHost a(mac_of(1)), b(mac_of(2));
    SimNetwork net(11);
    net.add_host(a);
    net.add_host(b);
    net.set_faults(LinkFaults{.corrupt = 1.0});
    for (std::uint32_t i = 0; i < 300; ++i) a.send_to(mac_of(2), i);
    net.run();
    // Frames arrive in order (no reorder fault), so the i-th is tag i's.
    ASSERT_EQ(b.received.size(), 300u);
    std::set<int> flip_counts;
    for (std::uint32_t i = 0; i < 300; ++i) {
        const Bytes sent = make_frame(mac_of(2), mac_of(1), i);
        const Bytes& got = b.received[i].bytes;
        ASSERT_EQ(got.size(), sent.size());
        int bytes_differing = 0;
        for (std::size_t k = 0; k < sent.size(); ++k) {
            const auto diff = std::to_integer<unsigned>(sent[k] ^ got[k]);
            if (diff == 0) continue;
            ++bytes_differing;
            flip_counts.insert(std::popcount(diff));
        }
        EXPECT_EQ(bytes_differing, 1) << "frame " << i;
    }
    EXPECT_EQ(flip_counts, (std::set<int>{1, 2, 3}));
    EXPECT_EQ(net.counters().corrupted, 300u);
}

// A sends tags 0..n-1, one every `gap`, driven by its own timer.
void schedule_stream(FakeHost& a, std::uint32_t n, Duration gap) {
    a.schedule(kInstantZero);
    a.on_tick = [n, gap, next = std::uint32_t{0}](FakeHost& self, Instant now) mutable {
        self.send_to(mac_of(2), next++);
        if (next < n) self.schedule(now + gap);
    };
}

std::size_t inversions(const std::vector<std::uint32_t>& tags) {
    std::size_t count = 0;
    for (std::size_t i = 1; i < tags.size(); ++i) count += tags[i] < tags[i - 1] ? 1 : 0;
    return count;
}

TEST(SimNetwork, ReorderingLetsLaterFramesOvertake) {
    FakeHost a(mac_of(1)), b(mac_of(2));
    SimNetwork net(17);
    net.add_host(a);
    net.add_host(b);
    net.set_faults(LinkFaults{.reorder = 0.3, .latency = microseconds(50)});
    std::vector<FrameRecord> records;
    net.set_observer([&](const FrameRecord& r) { records.push_back(r); });
    schedule_stream(a, 200, microseconds(10));
    EXPECT_LT(net.run(), 10'000u);
    ASSERT_EQ(b.received.size(), 200u);
    EXPECT_GT(inversions(b.received_tags()), 10u);
    EXPECT_GT(net.counters().reordered, 30u);
    EXPECT_LT(net.counters().reordered, 90u);
    for (const auto& r : records) {
        const Duration delay = r.delivered - r.sent;
        if (r.fate == FrameFate::kReordered) {
            EXPECT_GT(delay, microseconds(50));
            EXPECT_LE(delay, microseconds(250));
        } else {
            EXPECT_EQ(delay, microseconds(50));
        }
    }
}

TEST(SimNetwork, JitterAloneKeepsFifoOrderWithinBounds) {
    FakeHost a(mac_of(1)), b(mac_of(2));
    SimNetwork net(19);
    net.add_host(a);
    net.add_host(b);
    net.set_faults(LinkFaults{.latency = microseconds(50), .jitter = microseconds(40)});
    std::vector<Duration> delays;
    net.set_observer([&](const FrameRecord& r) { delays.push_back(r.delivered - r.sent); });
    schedule_stream(a, 300, microseconds(5));
    net.run();
    ASSERT_EQ(b.received.size(), 300u);
    EXPECT_EQ(inversions(b.received_tags()), 0u);
    const auto [lo, hi] = std::minmax_element(delays.begin(), delays.end());
    EXPECT_GE(*lo, microseconds(50));
    // Jitter is at most 40 us; holding a frame behind a jittered predecessor
    // adds less than that predecessor's own jitter.
    EXPECT_LE(*hi, microseconds(90));
    EXPECT_GT(*hi - *lo, microseconds(20));  // jitter did happen
    for (std::size_t i = 1; i < b.received.size(); ++i)
        EXPECT_LE(b.received[i - 1].at, b.received[i].at);
}

TEST(SimNetwork, DeadlinesFireAtExactVirtualTimes) {
    FakeHost a(mac_of(1));
    SimNetwork net(1, at_ms(10));
    net.add_host(a);
    a.schedule(at_ms(11));
    a.schedule(at_ms(15));
    a.schedule(at_ms(15));  // two entries at one instant: one on_timer call
    a.schedule(at_ms(10) + std::chrono::seconds(2));
    a.schedule(at_ms(3));  // already past: fires at once, time does not go back
    const std::size_t steps = net.run();
    EXPECT_EQ(steps, 4u);
    EXPECT_EQ(a.fired, (std::vector<Instant>{at_ms(10), at_ms(11), at_ms(15), at_ms(2010)}));
    EXPECT_EQ(net.now(), at_ms(2010));
}

TEST(SimNetwork, HostSchedulesTimerWhenItReceivesAFrame) {
    PingPong p;
    // B answers after a 3 ms think time instead of at once.
    p.b.on_receive = [](FakeHost& self, Instant now, std::span<const std::byte>) {
        self.schedule(now + milliseconds(3));
    };
    p.b.on_tick = [](FakeHost& self, Instant) { self.send_to(mac_of(1), 2000); };
    p.a.send_to(mac_of(2), 1);
    EXPECT_LT(p.net.run(), 10u);
    ASSERT_EQ(p.b.fired.size(), 1u);
    EXPECT_EQ(p.b.fired[0], kInstantZero + microseconds(50) + milliseconds(3));
    ASSERT_EQ(p.a.received.size(), 1u);
    EXPECT_EQ(p.a.received[0].at, kInstantZero + microseconds(3100));
    EXPECT_EQ(tag_of(p.a.received[0].bytes), 2000u);
}

TEST(SimNetwork, BroadcastAndMulticastReachEveryOtherHost) {
    FakeHost a(mac_of(1)), b(mac_of(2)), c(mac_of(3));
    SimNetwork net(1);
    net.add_host(a);
    net.add_host(b);
    net.add_host(c);
    a.send_to(MacAddr::broadcast(), 7);
    a.send_to(MacAddr{{0x33, 0x33, 0x00, 0x00, 0x00, 0x01}}, 8);  // IPv6 all-nodes
    net.run();
    EXPECT_TRUE(a.received.empty());  // never looped back to the sender
    EXPECT_EQ(b.received_tags(), (std::vector<std::uint32_t>{7, 8}));
    EXPECT_EQ(c.received_tags(), (std::vector<std::uint32_t>{7, 8}));
    EXPECT_EQ(net.counters().sent, 2u);
    EXPECT_EQ(net.counters().delivered, 4u);
}

TEST(SimNetwork, UnicastGoesOnlyToItsMacAndOddFramesAreDropped) {
    FakeHost a(mac_of(1)), b(mac_of(2)), c(mac_of(3));
    SimNetwork net(1);
    net.add_host(a);
    net.add_host(b);
    net.add_host(c);
    std::vector<FrameRecord> records;
    net.set_observer([&](const FrameRecord& r) { records.push_back(r); });
    a.send_to(mac_of(3), 1);
    a.send_to(mac_of(9), 2);             // nobody has this MAC
    a.send_to(mac_of(1), 3);             // its own MAC: not looped back
    a.send(Bytes(13, std::byte{0xff}));  // shorter than an Ethernet header
    net.run();
    EXPECT_TRUE(a.received.empty());
    EXPECT_TRUE(b.received.empty());
    EXPECT_EQ(c.received_tags(), (std::vector<std::uint32_t>{1}));
    EXPECT_EQ(net.counters().sent, 4u);
    EXPECT_EQ(net.counters().unroutable, 2u);
    EXPECT_EQ(net.counters().runts, 1u);
    ASSERT_EQ(records.size(), 4u);
    EXPECT_EQ(records[1].to, kNoHost);
    EXPECT_EQ(records[3].to, kNoHost);
    EXPECT_EQ(records[3].fate, FrameFate::kLost);
    EXPECT_EQ(records[3].bytes.size(), 13u);
}

TEST(SimNetwork, PerDirectionFaultsApplyToOneDirectionOnly) {
    PingPong p;
    p.net.set_faults(1, 0, LinkFaults{.loss = 1.0});  // B -> A is cut
    p.net.set_faults(0, 1, LinkFaults{.latency = microseconds(5)});
    EXPECT_EQ(p.net.faults(0, 1).latency, microseconds(5));
    EXPECT_EQ(p.net.faults(1, 0).loss, 1.0);
    for (std::uint32_t i = 0; i < 5; ++i) p.a.send_to(mac_of(2), i);
    p.net.run();
    ASSERT_EQ(p.b.received.size(), 5u);
    EXPECT_EQ(p.b.received[0].at, kInstantZero + microseconds(5));
    EXPECT_TRUE(p.a.received.empty());
    EXPECT_EQ(p.net.counters().lost, 5u);
    // Setting every direction clears the per-direction settings.
    p.net.set_faults(LinkFaults{});
    EXPECT_EQ(p.net.faults(1, 0).loss, 0.0);
    EXPECT_EQ(p.net.faults(0, 1).latency, microseconds(50));
}

TEST(SimNetwork, InFlightLimitDropsAndCounts) {
    FakeHost a(mac_of(1)), b(mac_of(2));
    SimNetwork net(1);
    net.add_host(a);
    net.add_host(b);
    net.set_max_in_flight(10);
    for (std::uint32_t i = 0; i < 25; ++i) a.send_to(mac_of(2), i);
    EXPECT_TRUE(net.step());
    EXPECT_EQ(net.in_flight(), 0u);  // the ten arrived together in that step
    EXPECT_EQ(net.counters().overflowed, 15u);
    EXPECT_EQ(b.received.size(), 10u);
    EXPECT_EQ(b.received_tags().back(), 9u);  // the first ten kept, the rest dropped
}

// A three-host scenario under every fault at once; returns the fingerprint
// of all FrameRecords and of what the hosts received.
struct Fingerprint {
    std::uint64_t records = 0;
    std::uint64_t received = 0;
    std::size_t record_count = 0;
    SimNetwork::Counters counters;
    Instant end;
};

Fingerprint chaos_run(std::uint64_t seed) {
    FakeHost hosts[3] = {FakeHost(mac_of(1)), FakeHost(mac_of(2)), FakeHost(mac_of(3))};
    SimNetwork net(seed);
    for (auto& h : hosts) net.add_host(h);
    net.set_faults(LinkFaults{.loss = 0.1,
                              .duplicate = 0.05,
                              .reorder = 0.1,
                              .corrupt = 0.05,
                              .latency = microseconds(30),
                              .jitter = microseconds(20)});
    RecordHasher hasher;
    net.set_observer([&](const FrameRecord& r) { hasher(r); });
    // Each host echoes what it receives to the next host, a bounded number of
    // times, and also ticks a broadcast every millisecond for 20 ms.
    for (std::uint8_t i = 0; i < 3; ++i) {
        FakeHost& h = hosts[i];
        h.on_receive = [i](FakeHost& self, Instant, std::span<const std::byte> f) {
            const std::uint32_t hops = tag_of(f) & 0xff;
            const auto next = static_cast<std::uint8_t>(1 + (i + 1) % 3);
            if (hops < 6) self.send_to(mac_of(next), tag_of(f) + 1);
        };
        h.schedule(at_ms(i));
        h.on_tick = [i](FakeHost& self, Instant now) {
            self.send_to(MacAddr::broadcast(), static_cast<std::uint32_t>(i) << 16);
            if (now < at_ms(20)) self.schedule(now + milliseconds(1));
        };
    }
    const std::size_t steps = net.run(100'000);
    EXPECT_LT(steps, 100'000u) << "seed " << seed;
    RecordHasher rx;
    for (auto& h : hosts)
        for (const auto& r : h.received)
            rx(FrameRecord{r.at, r.at, 0, 0, FrameFate::kDelivered, r.bytes});
    return {hasher.hash, rx.hash, hasher.records, net.counters(), net.now()};
}

TEST(SimNetwork, SameSeedReplaysByteForByte) {
    const Fingerprint first = chaos_run(0xdecafbad);
    const Fingerprint second = chaos_run(0xdecafbad);
    EXPECT_EQ(first.records, second.records);
    EXPECT_EQ(first.received, second.received);
    EXPECT_EQ(first.record_count, second.record_count);
    EXPECT_EQ(first.end, second.end);
    EXPECT_EQ(first.counters.delivered, second.counters.delivered);
    // The scenario really exercised every fault.
    EXPECT_GT(first.counters.lost, 0u);
    EXPECT_GT(first.counters.duplicated, 0u);
    EXPECT_GT(first.counters.reordered, 0u);
    EXPECT_GT(first.counters.corrupted, 0u);
    EXPECT_GT(first.record_count, 200u);
}

TEST(SimNetwork, DifferentSeedGivesADifferentRun) {
    const Fingerprint a = chaos_run(1);
    const Fingerprint b = chaos_run(2);
    EXPECT_NE(a.records, b.records);
    EXPECT_NE(a.received, b.received);
}

TEST(SimNetwork, FaultFreeRunDoesNotDependOnTheSeed) {
    // Without faults the network draws no random numbers: any seed, one run.
    auto run = [](std::uint64_t seed) {
        PingPong p(seed);
        RecordHasher h;
        p.net.set_observer([&](const FrameRecord& r) { h(r); });
        for (std::uint32_t i = 0; i < 20; ++i) p.a.send_to(mac_of(2), i);
        p.net.run();
        return h.hash;
    };
    EXPECT_EQ(run(1), run(987654321));
}

TEST(SimNetwork, RunTerminatesAndReportsSteps) {
    {
        FakeHost a(mac_of(1));
        SimNetwork idle(1);
        idle.add_host(a);
        EXPECT_EQ(idle.run(), 0u);
        EXPECT_FALSE(idle.step());
    }
    {
        // A host that re-arms its timer forever never lets the network idle.
        FakeHost a(mac_of(1));
        SimNetwork net(1);
        net.add_host(a);
        a.schedule(kInstantZero);
        a.on_tick = [](FakeHost& self, Instant now) { self.schedule(now + milliseconds(1)); };
        EXPECT_EQ(net.run(100), 100u);
        EXPECT_EQ(a.fired.size(), 100u);
        EXPECT_EQ(net.now(), at_ms(99));
    }
    {
        // One frame: its collect and its arrival happen in the same step, and
        // the step after that finds nothing, so run() reports exactly one.
        PingPong p;
        p.b.on_receive = nullptr;
        p.a.send_to(mac_of(2), 1);
        EXPECT_EQ(p.net.run(), 1u);
    }
}

TEST(SimNetwork, RunUntilHandlesEverythingDueAndStopsAtT) {
    PingPong p;
    p.a.send_to(mac_of(2), 1);
    p.a.schedule(kInstantZero + microseconds(100));  // exactly at t: fires
    p.a.schedule(kInstantZero + microseconds(101));  // after t: waits
    p.net.run_until(kInstantZero + microseconds(100));
    EXPECT_EQ(p.net.now(), kInstantZero + microseconds(100));
    EXPECT_EQ(p.b.received.size(), 1u);
    EXPECT_EQ(p.a.received.size(), 1u);  // the pong arrives at exactly 100 us
    EXPECT_EQ(p.a.fired, (std::vector<Instant>{kInstantZero + microseconds(100)}));
    // Idle before t: time still reaches t.
    p.a.on_tick = nullptr;
    p.net.run_until(at_ms(5));
    EXPECT_EQ(p.net.now(), at_ms(5));
    EXPECT_EQ(p.a.fired.size(), 2u);
}

TEST(SimNetwork, RunUntilSendsHeldFramesBeforeMovingTime) {
    // A frame queued at 0 ms and due at 50 us must not be carried past t.
    PingPong p;
    p.b.on_receive = nullptr;
    p.a.send_to(mac_of(2), 1);
    p.net.run_until(at_ms(1));
    ASSERT_EQ(p.b.received.size(), 1u);
    EXPECT_EQ(p.b.received[0].at, kInstantZero + microseconds(50));
    EXPECT_EQ(p.net.now(), at_ms(1));
}

TEST(SimNetwork, AdvanceToIsApplicationThinkTime) {
    PingPong p;
    p.net.advance_to(at_ms(7));
    EXPECT_EQ(p.net.now(), at_ms(7));
    p.a.send_to(mac_of(2), 1);  // the application sends after thinking
    p.net.run();
    ASSERT_EQ(p.b.received.size(), 1u);
    EXPECT_EQ(p.b.received[0].at, at_ms(7) + microseconds(50));
}

TEST(SimNetworkDeathTest, AdvancePastAPendingEventAsserts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    FakeHost a(mac_of(1));
    SimNetwork net(1);
    net.add_host(a);
    a.schedule(at_ms(1));
    EXPECT_DEATH(net.advance_to(at_ms(2)), "nothing_due_before_t");
}

TEST(SimNetworkDeathTest, ImpossibleProbabilityAsserts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    SimNetwork net(1);
    EXPECT_DEATH(net.set_faults(LinkFaults{.loss = 1.5}), "f.loss");
}

TEST(SimNetworkDeathTest, ChecksumOffloadRefusedBehindACorruptingLink) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    CoreConfig cfg;
    cfg.checksum_offload = true;
    Core core(cfg);
    CoreHost host(core);
    {
        // A corrupting network takes no such host ...
        SimNetwork net(1);
        net.set_faults(LinkFaults{.corrupt = 0.01});
        EXPECT_DEATH(net.add_host(host), "checksum_offload");
    }
    {
        // ... and a network with one gets no corrupting link into it; other faults are fine.
        FakeHost other(mac_of(7));
        SimNetwork net(1);
        net.add_host(other);
        EXPECT_EQ(net.add_host(host), 1u);
        net.set_faults(LinkFaults{.loss = 0.1, .duplicate = 0.1, .reorder = 0.1});
        net.set_faults(1, 0, LinkFaults{.corrupt = 0.5});  // into a host without it: fine
        EXPECT_DEATH(net.set_faults(0, 1, LinkFaults{.corrupt = 0.01}), "checksum_offload");
        EXPECT_DEATH(net.set_faults(LinkFaults{.corrupt = 0.01}), "checksum_offload");
    }
}

}  // namespace
}  // namespace iwcm::io
