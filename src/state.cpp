// The driver's state names. Read first: include/iwcm/state.hpp.
#include "iwcm/state.hpp"

namespace iwcm {

std::string_view to_string(CmState state) noexcept {
    switch (state) {
        case CmState::kUnknown: return "UNKNOWN";
        case CmState::kInited: return "INITED";
        case CmState::kListening: return "LISTENING";
        case CmState::kSynRcvd: return "SYN_RCVD";
        case CmState::kSynSent: return "SYN_SENT";
        case CmState::kOneSideEstablished: return "ONE_SIDE_ESTABLISHED";
        case CmState::kEstablished: return "ESTABLISHED";
        case CmState::kAccepting: return "ACCEPTING";
        case CmState::kMpaReqSent: return "MPAREQ_SENT";
        case CmState::kMpaReqRcvd: return "MPAREQ_RCVD";
        case CmState::kMpaRejRcvd: return "MPAREJ_RCVD";
        case CmState::kOffloaded: return "OFFLOADED";
        case CmState::kFinWait1: return "FIN_WAIT1";
        case CmState::kFinWait2: return "FIN_WAIT2";
        case CmState::kCloseWait: return "CLOSE_WAIT";
        case CmState::kTimeWait: return "TIME_WAIT";
        case CmState::kLastAck: return "LAST_ACK";
        case CmState::kClosing: return "CLOSING";
        case CmState::kListenerDestroyed: return "LISTENER_DESTROYED";
        case CmState::kClosed: return "CLOSED";
        case CmState::kMpaReqWait: return "MPAREQ_WAIT";
    }
    return "?";
}

}  // namespace iwcm
