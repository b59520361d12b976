// The MPA exchange over the TCP byte stream: request, reply or reject, the
// revision-2 IRD/ORD word, the RTR, and TERMINATE on a mismatch.
//
// Read first: RFC 5044 section 7.1 (connection setup: request, reply, the M,
// C and R bits, revision), RFC 6581 sections 5-9 (Enhanced MPA: the IRD/ORD
// word, peer-to-peer mode and its RTR types, the TERMINATE error codes), and
// docs/design.md "MPA facts". The driver (irdma_parse_mpa,
// irdma_negotiate_mpa_v2_ird_ord) can neither reassemble a frame split across
// segments nor keep bytes that follow a frame; this code reads MPA frames from
// the node's rx byte stream, so it does both.
#include <algorithm>
#include <cerrno>

#include "cm/core_impl.hpp"
#include "wire/fpdu.hpp"
#include "wire/mpa.hpp"

namespace iwcm {

using cm::Node;
using cm::NodeRef;

namespace {

constexpr std::size_t kMaxMpaFrame = wire::kMpaHeaderLen + wire::kMpaMaxPrivateData;

RtrType from_wire(wire::RtrType t) {
    switch (t) {
        case wire::RtrType::kSend: return RtrType::kSend;
        case wire::RtrType::kWrite: return RtrType::kWrite;
        case wire::RtrType::kRead: return RtrType::kRead;
    }
    return RtrType::kNone;
}

wire::RtrType to_wire(RtrType t) {
    switch (t) {
        case RtrType::kWrite: return wire::RtrType::kWrite;
        case RtrType::kRead: return wire::RtrType::kRead;
        case RtrType::kSend:
        case RtrType::kNone: break;
    }
    return wire::RtrType::kSend;
}

std::uint8_t rtr_bits(const wire::MpaV2Params& p) {
    return static_cast<std::uint8_t>((p.rtr_send ? rtr::kSend : 0) |
                                     (p.rtr_write ? rtr::kWrite : 0) |
                                     (p.rtr_read ? rtr::kRead : 0));
}

// The responder picks exactly one RTR type among those offered (RFC 6581
// section 6); a zero-length SEND is the cheapest for both ends.
RtrType pick_rtr(std::uint8_t offered) {
    if (offered & rtr::kSend) return RtrType::kSend;
    if (offered & rtr::kWrite) return RtrType::kWrite;
    if (offered & rtr::kRead) return RtrType::kRead;
    return RtrType::kNone;
}

// RFC 6581 section 7: a side's ORD may not exceed the peer's IRD, and its
// IRD should cover the peer's ORD. Relaxed (siw, cxgb4): lower our ORD to
// the peer's IRD and raise our IRD toward the peer's ORD within max_ird; the
// initiator then lowers its ORD to what the responder's IRD became, so the
// relaxed exchange always fits. Strict: nothing moves, and a misfit is an
// "insufficient IRD" failure. 0x3FFF on either side means "no value".
bool negotiate_ird_ord(Node& node, const MpaConfig& cfg) {
    constexpr std::uint16_t none = wire::kIrdOrdNone;
    if (node.ird == none || node.ord == none) return true;
    bool ord_fits = node.peer_ird == none || node.ord <= node.peer_ird;
    bool ird_fits = node.peer_ord == none || node.ird >= node.peer_ord;
    if (cfg.strict_ird_ord) return ord_fits && ird_fits;
    if (!ord_fits) node.ord = node.peer_ird;
    if (!ird_fits)
        node.ird = std::min<std::uint16_t>(node.peer_ord, std::max(node.ird, cfg.max_ird));
    return true;
}

}  // namespace

// irdma_record_ird_ord: what the application asks for is clamped to what this
// side can honour. 0x3FFF ("no value", RFC 6581 section 7) passes unchanged.
void Core::Impl::record_ird_ord(Node& node, std::uint16_t ird, std::uint16_t ord) const {
    constexpr std::uint16_t none = wire::kIrdOrdNone;
    node.ird = ird == none ? ird : std::min(ird, cfg.mpa.max_ird);
    node.ord = ord == none ? ord : std::min(ord, cfg.mpa.max_ord);
}

MpaInfo Core::Impl::negotiated(const Node& node) const {
    MpaInfo m;
    m.revision = node.mpa_rev;
    m.crc = node.crc;
    m.peer_to_peer = node.peer_to_peer;
    m.ird = node.ird;
    m.ord = node.ord;
    m.rtr_offered = node.rtr_offered;
    m.rtr = node.rtr;
    return m;
}

// RFC 6581 section 6, RFC 5041 section 5: the RTR is message 1 of its queue. The
// initiator sent it (a SEND or READ RTR: the data path's first Send or Read Request is
// MSN 2; a READ RTR's response is still ours to take); the responder consumed it (the
// peer's first Send or Read Request after it is MSN 2) and answered a READ RTR itself.
RtrStart Core::Impl::rtr_start(const Node& node) {
    // An RTR is negotiated in peer-to-peer mode only (RFC 6581 section 6).
    IWCM_ASSERT(node.rtr == RtrType::kNone || node.peer_to_peer);
    RtrStart s;
    if (!node.peer_to_peer) return s;
    const bool send = node.rtr == RtrType::kSend;
    const bool read = node.rtr == RtrType::kRead;
    if (node.initiator) {
        if (send) s.tx_msn_send = 2;
        if (read) s.tx_msn_rreq = 2;
        s.read_response_due = read;
    } else {
        if (send) s.rx_msn_send = 2;
        if (read) s.rx_msn_rreq = 2;
    }
    return s;
}

// TCP is up: the initiator sends its request (MPAREQ_SENT); the responder
// starts waiting for one (MPAREQ_WAIT; on_syn_rcvd arms the request timer once the
// segment that completed the handshake is read).
void Core::Impl::start_mpa(Instant now, const NodeRef& node) {
    IWCM_ASSERT(!node->stream);
    if (!node->initiator) {
        set_state(*node, CmState::kMpaReqWait);
        return;
    }
    IWCM_ASSERT(node->mpa_rev == 1 || node->mpa_rev == 2);  // the responder's is the request's
    wire::MpaRepr req;
    req.kind = wire::MpaKind::kRequest;
    req.crc = node->crc;
    req.revision = node->mpa_rev;
    if (node->mpa_rev == 2) {
        wire::MpaV2Params v2;
        v2.ird = node->ird;
        v2.ord = node->ord;
        v2.peer_to_peer = node->peer_to_peer;
        v2.rtr_send = node->rtr_offered & rtr::kSend;
        v2.rtr_write = node->rtr_offered & rtr::kWrite;
        v2.rtr_read = node->rtr_offered & rtr::kRead;
        req.v2 = v2;
    }
    req.private_data = node->buffers().pdata;
    std::byte buf[kMaxMpaFrame + wire::kMpaV2ParamsLen];
    std::size_t len = req.buffer_len();
    req.emit(std::span<std::byte>(buf, len));
    IWCM_ASSERT(len <= sizeof buf);
    set_state(*node, CmState::kMpaReqSent);
    send_data(now, node, std::span<const std::byte>(buf, len), false);
    arm_phase_timer(now, node, cm::NodeTimer::kMpaReply, cfg.mpa.reply_timeout);
}

// In-order stream bytes before hand-off (rx grew): one switch on the state says who reads
// them.
void Core::Impl::on_stream(Instant now, const NodeRef& node) {
    switch (node->state) {
        // RFC 5044 7.1: the responder's first bytes are the initiator's MPA request.
        case CmState::kMpaReqWait: on_mpa_request(now, node); return;
        // RFC 5044 7.1: the initiator's first bytes are the responder's reply (or reject).
        case CmState::kMpaReqSent: on_mpa_reply(now, node); return;
        // RFC 6581 6: a peer-to-peer responder's next bytes are the initiator's RTR.
        case CmState::kOneSideEstablished: on_rtr(now, node); return;
        // RFC 6581 9: connected, before hand-off: a TERMINATE ends it; other FPDUs wait.
        case CmState::kEstablished: on_terminate(now, node); return;
        // RFC 5044 7.1: the initiator must wait for the reply; bytes before it wait in rx
        // for the application's accept (they are the data path's then).
        case CmState::kMpaReqRcvd: return;
        // We closed: bytes of the peer's half-close are acknowledged; nobody reads them.
        case CmState::kFinWait1:
        case CmState::kFinWait2: return;
        // No text is taken into rx in these: before the handshake ends, after the peer's
        // FIN, after hand-off (the data path's or the stream's), or in passing states.
        case CmState::kUnknown:
        case CmState::kInited:
        case CmState::kListening:
        case CmState::kSynRcvd:
        case CmState::kSynSent:
        case CmState::kAccepting:
        case CmState::kMpaRejRcvd:
        case CmState::kOffloaded:
        case CmState::kCloseWait:
        case CmState::kTimeWait:
        case CmState::kLastAck:
        case CmState::kClosing:
        case CmState::kListenerDestroyed:
        case CmState::kClosed: break;
    }
    IWCM_ASSERT(false);
}

void Core::Impl::consume_rx(Node& node, std::size_t n) {
    if (rx_ctx.reads_in_place(node)) {
        rx_ctx.consume_in_place(n);
        return;
    }
    auto& rx = node.buffers().rx;
    IWCM_ASSERT(n <= rx.size());  // only what a handler read of it
    rx.erase(rx.begin(), rx.begin() + static_cast<std::ptrdiff_t>(n));
}

// Is a whole MPA frame in the bytes? 0: not yet; SIZE_MAX: it can never be valid.
static std::size_t complete_mpa(wire::Bytes rx) {
    auto len = wire::mpa_frame_len(rx);
    if (!len) return 0;
    if (*len > kMaxMpaFrame) return SIZE_MAX;
    return rx.size() >= *len ? *len : 0;
}

void Core::Impl::on_mpa_request(Instant now, const NodeRef& node) {
    IWCM_ASSERT(node->state == CmState::kMpaReqWait && !node->initiator && !node->stream);
    const wire::Bytes rx = stream_rx(*node);
    std::size_t len = complete_mpa(rx);
    if (len == 0) return;
    auto parsed = len == SIZE_MAX ? wire::ParseResult<wire::MpaRepr>(fail(wire::ParseError{}))
                                  : wire::parse_mpa(rx.first(len));
    if (!parsed || parsed->kind != wire::MpaKind::kRequest) {
        // Not an MPA request (a reply, a bad key, revision 0 or 3, a length
        // over 512): the connection is not iWARP. Reset it, as the driver does.
        drop(now, DropReason::kBadMpa, node.get(), {});
        send_reset(*node);
        close_node(node);
        return;
    }
    const wire::MpaRepr& req = *parsed;
    // A responder answers at the lower of the request's revision and its own
    // (RFC 5044 section 7.1: revision 1 peers know nothing of the IRD/ORD word).
    node->mpa_rev = std::min(req.revision, cfg.mpa.revision);
    node->crc = req.crc || cfg.mpa.crc;
    node->peer_ird = node->peer_ord = wire::kIrdOrdNone;
    if (req.v2 && node->mpa_rev == 2) {
        node->peer_enhanced = true;
        node->peer_ird = req.v2->ird;
        node->peer_ord = req.v2->ord;
        node->peer_to_peer = req.v2->peer_to_peer;
        node->rtr_offered = rtr_bits(*req.v2);
    }
    // The request timer ends here: reject_request() cancels it, and on the way to the
    // application the accept timer replaces it in place.
    if (req.markers) {
        // Markers are not supported: refuse with a reject reply, then close.
        consume_rx(*node, len);
        reject_request(now, node, {});
        return;
    }
    end_silence(*node);  // it spoke: counted as waiting for the application now
    set_state(*node, CmState::kMpaReqRcvd);
    node->app_owned = true;
    app_refs[node->index] = node;
    push_event(node, EventType::kConnectRequest, 0, req.private_data);
    consume_rx(*node, len);
    arm_phase_timer(now, node, cm::NodeTimer::kAccept, cfg.mpa.accept_timeout);
    // The request waits for the application, which usually accepts before it next takes
    // frames: its ACK waits for poll_transmit(), so that the reply carries it (one frame
    // fewer per setup).
    defer_ack(*node);
}

void Core::Impl::accept_request(Instant now, const NodeRef& node,
                                std::span<const std::byte> pdata) {
    IWCM_ASSERT(node->state == CmState::kMpaReqRcvd && !node->initiator);
    IWCM_ASSERT(pdata.size() <= wire::kMpaMaxPrivateData);  // accept() checked the revision's limit
    // The accept timer ends here: start_close() cancels it on a failure, the RTR timer
    // replaces it in place in peer-to-peer mode, and it is cancelled before ESTABLISHED.
    wire::MpaRepr rep;
    rep.kind = wire::MpaKind::kReply;
    rep.revision = node->mpa_rev;
    rep.crc = node->crc;
    std::optional<wire::TermError> failure;
    // The reply carries the IRD/ORD word when the request did (its 0x10 flag), whatever
    // the values, even both "no value" (siw_accept: enhanced_rdma_conn_est, set from the
    // request's flag; irdma_build_mpa_v2 always writes it at revision 2).
    if (node->mpa_rev == 2 && node->peer_enhanced) {
        if (!negotiate_ird_ord(*node, cfg.mpa)) failure = wire::TermError::kInsufficientIrd;
        wire::MpaV2Params v2;
        if (node->peer_to_peer) {
            v2.peer_to_peer = true;
            // A READ RTR is a read we must serve: without IRD to spare it is
            // not ours to pick.
            std::uint8_t usable = node->rtr_offered & cfg.mpa.rtr_types;
            if (cfg.mpa.max_ird == 0) usable &= static_cast<std::uint8_t>(~rtr::kRead);
            node->rtr = pick_rtr(usable);
            if (node->rtr == RtrType::kNone && !failure) failure = wire::TermError::kNoMatchingRtr;
            // irdma_negotiate_mpa_v2_ird_ord: a reply never says IRD 0 with a
            // READ RTR, whatever the peer's ORD (its RTR is that one read).
            if (node->rtr == RtrType::kRead && node->ird == 0) node->ird = 1;
            v2.rtr_send = node->rtr == RtrType::kSend;
            v2.rtr_write = node->rtr == RtrType::kWrite;
            v2.rtr_read = node->rtr == RtrType::kRead;
        }
        v2.ird = node->ird;
        v2.ord = node->ord;
        rep.v2 = v2;
    } else {
        node->peer_to_peer = false;
    }
    rep.private_data = pdata;
    std::byte buf[kMaxMpaFrame + wire::kMpaV2ParamsLen];
    std::size_t len = rep.buffer_len();
    rep.emit(std::span<std::byte>(buf, len));
    send_data(now, node, std::span<const std::byte>(buf, len), false);
    if (failure) {
        // The reply says what we can do; the TERMINATE says why that ends it.
        send_terminate(now, node, static_cast<int>(*failure));
        end_for_app(node, EventType::kConnectError, -EINVAL);
        start_close(now, node);
        return;
    }
    if (node->peer_to_peer) {
        // Established only when the initiator's RTR arrives (RFC 6581 section 6).
        set_state(*node, CmState::kOneSideEstablished);
        arm_phase_timer(now, node, cm::NodeTimer::kRtr, cfg.mpa.rtr_timeout);
        on_rtr(now, node);
        return;
    }
    cancel_phase_timer(*node);
    set_state(*node, CmState::kEstablished);
    ++stats.established;
    push_event(node, EventType::kEstablished, 0);
}

void Core::Impl::reject_request(Instant now, const NodeRef& node,
                                std::span<const std::byte> pdata) {
    // The application's answer, or a request with markers refused before it is told.
    IWCM_ASSERT(node->state == CmState::kMpaReqRcvd || node->state == CmState::kMpaReqWait);
    cancel_phase_timer(*node);
    wire::MpaRepr rep;
    rep.kind = wire::MpaKind::kReply;
    rep.reject = true;
    rep.revision = node->mpa_rev;
    rep.crc = node->crc;
    if (node->mpa_rev == 2 && node->peer_ird != wire::kIrdOrdNone) {
        // A reject promises no resources: "no value" (RFC 6581 section 7).
        wire::MpaV2Params v2;
        v2.ird = wire::kIrdOrdNone;
        v2.ord = wire::kIrdOrdNone;
        v2.peer_to_peer = node->peer_to_peer;
        rep.v2 = v2;
    }
    rep.private_data = pdata;
    std::byte buf[kMaxMpaFrame + wire::kMpaV2ParamsLen];
    std::size_t len = rep.buffer_len();
    rep.emit(std::span<std::byte>(buf, len));
    send_data(now, node, std::span<const std::byte>(buf, len), false);
    // The application asked for this: its handle ends without an event.
    node->app_owned = false;
    app_refs[node->index].reset();
    start_close(now, node);
}

void Core::Impl::on_mpa_reply(Instant now, const NodeRef& node) {
    IWCM_ASSERT(node->state == CmState::kMpaReqSent && node->initiator && !node->stream);
    const wire::Bytes rx = stream_rx(*node);
    std::size_t len = complete_mpa(rx);
    if (len == 0) return;
    auto parsed = len == SIZE_MAX ? wire::ParseResult<wire::MpaRepr>(fail(wire::ParseError{}))
                                  : wire::parse_mpa(rx.first(len));
    bool bad = !parsed || parsed->kind != wire::MpaKind::kReply || parsed->revision > node->mpa_rev;
    if (bad || parsed->markers) {
        drop(now, DropReason::kBadMpa, node.get(), {});
        abort_node(now, node, EventType::kConnectError, bad ? -EPROTO : -EOPNOTSUPP, true);
        return;
    }
    const wire::MpaRepr& rep = *parsed;
    // The reply timer ends here (in peer-to-peer mode the RTR's send entry follows it).
    // A reply read in place stays where it is when consumed (consume_rx moves the view, and
    // the frame outlives the call); one gathered in the node's rx moves, so its private data
    // is copied first.
    std::span<const std::byte> pdata = rep.private_data;
    if (!rx_ctx.reads_in_place(*node)) pdata = rx_ctx.keep_pdata(pdata);
    consume_rx(*node, len);
    if (rep.reject) {
        cancel_phase_timer(*node);
        set_state(*node, CmState::kMpaRejRcvd);
        end_for_app(node, EventType::kRejected, -ECONNREFUSED, pdata);
        start_close(now, node);
        return;
    }
    // A revision-1 reply to a revision-2 request: the responder speaks only
    // RFC 5044, so no IRD/ORD word and no RTR.
    node->mpa_rev = rep.revision;
    node->crc = node->crc || rep.crc;
    std::optional<wire::TermError> failure;
    if (!rep.v2) {
        node->peer_to_peer = false;
    } else {
        node->peer_ird = rep.v2->ird;
        node->peer_ord = rep.v2->ord;
        if (!negotiate_ird_ord(*node, cfg.mpa)) failure = wire::TermError::kInsufficientIrd;
        if (node->peer_to_peer && rep.v2->peer_to_peer) {
            std::uint8_t chosen = rtr_bits(*rep.v2);
            // Exactly one type, and one we offered.
            bool one = chosen != 0 && (chosen & (chosen - 1)) == 0;
            if (!one || (chosen & node->rtr_offered) == 0) {
                if (!failure) failure = wire::TermError::kNoMatchingRtr;
            } else {
                node->rtr = pick_rtr(chosen);
            }
            // The READ RTR is one read we issue (irdma_record_ird_ord: ORD at
            // least 1) and the responder must serve (irdma_negotiate_mpa_v2_ird_ord:
            // a responder IRD of 0 cannot).
            if (node->rtr == RtrType::kRead) {
                if (node->peer_ird == 0 && !failure) failure = wire::TermError::kInsufficientIrd;
                if (node->ord == 0) node->ord = 1;
            }
        } else {
            node->peer_to_peer = false;
        }
    }
    if (failure) {
        cancel_phase_timer(*node);
        send_terminate(now, node, static_cast<int>(*failure));
        end_for_app(node, EventType::kConnectError, -EINVAL, pdata);
        start_close(now, node);
        return;
    }
    cancel_phase_timer(*node);
    if (node->peer_to_peer) {
        std::byte buf[64];
        wire::RtrParams rp;
        rp.type = to_wire(node->rtr);
        std::size_t n = wire::emit_rtr_fpdu(rp, node->crc, buf);
        send_data(now, node, std::span<const std::byte>(buf, n), false);
    }
    set_state(*node, CmState::kEstablished);
    ++stats.established;
    push_event(node, EventType::kEstablished, 0, pdata);
    if (node->bufs) node->bufs->pdata.clear();
    // Bytes after the reply in the same segment: a TERMINATE is ours to read.
    if (!stream_rx(*node).empty()) on_terminate(now, node);
}

void Core::Impl::on_rtr(Instant now, const NodeRef& node) {
    // Only a peer-to-peer responder waits for the initiator's RTR (RFC 6581 section 6).
    IWCM_ASSERT(node->state == CmState::kOneSideEstablished && !node->initiator);
    IWCM_ASSERT(node->peer_to_peer && !node->stream);
    const wire::Bytes rx = stream_rx(*node);
    auto len = wire::fpdu_frame_len(rx);
    if (!len || rx.size() < *len) return;
    auto fpdu = wire::parse_fpdu(rx.first(*len), node->crc);
    std::optional<wire::TermError> failure;
    if (!fpdu) {
        failure = wire::TermError::kInvalidRequestReply;
    } else if (!fpdu->crc_ok) {
        failure = wire::TermError::kCrcError;
    } else {
        auto type = wire::parse_rtr(fpdu->ulpdu);
        if (!type || from_wire(*type) != node->rtr) failure = wire::TermError::kNoMatchingRtr;
    }
    if (failure) {
        drop(now, DropReason::kBadMpa, node.get(), {});
        send_terminate(now, node, static_cast<int>(*failure));
        end_for_app(node, EventType::kConnectError, -EPROTO);
        start_close(now, node);
        return;
    }
    if (node->rtr == RtrType::kRead) {
        // A READ RTR is a Read Request (MSN 1 of queue 1) that the initiator may keep in
        // its outstanding reads until the answer comes (siw_qp_mpa_rts): it is answered
        // here, as it is read, so that neither a slow application (its QP not yet made)
        // nor the data path's first bytes can come before the answer.
        std::byte resp[wire::kReadRtrResponseFpduLen];
        const std::size_t n = wire::emit_read_rtr_response_fpdu(fpdu->ulpdu, node->crc, resp);
        consume_rx(*node, *len);
        send_data(now, node, std::span<const std::byte>(resp, n), false);
    } else {
        consume_rx(*node, *len);
    }
    cancel_phase_timer(*node);
    set_state(*node, CmState::kEstablished);
    ++stats.established;
    push_event(node, EventType::kEstablished, 0);
    node->release_buffers_if_idle();
}

// Before hand-off, a TERMINATE from the peer (RFC 5040 section 4.8; RFC 6581
// section 9: a strict responder sends one after its reply when IRD/ORD or the
// RTR do not fit) ends the connection; any other FPDU waits for the data path.
void Core::Impl::on_terminate(Instant now, const NodeRef& node) {
    IWCM_ASSERT(node->state == CmState::kEstablished && !node->stream);
    const wire::Bytes rx = stream_rx(*node);
    auto len = wire::fpdu_frame_len(rx);
    if (!len || rx.size() < *len) return;
    auto fpdu = wire::parse_fpdu(rx.first(*len), node->crc);
    if (!fpdu || !fpdu->crc_ok || !wire::parse_terminate(fpdu->ulpdu)) return;
    consume_rx(*node, *len);
    end_for_app(node, EventType::kDisconnected, -ECONNRESET);
    start_close(now, node);
}

void Core::Impl::send_terminate(Instant now, const NodeRef& node, int which) {
    std::byte buf[128];
    std::size_t n = wire::emit_terminate_fpdu(static_cast<wire::TermError>(which), node->crc, buf);
    ++stats.terminates_sent;
    send_data(now, node, std::span<const std::byte>(buf, n), false);
}

}  // namespace iwcm
