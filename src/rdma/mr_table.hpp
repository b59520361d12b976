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
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "iwcm/verbs.hpp"

namespace iwcm::rdma {

// Why an STag, tagged offset and length do not name usable memory.
enum class MemCheck : std::uint8_t { kOk, kInvalidStag, kPdMismatch, kAccessRights, kBaseBounds };

class MrTable {
public:
    MrTable(std::uint32_t max_regions, const std::array<std::uint8_t, 16>& key_secret);

    VResult<MemoryRegion> reg(std::span<std::byte> memory, std::uint32_t access, std::uint32_t pd);
    VResult<void> dereg(MrHandle mr);
    // Checks that `stag` names a live region of protection domain `pd`, that
    // the region allows `access` and that [to, to + len) lies in it; on kOk,
    // *where points at the first byte.
    // (Inline: every FPDU that names memory calls it.)
    MemCheck check(std::uint32_t stag, std::uint64_t to, std::uint64_t len, std::uint32_t access,
                   std::uint32_t pd, std::byte** where) const {
        const std::uint32_t index = (stag >> 8) ^ index_mask_;
        if (index >= slots_.size()) return MemCheck::kInvalidStag;
        const Slot& s = slots_[index];
        if (!s.live || s.match != (stag & 0xFF)) return MemCheck::kInvalidStag;
        if (s.pd != pd) return MemCheck::kPdMismatch;
        if ((s.access & access) != access) return MemCheck::kAccessRights;
        // Overflow-safe: to >= addr and to + len <= addr + length.
        if (to < s.addr || to - s.addr > s.length || len > s.length - (to - s.addr)) {
            return MemCheck::kBaseBounds;
        }
        if (where != nullptr) *where = s.base + (to - s.addr);
        return MemCheck::kOk;
    }
    std::size_t live() const { return live_; }

    // Invalidation (RFC 5040 section 6.10, a Send with Invalidate; siw_invalidate_stag): the
    // STag of a live region of `pd` names it no more, for the peer and for us, until the
    // region is deregistered. An STag already invalidated may be invalidated again, as
    // the verbs allow. `dry`: only says whether it could be.
    enum class Invalidation : std::uint8_t { kOk, kNoSuchStag, kPdMismatch };
    Invalidation invalidate(std::uint32_t stag, std::uint32_t pd, bool dry = false);

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
    };
    // The next output of the keyed function.
    std::uint64_t draw();

    std::vector<Slot> slots_;
    std::vector<std::uint32_t> free_;  // free slot indices, in no order
    std::array<std::uint8_t, 16> secret_;
    std::uint64_t counter_ = 0;
    std::uint32_t index_mask_ = 0;  // 24 bits
    std::uint32_t max_;
    std::size_t live_ = 0;
};

}  // namespace iwcm::rdma
