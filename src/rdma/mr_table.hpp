// Memory regions: the table behind STags.
//
// Read first: RFC 5040 section 2.2 (STag, tagged offset), RFC 5041 section
// 4.2 (the tagged buffer model), include/iwcm/verbs.hpp (MemoryRegion).
// An STag is index << 8 | key: the index names a slot of the table, the key
// (1 to 255, never 0) changes every time the slot is registered again, so an
// STag of a region that was deregistered fails to resolve (until the 8-bit
// key comes round again, as with every iWARP device). The tagged offset of
// a region's first byte is the memory's address, as siw and ibv_reg_mr do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "iwcm/verbs.hpp"

namespace iwcm::rdma {

// Why an STag, tagged offset and length do not name usable memory
// (siw_check_mem's order: STag, then rights, then bounds).
enum class MemCheck : std::uint8_t { kOk, kInvalidStag, kAccessRights, kBaseBounds };

class MrTable {
public:
    explicit MrTable(std::uint32_t max_regions);

    VResult<MemoryRegion> reg(std::span<std::byte> memory, std::uint32_t access);
    VResult<void> dereg(MrHandle mr);
    // Checks that [to, to + len) lies in the region `stag` names and that the
    // region allows `access`; on kOk, *where points at the first byte.
    MemCheck check(std::uint32_t stag, std::uint64_t to, std::uint64_t len, std::uint32_t access,
                   std::byte** where) const;
    std::size_t live() const { return live_; }

private:
    struct Slot {
        std::byte* base = nullptr;
        std::uint64_t addr = 0;
        std::size_t length = 0;
        std::uint32_t access = 0;
        std::uint32_t generation = 0;
        std::uint32_t next_free = UINT32_MAX;
        bool live = false;
    };
    static std::uint8_t key_of(std::uint32_t generation) {
        return static_cast<std::uint8_t>(generation % 255 + 1);
    }

    std::vector<Slot> slots_;
    std::uint32_t free_ = UINT32_MAX;
    std::uint32_t max_;
    std::size_t live_ = 0;
};

}  // namespace iwcm::rdma
