// tcp::Stream: the data phase of one TCP connection, sans-I/O.
//
// Read first: docs/design.md "Parts" and "Byte stream", then RFC 9293 section
// 3.10.7.4 (segment arrival once synchronised), RFC 6298 (the retransmission
// timer), RFC 5681 and RFC 6582 (congestion control, NewReno), RFC 9293
// section 3.8.6 (windows, zero-window probes, silly windows), section 3.8.4
// (keepalive) and RFC 5961 section 5 (ACK validation).
//
// The core makes and tears down connections; once one is handed off as a
// byte stream it creates a Stream from the sequence numbers of that moment
// and routes every later segment of the connection here, after its own RST
// and SYN checks (RFC 5961 sections 3 and 4 stay in the core). The Stream
// owns what RFC 9293 calls the send and receive sequence spaces from then on:
//   write / close / readable / consume   the application's side,
//   on_segment                           a segment of the connection arrived,
//   poll_segment                         the next segment to send,
//   next_deadline / on_timer             RTO, persist, delayed ACK, keepalive.
// It reads no clock, builds no frame (the core wraps what poll_segment says
// into Ethernet/IP/TCP), and never calls back. Sequence numbers are absolute
// (wire::SeqNumber, wrap-aware). Nothing here is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "iwcm/config.hpp"
#include "iwcm/time.hpp"
#include "wire/tcp.hpp"

namespace iwcm::tcp {

// The knobs (buffers, RTO bounds, initial window, delayed ACK, keepalive)
// are public: iwcm::StreamConfig in include/iwcm/config.hpp.
using StreamConfig = iwcm::StreamConfig;

// The connection at the moment the stream takes it over.
struct StreamInit {
    wire::SeqNumber snd_una;      // oldest unacknowledged sequence number
    wire::SeqNumber snd_nxt;      // next to send; [snd_una, snd_nxt) are `unacked`
    wire::SeqNumber rcv_nxt;      // next expected from the peer
    std::uint32_t snd_wnd = 0;    // the peer's last window, in bytes (scaled)
    std::uint8_t snd_wscale = 0;  // the peer's shift
    std::uint8_t rcv_wscale = 0;  // ours
    std::uint16_t mss = 536;      // the most payload per segment we send
    // Bytes sent before the hand-off and not acknowledged yet (an RTR, say):
    // exactly snd_nxt - snd_una of them. They are retransmitted as needed.
    std::span<const std::byte> unacked;
    // Bytes the peer sent in order that nobody has read yet: readable at once.
    std::span<const std::byte> received;
};

// A segment of this connection as it arrived. SYN and RST never reach the
// stream: the core answers those (RFC 5961).
struct SegmentIn {
    wire::SeqNumber seq;
    wire::SeqNumber ack;
    std::uint8_t flags = 0;       // wire::tcp_flags
    std::uint16_t window = 0;     // as on the wire (not scaled)
    std::span<const std::byte> payload;
};

// What an arrival did.
struct Arrival {
    enum class Verdict : std::uint8_t {
        kAccepted,       // processed (it may still have carried nothing new)
        kOutOfWindow,    // not acceptable (RFC 9293 3.10.7.4 first check): ACK queued, dropped
        kAckUnsent,      // acknowledges data never sent: ACK queued, dropped (RFC 9293, 5961 5.2)
        kAckTooOld,      // acknowledges below snd_una - max window: ACK queued, dropped (RFC 5961 5.2)
        kNoAck,          // no ACK bit: dropped
    };
    Verdict verdict = Verdict::kAccepted;
    bool readable = false;     // readable() grew
    bool fin = false;          // the peer's FIN was reached in order: it sends nothing more
    bool acked = false;        // snd_una advanced: send space may have opened
    bool fin_acked = false;    // our FIN is acknowledged (everything we sent is)
};

// A segment to send. The payload views the send buffer and stays valid
// until the next non-const call on the stream.
struct SegmentOut {
    wire::SeqNumber seq;
    wire::SeqNumber ack;
    std::uint8_t flags = 0;       // always kAck; kPsh with payload; kFin
    std::uint16_t window = 0;     // to put on the wire (already shifted by rcv_wscale)
    std::span<const std::byte> payload;
};

class Stream {
public:
    Stream(const StreamConfig& config, const StreamInit& init, Instant now);

    // ---- the application's side ----
    // Queues bytes to send; returns how many were taken (0 when the send
    // buffer is full or after close()).
    std::size_t write(std::span<const std::byte> data);
    std::size_t send_space() const;
    // Our FIN follows the queued bytes. Idempotent.
    void close();
    // The oldest in-order bytes not yet consumed (a prefix of them when the
    // buffer wraps: consume and call again).
    std::span<const std::byte> readable() const;
    std::size_t readable_bytes() const;      // all of them
    // Frees n bytes of readable(); may queue a window update.
    void consume(std::size_t n);

    // ---- the wire's side ----
    Arrival on_segment(Instant now, const SegmentIn& seg);
    // Is a segment with this sequence number and length (SYN and FIN
    // counted) in the receive window (RFC 9293 3.10.7.4, first check)?
    bool acceptable(wire::SeqNumber seq, std::uint32_t len) const;
    // The next segment to send, or nullopt: retransmissions first, then new
    // data within min(cwnd, peer's window), a FIN, a zero-window or
    // keepalive probe, or a pure ACK (window update, delayed ACK due).
    std::optional<SegmentOut> poll_segment(Instant now);
    // An ACK goes out with the next poll_segment (an acknowledgement the
    // owner wants sent at once, e.g. answering an in-window RST's challenge).
    void force_ack();

    std::optional<Instant> next_deadline() const;
    enum class Timeout : std::uint8_t {
        kNone,      // handled (a retransmission, probe or ACK may now be pending)
        kGiveUp,    // max_retransmits or keepalive_probes ran out: reset the connection
    };
    Timeout on_timer(Instant now);

    // ---- observation (tests, traces, the hand-off context) ----
    wire::SeqNumber snd_una() const;
    wire::SeqNumber snd_nxt() const;
    wire::SeqNumber snd_max() const;     // highest sequence number sent + 1
    wire::SeqNumber rcv_nxt() const;
    std::uint32_t snd_wnd() const;       // the peer's window, bytes
    std::uint32_t rcv_wnd() const;       // the window we advertise, bytes
    std::uint32_t cwnd() const;
    std::uint32_t ssthresh() const;
    std::optional<Duration> srtt() const;
    Duration rto() const;
    std::size_t bytes_in_flight() const;
    std::size_t bytes_queued() const;    // unsent + unacknowledged
    std::size_t out_of_order_bytes() const;
    bool fin_sent() const;
    bool fin_acked() const;
    bool fin_received() const;
    // Nothing queued, in flight, unread or out of order, no ACK pending.
    bool idle() const;
    std::uint64_t retransmitted_segments() const;
    // Every invariant (sequence order, buffer bounds); asserts on failure.
    void check_invariants() const;

private:
    // The implementer's choice (see stream.cpp).
};

}  // namespace iwcm::tcp
