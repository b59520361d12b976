// Memory regions. Read first: mr_table.hpp.
#include "rdma/mr_table.hpp"

#include "iwcm/assert.hpp"

namespace iwcm::rdma {

namespace {
constexpr std::uint32_t kAccessAll = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
// 24 bits of index in an STag.
constexpr std::uint32_t kMaxIndex = 1u << 24;
}  // namespace

MrTable::MrTable(std::uint32_t max_regions) : max_(std::min(max_regions, kMaxIndex)) {}

VResult<MemoryRegion> MrTable::reg(std::span<std::byte> memory, std::uint32_t access) {
    if (memory.empty() || (access & ~kAccessAll) != 0) return fail(VerbsError::kInvalidArgument);
    std::uint32_t index = free_;
    if (index != UINT32_MAX) {
        free_ = slots_[index].next_free;
    } else {
        if (slots_.size() >= max_) return fail(VerbsError::kQueueFull);
        index = static_cast<std::uint32_t>(slots_.size());
        slots_.emplace_back();
    }
    Slot& s = slots_[index];
    IWCM_ASSERT(!s.live);
    s.base = memory.data();
    s.addr = reinterpret_cast<std::uintptr_t>(memory.data());
    s.length = memory.size();
    s.access = access;
    s.live = true;
    ++live_;
    MemoryRegion mr;
    mr.handle = {index, s.generation};
    mr.lkey = mr.rkey = index << 8 | key_of(s.generation);
    mr.addr = s.addr;
    mr.length = s.length;
    mr.access = access;
    IWCM_ASSERT(mr.lkey != 0);
    return mr;
}

VResult<void> MrTable::dereg(MrHandle mr) {
    if (mr.index >= slots_.size()) return fail(VerbsError::kInvalidHandle);
    Slot& s = slots_[mr.index];
    if (!s.live || s.generation != mr.generation) return fail(VerbsError::kStaleHandle);
    s.live = false;
    s.base = nullptr;
    ++s.generation;  // the next registration of the slot has another key
    s.next_free = free_;
    free_ = mr.index;
    IWCM_ASSERT(live_ > 0);
    --live_;
    return {};
}

MemCheck MrTable::check(std::uint32_t stag, std::uint64_t to, std::uint64_t len,
                        std::uint32_t access, std::byte** where) const {
    std::uint32_t index = stag >> 8;
    if (index >= slots_.size()) return MemCheck::kInvalidStag;
    const Slot& s = slots_[index];
    if (!s.live || key_of(s.generation) != (stag & 0xFF)) return MemCheck::kInvalidStag;
    if ((s.access & access) != access) return MemCheck::kAccessRights;
    // Overflow-safe: to >= addr and to + len <= addr + length.
    if (to < s.addr || to - s.addr > s.length || len > s.length - (to - s.addr)) {
        return MemCheck::kBaseBounds;
    }
    if (where != nullptr) *where = s.base + (to - s.addr);
    return MemCheck::kOk;
}

}  // namespace iwcm::rdma
