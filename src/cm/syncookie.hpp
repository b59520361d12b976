// SYN cookies: the initial sequence number of a SYN-ACK sent without a node.
//
// Read first: RFC 4987 section 3.6 (what a cookie is and what it loses),
// src/cm/isn.hpp (the keyed hash). A cookie is our ISN; the peer returns it
// plus one in the ACK of its handshake, so a listener whose backlog is full
// keeps nothing per SYN and makes the node only when that ACK comes.
//
// The 32 bits:
//   bits 31..8  the top 24 bits of SipHash-2-4, under the period's key, of
//               the 4-tuple, the VLAN, the peer's ISN and bits 7..0
//   bit  7      the parity of the period that made it
//   bits 6..4   an index into kCookieMss: the effective MSS rounded down
//   bits 3..0   the peer's window shift (0..14), or 15: no window scaling
// A forged ACK is taken with odds of 2^-24 per try. The period's key is
// derived from the secrets and the period number, so the key rotates: a
// cookie is valid in its own period and the next one only.
//
// What a cookie loses, compared with a SYN_RCVD node: the MSS is rounded down
// to a table value; the SYN-ACK is never retransmitted (a peer that lost it
// retransmits its SYN and gets another cookie); the ISN is not monotonic over
// time for one 4-tuple (RFC 6528's clock); the ACK must be the peer's first
// segment after the SYN (its sequence number names the peer's ISN), though it
// may carry data such as the MPA request. The window shift is kept, unlike
// Linux (which keeps it only with timestamps). SACK and timestamps are lost
// too, but this CM never uses them.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "iwcm/address.hpp"
#include "iwcm/time.hpp"

namespace iwcm::cm {

// Effective MSS values a cookie can carry (ascending): Linux's TCP_MIN_MSS,
// RFC 9293's IPv4 default, IPv6's minimum (1280 - 60), common tunnel and
// Ethernet sizes, and a 9000-byte jumbo frame over IPv4.
inline constexpr std::array<std::uint16_t, 8> kCookieMss{88,   536,  1220, 1300,
                                                         1420, 1440, 1460, 8960};
inline constexpr std::uint8_t kCookieNoWscale = 15;

// What the SYN told us that the node will need.
struct CookieData {
    std::uint16_t mss = 536;             // the effective MSS, rounded down to kCookieMss
    std::optional<std::uint8_t> wscale;  // the peer's window shift, if it offered scaling
    friend bool operator==(const CookieData&, const CookieData&) = default;
};

struct CookieTuple {
    Endpoint local;
    Endpoint remote;
    std::uint16_t vlan = 0;
    std::uint32_t peer_isn = 0;
};

using CookieKey = std::array<std::uint8_t, 16>;

// The key of one period: derived from both secrets and the period number.
CookieKey cookie_key(const CookieKey& cookie_secret, const CookieKey& isn_secret,
                     std::uint64_t period);

// The period `now` falls in.
std::uint64_t cookie_period(Instant now, Duration period);

std::uint32_t make_cookie(const CookieKey& key, std::uint64_t period, const CookieTuple& t,
                          const CookieData& d);

// The data of a cookie made in `period` (its parity must match), or nullopt.
std::optional<CookieData> check_cookie(const CookieKey& key, std::uint64_t period,
                                       const CookieTuple& t, std::uint32_t cookie);

// The parity bit of a cookie: which of the two valid periods made it.
inline bool cookie_parity(std::uint32_t cookie) {
    return (cookie >> 7) & 1;
}

}  // namespace iwcm::cm
