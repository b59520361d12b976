// The timing wheel's out-of-line parts. Read wheel.hpp's opening essay first.
#include "timer/wheel.hpp"

#include <algorithm>
#include <limits>

namespace iwcm::timer {

TimerWheel::TimerWheel(Duration granularity, Instant start)
    : granularity_(granularity),
      start_(start),
      granularity_ns_(static_cast<std::uint64_t>(granularity.count())) {
    IWCM_ASSERT(granularity.count() > 0);
    IWCM_ASSERT(kSentinels < kNil);
    // Sentinels are entries too: each one heads an empty circular list, pointing at itself.
    slab_.resize(kSentinels);
    for (std::uint32_t i = 0; i < kSentinels; ++i) {
        slab_[i].next = i;
        slab_[i].prev = i;
    }
}

std::uint64_t TimerWheel::floor_tick(Instant now) const {
    const std::int64_t n = now.time_since_epoch().count();
    const std::int64_t s = start_.time_since_epoch().count();
    if (n <= s) return 0;
    const std::uint64_t diff = static_cast<std::uint64_t>(n) - static_cast<std::uint64_t>(s);
    return granularity_ns_.divide(diff).quotient;
}

Instant TimerWheel::tick_to_instant(std::uint64_t tick) const {
    // Saturate rather than wrap: a tick this far out can only come from kInstantNever.
    const std::int64_t s = start_.time_since_epoch().count();
    const std::uint64_t room =
        static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) -
        static_cast<std::uint64_t>(std::max<std::int64_t>(s, 0));
    const std::uint64_t g = granularity_ns_.divisor();
    if (tick > room / g) return kInstantNever;
    return start_ + Duration{static_cast<std::int64_t>(tick * g)};
}

std::uint32_t TimerWheel::grow() {
    IWCM_ASSERT(slab_.size() < kNil - 1);
    slab_.emplace_back();
    return static_cast<std::uint32_t>(slab_.size() - 1);
}

void TimerWheel::splice_all(std::uint32_t from, std::uint32_t to) {
    IWCM_ASSERT(from != to && !list_empty(from));
    const std::uint32_t first = slab_[from].next;
    const std::uint32_t last = slab_[from].prev;
    const std::uint32_t to_last = slab_[to].prev;
    slab_[to_last].next = first;
    slab_[first].prev = to_last;
    slab_[last].next = to;
    slab_[to].prev = last;
    slab_[from].next = from;
    slab_[from].prev = from;
    if (from < kSlotSentinels) occupied_[from / kSlots] &= ~(std::uint64_t{1} << (from % kSlots));
}

std::optional<Instant> TimerWheel::deadline_of(TimerId id) const {
    if (!live(id)) return std::nullopt;
    return tick_to_instant(slab_[id.index].tick);
}

std::uint64_t TimerWheel::slot_start(unsigned level, unsigned slot) const {
    const unsigned shift = kSlotBits * level;
    const unsigned span_shift = shift + kSlotBits;
    const std::uint64_t base = (now_tick_ >> span_shift) << span_shift;
    const unsigned current = static_cast<unsigned>(now_tick_ >> shift) % kSlots;
    // Only the top level wraps: a lower-level entry is always ahead within its window.
    IWCM_ASSERT(level == kTopLevel || slot > current);
    const std::uint64_t wrap = slot <= current ? std::uint64_t{1} << span_shift : 0;
    return base + (std::uint64_t{slot} << shift) + wrap;
}

unsigned TimerWheel::first_slot(unsigned level) const {
    IWCM_ASSERT(occupied_[level] != 0);
    const unsigned after = static_cast<unsigned>((now_tick_ >> (kSlotBits * level)) + 1) % kSlots;
    const std::uint64_t rotated = std::rotr(occupied_[level], static_cast<int>(after));
    return (after + static_cast<unsigned>(std::countr_zero(rotated))) % kSlots;
}

std::optional<TimerWheel::SlotRef> TimerWheel::earliest_slot() const {
    // Each level lies wholly before every occupied slot of the levels above it, so the
    // first non-empty level holds the earliest slot.
    for (unsigned level = 0; level < kLevels; ++level) {
        if (occupied_[level] == 0) continue;
        const unsigned slot = first_slot(level);
        return SlotRef{level, slot, slot_start(level, slot)};
    }
    return std::nullopt;
}

void TimerWheel::open_slot(const SlotRef& ref) {
    IWCM_ASSERT(ref.start > now_tick_);
    const std::uint32_t head = ref.level * kSlots + ref.slot;
    now_tick_ = ref.start;
    splice_all(head, kFiring);
    // Entries due exactly now stay in the batch; later ones move down (or, if clamped,
    // forward). No user code runs here, so walking with a saved successor is safe.
    std::uint32_t index = slab_[kFiring].next;
    while (index != kFiring) {
        const std::uint32_t next = slab_[index].next;
        IWCM_ASSERT(slab_[index].tick >= now_tick_);
        if (slab_[index].tick != now_tick_) {
            unlink(index);
            place(index);
        }
        index = next;
    }
}

std::uint64_t TimerWheel::min_tick_in(std::uint32_t head) const {
    std::uint64_t best = kNoTick;
    for (std::uint32_t i = slab_[head].next; i != head; i = slab_[i].next) {
        best = std::min(best, slab_[i].tick);
    }
    return best;
}

void TimerWheel::recompute_next() const {
    // Overdue and firing entries are usually few; inside an advance() callback they may be
    // later than a wheel entry that this same call will still fire, so both are looked at.
    std::uint64_t best = std::min(min_tick_in(kOverdue), min_tick_in(kFiring));
    unsigned level = 0;
    while (level < kLevels && occupied_[level] == 0) ++level;
    if (level == 0) {
        best = std::min(best, slot_start(0, first_slot(0)));
    } else if (level < kTopLevel) {
        best = std::min(best, min_tick_in(level * kSlots + first_slot(level)));
    } else if (level == kTopLevel) {
        // Clamped far entries may sit in an earlier top slot than a nearer entry, so walk
        // the top slots in rotation order (their starts increase) until one starts after
        // the best expiry found so far.
        const unsigned first = first_slot(kTopLevel);
        for (unsigned k = 0; k < kSlots; ++k) {
            const unsigned slot = (first + k) % kSlots;
            if ((occupied_[kTopLevel] >> slot & 1) == 0) continue;
            if (slot_start(kTopLevel, slot) >= best) break;
            best = std::min(best, min_tick_in(kTopLevel * kSlots + slot));
        }
    }
    cached_tick_ = best;
    cache_valid_ = true;
}

bool TimerWheel::check_invariants() const {
    std::size_t count = 0;
    for (std::uint32_t head = 0; head < kSentinels; ++head) {
        const unsigned level = head / kSlots;
        const unsigned slot = head % kSlots;
        const bool is_slot = head < kSlotSentinels;
        if (is_slot && list_empty(head) == ((occupied_[level] >> slot & 1) != 0)) return false;
        if (head == kFiring && !advancing_ && !list_empty(head)) return false;
        for (std::uint32_t i = slab_[head].next; i != head; i = slab_[i].next) {
            if (slab_[slab_[i].next].prev != i || slab_[i].prev == kNil) return false;
            ++count;
            const std::uint64_t tick = slab_[i].tick;
            if (!is_slot) continue;
            // A wheel entry is ahead of the current tick and no earlier than its slot.
            if (tick <= now_tick_ || tick < slot_start(level, slot)) return false;
            if (level < kTopLevel) {
                const unsigned span_shift = kSlotBits * (level + 1);
                if ((tick >> span_shift) != (now_tick_ >> span_shift)) return false;
                if (((tick >> (kSlotBits * level)) % kSlots) != slot) return false;
            }
        }
    }
    return count == pending_;
}

std::optional<Instant> TimerWheel::next_deadline() const {
    if (pending_ == 0) return std::nullopt;
    if (!cache_valid_) recompute_next();
    IWCM_ASSERT(cached_tick_ != kNoTick);
    return tick_to_instant(cached_tick_);
}

}  // namespace iwcm::timer
