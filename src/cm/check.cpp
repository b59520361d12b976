// The invariants every handler leaves true of a node, asserted in debug and sanitizer builds.
//
// Read first: src/cm/core_impl.hpp (check_node), src/cm/node_timers.hpp (which timer kind a
// node may hold in which state). Each check is a few loads and compares, so the handlers can
// call it on entry and exit; release builds compile it out (IWCM_CHECK_INVARIANTS).
#include "cm/core_impl.hpp"
#include "wire/mpa.hpp"

#if IWCM_CHECK_INVARIANTS

namespace iwcm {

using cm::Node;
using cm::NodeTimer;

namespace {

// The one state each phase timeout is armed in (timeouts.cpp asserts it when one fires).
bool phase_fits_state(const Node& node, NodeTimer kind) {
    // The phase slot holds none of the kinds the send slot or a stream's own hold.
    IWCM_ASSERT(kind != NodeTimer::kSend && kind != NodeTimer::kStream &&
                kind != NodeTimer::kPersist);
    switch (kind) {
        case NodeTimer::kClose: return node.state == CmState::kTimeWait;
        case NodeTimer::kMpaRequest: return node.state == CmState::kMpaReqWait;
        case NodeTimer::kMpaReply: return node.state == CmState::kMpaReqSent;
        case NodeTimer::kAccept: return node.state == CmState::kMpaReqRcvd;
        case NodeTimer::kRtr: return node.state == CmState::kOneSideEstablished;
        case NodeTimer::kFinWait2: return node.state == CmState::kFinWait2;
        case NodeTimer::kRefused: return node.state == CmState::kSynSent;
        case NodeTimer::kSend:
        case NodeTimer::kStream:
        case NodeTimer::kPersist: break;
    }
    return false;  // Not a phase kind.
}

}  // namespace

void Core::Impl::check_node(const Node& node) const {
    // Sequence order (RFC 9293 section 3.3.1): nothing is acknowledged before it is sent.
    IWCM_ASSERT(node.tcb.snd_una <= node.tcb.snd_max);
    // Table membership: a node is in the table exactly while it is not CLOSED (close_node
    // takes it out; another node may since have taken its 4-tuple).
    const bool in_table = table.find(cm::key_of(node)) == &node;
    IWCM_ASSERT(in_table == (node.state != CmState::kClosed));
    // A half-open node (counted in its listener's half_open) is one that has not yet seen the
    // handshake's ACK.
    IWCM_ASSERT(!node.half_open || node.state == CmState::kSynRcvd);
    IWCM_ASSERT(!node.half_open || node.counted_in_backlog);
    // A silent node (counted in its listener's silent) is exactly one in MPAREQ_WAIT: past
    // the handshake, no MPA request yet (enter_silence follows the handshake's segment, and
    // the request or the node's end comes before any other state).
    IWCM_ASSERT(node.silent == (node.state == CmState::kMpaReqWait));
    IWCM_ASSERT(!node.silent || (node.counted_in_backlog && !node.half_open));
    // A counted node's listener lives (destroy_listen ends its nodes first) and counts it:
    // half-open and silent nodes among its pending ones; a silent one is live in the order.
    if (node.counted_in_backlog) {
        const cm::Listener* l = listeners.find(node.listener);
        IWCM_ASSERT(l != nullptr && l->pending > 0);
        IWCM_ASSERT(!node.half_open || l->half_open > 0);
        IWCM_ASSERT(!node.silent || (l->silent > 0 && still_silent(node.handle())));
    }
    // MPAREQ_WAIT is the responder's, and nobody above knows the node before its request.
    IWCM_ASSERT(node.state != CmState::kMpaReqWait || (!node.initiator && !node.app_owned));
    // The application's handle and its reference go together.
    IWCM_ASSERT(node.app_owned ==
                (node.index < app_refs.size() && app_refs[node.index].get() == &node));
    // Buffers: tx holds the unacknowledged bytes only (SYN and FIN take sequence space, not
    // bytes), those the peer's window held back after the sent ones; our private data fits
    // an MPA frame. A FIN waits only behind such bytes, and goes before nothing.
    const std::size_t sent = static_cast<std::size_t>(node.tcb.snd_max - node.tcb.snd_una);
    const std::size_t queued = node.bufs ? node.bufs->tx.size() : 0;
    IWCM_ASSERT(!node.fin_queued || queued > sent);
    IWCM_ASSERT(!node.fin_sent || node.fin_acked || queued < sent);
    IWCM_ASSERT(!node.probe_out || queued > sent);
    if (node.bufs) IWCM_ASSERT(node.bufs->pdata.size() <= wire::kMpaMaxPrivateData);
    // Timers: one of each kind by construction (one slot each); the service's reference and
    // slots agree; a send entry waits only for something unacknowledged; a phase timeout
    // belongs to the state it was armed in.
    IWCM_ASSERT(timers.consistent(node));
    IWCM_ASSERT(!cm::NodeTimers::has_send(node) || node.tcb.snd_una != node.tcb.snd_max);
    // The persist timer runs only with the window shut, bytes waiting and none in flight.
    IWCM_ASSERT(!cm::NodeTimers::has_persist(node) ||
                (node.tcb.snd_wnd == 0 && node.tcb.snd_una == node.tcb.snd_max && queued > sent));
    if (auto kind = cm::NodeTimers::phase(node)) IWCM_ASSERT(phase_fits_state(node, *kind));
    // The event queue's own order (event_queue.hpp), the transmit queue's frames and loans
    // (tx_queue.hpp), the listeners' counts and silent orders (listeners.hpp).
    events.check();
    tx.check();
    listeners.check();
}

}  // namespace iwcm

#endif  // IWCM_CHECK_INVARIANTS
