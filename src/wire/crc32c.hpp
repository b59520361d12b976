// CRC32c (Castagnoli), the MPA FPDU checksum.
//
// Read first: RFC 5044 section 4.4 (MPA's CRC is CRC32c, the iSCSI CRC of
// RFC 3385 / RFC 3720 section 12.1), RFC 3720 appendix B.4 (test vectors).
// The value is the standard reflected CRC: initial value all ones, reflected
// polynomial 0x82F63B78, final complement; crc32c("123456789") == 0xE3069283.
// On the MPA wire it is carried least-significant byte first (see fpdu.hpp).
#pragma once

#include <cstdint>

#include "wire/bytes.hpp"

namespace iwcm::wire {

// The CRC32c of data. `seed` is the CRC of the bytes before data, so that
// crc32c(b, crc32c(a)) == crc32c(a followed by b); 0 starts a new CRC.
// Uses the SSE 4.2 crc32 instruction when the CPU has it, slice-by-8 otherwise.
std::uint32_t crc32c(Bytes data, std::uint32_t seed = 0);

namespace detail {
// The table-driven (slice-by-8) path alone, so tests can check both paths agree.
std::uint32_t crc32c_portable(Bytes data, std::uint32_t seed = 0);
// Whether crc32c() uses the instruction on this machine.
bool crc32c_hardware();
}  // namespace detail

}  // namespace iwcm::wire
