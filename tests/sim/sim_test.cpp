// The seeded fault simulation as a test: S seeds x K connection attempts
// between several cores (src/io/sim_runner.hpp builds each scenario from its
// seed). A failure prints the seed; `iwarp-cm sim --seed N --log` replays it
// byte for byte and prints every event and command. IWCM_SIM_SEEDS=n scales
// the seeded suites (default 2,500 each, 10,000 over the four).
//
// What the network guarantees, and so what may be checked. Loss,
// duplication, reordering and jitter are what TCP exists for. Corruption
// flips 1 to 3 bits of one byte: a one-byte change alters the 16-bit ones'
// complement sum by a nonzero value below 0xFFFF, so the IPv4 and TCP
// checksums catch every such change in what they cover. What they do not
// cover is the Ethernet header: a corrupted source MAC makes a responder
// answer a MAC nobody has, which looks like loss. So the protocol really
// guarantees exact bytes (private data, MPA words) whenever a frame is taken,
// but never that a given frame arrives: a side may be established while its
// peer failed, when the last frames of the handshake (the MPA reply, the RTR)
// were lost until a timer ran out. The invariants, checked after each seed
// drains (no frame in flight, no deadline on any core):
//
//  Per handle (the event contract, include/iwcm/events.hpp):
//   H1 every connect() handle gets exactly one terminal event; every
//      connect-request handle gets one too, unless its application rejected
//      it (reject() ends the handle without an event); nothing follows it.
//   H2 kEstablished at most once, before the terminal event; on a responder
//      only after accept() succeeded.
//   H3 the terminal event is kDisconnected exactly when the handle was
//      established.
//   H4 once its terminal event is polled (or reject() returned), the handle
//      is stale: state() and every later command answer kStaleHandle; commands
//      on live handles never fail (accept / reject while the request waits,
//      disconnect at any moment).
//   H5 events name the same endpoints throughout; the initiator's name the
//      address and port it connected to.
//  Across the two sides of one attempt (responder handles matched by 4-tuple;
//  a revision-2 attempt reset during MPA retries once at revision 1, so one
//  attempt may meet two responder handles):
//   A1 every connect request matches an attempt; it carries the initiator's
//      private data byte for byte, its revision (or 1 after the fallback),
//      and at revision 2 its IRD, ORD, peer-to-peer bit and RTR set.
//   A2 initiator established => a responder handle of the attempt was
//      accepted, and the reply's private data is what accept() sent.
//   A3 responder established with peer-to-peer => initiator established
//      (the RTR is sent only once the initiator is).
//   A4 both established => same revision, peer-to-peer bit, RTR type and CRC;
//      at revision 2 (RFC 6581 section 7, relaxed): responder ORD <=
//      initiator IRD and initiator ORD <= responder IRD; exactly: the
//      initiator keeps its IRD, the responder's ORD = min(its ORD, initiator
//      IRD), the initiator's ORD = min(its ORD, responder IRD).
//   A5 an initiator rejected by an MPA reject (state MPAREJ_RCVD) was
//      rejected by a reject() on the responder, with that private data.
//  Per core, after draining:
//   C1 live_nodes() == 0, pending_timers() == 0, queued_events() == 0.
//   C2 nodes_created == nodes_destroyed, listeners_created ==
//      listeners_destroyed, established == kEstablished events, accepts and
//      rejects == successful accept() and reject() calls, connect_errors ==
//      failed initiator handles, drops <= frames in.
//   C3 frames: sum(frames_out) - sum(frames_in) == wire sent - wire delivered
//      (loopback frames count on both sides).
//   C4 the run drains: under 5M steps and 30 min of virtual time.
//  Clean seeds (no faults, no disruptions), where nothing is lost, outcomes
//  are exactly what the applications chose:
//   K1 accepted (no IRD or RTR mismatch) => established on both sides;
//      rejected => initiator kRejected/-ECONNREFUSED with the reject's private
//      data; unanswered => initiator kUnreachable (reply timer), responder
//      kConnectError (its reset); dropped by the responder => initiator
//      kRejected; a closed port => kRejected/-ECONNREFUSED; one connect
//      request per attempt.
// An IWCM_ASSERT inside the core aborts; the abort handler prints the seed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "io/sim_runner.hpp"

namespace iwcm::io {
namespace {

std::uint64_t seeds_per_suite() {
    if (const char* e = std::getenv("IWCM_SIM_SEEDS")) return std::strtoull(e, nullptr, 10);
    return 2500;
}

void run_seeds(SimScenario sc, std::uint64_t first, std::uint64_t count) {
    install_seed_reporter();
    auto t0 = std::chrono::steady_clock::now();
    std::uint64_t established = 0, attempts = 0, clean = 0, one_side = 0;
    for (std::uint64_t s = first; s < first + count; ++s) {
        sc.seed = s;
        SimOutcome o = run_scenario(sc);
        established += o.established_both;
        one_side += o.established_one_side;
        attempts += o.attempts;
        clean += o.clean;
        ASSERT_TRUE(o.ok) << describe(o) << "\n  replay: iwarp-cm sim --seed " << s << " --conns "
                          << sc.conns << " --cores " << sc.cores
                          << (sc.faults ? "" : " --no-faults")
                          << (sc.disruptions ? "" : " --no-disruptions") << " --log";
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "sim: seeds %llu..%llu (%llu clean): %llu attempts, %llu established on both sides, %llu "
        "on one; "
        "%.2f s, %.0f seeds/s\n",
        static_cast<unsigned long long>(first), static_cast<unsigned long long>(first + count - 1),
        static_cast<unsigned long long>(clean), static_cast<unsigned long long>(attempts),
        static_cast<unsigned long long>(established), static_cast<unsigned long long>(one_side),
        secs, secs > 0 ? static_cast<double>(count) / secs : 0.0);
    ::testing::Test::RecordProperty("seeds_per_second",
                                    static_cast<int>(secs > 0 ? count / secs : 0));
}

// Four suites of the default scenario (3 cores, 12 attempts, loss up to 30 %,
// disruptions): 10,000 seeds by default, run in parallel by ctest.
TEST(Sim, Seeds1) {
    run_seeds({}, 1, seeds_per_suite());
}
TEST(Sim, Seeds2) {
    run_seeds({}, 1 + seeds_per_suite(), seeds_per_suite());
}
TEST(Sim, Seeds3) {
    run_seeds({}, 1 + 2 * seeds_per_suite(), seeds_per_suite());
}
TEST(Sim, Seeds4) {
    run_seeds({}, 1 + 3 * seeds_per_suite(), seeds_per_suite());
}

// Many concurrent attempts on four cores.
TEST(Sim, ManyConnections) {
    SimScenario sc;
    sc.cores = 4;
    sc.conns = 64;
    run_seeds(sc, 100'001, seeds_per_suite() / 5);
}

// No faults and no disruptions: the strict outcomes (K1) hold for every attempt.
TEST(Sim, CleanNetwork) {
    SimScenario sc;
    sc.faults = false;
    sc.disruptions = false;
    run_seeds(sc, 200'001, seeds_per_suite() / 2);
}

// Heavy loss: everything still ends and nothing leaks.
TEST(Sim, HeavyLoss) {
    SimScenario sc;
    sc.max_loss = 0.6;
    run_seeds(sc, 300'001, seeds_per_suite() / 5);
}

// A seed replays exactly: same outcome, frame for frame.
TEST(Sim, ReplayIsDeterministic) {
    for (std::uint64_t s : {7ull, 42ull, 1234ull}) {
        SimScenario sc;
        sc.seed = s;
        SimOutcome a = run_scenario(sc);
        SimOutcome b = run_scenario(sc);
        EXPECT_EQ(describe(a), describe(b));
        EXPECT_EQ(a.frames, b.frames);
        EXPECT_EQ(a.steps, b.steps);
    }
}

}  // namespace
}  // namespace iwcm::io
