// Names of the verbs API's enums. Read first: include/iwcm/verbs.hpp.
#include <cstdio>
#include <string>

#include "iwcm/verbs.hpp"
#include "wire/ddp.hpp"

namespace iwcm::rdma {

std::string_view to_string(VerbsError error) noexcept {
    switch (error) {
        case VerbsError::kStaleHandle: return "stale handle";
        case VerbsError::kInvalidHandle: return "invalid handle";
        case VerbsError::kInvalidArgument: return "invalid argument";
        case VerbsError::kWrongState: return "wrong state";
        case VerbsError::kQueueFull: return "queue full";
        case VerbsError::kTooManySge: return "too many scatter/gather entries";
        case VerbsError::kLocalProtection: return "local protection error";
        case VerbsError::kCoreError: return "core error";
    }
    return "?";
}

std::string_view to_string(WcStatus status) noexcept {
    switch (status) {
        case WcStatus::kSuccess: return "IBV_WC_SUCCESS";
        case WcStatus::kLocLenErr: return "IBV_WC_LOC_LEN_ERR";
        case WcStatus::kLocQpOpErr: return "IBV_WC_LOC_QP_OP_ERR";
        case WcStatus::kLocProtErr: return "IBV_WC_LOC_PROT_ERR";
        case WcStatus::kMwBindErr: return "IBV_WC_MW_BIND_ERR";
        case WcStatus::kWrFlushErr: return "IBV_WC_WR_FLUSH_ERR";
        case WcStatus::kRemAccessErr: return "IBV_WC_REM_ACCESS_ERR";
        case WcStatus::kRemOpErr: return "IBV_WC_REM_OP_ERR";
        case WcStatus::kRemInvReqErr: return "IBV_WC_REM_INV_REQ_ERR";
        case WcStatus::kFatalErr: return "IBV_WC_FATAL_ERR";
        case WcStatus::kGeneralErr: return "IBV_WC_GENERAL_ERR";
    }
    return "?";
}

std::string_view to_string(WcOpcode opcode) noexcept {
    switch (opcode) {
        case WcOpcode::kSend: return "IBV_WC_SEND";
        case WcOpcode::kRdmaWrite: return "IBV_WC_RDMA_WRITE";
        case WcOpcode::kRdmaRead: return "IBV_WC_RDMA_READ";
        case WcOpcode::kRecv: return "IBV_WC_RECV";
        case WcOpcode::kLocalInvalidate: return "IBV_WC_LOCAL_INV";
        case WcOpcode::kBindMw: return "IBV_WC_BIND_MW";
    }
    return "?";
}

std::string_view to_string(QpEventType type) noexcept {
    switch (type) {
        case QpEventType::kDisconnected: return "disconnected";
        case QpEventType::kTerminateReceived: return "TERMINATE received";
        case QpEventType::kTerminateSent: return "TERMINATE sent";
        case QpEventType::kTerminateUnsent: return "TERMINATE not sent";
        case QpEventType::kCqError: return "CQ overflow";
        case QpEventType::kSrqLimit: return "SRQ limit reached";
    }
    return "?";
}

std::string_view to_string(QpError error) noexcept {
    switch (error) {
        case QpError::kNone: return "none";
        case QpError::kFatal: return "QP fatal";
        case QpError::kAccess: return "QP access error";
    }
    return "?";
}

std::string describe(const TermInfo& term) {
    std::string s = "layer " + std::to_string(term.layer) + " type " + std::to_string(term.etype) +
                    " code " + std::to_string(term.code);
    if (term.layer <= 2) {
        s += " (";
        s += wire::describe_term(static_cast<wire::TermLayer>(term.layer), term.etype, term.code);
        s += ")";
    }
    if (term.control != 0) {
        char raw[48];
        std::snprintf(raw, sizeof raw, ", control %02x %02x %02x %02x%s", term.control >> 24,
                      (term.control >> 16) & 0xFF, (term.control >> 8) & 0xFF, term.control & 0xFF,
                      term.siw_order ? " in siw's bit order" : "");
        s += raw;
    }
    return s;
}

}  // namespace iwcm::rdma
