// Segment arrival and output: the TCP half of the connection manager.
//
// Read first: RFC 9293 section 3.10.7 (SEGMENT ARRIVES), RFC 5961 sections 3
// and 4 (RST and SYN in synchronised states: exact-sequence RST only,
// challenge ACK otherwise), RFC 7323 section 2 (window scale), and irdma
// cm.c (irdma_process_pkt and the irdma_handle_*_pkt family) for what the
// driver does per state. The CM carries only the MPA exchange over TCP, so
// the stream rules are simple: in-order bytes are taken, anything ahead of
// rcv_nxt is dropped and answered with a duplicate ACK (the peer resends),
// and everything we send stays in the node's tx buffer until acknowledged.
// What tcp::Stream does after the hand-off holds here too where a peer could
// tell (src/tcp/rules.hpp holds the shared rules): our bytes go only within
// the peer's window, a shut window is probed on the stream's persist timing
// (RFC 9293 3.8.6.1), and an ACK must lie in [SND.UNA - MAX.SND.WND, SND.NXT]
// (RFC 9293 3.10.7.4, RFC 5961 5.2).
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cm/core_impl.hpp"
#include "cm/isn.hpp"
#include "cm/syncookie.hpp"
#include "tcp/rules.hpp"
#include "wire/pieces.hpp"

namespace iwcm {

using cm::Node;
using cm::NodeRef;
using cm::Segment;
namespace tf = wire::tcp_flags;

namespace {

// The drop reason of a frame that failed to parse, from the error's kind alone.
DropReason classify(const wire::ParseError& e) {
    using wire::ParseErrorKind;
    switch (e.kind) {
        case ParseErrorKind::kBadChecksum: return DropReason::kBadChecksum;
        case ParseErrorKind::kNotIp:
        case ParseErrorKind::kNotTcp: return DropReason::kNotTcp;
        case ParseErrorKind::kFragment: return DropReason::kFragment;
        case ParseErrorKind::kTruncated:
        case ParseErrorKind::kBadLength:
        case ParseErrorKind::kBadOption:
        case ParseErrorKind::kBadValue: return DropReason::kMalformed;
    }
    return DropReason::kMalformed;
}

}  // namespace

// ---------------------------------------------------------------- arrival

// One frame: whole, or its headers `frame` followed by `pieces` (a frame handed over in
// parts). One function for both, so that each handler below is called from one place (the
// link-time inliner keeps them inline: two copies of this dispatch cost 260 instructions a
// setup).
void Core::Impl::handle_frame(Instant now, wire::Bytes frame, std::uint64_t flow, bool hashed,
                              std::span<const wire::Bytes> pieces) {
    ++stats.frames_in;
    // With the driver's flow hash the connection's slot is known before the parse (the VLAN
    // read from the tag, if any): its load starts now and overlaps the parse. Not prefetched,
    // the slot's load is a quarter of this function's time in the setup benchmark, waited for
    // in find(). (The hash is computed again below, from the parse: kept from here across the
    // parse it costs as many instructions as it saves, 4.5 more a frame with checksums
    // computed.)
    if (hashed && frame.size() >= wire::kEthernetVlanHeaderLen)
        table.prefetch(cm::hash_flow(table.secret(), flow, wire::peek_vlan_id(frame, kNoVlan)));
    if (pieces.empty() || !parse_parts(now, frame, pieces)) {
        trace_frame(TraceRecord::Kind::kFrameIn, now, nullptr, frame);
        if (auto error = wire::parse_tcp_frame_into(frame, rx_ctx.frame, rx_checksums())) {
            drop(now, classify(*error), nullptr, frame);
            return;
        }
    }
    const cm::RxContext::FrameScope scope(rx_ctx);
    const wire::FrameRepr& fr = rx_ctx.frame.repr;
    std::uint16_t vlan = fr.eth.vlan ? fr.eth.vlan->id : kNoVlan;
    // Ours: our MAC, and one of our addresses on the VLAN it lives on.
    if (fr.eth.dst != cfg.mac || local_vlan(fr.ip.dst) != vlan) {
        if (rx_ctx.sum_pending() && !finish_rx_sum(now, nullptr, frame)) return;
        drop(now, DropReason::kNotForUs, nullptr, frame);
        return;
    }
    const cm::ConnKeyView key{fr.ip.dst, fr.tcp.dst_port, fr.ip.src, fr.tcp.src_port, vlan};
    // The driver's flow hash, when it hands one, spares the table computing it. An IPv4 slot
    // comes from the flow hash, so IPv4 has one either way.
    const bool v4 = !key.local_addr.is_v6();
    std::uint64_t f = 0;
    std::uint32_t h;
    if (v4) {
        f = hashed ? flow
                   : flow_hash_v4(key.local_addr, key.local_port, key.remote_addr, key.remote_port,
                                  cfg.flow_key);
        h = cm::hash_flow(table.secret(), f, vlan);
    } else {
        h = cm::hash_key(table.secret(), cm::ConnKey{{key.local_addr, key.local_port},
                                                     {key.remote_addr, key.remote_port},
                                                     vlan});
    }
    Segment seg{&fr,  &fr.tcp, rx_ctx.frame.payload,
                vlan, h,       hashed ? std::optional<std::uint64_t>(flow) : std::nullopt};
    if (Node* n = table.find(key, h)) {
        if (rx_ctx.sum_pending() && !finish_rx_sum(now, n, frame)) [[unlikely]]
            return;
        NodeRef ref(n);
        // Pieces go on to a stream's text; every other handler reads one span.
        if (!rx_ctx.pieces().empty() &&
            (!n->stream || fr.tcp.has(tf::kRst) || fr.tcp.has(tf::kSyn))) [[unlikely]]
            seg.payload = rx_ctx.join_pieces();
        on_segment(now, ref, seg);
        // A timer cancelled by this segment left the node's wheel entry (node_timers.hpp):
        // it goes now if nothing is armed any more.
        timers.settle(*n);
        return;
    }
    if (rx_ctx.sum_pending() && !finish_rx_sum(now, nullptr, frame)) [[unlikely]]
        return;
    if (!rx_ctx.pieces().empty()) [[unlikely]]
        seg.payload = rx_ctx.join_pieces();
    // No node: a SYN's node, an answer, take the hash (set only now: carried by every
    // segment it cost a store and a register on every frame).
    if (v4) seg.flow = f;
    const wire::TcpRepr& t = fr.tcp;
    if (t.has(tf::kSyn) && !t.has(tf::kAck) && !t.has(tf::kRst)) {
        on_listen_syn(now, seg);
        return;
    }
    if (t.has(tf::kAck) && !t.has(tf::kSyn) && !t.has(tf::kRst) && on_listen_ack(now, seg)) return;
    drop(now, t.has(tf::kRst) ? DropReason::kRstIgnored : DropReason::kNoListener, nullptr, frame);
    reply_no_connection(seg);
}

// The common IPv4 frame in parts parsed in place into the receive context's frame, its
// payload read where it lies (the context's pieces when in several): true. Otherwise `frame`
// becomes the parts joined, to be parsed whole: false. A trace hook sees the frame whole
// (joined for it alone). Out of line, as RxContext::join_pieces: handle_frame stays small
// enough for the parse to be inlined.
[[gnu::noinline]] bool Core::Impl::parse_parts(Instant now, wire::Bytes& frame,
                                               std::span<const wire::Bytes> pieces) {
    const std::size_t len = wire::total_size(pieces);
    if (len == 0) return false;
    // A long payload's checksum is finished where it is placed (finish_rx_sum): a frame that
    // fails it is traced in and dropped, as a whole frame that fails its parse is.
    const bool defer = rx_checksums() == wire::Checksums::kFull && len >= cm::kSummedPlaceMin;
    if (!wire::parse_tcp_frame_parts(frame, pieces, rx_ctx.frame, rx_checksums(),
                                     defer ? rx_ctx.sum_slot() : nullptr)) {
        frame = rx_ctx.join_frame(frame, pieces, false);
        return false;
    }
    if (defer) rx_ctx.defer_sum();
    if (pieces.size() > 1) rx_ctx.set_pieces(pieces);  // one is the frame's payload
    if (trace) {
        frame = rx_ctx.join_frame(frame, pieces, true);
        trace_frame(TraceRecord::Kind::kFrameIn, now, nullptr, frame);
    }
    return true;
}

[[gnu::noinline]] bool Core::Impl::finish_rx_sum(Instant now, cm::Node* node, wire::Bytes frame) {
    IWCM_ASSERT(rx_ctx.sum_pending());  // parse_parts deferred this frame's sum
    const std::uint64_t partial = rx_ctx.take_sum();
    const wire::Bytes one = rx_ctx.frame.payload;
    const std::span<const wire::Bytes> text = wire::pieces_or(rx_ctx.pieces(), one);
    const wire::TcpRepr& t = rx_ctx.frame.repr.tcp;
    std::optional<std::uint64_t> sum;
    cm::NodeStream* placed = nullptr;
    // A stream takes the text at on_stream_segment when nothing else reads it first: no
    // sink, and not a RST or SYN (those are joined for their handlers).
    // (A folded stream takes it only once made again, in on_stream_segment.)
    if (node != nullptr && node->stream && !node->stream->folded() &&
        node->stream->sink == nullptr && !t.has(tf::kRst) && !t.has(tf::kSyn)) {
        placed = node->stream.get();
        sum = placed->place_summed(t.seq, text, wire::total_size(text), partial);
    }
    if (!sum) sum = wire::detail::sum_native_pieces(text, partial);
    if (wire::detail::fold16(*sum) == 0xFFFFu) return true;
    if (placed != nullptr) placed->forget_summed();
    drop(now, DropReason::kBadChecksum, nullptr, frame);
    return false;
}

// The frame answering a segment for no node: addresses and ports swapped.
wire::FrameRepr Core::Impl::reply_frame(const Segment& seg) const {
    wire::FrameRepr out;
    out.eth.dst = seg.frame->eth.src;
    out.eth.src = cfg.mac;
    out.eth.vlan = seg.frame->eth.vlan;
    out.ip.src = seg.frame->ip.dst;
    out.ip.dst = seg.frame->ip.src;
    out.ip.ttl = cfg.ttl;
    out.ip.tos = cfg.tos;
    out.tcp.src_port = seg.tcp->dst_port;
    out.tcp.dst_port = seg.tcp->src_port;
    IWCM_ASSERT(out.ip.src.family() == out.ip.dst.family());
    return out;
}

// RFC 9293 section 3.10.7.1, CLOSED: an RST is dropped; a segment with ACK
// gets <SEQ=SEG.ACK><CTL=RST>; any other gets
// <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
void Core::Impl::reply_no_connection(const Segment& seg) {
    const wire::TcpRepr& t = *seg.tcp;
    if (t.has(tf::kRst)) return;
    IWCM_ASSERT(seg.frame != nullptr && &seg.frame->tcp == seg.tcp);
    wire::FrameRepr out = reply_frame(seg);
    if (t.has(tf::kAck)) {
        out.tcp.seq = t.ack;
        out.tcp.flags = tf::kRst;
    } else {
        out.tcp.ack = t.seq + seg.seq_len();
        out.tcp.flags = tf::kRst | tf::kAck;
    }
    ++stats.resets_sent;
    emit_frame(out, {}, is_local_addr(out.ip.dst), flow_of(seg));
}

void Core::Impl::on_listen_syn(Instant now, const Segment& seg) {
    const wire::FrameRepr& fr = *seg.frame;
    Endpoint local{fr.ip.dst, fr.tcp.dst_port};
    cm::Listener* l = listeners.match(local, seg.vlan);
    if (l == nullptr) {
        if (listeners.in_grace(now, local, seg.vlan)) {
            drop(now, DropReason::kListenerGrace, nullptr, {});
            return;
        }
        drop(now, DropReason::kNoListener, nullptr, {});
        reply_no_connection(seg);
        return;
    }
    ++stats.syns_received;
    // An application that does not poll its events gets no new connections
    // until it does: the SYN goes unanswered (the peer retransmits it).
    if (events_full()) {
        drop(now, DropReason::kEventQueueFull, nullptr, {});
        return;
    }
    // Backlog (docs/design.md "Backlog"): connections the application has not answered,
    // half-open ones included; silent ones (past the handshake, no MPA request) are held
    // apart (enter_silence), so that no number of them keeps a SYN from being answered.
    // Over the backlog the SYN is answered with a SYN cookie and no node (RFC 4987, as
    // Linux does when its SYN queue is full). When requests the application has not
    // answered alone fill the backlog (Linux: a full accept queue), or cookies are off, the
    // SYN is dropped without an answer, as the driver does (the peer's SYN retransmission
    // retries later).
    if (l->half_open + l->queued() >= l->backlog) {
        if (cfg.syn_cookies && l->queued() < l->backlog) {
            send_cookie_syn_ack(now, *l, seg);
            return;
        }
        ++stats.backlog_drops;
        drop(now, DropReason::kBacklogFull, nullptr, {});
        return;
    }
    if (table.size() >= cfg.max_connections) {
        drop(now, DropReason::kTooManyConnections, nullptr, {});
        return;
    }
    NodeRef node = make_passive_node(*l, seg, fr.tcp.seq);
    node->tcb.mss = effective_mss(local.addr, fr.tcp.options.mss);
    if (fr.tcp.options.window_scale) {
        node->wscale_ok = true;
        node->tcb.snd_wscale = std::min<std::uint8_t>(*fr.tcp.options.window_scale, 14);
        node->tcb.rcv_wscale = cfg.rcv_wscale;
    }
    take_window(*node, fr.tcp.window);
    node->start_send_at(
        wire::SeqNumber(cm::initial_sequence(cfg.isn_secret, node->local, node->remote, now)));
    // The node is counted as half-open, and the backlog still holds it (the test above).
    IWCM_ASSERT(node->half_open && l->half_open + l->queued() <= l->backlog);
    table.insert(node, seg.slot_hash);
    set_state(*node, CmState::kSynRcvd);
    send_syn(*node);
    arm_send(now, node);
}

// A passive node for listener l, counted in its backlog as half-open.
NodeRef Core::Impl::make_passive_node(cm::Listener& l, const Segment& seg, wire::SeqNumber irs) {
    const wire::FrameRepr& fr = *seg.frame;
    NodeRef node = pool.create();
    ++stats.nodes_created;
    if (app_refs.size() < pool.capacity()) app_refs.resize(pool.capacity());
    node->local = {fr.ip.dst, fr.tcp.dst_port};
    node->remote = {fr.ip.src, fr.tcp.src_port};
    node->flow = flow_of(seg);
    node->remote_mac = fr.eth.src;
    node->vlan = seg.vlan;
    // irdma_make_cm_node: the larger of the listener's TOS and the SYN's (for
    // a node made from a cookie, the returning ACK's).
    node->tos = std::max(l.tos, fr.ip.tos);
    node->listener = listeners.admit(l);
    node->counted_in_backlog = true;
    node->half_open = true;
    node->loopback = is_local_addr(node->remote.addr);
    node->tcb.rcv_nxt = irs + 1;
    return node;
}

void Core::Impl::end_half_open(Node& node) {
    if (!node.half_open) return;
    node.half_open = false;
    listeners.end_half_open(node.listener);
}

// The handshake is done and the MPA request is not in: the node is silent. Silent nodes are
// counted apart from the backlog and held to the listener's silent_limit; at the limit the
// one silent longest is reset to make room (counted in silent_shed). A client of ours sends
// its request with the handshake's ACK and is never silent; a kernel or RNIC client sends
// it within a round trip; a peer that holds connections open without speaking loses the
// oldest first, so it cannot keep others out however many it opens.
void Core::Impl::enter_silence(const NodeRef& node) {
    IWCM_ASSERT(node->state == CmState::kMpaReqWait && node->counted_in_backlog);
    IWCM_ASSERT(!node->silent && !node->half_open);
    cm::Listener* l = listeners.find(node->listener);
    IWCM_ASSERT(l != nullptr);  // destroy_listen ends every node it counts
    if (l->silent >= l->silent_limit) shed_oldest_silent(*l);
    listeners.enter_silence(*l, node->handle(), [this](ConnHandle h) { return still_silent(h); });
    node->silent = true;
}

void Core::Impl::end_silence_of(Node& node) {
    IWCM_ASSERT(node.silent);
    node.silent = false;
    listeners.end_silence(node.listener);
}

// The one silent longest (listeners.hpp, "Silent order"): reset and closed as its request
// timer would, which ends its silence.
void Core::Impl::shed_oldest_silent(cm::Listener& l) {
    const ConnHandle h =
        listeners.take_oldest_silent(l, [this](ConnHandle c) { return still_silent(c); });
    NodeRef victim(pool.find(h.index, h.generation));
    IWCM_ASSERT(victim && victim->silent && victim->state == CmState::kMpaReqWait);
    // Nobody above knows it (MPAREQ_WAIT).
    ++stats.silent_shed;
    send_reset(*victim);
    close_node(victim);
}

// RFC 4987 section 3.6: the SYN-ACK carries the cookie as our ISN; nothing
// is kept. The options are those a node's SYN-ACK would carry.
void Core::Impl::send_cookie_syn_ack(Instant now, cm::Listener& l, const Segment& seg) {
    IWCM_ASSERT(cfg.syn_cookies && l.queued() < l.backlog);  // on_listen_syn's test
    const wire::TcpRepr& t = *seg.tcp;
    cm::CookieTuple tuple{
        {seg.frame->ip.dst, t.dst_port}, {seg.frame->ip.src, t.src_port}, seg.vlan, t.seq.value()};
    cm::CookieData data{effective_mss(seg.frame->ip.dst, t.options.mss), t.options.window_scale};
    std::uint64_t period = cm::cookie_period(now, cfg.syn_cookie_period);
    wire::FrameRepr out = reply_frame(seg);
    out.tcp.seq =
        wire::SeqNumber(cm::make_cookie(listeners.cookie_key_of(period), period, tuple, data));
    out.tcp.ack = t.seq + 1;
    out.tcp.flags = tf::kSyn | tf::kAck;
    out.tcp.window = static_cast<std::uint16_t>(std::min<std::uint32_t>(cfg.rcv_wnd, 65535));
    out.tcp.options.mss = our_mss(out.ip.src);
    if (t.options.window_scale) out.tcp.options.window_scale = cfg.rcv_wscale;
    l.last_cookie = now;
    ++stats.syn_cookies_sent;
    emit_frame(out, {}, is_local_addr(out.ip.dst), flow_of(seg));
}

// An ACK (no SYN, no RST) for no node. If its listener sent cookies lately,
// ACK - 1 must be a cookie for this tuple and SEQ - 1: then the node is made
// in SYN_RCVD and the segment handled as that state would (to ESTABLISHED,
// the MPA request timer armed, any MPA bytes it carries taken). A wrong or
// expired cookie gets the RST an ACK to a listener gets (RFC 9293
// 3.10.7.2; Linux does the same), counted as kBadCookie. Returns false when
// no cookie can be in play (the caller answers as for no connection).
bool Core::Impl::on_listen_ack(Instant now, const Segment& seg) {
    const wire::TcpRepr& t = *seg.tcp;
    Endpoint local{seg.frame->ip.dst, t.dst_port};
    cm::Listener* l = listeners.match(local, seg.vlan);
    if (l == nullptr || !l->cookie_may_return(now, cfg.syn_cookie_period)) return false;
    std::uint32_t cookie = t.ack.value() - 1;
    cm::CookieTuple tuple{local, {seg.frame->ip.src, t.src_port}, seg.vlan, t.seq.value() - 1};
    std::uint64_t period = cm::cookie_period(now, cfg.syn_cookie_period);
    // Valid in the period that made it and the next: the parity says which.
    std::optional<cm::CookieData> data;
    if (const std::optional<std::uint64_t> made = cm::Listeners::cookie_made_in(period, cookie))
        data = cm::check_cookie(listeners.cookie_key_of(*made), *made, tuple, cookie);
    if (!data) {
        ++stats.syn_cookies_failed;
        drop(now, DropReason::kBadCookie, nullptr, {});
        reply_no_connection(seg);
        return true;
    }
    if (l->queued() >= l->backlog || table.size() >= cfg.max_connections) {
        // Requests the application has not answered fill the backlog: as Linux with a full
        // accept queue, drop; the peer retransmits what it sent (its MPA request) and the
        // cookie again. (Silent connections never stand in its way: enter_silence.)
        bool backlog = l->queued() >= l->backlog;
        if (backlog) ++stats.backlog_drops;
        drop(now, backlog ? DropReason::kBacklogFull : DropReason::kTooManyConnections, nullptr,
             {});
        return true;
    }
    ++stats.syn_cookies_accepted;
    NodeRef node = make_passive_node(*l, seg, wire::SeqNumber(t.seq.value() - 1));
    node->tcb.mss = data->mss;
    if (data->wscale) {
        node->wscale_ok = true;
        node->tcb.snd_wscale = *data->wscale;
        node->tcb.rcv_wscale = cfg.rcv_wscale;
    }
    node->start_send_at(wire::SeqNumber(cookie));
    // A cookie's node is half-open: it leaves the requests the application answers as they
    // were, below the backlog (the test above).
    IWCM_ASSERT(node->half_open && l->queued() < l->backlog);
    table.insert(node, seg.slot_hash);
    set_state(*node, CmState::kSynRcvd);
    on_syn_rcvd(now, node, seg);
    return true;
}

// One switch on the node's state per arriving segment; each arm names its handler and says
// why. The checks every synchronized state shares (acceptability, RFC 5961's RST and SYN
// rules, ACK processing, in-order text, the FIN) are helpers the handlers call.
void Core::Impl::on_segment(Instant now, const NodeRef& node, const Segment& seg) {
    const CheckScope check(*this, *node);
    if (node->stream) {
        // After a kStream hand-off the core's byte stream owns TCP in every state a node
        // with one can be in (OFFLOADED and the close states): bytes.cpp.
        on_stream_segment(now, node, seg);
        return;
    }
    switch (node->state) {
        // RFC 9293 3.10.7.3: our SYN is out; only a SYN-ACK acknowledging it goes on.
        case CmState::kSynSent: on_syn_sent(now, node, seg); return;
        // RFC 9293 3.10.7.4: our SYN-ACK is out; the ACK of it (perhaps with the request) goes on.
        case CmState::kSynRcvd: on_syn_rcvd(now, node, seg); return;
        // RFC 5044 7.1: the responder reads the initiator's MPA request as its bytes come.
        case CmState::kMpaReqWait:
        // RFC 5044 7.1: the initiator reads the responder's reply as its bytes come.
        case CmState::kMpaReqSent:
        // The application holds the request: later bytes wait in rx for its answer.
        case CmState::kMpaReqRcvd:
        // RFC 6581 6: the peer-to-peer responder reads the initiator's RTR as its bytes come.
        case CmState::kOneSideEstablished:
        // Connected, not handed off: bytes wait for the data path; a TERMINATE ends it.
        case CmState::kEstablished: on_text_segment(now, node, seg); return;
        // After a kExternal hand-off the data path owns the payload; FIN, RST, ACK are ours.
        case CmState::kOffloaded: on_external_segment(now, node, seg); return;
        // RFC 9293 3.10.7.4: our FIN is out, the peer may still send text (a half-close,
        // taken as above, read by nobody) and then its FIN.
        case CmState::kFinWait1:
        case CmState::kFinWait2: on_text_segment(now, node, seg); return;
        // RFC 9293 3.10.7.4: the peer's FIN is in: its text is ignored, its ACKs still count.
        case CmState::kCloseWait:
        case CmState::kClosing:
        case CmState::kLastAck:
        case CmState::kTimeWait: on_fin_seen_segment(now, node, seg); return;
        // No node waits in these: never in the table, or (MPAREJ_RCVD) passed through
        // within one handler, since start_close follows the reject at once.
        case CmState::kUnknown:
        case CmState::kInited:
        case CmState::kListening:
        case CmState::kAccepting:
        case CmState::kMpaRejRcvd:
        case CmState::kListenerDestroyed:
        case CmState::kClosed: break;
    }
    IWCM_ASSERT(false);
}

// RFC 9293 section 3.10.7.3, SYN-SENT.
void Core::Impl::on_syn_sent(Instant now, const NodeRef& node, const Segment& seg) {
    IWCM_ASSERT(node->state == CmState::kSynSent && node->initiator && seg.tcp);
    const wire::TcpRepr& t = *seg.tcp;
    if (t.has(tf::kAck) && t.ack != node->tcb.snd_max) {
        // An ACK of something we never sent: answer with a reset unless it is one.
        drop(now, DropReason::kBadAck, node.get(), {});
        reply_no_connection(seg);
        return;
    }
    if (t.has(tf::kRst)) {
        if (!t.has(tf::kAck)) {
            drop(now, DropReason::kRstIgnored, node.get(), {});
            return;
        }
        // Connection refused: nobody listens on the peer's port (yet, perhaps).
        ++stats.resets_received;
        if (retry_refused(now, node)) return;
        end_for_app(node, EventType::kRejected, -ECONNREFUSED);
        close_node(node);
        return;
    }
    if (!t.has(tf::kSyn)) {
        drop(now, DropReason::kUnexpected, node.get(), {});
        return;
    }
    if (!t.has(tf::kAck)) {
        // Simultaneous open. RFC 9293 would move to SYN-RECEIVED, but MPA
        // needs one initiator and one responder, and the driver resets too:
        // we answer with RST+ACK (acceptable to a peer in SYN-SENT) and
        // report a connect error.
        node->tcb.rcv_nxt = t.seq + 1;
        send_segment(*node, tf::kRst | tf::kAck, node->tcb.snd_max, {});
        ++stats.resets_sent;
        end_for_app(node, EventType::kConnectError, -ECONNABORTED);
        close_node(node);
        return;
    }
    node->tcb.rcv_nxt = t.seq + 1;
    node->tcb.snd_una = t.ack;
    node->tcb.mss = effective_mss(node->local.addr, t.options.mss);
    if (t.options.window_scale) {
        node->wscale_ok = true;
        node->tcb.snd_wscale = std::min<std::uint8_t>(*t.options.window_scale, 14);
        node->tcb.rcv_wscale = cfg.rcv_wscale;
    }
    take_window(*node, t.window);  // never scaled in a SYN (RFC 7323 section 2.2)
    // The SYN is acknowledged and the MPA request, sent next, must be: the send entry starts
    // over.
    timers.restart_send(node, now);
    // The MPA request carries the ACK of the SYN-ACK (MPAREQ_SENT). Behind a zero window it
    // waits (push_data), and the ACK goes alone.
    const std::uint64_t sent_before = stats.frames_out;
    start_mpa(now, node);
    if (stats.frames_out == sent_before) send_ack(*node);
}

// RFC 9293 section 3.10.7.4 for SYN-RECEIVED, with RFC 5961's RST and SYN rules.
void Core::Impl::on_syn_rcvd(Instant now, const NodeRef& node, const Segment& seg) {
    IWCM_ASSERT(node->state == CmState::kSynRcvd && seg.tcp);
    const wire::TcpRepr& t = *seg.tcp;
    // (Until the handshake ends rcv_nxt is IRS + 1.)
    if (t.has(tf::kSyn) && !t.has(tf::kAck) && !t.has(tf::kRst) && t.seq + 1 == node->tcb.rcv_nxt) {
        // The peer did not hear our SYN-ACK: its SYN again gets the SYN-ACK again.
        ++stats.retransmissions;
        send_syn(*node);
        return;
    }
    if (!acceptable(*node, seg)) {
        if (!t.has(tf::kRst)) send_ack(*node);
        drop(now, DropReason::kOutOfWindow, node.get(), {});
        return;
    }
    if (t.has(tf::kRst) || t.has(tf::kSyn)) {
        (void)synchronized_checks(now, node, seg);  // RFC 5961: exact RST, challenge ACK
        return;
    }
    if (!t.has(tf::kAck)) {
        drop(now, DropReason::kUnexpected, node.get(), {});
        return;
    }
    if (t.ack != node->tcb.snd_max) {
        drop(now, DropReason::kBadAck, node.get(), {});
        reply_no_connection(seg);
        return;
    }
    node->tcb.snd_una = t.ack;
    take_window(*node, std::uint32_t{t.window} << node->tcb.snd_wscale);
    end_half_open(*node);
    start_mpa(now, node);  // MPAREQ_WAIT
    timers.ack_send(node);
    // The segment may carry the MPA request (our initiator sends it with this ACK) or a FIN.
    // The request timer is armed only if the request is still awaited after it, rather than
    // armed and at once replaced by the accept timer.
    on_text_segment(now, node, seg);
    if (node->state == CmState::kMpaReqWait) {
        arm_phase_timer(now, node, cm::NodeTimer::kMpaRequest, cfg.mpa.request_timeout);
        enter_silence(node);
    }
}

// RFC 9293 section 3.10.7.4, first check: is the segment in the window we offer?
bool Core::Impl::acceptable(const Node& node, const Segment& seg) const {
    return tcp::segment_acceptable(node.tcb.rcv_nxt, rx_space(node), seg.tcp->seq, seg.seq_len());
}

// RFC 9293 section 3.10.7.4, first to fifth checks, with RFC 5961: the segment must be in the
// window; an RST resets only at exactly rcv_nxt (on_rst); a SYN draws a challenge ACK, never
// a reset; a segment without ACK is dropped. True when the segment goes on to its ACK.
inline bool Core::Impl::synchronized_checks(Instant now, const NodeRef& node, const Segment& seg) {
    const wire::TcpRepr& t = *seg.tcp;
    const bool in_window = acceptable(*node, seg);
    if (!in_window || (t.flags & (tf::kRst | tf::kSyn))) [[unlikely]] {
        on_rst_or_syn(now, node, seg, in_window);
        return false;
    }
    if (!t.has(tf::kAck)) {
        drop(now, DropReason::kUnexpected, node.get(), {});
        return false;
    }
    return true;
}

// RFC 9293 section 3.10.7.4, seventh check: the segment's text not seen before (empty when
// all of it was). Text ahead of rcv_nxt has no reassembly queue before hand-off: it is
// answered with a duplicate ACK and dropped (nullopt), and the peer resends.
inline std::optional<wire::Bytes> Core::Impl::new_text(Instant now, const NodeRef& node,
                                                       const Segment& seg) {
    if (seg.payload.empty()) return wire::Bytes{};
    std::int32_t ahead = seg.tcp->seq - node->tcb.rcv_nxt;
    if (ahead > 0) {
        send_ack(*node);
        drop(now, DropReason::kOutOfWindow, node.get(), {});
        return std::nullopt;
    }
    auto skip = static_cast<std::size_t>(-ahead);
    return skip >= seg.payload.size() ? wire::Bytes{} : seg.payload.subspan(skip);
}

// The FIN of this segment is next in sequence (all the text before it taken).
inline bool Core::Impl::fin_in_order(const Node& node, const Segment& seg) const {
    return seg.tcp->has(tf::kFin) &&
           seg.tcp->seq + static_cast<std::uint32_t>(seg.payload.size()) == node.tcb.rcv_nxt;
}

// The shared checks, the ACK, then the text not seen before (new_text); nullopt when the
// segment is done with.
[[gnu::always_inline]] inline std::optional<wire::Bytes> Core::Impl::checked_text(
    Instant now, const NodeRef& node, const Segment& seg) {
    if (!synchronized_checks(now, node, seg) || !on_ack(now, node, seg)) return std::nullopt;
    return new_text(now, node, seg);
}

// Text (new or repeated) is acknowledged, unless a frame sent since `sent_before` carried the
// ACK or one is held for poll_transmit() (on_mpa_request holds it for the reply).
inline void Core::Impl::ack_text(Node& node, const Segment& seg, std::uint64_t sent_before) {
    if (seg.payload.empty() || stats.frames_out != sent_before || node.ack_deferred) return;
    send_ack(node);
}

// Before hand-off (the MPA phase, ESTABLISHED, and FIN_WAIT1/2 without a stream): new text in
// order goes to rx and to the state's reader (on_stream), as far as the window we advertised
// reaches (RFC 9293: trim to the window; the peer resends the rest); then the FIN in order.
void Core::Impl::on_text_segment(Instant now, const NodeRef& node, const Segment& seg) {
    IWCM_ASSERT(!node->stream && !rx_ctx.reads_in_place(*node));
    auto text = checked_text(now, node, seg);
    if (!text) return;
    const std::uint64_t sent_before = stats.frames_out;
    if (!text->empty()) {
        wire::Bytes fresh = text->first(std::min<std::size_t>(text->size(), rx_space(*node)));
        node->tcb.rcv_nxt += static_cast<std::uint32_t>(fresh.size());
        auto& rx = node->buffers().rx;
        if (rx.empty() && !rx_ctx.any_in_place()) {
            // Nothing earlier waits: the handlers read the segment in place (stream_rx), and
            // only the bytes they leave are copied into rx.
            wire::Bytes left;
            {
                const cm::RxContext::InPlaceScope in_place(rx_ctx, *node, fresh);
                on_stream(now, node);
                left = in_place.left();
            }
            if (node->state == CmState::kClosed) return;
            if (!left.empty()) {
                auto& kept = node->buffers().rx;
                kept.insert(kept.end(), left.begin(), left.end());
            }
        } else {
            rx.insert(rx.end(), fresh.begin(), fresh.end());
            on_stream(now, node);
            if (node->state == CmState::kClosed) return;
        }
    }
    if (fin_in_order(*node, seg)) {
        on_fin(now, node);
        return;
    }
    ack_text(*node, seg, sent_before);
}

// OFFLOADED after a kExternal hand-off: the data path owns the payload (new text is dropped
// and counted, as the driver's CM never sees it); FIN, RST and ACKs are still the CM's, as
// the hardware reports them to irdma.
void Core::Impl::on_external_segment(Instant now, const NodeRef& node, const Segment& seg) {
    IWCM_ASSERT(!node->stream);  // a kExternal hand-off keeps no stream
    auto text = checked_text(now, node, seg);
    if (!text) return;
    const std::uint64_t sent_before = stats.frames_out;
    if (!text->empty()) {
        drop(now, DropReason::kDataAfterHandoff, node.get(), {});
        return;
    }
    if (fin_in_order(*node, seg)) {
        on_fin(now, node);
        return;
    }
    ack_text(*node, seg, sent_before);
}

// CLOSE_WAIT, CLOSING, LAST_ACK, TIME_WAIT: the peer's FIN is in. RFC 9293 3.10.7.4, seventh
// and eighth checks: text and a FIN after it "should not occur" and are ignored; only the
// ACK moves us (of our FIN, on_fin_acked), and a repeat of old text gets an ACK.
void Core::Impl::on_fin_seen_segment(Instant now, const NodeRef& node, const Segment& seg) {
    auto text = checked_text(now, node, seg);
    if (text && text->empty()) ack_text(*node, seg, stats.frames_out);
}

// RFC 5961 sections 3 and 4, one path before and after the hand-off: an RST outside the
// window is dropped, one inside it goes to on_rst; a SYN in a synchronised state draws a
// challenge ACK whatever its sequence number (section 4.2), never a reset. Before the
// hand-off, any other segment outside the window comes here too (the stream answers those
// itself): an old duplicate, answered with an ACK. Out of line and cold: the common
// segment's path stays small enough for the link-time inliner to inline it whole.
[[gnu::noinline, gnu::cold]] void Core::Impl::on_rst_or_syn(Instant now, const NodeRef& node,
                                                            const Segment& seg, bool in_window) {
    const wire::TcpRepr& t = *seg.tcp;
    if (!t.has(tf::kRst) && !t.has(tf::kSyn)) {
        IWCM_ASSERT(!in_window && !node->stream);
        // Old duplicates (a retransmitted FIN in TIME_WAIT among them) get an ACK.
        send_ack(*node);
        drop(now, DropReason::kOutOfWindow, node.get(), {});
        return;
    }
    if (t.has(tf::kRst)) {
        if (in_window) {
            on_rst(now, node, seg);
        } else {
            drop(now, DropReason::kOutOfWindow, node.get(), {});
        }
        return;
    }
    send_challenge_ack(now, *node);
    drop(now, DropReason::kUnexpected, node.get(), {});
}

// RFC 5961 section 3.2: only an RST at exactly rcv_nxt resets; another in
// the window draws a challenge ACK.
void Core::Impl::on_rst(Instant now, const NodeRef& node, const Segment& seg) {
    IWCM_ASSERT(seg.tcp && seg.tcp->has(tf::kRst));
    if (seg.tcp->seq != node->tcb.rcv_nxt) {
        send_challenge_ack(now, *node);
        drop(now, DropReason::kRstIgnored, node.get(), {});
        return;
    }
    ++stats.resets_received;
    if (node->state == CmState::kMpaReqSent && node->mpa_rev == 2 && cfg.mpa.fallback_to_v1 &&
        !node->v1_retry) {
        retry_v1(now, node);
        return;
    }
    if (node->state == CmState::kClosing && node->tcb.snd_una + 1 == node->tcb.snd_max) {
        // RFC 9293 section 3.10.7.4 tells the user of no reset in CLOSING. The peer has
        // acknowledged every byte but our FIN and had sent its own: nothing was lost, and the
        // reset is what a peer whose TIME_WAIT ended before our FIN's retransmission came
        // through (backed off under loss) answers. A clean close, as LAST_ACK's.
        end_for_app(node, EventType::kDisconnected, 0);
    } else if (cm::connected(node->state)) {
        end_for_app(node, EventType::kDisconnected, -ECONNRESET);
    } else if (node->initiator) {
        end_for_app(node, EventType::kRejected, -ECONNRESET);
    } else {
        end_for_app(node, EventType::kConnectError, -ECONNRESET);
    }
    close_node(node);
}

// A revision-2 request answered by a reset: once, the same node starts over
// on a fresh TCP connection (same ports, new ISN) at revision 1, as irdma
// (irdma_handle_rst_pkt, "MPA v2 -> v1") and cxgb4 do.
void Core::Impl::retry_v1(Instant now, const NodeRef& node) {
    ++stats.mpa_v1_fallbacks;
    timers.cancel_all(*node);
    node->v1_retry = true;
    node->mpa_rev = 1;
    node->peer_to_peer = false;
    node->rtr_offered = 0;
    node->fin_sent = node->fin_acked = node->wscale_ok = false;
    node->fin_queued = node->probe_out = false;
    node->tcb.snd_wscale = node->tcb.rcv_wscale = 0;
    node->tcb.snd_wnd = node->tcb.max_snd_wnd = 0;
    auto& b = node->buffers();
    b.tx.clear();
    b.rx.clear();
    b.persist_backoff = b.probes_out = 0;
    node->start_send_at(
        wire::SeqNumber(cm::initial_sequence(cfg.isn_secret, node->local, node->remote, now) + 1));
    IWCM_ASSERT(node->mpa_rev == 1 && node->buffers().tx.empty() && node->buffers().rx.empty());
    set_state(*node, CmState::kSynSent);
    send_syn(*node);
    arm_send(now, node);
}

// CoreConfig::connect_refused_grace: a refused SYN goes again after 10 ms, 20 ms, 40 ms ...
// while the waits add up to at most the grace. The SYN is the same (ports, ISN): the peer
// that reset it kept nothing of it. False: no retry left, the connect ends.
bool Core::Impl::retry_refused(Instant now, const NodeRef& node) {
    IWCM_ASSERT(node->state == CmState::kSynSent && node->initiator);
    constexpr Duration kFirst = std::chrono::milliseconds(10);
    constexpr unsigned kMost = 7;  // what Node::refused_retries holds
    const unsigned done = node->refused_retries;
    // The waits so far and this one: 10 ms * (2^(done+1) - 1).
    const Duration waited = kFirst * ((2u << done) - 1);
    if (done >= kMost || waited > cfg.connect_refused_grace) return false;
    node->refused_retries = static_cast<std::uint8_t>(done + 1);
    ++stats.connect_refused_retries;
    (void)timers.ack_send(*node);  // no retransmission of a SYN that was answered
    arm_phase_timer(now, node, cm::NodeTimer::kRefused, kFirst * (1u << done));
    IWCM_ASSERT(!cm::NodeTimers::has_send(*node));
    return true;
}

// Bytes queued that the peer's window has not let out yet (a probe's octet among them).
static std::uint32_t unsent(const Node& node) {
    if (!node.bufs || node.fin_sent) return 0;
    const auto sent = static_cast<std::uint32_t>(node.tcb.snd_max - node.tcb.snd_una);
    const auto queued = static_cast<std::uint32_t>(node.bufs->tx.size());
    return queued > sent ? queued - sent : 0;
}

// RFC 9293 section 3.10.7.4, fifth check: the ACK field, with RFC 5961 section 5.2's bound
// (tcp::check_ack, as the stream judges it). False when the segment is done with (an ACK of
// unsent data, or one older than SND.UNA - MAX.SND.WND, is answered and dropped; our
// acknowledged FIN closed the node). Inline: one caller, on every segment of a connection
// before hand-off.
[[gnu::always_inline]] inline bool Core::Impl::on_ack(Instant now, const NodeRef& node,
                                                      const Segment& seg) {
    const wire::TcpRepr& t = *seg.tcp;
    const wire::SeqNumber snd_max = node->tcb.snd_max + (node->probe_out ? 1U : 0U);
    switch (tcp::check_ack(t.ack, node->tcb.snd_una, snd_max, node->tcb.max_snd_wnd)) {
        case tcp::AckCheck::kAcceptable: break;
        case tcp::AckCheck::kUnsent:
            // RFC 9293: an ACK for something not yet sent gets an ACK and is dropped.
            send_ack(*node);
            drop(now, DropReason::kBadAck, node.get(), {});
            return false;
        case tcp::AckCheck::kTooOld:
            // RFC 5961 5.2: discarded, and an ACK sent back; a challenge ACK, within the
            // budget RST and SYN answers share (section 7).
            send_challenge_ack(now, *node);
            drop(now, DropReason::kBadAck, node.get(), {});
            return false;
    }
    IWCM_ASSERT(!node->stream && t.ack <= snd_max);
    // RFC 9293 3.8.6.1: an acceptable ACK answers the zero-window probes; once we closed,
    // only progress does (as tcp::Stream::process_ack).
    if (node->bufs && (!node->fin_queued || t.ack > node->tcb.snd_una)) node->bufs->probes_out = 0;
    take_window(*node, std::uint32_t{t.window} << node->tcb.snd_wscale);
    if (t.ack > node->tcb.snd_una) {
        auto acked = static_cast<std::size_t>(t.ack - node->tcb.snd_una);
        if (node->bufs) {
            auto& tx = node->bufs->tx;
            tx.erase(tx.begin(),
                     tx.begin() + static_cast<std::ptrdiff_t>(std::min(acked, tx.size())));
        }
        node->tcb.snd_una = t.ack;
        if (node->tcb.snd_max < node->tcb.snd_una) {
            // The peer took a zero-window probe's octet.
            node->tcb.snd_max = node->tcb.snd_una;
            node->probe_out = false;
        }
        IWCM_ASSERT(node->tcb.snd_una <= node->tcb.snd_max);
        if (node->tcb.snd_una == node->tcb.snd_max) timers.ack_send(node);
        node->release_buffers_if_idle();
        if (node->fin_sent && !node->fin_acked && t.ack == node->tcb.snd_max) {
            node->fin_acked = true;
            return on_fin_acked(now, node);
        }
    }
    // Bytes (or a FIN) wait behind the window: this ACK may have opened it, or left it shut
    // with nothing in flight (the persist timer then runs).
    if (node->fin_queued || unsent(*node) > 0) [[unlikely]]
        push_data(now, node);
    return true;
}

// Our FIN is acknowledged (before hand-off: on_ack; a stream's: on_stream_segment). False
// when that closed the node.
bool Core::Impl::on_fin_acked(Instant now, const NodeRef& node) {
    IWCM_ASSERT(node->stream != nullptr || (node->fin_sent && node->fin_acked));
    switch (node->state) {
        // RFC 9293: FIN-WAIT-1 -> FIN-WAIT-2. RFC 9293 leaves FIN-WAIT-2 open-ended, but a
        // peer that vanished would hold the node forever: arm_fin_wait2 bounds the wait.
        case CmState::kFinWait1:
            set_state(*node, CmState::kFinWait2);
            arm_fin_wait2(now, node);
            return true;
        // RFC 9293: CLOSING -> TIME-WAIT.
        case CmState::kClosing: enter_time_wait(now, node); return true;
        // RFC 9293: LAST-ACK -> CLOSED.
        case CmState::kLastAck: close_node(node); return false;
        // Our FIN is sent only from FIN_WAIT1 and LAST_ACK (start_close), so it can be
        // acknowledged only in those and in CLOSING; nothing changes elsewhere.
        case CmState::kUnknown:
        case CmState::kInited:
        case CmState::kListening:
        case CmState::kSynRcvd:
        case CmState::kSynSent:
        case CmState::kOneSideEstablished:
        case CmState::kEstablished:
        case CmState::kAccepting:
        case CmState::kMpaReqSent:
        case CmState::kMpaReqRcvd:
        case CmState::kMpaRejRcvd:
        case CmState::kOffloaded:
        case CmState::kFinWait2:
        case CmState::kCloseWait:
        case CmState::kTimeWait:
        case CmState::kListenerDestroyed:
        case CmState::kClosed:
        case CmState::kMpaReqWait: break;
    }
    return true;
}

// RFC 9293 section 3.10.7.4, eighth check: the peer's FIN, in order after all its text
// (before hand-off from on_text_segment and on_offloaded_segment; a stream's from
// on_stream_segment, whose stream counts and acknowledges the FIN itself).
void Core::Impl::on_fin(Instant now, const NodeRef& node) {
    const bool stream = node->stream != nullptr;
    if (!stream) node->tcb.rcv_nxt += 1;
    switch (node->state) {
        // RFC 9293: FIN-WAIT-1, our FIN not yet acknowledged: both sides close at once.
        case CmState::kFinWait1:
            set_state(*node, CmState::kClosing);
            if (!stream) send_ack(*node);
            return;
        // RFC 9293: FIN-WAIT-2 -> TIME-WAIT.
        case CmState::kFinWait2:
            if (!stream) send_ack(*node);
            enter_time_wait(now, node);
            return;
        // irdma_handle_fin_pkt / irdma_cm_disconn_true: the peer closes a connection: the
        // application hears kDisconnected with status 0, and our FIN follows at once (after
        // any bytes still queued for a stream), CLOSE_WAIT -> LAST_ACK.
        case CmState::kEstablished:
        case CmState::kOffloaded: on_peer_close(now, node, EventType::kDisconnected, 0); return;
        // The peer closes during the MPA exchange: the setup fails (kRejected for the
        // initiator, kConnectError for the responder, -ECONNRESET), and we close as above.
        case CmState::kMpaReqWait:
        case CmState::kMpaReqSent:
        case CmState::kMpaReqRcvd:
        case CmState::kOneSideEstablished:
        case CmState::kMpaRejRcvd:
            on_peer_close(now, node,
                          node->initiator ? EventType::kRejected : EventType::kConnectError,
                          -ECONNRESET);
            return;
        // No FIN is taken in these: before the handshake ends, or after the peer's FIN.
        case CmState::kUnknown:
        case CmState::kInited:
        case CmState::kListening:
        case CmState::kSynRcvd:
        case CmState::kSynSent:
        case CmState::kAccepting:
        case CmState::kCloseWait:
        case CmState::kTimeWait:
        case CmState::kLastAck:
        case CmState::kClosing:
        case CmState::kListenerDestroyed:
        case CmState::kClosed: break;
    }
    IWCM_ASSERT(false);
}

// The peer closed first: CLOSE_WAIT, the application told, our FIN at once (LAST_ACK).
void Core::Impl::on_peer_close(Instant now, const NodeRef& node, EventType type, int status) {
    // The peer's FIN came first (on_fin): nothing of ours has started closing the node.
    IWCM_ASSERT(cm::phase_of(node->state) == cm::Phase::kConnected ||
                cm::phase_of(node->state) == cm::Phase::kSetup);
    set_state(*node, CmState::kCloseWait);
    end_for_app(node, type, status);
    // The handle is stale now, yet the stream still sends (our FIN follows its queued
    // bytes): what it holds by reference is copied in, as the caller can no longer learn
    // when that memory is free again. (A reset drops the stream: nothing is read then.)
    if (node->stream && !node->stream->folded()) node->stream->own_refs();
    start_close(now, node);
}

void Core::Impl::start_close(Instant now, const NodeRef& node) {
    IWCM_ASSERT(node->state != CmState::kClosed && node->state != CmState::kTimeWait);
    cancel_phase_timer(*node);
    release_backlog(*node);
    set_state(*node, node->state == CmState::kCloseWait ? CmState::kLastAck : CmState::kFinWait1);
    if (node->stream) {
        // Our FIN follows the bytes still queued, at the stream's sequence.
        live_stream(*node).close();
        flush_stream(now, node);
        return;
    }
    send_data(now, node, {}, true);
}

void Core::Impl::enter_time_wait(Instant now, const NodeRef& node) {
    set_state(*node, CmState::kTimeWait);
    timers.ack_send(node);
    cancel_phase_timer(*node);
    cancel_stream_timer(*node);
    end_for_app(node, EventType::kDisconnected, 0);
    node->release_buffers();
    IWCM_ASSERT(node->bufs == nullptr && node->state == CmState::kTimeWait);
    if (node->stream) {
        // A stream's TIME_WAIT outlasts the peer's FIN retransmissions.
        timers.arm_close_at(node, now + node->stream->config().time_wait);
        return;
    }
    // TIME_WAIT is held by the close timer (irdma: a CLOSE entry, due HZ / 10 later).
    (void)timers.arm_close(node, now);
}

// ---------------------------------------------------------------- output

std::uint16_t Core::Impl::our_mss(const IpAddr& addr) const {
    return static_cast<std::uint16_t>(cfg.mtu - (addr.is_v4() ? 40 : 60));
}

std::uint16_t Core::Impl::effective_mss(const IpAddr& local,
                                        std::optional<std::uint16_t> peer) const {
    // RFC 9293 section 3.7.1 (MUST-15): without the option, 536 or 1220.
    std::uint16_t floor = std::max(cfg.min_peer_mss, cm::kCookieMss[0]);
    std::uint16_t rfc_default = local.is_v4() ? 536 : 1220;
    std::uint16_t theirs = peer ? std::max(*peer, floor) : rfc_default;
    return std::min(theirs, our_mss(local));
}

// RFC 5961 section 7: at most a budget of challenge ACKs per second. The
// budget of each second is drawn in [limit / 2, limit] by a keyed hash of the
// second, so that an off-path attacker cannot count our challenge ACKs to
// learn a connection's sequence numbers (CVE-2016-5696, Linux's fixed global
// limit); the excess is counted and not sent.
void Core::Impl::send_challenge_ack(Instant now, Node& node) {
    if (std::uint32_t limit = cfg.challenge_ack_limit; limit != 0) {
        std::int64_t second = now.time_since_epoch() / std::chrono::seconds(1);
        if (second != challenge_second) {
            challenge_second = second;
            std::uint8_t buf[9] = {'C'};
            auto bits = static_cast<std::uint64_t>(second);
            for (int i = 0; i < 8; ++i) buf[1 + i] = static_cast<std::uint8_t>(bits >> (8 * i));
            std::uint32_t low = (limit + 1) / 2;
            std::uint64_t h =
                cm::siphash24(cfg.isn_secret, std::span<const std::uint8_t>(buf, sizeof buf));
            challenge_budget = low + static_cast<std::uint32_t>(h % (limit - low + 1));
        }
        if (challenge_budget == 0) {
            ++stats.challenge_acks_limited;
            return;
        }
        --challenge_budget;
        IWCM_ASSERT(challenge_budget < limit);
    }
    ++stats.challenge_acks_sent;
    send_ack(node);
}

void Core::Impl::defer_ack(Node& node) {
    if (node.ack_deferred) return;
    node.ack_deferred = true;
    tx.defer_ack(node.handle());
}

void Core::Impl::flush_deferred_acks() {
    for (ConnHandle h : tx.deferred_acks()) {
        Node* n = pool.find(h.index, h.generation);
        if (n == nullptr || !n->ack_deferred) continue;
        n->ack_deferred = false;
        if (n->state != CmState::kClosed) send_ack(*n);
    }
    tx.clear_acks();
}

// The frame of a segment of this connection; the ACK field is rcv_nxt and
// the window what we can take (before hand-off: what is free of rcv_wnd).
wire::FrameRepr Core::Impl::segment_frame(const Node& node, std::uint8_t flags,
                                          wire::SeqNumber seq) const {
    wire::FrameRepr fr;
    fr.eth.dst = node.remote_mac;
    fr.eth.src = cfg.mac;
    if (node.vlan != kNoVlan) fr.eth.vlan = wire::VlanTag{node.vlan, pcp_of(node), false};
    fr.ip.src = node.local.addr;
    fr.ip.dst = node.remote.addr;
    fr.ip.ttl = cfg.ttl;
    fr.ip.tos = node.tos;
    fr.tcp.src_port = node.local.port;
    fr.tcp.dst_port = node.remote.port;
    fr.tcp.seq = seq;
    fr.tcp.flags = flags;
    if (flags & tf::kAck) fr.tcp.ack = node.tcb.rcv_nxt;
    std::uint32_t wnd =
        (node.stream ? node.stream->rcv_wnd(node.tcb) : rx_space(node)) >> node.tcb.rcv_wscale;
    fr.tcp.window = static_cast<std::uint16_t>(std::min<std::uint32_t>(wnd, 65535));
    if (flags & tf::kSyn) {
        // The window of a SYN is never scaled (RFC 7323 section 2.2).
        fr.tcp.window = static_cast<std::uint16_t>(std::min<std::uint32_t>(cfg.rcv_wnd, 65535));
        fr.tcp.options.mss = our_mss(node.local.addr);
        // The initiator offers window scaling; the responder answers only an offer.
        if (node.initiator || node.wscale_ok) fr.tcp.options.window_scale = cfg.rcv_wscale;
    }
    return fr;
}

// segment_frame()'s values, flat; the window and options follow the same rules. Inline: its one
// caller, send_segment, runs for every frame.
inline wire::SegmentV4 Core::Impl::segment_v4(const Node& node, std::uint8_t flags,
                                              wire::SeqNumber seq) const {
    IWCM_ASSERT(node.local.addr.is_v4() && node.remote.addr.is_v4());
    wire::SegmentV4 s;
    s.dst_mac = &node.remote_mac;
    s.src_mac = &cfg.mac;
    s.checksums = checksums();
    if (node.vlan != kNoVlan) {
        s.tagged = true;
        s.vlan_tci = static_cast<std::uint16_t>((std::uint32_t{pcp_of(node)} << 13) | node.vlan);
    }
    auto be32 = [](const IpAddr& a) {
        const auto& b = a.raw();
        return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
               (std::uint32_t{b[2]} << 8) | b[3];
    };
    s.src_ip = be32(node.local.addr);
    s.dst_ip = be32(node.remote.addr);
    s.ttl = cfg.ttl;
    s.tos = node.tos;
    s.src_port = node.local.port;
    s.dst_port = node.remote.port;
    s.seq = seq.value();
    s.flags = flags;
    if (flags & tf::kAck) s.ack = node.tcb.rcv_nxt.value();
    if (flags & tf::kSyn) {
        // As segment_frame(): an unscaled window, our MSS, and the window scale offered.
        s.window = static_cast<std::uint16_t>(std::min<std::uint32_t>(cfg.rcv_wnd, 65535));
        s.mss = our_mss(node.local.addr);
        if (node.initiator || node.wscale_ok) s.wscale = cfg.rcv_wscale;
        return s;
    }
    std::uint32_t wnd =
        (node.stream ? node.stream->rcv_wnd(node.tcb) : rx_space(node)) >> node.tcb.rcv_wscale;
    s.window = static_cast<std::uint16_t>(std::min<std::uint32_t>(wnd, 65535));
    return s;
}

void Core::Impl::send_segment(Node& node, std::uint8_t flags, wire::SeqNumber seq,
                              wire::Bytes payload) {
    if (flags & tf::kAck) node.ack_deferred = false;  // this segment carries it
    if (!node.local.addr.is_v4()) {
        emit_frame(segment_frame(node, flags, seq), payload, node.loopback, node.flow);
        return;
    }
    const wire::SegmentV4 s = segment_v4(node, flags, seq);
    wire::emit_segment_v4(
        s, payload, frame_room(wire::segment_v4_len(s, payload.size()), node.loopback, node.flow));
    trace_out(node.loopback);
}

void Core::Impl::send_ack(Node& node) {
    if (node.stream) [[unlikely]] {
        send_stream_ack(node);
        return;
    }
    send_segment(node, tf::kAck, node.tcb.snd_max, {});
}

void Core::Impl::send_syn(Node& node) {
    std::uint8_t flags = node.initiator ? tf::kSyn : (tf::kSyn | tf::kAck);
    send_segment(node, flags, node.iss, {});
}

void Core::Impl::send_reset(Node& node) {
    if (node.state == CmState::kSynSent) return;  // nothing synchronised to reset
    IWCM_ASSERT(node.state != CmState::kClosed && node.tcb.snd_una <= node.tcb.snd_max);
    ++stats.resets_sent;
    wire::SeqNumber seq = node.tcb.snd_max;
    if (node.stream) {
        // A zero-window probe's byte may lie past the peer's window, and an RST
        // there is dropped (RFC 9293 3.10.7.4: in the window or not at all): it
        // goes at the window's right edge then, as Linux's tcp_acceptable_seq.
        const wire::SeqNumber edge = node.tcb.snd_una + node.tcb.snd_wnd;
        if (edge < seq) seq = edge;
    }
    send_segment(node, tf::kRst | tf::kAck, seq, {});
}

// Queues new bytes (and a FIN) after ours, keeping them for retransmission until
// acknowledged; push_data sends what the peer's window lets out now.
void Core::Impl::send_data(Instant now, const NodeRef& node, wire::Bytes data, bool fin) {
    IWCM_ASSERT(!node->fin_sent && !node->fin_queued);
    auto& tx = node->buffers().tx;
    tx.insert(tx.end(), data.begin(), data.end());
    node->fin_queued = fin;
    push_data(now, node);
}

// New bytes from snd_nxt, MSS-sized, never past SND.UNA + SND.WND (RFC 9293 3.8.6); the FIN
// takes no room in the window and goes with the last byte (as tcp::Stream::send_len_mss).
// Bytes the window holds back wait in tx, and the persist timer probes for it.
void Core::Impl::push_data(Instant now, const NodeRef& node) {
    const std::vector<std::byte>& tx = node->buffers().tx;
    const wire::SeqNumber edge = node->tcb.snd_una + node->tcb.snd_wnd;
    bool sent = false;
    while (!node->fin_sent) {
        const auto off = static_cast<std::uint32_t>(node->tcb.snd_max - node->tcb.snd_una);
        IWCM_ASSERT(off <= tx.size());
        const auto left = static_cast<std::uint32_t>(tx.size()) - off;
        const std::uint32_t room =
            edge > node->tcb.snd_max ? static_cast<std::uint32_t>(edge - node->tcb.snd_max) : 0;
        const std::uint32_t n = std::min({left, room, std::uint32_t{node->tcb.mss}});
        const bool fin = node->fin_queued && n == left;
        if (n == 0 && !fin) break;
        const std::uint8_t flags = tf::kAck | (n ? tf::kPsh : 0) | (fin ? tf::kFin : 0);
        send_segment(*node, flags, node->tcb.snd_max, wire::Bytes(tx).subspan(off, n));
        node->tcb.snd_max += n;
        if (n > 0) node->probe_out = false;  // its octet went again, within the window
        if (fin) {
            node->tcb.snd_max += 1;
            node->fin_sent = true;
            node->fin_queued = false;
        }
        sent = true;
    }
    if (sent) {
        timers.cancel_persist(*node);
        arm_send(now, node);
    }
    update_persist(now, node);
}

// RFC 9293 3.8.6.1 as tcp::Stream does it (persist_wanted, update_timers, on_persist): with
// the peer's window shut, bytes waiting and none in flight, a one-octet probe goes at the
// RTO (RFC 6298's initial 1 s, there being no RTT sample), then at doubling intervals up to
// the RTO's ceiling; max_retransmits probes without an acceptable ACK give the connection
// up. The timings are those of the stream the connection would be handed to
// (CoreConfig::stream).
static Duration persist_delay(const CoreConfig& cfg, unsigned backoff) {
    return tcp::backed_off(tcp::initial_rto(cfg.stream), backoff, cfg.stream.rto_max);
}

void Core::Impl::update_persist(Instant now, const NodeRef& node) {
    if (node->tcb.snd_wnd == 0 && node->tcb.snd_max == node->tcb.snd_una && unsent(*node) > 0) {
        (void)timers.ack_send(node);  // nothing in flight to retransmit
        if (!cm::NodeTimers::has_persist(*node))
            timers.arm_persist(node, now + persist_delay(cfg, node->bufs->persist_backoff));
        return;
    }
    timers.cancel_persist(*node);
    if (node->bufs) node->bufs->persist_backoff = 0;
}

void Core::Impl::on_persist_timeout(Instant now, const NodeRef& node) {
    IWCM_ASSERT(node->tcb.snd_wnd == 0 && node->tcb.snd_max == node->tcb.snd_una &&
                unsent(*node) > 0);
    cm::NodeBuffers& b = *node->bufs;
    if (b.probes_out < 255) ++b.probes_out;
    if (b.probes_out > cfg.stream.max_retransmits) {
        node->probe_out = false;  // given up: no probe is out any more
        on_retrans_exhausted(now, node);
        return;
    }
    // "The sending TCP must regularly transmit at least one octet of new data": the probe
    // does not move snd_nxt, so the bytes resume there once the window opens.
    send_segment(*node, tf::kAck | tf::kPsh, node->tcb.snd_max, wire::Bytes(b.tx).first(1));
    node->probe_out = true;
    ++stats.window_probes;
    if (b.persist_backoff < 30) ++b.persist_backoff;
    timers.arm_persist(node, now + persist_delay(cfg, b.persist_backoff));
}

// A retransmission: SYN or SYN-ACK, else what was sent from snd_una on (bytes the window
// held back are not sent yet).
void Core::Impl::resend(Node& node) {
    if (node.state == CmState::kSynSent || node.state == CmState::kSynRcvd) {
        send_syn(node);
        return;
    }
    // The node's own retransmission (a stream resends its own); an MSS, or the loop below
    // would never end.
    IWCM_ASSERT(!node.stream && node.tcb.mss > 0 && node.tcb.snd_una <= node.tcb.snd_max);
    bool fin = node.fin_sent && !node.fin_acked;
    wire::Bytes tx = node.bufs ? wire::Bytes(node.bufs->tx) : wire::Bytes{};
    const auto flight =
        static_cast<std::uint32_t>(node.tcb.snd_max - node.tcb.snd_una) - (fin ? 1U : 0U);
    tx = tx.first(std::min<std::size_t>(tx.size(), flight));
    std::size_t mss = node.tcb.mss;
    std::size_t off = 0;
    do {
        std::size_t n = std::min(mss, tx.size() - off);
        bool last = off + n == tx.size();
        std::uint8_t flags = tf::kAck | (n ? tf::kPsh : 0) | (last && fin ? tf::kFin : 0);
        send_segment(node, flags, node.tcb.snd_una + static_cast<std::uint32_t>(off),
                     tx.subspan(off, n));
        off += n;
    } while (off < tx.size());
}

void Core::Impl::arm_send(Instant now, const NodeRef& node) {
    if (!timers.has_send(*node)) (void)timers.arm_send(node, now);
}

void Core::Impl::emit_frame(const wire::FrameRepr& repr, wire::Bytes payload, bool loopback,
                            std::uint64_t flow) {
    std::size_t len = wire::tcp_frame_len(repr, payload.size());
    wire::emit_tcp_frame(repr, payload, frame_room(len, loopback, flow), checksums());
    trace_out(loopback);
}

void Core::Impl::emit_frame_left_out(cm::Node& node, const wire::FrameRepr& repr,
                                     std::span<const wire::Bytes> payload) {
    const std::size_t payload_len = wire::total_size(payload);
    const std::size_t len = wire::tcp_frame_len(repr, payload_len);
    const wire::MutBytes room = frame_room(len, false, node.flow);
    const std::size_t at = wire::emit_tcp_frame_headers(repr, payload, room, checksums());
    node.stream->lend(static_cast<std::uint32_t>(at), payload,
                      static_cast<std::uint32_t>(payload_len), repr.tcp.seq);
    if (trace) {
        // The hook sees the whole frame now, as it would have been queued.
        std::vector<std::byte> whole(room.begin(), room.begin() + static_cast<std::ptrdiff_t>(at));
        for (wire::Bytes piece : payload) whole.insert(whole.end(), piece.begin(), piece.end());
        trace_frame(TraceRecord::Kind::kFrameOut, now_, nullptr, whole);
    }
}

// The same with the payload in pieces (a stream's segment that holds bytes by reference).
void Core::Impl::emit_frame_pieces(const wire::FrameRepr& repr, std::span<const wire::Bytes> pieces,
                                   std::size_t payload_len, bool loopback, std::uint64_t flow) {
    std::size_t len = wire::tcp_frame_len(repr, payload_len);
    wire::emit_tcp_frame_gather(repr, pieces, frame_room(len, loopback, flow), checksums());
    trace_out(loopback);
}

// Room for one outgoing frame. Inline: its callers in this file send every frame.
[[gnu::always_inline]] inline wire::MutBytes Core::Impl::frame_room(std::size_t len, bool loopback,
                                                                    std::uint64_t flow) {
    ++stats.frames_out;
    if (loopback) {
        // Loopback: both ends are ours; the frame never reaches the wire.
        return tx.loop_room(len);
    }
    return tx.room(len, flow);
}

void Core::Impl::trace_out(bool loopback) {
    if (!trace) return;
    IWCM_ASSERT(!loopback || !tx.loop_empty());  // the frame just queued is there
    if (loopback) {
        trace_frame(TraceRecord::Kind::kFrameOut, now_, nullptr, tx.last_loop_frame());
        return;
    }
    trace_frame(TraceRecord::Kind::kFrameOut, now_, nullptr, tx.last_frame());
}

}  // namespace iwcm
