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
        case NodeTimer::kRefused: return "refused";
        case NodeTimer::kStream: return "stream";
        case NodeTimer::kPersist: return "persist";
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
    // Every node the service holds has one entry on the wheel: its reference goes.
    wheel_.for_each_pending([](std::uint64_t c) {
        Node& node = node_of(c);
        IWCM_ASSERT(node.timers_hold);
        node.send_tick = node.phase_tick = kTimerUnarmed;
        if (node.stream) node.stream->timer_tick = kTimerUnarmed;
        node.timer_entry = timer::TimerId{};
        node.timers_hold = false;
        const NodeRef last(&node);  // the hold's count becomes this reference's, then goes
        --node.refs;
    });
}

Expected<void, NodeTimerError> NodeTimers::arm_send(const NodeRef& node, Instant now) {
    if (has_send(*node)) return fail(NodeTimerError::kSendEntryExists);
    IWCM_ASSERT(!has_persist(*node));
    node->send_attempt = 0;
    set(*node, node->send_tick, wheel_.to_tick(now + first_delay_));
    return {};
}

void NodeTimers::restart_send(const NodeRef& node, Instant now) {
    IWCM_ASSERT(!has_persist(*node));
    node->send_attempt = 0;
    set(*node, node->send_tick, wheel_.to_tick(now + first_delay_));
}

Expected<void, NodeTimerError> NodeTimers::arm_close(const NodeRef& node, Instant now) {
    if (node->phase_tick != kTimerUnarmed) {
        IWCM_ASSERT(node->phase_kind == NodeTimer::kClose);
        return fail(NodeTimerError::kCloseEntryExists);
    }
    node->phase_kind = NodeTimer::kClose;
    set(*node, node->phase_tick, wheel_.to_tick(now + config_.close_delay));
    return {};
}

void NodeTimers::arm_close_at(const NodeRef& node, Instant at) {
    IWCM_ASSERT(node->phase_tick == kTimerUnarmed || node->phase_kind == NodeTimer::kClose);
    node->phase_kind = NodeTimer::kClose;
    set(*node, node->phase_tick, wheel_.to_tick(at));
}

void NodeTimers::arm_phase(const NodeRef& node, NodeTimer kind, Instant at) {
    IWCM_ASSERT(kind != NodeTimer::kSend && kind != NodeTimer::kStream &&
                kind != NodeTimer::kClose);
    IWCM_ASSERT(node->phase_tick == kTimerUnarmed || node->phase_kind != NodeTimer::kClose);
    node->phase_kind = kind;
    set(*node, node->phase_tick, wheel_.to_tick(at));
}

void NodeTimers::arm_stream(const NodeRef& node, Instant at) {
    IWCM_ASSERT(node->stream != nullptr);
    set(*node, node->stream->timer_tick, wheel_.to_tick(at));
}

void NodeTimers::cancel_all(Node& node) {
    clear(node.send_tick);
    node.persist_armed = false;
    clear(node.phase_tick);
    if (node.stream) clear(node.stream->timer_tick);
    if (node.timer_entry.valid()) take_off(node);
}

std::optional<Instant> NodeTimers::deadline(const Node& node, NodeTimer kind) const {
    const std::uint64_t* s = armed_slot(node, kind);
    if (s == nullptr) return std::nullopt;
    return wheel_.tick_instant(*s);
}

bool NodeTimers::consistent(const Node& node) const {
    if (node.timers_hold != node.timer_entry.valid()) return false;
    if (node.state == CmState::kClosed && (any_armed(node) || node.timer_entry.valid()))
        return false;
    if (!node.timer_entry.valid()) {
        // Only a node whose entry came due in the batch on_timer is handling has slots armed
        // and no entry (the due ones, until they are handled).
        return !any_armed(node) || in_on_timer_;
    }
    if (!wheel_.is_pending(node.timer_entry)) return false;
    return in_on_timer_ || wheel_.tick_of(node.timer_entry) <= earliest(node);
}

void NodeTimers::collect(std::uint64_t c) {
    Node& node = node_of(c);
    IWCM_ASSERT(node.timers_hold);
    node.timer_entry = {};  // fired: the wheel has let it go
    const std::uint64_t due = wheel_.due_tick();
    const std::size_t first = due_.size();
    std::uint64_t rest = kTimerUnarmed;
    const auto look = [&](NodeTimer kind, std::uint64_t tick) {
        if (tick == kTimerUnarmed) return;
        if (tick <= due) {
            due_.push_back(Due{NodeRef(&node), tick, kind, true});
        } else {
            rest = std::min(rest, tick);
        }
    };
    look(node.persist_armed ? NodeTimer::kPersist : NodeTimer::kSend, node.send_tick);
    look(node.phase_kind, node.phase_tick);
    look(NodeTimer::kStream, stream_tick(node));
    if (rest != kTimerUnarmed) {
        // Later deadlines: the entry goes back at the earliest (the reference stays held).
        node.timer_entry = wheel_.schedule_tick(rest, cookie(node));
        return;
    }
    // Nothing later: the entry's reference goes, with one of the batch's keeping the node.
    if (due_.size() == first) due_.push_back(Due{NodeRef(&node), 0, NodeTimer::kSend, false});
    let_go(node);
}

std::optional<FiredTimer> NodeTimers::take(Due& due, Instant now) {
    Node& node = *due.node;
    // The batch's reference keeps the node; the service's own may have gone with its entry.
    IWCM_ASSERT(node.refs > 0);
    std::uint64_t* armed = due.fire ? armed_slot(node, due.kind) : nullptr;
    // Cancelled or re-armed by an earlier action (a deadline armed since lies after this
    // batch's tick), or the phase slot holds another timeout now; or no timer came due.
    if (armed == nullptr || *armed != due.tick) {
        settle(node);
        return std::nullopt;
    }
    std::uint64_t& s = *armed;
    if (due.kind == NodeTimer::kSend && node.send_attempt < config_.retrans.max_retrans) {
        // The driver's tick: resend, count down, re-arm from the time of this tick.
        const auto attempt = static_cast<std::uint8_t>(node.send_attempt + 1);
        node.send_attempt = attempt;
        s = wheel_.to_tick(now + config_.retrans.delay(attempt));
        IWCM_ASSERT(s != kTimerUnarmed);
        cover(node, s);
        return FiredTimer{std::move(due.node), NodeTimer::kSend, attempt, false};
    }
    clear(s);
    if (due.kind == NodeTimer::kPersist) node.persist_armed = false;
    settle(node);
    const bool exhausted = due.kind == NodeTimer::kSend;
    const std::uint8_t attempt = exhausted ? node.send_attempt : std::uint8_t{0};
    return FiredTimer{std::move(due.node), due.kind, attempt, exhausted};
}

}  // namespace iwcm::cm
