// Every timeout of a node: one switch on the kind that fired, one named handler per kind.
//
// Read first: src/cm/node_timers.hpp (the service, and which slot holds which kind); then the
// driver's irdma_cm_timer_tick and irdma_retrans_expired (drivers/infiniband/hw/irdma/cm.c),
// RFC 5044 section 7.1 (the MPA exchange) and RFC 9293 section 3.6 (closing). A handler never
// guesses from the node's state which timeout it is: the kind says, and the state it implies
// is asserted (check.cpp keeps the same pairs as an invariant).
#include <cerrno>

#include "cm/core_impl.hpp"

namespace iwcm {

using cm::Node;
using cm::NodeRef;
using cm::NodeTimer;

void Core::Impl::on_node_timer(Instant now, cm::FiredTimer&& fired) {
    const NodeRef node = std::move(fired.node);
    // close_node cancels every timer, and no timer is armed on a closed node.
    IWCM_ASSERT(node->state != CmState::kClosed);
    check_node(*node);
    switch (fired.kind) {
        case NodeTimer::kSend:
            // irdma_cm_timer_tick: a due send entry with retries left is sent again (the
            // service has re-armed it already); with none left, irdma_retrans_expired.
            if (fired.exhausted) {
                on_retrans_exhausted(now, node);
            } else {
                on_retransmit(now, node);
            }
            break;
        case NodeTimer::kClose: on_close_timer(now, node); break;
        case NodeTimer::kMpaRequest: on_mpa_request_timeout(now, node); break;
        case NodeTimer::kMpaReply: on_mpa_reply_timeout(now, node); break;
        case NodeTimer::kAccept: on_accept_timeout(now, node); break;
        case NodeTimer::kRtr: on_rtr_timeout(now, node); break;
        case NodeTimer::kFinWait2: on_fin_wait2_timeout(now, node); break;
        case NodeTimer::kRefused: on_refused_timeout(now, node); break;
        case NodeTimer::kStream: on_stream_timer(now, node); break;
        case NodeTimer::kPersist: on_persist_timeout(now, node); break;
    }
    check_node(*node);
}

// A retransmission is rebuilt from the node's state (SYN, SYN-ACK, or the unacknowledged
// bytes and FIN), the way TCP retransmits from snd_una, so the entry keeps no frame.
void Core::Impl::on_retransmit(Instant now, const NodeRef& node) {
    (void)now;
    ++stats.retransmissions;
    resend(*node);
}

// irdma_retrans_expired: half-open passive nodes go quietly; a node closing on its own sends
// a reset; any other resets and reports the failure. Then the node is CLOSED.
void Core::Impl::on_retrans_exhausted(Instant now, const NodeRef& node) {
    (void)now;
    // Retransmissions or zero-window probes ran out on an open node (a closed one has no
    // timers).
    IWCM_ASSERT(node->state != CmState::kClosed);
    switch (cm::on_retrans_exhausted(node->state)) {
        case cm::ExhaustedAction::kDropQuietly: break;
        case cm::ExhaustedAction::kSendReset: send_reset(*node); break;
        case cm::ExhaustedAction::kSendResetAndAbort: send_reset(*node); break;
    }
    const bool was_connected = cm::connected(node->state);
    EventType type = was_connected ? EventType::kDisconnected : EventType::kUnreachable;
    end_for_app(node, type, -ETIMEDOUT);
    close_node(node);
}

// irdma_handle_close_entry: the close entry ends TIME_WAIT (HZ / 10 after it began here, as
// the driver holds it, not RFC 9293's 2 MSL: the queue pair is gone and no data can be late).
void Core::Impl::on_close_timer(Instant now, const NodeRef& node) {
    (void)now;
    IWCM_ASSERT(node->state == CmState::kTimeWait);
    close_node(node);
}

// RFC 5044 section 7.1: the responder waits a bounded time for the MPA request (siw: 5 s). A
// peer that connected and never sent one is not an iWARP peer: reset and close. Nobody above
// knows the node yet, so nobody is told.
void Core::Impl::on_mpa_request_timeout(Instant now, const NodeRef& node) {
    (void)now;
    IWCM_ASSERT(node->state == CmState::kMpaReqWait);
    send_reset(*node);
    close_node(node);
}

// RFC 5044 section 7.1: the initiator waits a bounded time for the reply (siw: 10 s); then
// the peer is reset and the application hears kUnreachable with -ETIMEDOUT.
void Core::Impl::on_mpa_reply_timeout(Instant now, const NodeRef& node) {
    IWCM_ASSERT(node->state == CmState::kMpaReqSent);
    abort_node(now, node, EventType::kUnreachable, -ETIMEDOUT, true);
}

// The application did not accept or reject the connect request in time: the peer, whose
// reply timer runs too, is reset, and the application hears kUnreachable with -ETIMEDOUT.
void Core::Impl::on_accept_timeout(Instant now, const NodeRef& node) {
    IWCM_ASSERT(node->state == CmState::kMpaReqRcvd);
    abort_node(now, node, EventType::kUnreachable, -ETIMEDOUT, true);
}

// RFC 6581 section 6: a peer-to-peer responder is established only by the initiator's RTR;
// without it in time, reset, and the application hears kUnreachable with -ETIMEDOUT.
void Core::Impl::on_rtr_timeout(Instant now, const NodeRef& node) {
    IWCM_ASSERT(node->state == CmState::kOneSideEstablished);
    abort_node(now, node, EventType::kUnreachable, -ETIMEDOUT, true);
}

// RFC 9293 leaves FIN-WAIT-2 open-ended; like Linux's tcp_fin_timeout we wait for the peer's
// FIN only as long as its retransmissions could last (see on_ack), then reset and close; an
// owning application hears kDisconnected from close_node.
void Core::Impl::on_fin_wait2_timeout(Instant now, const NodeRef& node) {
    (void)now;
    IWCM_ASSERT(node->state == CmState::kFinWait2);
    send_reset(*node);
    close_node(node);
}

// CoreConfig::connect_refused_grace: the wait after a refused SYN is over; the SYN goes again
// and its retransmissions start over.
void Core::Impl::on_refused_timeout(Instant now, const NodeRef& node) {
    IWCM_ASSERT(node->state == CmState::kSynSent && node->refused_retries > 0);
    send_syn(*node);
    arm_send(now, node);
}

void Core::Impl::arm_phase_timer(Instant now, const NodeRef& node, NodeTimer kind, Duration after) {
    timers.arm_phase(node, kind, now + after);
}

void Core::Impl::cancel_phase_timer(Node& node) {
    // The close entry shares the slot, but only TIME_WAIT holds one, and nothing cancels the
    // end of TIME_WAIT but close_node.
    IWCM_ASSERT(cm::NodeTimers::phase(node) != NodeTimer::kClose);
    timers.cancel_phase(node);
}

void Core::Impl::arm_stream_timer(Instant now, const NodeRef& node, Instant at) {
    (void)now;
    timers.arm_stream(node, at);
}

void Core::Impl::cancel_stream_timer(Node& node) {
    timers.cancel_stream(node);
}

}  // namespace iwcm
