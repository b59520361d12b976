// The sequence variables of one TCP connection (RFC 9293 section 3.3.1), kept once for its
// whole life: the connection manager's node holds them from the SYN on and handles the
// handshake and the MPA exchange in them; after a byte-stream hand-off the node's
// tcp::Stream reads and moves the same ones (Stream(config, init, now, &tcb)), so that
// neither keeps a copy the other has to bring up to date.
#pragma once

#include <cstdint>

#include "wire/tcp.hpp"

namespace iwcm::tcp {

struct Tcb {
    wire::SeqNumber snd_una;        // SND.UNA: the oldest unacknowledged sequence number
    wire::SeqNumber snd_max;        // the highest sequence number sent, plus one
    wire::SeqNumber rcv_nxt;        // RCV.NXT: the next the peer sends in order
    std::uint32_t snd_wnd = 0;      // SND.WND: the peer's window in bytes (scaled)
    std::uint32_t max_snd_wnd = 0;  // the largest window the peer offered (RFC 5961 5.2)
    std::uint16_t mss = 536;        // the peer's MSS: the most we put in one segment
    std::uint8_t snd_wscale = 0;    // the peer's shift, 0 unless both SYNs had the option
    std::uint8_t rcv_wscale = 0;    // ours, likewise (RFC 7323 section 2)
    friend bool operator==(const Tcb&, const Tcb&) = default;
};

}  // namespace iwcm::tcp
