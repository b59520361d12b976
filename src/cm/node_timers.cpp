// The engine's timer service and the exhaustion policy. Read node_timers.hpp's opening comment
// first.
#include "cm/node_timers.hpp"

#include <algorithm>
#include <utility>

namespace iwcm::cm {

std::string_view to_string(NodeTimer kind) {
    switch (kind) {
        case NodeTimer::kSend: return "send";
        case NodeTimer::kClose: return "close";
        case NodeTimer::kMpaRequest: return "MPA request";
        case NodeTimer::kMpaReply: return "MPA reply";
        case NodeTimer::kAccept: return "accept";
        case NodeTimer::kRtr: return "RTR";
        case NodeTimer::kFinWait2: return "FIN_WAIT2";
        case NodeTimer::kStream: return "stream";
    }
    return "invalid NodeTimer";
}

ExhaustedAction on_retrans_exhausted(CmState state) {
    // Verified against irdma_retrans_expired (drivers/infiniband/hw/irdma/cm.c): its switch
    // has SYN_RCVD and CLOSING call irdma_rem_ref_cm_node only, FIN_WAIT1 and LAST_ACK call
    // irdma_send_reset, and its default branch sends a reset and creates
    // IRDMA_CM_EVENT_ABORTED. Every state is listed so that a new one cannot slip through.
    switch (state) {
        case CmState::kSynRcvd:
        case CmState::kClosing:
            // Half-open passive nodes and simultaneous closes: nobody above is waiting.
            return ExhaustedAction::kDropQuietly;
        case CmState::kFinWait1:
        case CmState::kLastAck:
            // Our FIN went unanswered: the application already asked to close.
            return ExhaustedAction::kSendReset;
        case CmState::kUnknown:
        case CmState::kInited:
        case CmState::kListening:
        case CmState::kSynSent:
        case CmState::kOneSideEstablished:
        case CmState::kMpaReqWait:
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
            // The driver's default branch: reset the peer and tell the application.
            return ExhaustedAction::kSendResetAndAbort;
    }
    IWCM_ASSERT(false && "CmState out of range");
    return ExhaustedAction::kSendResetAndAbort;
}

std::string_view to_string(ExhaustedAction action) {
    switch (action) {
        case ExhaustedAction::kDropQuietly: return "drop quietly";
        case ExhaustedAction::kSendReset: return "send reset";
        case ExhaustedAction::kSendResetAndAbort: return "send reset and report ABORTED";
    }
    return "invalid ExhaustedAction";
}

std::string_view to_string(NodeTimerError error) {
    switch (error) {
        case NodeTimerError::kSendEntryExists:
            return "the node already has a send entry armed; acknowledge or cancel it first";
        case NodeTimerError::kCloseEntryExists:
            return "the node already has a close entry armed; a node has at most one";
    }
    return "invalid NodeTimerError";
}

NodeTimers::NodeTimers(NodeTimersConfig config, Instant start)
    : config_(config), first_delay_(config.retrans.delay(0)), wheel_(config.granularity, start) {
    IWCM_ASSERT(config.retrans.initial.count() > 0);
    IWCM_ASSERT(config.retrans.cap >= config.retrans.initial);
    IWCM_ASSERT(config.close_delay.count() > 0);
}

NodeTimers::~NodeTimers() {
    // Every node with a timer armed has an entry on the wheel; its first entry found lets
    // the held reference go (the node's later entries find the hold gone).
    wheel_.for_each_pending([](std::uint64_t c) {
        Node& node = node_of(c);
        if (!node.timers_hold) return;
        node.send_timer = node.phase_timer = node.stream_timer = timer::TimerId{};
        node.timers_hold = false;
        const NodeRef last(&node);  // the hold's count becomes this reference's, then goes
        --node.refs;
    });
}

void NodeTimers::arm(const NodeRef& node, NodeTimer kind, Instant at, std::uint8_t attempt) {
    IWCM_ASSERT(node->state != CmState::kClosed);
    timer::TimerId& id = slot(*node, kind);
    IWCM_ASSERT(!id.valid());
    id = wheel_.schedule(at, cookie(*node, kind, attempt));
    if (in_phase_slot(kind)) node->phase_kind = kind;
    if (!node->timers_hold) {
        IWCM_ASSERT((reinterpret_cast<std::uintptr_t>(node.get()) & ~kNodeBits) == 0);
        node->timers_hold = true;
        ++node->refs;
    }
}

void NodeTimers::rearm(const NodeRef& node, NodeTimer kind, Instant at) {
    IWCM_ASSERT(node->state != CmState::kClosed);
    timer::TimerId& id = slot(*node, kind);
    if (id.valid()) {
        // Not pending: its entry fired in the batch on_timer is handling (take() will skip
        // it, as the slot will name another); the node's reference is still held.
        const timer::TimerId moved = wheel_.reschedule(id, at, cookie(*node, kind, 0));
        if (moved.valid()) {
            id = moved;
            if (in_phase_slot(kind)) node->phase_kind = kind;
            return;
        }
        id = {};
    }
    arm(node, kind, at, 0);
}

Expected<void, NodeTimerError> NodeTimers::arm_send(const NodeRef& node, Instant now) {
    if (node->send_timer.valid()) return fail(NodeTimerError::kSendEntryExists);
    arm(node, NodeTimer::kSend, now + first_delay_, 0);
    return {};
}

void NodeTimers::restart_send(const NodeRef& node, Instant now) {
    rearm(node, NodeTimer::kSend, now + first_delay_);
}

Expected<void, NodeTimerError> NodeTimers::arm_close(const NodeRef& node, Instant now) {
    if (node->phase_timer.valid()) {
        IWCM_ASSERT(node->phase_kind == NodeTimer::kClose);
        return fail(NodeTimerError::kCloseEntryExists);
    }
    arm(node, NodeTimer::kClose, now + config_.close_delay, 0);
    return {};
}

void NodeTimers::arm_close_at(const NodeRef& node, Instant at) {
    IWCM_ASSERT(!node->phase_timer.valid() || node->phase_kind == NodeTimer::kClose);
    rearm(node, NodeTimer::kClose, at);
}

void NodeTimers::arm_phase(const NodeRef& node, NodeTimer kind, Instant at) {
    IWCM_ASSERT(kind != NodeTimer::kSend && kind != NodeTimer::kStream &&
                kind != NodeTimer::kClose);
    IWCM_ASSERT(!node->phase_timer.valid() || node->phase_kind != NodeTimer::kClose);
    rearm(node, kind, at);
}

void NodeTimers::hand_phase_to_send(const NodeRef& node, Instant now) {
    IWCM_ASSERT(node->state != CmState::kClosed);
    if (node->send_timer.valid() || !node->phase_timer.valid()) {
        drop(*node, node->phase_timer);
        return;
    }
    IWCM_ASSERT(node->phase_kind != NodeTimer::kClose);
    const timer::TimerId moved = wheel_.reschedule(node->phase_timer, now + first_delay_,
                                                   cookie(*node, NodeTimer::kSend, 0));
    node->phase_timer = {};
    if (moved.valid()) {
        node->send_timer = moved;
        return;
    }
    // The phase entry fired in the batch on_timer is handling (take() skips it now): the send
    // entry is the caller's to arm.
    release_if_idle(*node);
}

void NodeTimers::hand_send_to_phase(const NodeRef& node, NodeTimer kind, Instant at) {
    IWCM_ASSERT(in_phase_slot(kind) && kind != NodeTimer::kClose);
    if (node->phase_timer.valid() || !node->send_timer.valid()) {
        drop(*node, node->send_timer);
        arm_phase(node, kind, at);
        return;
    }
    const timer::TimerId moved = wheel_.reschedule(node->send_timer, at, cookie(*node, kind, 0));
    node->send_timer = {};
    if (moved.valid()) {
        node->phase_timer = moved;
        node->phase_kind = kind;
        return;
    }
    // The send entry fired in the batch on_timer is handling (take() skips it now).
    arm(node, kind, at, 0);
}

void NodeTimers::arm_stream(const NodeRef& node, Instant at) {
    rearm(node, NodeTimer::kStream, at);
}

bool NodeTimers::cancel_stream(Node& node) {
    return drop(node, node.stream_timer);
}

void NodeTimers::cancel_all(Node& node) {
    // Each drop lets the reference go only once no slot is left armed.
    drop(node, node.send_timer);
    drop(node, node.phase_timer);
    drop(node, node.stream_timer);
}

std::optional<Instant> NodeTimers::deadline(const Node& node, NodeTimer kind) const {
    if (in_phase_slot(kind)) {
        if (node.phase_kind != kind) return std::nullopt;
        return wheel_.deadline_of(node.phase_timer);
    }
    return wheel_.deadline_of(kind == NodeTimer::kSend ? node.send_timer : node.stream_timer);
}

bool NodeTimers::consistent(const Node& node) const {
    if (node.timers_hold != any_armed(node)) return false;
    if (node.state == CmState::kClosed && any_armed(node)) return false;
    for (timer::TimerId id : {node.send_timer, node.phase_timer, node.stream_timer}) {
        // An id may name an entry that fired in the batch on_timer is handling.
        if (id.valid() && !wheel_.is_pending(id) && !in_on_timer_) return false;
    }
    return true;
}

void NodeTimers::collect(std::uint64_t c) {
    Node& node = node_of(c);
    const auto kind = static_cast<NodeTimer>(static_cast<std::uint8_t>(c >> 48));
    const auto attempt = static_cast<std::uint8_t>(c >> 56);
    IWCM_ASSERT(node.timers_hold);
    const timer::TimerId id = slot(node, kind);
    // A slot holds the one armed entry of its kind, so the entry that fired is the slot's.
    IWCM_ASSERT(id.valid());
    IWCM_ASSERT(!in_phase_slot(kind) || node.phase_kind == kind);
    due_.push_back(Due{NodeRef(&node), id, kind, attempt});
}

std::optional<FiredTimer> NodeTimers::take(Due& due, Instant now) {
    Node& node = *due.node;
    timer::TimerId& id = slot(node, due.kind);
    if (id != due.id) return std::nullopt;  // Cancelled or re-armed by an earlier action.
    if (due.kind == NodeTimer::kSend && due.attempt < config_.retrans.max_retrans) {
        // The driver's tick: resend, count down, re-arm from the time of this tick.
        const auto attempt = static_cast<std::uint8_t>(due.attempt + 1);
        id = wheel_.schedule(now + config_.retrans.delay(attempt),
                             cookie(node, NodeTimer::kSend, attempt));
        return FiredTimer{std::move(due.node), NodeTimer::kSend, attempt, false};
    }
    id = {};
    release_if_idle(node);
    return FiredTimer{std::move(due.node), due.kind, due.attempt, due.kind == NodeTimer::kSend};
}

}  // namespace iwcm::cm
