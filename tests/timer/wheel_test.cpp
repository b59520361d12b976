// Tests of the timing wheel. Read src/timer/wheel.hpp's essay first.
//
// Time is virtual: every test hands instants to the wheel, none sleeps. The randomized test
// compares the wheel with a trivial model (a std::multimap of deadlines) under a fixed seed.
#include "timer/wheel.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace iwcm::timer {
namespace {

using std::chrono::hours;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

constexpr Duration kDay = hours(24);

// Advances and returns the cookies fired, in firing order.
std::vector<std::uint64_t> fire(TimerWheel& wheel, Instant now) {
    std::vector<std::uint64_t> out;
    wheel.advance(now, [&](std::uint64_t cookie) { out.push_back(cookie); });
    return out;
}

using Cookies = std::vector<std::uint64_t>;

TEST(Wheel, EmptyWheelHasNoDeadline) {
    TimerWheel wheel;
    EXPECT_EQ(wheel.pending(), 0u);
    EXPECT_EQ(wheel.next_deadline(), std::nullopt);
    EXPECT_EQ(fire(wheel, at_ms(1000)), Cookies{});
}

TEST(Wheel, FiresExactlyAtAWholeTickDeadline) {
    TimerWheel wheel;
    wheel.schedule(at_ms(5), 7);
    EXPECT_EQ(wheel.next_deadline(), at_ms(5));
    EXPECT_EQ(fire(wheel, at_ms(4)), Cookies{});
    EXPECT_EQ(fire(wheel, at_ms(5) - nanoseconds(1)), Cookies{});
    EXPECT_EQ(fire(wheel, at_ms(5)), Cookies{7});
    EXPECT_EQ(wheel.pending(), 0u);
    EXPECT_EQ(wheel.next_deadline(), std::nullopt);
}

// reschedule() moves an armed entry later or earlier in place: the old id goes stale, the
// entry fires once at its new deadline with its new cookie, and the count never changes.
TEST(Wheel, RescheduleMovesAnArmedEntryInPlace) {
    TimerWheel wheel;
    const TimerId first = wheel.schedule(at_ms(5), 1);
    const TimerId other = wheel.schedule(at_ms(7), 9);
    const TimerId later = wheel.reschedule(first, at_ms(300), 2);
    ASSERT_TRUE(later.valid());
    EXPECT_NE(later, first);
    EXPECT_EQ(wheel.pending(), 2u);
    EXPECT_FALSE(wheel.is_pending(first));
    EXPECT_FALSE(wheel.cancel(first));
    EXPECT_EQ(wheel.next_deadline(), at_ms(7));
    EXPECT_EQ(fire(wheel, at_ms(100)), Cookies{9});
    EXPECT_EQ(wheel.deadline_of(later), at_ms(300));
    const TimerId sooner = wheel.reschedule(later, at_ms(150), 3);
    ASSERT_TRUE(sooner.valid());
    EXPECT_EQ(wheel.next_deadline(), at_ms(150));
    EXPECT_TRUE(wheel.check_invariants());
    EXPECT_EQ(fire(wheel, at_ms(149)), Cookies{});
    EXPECT_EQ(fire(wheel, at_ms(150)), Cookies{3});
    EXPECT_EQ(wheel.pending(), 0u);
    EXPECT_EQ(fire(wheel, at_ms(400)), Cookies{});
    // A fired, cancelled or invalid id is not moved.
    EXPECT_FALSE(wheel.reschedule(sooner, at_ms(500), 4).valid());
    EXPECT_FALSE(wheel.reschedule(other, at_ms(500), 4).valid());
    EXPECT_FALSE(wheel.reschedule(TimerId{}, at_ms(500), 4).valid());
    EXPECT_EQ(wheel.pending(), 0u);
}

// Moved to a time already past, an entry is overdue and fires at the next advance().
TEST(Wheel, RescheduleIntoThePastFiresNext) {
    TimerWheel wheel;
    EXPECT_EQ(fire(wheel, at_ms(50)), Cookies{});
    const TimerId id = wheel.schedule(at_ms(80), 1);
    ASSERT_TRUE(wheel.reschedule(id, at_ms(10), 5).valid());
    EXPECT_EQ(fire(wheel, at_ms(51)), Cookies{5});
    EXPECT_EQ(wheel.pending(), 0u);
}

TEST(Wheel, DeadlineBetweenTicksRoundsUpNeverEarly) {
    TimerWheel wheel;
    wheel.schedule(at_ms(5) + microseconds(1), 1);
    wheel.schedule(at_ms(5) + microseconds(999), 2);
    wheel.schedule(at_ms(6) + nanoseconds(1), 3);
    EXPECT_EQ(wheel.next_deadline(), at_ms(6));
    EXPECT_EQ(fire(wheel, at_ms(5) + microseconds(999)), Cookies{});
    EXPECT_EQ(fire(wheel, at_ms(6) - nanoseconds(1)), Cookies{});
    auto fired = fire(wheel, at_ms(6));
    std::sort(fired.begin(), fired.end());
    EXPECT_EQ(fired, (Cookies{1, 2}));
    EXPECT_EQ(wheel.next_deadline(), at_ms(7));
    EXPECT_EQ(fire(wheel, at_ms(7)), Cookies{3});
}

TEST(Wheel, CoarseGranularityAndNonZeroStart) {
    const Instant start = at_ms(1'000'003);
    TimerWheel wheel(milliseconds(10), start);
    wheel.schedule(start + milliseconds(10), 1);
    wheel.schedule(start + milliseconds(11), 2);
    EXPECT_EQ(wheel.next_deadline(), start + milliseconds(10));
    EXPECT_EQ(fire(wheel, start + milliseconds(9)), Cookies{});
    EXPECT_EQ(fire(wheel, start + milliseconds(10)), Cookies{1});
    EXPECT_EQ(wheel.next_deadline(), start + milliseconds(20));
    EXPECT_EQ(fire(wheel, start + milliseconds(19)), Cookies{});
    EXPECT_EQ(fire(wheel, start + milliseconds(25)), Cookies{2});
}

TEST(Wheel, PastDeadlineFiresAtNextAdvance) {
    TimerWheel wheel;
    EXPECT_EQ(fire(wheel, at_ms(100)), Cookies{});
    wheel.schedule(at_ms(50), 1);
    wheel.schedule(at_ms(100), 2);
    wheel.schedule(kInstantZero - milliseconds(5), 3);
    ASSERT_TRUE(wheel.next_deadline().has_value());
    EXPECT_LE(*wheel.next_deadline(), at_ms(100));
    // Even an advance to an earlier instant delivers what is overdue.
    auto fired = fire(wheel, at_ms(90));
    std::sort(fired.begin(), fired.end());
    EXPECT_EQ(fired, (Cookies{1, 2, 3}));
    EXPECT_EQ(wheel.pending(), 0u);
}

TEST(Wheel, CancelBeforeFire) {
    TimerWheel wheel;
    const TimerId a = wheel.schedule(at_ms(10), 1);
    const TimerId b = wheel.schedule(at_ms(10), 2);
    EXPECT_TRUE(wheel.is_pending(a));
    EXPECT_TRUE(wheel.cancel(a));
    EXPECT_FALSE(wheel.is_pending(a));
    EXPECT_EQ(wheel.pending(), 1u);
    EXPECT_EQ(fire(wheel, at_ms(10)), Cookies{2});
    EXPECT_FALSE(wheel.cancel(b));  // Already fired.
}

TEST(Wheel, ForEachPendingVisitsExactlyThePendingEntries) {
    TimerWheel wheel;
    const TimerId a = wheel.schedule(at_ms(10), 1);
    (void)wheel.schedule(at_ms(3), 2);
    (void)wheel.schedule(at_ms(5000), 3);
    (void)wheel.schedule(at_ms(20), 4);
    EXPECT_TRUE(wheel.cancel(a));
    EXPECT_EQ(fire(wheel, at_ms(4)), Cookies{2});
    // Cancelled and fired entries are on the free list; one scheduled after reuses a slot.
    (void)wheel.schedule(at_ms(30), 5);
    std::set<std::uint64_t> seen;
    wheel.for_each_pending([&](std::uint64_t cookie) { EXPECT_TRUE(seen.insert(cookie).second); });
    EXPECT_EQ(seen, (std::set<std::uint64_t>{3, 4, 5}));
}

// A deadline rounds up to the next whole tick, whatever the granularity and distance: for
// distances around multiples of the tick, small and very large.
TEST(Wheel, DeadlinesRoundUpToTheNextTick) {
    for (const std::uint64_t g :
         {std::uint64_t{1}, std::uint64_t{3}, std::uint64_t{1000}, std::uint64_t{999'983},
          std::uint64_t{1'000'000}, (std::uint64_t{1} << 32) + 1}) {
        TimerWheel wheel(nanoseconds(static_cast<std::int64_t>(g)));
        for (const std::uint64_t k : {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{977},
                                      std::uint64_t{1} << 20, (std::uint64_t{1} << 40) / g + 7}) {
            for (const std::int64_t delta : {-1, 0, 1}) {
                const std::uint64_t diff = k * g + static_cast<std::uint64_t>(delta);
                const std::uint64_t want = (diff / g + (diff % g != 0 ? 1 : 0)) * g;
                const TimerId id =
                    wheel.schedule(kInstantZero + nanoseconds(static_cast<std::int64_t>(diff)), 1);
                SCOPED_TRACE(testing::Message() << "g=" << g << " diff=" << diff);
                EXPECT_EQ(wheel.deadline_of(id),
                          kInstantZero + nanoseconds(static_cast<std::int64_t>(want)));
                EXPECT_TRUE(wheel.cancel(id));
            }
        }
    }
}

TEST(Wheel, StaleAndDoubleCancelReturnFalse) {
    TimerWheel wheel;
    EXPECT_FALSE(wheel.cancel(TimerId{}));
    EXPECT_FALSE(wheel.cancel(TimerId{0, 1}));       // A sentinel index.
    EXPECT_FALSE(wheel.cancel(TimerId{100000, 1}));  // Out of range.
    const TimerId a = wheel.schedule(at_ms(10), 1);
    EXPECT_FALSE(wheel.cancel(TimerId{a.index, a.generation + 1}));
    EXPECT_TRUE(wheel.cancel(a));
    EXPECT_FALSE(wheel.cancel(a));
    EXPECT_EQ(wheel.pending(), 0u);
}

TEST(Wheel, ReusedIndexGetsNewGeneration) {
    TimerWheel wheel;
    const TimerId a = wheel.schedule(at_ms(10), 1);
    ASSERT_TRUE(wheel.cancel(a));
    const TimerId b = wheel.schedule(at_ms(20), 2);
    EXPECT_EQ(b.index, a.index);  // The free list hands the slot back.
    EXPECT_NE(b.generation, a.generation);
    EXPECT_FALSE(wheel.cancel(a));  // The old handle cannot touch the new entry.
    EXPECT_TRUE(wheel.is_pending(b));
    EXPECT_EQ(fire(wheel, at_ms(20)), Cookies{2});
    // After firing, the index is reused again, again with a new generation.
    const TimerId c = wheel.schedule(at_ms(30), 3);
    EXPECT_EQ(c.index, a.index);
    EXPECT_FALSE(wheel.cancel(b));
    EXPECT_TRUE(wheel.cancel(c));
}

TEST(Wheel, FarDeadlinesCascadeThroughEveryLevel) {
    TimerWheel wheel;
    // One entry per level boundary and a few far beyond: hours and days at 1 ms ticks.
    const std::vector<Duration> offsets = {
        milliseconds(63),
        milliseconds(64),
        milliseconds(4095),
        milliseconds(4096),
        milliseconds(262'145),
        hours(1) + milliseconds(7),
        hours(5),
        kDay + milliseconds(1),
        kDay * 3 + milliseconds(333),
        kDay * 30,
        kDay * 400,
        kDay * 794,
    };
    for (std::size_t i = 0; i < offsets.size(); ++i) wheel.schedule(kInstantZero + offsets[i], i);
    for (std::size_t i = 0; i < offsets.size(); ++i) {
        const Instant due = kInstantZero + offsets[i];
        ASSERT_EQ(wheel.next_deadline(), due) << "entry " << i;
        EXPECT_EQ(fire(wheel, due - milliseconds(1)), Cookies{}) << "entry " << i;
        EXPECT_EQ(fire(wheel, due), Cookies{i}) << "entry " << i;
    }
    EXPECT_EQ(wheel.pending(), 0u);
}

TEST(Wheel, BeyondTheHorizonIsClampedAndReplaced) {
    TimerWheel wheel;
    const Instant far = kInstantZero + kDay * 5000;  // About six horizons away.
    const Instant near = kInstantZero + kDay * 3000 + milliseconds(5);
    wheel.schedule(far, 1);
    wheel.schedule(near, 2);
    EXPECT_EQ(wheel.next_deadline(), near);
    // Walk time forward in big jumps: nothing fires early.
    for (int day = 100; day < 3000; day += 100) {
        EXPECT_EQ(fire(wheel, kInstantZero + kDay * day), Cookies{}) << "day " << day;
        EXPECT_EQ(wheel.next_deadline(), near);
    }
    EXPECT_EQ(fire(wheel, near - nanoseconds(1)), Cookies{});
    EXPECT_EQ(fire(wheel, near), Cookies{2});
    EXPECT_EQ(wheel.next_deadline(), far);
    EXPECT_EQ(fire(wheel, far - milliseconds(1)), Cookies{});
    EXPECT_EQ(fire(wheel, far), Cookies{1});
}

TEST(Wheel, NeverInstantIsKeptWithoutOverflow) {
    TimerWheel wheel;
    wheel.schedule(kInstantNever, 1);
    EXPECT_EQ(wheel.next_deadline(), kInstantNever);
    EXPECT_EQ(fire(wheel, kInstantZero + kDay * 10000), Cookies{});
    EXPECT_EQ(wheel.pending(), 1u);
}

TEST(Wheel, ManyEntriesInOneSlot) {
    TimerWheel wheel;
    std::vector<TimerId> ids;
    for (std::uint64_t i = 0; i < 10000; ++i) ids.push_back(wheel.schedule(at_ms(42), i));
    // Cancel every third one, including the first and the last of the slot's list.
    std::set<std::uint64_t> expected;
    for (std::uint64_t i = 0; i < ids.size(); ++i) {
        if (i % 3 == 0 || i == ids.size() - 1) {
            EXPECT_TRUE(wheel.cancel(ids[i]));
        } else {
            expected.insert(i);
        }
    }
    EXPECT_EQ(wheel.next_deadline(), at_ms(42));
    EXPECT_EQ(fire(wheel, at_ms(41)), Cookies{});
    const auto fired = fire(wheel, at_ms(42));
    EXPECT_EQ(std::set<std::uint64_t>(fired.begin(), fired.end()), expected);
    EXPECT_EQ(fired.size(), expected.size());
    EXPECT_EQ(wheel.pending(), 0u);
}

TEST(Wheel, NextDeadlineTracksScheduleCancelAdvance) {
    TimerWheel wheel;
    const TimerId a = wheel.schedule(at_ms(300), 1);
    EXPECT_EQ(wheel.next_deadline(), at_ms(300));
    const TimerId b = wheel.schedule(at_ms(200), 2);
    EXPECT_EQ(wheel.next_deadline(), at_ms(200));
    wheel.schedule(at_ms(5000), 3);
    EXPECT_EQ(wheel.next_deadline(), at_ms(200));
    EXPECT_TRUE(wheel.cancel(b));
    EXPECT_EQ(wheel.next_deadline(), at_ms(300));
    EXPECT_EQ(fire(wheel, at_ms(250)), Cookies{});
    EXPECT_EQ(wheel.next_deadline(), at_ms(300));
    EXPECT_TRUE(wheel.cancel(a));
    EXPECT_EQ(wheel.next_deadline(), at_ms(5000));
    wheel.schedule(at_ms(251), 4);
    EXPECT_EQ(wheel.next_deadline(), at_ms(251));
    EXPECT_EQ(fire(wheel, at_ms(251)), Cookies{4});
    EXPECT_EQ(wheel.next_deadline(), at_ms(5000));
    EXPECT_EQ(fire(wheel, at_ms(5000)), Cookies{3});
    EXPECT_EQ(wheel.next_deadline(), std::nullopt);
}

TEST(Wheel, NextDeadlineScansAHigherSlotForTheExactMinimum) {
    TimerWheel wheel;
    // Both sit in one level-1 slot (ticks 128..191) whose start is 128, not the answer.
    wheel.schedule(at_ms(190), 1);
    wheel.schedule(at_ms(150), 2);
    EXPECT_EQ(wheel.next_deadline(), at_ms(150));
    EXPECT_EQ(fire(wheel, at_ms(149)), Cookies{});
    EXPECT_EQ(fire(wheel, at_ms(150)), Cookies{2});
    EXPECT_EQ(wheel.next_deadline(), at_ms(190));
}

TEST(Wheel, HugeTimeJumpFiresEverythingInDeadlineOrder) {
    TimerWheel wheel;
    std::vector<std::pair<Instant, std::uint64_t>> expected;
    for (std::uint64_t i = 0; i < 2000; ++i) {
        const Instant due = kInstantZero + milliseconds((i * 7919) % 100'000) + kDay * (i % 40);
        wheel.schedule(due, i);
        expected.emplace_back(due, i);
    }
    std::stable_sort(expected.begin(), expected.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    std::vector<Instant> fired_at;
    std::map<std::uint64_t, Instant> due_of;
    for (const auto& [due, cookie] : expected) due_of[cookie] = due;
    const std::size_t n = wheel.advance(kInstantZero + kDay * 365, [&](std::uint64_t cookie) {
        fired_at.push_back(due_of.at(cookie));
    });
    EXPECT_EQ(n, expected.size());
    EXPECT_TRUE(std::is_sorted(fired_at.begin(), fired_at.end()));
    EXPECT_EQ(wheel.pending(), 0u);
    EXPECT_EQ(wheel.next_deadline(), std::nullopt);
}

TEST(Wheel, ScheduledFromCallbackForNowFiresInTheNextCall) {
    TimerWheel wheel;
    wheel.schedule(at_ms(10), 1);
    wheel.schedule(at_ms(12), 2);
    std::vector<std::uint64_t> fired;
    const std::size_t n = wheel.advance(at_ms(20), [&](std::uint64_t cookie) {
        fired.push_back(cookie);
        if (cookie == 1) {
            wheel.schedule(at_ms(11), 10);  // Within this call's range: next call.
            wheel.schedule(at_ms(20), 11);  // Exactly now: next call.
            wheel.schedule(at_ms(21), 12);  // Later: when its time comes.
        }
    });
    EXPECT_EQ(n, 2u);
    EXPECT_EQ(fired, (Cookies{1, 2}));
    EXPECT_EQ(wheel.pending(), 3u);
    ASSERT_TRUE(wheel.next_deadline().has_value());
    EXPECT_LE(*wheel.next_deadline(), at_ms(20));
    auto next = fire(wheel, at_ms(20));
    std::sort(next.begin(), next.end());
    EXPECT_EQ(next, (Cookies{10, 11}));
    EXPECT_EQ(wheel.next_deadline(), at_ms(21));
    EXPECT_EQ(fire(wheel, at_ms(21)), Cookies{12});
}

TEST(Wheel, CallbackThatReArmsForNowDoesNotSpin) {
    TimerWheel wheel;
    wheel.schedule(at_ms(1), 1);
    for (int round = 1; round <= 5; ++round) {
        const std::size_t n =
            wheel.advance(at_ms(1), [&](std::uint64_t c) { wheel.schedule(at_ms(1), c); });
        EXPECT_EQ(n, 1u) << "round " << round;
    }
}

TEST(Wheel, CallbackMayCancelALaterMemberOfTheSameBatch) {
    TimerWheel wheel;
    TimerId ids[2];
    ids[0] = wheel.schedule(at_ms(5), 0);
    ids[1] = wheel.schedule(at_ms(5), 1);
    const TimerId later = wheel.schedule(at_ms(7), 2);
    std::vector<std::uint64_t> fired;
    wheel.advance(at_ms(10), [&](std::uint64_t cookie) {
        fired.push_back(cookie);
        // Whichever tick-5 entry fires first cancels its twin and the tick-7 entry.
        if (cookie < 2) {
            EXPECT_TRUE(wheel.cancel(ids[1 - cookie]));
            EXPECT_TRUE(wheel.cancel(later));
        }
    });
    EXPECT_EQ(fired.size(), 1u);
    EXPECT_EQ(wheel.pending(), 0u);
}

TEST(Wheel, NextDeadlineFromInsideTheCallbackSeesTheRestOfTheBatch) {
    TimerWheel wheel;
    wheel.schedule(at_ms(5), 1);
    wheel.schedule(at_ms(8), 2);
    std::vector<std::optional<Instant>> seen;
    wheel.advance(at_ms(10), [&](std::uint64_t) { seen.push_back(wheel.next_deadline()); });
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen[0], at_ms(8));
    EXPECT_EQ(seen[1], std::nullopt);
}

TEST(Wheel, CurrentTimeAndDeadlineOf) {
    TimerWheel wheel(milliseconds(1), at_ms(1000));
    EXPECT_EQ(wheel.current_time(), at_ms(1000));
    const TimerId id = wheel.schedule(at_ms(1500) + microseconds(10), 1);
    EXPECT_EQ(wheel.deadline_of(id), at_ms(1501));
    fire(wheel, at_ms(1200) + microseconds(700));
    EXPECT_EQ(wheel.current_time(), at_ms(1200));
    EXPECT_TRUE(wheel.cancel(id));
    EXPECT_EQ(wheel.deadline_of(id), std::nullopt);
}

// The reference model: deadlines rounded up to ticks in a multimap, the obvious way.
class Model {
public:
    explicit Model(std::uint64_t granularity_ns) : g_(granularity_ns) {}
    void schedule(std::int64_t deadline_ns, std::uint64_t cookie) {
        const std::int64_t tick = deadline_ns <= 0 ? 0 : (deadline_ns + g_ - 1) / g_;
        by_cookie_[cookie] = entries_.emplace(tick, cookie);
    }
    bool cancel(std::uint64_t cookie) {
        auto it = by_cookie_.find(cookie);
        if (it == by_cookie_.end()) return false;
        entries_.erase(it->second);
        by_cookie_.erase(it);
        return true;
    }
    // Every entry with tick <= floor(now), as (tick, cookie) pairs sorted.
    std::vector<std::pair<std::int64_t, std::uint64_t>> advance(std::int64_t now_ns) {
        const std::int64_t limit = now_ns / static_cast<std::int64_t>(g_);
        std::vector<std::pair<std::int64_t, std::uint64_t>> out;
        while (!entries_.empty() && entries_.begin()->first <= limit) {
            out.emplace_back(entries_.begin()->first, entries_.begin()->second);
            by_cookie_.erase(entries_.begin()->second);
            entries_.erase(entries_.begin());
        }
        std::sort(out.begin(), out.end());
        return out;
    }
    std::optional<std::int64_t> next_tick() const {
        if (entries_.empty()) return std::nullopt;
        return entries_.begin()->first;
    }
    std::size_t size() const { return entries_.size(); }

private:
    std::int64_t g_;
    std::multimap<std::int64_t, std::uint64_t> entries_;
    std::map<std::uint64_t, std::multimap<std::int64_t, std::uint64_t>::iterator> by_cookie_;
};

// Uniform in [0, bound) without std::uniform_int_distribution, whose output differs between
// standard libraries: Lemire's multiply-shift, with rejection of the biased low zone.
__extension__ typedef unsigned __int128 Uint128;

std::uint64_t uniform(std::mt19937_64& rng, std::uint64_t bound) {
    if (bound <= 1) return 0;
    const std::uint64_t threshold = (0 - bound) % bound;
    for (;;) {
        const std::uint64_t x = rng();
        const Uint128 product = static_cast<Uint128>(x) * bound;
        if (static_cast<std::uint64_t>(product) >= threshold) {
            return static_cast<std::uint64_t>(product >> 64);
        }
    }
}

struct DifferentialCase {
    std::uint64_t seed;
    std::int64_t granularity_ns;
    std::int64_t max_delay_ns;  // Deadlines spread up to this far ahead.
};

void run_differential(const DifferentialCase& c, int steps) {
    SCOPED_TRACE(testing::Message() << "seed=" << c.seed << " granularity_ns=" << c.granularity_ns
                                    << " max_delay_ns=" << c.max_delay_ns);
    std::mt19937_64 rng(c.seed);
    TimerWheel wheel(nanoseconds(c.granularity_ns));
    Model model(static_cast<std::uint64_t>(c.granularity_ns));
    std::map<std::uint64_t, TimerId> ids;  // Cookie -> id, for live and some dead entries.
    std::vector<std::uint64_t> dead;       // Cookies of fired or cancelled entries.
    std::int64_t now = 0;
    std::uint64_t next_cookie = 0;
    const auto max_delay = static_cast<std::uint64_t>(c.max_delay_ns);
    for (int step = 0; step < steps; ++step) {
        const std::uint64_t op = uniform(rng, 100);
        if (op < 45) {
            // Deadlines: mostly near, sometimes far, sometimes in the past.
            std::int64_t deadline = 0;
            const std::uint64_t shape = uniform(rng, 10);
            if (shape < 6) {
                deadline = now + static_cast<std::int64_t>(uniform(rng, max_delay / 1000 + 2));
            } else if (shape < 9) {
                deadline = now + static_cast<std::int64_t>(uniform(rng, max_delay));
            } else {
                deadline = now - static_cast<std::int64_t>(uniform(rng, 1000));
            }
            const std::uint64_t cookie = next_cookie++;
            ids[cookie] = wheel.schedule(Instant{nanoseconds(deadline)}, cookie);
            model.schedule(deadline, cookie);
        } else if (op < 70 && !ids.empty()) {
            // Cancel a random known cookie; dead ones must report false.
            auto it = ids.begin();
            std::advance(it, static_cast<long>(uniform(rng, ids.size())));
            const bool expected = model.cancel(it->first);
            ASSERT_EQ(wheel.cancel(it->second), expected) << "step " << step;
            ids.erase(it);
        } else {
            // Advance by a small step or, rarely, by a huge jump.
            const std::uint64_t jump = uniform(rng, 20) == 0 ? max_delay : max_delay / 500 + 1;
            const std::int64_t overdue_limit_before = now / c.granularity_ns;
            now += static_cast<std::int64_t>(uniform(rng, jump + 1));
            std::vector<std::pair<std::int64_t, std::uint64_t>> got;
            std::map<std::uint64_t, std::int64_t> tick_of;
            for (const auto& [cookie, id] : ids) {
                if (auto d = wheel.deadline_of(id)) {
                    tick_of[cookie] = d->time_since_epoch().count() / c.granularity_ns;
                }
            }
            // Entries overdue when scheduled fire first, in scheduling order; the rest
            // fire in tick order.
            const std::int64_t overdue_limit = overdue_limit_before;
            std::int64_t last_tick = INT64_MIN;
            wheel.advance(Instant{nanoseconds(now)}, [&](std::uint64_t cookie) {
                const std::int64_t tick = tick_of.at(cookie);
                if (tick <= overdue_limit) {
                    EXPECT_EQ(last_tick, INT64_MIN) << "overdue after a wheel entry, step " << step;
                } else {
                    EXPECT_GE(tick, last_tick) << "fired out of order at step " << step;
                    last_tick = tick;
                }
                got.emplace_back(tick, cookie);
                ids.erase(cookie);
            });
            std::sort(got.begin(), got.end());
            ASSERT_EQ(got, model.advance(now)) << "step " << step << " now " << now;
        }
        ASSERT_EQ(wheel.pending(), model.size()) << "step " << step;
        ASSERT_TRUE(wheel.check_invariants()) << "step " << step;
        const auto next = wheel.next_deadline();
        const auto model_next = model.next_tick();
        ASSERT_EQ(next.has_value(), model_next.has_value()) << "step " << step;
        if (next) {
            const std::int64_t want =
                std::max(*model_next, now / c.granularity_ns) * c.granularity_ns;
            // Overdue entries may report any instant up to now; the rest must be exact.
            if (*model_next * c.granularity_ns > now) {
                ASSERT_EQ(next->time_since_epoch().count(), *model_next * c.granularity_ns)
                    << "step " << step;
            } else {
                ASSERT_LE(next->time_since_epoch().count(), want) << "step " << step;
            }
        }
    }
}

// The divider is the wheel's only arithmetic trick: compare it with the divide instruction
// at the edges (zero, one, the largest numerator and divisor, multiples and their
// neighbours, powers of two) and at random, for the default granularity and odd ones.
TEST(Divider, MatchesTheDivideInstruction) {
    std::mt19937_64 rng(0x5eed'd1f1);
    std::vector<std::uint64_t> divisors = {1,          2,          3,          7,
                                           333,        1'000,      1'000'000,  1'000'000'007,
                                           1ull << 20, 1ull << 63, UINT64_MAX, UINT64_MAX - 1};
    for (int i = 0; i < 40; ++i) divisors.push_back(rng() >> (rng() % 64) | 1);
    for (const std::uint64_t d : divisors) {
        const Divider div(d);
        std::vector<std::uint64_t> numerators = {0, 1, d - 1, d, UINT64_MAX, UINT64_MAX - 1};
        for (const std::uint64_t k : {std::uint64_t{2}, std::uint64_t{1000}, UINT64_MAX / d}) {
            if (k > UINT64_MAX / d) continue;
            numerators.push_back(k * d);
            numerators.push_back(k * d - 1);
            if (k * d < UINT64_MAX) numerators.push_back(k * d + 1);
        }
        for (int i = 0; i < 2000; ++i) numerators.push_back(rng() >> (rng() % 64));
        for (const std::uint64_t n : numerators) {
            const Divider::Result got = div.divide(n);
            ASSERT_EQ(got.quotient, n / d) << n << " / " << d;
            ASSERT_EQ(got.remainder, n % d) << n << " % " << d;
            ASSERT_EQ(div.divide_up(n), n / d + (n % d != 0 ? 1 : 0)) << n << " / " << d;
        }
    }
}

// A zero granularity is a caller's bug: the assertion names it (the divider's inverse is
// computed in the wheel's member initialisers, before the constructor's own check).
TEST(Wheel, ZeroGranularityFailsTheAssertion) {
    EXPECT_DEATH(TimerWheel(Duration::zero()), "d > 0");
}

TEST(WheelDifferential, MillisecondTicksOverMinutes) {
    run_differential({0x5eed'0001, 1'000'000, 600'000'000'000}, 20000);
}

TEST(WheelDifferential, NanosecondTicksCrossingTheHorizon) {
    // At 1 ns the horizon is 2^36 ns (about 69 s), so deadlines up to 10 minutes ahead
    // exercise clamping and re-placing as well as every level.
    run_differential({0x5eed'0002, 1, 600'000'000'000}, 20000);
}

TEST(WheelDifferential, OddGranularityShortRange) {
    run_differential({0x5eed'0003, 333, 5'000'000}, 20000);
}

TEST(WheelDifferential, ManySeeds) {
    for (std::uint64_t seed = 100; seed < 120; ++seed) {
        run_differential({seed, static_cast<std::int64_t>(1 + seed % 7), 1'000'000'000'000}, 3000);
    }
}

}  // namespace
}  // namespace iwcm::timer
