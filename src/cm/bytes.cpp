// The byte stream after a kStream hand-off: the core keeps TCP for the
// connection's whole life, as the irdma hardware does once a queue pair
// holds the connection, and reports FIN and RST back the way the hardware
// reports them to the driver's CM (irdma_cm_disconn_true: a FIN is a
// disconnect with status 0, a reset one with -ECONNRESET).
//
// Read first: src/tcp/stream.hpp (what the stream does on its own) and
// docs/design.md "Byte stream". Here is only what joins it to a node: the
// RFC 5961 RST and SYN rules before a segment reaches the stream, the stream's
// FIN events handed to on_fin and on_fin_acked (tcp.cpp: the close states),
// the application's events
// (kReadable, kWritable, the terminal one) and the stream's timer.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cm/core_impl.hpp"

namespace iwcm {

using cm::Node;
using cm::NodeRef;
using cm::Segment;
namespace tf = wire::tcp_flags;

void Core::Impl::start_stream(const NodeRef& node, const std::optional<StreamConfig>& own) {
    IWCM_ASSERT(node->stream == nullptr && node->tcb.snd_una <= node->tcb.snd_max);
    tcp::StreamInit init;
    init.tcb = node->tcb;  // the stream moves node->tcb itself from here on
    if (node->bufs) {
        // The sent bytes and any the peer's window held back, which the stream sends.
        init.unacked = node->bufs->tx;
        init.received = node->bufs->rx;
    }
    // RFC 5044 section 7.1's responder, bounded (MpaConfig::responder_send_wait); an
    // initiator facing a responder that reads its socket late (initiator_send_wait).
    const Duration wait = node->initiator       ? cfg.mpa.initiator_send_wait
                          : !node->peer_to_peer ? cfg.mpa.responder_send_wait
                                                : Duration::zero();
    if (wait > Duration::zero()) init.hold_data_until = now_ + wait;
    // The core's settings are shared by reference (cfg outlives every node); a connection's
    // own are kept by its stream.
    node->stream =
        own ? std::make_unique<cm::NodeStream>(std::make_unique<const StreamConfig>(*own), init,
                                               now_, node->tcb, stream_home)
            : std::make_unique<cm::NodeStream>(cfg.stream, init, now_, node->tcb, stream_home);
    // The stream retransmits what is unacknowledged (an RTR) and probes a shut window
    // from here on.
    timers.ack_send(node);
    timers.cancel_persist(*node);
    node->release_buffers();
    flush_stream(now_, node);
}

// A segment for a node with a stream. An RST or a SYN takes the one RFC 5961 path of
// before the hand-off (on_rst_or_syn), judged against the stream's receive window.
// Everything else is the stream's.
void Core::Impl::on_stream_segment(Instant now, const NodeRef& node, const Segment& seg) {
    IWCM_ASSERT(node->stream != nullptr && seg.tcp);  // after a kStream hand-off only
    cm::NodeStream& ns = live_stream(*node);          // a folded one is made again
    const tcp::Stream& s = ns.tcp();
    const wire::TcpRepr& t = *seg.tcp;
    if (t.flags & (tf::kRst | tf::kSyn)) [[unlikely]] {
        on_rst_or_syn(now, node, seg, s.acceptable(t.seq, seg.seq_len()));
        return;
    }
    // The payload in pieces when the frame came so (receive_parts). The frames
    // that read bytes its ACK frees are filled first (NodeStream::on_segment).
    tcp::Arrival a = [&] {
        const SinkScope sinking(*this);
        return ns.on_segment(now, {t.seq, t.ack, t.flags, t.window, seg.payload, rx_ctx.pieces()},
                             {ns.sink, node->handle()});
    }();
    ns.copied_received += a.buffered;
    ns.sunk += a.sunk;
    switch (a.verdict) {
        case tcp::Arrival::Verdict::kAccepted: break;
        case tcp::Arrival::Verdict::kOutOfWindow:
            drop(now, DropReason::kOutOfWindow, node.get(), {});
            break;
        case tcp::Arrival::Verdict::kAckUnsent:
            drop(now, DropReason::kBadAck, node.get(), {});
            break;
        case tcp::Arrival::Verdict::kAckTooOld:
            // RFC 5961 5.2's ACK is a challenge ACK, within the budget of section 7.
            send_challenge_ack(now, *node);
            drop(now, DropReason::kBadAck, node.get(), {});
            break;
        case tcp::Arrival::Verdict::kNoAck:
            drop(now, DropReason::kUnexpected, node.get(), {});
            break;
    }
    // The application hears of the bytes before it hears of the end.
    notify_stream(*node);
    const CmState before = node->state;
    const bool open = !a.fin_acked || on_fin_acked(now, node);
    if (open && a.fin) on_fin(now, node);
    if (node->state == before) {
        if (before == CmState::kTimeWait && t.has(tf::kFin)) {
            // RFC 9293 3.10.7.4, TIME-WAIT: a retransmission of the remote
            // FIN is acknowledged (the stream did) and restarts the wait.
            timers.arm_close_at(node, now + s.config().time_wait);
        } else if (before == CmState::kFinWait2) {
            // The peer may still send (a half-close): the wait for its FIN
            // counts from the last thing it sent.
            arm_fin_wait2(now, node);
        }
    }
    flush_stream(now, node);
}

// FIN_WAIT2 (on_fin_acked): wait for the peer's FIN as long as its retransmissions could
// last, judged by our own settings (the driver's retransmission policy; for a stream, its
// RTO doubling from rto_initial up to rto_max, max_retransmits times: 663 s by default),
// then reset, as Linux's tcp_fin_timeout bounds the wait. A shorter bound (it was
// 2 * rto_max) turns a clean close into an abort when a lossy path drops the few
// retransmissions of the peer's FIN that fall within it.
void Core::Impl::arm_fin_wait2(Instant now, const NodeRef& node) {
    IWCM_ASSERT(node->state == CmState::kFinWait2);
    timer::RetransPolicy peer{cfg.retransmit.max_retrans, cfg.retransmit.initial,
                              cfg.retransmit.cap};
    Duration wait = peer.total();
    if (node->stream) {
        const tcp::StreamConfig& c = node->stream->config();
        const timer::RetransPolicy stream{c.max_retransmits, c.rto_initial, c.rto_max};
        wait = std::max(wait, stream.total());
    }
    arm_phase_timer(now, node, cm::NodeTimer::kFinWait2, wait);
}

void Core::Impl::on_stream_timer(Instant now, const NodeRef& node) {
    if (node->state == CmState::kClosed || !node->stream) return;
    // A stream exists only past the MPA exchange: the node is connected or closing.
    IWCM_ASSERT(cm::connected(node->state));
    // A folded stream's only deadline is keepalive's: the probe needs it live.
    cm::NodeStream& ns = live_stream(*node);
    if (ns.on_timer(now) == tcp::Stream::Timeout::kGiveUp) {
        // Retransmissions, zero-window probes or keepalive probes ran out.
        send_reset(*node);
        end_for_app(node, EventType::kDisconnected, -ETIMEDOUT);
        close_node(node);
        return;
    }
    flush_stream(now, node);
    // An expiry of a stream that went idle folds it: the one armed for that (flush_stream),
    // or an earlier one left armed for a deadline since gone.
    fold_stream(node);
}

// Out of line: inlined into send_ack, the unfold cost a setup 14 instructions (callgrind,
// --profile-setups), though no setup has a stream.
[[gnu::noinline]] void Core::Impl::send_stream_ack(Node& node) {
    IWCM_ASSERT(node.stream != nullptr);
    // The stream builds its ACKs (its window, its rcv_nxt).
    live_stream(node).force_ack();
    flush_stream(now_, NodeRef(&node));
}

void Core::Impl::unfold_stream(cm::Node& node) {
    cm::NodeStream& ns = *node.stream;
    IWCM_ASSERT(ns.folded());
    ns.unfold(node.tcb);
    ++stats.streams_unfolded;
}

void Core::Impl::fold_stream(const NodeRef& node) {
    IWCM_ASSERT(node->stream != nullptr);
    cm::NodeStream& ns = *node->stream;
    // Only an open stream folds: a closing one has a FIN to send or wait for.
    if (node->state != CmState::kOffloaded || !ns.foldable()) return;
    ns.fold();
    ++stats.streams_folded;
    const tcp::FoldedStream& f = ns.folded_state();
    IWCM_ASSERT(f.rcv_adv >= node->tcb.rcv_nxt);
    // Keepalive's is the one deadline a folded stream keeps.
    if (f.keepalive_at != kInstantNever) {
        arm_stream_timer(now_, node, f.keepalive_at);
        ns.timer_at = f.keepalive_at;
    } else if (cm::NodeTimers::has_stream(*node)) {
        cancel_stream_timer(*node);
    }
}

void Core::Impl::flush_stream(Instant now, const NodeRef& node) {
    IWCM_ASSERT(node->stream != nullptr);
    cm::NodeStream& ns = *node->stream;
    // A folded stream has nothing to send, and its timer was armed as it folded.
    if (ns.folded()) return;
    const tcp::Stream& s = ns.tcp();
    // The stream's retransmissions (RTO, fast retransmit, loss probe) are the core's too:
    // Stats::retransmissions counts every TCP segment sent again, before and after hand-off.
    const std::uint64_t resent = s.retransmitted_segments();
    if (node->state != CmState::kClosed) {
        // TIME_WAIT still answers (the ACK of the peer's FIN, old duplicates).
        while (auto out = ns.poll_segment(now)) {
            wire::FrameRepr fr = segment_frame(*node, out->flags, out->seq);
            fr.tcp.ack = out->ack;
            fr.tcp.window = out->window;
            node->ack_deferred = false;
            if (out->len > 0 && !node->loopback) {
                // Copied when taken whole (or read where it lies, in parts).
                emit_frame_left_out(*node, fr, wire::pieces_or(out->pieces, out->payload));
                continue;
            }
            ns.count_copied_to_frames(out->len);
            if (!out->pieces.empty()) {
                emit_frame_pieces(fr, out->pieces, out->len, node->loopback,
                                  node->flow);  // partly by reference
            } else {
                emit_frame(fr, out->payload, node->loopback, node->flow);
            }
        }
    }
    stats.retransmissions += s.retransmitted_segments() - resent;
    IWCM_ASSERT(&s.tcb() == &node->tcb);  // what the stream moved is the node's
    notify_stream(*node);
    // The stream's next deadline (kInstantNever: none). An Instant, not an optional: GCC's
    // thread-sanitizer build took the optional's value for uninitialised.
    Instant at = kInstantNever;
    if (node->state != CmState::kClosed && node->state != CmState::kTimeWait) {
        if (const auto d = s.next_deadline()) at = *d;
    }
    // An open stream gone idle folds at the timer's next expiry (on_stream_timer), at the
    // latest stream_fold_after from now. An expiry armed before that stays, and asks when it
    // comes; foldable() is asked here only when none is (a busy stream's data path, its
    // timer armed, skips it).
    bool keep_armed = false;
    if (node->state == CmState::kOffloaded && cfg.stream_fold_after != Duration::max()) {
        const Instant fold_at = now + cfg.stream_fold_after;
        if (fold_at < at) {
            if (cm::NodeTimers::has_stream(*node) && ns.timer_at <= fold_at) {
                keep_armed = true;
            } else if (s.foldable()) {
                at = fold_at;
            }
        }
    }
    // The timer is moved only earlier: the RTO moves later on every ACK, and
    // re-arming on each would cost 4 % of a data segment's instructions. An expiry
    // before the stream's deadline finds nothing due and arms the next one.
    if (at == kInstantNever) {
        if (cm::NodeTimers::has_stream(*node) && !keep_armed) cancel_stream_timer(*node);
    } else if (!cm::NodeTimers::has_stream(*node) || at < ns.timer_at) {
        arm_stream_timer(now, node, at);
        ns.timer_at = at;
    }
}

// kReadable when bytes wait that the application was not told of (at most
// one waits); kWritable once per short send (or refused record), when the
// space it needs has freed.
void Core::Impl::notify_stream(Node& node) {
    cm::NodeStream& ns = *node.stream;
    if (!node.app_owned) return;
    // A wanted space is one the buffer can reach (send_bytes refuses a record larger than
    // it), or the kWritable would never come.
    IWCM_ASSERT(ns.writable_need <= ns.tcp().config().send_buffer);
    NodeRef ref(&node);
    if (!ns.readable_queued && ns.tcp().readable_bytes() > ns.readable_told) {
        ns.readable_queued = true;
        push_event(ref, EventType::kReadable, 0);
    }
    if (ns.writable_need > 0 && ns.tcp().send_space() >= ns.writable_need) {
        ns.writable_need = 0;
        push_event(ref, EventType::kWritable, 0);
    }
}

// ---------------------------------------------------------------- commands

Result<Node*> Core::Impl::stream_node(ConnHandle conn) const {
    if (!conn.valid() || conn.index >= pool.capacity()) return fail(ApiError::kInvalidHandle);
    Node* n = pool.find(conn.index, conn.generation);
    if (n == nullptr) return fail(ApiError::kStaleHandle);
    if (!n->stream) return fail(n->app_owned ? ApiError::kWrongState : ApiError::kStaleHandle);
    return n;
}

// The node of a connection whose stream takes bytes.
Result<Node*> Core::Impl::sending_node(ConnHandle conn) const {
    auto n = app_node(conn);
    if (!n) return fail(n.error());
    Node* node = *n;
    // Only an open stream takes bytes: not before the hand-off, not after
    // our FIN (disconnect) or the peer's (CLOSE_WAIT answers with ours).
    if (!node->stream || node->state != CmState::kOffloaded) return fail(ApiError::kWrongState);
    IWCM_ASSERT(node->app_owned && cm::connected(node->state));
    return node;
}

// send() takes what fits; send_record() all or nothing: a record that does
// not fit now waits for the space it needs (one kWritable), which a record
// larger than the buffer would never get.
Result<std::size_t> Core::Impl::send_bytes(Instant now, ConnHandle conn,
                                           std::span<const wire::Bytes> parts, bool record,
                                           bool more, std::uint32_t by_ref) {
    now_ = now;
    auto n = sending_node(conn);
    if (!n) return fail(n.error());
    NodeRef ref(*n);
    cm::NodeStream& ns = live_stream(*ref);
    std::size_t size = 0;
    std::size_t to_copy = 0;  // what goes into the send buffer
    for (std::size_t i = 0; i < parts.size(); ++i) {
        size += parts[i].size();
        if ((by_ref >> i & 1U) == 0) to_copy += parts[i].size();
    }
    std::size_t taken = 0;
    if (!record) {
        IWCM_ASSERT(parts.size() == 1 && by_ref <= 1);
        taken = by_ref != 0 ? ns.write_ref(parts[0]) : ns.write(parts[0]);
        if (taken < size) ns.writable_need = 1;
    } else if (size == 0 || size > ns.tcp().config().send_buffer) {
        return fail(ApiError::kInvalidArgument);
    } else if (ns.write_record(parts, by_ref, to_copy)) {
        taken = size;
    } else {
        ns.writable_need = static_cast<std::uint32_t>(size);
    }
    // What is held by reference was not copied in.
    std::size_t copied = taken;
    for (std::size_t i = 0; taken > 0 && i < parts.size(); ++i) {
        if ((by_ref >> i & 1U) != 0) copied -= std::min(parts[i].size(), taken);
    }
    ns.copied_in += copied;
    // A refused record flushes too: what was queued with `more` goes now.
    if (!more || taken == 0) {
        flush_stream(now, ref);
        drain_loopback(now);
    }
    return taken;
}

Result<void> Core::Impl::consume_bytes(Instant now, ConnHandle conn, std::size_t n) {
    now_ = now;
    auto found = stream_node(conn);
    if (!found) return fail(found.error());
    Node& node = **found;
    cm::NodeStream& ns = *node.stream;
    if (n > ns.readable_bytes()) return fail(ApiError::kInvalidArgument);
    if (n == 0) return {};
    IWCM_ASSERT(!ns.folded());  // it holds bytes to read
    const std::size_t before = ns.tcp().readable_bytes();
    ns.consume(n);
    IWCM_ASSERT(ns.tcp().readable_bytes() == before - n);
    // What was read ended something whose sender waits for our ACK (a queue
    // pair's message read from the buffer): acknowledge at once.
    if (node.stream->sink != nullptr) {
        const SinkScope sinking(*this);
        if (node.stream->sink->ack_now(conn)) ns.force_ack();
    }
    // The application read: what is left, or the next arrival, is told again.
    node.stream->readable_queued = false;
    node.stream->readable_told = 0;
    NodeRef ref(&node);
    flush_stream(now, ref);
    drain_loopback(now);
    return {};
}

// Before hand-off the peer's bytes after its MPA frames wait in rx; the
// window advertised shrinks as they do, so at most rcv_wnd of them wait.
std::uint32_t Core::Impl::rx_space(const Node& node) const {
    std::size_t held = node.bufs ? node.bufs->rx.size() : 0;
    return held >= cfg.rcv_wnd ? 0 : cfg.rcv_wnd - static_cast<std::uint32_t>(held);
}

// ---------------------------------------------------------------- Core

Result<std::size_t> Core::send(Instant now, ConnHandle conn, std::span<const std::byte> bytes) {
    impl_->enter_command();
    return impl_->send_bytes(now, conn, std::span<const wire::Bytes>(&bytes, 1), false, false);
}

Result<std::size_t> Core::send_ref(Instant now, ConnHandle conn, std::span<const std::byte> bytes) {
    impl_->enter_command();
    return impl_->send_bytes(now, conn, std::span<const wire::Bytes>(&bytes, 1), false, false, 1);
}

Result<bool> Core::send_record(Instant now, ConnHandle conn, std::span<const std::byte> record) {
    impl_->enter_command();
    return send_record(now, conn, std::span<const wire::Bytes>(&record, 1));
}

Result<bool> Core::send_record(Instant now, ConnHandle conn,
                               std::span<const std::span<const std::byte>> parts, bool more,
                               std::uint32_t by_ref) {
    impl_->enter_command();
    auto n = impl_->send_bytes(now, conn, parts, true, more, by_ref);
    if (!n) return fail(n.error());
    return *n > 0;
}

Result<std::size_t> Core::own_send_bytes(ConnHandle conn) {
    impl_->enter_command();
    auto n = impl_->stream_node(conn);
    if (!n) return fail(n.error());
    // A closed connection's stream sends nothing more: nothing to copy.
    if ((*n)->state == CmState::kClosed) return 0;
    // A folded stream holds no byte at all.
    if ((*n)->stream->folded()) return 0;
    // The caller may free its bytes on return (the frames that read them are filled).
    const std::size_t copied = (*n)->stream->own_refs();
    IWCM_ASSERT((*n)->stream->tcp().ref_bytes() == 0 && (*n)->stream->frames_lent() == 0);
    return copied;
}

Result<void> Core::flush(Instant now, ConnHandle conn) {
    impl_->enter_command();
    impl_->now_ = now;
    auto n = impl_->stream_node(conn);
    if (!n) return fail(n.error());
    NodeRef ref(*n);
    IWCM_ASSERT(ref->stream != nullptr);  // stream_node finds only nodes with one
    impl_->flush_stream(now, ref);
    impl_->drain_loopback(now);
    return {};
}

Result<std::span<const std::byte>> Core::peek(ConnHandle conn) const {
    impl_->enter_command();
    auto n = impl_->stream_node(conn);
    if (!n) return fail(n.error());
    const cm::NodeStream& ns = *(*n)->stream;
    if (ns.folded()) {
        IWCM_ASSERT(ns.readable_bytes() == 0);  // a stream folds only with nothing unread
        return std::span<const std::byte>{};
    }
    return ns.tcp().readable();
}

Result<void> Core::consume(Instant now, ConnHandle conn, std::size_t n) {
    impl_->enter_command();
    return impl_->consume_bytes(now, conn, n);
}

Result<std::size_t> Core::recv(Instant now, ConnHandle conn, std::span<std::byte> out) {
    impl_->enter_command();
    std::size_t copied = 0;
    while (copied < out.size()) {
        auto view = peek(conn);
        if (!view) return fail(view.error());
        if (view->empty()) break;
        std::size_t n = std::min(view->size(), out.size() - copied);
        IWCM_ASSERT(n > 0);  // else the loop would not end
        std::memcpy(out.data() + copied, view->data(), n);
        if (auto c = impl_->consume_bytes(now, conn, n); !c) return fail(c.error());
        copied += n;
    }
    return copied;
}

Result<void> Core::set_stream_sink(ConnHandle conn, StreamSink* sink) {
    impl_->enter_command();
    auto n = impl_->stream_node(conn);
    if (!n) return fail(n.error());
    (*n)->stream->sink = sink;
    return {};
}

Result<StreamInfo> Core::stream_info(ConnHandle conn) const {
    impl_->enter_command();
    auto n = impl_->stream_node(conn);
    if (!n) return fail(n.error());
    const cm::NodeStream& ns = *(*n)->stream;
    // A folded stream answers as the stream it makes again (on the stack, on a copy of the
    // node's Tcb: nothing changes).
    tcp::Tcb tcb = (*n)->tcb;
    std::optional<tcp::Stream> unfolded;
    if (ns.folded()) unfolded.emplace(ns.config(), ns.folded_state(), tcb);
    const tcp::Stream& s = unfolded ? *unfolded : ns.tcp();
    StreamInfo i;
    i.send_space = (*n)->state == CmState::kOffloaded ? s.send_space() : 0;
    i.queued = s.bytes_queued();
    i.readable = s.readable_bytes();
    i.mss = s.mss();
    i.snd_una = s.snd_una().value();
    i.snd_nxt = s.snd_nxt().value();
    i.rcv_nxt = s.rcv_nxt().value();
    i.snd_wnd = s.snd_wnd();
    i.rcv_wnd = s.rcv_wnd();
    i.cwnd = s.cwnd();
    i.ssthresh = s.ssthresh();
    i.srtt = s.srtt().value_or(Duration{});
    i.rto = s.rto();
    i.retransmitted_segments = s.retransmitted_segments();
    i.fin_received = s.fin_received();
    i.copied_in = ns.copied_in;
    i.copied_to_frames = ns.copied_to_frames();
    i.copied_received = ns.copied_received;
    i.sunk = ns.sunk;
    i.written = s.written_bytes();
    i.acked = s.acked_bytes();
    i.by_reference = s.ref_bytes();
    IWCM_ASSERT(i.acked <= i.written && i.by_reference <= i.queued);
    return i;
}

}  // namespace iwcm
