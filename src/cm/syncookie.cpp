// SYN cookies. Read first: src/cm/syncookie.hpp.
#include "cm/syncookie.hpp"

#include <algorithm>
#include <cstring>
#include <span>

#include "cm/isn.hpp"
#include "iwcm/assert.hpp"

namespace iwcm::cm {

namespace {

std::uint8_t encode_data(const CookieData& d, std::uint64_t period) {
    std::uint8_t index = 0;
    for (std::uint8_t i = 0; i < kCookieMss.size(); ++i)
        if (kCookieMss[i] <= d.mss) index = i;
    std::uint8_t ws = d.wscale ? std::min<std::uint8_t>(*d.wscale, 14) : kCookieNoWscale;
    return static_cast<std::uint8_t>(((period & 1) << 7) | (index << 4) | ws);
}

std::uint32_t cookie_hash(const CookieKey& key, const CookieTuple& t, std::uint8_t data) {
    // Ports, VLAN, peer ISN, the low byte, then both addresses (4 or 16 bytes each).
    IWCM_ASSERT(t.local.addr.family() == t.remote.addr.family());
    std::uint8_t buf[43];
    std::size_t alen = t.local.addr.is_v4() ? 4 : 16;
    auto put16 = [&](std::size_t at, std::uint16_t v) {
        buf[at] = static_cast<std::uint8_t>(v >> 8);
        buf[at + 1] = static_cast<std::uint8_t>(v);
    };
    put16(0, t.local.port);
    put16(2, t.remote.port);
    put16(4, t.vlan);
    put16(6, static_cast<std::uint16_t>(t.peer_isn >> 16));
    put16(8, static_cast<std::uint16_t>(t.peer_isn));
    buf[10] = data;
    std::memcpy(buf + 11, t.local.addr.raw().data(), alen);
    std::memcpy(buf + 11 + alen, t.remote.addr.raw().data(), alen);
    std::uint64_t h = siphash24(key, std::span<const std::uint8_t>(buf, 11 + 2 * alen));
    return static_cast<std::uint32_t>(h >> 32) & 0xFFFFFF00u;
}

}  // namespace

CookieKey cookie_key(const CookieKey& cookie_secret, const CookieKey& isn_secret,
                     std::uint64_t period) {
    // Two outputs of SipHash under the cookie secret, over the ISN secret, the
    // period and a counter, make the period's 128-bit key.
    std::uint8_t buf[25];
    std::memcpy(buf, isn_secret.data(), 16);
    for (int i = 0; i < 8; ++i) buf[16 + i] = static_cast<std::uint8_t>(period >> (8 * i));
    CookieKey key{};
    for (std::uint8_t half = 0; half < 2; ++half) {
        buf[24] = half;
        std::uint64_t h = siphash24(cookie_secret, std::span<const std::uint8_t>(buf, sizeof buf));
        for (int i = 0; i < 8; ++i) key[8 * half + i] = static_cast<std::uint8_t>(h >> (8 * i));
    }
    // The input carried the ISN secret whole (the counter last), and the two halves came from
    // two counters: equal halves (2^-64 by chance) mean the counter did not reach the hash.
    IWCM_ASSERT(buf[24] == 1 && std::memcmp(buf, isn_secret.data(), 16) == 0);
    IWCM_ASSERT(std::memcmp(key.data(), key.data() + 8, 8) != 0);
    return key;
}

std::uint64_t cookie_period(Instant now, Duration period) {
    auto n = now.time_since_epoch().count();
    auto p = period.count() > 0 ? period.count() : 1;
    return n < 0 ? 0 : static_cast<std::uint64_t>(n / p);
}

std::uint32_t make_cookie(const CookieKey& key, std::uint64_t period, const CookieTuple& t,
                          const CookieData& d) {
    std::uint8_t data = encode_data(d, period);
    return cookie_hash(key, t, data) | data;
}

std::optional<CookieData> check_cookie(const CookieKey& key, std::uint64_t period,
                                       const CookieTuple& t, std::uint32_t cookie) {
    auto data = static_cast<std::uint8_t>(cookie & 0xFF);
    if (cookie_parity(cookie) != static_cast<bool>(period & 1)) return std::nullopt;
    if (cookie_hash(key, t, data) != (cookie & 0xFFFFFF00u)) return std::nullopt;
    CookieData d;
    d.mss = kCookieMss[(data >> 4) & 7];
    std::uint8_t ws = data & 0x0F;
    if (ws != kCookieNoWscale) d.wscale = ws;
    // Every byte that passes the parity test names the data it came from (kCookieMss rises).
    IWCM_ASSERT(encode_data(d, period) == data);
    return d;
}

}  // namespace iwcm::cm
