// tcp::RecordEnds. Read first: src/tcp/record_ends.hpp.
#include "tcp/record_ends.hpp"

#include "iwcm/assert.hpp"

namespace iwcm::tcp {

using wire::SeqNumber;

SeqNumber RecordEnds::front() const {
    IWCM_ASSERT(!empty());
    return at(0);
}

SeqNumber RecordEnds::back() const {
    IWCM_ASSERT(!empty());
    return at(size() - 1);
}

void RecordEnds::grow() {
    const std::uint32_t old_cap = block_ ? block_[kCap] : 0;
    const std::uint32_t cap = old_cap == 0 ? kFirstCap : 2 * old_cap;
    IWCM_ASSERT(cap > old_cap && (cap & (cap - 1)) == 0);
    auto fresh = std::make_unique<std::uint32_t[]>(kRing + cap);
    const std::size_t n = size();
    for (std::size_t i = 0; i < n; ++i) fresh[kRing + i] = at(i).value();
    fresh[kHead] = 0;
    fresh[kCount] = static_cast<std::uint32_t>(n);
    fresh[kCap] = cap;
    fresh[kHint] = block_ ? block_[kHint] : 0;
    block_ = std::move(fresh);
}

void RecordEnds::push(SeqNumber end) {
    IWCM_ASSERT(empty() || end > back());
    if (!block_ || block_[kCount] == block_[kCap]) grow();
    const std::uint32_t cap = block_[kCap];
    block_[kRing + ((block_[kHead] + block_[kCount]) & (cap - 1))] = end.value();
    ++block_[kCount];
    IWCM_ASSERT(back() == end);
}

void RecordEnds::drop_through(SeqNumber una) {
    // From the front, one end at a time: each end is dropped once, and the
    // search's cached answer (about snd_nxt, far ahead) is only shifted.
    std::uint32_t n = 0;
    while (n < size() && at(n) <= una) ++n;
    if (n == 0) return;
    block_[kHead] = (block_[kHead] + n) & (block_[kCap] - 1);
    block_[kCount] -= n;
    block_[kHint] = block_[kHint] >= n ? block_[kHint] - n : 0;
    IWCM_ASSERT(empty() || front() > una);
}

std::size_t RecordEnds::count_through(SeqNumber s) const {
    if (empty()) return 0;
    // The last answer, or the one after it (the sender moved to the next record).
    const std::size_t hint = block_[kHint];
    if (answers(hint, s)) return hint;
    if (answers(hint + 1, s)) {
        block_[kHint] = static_cast<std::uint32_t>(hint + 1);
        return hint + 1;
    }
    // A binary search: many small records may be in flight at once.
    std::size_t lo = 0;
    std::size_t hi = size();
    while (lo < hi) {
        const std::size_t mid = lo + (hi - lo) / 2;
        if (at(mid) <= s) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    IWCM_ASSERT(lo == size() || at(lo) > s);
    // The block is the cache's, not the set's: a const search may keep its answer.
    block_[kHint] = static_cast<std::uint32_t>(lo);
    return lo;
}

std::optional<SeqNumber> RecordEnds::first_after(SeqNumber s) const {
    const std::size_t i = count_through(s);
    if (i == size()) return std::nullopt;
    return at(i);
}

std::optional<SeqNumber> RecordEnds::last_before(SeqNumber s) const {
    // The ends at or below s - 1 are the ends below s.
    const std::size_t i = count_through(s + (0U - 1U));
    if (i == 0) return std::nullopt;
    return at(i - 1);
}

}  // namespace iwcm::tcp
