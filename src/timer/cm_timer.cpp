// The non-template parts of the CM timer service. Read cm_timer.hpp's opening comment first.
#include "timer/cm_timer.hpp"

namespace iwcm::timer {

Duration RetransPolicy::delay(int retry) const {
    IWCM_ASSERT(retry >= 0);
    IWCM_ASSERT(initial.count() > 0 && cap >= initial);
    // Doubling stops at the cap, so the loop is short and never overflows.
    Duration wait = initial;
    for (int i = 0; i < retry && wait < cap; ++i) {
        wait = wait > cap / 2 ? cap : wait * 2;
    }
    return wait < cap ? wait : cap;
}

Duration RetransPolicy::total() const {
    Duration sum{0};
    for (int retry = 0; retry <= max_retrans; ++retry) sum += delay(retry);
    return sum;
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
        case ExhaustedAction::kDropQuietly:
            return "drop quietly";
        case ExhaustedAction::kSendReset:
            return "send reset";
        case ExhaustedAction::kSendResetAndAbort:
            return "send reset and report ABORTED";
    }
    return "invalid ExhaustedAction";
}

std::string_view to_string(CmTimerError error) {
    switch (error) {
        case CmTimerError::kSendEntryExists:
            return "the node already has a send entry armed; acknowledge or cancel it first";
        case CmTimerError::kCloseEntryExists:
            return "the node already has a close entry armed; a node has at most one";
    }
    return "invalid CmTimerError";
}

}  // namespace iwcm::timer
