// What `iwarp-cm connect` and its --count mode (tools/connect_many.cpp) share.
// Read first: tools/wire_cli.hpp, docs/cli.md.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tools/commands.hpp"
#include "tools/transfer.hpp"
#include "tools/wire_cli.hpp"

namespace iwcm::tools {

struct ConnectOptions {
    WireOptions wire;
    std::string to;
    double timeout_s = 10;
    double hold_s = 0;
    bool abort = false;
    unsigned count = 0;     // 0: one connection, held for --hold; N: the cmtime-style run
    unsigned parallel = 1;  // with --count: connections in flight at most
    unsigned threads = 0;   // with --count: threads, one per TAP queue (0: one per CPU if it can)
    StreamOptions data;     // --send-bytes, --expect-bytes: a byte stream before the hold
};

// The checked arguments: the peer, whose MAC to resolve (the peer's own, or
// the gateway's when it is off-link) and the private data.
struct ConnectTarget {
    Endpoint to;
    IpAddr next_hop;
    std::vector<std::byte> pdata;
};

// The connections of `--count` in flight and what they measured, on one
// core: the phases of each (tools/connect_many.cpp says where each begins and
// ends), the counts, the first failure. Used by one thread, or by each of N.
class Flights {
public:
    enum Phase : std::size_t { kResolve, kTcp, kMpa, kEstablished, kClose, kPhases };
    using Samples = std::array<std::vector<double>, kPhases>;

    // A connection just started: the slot began at `start`, the peer's MAC
    // was known at `resolved`, connect() (the SYN) at `syn_sent`.
    void opened(ConnHandle h, Instant start, Instant resolved, Instant syn_sent);
    // The core's trace: the node left SYN_SENT (the SYN-ACK came).
    void on_trace(const TraceRecord& r);
    // An event of `core`: an established connection is closed (FIN), a
    // terminal one counted; false for a handle not in flight.
    bool on_event(Core& core, Instant now, const Event& e, const Reporter& rep);
    // A connection failed: counted; the first failure names the result.
    void failed(int code, std::string reason);
    // The run ended early (timeout, signal, device error): this names the
    // result, whatever failed before.
    void end(int code, std::string reason);
    std::vector<ConnHandle> open_handles() const;
    std::size_t in_flight() const { return open_.size(); }

    const Samples& samples() const { return ms_; }
    unsigned completed() const { return completed_; }
    unsigned failures() const { return failed_; }
    int code() const { return code_; }
    const std::string& reason() const { return reason_; }
    // Adds another thread's samples and counts (its failure if none here).
    void merge(const Flights& other);

private:
    struct Attempt {
        Instant start{};
        Instant resolved{};
        Instant syn_sent{};
        std::optional<Instant> syn_acked;
        Instant close_sent{};
        ConnHandle handle;
    };
    static std::uint64_t key(ConnHandle h) { return (std::uint64_t{h.generation} << 32) | h.index; }

    std::map<std::uint64_t, Attempt> open_;  // by handle
    Samples ms_;
    unsigned completed_ = 0;
    unsigned failed_ = 0;
    int code_ = exit_codes::kOk;
    std::string reason_;
};

// The parameters of one --count connection to the target through `iface`.
ConnectParams count_params(const ConnectOptions& o, const ConnectTarget& t, const Interface& iface,
                           const MacAddr& peer_mac);

// The cmtime line (or table): the distribution of each phase.
void print_cmtime(const Reporter& rep, Instant now, const ConnectOptions& o, const Endpoint& to,
                  const Flights& f);

// `--count N [--parallel K]`: opens N connections, at most K in flight, closes
// each once established, and prints the distribution of each phase's time.
int run_connect_many(const ConnectOptions& o, const ConnectTarget& t, Session& s,
                     Progress& progress, const Reporter& rep);
// The same on `--threads N` queues of a multi-queue TAP (tools/connect_threads.cpp):
// each thread runs its share of the N connections and of K. std::nullopt
// (with `fall_back`) when the device cannot take N queues.
std::optional<int> run_connect_threads(const ConnectOptions& o, const ConnectTarget& t,
                                       const Interface& iface, const Reporter& rep, bool fall_back);

// --dev: the kernel's route names the next hop (the peer or a gateway) into t.next_hop;
// with no route, the failure reported and its exit code. `Shared` is io::SharedHost or
// io::SharedShards.
template <class Shared>
std::optional<int> route_next_hop(Shared& shared, ConnectTarget& t, const Reporter& rep) {
    auto hop = shared.next_hop(t.to.addr);
    if (!hop) {
        rep.fail(hop.error());
        return exit_codes::kResolution;
    }
    t.next_hop = *hop;
    return std::nullopt;
}

// The core's words for an initiator's failure: the exit code and the reason.
// A reset before any MPA reply is "connection refused (reset by peer)"; only
// an event in MPA_REJ_RCVD (the peer's MPA reject) is a rejection.
std::pair<int, std::string> connect_failure(const Event& e);

}  // namespace iwcm::tools
