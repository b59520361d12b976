// copy_bytes: memcpy for the data path's long copies, in pieces that glibc
// copies with vector loads and stores.
//
// Read first: docs/perf.md ("Copies"). glibc's memcpy copies a block of
// 4 KiB or more with `rep movsb`; on AMD EPYC that instruction is several
// times slower when source and destination lie at certain distances modulo
// 4 KiB, which the stream's buffers and frames meet by chance (one stream
// runs at 1.5 or 5 GB/s depending on the allocator's layout).
// Pieces of 2 KiB stay on the vector path at full speed whatever the layout.
#pragma once

#include <cstddef>
#include <cstring>

namespace iwcm::wire {

constexpr std::size_t kCopyPiece = 2048;

inline void copy_bytes(std::byte* dst, const std::byte* src, std::size_t n) {
    for (; n > kCopyPiece; dst += kCopyPiece, src += kCopyPiece, n -= kCopyPiece) {
        std::memcpy(dst, src, kCopyPiece);
    }
    std::memcpy(dst, src, n);
}

}  // namespace iwcm::wire
