// The rules of RFC 9293, RFC 5961 and RFC 6298 that both of a connection's TCP halves apply:
// the node's before the hand-off (src/cm/tcp.cpp) and tcp::Stream's after it. One copy here,
// so that a segment is judged alike whichever half holds the connection.
//
// Read first: RFC 9293 section 3.10.7.4 (the first and fifth checks of a synchronized
// state) and RFC 5961 section 5.2 (ACK validation).
#pragma once

#include <cstdint>

#include "wire/tcp.hpp"

namespace iwcm::tcp {

// RFC 9293 3.10.7.4, first check: is a segment of `len` sequence numbers (SYN and FIN
// counted) at `seq` in the receive window [rcv_nxt, rcv_nxt + rcv_wnd)? The four cases of
// segment length and window.
inline bool segment_acceptable(wire::SeqNumber rcv_nxt, std::uint32_t rcv_wnd, wire::SeqNumber seq,
                               std::uint32_t len) {
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

}  // namespace iwcm::tcp
