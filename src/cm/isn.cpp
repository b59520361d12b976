// RFC 6528 initial sequence numbers over SipHash-2-4. Read first: src/cm/isn.hpp.
#include "cm/isn.hpp"

#include <bit>
#include <cstring>

#include "iwcm/assert.hpp"

namespace iwcm::cm {

namespace {

constexpr std::uint64_t rotl(std::uint64_t x, int b) {
    return (x << b) | (x >> (64 - b));
}

struct SipState {
    std::uint64_t v0, v1, v2, v3;
    void round() {
        v0 += v1;
        v1 = rotl(v1, 13);
        v1 ^= v0;
        v0 = rotl(v0, 32);
        v2 += v3;
        v3 = rotl(v3, 16);
        v3 ^= v2;
        v0 += v3;
        v3 = rotl(v3, 21);
        v3 ^= v0;
        v2 += v1;
        v1 = rotl(v1, 17);
        v1 ^= v2;
        v2 = rotl(v2, 32);
    }
    void absorb(std::uint64_t m) {
        v3 ^= m;
        round();
        round();
        v0 ^= m;
    }
};

std::uint64_t load_le64(const std::uint8_t* p, std::size_t n) {
    std::uint64_t v = 0;
    if (n == 8) {
        std::memcpy(&v, p, 8);
        if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
        return v;
    }
    for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t{p[i]} << (8 * i);
    return v;
}

SipState sip_start(const std::array<std::uint8_t, 16>& key) {
    std::uint64_t k0 = load_le64(key.data(), 8);
    std::uint64_t k1 = load_le64(key.data() + 8, 8);
    return SipState{k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL,
                    k0 ^ 0x6c7967656e657261ULL, k1 ^ 0x7465646279746573ULL};
}

std::uint64_t sip_finish(SipState& s, std::uint64_t last) {
    s.absorb(last);
    s.v2 ^= 0xff;
    for (int i = 0; i < 4; ++i) s.round();
    return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

}  // namespace

std::uint64_t siphash24(const std::array<std::uint8_t, 16>& key,
                        std::span<const std::uint8_t> data) {
    SipState s = sip_start(key);
    std::size_t full = data.size() / 8 * 8;
    for (std::size_t i = 0; i < full; i += 8) s.absorb(load_le64(data.data() + i, 8));
    std::uint64_t last = std::uint64_t{data.size() & 0xff} << 56;
    last |= load_le64(data.data() + full, data.size() - full);
    return sip_finish(s, last);
}

std::uint32_t initial_sequence(const std::array<std::uint8_t, 16>& secret, const Endpoint& local,
                               const Endpoint& remote, Instant now) {
    // The 4-tuple: both ports (big-endian), then both addresses (4 or 16 bytes each).
    IWCM_ASSERT(local.addr.family() == remote.addr.family());
    std::uint64_t f = 0;
    if (local.addr.is_v4()) {
        // The common case without the byte loop of the generic tail: 12 bytes are one block
        // and a last block of 4 message bytes, three zero bytes and the length byte, which is
        // what siphash24() absorbs for them (isn_test checks the two agree). Both blocks are
        // put together in registers: written to a buffer in pieces and read back in 8 bytes,
        // the read would wait for the pieces (a store-forwarding stall, twice a setup).
        const auto le32 = [](const IpAddr& a) {
            std::uint32_t v = 0;
            std::memcpy(&v, a.raw().data(), 4);
            if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
            return std::uint64_t{v};
        };
        const auto be16_as_le = [](std::uint16_t port) {
            return std::uint64_t{static_cast<std::uint16_t>((port >> 8) | (port << 8))};
        };
        const std::uint64_t first =
            be16_as_le(local.port) | be16_as_le(remote.port) << 16 | le32(local.addr) << 32;
        const std::uint64_t last = le32(remote.addr) | std::uint64_t{12} << 56;
        SipState s = sip_start(secret);
        s.absorb(first);
        f = sip_finish(s, last);
    } else {
        std::uint8_t buf[36] = {};
        buf[0] = static_cast<std::uint8_t>(local.port >> 8);
        buf[1] = static_cast<std::uint8_t>(local.port);
        buf[2] = static_cast<std::uint8_t>(remote.port >> 8);
        buf[3] = static_cast<std::uint8_t>(remote.port);
        std::memcpy(buf + 4, local.addr.raw().data(), 16);
        std::memcpy(buf + 20, remote.addr.raw().data(), 16);
        f = siphash24(secret, std::span<const std::uint8_t>(buf, 36));
    }
    // M: a 4-microsecond clock (RFC 6528 section 3, after RFC 793).
    auto m = static_cast<std::uint32_t>(now.time_since_epoch().count() / 4000);
    return m + static_cast<std::uint32_t>(f);
}

}  // namespace iwcm::cm
