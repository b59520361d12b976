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
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cm/core_impl.hpp"
#include "cm/isn.hpp"
#include "cm/syncookie.hpp"

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

constexpr CmStateSet kFinSeenStates = CmState::kCloseWait | CmState::kLastAck |
                                      CmState::kClosing | CmState::kTimeWait;

}  // namespace

// ---------------------------------------------------------------- arrival

void Core::Impl::handle_frame(Instant now, wire::Bytes frame) {
    ++stats.frames_in;
    trace_frame(TraceRecord::Kind::kFrameIn, now, nullptr, frame);
    auto parsed = wire::parse_tcp_frame(frame);
    if (!parsed) {
        drop(now, classify(parsed.error()), nullptr, frame);
        return;
    }
    const wire::FrameRepr& fr = parsed->repr;
    std::uint16_t vlan = fr.eth.vlan ? fr.eth.vlan->id : kNoVlan;
    // Ours: our MAC, and one of our addresses on the VLAN it lives on.
    if (fr.eth.dst != cfg.mac || address_vlan(fr.ip.dst) != vlan) {
        drop(now, DropReason::kNotForUs, nullptr, frame);
        return;
    }
    Segment seg{&fr, &fr.tcp, parsed->payload, vlan};
    cm::ConnKey key{{fr.ip.dst, fr.tcp.dst_port}, {fr.ip.src, fr.tcp.src_port}, vlan};
    if (Node* n = table.find(key)) {
        NodeRef ref(n);
        on_segment(now, ref, seg);
        return;
    }
    const wire::TcpRepr& t = fr.tcp;
    if (t.has(tf::kSyn) && !t.has(tf::kAck) && !t.has(tf::kRst)) {
        on_listen_syn(now, seg);
        return;
    }
    if (t.has(tf::kAck) && !t.has(tf::kSyn) && !t.has(tf::kRst) && on_listen_ack(now, seg)) return;
    drop(now, t.has(tf::kRst) ? DropReason::kRstIgnored : DropReason::kNoListener, nullptr, frame);
    reply_no_connection(seg);
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
    return out;
}

// RFC 9293 section 3.10.7.1, CLOSED: an RST is dropped; a segment with ACK
// gets <SEQ=SEG.ACK><CTL=RST>; any other gets
// <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
void Core::Impl::reply_no_connection(const Segment& seg) {
    const wire::TcpRepr& t = *seg.tcp;
    if (t.has(tf::kRst)) return;
    wire::FrameRepr out = reply_frame(seg);
    if (t.has(tf::kAck)) {
        out.tcp.seq = t.ack;
        out.tcp.flags = tf::kRst;
    } else {
        out.tcp.ack = t.seq + seg.seq_len();
        out.tcp.flags = tf::kRst | tf::kAck;
    }
    ++stats.resets_sent;
    emit_frame(out, {}, is_local_addr(out.ip.dst));
}

void Core::Impl::on_listen_syn(Instant now, const Segment& seg) {
    const wire::FrameRepr& fr = *seg.frame;
    Endpoint local{fr.ip.dst, fr.tcp.dst_port};
    cm::Listener* l = match_listener(local, seg.vlan);
    if (l == nullptr) {
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
    // Backlog: connections not yet accepted, half-open ones included. Over
    // it, the SYN is answered with a SYN cookie and no node (RFC 4987, as
    // Linux does when its SYN queue is full). When connections past the
    // handshake alone fill the backlog, or cookies are off, the SYN is
    // dropped without an answer, as the driver does (the peer's SYN
    // retransmission retries later).
    if (l->pending >= l->backlog) {
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
    node->snd_mss = effective_mss(local.addr, fr.tcp.options.mss);
    if (fr.tcp.options.window_scale) {
        node->wscale_ok = true;
        node->snd_wscale = std::min<std::uint8_t>(*fr.tcp.options.window_scale, 14);
        node->rcv_wscale = cfg.rcv_wscale;
    }
    node->snd_wnd = fr.tcp.window;
    node->iss = wire::SeqNumber(cm::initial_sequence(cfg.isn_secret, node->local, node->remote, now));
    node->snd_una = node->iss;
    node->snd_nxt = node->iss + 1;
    table.insert(node);
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
    if (mpa_refs.size() < pool.capacity()) mpa_refs.resize(pool.capacity());
    node->local = {fr.ip.dst, fr.tcp.dst_port};
    node->remote = {fr.ip.src, fr.tcp.src_port};
    node->remote_mac = fr.eth.src;
    node->vlan = seg.vlan;
    // irdma_make_cm_node: the larger of the listener's TOS and the SYN's (for
    // a node made from a cookie, the returning ACK's).
    node->tos = std::max(l.tos, fr.ip.tos);
    node->listener = {static_cast<std::uint32_t>(&l - listeners.data()), l.generation};
    node->counted_in_backlog = true;
    node->half_open = true;
    ++l.pending;
    ++l.half_open;
    node->loopback = is_local_addr(node->remote.addr);
    node->irs = irs;
    node->rcv_nxt = irs + 1;
    return node;
}

void Core::Impl::end_half_open(Node& node) {
    if (!node.half_open) return;
    node.half_open = false;
    if (cm::Listener* l = find_listener(node.listener)) {
        IWCM_ASSERT(l->half_open > 0);
        --l->half_open;
    }
}

const std::array<std::uint8_t, 16>& Core::Impl::cookie_key_of(std::uint64_t period) {
    std::size_t i = period & 1;
    if (cookie_periods[i] != period) {
        cookie_keys[i] = cm::cookie_key(cfg.syn_cookie_secret, cfg.isn_secret, period);
        cookie_periods[i] = period;
    }
    return cookie_keys[i];
}

// RFC 4987 section 3.6: the SYN-ACK carries the cookie as our ISN; nothing
// is kept. The options are those a node's SYN-ACK would carry.
void Core::Impl::send_cookie_syn_ack(Instant now, cm::Listener& l, const Segment& seg) {
    const wire::TcpRepr& t = *seg.tcp;
    cm::CookieTuple tuple{{seg.frame->ip.dst, t.dst_port},
                          {seg.frame->ip.src, t.src_port},
                          seg.vlan,
                          t.seq.value()};
    cm::CookieData data{effective_mss(seg.frame->ip.dst, t.options.mss), t.options.window_scale};
    std::uint64_t period = cm::cookie_period(now, cfg.syn_cookie_period);
    wire::FrameRepr out = reply_frame(seg);
    out.tcp.seq = wire::SeqNumber(cm::make_cookie(cookie_key_of(period), period, tuple, data));
    out.tcp.ack = t.seq + 1;
    out.tcp.flags = tf::kSyn | tf::kAck;
    out.tcp.window = static_cast<std::uint16_t>(std::min<std::uint32_t>(cfg.rcv_wnd, 65535));
    out.tcp.options.mss = our_mss(out.ip.src);
    if (t.options.window_scale) out.tcp.options.window_scale = cfg.rcv_wscale;
    l.last_cookie = now;
    ++stats.syn_cookies_sent;
    emit_frame(out, {}, is_local_addr(out.ip.dst));
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
    cm::Listener* l = match_listener(local, seg.vlan);
    if (l == nullptr || !l->last_cookie) return false;
    if (now - *l->last_cookie >= 2 * cfg.syn_cookie_period) return false;
    std::uint32_t cookie = t.ack.value() - 1;
    cm::CookieTuple tuple{local, {seg.frame->ip.src, t.src_port}, seg.vlan, t.seq.value() - 1};
    std::uint64_t period = cm::cookie_period(now, cfg.syn_cookie_period);
    // Valid in the period that made it and the next: the parity says which.
    bool current = cm::cookie_parity(cookie) == static_cast<bool>(period & 1);
    std::optional<cm::CookieData> data;
    if (current || period > 0) {
        std::uint64_t made = current ? period : period - 1;
        data = cm::check_cookie(cookie_key_of(made), made, tuple, cookie);
    }
    if (!data) {
        ++stats.syn_cookies_failed;
        drop(now, DropReason::kBadCookie, nullptr, {});
        reply_no_connection(seg);
        return true;
    }
    if (l->queued() >= l->backlog || table.size() >= cfg.max_connections) {
        // No room even past the handshake: as Linux, drop; the peer
        // retransmits what it sent (its MPA request) and the cookie again.
        bool backlog = l->queued() >= l->backlog;
        if (backlog) ++stats.backlog_drops;
        drop(now, backlog ? DropReason::kBacklogFull : DropReason::kTooManyConnections, nullptr, {});
        return true;
    }
    ++stats.syn_cookies_accepted;
    NodeRef node = make_passive_node(*l, seg, wire::SeqNumber(t.seq.value() - 1));
    node->snd_mss = data->mss;
    if (data->wscale) {
        node->wscale_ok = true;
        node->snd_wscale = *data->wscale;
        node->rcv_wscale = cfg.rcv_wscale;
    }
    node->iss = wire::SeqNumber(cookie);
    node->snd_una = node->iss;
    node->snd_nxt = node->iss + 1;
    table.insert(node);
    set_state(*node, CmState::kSynRcvd);
    on_syn_rcvd(now, node, seg);
    return true;
}

void Core::Impl::on_segment(Instant now, const NodeRef& node, const Segment& seg) {
    switch (node->state) {
        case CmState::kSynSent: on_syn_sent(now, node, seg); return;
        case CmState::kSynRcvd: on_syn_rcvd(now, node, seg); return;
        case CmState::kEstablished:
        case CmState::kOneSideEstablished:
        case CmState::kAccepting:
        case CmState::kMpaReqSent:
        case CmState::kMpaReqRcvd:
        case CmState::kMpaRejRcvd:
        case CmState::kOffloaded:
        case CmState::kFinWait1:
        case CmState::kFinWait2:
        case CmState::kCloseWait:
        case CmState::kTimeWait:
        case CmState::kLastAck:
        case CmState::kClosing: on_synchronized(now, node, seg); return;
        case CmState::kUnknown:
        case CmState::kInited:
        case CmState::kListening:
        case CmState::kListenerDestroyed:
        case CmState::kClosed: break;
    }
    // Nodes in these states are never in the table.
    IWCM_ASSERT(false);
}

// RFC 9293 section 3.10.7.3, SYN-SENT.
void Core::Impl::on_syn_sent(Instant now, const NodeRef& node, const Segment& seg) {
    const wire::TcpRepr& t = *seg.tcp;
    if (t.has(tf::kAck) && t.ack != node->snd_nxt) {
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
        // Connection refused: nobody listens on the peer's port.
        ++stats.resets_received;
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
        node->rcv_nxt = t.seq + 1;
        send_segment(*node, tf::kRst | tf::kAck, node->snd_nxt, {});
        ++stats.resets_sent;
        end_for_app(node, EventType::kConnectError, -ECONNABORTED);
        close_node(node);
        return;
    }
    node->irs = t.seq;
    node->rcv_nxt = t.seq + 1;
    node->snd_una = t.ack;
    node->snd_mss = effective_mss(node->local.addr, t.options.mss);
    if (t.options.window_scale) {
        node->wscale_ok = true;
        node->snd_wscale = std::min<std::uint8_t>(*t.options.window_scale, 14);
        node->rcv_wscale = cfg.rcv_wscale;
    }
    node->snd_wnd = t.window;  // never scaled in a SYN (RFC 7323 section 2.2)
    timers.ack_send(node);
    set_state(*node, CmState::kEstablished);
    start_mpa(now, node);
    // The MPA request (which carries the ACK of the SYN-ACK) may not go out
    // at once in every configuration; make sure the handshake completes.
    if (node->state == CmState::kEstablished) send_ack(*node);
}

// RFC 9293 section 3.10.7.4 for SYN-RECEIVED, with RFC 5961's RST and SYN rules.
void Core::Impl::on_syn_rcvd(Instant now, const NodeRef& node, const Segment& seg) {
    const wire::TcpRepr& t = *seg.tcp;
    if (t.has(tf::kSyn) && !t.has(tf::kAck) && !t.has(tf::kRst) && t.seq == node->irs) {
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
        on_synchronized(now, node, seg);
        return;
    }
    if (!t.has(tf::kAck)) {
        drop(now, DropReason::kUnexpected, node.get(), {});
        return;
    }
    if (t.ack != node->snd_nxt) {
        drop(now, DropReason::kBadAck, node.get(), {});
        reply_no_connection(seg);
        return;
    }
    node->snd_una = t.ack;
    node->snd_wnd = std::uint32_t{t.window} << node->snd_wscale;
    timers.ack_send(node);
    end_half_open(*node);
    set_state(*node, CmState::kEstablished);
    start_mpa(now, node);
    // The same segment may carry the MPA request, or a FIN.
    on_synchronized(now, node, seg);
}

// RFC 9293 section 3.10.7.4, first check: is the segment in the window?
bool Core::Impl::acceptable(const Node& node, const Segment& seg) const {
    std::uint32_t wnd = rx_space(node);
    std::uint32_t len = seg.seq_len();
    wire::SeqNumber seq = seg.tcp->seq;
    auto in_window = [&](wire::SeqNumber s) { return node.rcv_nxt <= s && s < node.rcv_nxt + wnd; };
    if (len == 0) return wnd == 0 ? seq == node.rcv_nxt : in_window(seq);
    if (wnd == 0) return false;
    return in_window(seq) || in_window(seq + (len - 1));
}

void Core::Impl::on_synchronized(Instant now, const NodeRef& node, const Segment& seg) {
    if (node->stream) {
        on_stream_segment(now, node, seg);
        return;
    }
    const wire::TcpRepr& t = *seg.tcp;
    if (!acceptable(*node, seg)) {
        // Old duplicates (a retransmitted FIN in TIME_WAIT among them) get an ACK.
        if (!t.has(tf::kRst)) send_ack(*node);
        drop(now, DropReason::kOutOfWindow, node.get(), {});
        return;
    }
    if (t.has(tf::kRst)) {
        on_rst(now, node, seg);
        return;
    }
    if (t.has(tf::kSyn)) {
        // RFC 5961 section 4.2: a SYN in a synchronised state gets a
        // challenge ACK, never a reset.
        send_challenge_ack(now, *node);
        drop(now, DropReason::kUnexpected, node.get(), {});
        return;
    }
    if (!t.has(tf::kAck)) {
        drop(now, DropReason::kUnexpected, node.get(), {});
        return;
    }
    on_ack(now, node, seg);
    if (node->state == CmState::kClosed) return;
    std::uint64_t sent_before = stats.frames_out;
    bool need_ack = false;
    wire::Bytes payload = seg.payload;
    if (!payload.empty()) {
        std::int32_t ahead = t.seq - node->rcv_nxt;
        if (ahead > 0) {
            // Out of order: no reassembly queue for a handshake; the peer resends.
            send_ack(*node);
            drop(now, DropReason::kOutOfWindow, node.get(), {});
            return;
        }
        auto skip = static_cast<std::size_t>(-ahead);
        if (skip >= payload.size()) {
            need_ack = true;  // all of it seen before
        } else if (node->state == CmState::kOffloaded) {
            drop(now, DropReason::kDataAfterHandoff, node.get(), {});
            return;
        } else if (!kFinSeenStates.contains(node->state)) {
            // What lies beyond the window is not taken (RFC 9293 3.10.7.4:
            // trim to the window); the peer sends it again once it opens.
            wire::Bytes fresh = payload.subspan(skip);
            fresh = fresh.first(std::min<std::size_t>(fresh.size(), rx_space(*node)));
            auto& rx = node->buffers().rx;
            rx.insert(rx.end(), fresh.begin(), fresh.end());
            node->rcv_nxt += static_cast<std::uint32_t>(fresh.size());
            need_ack = true;
            on_stream(now, node);
            if (node->state == CmState::kClosed) return;
        }
    }
    if (t.has(tf::kFin) && t.seq + static_cast<std::uint32_t>(payload.size()) == node->rcv_nxt &&
        !kFinSeenStates.contains(node->state)) {
        on_fin(now, node);
        return;
    }
    if (!need_ack || stats.frames_out != sent_before || node->state == CmState::kClosed) return;
    if (node->state == CmState::kMpaReqRcvd) {
        // The request waits for the application, which usually accepts
        // before it next takes frames: hold the ACK until poll_transmit(),
        // so that the reply carries it (one frame fewer per setup).
        defer_ack(*node);
        return;
    }
    send_ack(*node);
}

// RFC 5961 section 3.2: only an RST at exactly rcv_nxt resets; another in
// the window draws a challenge ACK.
void Core::Impl::on_rst(Instant now, const NodeRef& node, const Segment& seg) {
    if (seg.tcp->seq != node->rcv_nxt) {
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
    if (node->mpa_done) {
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
    timers.cancel_all(node);
    cancel_mpa_timer(*node);
    node->v1_retry = true;
    node->mpa_rev = 1;
    node->peer_to_peer = false;
    node->rtr_offered = 0;
    node->fin_sent = node->fin_acked = node->wscale_ok = false;
    node->snd_wscale = node->rcv_wscale = 0;
    auto& b = node->buffers();
    b.tx.clear();
    b.rx.clear();
    node->iss = wire::SeqNumber(cm::initial_sequence(cfg.isn_secret, node->local, node->remote, now) + 1);
    node->snd_una = node->iss;
    node->snd_nxt = node->iss + 1;
    set_state(*node, CmState::kSynSent);
    send_syn(*node);
    arm_send(now, node);
}

void Core::Impl::on_ack(Instant now, const NodeRef& node, const Segment& seg) {
    const wire::TcpRepr& t = *seg.tcp;
    if (t.ack > node->snd_nxt) {
        // RFC 9293: an ACK for something not yet sent gets an ACK and is dropped.
        send_ack(*node);
        drop(now, DropReason::kBadAck, node.get(), {});
        return;
    }
    if (t.ack > node->snd_una) {
        auto acked = static_cast<std::size_t>(t.ack - node->snd_una);
        if (node->bufs) {
            auto& tx = node->bufs->tx;
            tx.erase(tx.begin(), tx.begin() + static_cast<std::ptrdiff_t>(std::min(acked, tx.size())));
        }
        node->snd_una = t.ack;
        if (node->fin_sent && t.ack == node->snd_nxt) node->fin_acked = true;
        if (node->snd_una == node->snd_nxt) timers.ack_send(node);
        node->release_buffers_if_idle();
    }
    node->snd_wnd = std::uint32_t{t.window} << node->snd_wscale;
    if (!node->fin_acked) return;
    if (node->state == CmState::kFinWait1) {
        set_state(*node, CmState::kFinWait2);
        // RFC 9293 leaves FIN-WAIT-2 open-ended, but a peer that vanished
        // (address down, its reset lost or out of sequence) would hold the
        // node forever. Like Linux's tcp_fin_timeout, wait for the peer's FIN
        // as long as its retransmissions could last, then reset and close
        // (on_mpa_timeout; the MPA timer is free once closing).
        timer::RetransPolicy peer{cfg.retransmit.max_retrans, cfg.retransmit.initial, cfg.retransmit.cap};
        arm_mpa_timer(now, node, peer.total());
    } else if (node->state == CmState::kClosing) {
        enter_time_wait(now, node);
    } else if (node->state == CmState::kLastAck) {
        close_node(node);
    }
}

// A FIN in order: the peer is done sending.
void Core::Impl::on_fin(Instant now, const NodeRef& node) {
    node->rcv_nxt += 1;
    if (node->state == CmState::kFinWait1) {
        // Our FIN is not acknowledged yet: both sides close at once.
        set_state(*node, CmState::kClosing);
        send_ack(*node);
        return;
    }
    if (node->state == CmState::kFinWait2) {
        send_ack(*node);
        enter_time_wait(now, node);
        return;
    }
    // The peer closes first. For an RDMA connection that ends it: like the
    // driver (irdma_handle_fin_pkt), answer with our own FIN at once
    // (CLOSE_WAIT -> LAST_ACK) and tell the application.
    set_state(*node, CmState::kCloseWait);
    cancel_mpa_timer(*node);
    if (node->mpa_done) {
        end_for_app(node, EventType::kDisconnected, 0);
    } else if (node->state != CmState::kMpaRejRcvd) {
        end_for_app(node, node->initiator ? EventType::kRejected : EventType::kConnectError, -ECONNRESET);
    }
    release_backlog(*node);
    start_close(now, node);
}

void Core::Impl::start_close(Instant now, const NodeRef& node) {
    cancel_mpa_timer(*node);
    release_backlog(*node);
    set_state(*node, node->state == CmState::kCloseWait ? CmState::kLastAck : CmState::kFinWait1);
    if (node->stream) {
        // Our FIN follows the bytes still queued, at the stream's sequence.
        node->stream->tcp.close();
        flush_stream(now, node);
        return;
    }
    send_data(now, node, {}, true);
}

void Core::Impl::enter_time_wait(Instant now, const NodeRef& node) {
    set_state(*node, CmState::kTimeWait);
    timers.ack_send(node);
    cancel_mpa_timer(*node);
    cancel_stream_timer(*node);
    end_for_app(node, EventType::kDisconnected, 0);
    node->release_buffers();
    if (node->stream) {
        // A stream's TIME_WAIT outlasts the peer's FIN retransmissions.
        arm_mpa_timer(now, node, node->stream->tcp.config().time_wait);
        return;
    }
    // TIME_WAIT is held by the close timer (irdma: a CLOSE entry, due HZ / 10 later).
    (void)timers.schedule_close(node, now);
}

// ---------------------------------------------------------------- timers

void Core::Impl::on_timer_action(Instant now, cm::Timers::Action&& a) {
    NodeRef node = std::move(a.node);
    if (node->state == CmState::kClosed) return;
    switch (a.kind) {
        case cm::Timers::Kind::kRetransmit:
            ++stats.retransmissions;
            resend(*node);
            return;
        case cm::Timers::Kind::kExhausted: on_retrans_exhausted(now, node); return;
        case cm::Timers::Kind::kSendComplete:
        case cm::Timers::Kind::kClose: close_node(node); return;
    }
}

// irdma_retrans_expired: half-open passive nodes go quietly; a node closing
// on its own sends a reset; any other resets and reports the failure.
void Core::Impl::on_retrans_exhausted(Instant now, const NodeRef& node) {
    (void)now;
    switch (timer::on_retrans_exhausted(node->state)) {
        case timer::ExhaustedAction::kDropQuietly: break;
        case timer::ExhaustedAction::kSendReset: send_reset(*node); break;
        case timer::ExhaustedAction::kSendResetAndAbort: send_reset(*node); break;
    }
    EventType type = node->mpa_done ? EventType::kDisconnected : EventType::kUnreachable;
    end_for_app(node, type, -ETIMEDOUT);
    close_node(node);
}

// ---------------------------------------------------------------- output

std::uint16_t Core::Impl::our_mss(const IpAddr& addr) const {
    return static_cast<std::uint16_t>(cfg.mtu - (addr.is_v4() ? 40 : 60));
}

std::uint16_t Core::Impl::effective_mss(const IpAddr& local, std::optional<std::uint16_t> peer) const {
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
            std::uint64_t h = cm::siphash24(cfg.isn_secret, std::span<const std::uint8_t>(buf, sizeof buf));
            challenge_budget = low + static_cast<std::uint32_t>(h % (limit - low + 1));
        }
        if (challenge_budget == 0) {
            ++stats.challenge_acks_limited;
            return;
        }
        --challenge_budget;
    }
    ++stats.challenge_acks_sent;
    send_ack(node);
}

void Core::Impl::defer_ack(Node& node) {
    if (node.ack_deferred) return;
    node.ack_deferred = true;
    deferred_acks.push_back(node.handle());
}

void Core::Impl::flush_deferred_acks() {
    for (ConnHandle h : deferred_acks) {
        Node* n = pool.find(h.index, h.generation);
        if (n == nullptr || !n->ack_deferred) continue;
        n->ack_deferred = false;
        if (n->state != CmState::kClosed) send_ack(*n);
    }
    deferred_acks.clear();
}

// The frame of a segment of this connection; the ACK field is rcv_nxt and
// the window what we can take (before hand-off: what is free of rcv_wnd).
wire::FrameRepr Core::Impl::segment_frame(const Node& node, std::uint8_t flags, wire::SeqNumber seq) const {
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
    if (flags & tf::kAck) fr.tcp.ack = node.rcv_nxt;
    std::uint32_t wnd = (node.stream ? node.stream->tcp.rcv_wnd() : rx_space(node)) >> node.rcv_wscale;
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

void Core::Impl::send_segment(Node& node, std::uint8_t flags, wire::SeqNumber seq, wire::Bytes payload) {
    if (flags & tf::kAck) node.ack_deferred = false;  // this segment carries it
    emit_frame(segment_frame(node, flags, seq), payload, node.loopback);
}

void Core::Impl::send_ack(Node& node) {
    if (node.stream) {
        // The stream builds its ACKs (its window, its rcv_nxt).
        node.stream->tcp.force_ack();
        flush_stream(now_, NodeRef(&node));
        return;
    }
    send_segment(node, tf::kAck, node.snd_nxt, {});
}

void Core::Impl::send_syn(Node& node) {
    std::uint8_t flags = node.initiator ? tf::kSyn : (tf::kSyn | tf::kAck);
    send_segment(node, flags, node.iss, {});
}

void Core::Impl::send_reset(Node& node) {
    if (node.state == CmState::kSynSent) return;  // nothing synchronised to reset
    ++stats.resets_sent;
    send_segment(node, tf::kRst | tf::kAck, node.snd_nxt, {});
}

// Sends new bytes (and a FIN) after what is in flight, keeping them for
// retransmission until acknowledged.
void Core::Impl::send_data(Instant now, const NodeRef& node, wire::Bytes data, bool fin) {
    IWCM_ASSERT(!node->fin_sent);
    auto& tx = node->buffers().tx;
    std::size_t first = tx.size();
    tx.insert(tx.end(), data.begin(), data.end());
    wire::SeqNumber seq = node->snd_nxt;
    std::size_t mss = node->snd_mss;
    for (std::size_t off = 0; off < data.size() || (off == 0 && data.empty());) {
        std::size_t n = std::min(mss, data.size() - off);
        bool last = off + n == data.size();
        std::uint8_t flags = tf::kAck | (n ? tf::kPsh : 0) | (last && fin ? tf::kFin : 0);
        if (n || fin) send_segment(*node, flags, seq + static_cast<std::uint32_t>(off), data.subspan(off, n));
        off += n;
        if (last) break;
    }
    (void)first;
    node->snd_nxt += static_cast<std::uint32_t>(data.size());
    if (fin) {
        node->snd_nxt += 1;
        node->fin_sent = true;
    }
    arm_send(now, node);
}

// A retransmission: SYN or SYN-ACK, else everything from snd_una on.
void Core::Impl::resend(Node& node) {
    if (node.state == CmState::kSynSent || node.state == CmState::kSynRcvd) {
        send_syn(node);
        return;
    }
    wire::Bytes tx = node.bufs ? wire::Bytes(node.bufs->tx) : wire::Bytes{};
    bool fin = node.fin_sent && !node.fin_acked;
    std::size_t mss = node.snd_mss;
    std::size_t off = 0;
    do {
        std::size_t n = std::min(mss, tx.size() - off);
        bool last = off + n == tx.size();
        std::uint8_t flags = tf::kAck | (n ? tf::kPsh : 0) | (last && fin ? tf::kFin : 0);
        send_segment(node, flags, node.snd_una + static_cast<std::uint32_t>(off), tx.subspan(off, n));
        off += n;
    } while (off < tx.size());
}

void Core::Impl::arm_send(Instant now, const NodeRef& node) {
    if (!timers.has_send(node)) (void)timers.schedule_send(node, now, cm::Resend{}, true, false);
}

void Core::Impl::emit_frame(const wire::FrameRepr& repr, wire::Bytes payload, bool loopback) {
    std::size_t len = wire::tcp_frame_len(repr, payload.size());
    ++stats.frames_out;
    if (loopback) {
        // Loopback: both ends are ours; the frame never reaches the wire.
        std::vector<std::byte> f(len);
        wire::emit_tcp_frame(repr, payload, f);
        trace_frame(TraceRecord::Kind::kFrameOut, now_, nullptr, f);
        loop_queue.push_back(std::move(f));
        return;
    }
    std::size_t off = tx_arena.size();
    wire::emit_tcp_frame(repr, payload, tx_arena.append(len));
    tx_frames.emplace_back(static_cast<std::uint32_t>(off), static_cast<std::uint32_t>(len));
    trace_frame(TraceRecord::Kind::kFrameOut, now_, nullptr, std::span<const std::byte>(tx_arena.data() + off, len));
}

}  // namespace iwcm
