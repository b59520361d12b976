// Memory regions. Read first: mr_table.hpp.
#include "rdma/mr_table.hpp"

#include <algorithm>

#include "cm/isn.hpp"
#include "iwcm/assert.hpp"

namespace iwcm::rdma {

namespace {
constexpr std::uint32_t kAccessRemote = kAccessRemoteWrite | kAccessRemoteRead;
constexpr std::uint32_t kAccessAll = kAccessLocalWrite | kAccessRemote | kAccessMwBind;
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

std::optional<std::uint32_t> MrTable::take_slot() {
    if (free_.empty()) {
        const auto size = static_cast<std::uint32_t>(slots_.size());
        const std::uint32_t add = std::min(kGrowth, max_ - size);
        if (add == 0) return std::nullopt;
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
    IWCM_ASSERT(!s.live && s.windows == 0);
    // The key: 1 to 255 (the draw's low half), never the slot's previous one.
    std::uint8_t key = static_cast<std::uint8_t>(r % 254 + 1);
    if (key >= s.key && s.key != 0) ++key;
    s.key = key;
    s.live = true;
    ++live_;
    return index;
}

// The slot goes back to the free list; its generation makes old handles stale.
void MrTable::release(std::uint32_t index) {
    Slot& s = slots_[index];
    IWCM_ASSERT(s.live && s.windows == 0);
    s.live = false;
    s.window = false;
    s.match = 0x100;
    s.base = nullptr;
    s.qp = kLocalUse;
    ++s.generation;
    free_.push_back(index);
    IWCM_ASSERT(live_ > 0);
    --live_;
}

VResult<MemoryRegion> MrTable::reg(std::span<std::byte> memory, std::uint32_t access,
                                   std::uint32_t pd) {
    if (memory.empty() || (access & ~kAccessAll) != 0) return fail(VerbsError::kInvalidArgument);
    const std::optional<std::uint32_t> taken = take_slot();
    if (!taken) return fail(VerbsError::kQueueFull);
    const std::uint32_t index = *taken;
    Slot& s = slots_[index];
    const std::uint8_t key = s.key;
    s.match = key;
    s.base = memory.data();
    s.addr = reinterpret_cast<std::uintptr_t>(memory.data());
    s.length = memory.size();
    s.access = access;
    s.pd = pd;
    MemoryRegion mr;
    mr.handle = {index, s.generation};
    mr.lkey = mr.rkey = stag_of(index, key);
    // The STag names its slot and the slot's current key, and nothing else.
    IWCM_ASSERT(((mr.rkey >> 8) ^ index_mask_) == index && (mr.rkey & 0xFFu) == key);
    mr.addr = s.addr;
    mr.length = s.length;
    mr.access = access;
    mr.pd = pd;
    return mr;
}

VResult<void> MrTable::dereg(MrHandle mr) {
    if (mr.index >= slots_.size()) return fail(VerbsError::kInvalidHandle);
    Slot& s = slots_[mr.index];
    if (!s.live || s.window || s.generation != mr.generation) return fail(VerbsError::kStaleHandle);
    // ibv_dereg_mr(3): EBUSY while memory windows are bound to the region.
    if (s.windows > 0) return fail(VerbsError::kWrongState);
    IWCM_ASSERT(s.base != nullptr && s.key != 0);  // reg gave it memory and a key
    release(mr.index);
    return {};
}

MrTable::Invalidation MrTable::invalidate(std::uint32_t stag, std::uint32_t pd, std::uint32_t qp,
                                          bool dry) {
    const std::uint32_t index = (stag >> 8) ^ index_mask_;
    if (index >= slots_.size()) return Invalidation::kNoSuchStag;
    Slot& s = slots_[index];
    // A live region's STag names it, valid or invalidated already (the key is kept).
    if (!s.live || s.key != (stag & 0xFF)) return Invalidation::kNoSuchStag;
    // A window only while bound, and only on its own stream.
    if (s.window && (s.match == 0x100 || s.qp != qp)) return Invalidation::kPdMismatch;
    if (s.pd != pd) return Invalidation::kPdMismatch;
    if (dry) return Invalidation::kOk;
    if (s.window) {
        unbind(s);
    } else {
        s.match = 0x100;
    }
    IWCM_ASSERT(check(stag, s.addr, 0, 0, pd, qp, nullptr) == MemCheck::kInvalidStag);
    return Invalidation::kOk;
}

// ---------------------------------------------------------------- memory windows

VResult<MemoryWindow> MrTable::alloc_mw(std::uint32_t pd) {
    const std::optional<std::uint32_t> taken = take_slot();
    if (!taken) return fail(VerbsError::kQueueFull);
    Slot& s = slots_[*taken];
    s.window = true;
    s.pd = pd;
    s.access = 0;
    s.match = 0x100;  // invalid until bound
    IWCM_ASSERT(s.qp == kLocalUse && s.windows == 0);
    return MemoryWindow{{*taken, s.generation}, stag_of(*taken, s.key), pd};
}

VResult<void> MrTable::dealloc_mw(MwHandle mw) {
    if (mw.index >= slots_.size()) return fail(VerbsError::kInvalidHandle);
    Slot& s = slots_[mw.index];
    if (!s.live || !s.window || s.generation != mw.generation)
        return fail(VerbsError::kStaleHandle);
    // A window names memory exactly while it is bound (bind, unbind).
    IWCM_ASSERT((s.match != 0x100) == (s.base != nullptr));
    if (s.match != 0x100) unbind(s);
    release(mw.index);
    return {};
}

MrTable::Bind MrTable::bind(MwHandle mw, std::uint32_t stag, std::uint32_t qp, std::uint32_t pd,
                            const WindowBind& to) {
    if (mw.index >= slots_.size()) return Bind::kNoWindow;
    Slot& w = slots_[mw.index];
    if (!w.live || !w.window || w.generation != mw.generation) return Bind::kNoWindow;
    if (((stag >> 8) ^ index_mask_) != mw.index) return Bind::kStagIndex;
    if (w.match != 0x100) return Bind::kBound;
    if (w.pd != pd) return Bind::kPdMismatch;
    const std::uint32_t ri = (to.lkey >> 8) ^ index_mask_;
    if (ri >= slots_.size()) return Bind::kNoRegion;
    Slot& r = slots_[ri];
    if (!r.live || r.window || r.match != (to.lkey & 0xFF)) return Bind::kNoRegion;
    if (r.pd != pd) return Bind::kPdMismatch;
    if ((to.access & ~kAccessRemote) != 0) return Bind::kRights;
    if ((r.access & kAccessMwBind) == 0 ||
        ((to.access & kAccessRemoteWrite) != 0 && (r.access & kAccessLocalWrite) == 0)) {
        return Bind::kRegionRights;
    }
    if (to.addr < r.addr || to.addr - r.addr > r.length ||
        to.length > r.length - (to.addr - r.addr))
        return Bind::kBounds;
    w.key = static_cast<std::uint8_t>(stag & 0xFF);
    w.match = w.key;
    w.base = r.base + (to.addr - r.addr);
    w.addr = to.addr;
    w.length = to.length;
    w.access = to.access;
    w.qp = qp;
    w.parent = ri;
    ++r.windows;
    ++bound_;
    IWCM_ASSERT(check(stag, to.addr, to.length, to.access, pd, qp, nullptr) == MemCheck::kOk);
    return Bind::kOk;
}

void MrTable::unbind(Slot& w) {
    IWCM_ASSERT(w.window && w.match != 0x100);
    Slot& r = slots_[w.parent];
    IWCM_ASSERT(r.live && r.windows > 0);
    --r.windows;
    IWCM_ASSERT(bound_ > 0);
    --bound_;
    w.match = 0x100;
    w.base = nullptr;
    w.qp = kLocalUse;
}

void MrTable::unbind_qp(std::uint32_t qp) {
    if (bound_ == 0) return;
    for (Slot& s : slots_) {
        if (s.live && s.window && s.match != 0x100 && s.qp == qp) unbind(s);
    }
}

}  // namespace iwcm::rdma
