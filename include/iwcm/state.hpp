// The 20 connection-node states of the irdma driver (enum irdma_cm_node_state),
// kept as the vocabulary of this project, in the driver's order, and one of our own
// after them (docs/design.md, "Node states").
#pragma once

#include <cstdint>
#include <string_view>

namespace iwcm {

enum class CmState : std::uint8_t {
    kUnknown,
    kInited,
    kListening,
    kSynRcvd,
    kSynSent,
    kOneSideEstablished,
    kEstablished,
    kAccepting,
    kMpaReqSent,
    kMpaReqRcvd,
    kMpaRejRcvd,
    kOffloaded,
    kFinWait1,
    kFinWait2,
    kCloseWait,
    kTimeWait,
    kLastAck,
    kClosing,
    kListenerDestroyed,
    kClosed,
    // Not the driver's: it calls this phase ESTABLISHED too. Responder, TCP up, waiting for
    // the initiator's MPA request (RFC 5044 section 7.1); ESTABLISHED means connected.
    kMpaReqWait,
};

constexpr int kCmStateCount = 21;

// The driver's upper-case name ("SYN_SENT"; "MPAREQ_WAIT" for ours), for traces and the CLI.
std::string_view to_string(CmState state) noexcept;

// A set of states, for predicates like in(kSynSent | kSynRcvd) (Seastar style).
class CmStateSet {
public:
    constexpr CmStateSet() = default;
    constexpr CmStateSet(CmState s) : bits_(1u << static_cast<unsigned>(s)) {}  // NOLINT
    constexpr bool contains(CmState s) const { return (bits_ >> static_cast<unsigned>(s)) & 1u; }
    friend constexpr CmStateSet operator|(CmStateSet a, CmStateSet b) {
        CmStateSet r;
        r.bits_ = a.bits_ | b.bits_;
        return r;
    }

private:
    std::uint32_t bits_ = 0;
};

constexpr CmStateSet operator|(CmState a, CmState b) {
    return CmStateSet(a) | CmStateSet(b);
}

}  // namespace iwcm
