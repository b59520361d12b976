// Counters of one core: the irdma driver's (struct irdma_cm_core stats_*)
// plus frames dropped by reason.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace iwcm {

enum class DropReason : std::uint8_t {
    kMalformed,         // a layer failed to parse (truncated, bad length, bad option or value)
    kBadChecksum,       // IPv4 header or TCP checksum wrong
    kNotForUs,          // destination MAC or address not ours, wrong VLAN
    kNotTcp,            // not IPv4/IPv6 TCP (also TCP behind IPsec AH or ESP)
    kOutOfWindow,       // sequence check failed (answered with an ACK where TCP says so)
    kBadAck,            // ACK of something never sent
    kBacklogFull,       // SYN over the listener's backlog
    kNoListener,        // segment for nothing (answered with RST)
    kRstIgnored,        // RST not exactly in sequence (RFC 5961) or for nothing
    kUnexpected,        // a segment the state does not expect (e.g. SYN while synchronised)
    kBadMpa,            // MPA frame that fails to parse
    kDataAfterHandoff,  // payload after OFFLOADED: the data path owns it
    kTooManyConnections,
    kEventQueueFull,  // a new connection's SYN while max_events events wait unpolled
    kFragment,        // an IPv4 fragment or IPv6 fragment header: a CM segment never is one
    kBadCookie,       // an ACK returning a wrong or expired SYN cookie (answered with RST)
    kListenerGrace,   // a SYN to a listener destroyed less than listener_grace ago (unanswered)
    kCount,
};
constexpr std::size_t kDropReasonCount = static_cast<std::size_t>(DropReason::kCount);
std::string_view to_string(DropReason reason) noexcept;

struct Stats {
    std::uint64_t nodes_created = 0;
    std::uint64_t nodes_destroyed = 0;
    std::uint64_t listeners_created = 0;
    std::uint64_t listeners_destroyed = 0;
    std::uint64_t loopback_connections = 0;
    std::uint64_t accepts = 0;
    std::uint64_t rejects = 0;
    // Connections that closed without ever being established, counted once
    // each when the node closes: ours (connect) and the peer's (passive). An
    // application's reject() is not a passive error (see `rejects`).
    std::uint64_t connect_errors = 0;
    std::uint64_t passive_errors = 0;
    std::uint64_t retransmissions = 0;  // TCP segments sent again, before and after hand-off
    std::uint64_t backlog_drops = 0;
    // Connections past the handshake that had sent no MPA request, reset to make room for
    // a newer one at the listener's silent_limit (CoreConfig::silent_limit).
    std::uint64_t silent_shed = 0;
    std::uint64_t syns_received = 0;
    std::uint64_t resets_sent = 0;
    std::uint64_t resets_received = 0;
    std::uint64_t established = 0;
    std::uint64_t frames_in = 0;
    std::uint64_t frames_out = 0;
    std::uint64_t mpa_v1_fallbacks = 0;
    // SYNs of connect() refused by a reset and sent again (CoreConfig::connect_refused_grace).
    std::uint64_t connect_refused_retries = 0;
    std::uint64_t terminates_sent = 0;
    std::uint64_t syn_cookies_sent = 0;        // SYN-ACKs with a cookie (backlog full)
    std::uint64_t syn_cookies_accepted = 0;    // ACKs with a valid cookie: a node made
    std::uint64_t syn_cookies_failed = 0;      // ACKs with a wrong or expired cookie
    std::uint64_t challenge_acks_sent = 0;     // RFC 5961 challenge ACKs sent
    std::uint64_t challenge_acks_limited = 0;  // ... and not sent: over the per-second budget
    // Zero-window probes sent before the hand-off (RFC 9293 3.8.6.1: an MPA message or an
    // RTR the peer's window holds back).
    std::uint64_t window_probes = 0;
    // Idle byte streams folded into their lasting state, and made again (CoreConfig::
    // stream_fold_after, docs/design.md "Byte stream").
    std::uint64_t streams_folded = 0;
    std::uint64_t streams_unfolded = 0;
    std::array<std::uint64_t, kDropReasonCount> dropped{};

    std::uint64_t drops(DropReason r) const { return dropped[static_cast<std::size_t>(r)]; }
    std::uint64_t drops_total() const {
        std::uint64_t n = 0;
        for (auto d : dropped) n += d;
        return n;
    }
};

}  // namespace iwcm
