// The seeded scenario engine: many connection attempts between several cores
// on the simulated network, under faults and random application behaviour,
// with invariants checked once everything has drained.
//
// Read first: src/io/sim/sim.hpp (the network and its fault model), docs/design.md ("Code
// style", "Time and chance": a seed replays a run exactly), include/iwcm/events.hpp (the
// event contract this checks). Shared by tests/sim/ and `iwarp-cm sim`.
//
// One scenario, from its seed alone:
//   * 2 to 4 cores (default 3) on one segment, each with an IPv4 and an IPv6
//     address, each listening on port 4791 (wildcard or specific address) and
//     on 4792 with a backlog of 2; nothing listens on 4793. Per core, a random
//     MPA configuration (revision, CRC, peer-to-peer bit, RTR types).
//   * K connection attempts (`conns`) between random cores (sometimes a core
//     to itself: loopback), IPv4 or IPv6, with random private data, IRD/ORD
//     and MPA revision, started at random instants in the first 200 ms; those
//     to port 4792 (IPv4) all go to one core and start at one instant, so
//     that its backlog overflows and SYN cookies answer.
//   * Random faults per directed link: loss in [0, max_loss], duplication,
//     reordering, corruption, latency and jitter. One seed in eight is clean
//     (no fault, no disruption) and is held to stricter outcomes.
//   * A random application on every core: connect requests are accepted,
//     rejected, abandoned (no answer: the accept timer decides) or torn down,
//     after random delays; established connections are closed gracefully or
//     abortively at random moments; commands on ended handles must say stale.
//   * Disruptions at random moments: destroy_listen (and listen again later),
//     address down (and up again later).
//   * At 3 s of virtual time the applications close what they hold and
//     destroy their listeners; the network then runs until nothing is left to
//     do (no frame in flight, no deadline on any core).
//
// The invariants are listed where they are checked, in sim_runner.cpp, and in
// the header comment of tests/sim/sim_test.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "io/sim/sim.hpp"

namespace iwcm::io {

struct SimScenario {
    std::uint64_t seed = 1;
    std::size_t cores = 3;   // 2 to 4
    std::size_t conns = 12;  // K: connection attempts
    double max_loss = 0.30;  // the loss of each link is drawn in [0, max_loss]
    // LinkFaults::shut_window of each link, drawn in [0, max_shut_window] (0: none).
    double max_shut_window = 0;
    bool faults = true;       // false: no loss, duplication, reordering or corruption
    bool disruptions = true;  // destroy_listen and address down at random moments
    bool log = false;         // print every event and command to stdout
};

struct SimOutcome {
    std::uint64_t seed = 0;
    bool ok = true;
    std::string failure;  // the first invariant that broke, with details
    bool clean = false;   // no faults and no disruptions: strict outcomes
    // What happened to the attempts.
    std::size_t attempts = 0;
    std::size_t refused_locally = 0;  // connect() returned an error (address down)
    std::size_t established_both = 0;
    std::size_t established_one_side = 0;
    std::size_t rejected = 0;  // MPA reject delivered to the initiator
    std::size_t failed = 0;    // any other outcome
    // Attempts that nothing but the network and the responder's application can stop (the
    // liveness bound of sim_test.cpp): to port 4791, with an RTR type in common by the
    // two cores' configurations, and whose initiator's application never gives up.
    std::size_t eligible = 0;
    std::size_t eligible_established = 0;  // ... established on both sides
    // What the run exercised, summed over the cores' stats.
    std::uint64_t syn_cookies_sent = 0;
    std::uint64_t syn_cookies_accepted = 0;
    std::uint64_t v1_fallbacks = 0;
    std::uint64_t terminates_sent = 0;
    std::size_t rtr_send = 0, rtr_write = 0, rtr_read = 0;  // established both, per RTR type
    // Costs.
    std::uint64_t frames = 0;  // frames on the wire
    std::uint64_t steps = 0;
    std::uint64_t retransmissions = 0;
    std::uint64_t window_probes = 0;  // Stats::window_probes, summed
    std::uint64_t windows_shut = 0;   // segments the network gave a zero window
    double virtual_seconds = 0;       // virtual time until drained
};

SimOutcome run_scenario(const SimScenario& scenario);

// A one-line summary of an outcome (for logs and the CLI).
std::string describe(const SimOutcome& outcome);

// Installs (once) a SIGABRT handler that prints the seed in progress, so that
// an IWCM_ASSERT inside the core still names the seed that replays it.
void install_seed_reporter();

}  // namespace iwcm::io
