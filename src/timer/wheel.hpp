// A hierarchical timing wheel: O(1) schedule and cancel, a tick that costs only what expires.
//
// Read first: docs/design.md "Timers", then this essay, then retrans.hpp (the driver's backoff)
// and src/cm/node_timers.hpp, which puts every per-node deadline of the engine (the irdma
// send and close entries among them) on one such wheel.
//
// Why a wheel. The irdma driver keeps one kernel timer per device and, on every tick, walks
// every connection node to compare each node's timetosend with jiffies
// (irdma_cm_timer_tick). The cost of a tick therefore grows with the number of connections,
// not with the number of timers that are due. A connection manager arms a retransmission
// timer for every SYN, FIN and MPA frame it sends, and almost all of them are cancelled by
// the peer's acknowledgement long before they fire. The two operations that matter are thus
// schedule and cancel, which must be O(1), and the tick must cost only what expires. This is
// the observation behind Linux kernel/time/timer.c and folly's HHWheelTimer.
//
// The shape. Time is counted in ticks of one granularity from a start instant. There are
// kLevels levels of kSlots (64) slots each. A slot of level l spans 64^l ticks, so level 0
// holds single ticks, level 1 holds 64-tick ranges, and the top level spans 2^36 ticks in
// all, which is about 795 days at the default granularity of 1 ms. An entry sits at the
// lowest level where its expiry tick and the current tick first differ: level-0 entries
// expire within the current 64-tick window, level-1 entries within the current 4096-tick
// window but after the current 64-tick window, and so on. Ranges of different levels never
// overlap, and each lower level lies wholly before every occupied slot of a higher level.
//
// Entries live in a slab (a vector plus a free list) and are linked into their slot by
// 32-bit indices in intrusive circular doubly-linked lists whose heads are sentinel entries
// of the same slab. Schedule is: take a free entry, compute its level with one
// count-leading-zeros, link it at the tail of its slot. Cancel is: check the generation,
// unlink, put the entry back on the free list. Neither allocates once the slab has grown to
// the peak number of pending timers, and neither looks at any other entry.
//
// The tick. Each level keeps a 64-bit occupancy bitmap, so the next occupied slot of a level
// is one rotate and one count-trailing-zeros away; empty slots are never visited, however
// far time jumps. advance(now) repeatedly takes the occupied slot with the earliest start.
// If it is a level-0 slot, every entry in it is due and fires. If it is a higher slot, the
// wheel's current tick moves to the slot's start and its entries cascade into lower levels
// (Varghese and Lauck's scheme 6). An entry cascades at most once per level, so the work of
// a tick follows what expires plus the occupied slots it passes, never the number pending.
// Unlike the non-cascading Linux wheel, expiry is exact to one tick at every level.
//
// Beyond the horizon. An entry further than 2^36 ticks ahead is clamped into the top-level
// slot that comes last in rotation. When that slot comes due the entry is simply placed
// again from the new current tick: it cascades lower if it is now within the horizon, or is
// clamped again, about 2^36 ticks further on. No deadline is ever lost or fired early.
//
// The next wake-up is computed, not ticked: next_deadline() returns the exact instant of the
// earliest pending expiry (rounded up to the granularity), from a cached minimum that
// schedule lowers and that only the removal of the minimum entry invalidates. Recomputing it
// takes the first non-empty level: at level 0 the slot start is the answer, at a higher
// level the one slot is scanned. A caller (the simulator, an event loop) sleeps until then.
//
// Rounding. A deadline d becomes the tick ceil((d - start) / granularity). An entry fires
// at the first advance(now) whose now has reached that tick's instant, so it is never early
// and late by less than one granularity. A deadline that is a whole multiple of the
// granularity after start is kept exactly.
#pragma once

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "iwcm/assert.hpp"
#include "iwcm/time.hpp"

namespace iwcm::timer {

// A handle to one scheduled entry: a slab index plus the generation the entry had when it
// was scheduled. Once the entry fires or is cancelled its generation moves on, so an old
// handle can never cancel an unrelated newer entry that reuses the index.
struct TimerId {
    std::uint32_t index = UINT32_MAX;
    std::uint32_t generation = 0;

    constexpr bool valid() const { return index != UINT32_MAX; }
    friend constexpr bool operator==(TimerId, TimerId) = default;
};

// Division by a divisor fixed at construction, done as a multiplication. The wheel divides
// every deadline it is given by its granularity (ceil_tick), on the path of every armed
// timer; a 64-bit hardware divide takes tens of cycles and shows in a profile of connection
// setups (about 2 % of the time, on the instructions after the divides).
//
// inverse = floor((2^64 - 1) / d) satisfies (2^64 - d) / d <= inverse <= (2^64 - 1) / d, so
// for any 64-bit n the estimate floor(n * inverse / 2^64) lies in (n/d - n/2^64 - 1, n/d]:
// it is the quotient or one less. One compare of the remainder corrects it. Exact for every
// n and every d >= 1 (tests/timer/wheel_test.cpp checks it against the divide instruction).
class Divider {
public:
    explicit Divider(std::uint64_t d) : d_(d), inverse_(inverse_of(d)) {}

    struct Result {
        std::uint64_t quotient;
        std::uint64_t remainder;
    };
    Result divide(std::uint64_t n) const {
        std::uint64_t q = estimate(n);
        std::uint64_t r = n - q * d_;
        if (r >= d_) {
            ++q;
            r -= d_;
        }
        return {q, r};
    }
    // ceil(n / d) without the correction's branch: the estimate's remainder r lies in
    // [0, 2d), and the quotient rounded up is the estimate plus (r > 0) plus (r > d).
    std::uint64_t divide_up(std::uint64_t n) const {
        const std::uint64_t q = estimate(n);
        const std::uint64_t r = n - q * d_;
        return q + (r != 0 ? 1 : 0) + (r > d_ ? 1 : 0);
    }
    std::uint64_t divisor() const { return d_; }

private:
    // Asserted before the division, so that a zero divisor (a wheel made with a zero
    // granularity) fails the assertion rather than the divide instruction.
    static std::uint64_t inverse_of(std::uint64_t d) {
        IWCM_ASSERT(d > 0);
        return UINT64_MAX / d;
    }
    // floor(n * inverse / 2^64): the quotient or one less.
    std::uint64_t estimate(std::uint64_t n) const {
        __extension__ using Wide = unsigned __int128;
        return static_cast<std::uint64_t>((static_cast<Wide>(n) * inverse_) >> 64);
    }

    std::uint64_t d_;
    std::uint64_t inverse_;
};

class TimerWheel {
public:
    static constexpr unsigned kSlotBits = 6;
    static constexpr unsigned kSlots = 1u << kSlotBits;
    static constexpr unsigned kLevels = 6;
    // The span of the whole wheel in ticks; later deadlines are clamped and re-placed.
    static constexpr std::uint64_t kHorizonTicks = std::uint64_t{1} << (kSlotBits * kLevels);

    explicit TimerWheel(Duration granularity = std::chrono::milliseconds(1),
                        Instant start = kInstantZero);

    TimerWheel(const TimerWheel&) = delete;
    TimerWheel& operator=(const TimerWheel&) = delete;
    TimerWheel(TimerWheel&&) noexcept = default;
    TimerWheel& operator=(TimerWheel&&) noexcept = default;

    // Arms an entry that fires with `cookie` once time reaches `deadline` (rounded up to the
    // granularity). O(1). A deadline at or before the wheel's current tick, or one scheduled
    // from inside an advance() callback for a time that advance() covers, fires at the next
    // advance() call whatever its now.
    TimerId schedule(Instant deadline, std::uint64_t cookie) {
        return schedule_tick(to_tick(deadline), cookie);
    }

    // Disarms an entry. O(1). Returns false for an invalid, stale, fired or cancelled id.
    bool cancel(TimerId id);

    // Moves an armed entry to a new deadline and cookie, as cancel() and then schedule()
    // would, but in place: no slab entry is freed or taken. The old id goes stale; the one
    // returned names the entry. An id that is not armed gets an invalid TimerId and nothing
    // changes. O(1).
    TimerId reschedule(TimerId id, Instant deadline, std::uint64_t cookie) {
        return reschedule_tick(id, to_tick(deadline), cookie);
    }

    // The same three in ticks, for a caller that keeps its deadlines as ticks (a tick is the
    // rounded deadline: to_tick(), and tick_instant() back).
    TimerId schedule_tick(std::uint64_t tick, std::uint64_t cookie);
    TimerId reschedule_tick(TimerId id, std::uint64_t tick, std::uint64_t cookie);
    std::uint64_t to_tick(Instant deadline) const { return ceil_tick(deadline); }
    Instant tick_instant(std::uint64_t tick) const { return tick_to_instant(tick); }
    // The tick of an armed entry (asserted).
    std::uint64_t tick_of(TimerId id) const {
        IWCM_ASSERT(live(id));
        return slab_[id.index].tick;
    }
    // Inside an advance() callback: the tick advance() fires up to (an entry whose tick is at
    // or before it is due in this call). Outside: the current tick.
    std::uint64_t due_tick() const { return target_tick_; }

    // Fires every entry whose rounded deadline is <= now, calling fn(cookie) for each, and
    // returns how many fired. Order: first the entries that were already overdue when they
    // were scheduled, in scheduling order; then the others in deadline order (entries of
    // one tick in unspecified order).
    //
    // Inside fn the caller may schedule and cancel freely. An entry cancelled from fn before
    // its turn does not fire. An entry scheduled from fn for a time <= now fires in the NEXT
    // call, not this one: one call's work is bounded by what was pending when it began, so a
    // callback that re-arms itself "now" cannot spin forever. advance() must not be called
    // from inside fn. A now earlier than a previous one fires only entries already overdue.
    template <class Fn>
    std::size_t advance(Instant now, Fn&& fn);

    // The earliest instant at which advance() will fire something, exact to the granularity,
    // or nullopt when nothing is pending. An instant at or before the last advance() time
    // means "due at the next advance()". Amortised O(1): cached between calls.
    std::optional<Instant> next_deadline() const;

    std::size_t pending() const { return pending_; }

    // Additions to the agreed interface.
    Duration granularity() const { return granularity_; }
    Instant start() const { return start_; }
    // The instant up to which every due entry has fired (the last advance(), rounded down).
    Instant current_time() const { return tick_to_instant(now_tick_); }
    // True while `id` names an armed entry.
    bool is_pending(TimerId id) const { return live(id); }
    // The rounded deadline of an armed entry, or nullopt for a stale id.
    std::optional<Instant> deadline_of(TimerId id) const;
    // Calls fn(cookie) for every pending entry, in no particular order; fn must not change
    // the wheel. O(entries ever allocated): for tearing down.
    template <class Fn>
    void for_each_pending(Fn&& fn) const {
        for (std::size_t i = kSentinels; i < slab_.size(); ++i)
            if (slab_[i].prev != kNil) fn(slab_[i].cookie);
    }
    // Walks every entry and checks the wheel's invariants; O(pending), for tests.
    bool check_invariants() const;
    // Grows the slab so that `entries` timers can be pending without allocating.
    void reserve(std::size_t entries) { slab_.reserve(kSentinels + entries); }

private:
    static constexpr std::uint32_t kNil = UINT32_MAX;
    static constexpr std::uint64_t kNoTick = UINT64_MAX;
    static constexpr std::uint32_t kSlotSentinels = kLevels * kSlots;
    // Entries that were due when scheduled; they fire at the start of the next advance().
    static constexpr std::uint32_t kOverdue = kSlotSentinels;
    // The batch that advance() is firing right now.
    static constexpr std::uint32_t kFiring = kSlotSentinels + 1;
    static constexpr std::uint32_t kSentinels = kSlotSentinels + 2;
    static constexpr unsigned kTopLevel = kLevels - 1;

    // 32 bytes. A free entry has prev == kNil and next == the next free entry.
    struct Entry {
        std::uint64_t tick = 0;
        std::uint64_t cookie = 0;
        std::uint32_t next = kNil;
        std::uint32_t prev = kNil;
        std::uint32_t generation = 1;
        std::uint32_t reserved = 0;
    };

    struct SlotRef {
        unsigned level;
        unsigned slot;
        std::uint64_t start;
    };

    std::uint64_t ceil_tick(Instant deadline) const;
    std::uint64_t floor_tick(Instant now) const;
    Instant tick_to_instant(std::uint64_t tick) const;
    bool live(TimerId id) const;

    std::uint32_t allocate();
    // The cold half of allocate(): the free list is empty, so the slab grows.
    std::uint32_t grow();
    void release(std::uint32_t index);
    bool list_empty(std::uint32_t head) const { return slab_[head].next == head; }
    void link_tail(std::uint32_t head, std::uint32_t index);
    void unlink(std::uint32_t index);
    void splice_all(std::uint32_t from, std::uint32_t to);

    // Puts an entry whose tick is after now_tick_ into its wheel slot.
    void place(std::uint32_t index);
    std::uint64_t slot_start(unsigned level, unsigned slot) const;
    // The first occupied slot after the current one at `level`, in rotation order.
    unsigned first_slot(unsigned level) const;
    std::optional<SlotRef> earliest_slot() const;
    // Moves the earliest slot's due entries to kFiring and cascades the rest.
    void open_slot(const SlotRef& slot);
    std::uint64_t min_tick_in(std::uint32_t head) const;
    void recompute_next() const;
    void forget_if_min(std::uint64_t tick) {
        if (cache_valid_ && tick == cached_tick_) cache_valid_ = false;
    }

    template <class Fn>
    std::size_t fire_batch(Fn& fn);

    Duration granularity_;
    Instant start_;
    Divider granularity_ns_;
    std::vector<Entry> slab_;
    std::uint32_t free_head_ = kNil;
    std::size_t pending_ = 0;
    // Every entry with tick <= now_tick_ has fired or sits in kOverdue / kFiring.
    std::uint64_t now_tick_ = 0;
    // The tick advance() is moving to while it runs; equal to now_tick_ at every other time,
    // so that schedule() finds "overdue" with one compare.
    std::uint64_t target_tick_ = 0;
    bool advancing_ = false;
    std::uint64_t occupied_[kLevels] = {};
    mutable std::uint64_t cached_tick_ = kNoTick;
    mutable bool cache_valid_ = true;
};

// schedule() and cancel() and the steps they take are defined here, inline: they are the
// two operations of every connection setup (arm on send, disarm on the acknowledgement),
// and a call into another file cost more than the work itself.

inline std::uint64_t TimerWheel::ceil_tick(Instant deadline) const {
    const std::int64_t d = deadline.time_since_epoch().count();
    const std::int64_t s = start_.time_since_epoch().count();
    if (d <= s) return 0;
    // d > s, so the difference fits in 64 unsigned bits even when s is negative.
    const std::uint64_t diff = static_cast<std::uint64_t>(d) - static_cast<std::uint64_t>(s);
    return granularity_ns_.divide_up(diff);
}

inline bool TimerWheel::live(TimerId id) const {
    // One unsigned compare rejects sentinels, indices past the slab and the invalid index.
    if (id.index - kSentinels >= slab_.size() - kSentinels) return false;
    const Entry& e = slab_[id.index];
    return e.generation == id.generation && e.prev != kNil;
}

inline std::uint32_t TimerWheel::allocate() {
    const std::uint32_t index = free_head_;
    if (index == kNil) [[unlikely]]
        return grow();
    free_head_ = slab_[index].next;
    return index;
}

inline void TimerWheel::release(std::uint32_t index) {
    Entry& e = slab_[index];
    IWCM_ASSERT(index >= kSentinels);
    // A new generation makes every handle to the old use stale; zero is skipped so that a
    // default TimerId{} with a forged index still never matches.
    const std::uint32_t generation = e.generation + 1;
    e.generation = generation + (generation == 0 ? 1 : 0);
    e.prev = kNil;
    e.next = free_head_;
    free_head_ = index;
}

inline void TimerWheel::link_tail(std::uint32_t head, std::uint32_t index) {
    Entry& h = slab_[head];
    const std::uint32_t last = h.prev;
    slab_[index].next = head;
    slab_[index].prev = last;
    slab_[last].next = index;
    h.prev = index;
}

inline void TimerWheel::unlink(std::uint32_t index) {
    const std::uint32_t next = slab_[index].next;
    const std::uint32_t prev = slab_[index].prev;
    IWCM_ASSERT(next != kNil && prev != kNil);
    slab_[prev].next = next;
    slab_[next].prev = prev;
    // Neighbours that are the same node mean only a sentinel is left: the list is empty.
    if (next == prev && next < kSlotSentinels) {
        occupied_[next / kSlots] &= ~(std::uint64_t{1} << (next % kSlots));
    }
}

inline void TimerWheel::place(std::uint32_t index) {
    // Both callers guarantee tick > now_tick_: schedule() by its overdue test, open_slot()
    // by keeping the entries due exactly now in the batch.
    const std::uint64_t tick = slab_[index].tick;
    const std::uint64_t differ = tick ^ now_tick_;
    unsigned level = kTopLevel;
    unsigned slot = 0;
    if (differ < kHorizonTicks) [[likely]] {
        // The highest 6-bit group in which the expiry and the current tick differ; the
        // expiry's group there is ahead of the current one. Setting the low bits makes a
        // same-window expiry come out as level 0 without a branch, and differ < 2^36
        // keeps the level at most the top one.
        const auto high_bit =
            static_cast<unsigned>(63 - std::countl_zero(differ | std::uint64_t{kSlots - 1}));
        level = high_bit / kSlotBits;
        slot = static_cast<unsigned>(tick >> (kSlotBits * level)) % kSlots;
    } else if (tick - now_tick_ < kHorizonTicks) {
        // Within the horizon but across a top-level boundary: the top level, which may
        // wrap into the next rotation.
        slot = static_cast<unsigned>(tick >> (kSlotBits * kTopLevel)) % kSlots;
    } else {
        // Beyond the horizon: the top slot that comes last in rotation. Its start is less
        // than the horizon away, so the entry is re-placed before it could be due.
        slot = static_cast<unsigned>((now_tick_ >> (kSlotBits * kTopLevel)) + kSlots - 1) % kSlots;
    }
    link_tail(level * kSlots + slot, index);
    occupied_[level] |= std::uint64_t{1} << slot;
}

inline TimerId TimerWheel::schedule_tick(std::uint64_t tick, std::uint64_t cookie) {
    const std::uint32_t index = allocate();
    Entry& e = slab_[index];
    e.tick = tick;
    e.cookie = cookie;
    // Due already: at or before the current tick, or, inside advance(), at or before the
    // tick it is advancing to. target_tick_ is both (see its declaration).
    if (tick <= target_tick_) {
        link_tail(kOverdue, index);
    } else {
        place(index);
    }
    ++pending_;
    // The cache only ever moves down here; an invalid one is recomputed when asked.
    if (tick < cached_tick_ && cache_valid_) cached_tick_ = tick;
    return TimerId{index, e.generation};
}

inline bool TimerWheel::cancel(TimerId id) {
    if (!live(id)) return false;
    // Lazy: only the removal of the cached minimum itself invalidates the cache.
    forget_if_min(slab_[id.index].tick);
    unlink(id.index);
    release(id.index);
    IWCM_ASSERT(pending_ > 0);
    --pending_;
    return true;
}

inline TimerId TimerWheel::reschedule_tick(TimerId id, std::uint64_t tick, std::uint64_t cookie) {
    if (!live(id)) return TimerId{};
    Entry& e = slab_[id.index];
    forget_if_min(e.tick);
    unlink(id.index);
    // A new generation, as release() gives, so that the old id no longer matches.
    const std::uint32_t generation = e.generation + 1;
    e.generation = generation + (generation == 0 ? 1 : 0);
    e.tick = tick;
    e.cookie = cookie;
    // As schedule(): overdue, or into its wheel slot.
    if (tick <= target_tick_) {
        link_tail(kOverdue, id.index);
    } else {
        place(id.index);
    }
    if (tick < cached_tick_ && cache_valid_) cached_tick_ = tick;
    return TimerId{id.index, e.generation};
}

template <class Fn>
std::size_t TimerWheel::fire_batch(Fn& fn) {
    // The batch is popped one entry at a time so that fn may cancel later members of it.
    std::size_t fired = 0;
    while (!list_empty(kFiring)) {
        const std::uint32_t index = slab_[kFiring].next;
        const std::uint64_t cookie = slab_[index].cookie;
        forget_if_min(slab_[index].tick);
        unlink(index);
        release(index);
        --pending_;
        ++fired;
        fn(cookie);
    }
    return fired;
}

template <class Fn>
std::size_t TimerWheel::advance(Instant now, Fn&& fn) {
    IWCM_ASSERT(!advancing_);
    IWCM_ASSERT(list_empty(kFiring));
    const std::uint64_t target = std::max(floor_tick(now), now_tick_);
    advancing_ = true;
    target_tick_ = target;
    std::size_t fired = 0;
    // Overdue entries go first: their ticks are at or before the current tick.
    if (!list_empty(kOverdue)) {
        splice_all(kOverdue, kFiring);
        fired += fire_batch(fn);
    }
    // Then the occupied slots in the order of their start, up to the target tick. A slot is
    // re-looked-up after each batch because fn may have cancelled or scheduled entries.
    for (auto slot = earliest_slot(); slot && slot->start <= target; slot = earliest_slot()) {
        open_slot(*slot);
        fired += fire_batch(fn);
    }
    now_tick_ = target;
    advancing_ = false;
    return fired;
}

}  // namespace iwcm::timer
