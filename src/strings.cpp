// Names of the public enums, for messages, traces and the CLI.
#include "iwcm/core.hpp"

namespace iwcm {

std::string_view to_string(ApiError e) noexcept {
    switch (e) {
        case ApiError::kStaleHandle: return "stale handle: the connection or listener is gone";
        case ApiError::kInvalidHandle: return "invalid handle: not issued by this core";
        case ApiError::kWrongState: return "wrong state for this command";
        case ApiError::kAddressNotLocal: return "address not local: add it with add_address first";
        case ApiError::kAddressInUse: return "address and port already in use";
        case ApiError::kPrivateDataTooLong:
            return "private data too long (512 bytes at revision 1, 508 at revision 2)";
        case ApiError::kInvalidArgument: return "invalid argument";
        case ApiError::kFamilyMismatch:
            return "local and remote addresses are of different families";
        case ApiError::kTooManyConnections:
            return "too many connections (CoreConfig::max_connections)";
        case ApiError::kNoPorts: return "no free ephemeral port";
        case ApiError::kEventQueueFull:
            return "event queue full (CoreConfig::max_events): poll events first";
    }
    return "?";
}

std::string_view to_string(EventType t) noexcept {
    switch (t) {
        case EventType::kConnectRequest: return "connect_request";
        case EventType::kEstablished: return "established";
        case EventType::kRejected: return "rejected";
        case EventType::kUnreachable: return "unreachable";
        case EventType::kConnectError: return "connect_error";
        case EventType::kDisconnected: return "disconnected";
        case EventType::kAddressDown: return "address_down";
        case EventType::kAddressUp: return "address_up";
        case EventType::kReadable: return "readable";
        case EventType::kWritable: return "writable";
    }
    return "?";
}

std::string_view to_string(RtrType t) noexcept {
    switch (t) {
        case RtrType::kNone: return "none";
        case RtrType::kSend: return "send";
        case RtrType::kWrite: return "write";
        case RtrType::kRead: return "read";
    }
    return "?";
}

std::string_view to_string(DropReason r) noexcept {
    switch (r) {
        case DropReason::kMalformed: return "malformed";
        case DropReason::kBadChecksum: return "bad_checksum";
        case DropReason::kNotForUs: return "not_for_us";
        case DropReason::kNotTcp: return "not_tcp";
        case DropReason::kOutOfWindow: return "out_of_window";
        case DropReason::kBadAck: return "bad_ack";
        case DropReason::kBacklogFull: return "backlog_full";
        case DropReason::kNoListener: return "no_listener";
        case DropReason::kRstIgnored: return "rst_ignored";
        case DropReason::kUnexpected: return "unexpected";
        case DropReason::kBadMpa: return "bad_mpa";
        case DropReason::kDataAfterHandoff: return "data_after_handoff";
        case DropReason::kTooManyConnections: return "too_many_connections";
        case DropReason::kEventQueueFull: return "event_queue_full";
        case DropReason::kFragment: return "fragment";
        case DropReason::kBadCookie: return "bad_cookie";
        case DropReason::kListenerGrace: return "listener_grace";
        case DropReason::kCount: break;
    }
    return "?";
}

}  // namespace iwcm
