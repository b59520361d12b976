// tcp::Stream: the data phase of one TCP connection, sans-I/O.
//
// Read first: docs/design.md "Parts" and "Byte stream", then RFC 9293 section
// 3.10.7.4 (segment arrival once synchronised), RFC 6298 (the retransmission
// timer), RFC 5681 and RFC 6582 (congestion control, NewReno), RFC 3042
// (limited transmit), RFC 5827 (early retransmit), RFC 8985 section 7 (tail
// loss probes, without SACK), RFC 9293 section 3.8.6 (windows, zero-window
// probes, silly windows on both sides), section 3.8.4 (keepalive) and RFC
// 5961 section 5 (ACK validation).
//
// The core makes and tears down connections; once one is handed off as a
// byte stream it creates a Stream from the sequence numbers of that moment
// and routes every later segment of the connection here, after its own RST
// and SYN checks (RFC 5961 sections 3 and 4 stay in the core). The Stream
// owns what RFC 9293 calls the send and receive sequence spaces from then on:
//   write / write_record / close,
//   readable / consume                   the application's side,
//   on_segment                           a segment of the connection arrived,
//   poll_segment                         the next segment to send,
//   next_deadline / on_timer             RTO, persist, delayed ACK, keepalive.
// It reads no clock, builds no frame (the core wraps what poll_segment says
// into Ethernet/IP/TCP), and never calls back. Sequence numbers are absolute
// (wire::SeqNumber, wrap-aware). Nothing here is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "iwcm/config.hpp"
#include "iwcm/stream_sink.hpp"
#include "iwcm/time.hpp"
#include "tcp/record_ends.hpp"
#include "tcp/small_vec.hpp"
#include "tcp/tcb.hpp"
#include "wire/pieces.hpp"
#include "wire/tcp.hpp"

namespace iwcm::tcp {

// The knobs (buffers, RTO bounds, initial window, delayed ACK, keepalive)
// are public: iwcm::StreamConfig in include/iwcm/config.hpp.
using StreamConfig = iwcm::StreamConfig;

// std::allocator, except that an element made without a value is left uninitialized: a
// vector of bytes resized with it only makes room, for bytes copied in at once (the
// receive buffer: zero-filling it first was a third pass over every byte received).
template <class T>
struct NoFillAllocator : std::allocator<T> {
    using value_type = T;
    template <class U>
    struct rebind {
        using other = NoFillAllocator<U>;
    };
    NoFillAllocator() = default;
    template <class U>
    NoFillAllocator(const NoFillAllocator<U>&) noexcept {}
    template <class U>
    void construct(U* p) noexcept {
        ::new (static_cast<void*>(p)) U;
    }
    template <class U, class... Args>
    void construct(U* p, Args&&... args) {
        ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
};
using RecvBuffer = std::vector<std::byte, NoFillAllocator<std::byte>>;

// The connection at the moment the stream takes it over.
struct StreamInit {
    // The sequence variables the stream starts from. tcb.snd_max is also where the stream
    // sends next: [snd_una, snd_max) are the sent part of `unacked`. max_snd_wnd is at
    // least snd_wnd (the constructor takes the larger).
    Tcb tcb{};
    // Bytes queued before the hand-off and not acknowledged yet (an RTR, say), from
    // snd_una on: the first snd_nxt - snd_una of them were sent and are retransmitted as
    // needed; any after those (an MPA frame behind the peer's zero window) go as new data.
    std::span<const std::byte> unacked;
    // Bytes the peer sent in order that nobody has read yet: readable at once.
    std::span<const std::byte> received;
    // New data waits until the peer's first byte (or FIN) arrives, or this instant
    // passes (MpaConfig::responder_send_wait, initiator_send_wait); kInstantNever: no
    // wait. What was queued before the hand-off (`unacked`) goes and is retransmitted as
    // usual, and ACKs go as usual.
    Instant hold_data_until = kInstantNever;
};

// A segment of this connection as it arrived. SYN and RST never reach the
// stream: the core answers those (RFC 5961).
struct SegmentIn {
    wire::SeqNumber seq;
    wire::SeqNumber ack;
    std::uint8_t flags = 0;    // wire::tcp_flags
    std::uint16_t window = 0;  // as on the wire (not scaled)
    std::span<const std::byte> payload;
    // Or the payload in pieces, in order, read where they lie (a frame handed over in
    // parts: Core::receive_parts); `payload` is then empty.
    std::span<const std::span<const std::byte>> pieces = {};
    std::size_t payload_len() const { return payload.size() + wire::total_size(pieces); }
};

// Who is offered a segment's in-order bytes before the buffer, while nothing
// is unread or out of order (iwcm::StreamSink, told `conn`): what it takes
// is read at once.
struct SinkRef {
    StreamSink* sink = nullptr;
    ConnHandle conn;
};

// What an arrival did.
struct Arrival {
    enum class Verdict : std::uint8_t {
        kAccepted,     // processed (it may still have carried nothing new)
        kOutOfWindow,  // not acceptable (RFC 9293 3.10.7.4 first check): ACK queued, dropped
                       // (an old duplicate's valid ACK is still used, as BSD does: see `acked`)
        kAckUnsent,    // acknowledges data never sent: ACK queued, dropped (RFC 9293, 5961 5.2)
        // Acknowledges below snd_una - max window: dropped, no ACK queued. RFC 5961 5.2
        // wants an ACK sent back; it is a challenge ACK, and the owner sends it within
        // the budget of RFC 5961 section 7 that its RST and SYN answers share.
        kAckTooOld,
        kNoAck,  // no ACK bit: dropped
    };
    Verdict verdict = Verdict::kAccepted;
    bool readable = false;       // readable() grew
    std::uint32_t sunk = 0;      // bytes the sink took in order (read at once)
    std::uint32_t buffered = 0;  // bytes copied into the receive buffer (docs/perf.md "Copies")
    bool fin = false;            // the peer's FIN was reached in order: it sends nothing more
    bool acked = false;          // snd_una advanced: send space may have opened
    bool fin_acked = false;      // our FIN is acknowledged (everything we sent is)
};

// A segment to send. The payload views the send buffer (and the bytes held
// by reference, see write_record) and stays valid until the next non-const
// call on the stream.
struct SegmentOut {
    wire::SeqNumber seq;
    wire::SeqNumber ack;
    std::uint8_t flags = 0;    // always kAck; kPsh with payload; kFin
    std::uint16_t window = 0;  // to put on the wire (already shifted by rcv_wscale)
    // The payload when it is one run of the send buffer; empty when part of
    // it is held by reference: then `pieces` has it, in order (the buffer's
    // runs and the references), for a frame writer to gather
    // (wire::emit_tcp_frame_gather). `pieces` is empty otherwise.
    std::span<const std::byte> payload;
    std::span<const std::span<const std::byte>> pieces;
    std::uint32_t len = 0;  // payload bytes, either way
};

// An idle stream's lasting state (Stream::fold) beside its Tcb: the RTT estimate, congestion
// state, window-update record, counters and the keepalive deadline, with no buffer, queue or
// other timer. Stream(config, folded, tcb) makes the same stream again: every later segment,
// deadline and count is the one the stream would have given had it never been folded. An
// owner holding many idle connections keeps this and the Tcb, a third of a live stream's size.
struct FoldedStream {
    std::uint64_t acked_bytes = 0;
    std::uint64_t retransmitted = 0;
    Duration srtt{};
    Duration rttvar{};
    Duration rto_base{};
    Instant last_oow_ack{};
    Instant keepalive_at = kInstantNever;
    wire::SeqNumber snd_wl1;
    wire::SeqNumber snd_wl2;
    wire::SeqNumber recover;
    wire::SeqNumber rcv_adv;
    std::uint32_t cwnd = 0;
    std::uint32_t ssthresh = 0;
    std::uint32_t bytes_acked = 0;
    std::uint8_t dupacks = 0;
    std::uint8_t rto_backoff = 0;
    std::uint8_t rto_count = 0;
    std::uint8_t probes_out = 0;
    std::uint8_t ka_probes_out = 0;
    bool has_srtt = false;
    friend bool operator==(const FoldedStream&, const FoldedStream&) = default;
};

class Stream {
public:
    // The stream keeps `config` by reference, not a copy (a copy was a fifth of its size):
    // its owner keeps the settings alive and unchanged as long as the stream lives. The
    // sequence variables start as init.tcb and live in `shared` when given (a connection's,
    // kept by its owner, which outlives the stream: the stream moves that object from then
    // on), else in a Tcb of the stream's own.
    Stream(const StreamConfig& config, const StreamInit& init, Instant now, Tcb* shared = nullptr);
    Stream(StreamConfig&&, const StreamInit&, Instant, Tcb* = nullptr) = delete;  // dangles
    // The stream fold() folded, with the settings it had, on the Tcb it shared.
    Stream(const StreamConfig& config, const FoldedStream& folded, Tcb& tcb);
    Stream(StreamConfig&&, const FoldedStream&, Tcb&) = delete;
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    ~Stream();

    // Whether fold() may be called: idle(), and no FIN either way, no timer armed but
    // keepalive's, no probe, loss recovery, RTT sample or wait for the peer's first byte
    // under way, every in-order byte acknowledged.
    bool foldable() const;
    // The state Stream(config(), folded, tcb) continues from (foldable() asserted, and a
    // shared Tcb: it holds the rest). The stream itself is unchanged: its owner drops it for
    // the folded state.
    FoldedStream fold() const;
    // The sequence variables (shared or the stream's own).
    const Tcb& tcb() const { return *tcb_; }

    // ---- the application's side ----
    // Queues bytes to send; returns how many were taken (0 when the send
    // buffer is full or after close()). Like close(), it takes no time: the
    // bytes go, and the timers for them start, at the next poll_segment.
    std::size_t write(std::span<const std::byte> data);
    // Queues `record` whole and marks it as one record, or takes nothing and
    // returns false (it is empty, larger than send_space(), or close() was
    // called). No segment carries bytes of two records: a record of at most
    // an MSS leaves as exactly one segment, in its first transmission and in
    // every retransmission (fast or partial-ACK retransmit, loss probe, the
    // go-back after an RTO), a longer one as MSS-sized pieces from its start;
    // once the peer acknowledged part of a record, the rest goes from snd_una
    // to the record's end. Bytes write() queued before a record count as a
    // record of their own; those after the last record are segmented as
    // usual. Two things still split a record: a zero-window probe (one byte,
    // RFC 9293 3.8.6.1), and a peer window narrower than the record while
    // nothing is in flight (no ACK would come to widen it). With segmentation
    // offload (StreamConfig::segment_offload) a first transmission may join
    // whole records (or the MSS-sized pieces of a long one) into one segment;
    // with StreamConfig::offload_mss_pieces only pieces of one MSS, but the last.
    bool write_record(std::span<const std::byte> record);
    // The same for a record given in pieces (gathered: one copy, from where
    // the pieces are into the send buffer).
    bool write_record(std::span<const std::span<const std::byte>> parts);
    // The same, with the parts whose bit is set in `by_ref` (part i: bit i)
    // held by reference instead of copied: segments send them, and resend
    // them, from where they are (a queue pair's registered memory: docs/perf.md
    // "Copies"). The caller keeps those bytes valid and unchanged until
    // acked_bytes() passes them, or until own_refs().
    bool write_record(std::span<const std::span<const std::byte>> parts, std::uint32_t by_ref);
    // write() without the copy: up to send_space() bytes of `data` are held by
    // reference, as write_record's by_ref parts are (same promise: valid and
    // unchanged until acked_bytes() passes them, or until own_refs()), and cut
    // into segments as written bytes are. Returns how many were taken.
    std::size_t write_ref(std::span<const std::byte> data);
    // Copies every byte still held by reference into the send buffer (before
    // the memory it lies in goes away); returns how many.
    std::size_t own_refs();
    // Whether writing `n` more bytes into the send buffer (write(), a record's copied
    // parts) may move the bytes it holds: the acknowledged prefix is dropped first, or the
    // buffer grows. Until then a view of them (SegmentOut::payload) stays good.
    bool write_moves_bytes(std::size_t n) const {
        if (n == 0 || snd_buf_.size() == snd_off_) return false;
        return (snd_off_ > 0 && snd_off_ >= snd_buffered()) ||
               snd_buf_.size() + n > snd_buf_.capacity();
    }
    // Bytes held by reference and not acknowledged yet.
    std::uint32_t ref_bytes() const { return refq_ ? refq_->bytes : 0; }
    // Data bytes queued since the stream began (the hand-off's unacknowledged
    // ones included) and, of those, acknowledged: a record is acknowledged
    // once acked_bytes() reaches written_bytes() as it was after its write.
    std::uint64_t written_bytes() const { return acked_bytes_ + snd_buffered(); }
    std::uint64_t acked_bytes() const { return acked_bytes_; }
    std::size_t send_space() const;
    // Our FIN follows the queued bytes. Idempotent.
    void close();
    // The oldest in-order bytes not yet consumed (a prefix of them when the
    // buffer wraps: consume and call again).
    std::span<const std::byte> readable() const;
    std::size_t readable_bytes() const;  // all of them
    // Frees n bytes of readable(); may queue a window update.
    void consume(std::size_t n);

    // ---- the wire's side ----
    Arrival on_segment(Instant now, const SegmentIn& seg, SinkRef sink = {});
    // Before on_segment, for a segment whose checksum is not verified yet: when its text
    // would be read into the receive buffer whole at `seq` (it is next in order, fits the
    // window, nothing is held out of order, no FIN is known), copies it there, adding its
    // bytes to the ones'-complement sum `acc` on the way (wire::detail::copy_and_sum_pieces),
    // and returns that sum; on_segment then finds it in place. nullopt: nothing copied (sum
    // the bytes apart). The caller must not hand the segment on if the sum is wrong, and
    // must have no sink for this stream (a sink takes in-order text without the buffer).
    std::optional<std::uint64_t> place_summed(wire::SeqNumber seq,
                                              std::span<const std::span<const std::byte>> text,
                                              std::size_t len, std::uint64_t acc);
    // The sum place_summed returned was wrong: the segment goes no further, and on_segment
    // must not take another segment's text for it.
    void forget_summed() { summed_len_ = 0; }
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
        kNone,    // handled (a retransmission, probe or ACK may now be pending)
        kGiveUp,  // max_retransmits or keepalive_probes ran out: reset the connection
    };
    Timeout on_timer(Instant now);

    // ---- observation (tests, traces, the hand-off context) ----
    const StreamConfig& config() const { return *config_; }
    wire::SeqNumber snd_una() const;
    wire::SeqNumber snd_nxt() const;
    wire::SeqNumber snd_max() const;  // highest sequence number sent + 1
    wire::SeqNumber rcv_nxt() const;
    std::uint32_t snd_wnd() const;  // the peer's window, bytes
    std::uint32_t rcv_wnd() const;  // the window we advertise, bytes
    std::uint32_t cwnd() const;
    std::uint32_t ssthresh() const;
    // The most payload one segment carries (the peer's MSS as the hand-off
    // gave it): records are cut at this size.
    std::uint16_t mss() const;
    std::optional<Duration> srtt() const;
    Duration rto() const;
    std::size_t bytes_in_flight() const;
    std::size_t bytes_queued() const;  // unsent + unacknowledged
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
    // A run of out-of-order bytes held in the receive buffer, [start, start + len).
    struct Range {
        wire::SeqNumber start;
        std::uint32_t len = 0;
    };
    // A segment's text cut to what is new and inside the window.
    struct Text {
        wire::SeqNumber seq;
        wire::Pieces data;
        bool fin = false;
    };
    // Bytes held by reference: [seq, seq + len) lie at data; the send
    // buffer's bytes after them start at index inline_at.
    struct Ref {
        wire::SeqNumber seq;
        std::uint32_t len = 0;
        std::uint32_t inline_at = 0;
        const std::byte* data = nullptr;
    };
    // The window field to put on the wire and the right edge it offers.
    struct Advert {
        std::uint16_t field = 0;
        wire::SeqNumber edge;
    };

    // The send side.
    std::uint32_t snd_buffered() const;  // data bytes from snd_una on (not the FIN)
    wire::SeqNumber data_end() const;    // sequence number after the last queued byte
    Duration backed_off(unsigned shift) const;
    bool persist_wanted() const;
    // New data past hold_edge_ waits for the peer's first byte (StreamInit::hold_data_until).
    bool holding() const { return hold_at_ != kInstantNever; }
    wire::SeqNumber ack_seq() const;  // the sequence number of an empty segment
    // Sending new data: the bytes cwnd may cover (with limited transmit),
    // the length of the next new segment (0: only the FIN) or nullopt.
    std::uint32_t send_allowance() const;
    std::optional<std::uint32_t> send_len(std::uint32_t allowance) const;
    std::optional<std::uint32_t> send_len_mss(std::uint32_t allowance) const;
    // Segmentation offload: a segment of `len` bytes from SND.NXT grown
    // within `cap` by the whole pieces that follow it.
    std::uint32_t offload_len(std::uint32_t len, std::uint32_t cap) const;
    // segment_offload as a multiple of the MSS, 0 when off (less than two MSS).
    std::uint32_t offload() const;
    // The most a segment from `seq` may carry: an MSS, cut at a record's end.
    std::uint32_t seg_limit(wire::SeqNumber seq) const;
    // Where the last segment of the bytes before `end` starts (a loss probe).
    wire::SeqNumber last_seg_start(wire::SeqNumber end) const;
    std::optional<SegmentOut> send_new(Instant now);
    std::uint8_t dupack_threshold() const;
    // Tail loss probes (RFC 8985 section 7).
    std::optional<SegmentOut> send_tlp(Instant now);
    bool tlp_wanted() const;
    Duration pto() const;
    void end_tlp_episode(std::uint32_t flight);
    std::optional<SegmentOut> send_probe();
    SegmentOut emit(Instant now, wire::SeqNumber seq, std::uint32_t len, bool fin);
    SegmentOut make_segment(wire::SeqNumber seq, std::uint32_t len, std::uint8_t flags);
    // The bytes [seq, seq + len) as pieces in refq_->pieces (the buffer's
    // runs and the references between them).
    void gather(wire::SeqNumber seq, std::uint32_t len);
    // Appends `part` (not empty, within send_space()) as a reference at data_end().
    void push_ref(std::span<const std::byte> part);
    void cut_snd_prefix();  // drops snd_buf_[0, snd_off_)
    // The buffer's first `cut` bytes are gone: the references' inline_at move down by it.
    void rebase_refs(std::uint32_t cut);
    void tell_acked(SinkRef sink, const Arrival& out) const;
    void drop_acked(std::uint32_t n);
    std::uint32_t drop_acked_refs(wire::SeqNumber end);
    // ACK processing (RFC 9293 3.10.7.4 fifth check, RFC 5681, RFC 6582, RFC 6298).
    void process_ack(Instant now, const SegmentIn& seg, Arrival& out);
    void on_new_ack(Instant now, wire::SeqNumber ack, Arrival& out);
    void congestion_on_ack(wire::SeqNumber ack, std::uint32_t acked);
    void on_dup_ack();
    void rtt_sample(Duration r);
    Timeout on_rto(Instant now);
    Timeout on_persist(Instant now);
    Timeout on_keepalive(Instant now);
    void update_timers(Instant now);
    // The receive side.
    std::uint32_t recv_window() const;  // RCV.WND: the right edge offered minus rcv_nxt
    std::uint32_t rcv_space() const;    // what the buffer can still take from rcv_nxt on
    Advert advert() const;
    bool window_update_due() const;
    Text trim_text(const SegmentIn& seg, wire::Pieces data);
    void process_data(Instant now, const SegmentIn& seg, SinkRef sink, Arrival& out);
    void deliver_in_order(SinkRef sink, wire::Pieces data, Arrival& out);
    bool hold_out_of_order(wire::SeqNumber seq, wire::Pieces data);
    void place(wire::SeqNumber seq, wire::Pieces data);
    std::byte* room_for(wire::SeqNumber seq, std::size_t n);
    void note_peer_fin(wire::SeqNumber at);
    void finish(Instant now);

    const StreamConfig* config_;
    Tcb* tcb_;  // the owner's, or the stream's own (owns_tcb_), allocated with it
    // Send side: snd_buf_[snd_off_, size) are the bytes from snd_una on; the
    // dead prefix is dropped lazily when it is at least as long as the rest.
    std::vector<std::byte> snd_buf_;
    std::uint32_t snd_off_ = 0;
    RecordEnds record_ends_;  // above snd_una, at most data_end(); see write_record
    // Allocated with the first reference (a stream that never holds one pays
    // a pointer): the references not wholly acknowledged, refs[head, size),
    // sorted, and the pieces of the last segment that had some. A few of each
    // live in the queue's one block (small_vec.hpp).
    struct RefQueue {
        SmallVec<Ref, 4> refs;
        std::uint32_t head = 0;
        SmallVec<std::span<const std::byte>, 4> pieces;  // SegmentOut::pieces
        std::uint32_t bytes = 0;                         // of the references, at or above snd_una
        std::uint32_t next = 0;                          // where the last gather stopped (a hint)
    };
    std::unique_ptr<RefQueue> refq_;
    std::uint64_t acked_bytes_ = 0;
    wire::SeqNumber snd_nxt_;
    wire::SeqNumber snd_wl1_;  // RFC 9293: the segment sequence and
    wire::SeqNumber snd_wl2_;  // acknowledgment of the last window update
    wire::SeqNumber recover_;  // RFC 6582 "recover": highest sequence sent at loss
    wire::SeqNumber rtt_seq_;  // the ACK that ends the timed segment
    wire::SeqNumber tlp_end_;  // RFC 8985 "TLP.end_seq": SND.MAX after the probe
    std::uint32_t cwnd_ = 0;
    std::uint32_t ssthresh_ = 0;
    std::uint32_t bytes_acked_ = 0;  // RFC 5681 3.1 byte counting in congestion avoidance
    // The end of StreamInit::unacked: bytes before it go during the hold too.
    wire::SeqNumber hold_edge_;
    std::uint8_t dupacks_ = 0;
    std::uint8_t rto_backoff_ = 0;  // doublings of the RTO since the last RTT sample
    std::uint8_t rto_count_ = 0;    // consecutive expiries without progress
    std::uint8_t probes_out_ = 0;   // zero-window probes without an answer
    std::uint8_t persist_backoff_ = 0;
    std::uint8_t ka_probes_out_ = 0;
    bool fin_queued_ = false;
    bool fin_sent_ = false;
    bool fin_acked_ = false;
    bool in_recovery_ = false;
    bool rtt_timing_ = false;
    bool rexmit_una_ = false;        // fast retransmit / partial ACK: resend at snd_una
    bool probe_pending_ = false;     // a zero-window probe is due
    bool tlp_pending_ = false;       // the PTO fired: a loss probe is due
    bool tlp_out_ = false;           // a loss probe is unanswered (TLP.end_seq set)
    bool tlp_retrans_ = false;       // ... and it was a retransmission
    bool ka_probe_pending_ = false;  // a keepalive probe is due
    bool ack_now_ = false;
    bool has_srtt_ = false;
    bool peer_fin_known_ = false;  // peer_fin_seq_ is where the peer's FIN sits
    bool fin_received_ = false;
    bool owns_tcb_ = false;
    Duration srtt_{};
    Duration rttvar_{};
    Duration rto_base_{};  // the RTO before backoff
    Instant rtt_start_{};
    Instant rto_at_ = kInstantNever;
    Instant tlp_at_ = kInstantNever;  // the probe timeout (PTO)
    Instant persist_at_ = kInstantNever;
    Instant delack_at_ = kInstantNever;
    Instant keepalive_at_ = kInstantNever;
    Instant hold_at_ = kInstantNever;  // StreamInit::hold_data_until, until it ends
    Instant last_oow_ack_{};           // the last answer to an empty out-of-window segment
    std::uint64_t retransmitted_ = 0;
    // Receive side: rcv_buf_[rcv_read_, rcv_read_ + rcv_unread_) are readable;
    // the byte of sequence s >= rcv_nxt (out of order) sits at
    // rcv_read_ + rcv_unread_ + (s - rcv_nxt).
    RecvBuffer rcv_buf_;
    std::vector<Range> ooo_;  // sorted, disjoint, not adjacent, all above rcv_nxt
    std::uint32_t rcv_read_ = 0;
    std::uint32_t rcv_unread_ = 0;
    // Text place_summed put in the buffer at rcv_nxt ahead of on_segment: its length (0:
    // none). Cleared as on_segment returns, so it never names another segment's text.
    std::uint32_t summed_len_ = 0;
    std::uint32_t rcv_unacked_ = 0;  // in-order bytes taken since our last ACK
    std::uint32_t ooo_bytes_ = 0;
    wire::SeqNumber rcv_adv_;  // the right edge we offered: never moves left
    wire::SeqNumber peer_fin_seq_;
};

}  // namespace iwcm::tcp
