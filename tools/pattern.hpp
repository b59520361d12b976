// The byte pattern `connect --send-bytes` and `listen --send-bytes` send and
// `--expect-bytes` checks (docs/cli.md "Byte streams"; tests/interop/mpa_peer.py
// makes the same bytes for the kernel's side).
//
// The stream is cut into blocks of kBlock bytes. Block k (from 0) starts
// with k as an 8-byte big-endian number; its byte j (8 <= j < kBlock) is
// (k + j + tag) mod 256. The tag tells the two directions apart: the side
// that opened the connection (connect, a kernel client) sends kTagInitiator,
// the side that accepted it (listen, a kernel server) kTagResponder. A byte
// lost, repeated, moved or from the other direction does not match.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace iwcm::tools::pattern {

constexpr std::size_t kBlock = 4096;
constexpr std::uint8_t kTagInitiator = 0x43;  // 'C'
constexpr std::uint8_t kTagResponder = 0x53;  // 'S'

// The bytes at [offset, offset + out.size()) of the stream with this tag.
void fill(std::uint8_t tag, std::uint64_t offset, std::span<std::byte> out);

// The stream offset of the first byte of `got` (which starts at `offset`)
// that is not the pattern's, or nullopt when all match.
std::optional<std::uint64_t> first_mismatch(std::uint8_t tag, std::uint64_t offset,
                                            std::span<const std::byte> got);

}  // namespace iwcm::tools::pattern
