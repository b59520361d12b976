// What `iwarp-cm connect` and its --count mode (tools/connect_many.cpp) share.
// Read first: tools/wire_cli.hpp, README.md "Command line".
#pragma once

#include <string>
#include <vector>

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
    StreamOptions data;     // --send-bytes, --expect-bytes: a byte stream before the hold
};

// The checked arguments: the peer, whose MAC to resolve (the peer's own, or
// the gateway's when it is off-link) and the private data.
struct ConnectTarget {
    Endpoint to;
    IpAddr next_hop;
    std::vector<std::byte> pdata;
};

// `--count N [--parallel K]`: opens N connections, at most K in flight, closes
// each once established, and prints the distribution of each phase's time.
int run_connect_many(const ConnectOptions& o, const ConnectTarget& t, Session& s,
                     const Reporter& rep);

// The core's words for an initiator's failure: the exit code and the reason.
// A reset before any MPA reply is "connection refused (reset by peer)"; only
// an event in MPA_REJ_RCVD (the peer's MPA reject) is a rejection.
std::pair<int, std::string> connect_failure(const Event& e);

}  // namespace iwcm::tools
