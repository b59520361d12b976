// Memory regions. Read first: mr_table.hpp.
#include "rdma/mr_table.hpp"

#include <algorithm>

#include "cm/isn.hpp"
#include "iwcm/assert.hpp"

namespace iwcm::rdma {

namespace {
constexpr std::uint32_t kAccessAll = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
// 24 bits of index in an STag.
constexpr std::uint32_t kMaxIndex = 1u << 24;
// Slots are added this many at a time, so that a registration's slot is drawn
// among at least this many (while the table is below its maximum).
constexpr std::uint32_t kGrowth = 64;
}  // namespace

MrTable::MrTable(std::uint32_t max_regions, const std::array<std::uint8_t, 16>& key_secret)
    : secret_(key_secret), max_(std::min(max_regions, kMaxIndex)) {
    index_mask_ = static_cast<std::uint32_t>(draw()) & (kMaxIndex - 1);
}

std::uint64_t MrTable::draw() {
    std::array<std::uint8_t, 8> in{};
    for (std::size_t i = 0; i < in.size(); ++i)
        in[i] = static_cast<std::uint8_t>(counter_ >> (8 * i));
    ++counter_;
    return cm::siphash24(secret_, in);
}

VResult<MemoryRegion> MrTable::reg(std::span<std::byte> memory, std::uint32_t access,
                                   std::uint32_t pd) {
    if (memory.empty() || (access & ~kAccessAll) != 0) return fail(VerbsError::kInvalidArgument);
    if (free_.empty()) {
        const auto size = static_cast<std::uint32_t>(slots_.size());
        const std::uint32_t add = std::min(kGrowth, max_ - size);
        if (add == 0) return fail(VerbsError::kQueueFull);
        slots_.resize(size + add);
        for (std::uint32_t i = 0; i < add; ++i) free_.push_back(size + i);
    }
    const std::uint64_t r = draw();
    // The slot: any free one (the draw's high half); swapped out of the list.
    const std::size_t pick = static_cast<std::size_t>((r >> 32) % free_.size());
    const std::uint32_t index = free_[pick];
    free_[pick] = free_.back();
    free_.pop_back();
    Slot& s = slots_[index];
    IWCM_ASSERT(!s.live);
    // The key: 1 to 255 (the draw's low half), never the slot's previous one.
    std::uint8_t key = static_cast<std::uint8_t>(r % 254 + 1);
    if (key >= s.key && s.key != 0) ++key;
    s.key = key;
    s.match = key;
    s.base = memory.data();
    s.addr = reinterpret_cast<std::uintptr_t>(memory.data());
    s.length = memory.size();
    s.access = access;
    s.pd = pd;
    s.live = true;
    ++live_;
    MemoryRegion mr;
    mr.handle = {index, s.generation};
    mr.lkey = mr.rkey = (index ^ index_mask_) << 8 | key;
    mr.addr = s.addr;
    mr.length = s.length;
    mr.access = access;
    mr.pd = pd;
    return mr;
}

VResult<void> MrTable::dereg(MrHandle mr) {
    if (mr.index >= slots_.size()) return fail(VerbsError::kInvalidHandle);
    Slot& s = slots_[mr.index];
    if (!s.live || s.generation != mr.generation) return fail(VerbsError::kStaleHandle);
    s.live = false;
    s.match = 0x100;
    s.base = nullptr;
    ++s.generation;
    free_.push_back(mr.index);
    IWCM_ASSERT(live_ > 0);
    --live_;
    return {};
}

MrTable::Invalidation MrTable::invalidate(std::uint32_t stag, std::uint32_t pd, bool dry) {
    const std::uint32_t index = (stag >> 8) ^ index_mask_;
    if (index >= slots_.size()) return Invalidation::kNoSuchStag;
    Slot& s = slots_[index];
    // A live region's STag names it, valid or invalidated already (the key is kept).
    if (!s.live || s.key != (stag & 0xFF)) return Invalidation::kNoSuchStag;
    if (s.pd != pd) return Invalidation::kPdMismatch;
    if (!dry) s.match = 0x100;
    IWCM_ASSERT(dry || check(stag, s.addr, 0, 0, pd, nullptr) == MemCheck::kInvalidStag);
    return Invalidation::kOk;
}

}  // namespace iwcm::rdma
