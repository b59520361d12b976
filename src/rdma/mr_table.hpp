// Memory regions: the table behind STags.
//
// Read first: RFC 5040 section 2.2 (STag, tagged offset), RFC 5041 section
// 4.2 (the tagged buffer model), include/iwcm/verbs.hpp (MemoryRegion).
// An STag is index << 8 | key. Neither part can be foreseen by a peer:
//   - the key (1 to 255) is drawn for each registration from a keyed
//     pseudo-random function (SipHash-2-4 over a counter, under a 128-bit
//     secret the device draws from the kernel's generator), and differs from
//     the key the slot had before, so an STag of a deregistered region fails
//     to resolve when its slot is registered again;
//   - the index is a slot drawn at random among the free ones, XORed with a
//     24-bit mask from the same function, so indices are neither sequential
//     nor counted from zero.
// A region belongs to a protection domain (a number the application chooses);
// it resolves only for queue pairs of the same domain (siw_check_mem's order:
// STag, domain, rights, bounds). The tagged offset of a region's first byte is
// the memory's address, as siw and ibv_reg_mr do.
//
// Memory windows (type 2B, RFC 5040 section 2.2 "Memory Window"; ibv_alloc_mw(3))
// share the slots and the STag space: a window is allocated invalid, bound through a
// queue pair's send queue to a range of a region registered with kAccessMwBind, and
// then names that range, with its own remote rights, for the peer of that one queue
// pair only, until it is invalidated (locally, or by the peer's Send with Invalidate)
// and may be bound again. The key byte of a bound window's STag is the application's
// choice (the verbs let it step the key with ibv_inc_rkey); its index is drawn as a
// region's. A region cannot be deregistered while windows are bound to it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "iwcm/assert.hpp"
#include "iwcm/verbs.hpp"

namespace iwcm::rdma {

// Why an STag, tagged offset and length do not name usable memory.
enum class MemCheck : std::uint8_t { kOk, kInvalidStag, kPdMismatch, kAccessRights, kBaseBounds };

// Who names an STag in MrTable::check: the peer of a queue pair (its index), or the
// application itself through an SGE's lkey. A window serves only its QP's peer.
constexpr std::uint32_t kLocalUse = UINT32_MAX;

// What a memory window is bound to (MrTable::bind): a range of the region whose STag is
// `lkey`, with remote rights `access` (kAccessRemoteRead, kAccessRemoteWrite).
struct WindowBind {
    std::uint32_t lkey = 0;
    std::uint64_t addr = 0;
    std::uint32_t length = 0;
    std::uint32_t access = 0;
};

class MrTable {
public:
    MrTable(std::uint32_t max_regions, const std::array<std::uint8_t, 16>& key_secret);

    VResult<MemoryRegion> reg(std::span<std::byte> memory, std::uint32_t access, std::uint32_t pd);
    VResult<void> dereg(MrHandle mr);
    // Checks that `stag` names a live region (or a bound window) of protection domain
    // `pd` that `user` (a QP's index, or kLocalUse) may use, that it allows `access`
    // and that [to, to + len) lies in it; on kOk, *where points at the first byte.
    // (Inline: every FPDU that names memory calls it.)
    MemCheck check(std::uint32_t stag, std::uint64_t to, std::uint64_t len, std::uint32_t access,
                   std::uint32_t pd, std::uint32_t user, std::byte** where) const {
        const std::uint32_t index = (stag >> 8) ^ index_mask_;
        if (index >= slots_.size()) return MemCheck::kInvalidStag;
        const Slot& s = slots_[index];
        if (!s.live || s.match != (stag & 0xFF)) return MemCheck::kInvalidStag;
        // A window is no lkey, and serves the stream it was bound on only.
        if (s.window && s.qp != user) {
            return user == kLocalUse ? MemCheck::kInvalidStag : MemCheck::kPdMismatch;
        }
        if (s.pd != pd) return MemCheck::kPdMismatch;
        if ((s.access & access) != access) return MemCheck::kAccessRights;
        // Overflow-safe: to >= addr and to + len <= addr + length.
        if (to < s.addr || to - s.addr > s.length || len > s.length - (to - s.addr)) {
            return MemCheck::kBaseBounds;
        }
        // A live region, or a bound window, always names memory (reg, bind).
        IWCM_ASSERT(s.base != nullptr);
        if (where != nullptr) *where = s.base + (to - s.addr);
        return MemCheck::kOk;
    }
    std::size_t live() const { return live_; }

    // ---- memory windows ----
    // A window of `pd`, invalid until bound; its STag's index is fixed, its key is
    // the one of the STag a bind names.
    VResult<MemoryWindow> alloc_mw(std::uint32_t pd);
    // Unbinds the window if it is bound, and frees it.
    VResult<void> dealloc_mw(MwHandle mw);
    // Why a bind fails (each is IBV_WC_MW_BIND_ERR to the application).
    enum class Bind : std::uint8_t {
        kOk,
        kNoWindow,      // the handle names no live window
        kStagIndex,     // `stag` is not of this window (its index part differs)
        kBound,         // bound already (a type 2 window is invalidated before a new bind)
        kPdMismatch,    // the window or the region is of another domain than the QP
        kNoRegion,      // `lkey` names no valid region
        kRegionRights,  // the region was not registered with kAccessMwBind, or remote
                        // write on a region without local write
        kBounds,        // the range is not inside the region
        kRights,        // rights other than remote read and write
    };
    // Binds the window `mw` of the queue pair `qp` (domain `pd`) under the STag `stag`.
    Bind bind(MwHandle mw, std::uint32_t stag, std::uint32_t qp, std::uint32_t pd,
              const WindowBind& to);
    // Every window bound on the queue pair `qp` is invalidated (the QP is gone).
    void unbind_qp(std::uint32_t qp);

    // Invalidation (RFC 5040 section 6.10, a Send with Invalidate; siw_invalidate_stag): the
    // STag of a live region of `pd` names it no more, for the peer and for us, until the
    // region is deregistered. An STag already invalidated may be invalidated again, as
    // the verbs allow. A bound window's STag (of the queue pair `qp` only) unbinds it;
    // it may then be bound again. `dry`: only says whether it could be.
    enum class Invalidation : std::uint8_t { kOk, kNoSuchStag, kPdMismatch };
    Invalidation invalidate(std::uint32_t stag, std::uint32_t pd, std::uint32_t qp,
                            bool dry = false);

private:
    struct Slot {
        std::byte* base = nullptr;
        std::uint64_t addr = 0;
        std::size_t length = 0;
        std::uint32_t access = 0;
        std::uint32_t pd = 0;
        std::uint32_t generation = 0;
        std::uint8_t key = 0;  // 0 while the slot was never registered
        // What an STag's low byte must equal: the key while the STag is valid, a value
        // no byte has once it was invalidated.
        std::uint16_t match = 0x100;
        bool live = false;
        bool window = false;
        std::uint32_t qp = kLocalUse;  // a bound window's queue pair
        std::uint32_t parent = 0;      // a bound window's region (slot index)
        std::uint32_t windows = 0;     // a region's bound windows
    };
    // The next output of the keyed function.
    std::uint64_t draw();
    // A free slot drawn at random (kMaxIndex slots at most), with a fresh key; nullopt
    // when the table is full.
    std::optional<std::uint32_t> take_slot();
    std::uint32_t stag_of(std::uint32_t index, std::uint8_t key) const {
        return (index ^ index_mask_) << 8 | key;
    }
    void unbind(Slot& window);
    void release(std::uint32_t index);

    std::vector<Slot> slots_;
    std::vector<std::uint32_t> free_;  // free slot indices, in no order
    std::array<std::uint8_t, 16> secret_;
    std::uint64_t counter_ = 0;
    std::uint32_t index_mask_ = 0;  // 24 bits
    std::uint32_t max_;
    std::size_t live_ = 0;
    std::size_t bound_ = 0;  // windows bound (unbind_qp looks only when there are)
};

}  // namespace iwcm::rdma
