// iwcm::StreamSink: a taker of a byte stream's bytes as they arrive in
// order, before the stream buffers them (Core::set_stream_sink).
//
// Read first: include/iwcm/core.hpp ("byte stream": peek, consume) and
// docs/perf.md "Copies". A queue pair's engine places RDMA Writes and Sends
// straight from the arriving segment into their memory this way, as siw places
// from the socket buffer, so the bytes skip the stream's receive buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "iwcm/events.hpp"

namespace iwcm {

class StreamSink {
public:
    virtual ~StreamSink() = default;
    // Bytes of `conn` that arrived in order, whole and checked (the TCP
    // checksum, the window), while nothing of the connection was unread or
    // held out of order. Returns how many of the first of them it took: those
    // count as read at once (never readable, never buffered, acknowledged as
    // any others); the rest is buffered as usual. It is called from inside
    // Core::receive and must not call into the core.
    virtual std::size_t on_in_order(ConnHandle conn, std::span<const std::byte> bytes) = 0;
    // The same for bytes that arrived in pieces (a frame handed over in parts,
    // Core::receive_parts), in order: how many of their concatenation, from the start, it
    // took. This default offers each piece to on_in_order() in turn while each is taken
    // whole; a sink whose units may span pieces (a queue pair's FPDUs) overrides it.
    virtual std::size_t on_in_order_parts(ConnHandle conn,
                                          std::span<const std::span<const std::byte>> pieces) {
        std::size_t taken = 0;
        for (auto piece : pieces) {
            if (piece.empty()) continue;
            const std::size_t n = on_in_order(conn, piece);
            taken += n;
            if (n < piece.size()) break;
        }
        return taken;
    }
    // Asked right after on_in_order took bytes, and after Core::consume: true
    // when they ended something whose sender waits for our ACK (an RDMA Write
    // or Send is complete at its sender only once acknowledged): the stream
    // then acknowledges at once rather than after the delayed-ACK time.
    virtual bool ack_now(ConnHandle conn) {
        (void)conn;
        return false;
    }
    // The peer acknowledged more: `acked` data bytes of `conn`'s stream in
    // all (StreamInfo::acked). Told as the ACK is processed, before the same
    // segment's bytes go to on_in_order (so a Write acknowledged by the
    // segment carrying a Read Response completes before the Read). Called
    // from inside Core::receive; it must not call into the core.
    virtual void on_acked(ConnHandle conn, std::uint64_t acked) {
        (void)conn;
        (void)acked;
    }
};

}  // namespace iwcm
