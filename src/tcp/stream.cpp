// tcp::Stream: the data phase of one TCP connection, sans-I/O.
//
// Read first: src/tcp/stream.hpp (the contract and the RFCs it follows). This
// file keeps the order of RFC 9293 section 3.10.7.4 in on_segment (sequence
// check, ACK check, data, FIN); each decision carries its RFC sentence.
//
// Buffers. The send buffer is a vector whose prefix [0, snd_off_) is already
// acknowledged; it is cut off lazily, only when it is at least as long as the
// live part, so each byte is moved at most once on average and poll_segment
// hands out a contiguous view. The receive buffer holds the readable bytes
// and, after them, the out-of-order bytes at their sequence offset, so a
// hole that fills delivers without a copy. Both are released when empty; bytes
// coming again take a page, or the whole size at once (reserve_for).
// check_invariants() runs at the end of every public mutating call in debug and
// sanitizer builds (IWCM_CHECK_INVARIANTS, as the core's check_node): in a
// release build it would be 4 % of the instructions per segment. The stream
// tests call it themselves after every step.
#include "tcp/stream.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "invariants.hpp"
#include "iwcm/assert.hpp"
#include "tcp/rules.hpp"
#include "wire/checksum.hpp"
#include "wire/copy.hpp"

namespace iwcm::tcp {

using wire::SeqNumber;
namespace flags = wire::tcp_flags;

namespace {

// RFC 6298 section 2: "G" is the clock granularity; ours is 1 ms.
constexpr Duration kGranularity = std::chrono::milliseconds(1);
// A bound that keeps window arithmetic in 32 bits (RFC 7323 caps windows at 2^30).
constexpr std::uint32_t kCwndCap = 1U << 30;
constexpr std::uint32_t kMaxWindowField = 65535;
// A bound on the out-of-order ranges held (each costs 8 bytes and a search step).
constexpr std::size_t kMaxOooRanges = 64;
constexpr std::uint8_t kMaxBackoff = 30;
// The least time between two answers to empty out-of-window segments
// (Linux's tcp_invalid_ratelimit).
constexpr Duration kOowAckInterval = std::chrono::milliseconds(500);
// RFC 8985 7.2: "WCDelAckT stands for worst case delayed ACK timer ... The
// RECOMMENDED value for WCDelAckT is 200ms."
constexpr Duration kWcDelAckT = std::chrono::milliseconds(200);
// The longest segment of an offload: its IPv4 or IPv6 packet, headers and TCP
// options included, stays within the 16-bit length fields.
constexpr std::uint32_t kMaxOffload = 65000;

// The distance a - b for a >= b.
std::uint32_t dist(SeqNumber a, SeqNumber b) {
    IWCM_ASSERT(a >= b);
    return static_cast<std::uint32_t>(a - b);
}

SeqNumber minus(SeqNumber s, std::uint32_t n) {
    return s + (0U - n);
}

template <class Buffer>
void release(Buffer& v) {
    Buffer().swap(v);
}

// What a buffer released when empty takes when bytes come again: a page for a few bytes
// less than a segment (a request, its answer, an FPDU's headers), else its whole size at
// once. Taking the whole size for a few bytes would make glibc hand 256 KiB back and forth
// with the kernel (brk, and page faults on the fresh pages) at every message of a
// request-and-answer exchange; growing by doubling to the whole size instead costs a bulk
// transfer that drains each round trip 2.5 times the CPU per byte. From a page, the buffer
// grows to its whole size in one step; full segments (bulk data) take the whole size at once.
constexpr std::size_t kSmallBuffer = 4096;

template <class Buffer>
[[gnu::noinline, gnu::cold]] void grow(Buffer& v, std::size_t need, std::uint32_t whole,
                                       bool small) {
    // Past the whole size (the acknowledged prefix not cut yet) the vector grows on its own.
    if (v.capacity() >= whole) return;
    const std::size_t size =
        small && need <= kSmallBuffer ? std::min<std::size_t>(kSmallBuffer, whole) : whole;
    if constexpr (std::is_same_v<Buffer, RecvBuffer>) {
        // The vector would move its bytes one by one through the allocator: one memcpy.
        Buffer bigger;
        bigger.reserve(size);
        bigger.resize(v.size());  // not filled (NoFillAllocator)
        if (!v.empty()) std::memcpy(bigger.data(), v.data(), v.size());
        v.swap(bigger);
    } else {
        v.reserve(size);
    }
    IWCM_ASSERT(v.capacity() >= std::min<std::size_t>(need, whole));
}

// Room for `need` bytes in all; `small`: the bytes coming are fewer than a segment.
template <class Buffer>
void reserve_for(Buffer& v, std::size_t need, std::uint32_t whole, bool small) {
    if (need > v.capacity()) [[unlikely]]
        grow(v, need, whole, small);
}

// The end of a public mutating call: every invariant, when the build checks them.
void checked(const Stream& s) {
    if constexpr (IWCM_CHECK_INVARIANTS != 0) s.check_invariants();
    (void)s;
}

}  // namespace

Stream::Stream(const StreamConfig& config, const StreamInit& init, Instant now, Tcb* shared)
    : config_(&config),
      tcb_(shared),
      snd_buf_(init.unacked.begin(), init.unacked.end()),
      snd_nxt_(init.tcb.snd_max),
      // RFC 9293 3.10.7.4: any later segment may update the window.
      snd_wl1_(minus(init.tcb.rcv_nxt, 1)),
      snd_wl2_(init.tcb.snd_una),
      // RFC 6582 section 3.2: "recover" starts at the initial send sequence number.
      recover_(minus(init.tcb.snd_una, 1)),
      rcv_buf_(init.received.begin(), init.received.end()),
      rcv_unread_(static_cast<std::uint32_t>(init.received.size())) {
    const Tcb& start = init.tcb;
    IWCM_ASSERT(start.snd_max >= start.snd_una);
    IWCM_ASSERT(init.unacked.size() >= dist(start.snd_max, start.snd_una));
    IWCM_ASSERT(start.mss > 0 && start.snd_wscale <= 14 && start.rcv_wscale <= 14);
    IWCM_ASSERT(config.rto_min > Duration::zero() && config.rto_min <= config.rto_max);
    IWCM_ASSERT(config.send_buffer > 0 && config.recv_buffer > 0);
    if (shared == nullptr) {
        // Last of what may throw: the members are made, and nothing below allocates.
        tcb_ = new Tcb;
        owns_tcb_ = true;
    }
    *tcb_ = start;
    tcb_->max_snd_wnd = std::max(start.snd_wnd, start.max_snd_wnd);
    // RFC 6928: IW = min(10*MSS, max(2*MSS, 14600)); the segment count is a
    // setting, the byte bound grows with it (1460 bytes a segment).
    const std::uint64_t segs = std::max<std::uint32_t>(config.initial_window_segments, 1);
    const std::uint64_t mss = start.mss;
    const std::uint64_t iw =
        std::min<std::uint64_t>(segs * mss, std::max<std::uint64_t>(2ULL * mss, segs * 1460));
    cwnd_ = static_cast<std::uint32_t>(std::min<std::uint64_t>(iw, kCwndCap));
    // RFC 5681 3.1: "The initial value of ssthresh SHOULD be set arbitrarily high".
    ssthresh_ = kCwndCap;
    rto_base_ = initial_rto(config);
    // The core offered some window before the hand-off; take what we can hold.
    rcv_adv_ = tcb_->rcv_nxt;
    rcv_adv_ = advert().edge;
    if (config_->keepalive) keepalive_at_ = now + config_->keepalive_idle;
    // Bytes the peer sent before the hand-off end the hold before it starts.
    if (init.received.empty()) hold_at_ = init.hold_data_until;
    hold_edge_ = start.snd_una + static_cast<std::uint32_t>(init.unacked.size());
    last_oow_ack_ = now - kOowAckInterval;
    update_timers(now);
    checked(*this);
}

Stream::Stream(const StreamConfig& config, const FoldedStream& f, Tcb& tcb)
    : config_(&config), tcb_(&tcb) {
    IWCM_ASSERT(tcb.mss > 0 && tcb.snd_wscale <= 14 && tcb.rcv_wscale <= 14);
    IWCM_ASSERT(tcb.snd_wnd <= tcb.max_snd_wnd && f.rcv_adv >= tcb.rcv_nxt);
    acked_bytes_ = f.acked_bytes;
    snd_nxt_ = tcb.snd_una;
    tcb.snd_max = tcb.snd_una;  // nothing was in flight
    snd_wl1_ = f.snd_wl1;
    snd_wl2_ = f.snd_wl2;
    recover_ = f.recover;
    cwnd_ = f.cwnd;
    ssthresh_ = f.ssthresh;
    bytes_acked_ = f.bytes_acked;
    hold_edge_ = tcb.snd_una;  // read only while holding, which a folded stream was not
    dupacks_ = f.dupacks;
    rto_backoff_ = f.rto_backoff;
    rto_count_ = f.rto_count;
    probes_out_ = f.probes_out;
    ka_probes_out_ = f.ka_probes_out;
    has_srtt_ = f.has_srtt;
    srtt_ = f.srtt;
    rttvar_ = f.rttvar;
    rto_base_ = f.rto_base;
    keepalive_at_ = f.keepalive_at;
    last_oow_ack_ = f.last_oow_ack;
    retransmitted_ = f.retransmitted;
    rcv_adv_ = f.rcv_adv;
    IWCM_ASSERT(foldable());
    checked(*this);
}

Stream::~Stream() {
    if (owns_tcb_) delete tcb_;
}

bool Stream::foldable() const {
    // What a busy stream fails first comes first: its owner asks after every flush.
    if (rcv_unread_ != 0 || tcb_->snd_una != tcb_->snd_max || ack_now_) return false;
    // All sent is acknowledged: nothing can be in flight.
    IWCM_ASSERT(snd_nxt_ == tcb_->snd_una);
    return idle() && !fin_queued_ && !fin_received_ && !peer_fin_known_ &&
           rto_at_ == kInstantNever && tlp_at_ == kInstantNever && persist_at_ == kInstantNever &&
           !holding() && !probe_pending_ && !tlp_out_ && !ka_probe_pending_ && !in_recovery_ &&
           !rtt_timing_ && rcv_unacked_ == 0 && summed_len_ == 0 && record_ends_.empty() &&
           !window_update_due();
}

FoldedStream Stream::fold() const {
    IWCM_ASSERT(foldable());
    // The sequence variables stay in the Tcb, which outlives the stream only when shared.
    IWCM_ASSERT(!owns_tcb_);
    // What idle() and foldable() leave at their resting values, Stream(config, folded, tcb)
    // sets back to them; the rest is here.
    IWCM_ASSERT(snd_nxt_ == tcb_->snd_una && tcb_->snd_max == tcb_->snd_una &&
                persist_backoff_ == 0);
    IWCM_ASSERT(snd_buf_.size() == snd_off_ && ref_bytes() == 0 && ooo_bytes_ == 0);
    FoldedStream f;
    f.acked_bytes = acked_bytes_;
    f.retransmitted = retransmitted_;
    f.srtt = srtt_;
    f.rttvar = rttvar_;
    f.rto_base = rto_base_;
    f.last_oow_ack = last_oow_ack_;
    f.keepalive_at = keepalive_at_;
    f.snd_wl1 = snd_wl1_;
    f.snd_wl2 = snd_wl2_;
    f.recover = recover_;
    f.rcv_adv = rcv_adv_;
    f.cwnd = cwnd_;
    f.ssthresh = ssthresh_;
    f.bytes_acked = bytes_acked_;
    f.dupacks = dupacks_;
    f.rto_backoff = rto_backoff_;
    f.rto_count = rto_count_;
    f.probes_out = probes_out_;
    f.ka_probes_out = ka_probes_out_;
    f.has_srtt = has_srtt_;
    return f;
}

// ---------------------------------------------------------------- application

std::uint32_t Stream::snd_buffered() const {
    return static_cast<std::uint32_t>(snd_buf_.size() - snd_off_) + ref_bytes();
}

SeqNumber Stream::data_end() const {
    // Once our FIN is acknowledged snd_una is one past the last byte.
    return fin_acked_ ? minus(tcb_->snd_una, 1) : tcb_->snd_una + snd_buffered();
}

std::size_t Stream::send_space() const {
    if (fin_queued_) return 0;
    const std::uint32_t used = snd_buffered();
    return used >= config_->send_buffer ? 0 : config_->send_buffer - used;
}

void Stream::cut_snd_prefix() {
    snd_buf_.erase(snd_buf_.begin(), snd_buf_.begin() + snd_off_);
    rebase_refs(snd_off_);
    snd_off_ = 0;
}

void Stream::rebase_refs(std::uint32_t cut) {
    if (!refq_) return;
    for (std::size_t i = refq_->head; i < refq_->refs.size(); ++i) refq_->refs[i].inline_at -= cut;
}

std::size_t Stream::write(std::span<const std::byte> data) {
    const std::size_t n = std::min(data.size(), send_space());
    if (n == 0) return 0;
    const std::uint32_t queued_before = snd_buffered();
    // Drop the acknowledged prefix once it is as long as the live bytes: the
    // move is paid for by the bytes acknowledged since the last one.
    if (snd_off_ > 0 && snd_off_ >= snd_buffered()) cut_snd_prefix();
    // The buffer is released when empty (drop_acked) and taken again here (reserve_for).
    reserve_for(snd_buf_, snd_buf_.size() + n, config_->send_buffer, n < tcb_->mss);
    // In pieces, as wire::copy_bytes does (the capacity is reserved: no reallocation).
    for (std::size_t done = 0; done < n; done += wire::kCopyPiece) {
        const auto* from = data.data() + done;
        snd_buf_.insert(snd_buf_.end(), from, from + std::min(wire::kCopyPiece, n - done));
    }
    IWCM_ASSERT(snd_buffered() == queued_before + n);
    checked(*this);
    return n;
}

bool Stream::write_record(std::span<const std::byte> record) {
    return write_record(std::span<const std::span<const std::byte>>(&record, 1));
}

bool Stream::write_record(std::span<const std::span<const std::byte>> parts) {
    return write_record(parts, 0);
}

bool Stream::write_record(std::span<const std::span<const std::byte>> parts, std::uint32_t by_ref) {
    IWCM_ASSERT(parts.size() <= 32 || by_ref == 0);
    std::size_t size = 0;
    for (auto part : parts) size += part.size();
    if (size == 0 || size > send_space()) return false;
    // Bytes queued before the record that no record end closes (plain
    // writes, the hand-off's unacknowledged bytes) end where it starts, so
    // no segment joins them to it.
    const SeqNumber start = data_end();
    if (snd_buffered() > 0 && (record_ends_.empty() || record_ends_.back() != start)) {
        record_ends_.push(start);
    }
    for (std::size_t i = 0; i < parts.size(); ++i) {
        const auto part = parts[i];
        if ((by_ref >> i & 1U) == 0 || part.empty()) {
            const std::size_t taken = write(part);
            IWCM_ASSERT(taken == part.size());
            continue;
        }
        push_ref(part);
    }
    record_ends_.push(start + static_cast<std::uint32_t>(size));
    checked(*this);
    return true;
}

std::size_t Stream::write_ref(std::span<const std::byte> data) {
    const std::size_t n = std::min(data.size(), send_space());
    if (n == 0) return 0;
    push_ref(data.first(n));
    checked(*this);
    return n;
}

void Stream::push_ref(std::span<const std::byte> part) {
    IWCM_ASSERT(!part.empty() && part.size() <= send_space());
    // The bytes written after it into the buffer start at its end.
    if (!refq_) refq_ = std::make_unique<RefQueue>();
    const auto len = static_cast<std::uint32_t>(part.size());
    refq_->refs.push_back(
        Ref{data_end(), len, static_cast<std::uint32_t>(snd_buf_.size()), part.data()});
    refq_->bytes += len;
}

std::size_t Stream::own_refs() {
    const std::size_t copied = ref_bytes();
    if (copied == 0) return 0;
    const std::uint32_t buffered = snd_buffered();
    gather(tcb_->snd_una, buffered);
    std::vector<std::byte> owned;
    owned.reserve(std::max<std::size_t>(config_->send_buffer, buffered));
    for (auto piece : refq_->pieces) owned.insert(owned.end(), piece.begin(), piece.end());
    IWCM_ASSERT(owned.size() == buffered);
    snd_buf_.swap(owned);
    snd_off_ = 0;
    refq_.reset();
    checked(*this);
    return copied;
}

void Stream::close() {
    // RFC 9293 3.10.4 (CLOSE, ESTABLISHED): "Queue this until all preceding
    // SENDs have been segmentized, then form a FIN segment and send it."
    fin_queued_ = true;
    checked(*this);
}

std::span<const std::byte> Stream::readable() const {
    return {rcv_buf_.data() + rcv_read_, rcv_unread_};
}

std::size_t Stream::readable_bytes() const {
    return rcv_unread_;
}

void Stream::consume(std::size_t n) {
    IWCM_ASSERT(n <= rcv_unread_);
    rcv_read_ += static_cast<std::uint32_t>(n);
    rcv_unread_ -= static_cast<std::uint32_t>(n);
    if (rcv_unread_ == 0 && ooo_.empty()) {
        release(rcv_buf_);
        rcv_read_ = 0;
    }
    if (window_update_due()) ack_now_ = true;
    checked(*this);
}

// ---------------------------------------------------------------- windows

std::uint32_t Stream::recv_window() const {
    return rcv_adv_ > tcb_->rcv_nxt ? dist(rcv_adv_, tcb_->rcv_nxt) : 0;
}

std::uint32_t Stream::rcv_space() const {
    if (fin_received_) return 0;
    const std::uint32_t cap =
        std::min<std::uint32_t>(config_->recv_buffer, kMaxWindowField << tcb_->rcv_wscale);
    return rcv_unread_ >= cap ? 0 : cap - rcv_unread_;
}

Stream::Advert Stream::advert() const {
    // The out-of-order bytes sit inside [rcv_nxt, rcv_nxt + space), so the
    // window is what the buffer can take beyond the unread bytes; it shrinks
    // as bytes wait and its right edge never moves left (RFC 9293 3.8.6.2.2).
    const std::uint32_t offered = recv_window();
    const std::uint32_t space = rcv_space();
    std::uint32_t wnd = offered;
    // RFC 9293 3.8.6.2.2: move the right edge only when "RCV.BUFF - RCV.USER -
    // RCV.WND >= min(Fr * RCV.BUFF, Eff.SND.MSS)" with Fr = 1/2.
    const std::uint32_t sws = std::min<std::uint32_t>(config_->recv_buffer / 2, tcb_->mss);
    if (space >= offered && space - offered >= sws) wnd = space;
    // RFC 7323 2.3: the field is the window shifted right; round up when the
    // extra bytes still fit, so rounding does not pull the edge left.
    std::uint32_t field = wnd >> tcb_->rcv_wscale;
    if ((field << tcb_->rcv_wscale) < wnd && ((field + 1) << tcb_->rcv_wscale) <= space) ++field;
    field = std::min(field, kMaxWindowField);
    // Never more than the buffer can take, unless an offer made before stands (RFC 9293
    // 3.8.6.2.2: the right edge does not move left).
    IWCM_ASSERT((field << tcb_->rcv_wscale) <= std::max(space, offered));
    const SeqNumber edge = tcb_->rcv_nxt + (field << tcb_->rcv_wscale);
    return {static_cast<std::uint16_t>(field), edge > rcv_adv_ ? edge : rcv_adv_};
}

bool Stream::window_update_due() const {
    // Like Linux's tcp_cleanup_rbuf: after reading, announce the window when
    // the peer knows at most half the buffer and the new window is at least
    // twice that (advert() has already applied the silly-window rule).
    const std::uint64_t offered = recv_window();
    const std::uint64_t max_wnd = std::min<std::uint64_t>(
        config_->recv_buffer, std::uint64_t{kMaxWindowField} << tcb_->rcv_wscale);
    // The edge we offered never passes what the buffer holds (advert, check_invariants).
    IWCM_ASSERT(fin_received_ || offered <= max_wnd);
    if (2 * offered > max_wnd) return false;
    const std::uint64_t now_wnd = std::uint64_t{advert().field} << tcb_->rcv_wscale;
    return now_wnd > offered && now_wnd >= 2 * offered;
}

std::uint32_t Stream::rcv_wnd() const {
    return static_cast<std::uint32_t>(advert().field) << tcb_->rcv_wscale;
}

bool Stream::acceptable(SeqNumber seq, std::uint32_t len) const {
    // RFC 9293 3.10.7.4, first check, in the window we last offered.
    return segment_acceptable(tcb_->rcv_nxt, recv_window(), seq, len);
}

// ---------------------------------------------------------------- arrival

Arrival Stream::on_segment(Instant now, const SegmentIn& seg, SinkRef sink) {
    IWCM_ASSERT((seg.flags & (flags::kSyn | flags::kRst)) == 0);
    Arrival out;
    // RFC 9293 3.8.4: any segment from the peer shows it is alive.
    ka_probes_out_ = 0;
    ka_probe_pending_ = false;
    if (config_->keepalive) keepalive_at_ = now + config_->keepalive_idle;
    const std::uint32_t len =
        static_cast<std::uint32_t>(seg.payload_len()) + ((seg.flags & flags::kFin) ? 1 : 0);
    // RFC 9293 3.10.7.4: "If the RCV.WND is zero, no segments will be
    // acceptable, but special allowance should be made to accept valid ACKs":
    // a segment at RCV.NXT has its ACK processed and its data trimmed.
    const bool zero_window_ack = recv_window() == 0 && seg.seq == tcb_->rcv_nxt;
    // Like Linux's tcp_sequence, an empty segment at the right edge is taken
    // too: a sender that filled our window exactly, with a segment lost,
    // sends its ACKs there (see ack_seq()).
    const bool edge_ack = len == 0 && seg.seq == tcb_->rcv_nxt + recv_window();
    if (!acceptable(seg.seq, len) && !zero_window_ack && !edge_ack) {
        // "If an incoming segment is not acceptable, an acknowledgment should
        // be sent in reply (unless the RST bit is set ...)". Not to every
        // empty one: when each end's ACKs lie outside the other's window (two
        // zero windows, say) each answer draws an answer, and a duplicated
        // segment doubles the exchange. Like Linux's tcp_oow_rate_limited,
        // an empty segment is answered at most once per kOowAckInterval;
        // data is always answered (it is no part of an ACK loop).
        if (len > 0 || now - last_oow_ack_ >= kOowAckInterval) {
            if (len == 0) last_oow_ack_ = now;
            ack_now_ = true;
        }
        out.verdict = Arrival::Verdict::kOutOfWindow;
        // An old duplicate (left of the window, by at most a buffer) still
        // carries a current ACK: 4.4BSD-Lite tcp_input, "Send an ACK to
        // resynchronize and drop any data. But keep on processing for RST or
        // ACK." Without it two ends whose empty segments are each one octet
        // old for the other (a probe octet taken, its ACK lost) never recover.
        const bool old =
            seg.seq + len <= tcb_->rcv_nxt && dist(tcb_->rcv_nxt, seg.seq) <= config_->recv_buffer;
        if (old && (seg.flags & flags::kAck) != 0 &&
            check_ack(seg.ack, tcb_->snd_una, tcb_->snd_max, tcb_->max_snd_wnd) ==
                AckCheck::kAcceptable) {
            process_ack(now, seg, out);
            tell_acked(sink, out);
        }
    } else if ((seg.flags & flags::kAck) == 0) {
        // "if the ACK bit is off, drop the segment and return".
        out.verdict = Arrival::Verdict::kNoAck;
    } else {
        switch (check_ack(seg.ack, tcb_->snd_una, tcb_->snd_max, tcb_->max_snd_wnd)) {
            case AckCheck::kUnsent:
                // RFC 9293: "If the ACK acks something not yet sent (SEG.ACK >
                // SND.NXT), then send an ACK, drop the segment, and return."
                ack_now_ = true;
                out.verdict = Arrival::Verdict::kAckUnsent;
                break;
            case AckCheck::kTooOld:
                // RFC 5961 5.2: the segment "MUST be discarded and an ACK sent back".
                // That ACK is a challenge ACK, which RFC 5961 section 7 limits: the
                // owner sends it within its budget (Arrival::Verdict::kAckTooOld).
                out.verdict = Arrival::Verdict::kAckTooOld;
                break;
            case AckCheck::kAcceptable:
                process_ack(now, seg, out);
                tell_acked(sink, out);
                process_data(now, seg, sink, out);
                break;
        }
    }
    finish(now);
    summed_len_ = 0;  // whatever place_summed put ahead was taken or is not in the window
    return out;
}

void Stream::tell_acked(SinkRef sink, const Arrival& out) const {
    if (out.acked && sink.sink != nullptr) sink.sink->on_acked(sink.conn, acked_bytes_);
}

void Stream::process_ack(Instant now, const SegmentIn& seg, Arrival& out) {
    // on_segment calls it for an acceptable ACK only (check_ack): none beyond SND.MAX.
    IWCM_ASSERT((seg.flags & flags::kAck) != 0 && seg.ack <= tcb_->snd_max);
    const std::uint32_t seg_wnd = std::uint32_t{seg.window} << tcb_->snd_wscale;
    // RFC 9293 3.8.6.1: the answer to a zero-window probe "resets" the probe
    // count; any acceptable ACK shows the peer is there. Once we closed, only
    // progress does: a peer that answers with a zero window for ever would
    // hold our FIN back for ever (Linux bounds an orphaned socket's probes the
    // same way, tcp_probe_timer), so max_retransmits probes end it.
    if (!fin_queued_ || seg.ack > tcb_->snd_una) probes_out_ = 0;
    if (seg.ack > tcb_->snd_una) {
        on_new_ack(now, seg.ack, out);
    } else if (seg.ack == tcb_->snd_una && snd_nxt_ > tcb_->snd_una && seg.payload_len() == 0 &&
               (seg.flags & flags::kFin) == 0 && seg_wnd == tcb_->snd_wnd) {
        // RFC 5681 section 2, DUPLICATE ACKNOWLEDGMENT: outstanding data, no
        // data, no SYN or FIN, SEG.ACK = SND.UNA, the same window as before.
        on_dup_ack();
    }
    // RFC 9293 3.10.7.4: "If SND.UNA =< SEG.ACK =< SND.NXT, the send window
    // should be updated. If (SND.WL1 < SEG.SEQ or (SND.WL1 = SEG.SEQ and
    // SND.WL2 =< SEG.ACK)), set SND.WND <- SEG.WND, set SND.WL1 <- SEG.SEQ,
    // and set SND.WL2 <- SEG.ACK."
    if (seg.ack >= tcb_->snd_una &&
        (snd_wl1_ < seg.seq || (snd_wl1_ == seg.seq && snd_wl2_ <= seg.ack))) {
        tcb_->snd_wnd = seg_wnd;
        snd_wl1_ = seg.seq;
        snd_wl2_ = seg.ack;
        tcb_->max_snd_wnd = std::max(tcb_->max_snd_wnd, seg_wnd);
    }
    IWCM_ASSERT(tcb_->snd_una <= snd_nxt_ && snd_nxt_ <= tcb_->snd_max &&
                tcb_->snd_wnd <= tcb_->max_snd_wnd);
}

void Stream::on_new_ack(Instant now, SeqNumber ack, Arrival& out) {
    IWCM_ASSERT(ack > tcb_->snd_una && ack <= tcb_->snd_max);
    const std::uint32_t acked = dist(ack, tcb_->snd_una);
    const std::uint32_t flight_before = dist(tcb_->snd_max, tcb_->snd_una);
    const std::uint32_t buffered = snd_buffered();
    if (acked > buffered) {
        // The ACK covers our FIN (it is <= snd_max, so the FIN was sent).
        IWCM_ASSERT(fin_sent_ && acked == buffered + 1);
        fin_acked_ = true;
        out.fin_acked = true;
    }
    drop_acked(std::min(acked, buffered));
    tcb_->snd_una = ack;
    record_ends_.drop_through(tcb_->snd_una);
    if (snd_nxt_ < tcb_->snd_una) snd_nxt_ = tcb_->snd_una;
    out.acked = true;
    rto_count_ = 0;
    // RFC 6298 section 3 (Karn): the timed segment was never retransmitted,
    // or timing would have been cancelled.
    if (rtt_timing_ && ack >= rtt_seq_) {
        rtt_timing_ = false;
        rtt_sample(now - rtt_start_);
    }
    congestion_on_ack(ack, acked);
    if (tlp_out_ && ack >= tlp_end_) end_tlp_episode(flight_before);
    // RFC 8985 7.2: the PTO restarts "upon receiving an ACK that
    // cumulatively acknowledges data" (update_timers arms it again).
    tlp_at_ = kInstantNever;
    // RFC 6298 5.2: "When all outstanding data has been acknowledged, turn
    // off the retransmission timer." 5.3: "When an ACK is received that
    // acknowledges new data, restart the retransmission timer".
    rto_at_ = tcb_->snd_una == tcb_->snd_max ? kInstantNever : now + rto();
}

void Stream::congestion_on_ack(SeqNumber ack, std::uint32_t acked) {
    // After SND.UNA moved to the ACK (on_new_ack), with cwnd at least an MSS.
    IWCM_ASSERT(ack == tcb_->snd_una && acked > 0 && cwnd_ >= tcb_->mss);
    const std::uint32_t flight = dist(tcb_->snd_max, tcb_->snd_una);
    if (in_recovery_) {
        if (ack > recover_) {
            // RFC 6582 3.2 step 3, full acknowledgment: "Set cwnd to either
            // (1) min (ssthresh, max(FlightSize, SMSS) + SMSS) or (2) ssthresh".
            cwnd_ = std::min(ssthresh_, std::max<std::uint32_t>(flight, tcb_->mss) + tcb_->mss);
            in_recovery_ = false;
            dupacks_ = 0;
        } else {
            // Partial acknowledgment: "retransmit the first unacknowledged
            // segment ... deflate the congestion window by the amount of new
            // data acknowledged ... If the partial ACK acknowledges at least
            // one SMSS of new data, then add back SMSS bytes".
            rexmit_una_ = true;
            cwnd_ = cwnd_ > acked ? cwnd_ - acked : 0;
            if (acked >= tcb_->mss) cwnd_ += tcb_->mss;
            cwnd_ = std::max<std::uint32_t>(cwnd_, tcb_->mss);
        }
        return;
    }
    dupacks_ = 0;
    // Keep recover_ just below snd_una outside recovery, so the RFC 6582 test
    // "SEG.ACK > recover" stays meaningful across sequence wrap.
    if (minus(ack, 1) > recover_) recover_ = minus(ack, 1);
    if (cwnd_ < ssthresh_) {
        // RFC 5681 3.1 (2): slow start, "cwnd += min (N, SMSS)". An offloaded
        // segment counts as the MSS-sized ones it stands for, as Linux counts
        // a TSO segment's packets (tcp_skb_pcount): one SMSS each.
        cwnd_ += std::min<std::uint32_t>(acked, std::max<std::uint32_t>(offload(), tcb_->mss));
    } else {
        // RFC 5681 3.1, congestion avoidance with byte counting: "cwnd be
        // incremented by SMSS bytes" once the bytes acknowledged reach cwnd.
        bytes_acked_ += acked;
        if (bytes_acked_ >= cwnd_) {
            bytes_acked_ -= cwnd_;
            cwnd_ += tcb_->mss;
        }
    }
    cwnd_ = std::min(cwnd_, kCwndCap);
    IWCM_ASSERT(cwnd_ >= tcb_->mss);
}

void Stream::on_dup_ack() {
    IWCM_ASSERT(snd_nxt_ > tcb_->snd_una);  // RFC 5681's duplicate ACK: data outstanding
    if (in_recovery_) {
        // RFC 5681 3.2 step 4: "For each additional duplicate ACK received
        // (after the third), cwnd MUST be incremented by SMSS."
        cwnd_ = std::min(cwnd_ + tcb_->mss, kCwndCap);
        return;
    }
    if (dupacks_ < 255) ++dupacks_;
    if (dupacks_ < dupack_threshold()) return;
    // RFC 6582 3.2 step 2: "If the Cumulative Acknowledgment field didn't
    // cover more than recover", do not enter fast retransmit.
    if (!(tcb_->snd_una > recover_)) return;
    // RFC 5681 3.2 steps 2-3 (equation 4): ssthresh = max (FlightSize / 2,
    // 2*SMSS); retransmit the lost segment; cwnd = ssthresh + 3*SMSS, the
    // three being the segments the duplicate ACKs showed left the network
    // (fewer under early retransmit). RFC 5681: "When [RFC3042] is in use,
    // additional data sent in limited transmit MUST NOT be included in this
    // calculation": the flight beyond cwnd is that data.
    const std::uint32_t flight = std::min(dist(tcb_->snd_max, tcb_->snd_una), cwnd_);
    ssthresh_ = std::max<std::uint32_t>(flight / 2, 2U * tcb_->mss);
    recover_ = minus(tcb_->snd_max, 1);
    cwnd_ = std::min(ssthresh_ + std::min<std::uint32_t>(dupacks_, 3) * tcb_->mss, kCwndCap);
    in_recovery_ = true;
    rexmit_una_ = true;
    IWCM_ASSERT(ssthresh_ >= 2U * tcb_->mss && cwnd_ >= ssthresh_);
    // A loss probe's episode ends in this recovery: one reduction for both.
    tlp_out_ = false;
}

std::uint8_t Stream::dupack_threshold() const {
    // RFC 5827 section 3.2 (byte-based Early Retransmit): "if the
    // connection has less than 4*SMSS bytes outstanding and no new data can
    // be sent (either because there is no unsent data or the advertised
    // window does not permit ...)", "ER_thresh = ceiling (FlightSize / SMSS)
    // - 1"; otherwise the usual three (RFC 5681 3.2). Limited transmit is
    // what "can be sent" means here: a full segment it would send on this
    // duplicate ACK keeps the threshold at three.
    constexpr std::uint8_t kDupThresh = 3;
    const std::uint32_t flight = dist(tcb_->snd_max, tcb_->snd_una);
    if (flight >= 4U * tcb_->mss || send_len(send_allowance()).has_value()) return kDupThresh;
    const std::uint32_t segments = (flight + tcb_->mss - 1) / tcb_->mss;
    IWCM_ASSERT(segments <= 4);  // so the threshold is 1, 2 or 3
    return static_cast<std::uint8_t>(std::max<std::uint32_t>(segments, 2) - 1);
}

void Stream::rtt_sample(Duration r) {
    if (r < Duration::zero()) r = Duration::zero();
    if (!has_srtt_) {
        // RFC 6298 2.2: "SRTT <- R, RTTVAR <- R/2".
        srtt_ = r;
        rttvar_ = r / 2;
        has_srtt_ = true;
    } else {
        // RFC 6298 2.3: "RTTVAR <- (1 - beta) * RTTVAR + beta * |SRTT - R'|,
        // SRTT <- (1 - alpha) * SRTT + alpha * R'" with alpha 1/8, beta 1/4,
        // RTTVAR first (it uses the old SRTT).
        const Duration delta = srtt_ > r ? srtt_ - r : r - srtt_;
        rttvar_ = (3 * rttvar_ + delta) / 4;
        srtt_ = (7 * srtt_ + r) / 8;
    }
    // RFC 6298 2.2-2.5: "RTO <- SRTT + max (G, K*RTTVAR)", K = 4, clamped.
    rto_base_ =
        std::clamp(srtt_ + std::max(kGranularity, 4 * rttvar_), config_->rto_min, config_->rto_max);
    // RFC 6298 5.7 and Karn: a valid sample ends the backoff.
    rto_backoff_ = 0;
    IWCM_ASSERT(has_srtt_ && rto_base_ >= config_->rto_min && rto_base_ <= config_->rto_max);
}

// The referenced bytes of [snd_una, end) are acknowledged: drops them and
// returns how many there were.
std::uint32_t Stream::drop_acked_refs(SeqNumber end) {
    RefQueue& q = *refq_;
    std::uint32_t gone = 0;
    while (q.head < q.refs.size() && q.refs[q.head].seq < end) {
        const Ref& r = q.refs[q.head];
        const SeqNumber from = r.seq < tcb_->snd_una ? tcb_->snd_una : r.seq;
        const SeqNumber r_end = r.seq + r.len;
        gone += dist(r_end < end ? r_end : end, from);
        if (end < r_end) break;
        ++q.head;
    }
    IWCM_ASSERT(gone <= q.bytes);
    q.bytes -= gone;
    if (q.head == q.refs.size()) {
        q.refs.clear();
        q.head = 0;
    } else if (q.head >= 64 && q.head * 2 >= q.refs.size()) {
        q.refs.erase_front(q.head);
        q.next = q.next > q.head ? q.next - q.head : 0;
        q.head = 0;
    }
    return gone;
}

// Called before snd_una moves: [snd_una, snd_una + n) are acknowledged.
void Stream::drop_acked(std::uint32_t n) {
    acked_bytes_ += n;
    const SeqNumber end = tcb_->snd_una + n;
    std::uint32_t in_buffer = n;
    if (ref_bytes() > 0) in_buffer -= drop_acked_refs(end);
    snd_off_ += in_buffer;
    IWCM_ASSERT(snd_off_ <= snd_buf_.size());
    if (snd_off_ == snd_buf_.size()) {
        // The references left (all after snd_una) have no buffer bytes before them.
        rebase_refs(snd_off_);
        release(snd_buf_);
        snd_off_ = 0;
    }
}

Stream::Text Stream::trim_text(const SegmentIn& seg, wire::Pieces data) {
    Text t{seg.seq, data, (seg.flags & flags::kFin) != 0};
    const SeqNumber fin_at = t.seq + static_cast<std::uint32_t>(t.data.size());
    if (t.seq < tcb_->rcv_nxt) {
        // Bytes below RCV.NXT were delivered already: acknowledge them again,
        // never deliver them twice.
        const std::uint32_t skip = std::min<std::uint32_t>(
            dist(tcb_->rcv_nxt, t.seq), static_cast<std::uint32_t>(t.data.size()));
        t.data = t.data.subspan(skip);
        t.seq = t.seq + skip;
        ack_now_ = true;
        if (fin_at < tcb_->rcv_nxt) t.fin = false;
    }
    // RFC 9293 3.10.7.4: "Segments with higher beginning sequence numbers
    // [than the window] ... should be trimmed"; a FIN past the trim goes too.
    const SeqNumber edge = tcb_->rcv_nxt + recv_window();
    if (t.seq + static_cast<std::uint32_t>(t.data.size()) > edge) {
        t.data = t.data.first(t.seq < edge ? dist(edge, t.seq) : 0);
        t.fin = false;
        ack_now_ = true;
    }
    // Nothing exists after the peer's FIN.
    if (peer_fin_known_) {
        if (t.seq >= peer_fin_seq_) {
            t.data = {};
        } else if (t.seq + static_cast<std::uint32_t>(t.data.size()) > peer_fin_seq_) {
            t.data = t.data.first(dist(peer_fin_seq_, t.seq));
        }
        if (fin_at != peer_fin_seq_) t.fin = false;
    }
    // What is left lies inside [RCV.NXT, RCV.NXT + RCV.WND).
    IWCM_ASSERT(t.data.size() <= data.size());
    IWCM_ASSERT(t.data.empty() || (t.seq >= tcb_->rcv_nxt &&
                                   t.seq + static_cast<std::uint32_t>(t.data.size()) <= edge));
    return t;
}

void Stream::process_data(Instant now, const SegmentIn& seg, SinkRef sink, Arrival& out) {
    IWCM_ASSERT((seg.flags & flags::kAck) != 0);  // after process_ack took it
    const std::size_t payload_len = seg.payload_len();
    if (payload_len == 0 && (seg.flags & flags::kFin) == 0) return;
    if (fin_received_) {
        // RFC 9293 3.10.7.4 (CLOSE-WAIT and later): "This should not occur,
        // since a FIN has been received from the remote side. Ignore the
        // segment text." A retransmitted FIN is acknowledged again.
        ack_now_ = true;
        return;
    }
    // The text as pieces: the segment's own, or its one payload span.
    const std::span<const std::byte> one = seg.payload;
    const wire::Pieces data(wire::pieces_or(seg.pieces, one), payload_len);
    const Text t = trim_text(seg, data);
    if (t.fin && !peer_fin_known_) note_peer_fin(t.seq + static_cast<std::uint32_t>(t.data.size()));
    // The peer's first FPDU has begun (or it closed): our data may follow it.
    if (!t.data.empty() || t.fin) hold_at_ = kInstantNever;
    if (!t.data.empty()) {
        if (t.seq == tcb_->rcv_nxt) {
            // RFC 5681 4.2: "an immediate ACK SHOULD be generated when the
            // incoming segment fills in all or part of a gap".
            if (!ooo_.empty()) ack_now_ = true;
            deliver_in_order(sink, t.data, out);
        } else {
            // RFC 5681 4.2: "A TCP receiver SHOULD send an immediate
            // duplicate ACK when an out-of-order segment arrives."
            if (hold_out_of_order(t.seq, t.data)) {
                out.buffered += static_cast<std::uint32_t>(t.data.size());
            }
            ack_now_ = true;
        }
    }
    if (peer_fin_known_ && tcb_->rcv_nxt == peer_fin_seq_) {
        // RFC 9293 3.10.7.4, eighth check: "advance RCV.NXT over the FIN, and
        // send an acknowledgment for the FIN" -- reached in order only.
        tcb_->rcv_nxt += 1;
        fin_received_ = true;
        out.fin = true;
        ack_now_ = true;
    }
    IWCM_ASSERT(!fin_received_ || tcb_->rcv_nxt == peer_fin_seq_ + 1);
    if (!ack_now_ && (out.readable || out.sunk > 0)) {
        // RFC 9293 3.8.6.3 / RFC 5681 4.2: "an ACK SHOULD be generated for at
        // least every second full-sized segment", others within the delay.
        if (config_->ack_delay <= Duration::zero() || rcv_unacked_ >= 2U * tcb_->mss) {
            ack_now_ = true;
        } else if (delack_at_ == kInstantNever) {
            delack_at_ = now + config_->ack_delay;
        }
    }
}

void Stream::note_peer_fin(SeqNumber at) {
    IWCM_ASSERT(!peer_fin_known_ && at >= tcb_->rcv_nxt);
    peer_fin_known_ = true;
    peer_fin_seq_ = at;
    // Out-of-order bytes past the FIN cannot exist: forget them.
    while (!ooo_.empty() && ooo_.back().start >= at) {
        ooo_bytes_ -= ooo_.back().len;
        ooo_.pop_back();
    }
    if (!ooo_.empty() && ooo_.back().start + ooo_.back().len > at) {
        const std::uint32_t keep = dist(at, ooo_.back().start);
        ooo_bytes_ -= ooo_.back().len - keep;
        ooo_.back().len = keep;
    }
    IWCM_ASSERT(ooo_.empty() || ooo_.back().start + ooo_.back().len <= at);
}

// Where the n bytes from seq go in the receive buffer, room made for them. Called twice for
// the same bytes (place_summed, then place) it changes nothing the second time.
std::byte* Stream::room_for(SeqNumber seq, std::size_t n) {
    IWCM_ASSERT(seq >= tcb_->rcv_nxt && n > 0);  // in order or out of order, never old bytes
    // Drop the read prefix once it is as long as what follows it.
    const std::size_t live = rcv_buf_.size() - rcv_read_;
    if (rcv_read_ > 0 && rcv_read_ >= live) {
        rcv_buf_.erase(rcv_buf_.begin(), rcv_buf_.begin() + rcv_read_);
        rcv_read_ = 0;
    }
    const std::size_t at = std::size_t{rcv_read_} + rcv_unread_ + dist(seq, tcb_->rcv_nxt);
    reserve_for(rcv_buf_, at + n, config_->recv_buffer, n < tcb_->mss);  // as in write()
    if (rcv_buf_.size() < at + n) rcv_buf_.resize(at + n);
    return rcv_buf_.data() + at;
}

void Stream::place(SeqNumber seq, wire::Pieces data) {
    std::byte* to = room_for(seq, data.size());
    if (summed_len_ != 0 && seq == tcb_->rcv_nxt && data.size() == summed_len_) {
        // place_summed refused a stream holding bytes out of order, and on_segment
        // clears summed_len_ before another segment's text can be held.
        IWCM_ASSERT(ooo_.empty());
        summed_len_ = 0;  // place_summed copied them
        return;
    }
    data.copy_to(to);
}

std::optional<std::uint64_t> Stream::place_summed(SeqNumber seq,
                                                  std::span<const std::span<const std::byte>> text,
                                                  std::size_t len, std::uint64_t acc) {
    summed_len_ = 0;
    if (len == 0 || seq != tcb_->rcv_nxt || fin_received_ || peer_fin_known_ || !ooo_.empty() ||
        len > recv_window()) {
        return std::nullopt;
    }
    // The pieces are copied whole into room for `len` bytes.
    IWCM_ASSERT(wire::total_size(text) == len);
    const std::uint64_t sum = wire::detail::copy_and_sum_pieces(room_for(seq, len), text, acc);
    summed_len_ = static_cast<std::uint32_t>(len);
    return sum;
}

// What the sink takes is read at once: it advances RCV.NXT without
// touching the buffer (nothing is unread or held, so no byte's place in it
// moves), and is acknowledged as any in-order bytes are.
void Stream::deliver_in_order(SinkRef sink, wire::Pieces data, Arrival& out) {
    IWCM_ASSERT(!data.empty());
    if (sink.sink != nullptr && rcv_unread_ == 0 && ooo_.empty()) {
        // In one span, or as the segment's pieces when it is whole (a trimmed segment in
        // pieces, rare, goes to the buffer).
        std::size_t taken = 0;
        if (const auto c = data.contiguous()) {
            taken = sink.sink->on_in_order(sink.conn, *c);
        } else if (data.whole()) {
            taken = sink.sink->on_in_order_parts(sink.conn, data.pieces());
        }
        IWCM_ASSERT(taken <= data.size());
        const auto n = static_cast<std::uint32_t>(taken);
        tcb_->rcv_nxt += n;
        rcv_unacked_ += n;
        out.sunk += n;
        if (n > 0 && sink.sink->ack_now(sink.conn)) ack_now_ = true;
        data = data.subspan(taken);
        if (data.empty()) return;
    }
    place(tcb_->rcv_nxt, data);
    out.buffered += static_cast<std::uint32_t>(data.size());
    const auto n = static_cast<std::uint32_t>(data.size());
    tcb_->rcv_nxt += n;
    rcv_unread_ += n;
    rcv_unacked_ += n;
    // The hole is filled: the held ranges it reaches are already in place.
    std::size_t merged = 0;
    while (merged < ooo_.size() && ooo_[merged].start <= tcb_->rcv_nxt) {
        const Range& r = ooo_[merged];
        const SeqNumber end = r.start + r.len;
        if (end > tcb_->rcv_nxt) {
            const std::uint32_t more = dist(end, tcb_->rcv_nxt);
            tcb_->rcv_nxt = end;
            rcv_unread_ += more;
            rcv_unacked_ += more;
        }
        ooo_bytes_ -= r.len;
        ++merged;
    }
    ooo_.erase(ooo_.begin(), ooo_.begin() + static_cast<std::ptrdiff_t>(merged));
    if (ooo_.empty()) std::vector<Range>().swap(ooo_);
    out.readable = true;
}

bool Stream::hold_out_of_order(SeqNumber seq, wire::Pieces data) {
    IWCM_ASSERT(seq > tcb_->rcv_nxt && !data.empty());
    const SeqNumber end = seq + static_cast<std::uint32_t>(data.size());
    // The ranges [first, last) touch [seq, end) and merge with it.
    auto first = std::find_if(ooo_.begin(), ooo_.end(),
                              [&](const Range& r) { return r.start + r.len >= seq; });
    auto last = first;
    while (last != ooo_.end() && last->start <= end) ++last;
    if (first == last && ooo_.size() >= kMaxOooRanges) return false;  // dropped, ACKed
    place(seq, data);
    Range merged{seq, static_cast<std::uint32_t>(data.size())};
    if (first != last) {
        const SeqNumber lo = first->start < seq ? first->start : seq;
        const SeqNumber last_end = (last - 1)->start + (last - 1)->len;
        const SeqNumber hi = last_end > end ? last_end : end;
        merged = {lo, dist(hi, lo)};
        for (auto it = first; it != last; ++it) ooo_bytes_ -= it->len;
        first = ooo_.erase(first, last);
    }
    ooo_.insert(first, merged);
    ooo_bytes_ += merged.len;
    return true;
}

// ---------------------------------------------------------------- sending

std::optional<SegmentOut> Stream::poll_segment(Instant now) {
    if (delack_at_ <= now) ack_now_ = true;
    std::optional<SegmentOut> out;
    if (rexmit_una_) {
        // Fast retransmit or a NewReno partial ACK: the first unacknowledged
        // segment again, whatever cwnd says (RFC 5681 3.2 step 3, RFC 6582).
        rexmit_una_ = false;
        if (tcb_->snd_max > tcb_->snd_una) {
            const std::uint32_t len = std::min(snd_buffered(), seg_limit(tcb_->snd_una));
            const bool fin = fin_queued_ && len == snd_buffered();
            if (len > 0 || fin) out = emit(now, tcb_->snd_una, len, fin);
        }
    }
    if (!out && tlp_pending_) out = send_tlp(now);
    if (!out) out = send_new(now);
    if (!out && probe_pending_) out = send_probe();
    if (!out && ka_probe_pending_) {
        // RFC 9293 3.8.4: a keepalive is "SEG.SEQ = SND.NXT-1" with no data.
        ka_probe_pending_ = false;
        out = make_segment(minus(ack_seq(), 1), 0, flags::kAck);
    }
    if (!out && ack_now_) out = make_segment(ack_seq(), 0, flags::kAck);
    IWCM_ASSERT(!out || !ack_now_);  // every segment carries the ACK that was owed
    update_timers(now);
    checked(*this);
    return out;
}

SeqNumber Stream::ack_seq() const {
    // RFC 9293 says <SEQ=SND.NXT>, but after an RTO SND.NXT went back to
    // SND.UNA and the peer may hold far more: BSD's tcp_output, "For ACK only
    // packets, we do not want the sequence number of the retransmitted packet,
    // we want the sequence number of the next unsent octet" (SND.MAX). A
    // zero-window probe byte past the known window does not count: the peer
    // most likely dropped it.
    const SeqNumber edge = tcb_->snd_una + tcb_->snd_wnd;
    if (tcb_->snd_max <= edge) return tcb_->snd_max;
    IWCM_ASSERT(tcb_->snd_max > tcb_->snd_una);  // beyond the window: something was sent
    return snd_nxt_ > edge ? snd_nxt_ : edge;
}

std::uint32_t Stream::send_allowance() const {
    // RFC 3042 section 2: "the sender can transmit new segments upon the
    // first and second duplicate ACKs ... if the amount of outstanding data
    // would remain less than or equal to the congestion window plus 2*SMSS";
    // "The congestion window (cwnd) MUST NOT be changed". One full segment
    // per duplicate ACK, since send_len sends only full ones then. Only new
    // data: not while SND.NXT is back below SND.MAX after an RTO.
    std::uint64_t allowed = cwnd_;
    if (!in_recovery_ && dupacks_ > 0 && snd_nxt_ == tcb_->snd_max) {
        allowed += std::uint64_t{std::min<std::uint8_t>(dupacks_, 2)} * tcb_->mss;
    }
    const auto allowance = static_cast<std::uint32_t>(std::min<std::uint64_t>(allowed, kCwndCap));
    IWCM_ASSERT(allowance >= cwnd_);
    return allowance;
}

std::uint32_t Stream::offload() const {
    const std::uint32_t o = std::min<std::uint32_t>(config_->segment_offload, kMaxOffload);
    return o >= 2U * tcb_->mss ? o / tcb_->mss * tcb_->mss : 0;
}

std::optional<std::uint32_t> Stream::send_len(std::uint32_t allowance) const {
    const auto len = send_len_mss(allowance);
    const std::uint32_t offload_max = offload();
    if (offload_max == 0 || !len || *len == 0) return len;
    // The segment the MSS rules send now, grown by what may follow it at once.
    const SeqNumber limit = tcb_->snd_una + std::min(tcb_->snd_wnd, allowance);
    const std::uint32_t room = limit > snd_nxt_ ? dist(limit, snd_nxt_) : 0;
    const std::uint32_t cap = std::min({room, dist(data_end(), snd_nxt_), offload_max});
    const std::uint32_t n = offload_len(*len, cap);
    IWCM_ASSERT(n >= *len && n <= std::max(*len, cap));  // never shorter, never past the cap
    return n;
}

std::uint32_t Stream::offload_len(std::uint32_t len, std::uint32_t cap) const {
    // send_len's: a first piece the MSS rules allow, a cap within what is queued.
    IWCM_ASSERT(len > 0 && len <= tcb_->mss && cap <= dist(data_end(), snd_nxt_));
    if (cap <= len) return len;
    if (config_->offload_mss_pieces && !record_ends_.empty() && snd_nxt_ < record_ends_.back()) {
        // A link that cuts every MSS: whole pieces (a record, or an MSS-sized piece of a long
        // one) while each is a whole MSS; the first shorter one is the last.
        // `len` is the first piece; cap is within what is queued.
        std::uint32_t n = len;
        while (n % tcb_->mss == 0 && n < cap) {
            const SeqNumber at = snd_nxt_ + n;
            const std::uint32_t piece = seg_limit(at);
            if (piece <= cap - n) {
                n += piece;
                continue;
            }
            // Not whole within the cap: only plain bytes to the end of what is queued go.
            if (!record_ends_.first_after(at) && at + (cap - n) == data_end()) n = cap;
            break;
        }
        return n;
    }
    if (!record_ends_.empty() && snd_nxt_ < record_ends_.back()) {
        // Whole records: up to the last record end within the cap.
        const auto end = record_ends_.last_before(snd_nxt_ + cap + 1);
        if (end && *end > snd_nxt_ + len) return dist(*end, snd_nxt_);
        if (end) return len;
        // No end within the cap: MSS-sized pieces of the long record that holds
        // SND.NXT (as the MSS rule would cut it from here).
    } else if (cap == dist(data_end(), snd_nxt_)) {
        return cap;  // plain bytes: all that is queued (len was the last piece)
    }
    // Plain bytes or a long record: MSS-sized pieces.
    return std::max(len, cap / tcb_->mss * tcb_->mss);
}

std::optional<std::uint32_t> Stream::send_len_mss(std::uint32_t allowance) const {
    const SeqNumber end = data_end();
    if (snd_nxt_ > end) return std::nullopt;  // the FIN is out
    // RFC 5681 section 2 and RFC 9293 3.8.6: never beyond SND.UNA +
    // min(cwnd, SND.WND), cut at the MSS.
    const SeqNumber limit = tcb_->snd_una + std::min(tcb_->snd_wnd, allowance);
    const std::uint32_t room = limit > snd_nxt_ ? dist(limit, snd_nxt_) : 0;
    const std::uint32_t unsent = dist(end, snd_nxt_);
    // The segment the bytes from SND.NXT on make: an MSS, or less at a
    // record's end (write_record) or at the end of the queue.
    const std::uint32_t piece = std::min(unsent, seg_limit(snd_nxt_));
    const std::uint32_t len = std::min(room, piece);
    IWCM_ASSERT(len <= tcb_->mss && len <= unsent);
    // The FIN takes no room in the window: it goes with the last byte.
    const bool fin = fin_queued_ && len == unsent;
    if (len == 0 && !fin) return std::nullopt;
    if (!record_ends_.empty() && snd_nxt_ < record_ends_.back()) {
        // Inside records a segment is the whole piece or waits for the ACK
        // that widens the window (no fraction Fs: a record split would put
        // an MPA FPDU in two segments). With nothing in flight no ACK would
        // come, so the window's share goes, as the override below does.
        if (len < piece && snd_nxt_ != tcb_->snd_una) return std::nullopt;
        return len;
    }
    // RFC 9293 3.8.6.2.1, the sender's silly-window avoidance: send "if a
    // maximum-sized segment can be sent", "or if the data is pushed and all
    // queued data can be sent now" (Nagle is off: every write is pushed),
    // "or if at least a fraction Fs of the maximum window can be sent" (Fs
    // = 1/2), "or if the override timeout occurs". The override is for a
    // sender with nothing in flight, which no ACK would wake: ours sends at
    // once then. With data in flight a short segment waits for the ACK that
    // slides the window (or for the RTO), so a congestion window that is no
    // multiple of the MSS never trickles out in fractions of it. A full send buffer's tail
    // is no push either: the writer had more than fitted, and the ACK that frees room
    // brings it (a short tail there cut one segment per buffer-full in StreamLoss seeds).
    const bool pushed = len == unsent && (fin_queued_ || send_space() > 0);
    const bool whole = len == tcb_->mss || pushed;
    if (!whole && len < tcb_->max_snd_wnd / 2 && snd_nxt_ != tcb_->snd_una) return std::nullopt;
    return len;
}

std::uint32_t Stream::seg_limit(SeqNumber seq) const {
    if (record_ends_.empty()) return tcb_->mss;
    const auto end = record_ends_.first_after(seq);
    return end ? std::min<std::uint32_t>(tcb_->mss, dist(*end, seq)) : tcb_->mss;
}

SeqNumber Stream::last_seg_start(SeqNumber end) const {
    IWCM_ASSERT(end > tcb_->snd_una && end <= data_end());
    const SeqNumber tail = minus(end, std::min<std::uint32_t>(dist(end, tcb_->snd_una), tcb_->mss));
    if (record_ends_.empty()) return tail;
    // The record (or the unacknowledged rest of it) that holds the last byte.
    const auto prev = record_ends_.last_before(end);
    const SeqNumber from = prev && *prev > tcb_->snd_una ? *prev : tcb_->snd_una;
    const auto next = record_ends_.first_after(minus(end, 1));
    if (next && *next == end) {
        // It ends at `end`: its last MSS-sized piece counted from its start.
        return from + (dist(end, from) - 1) / tcb_->mss * tcb_->mss;
    }
    return tail > from ? tail : from;
}

std::optional<SegmentOut> Stream::send_new(Instant now) {
    if (holding() && snd_nxt_ >= hold_edge_) return std::nullopt;
    auto len = send_len(send_allowance());
    if (!len) return std::nullopt;
    // While the hold lasts only the bytes queued before the hand-off go (they are the
    // handshake's: an MPA frame the peer's window held back), and no FIN after them.
    if (holding()) len = std::min(*len, dist(hold_edge_, snd_nxt_));
    if (*len == 0 && holding()) return std::nullopt;
    IWCM_ASSERT(!holding() || snd_nxt_ + *len <= hold_edge_);
    return emit(now, snd_nxt_, *len, !holding() && fin_queued_ && snd_nxt_ + *len == data_end());
}

std::optional<SegmentOut> Stream::send_tlp(Instant now) {
    // RFC 8985 7.3: "If a previously unsent segment exists AND the receive
    // window allows new data to be sent: Transmit that new segment ... Else:
    // Retransmit the last segment". The probe ignores cwnd; one per episode.
    tlp_pending_ = false;
    if (tcb_->snd_max == tcb_->snd_una) return std::nullopt;
    std::optional<SegmentOut> out;
    if (snd_nxt_ == tcb_->snd_max && !holding()) {
        if (const auto len = send_len(kCwndCap); len && *len > 0) {
            out = emit(now, snd_nxt_, *len, fin_queued_ && snd_nxt_ + *len == data_end());
        }
    }
    tlp_retrans_ = !out;
    if (!out) {
        // The last segment: up to an MSS of data before SND.MAX, and the FIN
        // if it was sent.
        const std::uint32_t data = dist(tcb_->snd_max, tcb_->snd_una) - (fin_sent_ ? 1U : 0U);
        const SeqNumber end = tcb_->snd_una + data;
        const SeqNumber start = data == 0 ? end : last_seg_start(end);
        out = emit(now, start, dist(end, start), fin_sent_);
    }
    IWCM_ASSERT(out.has_value());  // new data, or the last segment again
    tlp_out_ = true;
    tlp_end_ = tcb_->snd_max;
    // "the sender MUST ... arm the RTO timer, not the PTO timer".
    rto_at_ = now + rto();
    return out;
}

bool Stream::tlp_wanted() const {
    // RFC 8985 7.2: a probe is scheduled while data is outstanding and "the
    // connection is not in loss recovery" (fast recovery or after an RTO:
    // both keep SND.UNA at or below `recover`), once an RTT is known, and
    // not while a probe is unanswered (TLP.end_seq).
    return has_srtt_ && tcb_->snd_max > tcb_->snd_una && !in_recovery_ &&
           tcb_->snd_una > recover_ && !tlp_out_ && !tlp_pending_ && !persist_wanted();
}

Duration Stream::pto() const {
    // RFC 8985 7.2: "PTO = 2 * SRTT"; "If FlightSize is one segment: PTO +=
    // WCDelAckT" (a receiver may hold the ACK of a lone segment); at least
    // two clock ticks, like Linux's TCP_TIMEOUT_MIN. The caller caps it at
    // the RTO ("PTO = min(PTO, RTO)" in effect: the RTO comes first).
    Duration d = std::max(2 * srtt_, 2 * kGranularity);
    if (dist(tcb_->snd_max, tcb_->snd_una) <= tcb_->mss) d += kWcDelAckT;
    return d;
}

void Stream::end_tlp_episode(std::uint32_t flight) {
    tlp_out_ = false;
    if (!tlp_retrans_) return;
    // RFC 8985 7.4: without a DSACK (we take no SACK) a sender cannot tell
    // that the original was not lost, so it "MUST estimate that either the
    // original data segment or the TLP retransmission were lost, and
    // congestion control MUST react appropriately to that loss as it would
    // any other loss": as fast recovery would (RFC 5681 equation 4), at once.
    ssthresh_ = std::max<std::uint32_t>(flight / 2, 2U * tcb_->mss);
    cwnd_ = std::max<std::uint32_t>(std::min(cwnd_, ssthresh_), tcb_->mss);
    bytes_acked_ = 0;
    IWCM_ASSERT(cwnd_ >= tcb_->mss && cwnd_ <= ssthresh_);
}

std::optional<SegmentOut> Stream::send_probe() {
    // RFC 9293 3.8.6.1: "The sending TCP must regularly transmit at least one
    // octet of new data (if available), even if the send window is zero". The
    // probe does not move SND.NXT, so data resumes there once the window opens.
    probe_pending_ = false;
    if (snd_nxt_ >= data_end() || (holding() && snd_nxt_ >= hold_edge_)) return std::nullopt;
    // The persist timer set probe_pending_: a zero window and nothing in flight.
    IWCM_ASSERT(persist_wanted());
    const SeqNumber end = snd_nxt_ + 1;
    if (end > tcb_->snd_max) tcb_->snd_max = end;
    return make_segment(snd_nxt_, 1, flags::kAck | flags::kPsh);
}

SegmentOut Stream::emit(Instant now, SeqNumber seq, std::uint32_t len, bool fin) {
    // Queued bytes from SND.UNA on; the FIN only right after the last of them.
    IWCM_ASSERT(seq >= tcb_->snd_una && seq + len <= data_end());
    IWCM_ASSERT(!fin || (fin_queued_ && seq + len == data_end()));
    const SeqNumber end = seq + len + (fin ? 1 : 0);
    if (seq < tcb_->snd_max) {
        // A retransmission. RFC 6298 section 3 (Karn): no RTT sample may come
        // from a retransmitted segment, so stop timing.
        ++retransmitted_;
        rtt_timing_ = false;
    } else {
        // RFC 8985 7.2: the PTO restarts "after transmitting new data"
        // (update_timers arms it again).
        tlp_at_ = kInstantNever;
        if (!rtt_timing_) {
            // RFC 6298 section 3: one segment is timed at a time.
            rtt_timing_ = true;
            rtt_seq_ = end;
            rtt_start_ = now;
        }
    }
    if (end > snd_nxt_) snd_nxt_ = end;
    if (end > tcb_->snd_max) tcb_->snd_max = end;
    if (fin) fin_sent_ = true;
    // RFC 6298 5.1: "Every time a packet containing data is sent (including a
    // retransmission), if the timer is not running, start it running".
    if (rto_at_ == kInstantNever) rto_at_ = now + rto();
    std::uint8_t f = flags::kAck;
    if (len > 0) f |= flags::kPsh;
    if (fin) f |= flags::kFin;
    IWCM_ASSERT(snd_nxt_ <= tcb_->snd_max && rto_at_ != kInstantNever);
    return make_segment(seq, len, f);
}

void Stream::gather(SeqNumber seq, std::uint32_t len) {
    IWCM_ASSERT(refq_ != nullptr);
    RefQueue& q = *refq_;
    const SmallVec<Ref, 4>& refs = q.refs;
    q.pieces.clear();
    // The first reference that ends after seq (the earlier ones are behind
    // it): where the last segment's gather stopped, as segments mostly
    // follow each other, else a binary search.
    const auto ends_after = [&refs, seq](std::size_t k) { return refs[k].seq + refs[k].len > seq; };
    std::size_t i = q.next;
    if (i < q.head || i > refs.size() || (i < refs.size() && !ends_after(i)) ||
        (i > q.head && ends_after(i - 1))) {
        auto it = std::partition_point(refs.begin() + q.head, refs.end(),
                                       [seq](const Ref& r) { return r.seq + r.len <= seq; });
        i = static_cast<std::size_t>(it - refs.begin());
    }
    // Where seq's byte would be in the buffer if it lies there.
    std::size_t at = snd_off_ + dist(seq, tcb_->snd_una);
    if (i > q.head) at = refs[i - 1].inline_at + dist(seq, refs[i - 1].seq + refs[i - 1].len);
    SeqNumber s = seq;
    std::uint32_t left = len;
    while (left > 0) {
        std::uint32_t n = left;
        if (i < refs.size() && refs[i].seq <= s) {
            const Ref& r = refs[i];
            const std::uint32_t off = dist(s, r.seq);
            n = std::min(left, r.len - off);
            q.pieces.emplace_back(r.data + off, n);
            at = r.inline_at;
            ++i;
        } else {
            if (i < refs.size()) n = std::min(n, dist(refs[i].seq, s));
            IWCM_ASSERT(n > 0 && at + n <= snd_buf_.size());
            q.pieces.emplace_back(snd_buf_.data() + at, n);
            at += n;
        }
        s += n;
        left -= n;
    }
    q.next = static_cast<std::uint32_t>(i);
}

SegmentOut Stream::make_segment(SeqNumber seq, std::uint32_t len, std::uint8_t f) {
    // Every segment carries our ACK and window: whatever ACK was owed is paid.
    const Advert a = advert();
    rcv_adv_ = a.edge;
    ack_now_ = false;
    delack_at_ = kInstantNever;
    rcv_unacked_ = 0;
    IWCM_ASSERT(len == 0 || (seq >= tcb_->snd_una && seq + len <= data_end()));
    IWCM_ASSERT(rcv_adv_ >= tcb_->rcv_nxt);
    SegmentOut out{seq, tcb_->rcv_nxt, f, a.field, {}, {}, len};
    if (len > 0 && ref_bytes() > 0) {
        gather(seq, len);
        if (refq_->pieces.size() == 1) {
            out.payload = refq_->pieces[0];
        } else {
            out.pieces = {refq_->pieces.data(), refq_->pieces.size()};
        }
    } else if (len > 0) {
        out.payload =
            std::span<const std::byte>(snd_buf_).subspan(snd_off_ + dist(seq, tcb_->snd_una), len);
    }
    return out;
}

void Stream::force_ack() {
    ack_now_ = true;
    checked(*this);
}

// ---------------------------------------------------------------- timers

Duration Stream::backed_off(unsigned shift) const {
    return tcp::backed_off(rto_base_, shift, config_->rto_max);
}

Duration Stream::rto() const {
    return backed_off(rto_backoff_);
}

bool Stream::persist_wanted() const {
    // RFC 9293 3.8.6.1: a zero window, data waiting, nothing in flight.
    return tcb_->snd_wnd == 0 && snd_nxt_ == tcb_->snd_una && data_end() > snd_nxt_;
}

void Stream::update_timers(Instant now) {
    if (persist_wanted()) {
        rto_at_ = kInstantNever;
        tlp_at_ = kInstantNever;
        // The persist timer starts at the RTO and backs off to rto_max.
        if (persist_at_ == kInstantNever) {
            persist_at_ = now + backed_off(rto_backoff_ + persist_backoff_);
        }
        return;
    }
    persist_at_ = kInstantNever;
    persist_backoff_ = 0;
    probe_pending_ = false;
    if (tcb_->snd_max == tcb_->snd_una)
        rto_at_ = kInstantNever;
    else if (rto_at_ == kInstantNever)
        rto_at_ = now + rto();
    if (!tlp_wanted())
        tlp_at_ = kInstantNever;
    else if (tlp_at_ == kInstantNever)
        tlp_at_ = now + pto();
    // RFC 8985 7.2: when the RTO would fire first, it alone is armed.
    if (tlp_at_ >= rto_at_) tlp_at_ = kInstantNever;
    IWCM_ASSERT(persist_at_ == kInstantNever && (tlp_at_ == kInstantNever || tlp_at_ < rto_at_));
}

std::optional<Instant> Stream::next_deadline() const {
    // Pairwise: std::min of an initializer list is a loop over a copy on the stack, three
    // times the instructions once the call is out of line (callgrind, BM_StreamProfile).
    const Instant t =
        std::min(std::min(std::min(rto_at_, tlp_at_), std::min(persist_at_, delack_at_)),
                 std::min(keepalive_at_, hold_at_));
    if (t == kInstantNever) return std::nullopt;
    return t;
}

Stream::Timeout Stream::on_timer(Instant now) {
    Timeout result = Timeout::kNone;
    if (rto_at_ <= now) result = on_rto(now);
    if (tlp_at_ <= now) {
        // RFC 8985 7.3: the PTO fired; poll_segment sends the probe.
        tlp_at_ = kInstantNever;
        tlp_pending_ = tlp_wanted();
    }
    if (result == Timeout::kNone && persist_at_ <= now) result = on_persist(now);
    if (delack_at_ <= now) {
        delack_at_ = kInstantNever;
        ack_now_ = true;
    }
    if (result == Timeout::kNone && keepalive_at_ <= now) result = on_keepalive(now);
    if (hold_at_ <= now) hold_at_ = kInstantNever;  // the new data may go (poll_segment)
    update_timers(now);
    // No timer that was due is left armed at or before `now` (the owner would wake at
    // once, for nothing), unless the connection is given up.
    IWCM_ASSERT(result == Timeout::kGiveUp ||
                (rto_at_ > now && tlp_at_ > now && delack_at_ > now && hold_at_ > now));
    checked(*this);
    return result;
}

Stream::Timeout Stream::on_rto(Instant now) {
    rto_at_ = kInstantNever;
    if (tcb_->snd_max == tcb_->snd_una) return Timeout::kNone;
    if (rto_count_ < 255) ++rto_count_;
    if (rto_count_ > config_->max_retransmits) return Timeout::kGiveUp;
    // RFC 5681 3.1 (4): ssthresh = max (FlightSize / 2, 2*SMSS), held
    // constant when the segment was already retransmitted by the timer.
    if (rto_count_ == 1) {
        ssthresh_ = std::max<std::uint32_t>(dist(tcb_->snd_max, tcb_->snd_una) / 2, 2U * tcb_->mss);
    }
    // "cwnd MUST be set to no more than the loss window, LW, which equals 1
    // full-sized segment".
    cwnd_ = tcb_->mss;
    bytes_acked_ = 0;
    dupacks_ = 0;
    // RFC 6582 section 4: "After a retransmit timeout, record the highest
    // sequence number transmitted in the variable recover, and exit the fast
    // recovery procedure if applicable."
    recover_ = minus(tcb_->snd_max, 1);
    in_recovery_ = false;
    rexmit_una_ = false;
    // RFC 8985 7: an RTO ends any loss-probe episode.
    tlp_out_ = false;
    tlp_pending_ = false;
    tlp_at_ = kInstantNever;
    // RFC 6298 5.4: "Retransmit the earliest segment that has not been
    // acknowledged": go back to SND.UNA and resend as cwnd allows.
    snd_nxt_ = tcb_->snd_una;
    rtt_timing_ = false;
    // 5.5: "The host MUST set RTO <- RTO * 2 ("back off the timer")"; 5.6:
    // "Start the retransmission timer".
    if (rto_backoff_ < kMaxBackoff) ++rto_backoff_;
    rto_at_ = now + rto();
    IWCM_ASSERT(cwnd_ == tcb_->mss && snd_nxt_ == tcb_->snd_una && !in_recovery_);
    return Timeout::kNone;
}

Stream::Timeout Stream::on_persist(Instant now) {
    persist_at_ = kInstantNever;
    if (!persist_wanted()) return Timeout::kNone;
    // Unanswered probes count like RTO expiries (Linux's tcp_probe_timer).
    if (probes_out_ < 255) ++probes_out_;
    if (probes_out_ > config_->max_retransmits) return Timeout::kGiveUp;
    probe_pending_ = true;
    if (persist_backoff_ < kMaxBackoff) ++persist_backoff_;
    persist_at_ = now + backed_off(rto_backoff_ + persist_backoff_);
    IWCM_ASSERT(probe_pending_ && persist_at_ != kInstantNever);
    return Timeout::kNone;
}

Stream::Timeout Stream::on_keepalive(Instant now) {
    keepalive_at_ = kInstantNever;
    if (!config_->keepalive) return Timeout::kNone;
    // RFC 9293 3.8.4: probe only an idle connection; while data or a FIN is
    // outstanding the retransmission timer watches the peer.
    if (tcb_->snd_max != tcb_->snd_una || data_end() != tcb_->snd_una ||
        (fin_queued_ && !fin_sent_)) {
        keepalive_at_ = now + config_->keepalive_idle;
        return Timeout::kNone;
    }
    if (ka_probes_out_ >= config_->keepalive_probes) return Timeout::kGiveUp;
    ++ka_probes_out_;
    ka_probe_pending_ = true;
    keepalive_at_ = now + config_->keepalive_interval;
    IWCM_ASSERT(ka_probes_out_ <= config_->keepalive_probes);
    return Timeout::kNone;
}

void Stream::finish(Instant now) {
    update_timers(now);
    checked(*this);
}

// ---------------------------------------------------------------- observers

SeqNumber Stream::snd_una() const {
    return tcb_->snd_una;
}
SeqNumber Stream::snd_nxt() const {
    return snd_nxt_;
}
SeqNumber Stream::snd_max() const {
    return tcb_->snd_max;
}
SeqNumber Stream::rcv_nxt() const {
    return tcb_->rcv_nxt;
}
std::uint32_t Stream::snd_wnd() const {
    return tcb_->snd_wnd;
}
std::uint32_t Stream::cwnd() const {
    return cwnd_;
}
std::uint32_t Stream::ssthresh() const {
    return ssthresh_;
}
std::uint16_t Stream::mss() const {
    return tcb_->mss;
}
std::optional<Duration> Stream::srtt() const {
    if (!has_srtt_) return std::nullopt;
    return srtt_;
}
std::size_t Stream::bytes_in_flight() const {
    return dist(snd_nxt_, tcb_->snd_una);
}
std::size_t Stream::bytes_queued() const {
    return snd_buffered();
}
std::size_t Stream::out_of_order_bytes() const {
    return ooo_bytes_;
}
bool Stream::fin_sent() const {
    return fin_sent_;
}
bool Stream::fin_acked() const {
    return fin_acked_;
}
bool Stream::fin_received() const {
    return fin_received_;
}
std::uint64_t Stream::retransmitted_segments() const {
    return retransmitted_;
}

bool Stream::idle() const {
    const bool send_done =
        snd_buffered() == 0 && tcb_->snd_una == tcb_->snd_max && (!fin_queued_ || fin_acked_);
    return send_done && rcv_unread_ == 0 && ooo_.empty() && !ack_now_ &&
           delack_at_ == kInstantNever && !rexmit_una_ && !tlp_pending_;
}

void Stream::check_invariants() const {
    IWCM_ASSERT(tcb_->snd_una <= snd_nxt_ && snd_nxt_ <= tcb_->snd_max);
    IWCM_ASSERT(snd_off_ <= snd_buf_.size());
    const std::uint32_t buffered = snd_buffered();
    IWCM_ASSERT(!fin_sent_ || fin_queued_);
    IWCM_ASSERT(!fin_acked_ || fin_sent_);
    if (fin_acked_) {
        IWCM_ASSERT(buffered == 0 && tcb_->snd_una == tcb_->snd_max);
    } else {
        IWCM_ASSERT(dist(tcb_->snd_max, tcb_->snd_una) <= buffered + (fin_sent_ ? 1U : 0U));
    }
    IWCM_ASSERT(cwnd_ >= tcb_->mss && cwnd_ <= kCwndCap);
    // A byte or FIN from the peer ends the hold (process_data), and so do bytes it sent
    // before the hand-off (the constructor).
    IWCM_ASSERT(!holding() || (rcv_unread_ == 0 && ooo_.empty() && !peer_fin_known_));
    // References: sorted, inside the queued bytes, their bytes counted.
    std::uint32_t by_ref = 0;
    for (std::size_t i = refq_ ? refq_->head : 0; refq_ && i < refq_->refs.size(); ++i) {
        const Ref& r = refq_->refs[i];
        IWCM_ASSERT(r.len > 0 && r.seq + r.len > tcb_->snd_una && r.seq + r.len <= data_end());
        IWCM_ASSERT(r.inline_at >= snd_off_ && r.inline_at <= snd_buf_.size());
        if (i > refq_->head) IWCM_ASSERT(refq_->refs[i - 1].seq + refq_->refs[i - 1].len <= r.seq);
        by_ref += r.seq < tcb_->snd_una ? dist(r.seq + r.len, tcb_->snd_una) : r.len;
    }
    IWCM_ASSERT(by_ref == ref_bytes());
    // Record ends (only the oldest and newest: the ring keeps them sorted).
    if (!record_ends_.empty()) {
        IWCM_ASSERT(record_ends_.front() > tcb_->snd_una && record_ends_.back() <= data_end());
    }
    // The receive side: readable bytes, then held ranges inside the window.
    IWCM_ASSERT(std::size_t{rcv_read_} + rcv_unread_ <= rcv_buf_.size());
    std::uint32_t held = 0;
    SeqNumber floor = tcb_->rcv_nxt;
    for (const Range& r : ooo_) {
        IWCM_ASSERT(r.len > 0 && r.start > floor);
        floor = r.start + r.len;
        held += r.len;
    }
    IWCM_ASSERT(held == ooo_bytes_);
    IWCM_ASSERT(ooo_.size() <= kMaxOooRanges);
    if (!ooo_.empty()) {
        IWCM_ASSERT(std::size_t{rcv_read_} + rcv_unread_ + dist(floor, tcb_->rcv_nxt) <=
                    rcv_buf_.size());
        IWCM_ASSERT(floor <= rcv_adv_);
    }
    IWCM_ASSERT(!fin_received_ || (ooo_.empty() && peer_fin_known_));
    // The offered right edge never passes what the buffer can hold.
    if (!fin_received_)
        IWCM_ASSERT(rcv_adv_ >= tcb_->rcv_nxt && dist(rcv_adv_, tcb_->rcv_nxt) <= rcv_space());
}

}  // namespace iwcm::tcp
