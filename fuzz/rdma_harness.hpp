// The fixed scene of fuzz_rdma (fuzz/fuzz_rdma.cpp), shared with
// make_corpus so that its seeds name real STags and tagged offsets.
//
// Read first: src/rdma/engine.hpp, src/rdma/link.hpp. An Engine with one
// queue pair over an in-memory link; six memory regions inside one arena
// mapped at a fixed address (a tagged offset is the memory's address, so the
// same input names the same bytes in every run), each between guard bytes:
//   W  1024 bytes, local and remote write: the peer's RDMA Writes;
//   R   512 bytes, remote read only: the peer's Read Requests;
//   L  1024 bytes, local write: our receives and our RDMA Read's sink;
//   S   256 bytes, no rights: the source of our Send and Write;
//   I   256 bytes, local and remote write: a region the peer's Send with
//       Invalidate or our local invalidate may take away;
//   F   256 bytes, remote write, in another protection domain (1): an STag
//       the peer may name that is not the queue pair's.
// The STags' keys come from a fixed secret (device_config), so that the
// same registrations give the same STags in every run and in make_corpus.
#pragma once

#include <sys/mman.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "rdma/engine.hpp"

namespace iwcm::fuzz {

constexpr std::uintptr_t kArenaAddr = 0x40000000;
constexpr std::size_t kGuardLen = 64;
constexpr std::byte kGuard{0xA5};

struct RegionSpec {
    std::size_t offset;
    std::size_t length;
    std::uint32_t access;
};
constexpr RegionSpec kRegionW{64, 1024, rdma::kAccessLocalWrite | rdma::kAccessRemoteWrite};
constexpr RegionSpec kRegionR{64 + 1024 + 64, 512, rdma::kAccessRemoteRead};
constexpr RegionSpec kRegionL{64 + 1024 + 64 + 512 + 64, 1024, rdma::kAccessLocalWrite};
constexpr RegionSpec kRegionS{64 + 1024 + 64 + 512 + 64 + 1024 + 64, 256, 0};
constexpr RegionSpec kRegionI{kRegionS.offset + 256 + 64, 256,
                              rdma::kAccessLocalWrite | rdma::kAccessRemoteWrite};
constexpr RegionSpec kRegionF{kRegionI.offset + 256 + 64, 256, rdma::kAccessRemoteWrite};
constexpr RegionSpec kRegions[] = {kRegionW, kRegionR, kRegionL, kRegionS, kRegionI, kRegionF};
constexpr std::size_t kRegionCount = 6;
constexpr std::size_t kInvalidatable = 4;  // I
constexpr std::size_t kForeign = 5;        // F, the region of another protection domain
constexpr std::uint32_t kForeignPd = 1;
constexpr std::size_t kArenaLen = kRegionF.offset + kRegionF.length + kGuardLen;

// Our posted work: receives of 64, 64, 300 and 600 bytes in L (wr_id 100 +
// i), a Send of 100 bytes (1), an RDMA Write of 200 bytes (2) and an RDMA
// Read of 300 bytes into L at kReadSinkOffset (3), all from or to the peer's
// STag kPeerStag at kPeerTo.
constexpr std::uint32_t kRecvLens[] = {64, 64, 300, 600};
constexpr std::size_t kReadSinkOffset = 700;
constexpr std::uint32_t kReadLen = 300;
constexpr std::uint32_t kPeerStag = 0x26243600;
constexpr std::uint64_t kPeerTo = 0x55a717c4b9a0;

// The arena at kArenaAddr when the kernel gives it (elsewhere otherwise:
// the target still runs, but seeds' tagged offsets then miss), guards filled.
inline std::byte* arena() {
    static std::byte* base = [] {
        void* p = mmap(reinterpret_cast<void*>(kArenaAddr), kArenaLen, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == MAP_FAILED)
            p = mmap(nullptr, kArenaLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                     0);
        if (p == MAP_FAILED) std::abort();
        return static_cast<std::byte*>(p);
    }();
    return base;
}

// Fills the arena: guards with kGuard, regions with a pattern.
inline void reset_arena() {
    std::byte* a = arena();
    std::memset(a, static_cast<int>(kGuard), kArenaLen);
    for (const RegionSpec& r : kRegions)
        for (std::size_t i = 0; i < r.length; ++i) a[r.offset + i] = static_cast<std::byte>(i * 7);
}

inline std::uint64_t region_to(const RegionSpec& r, std::size_t offset = 0) {
    return reinterpret_cast<std::uint64_t>(arena() + r.offset + offset);
}

// The engine's configuration: a fixed STag secret (DeviceConfig::key_secret), or every run
// would draw its own from the kernel and the seeds' STags would name nothing.
inline rdma::DeviceConfig device_config() {
    rdma::DeviceConfig c;
    c.key_secret = std::array<std::uint8_t, 16>{0x69, 0x77, 0x61, 0x72, 0x70, 0x2d, 0x66, 0x75,
                                                0x7a, 0x7a, 0x2d, 0x72, 0x64, 0x6d, 0x61, 0x01};
    return c;
}

// Registers the regions in kRegions order (F in kForeignPd, the rest in 0).
inline bool register_regions(rdma::Engine& e, rdma::MemoryRegion (&mrs)[kRegionCount]) {
    for (std::size_t i = 0; i < kRegionCount; ++i) {
        auto mr = e.reg_mr({arena() + kRegions[i].offset, kRegions[i].length}, kRegions[i].access,
                           i == kForeign ? kForeignPd : 0);
        if (!mr) return false;
        mrs[i] = *mr;
    }
    return true;
}

}  // namespace iwcm::fuzz
