// The rules of RFC 9293, RFC 5961 and RFC 6298 that both of a connection's TCP halves apply:
// the node's before the hand-off (src/cm/tcp.cpp) and tcp::Stream's after it. One copy here,
// so that a segment is judged alike whichever half holds the connection.
//
// Read first: RFC 9293 section 3.10.7.4 (the first and fifth checks of a synchronized
// state), RFC 5961 section 5.2 (ACK validation), RFC 6298 section 5.5 (backing off the
// timer) and RFC 9293 section 3.8.6.1 (the persist timer backs off as the RTO does).
#pragma once

#include <algorithm>
#include <cstdint>

#include "iwcm/assert.hpp"
#include "iwcm/config.hpp"
#include "iwcm/time.hpp"
#include "wire/tcp.hpp"

namespace iwcm::tcp {

// RFC 9293 3.10.7.4, first check: is a segment of `len` sequence numbers (SYN and FIN
// counted) at `seq` in the receive window [rcv_nxt, rcv_nxt + rcv_wnd)? The four cases of
// segment length and window.
inline bool segment_acceptable(wire::SeqNumber rcv_nxt, std::uint32_t rcv_wnd, wire::SeqNumber seq,
                               std::uint32_t len) {
    // Our own window: wrap-aware comparisons order sequence numbers less than 2^31 apart.
    IWCM_ASSERT(rcv_wnd < (1U << 31));
    const wire::SeqNumber edge = rcv_nxt + rcv_wnd;
    const auto in_window = [&](wire::SeqNumber s) { return rcv_nxt <= s && s < edge; };
    if (len == 0) return rcv_wnd == 0 ? seq == rcv_nxt : in_window(seq);
    if (rcv_wnd == 0) return false;
    return in_window(seq) || in_window(seq + (len - 1));
}

// What the ACK field of a segment that passed the first four checks is worth.
enum class AckCheck : std::uint8_t {
    kAcceptable,  // (SND.UNA - MAX.SND.WND) =< SEG.ACK =< SND.NXT: processed
    kUnsent,      // SEG.ACK > SND.NXT: "send an ACK, drop the segment, and return"
    kTooOld,      // SEG.ACK < SND.UNA - MAX.SND.WND: discarded with an ACK (RFC 5961 5.2)
};

// RFC 9293 3.10.7.4, fifth check, with RFC 5961 section 5.2. `snd_max` is the highest
// sequence number sent, plus one (a zero-window probe's octet counts); `max_snd_wnd` the
// largest window the peer ever offered.
inline AckCheck check_ack(wire::SeqNumber ack, wire::SeqNumber snd_una, wire::SeqNumber snd_max,
                          std::uint32_t max_snd_wnd) {
    if (ack > snd_max) return AckCheck::kUnsent;
    if (ack < snd_una + (0U - max_snd_wnd)) return AckCheck::kTooOld;
    return AckCheck::kAcceptable;
}

// RFC 6298 5.5: the timer doubles at each expiry, "A maximum value MAY be placed on RTO
// provided it is at least 60 seconds" (here `cap`). The persist timer backs off the same
// way from the RTO (RFC 9293 3.8.6.1).
inline Duration backed_off(Duration base, unsigned shift, Duration cap) {
    Duration d = base;
    for (unsigned i = 0; i < shift && d < cap; ++i) d *= 2;
    return std::min(d, cap);
}

// The RTO before any RTT sample (RFC 6298 2.1: 1 s), within the configured bounds.
inline Duration initial_rto(const StreamConfig& config) {
    return std::clamp(config.rto_initial, config.rto_min, config.rto_max);
}

}  // namespace iwcm::tcp
