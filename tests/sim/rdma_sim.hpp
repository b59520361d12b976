// What the data path's seeded simulations share (rdma_sim_test.cpp, verbs_sim_test.cpp):
// the faults a seed draws for its links, when they start, and the per-frame trace and
// per-seed log line asked for through the environment.
//
// Read first: src/io/sim/sim.hpp (the network, its faults and its counters).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cm/harness.hpp"
#include "io/sim/rng.hpp"
#include "io/sim/sim.hpp"
#include "wire/frame.hpp"

namespace iwcm::test {

// One seed's faults, the same on every link: loss of 1-5 %, duplication of 0-3 %,
// reordering of 0-5 %, corruption of 0-2 %, jitter up to 200 us (drawn in that order).
// Loss, duplication and reordering run from the first SYN; corruption only once the QPs
// exist (qps_ready): the simulator has no Ethernet FCS, so a flipped source MAC in a SYN
// would be believed by the listener and its SYN-ACKs would go nowhere (a real NIC drops
// that frame).
class SeedFaults {
public:
    explicit SeedFaults(io::Rng& draw) {
        full_.loss = static_cast<double>(1 + draw.below(5)) / 100.0;
        full_.duplicate = static_cast<double>(draw.below(4)) / 100.0;
        full_.reorder = static_cast<double>(draw.below(6)) / 100.0;
        full_.corrupt = static_cast<double>(draw.below(3)) / 100.0;
        full_.jitter = std::chrono::microseconds(draw.below(200));
    }
    const io::LinkFaults& full() const { return full_; }
    void start(io::SimNetwork& net) const {
        io::LinkFaults setup = full_;
        setup.corrupt = 0;
        net.set_faults(setup);
    }
    void qps_ready(io::SimNetwork& net) const {
        if (full_.corrupt > 0 && net.faults(0, 1).corrupt == 0) net.set_faults(full_);
    }

private:
    io::LinkFaults full_;
};

// The connection from ip_a() to the listener on ip_b() port 4791.
inline ConnectParams connect_to_b() {
    ConnectParams p;
    p.local = {ip_a(), 0};
    p.remote = {ip_b(), 4791};
    p.remote_mac = kMacB;
    return p;
}

// IWCM_RDMA_SIM_TRACE=1: a line per frame on the wire.
inline void trace_if_asked(io::SimNetwork& net) {
    if (std::getenv("IWCM_RDMA_SIM_TRACE") == nullptr) return;
    net.set_observer([](const io::FrameRecord& r) {
        auto p = wire::parse_tcp_frame(r.bytes);
        std::printf("%.6f %zu->%zu %s", r.sent.time_since_epoch().count() / 1e9, r.from, r.to,
                    io::to_string(r.fate));
        if (p)
            std::printf(" seq %u ack %u len %zu flags %02x", p->repr.tcp.seq.value(),
                        p->repr.tcp.ack.value(), p->payload.size(), p->repr.tcp.flags);
        std::printf("\n");
    });
}

// IWCM_RDMA_SIM_LOG=1: a line per seed that passed, with what the network did to it.
inline void log_if_asked(std::uint64_t seed, const std::string& what, const io::SimNetwork& net) {
    if (std::getenv("IWCM_RDMA_SIM_LOG") == nullptr) return;
    const auto& k = net.counters();
    std::printf(
        "seed %llu ok%s: %llu frames, %llu lost, %llu duplicated, %llu reordered, "
        "%llu corrupted, %.3f s virtual\n",
        static_cast<unsigned long long>(seed), what.c_str(),
        static_cast<unsigned long long>(k.sent), static_cast<unsigned long long>(k.lost),
        static_cast<unsigned long long>(k.duplicated), static_cast<unsigned long long>(k.reordered),
        static_cast<unsigned long long>(k.corrupted),
        std::chrono::duration<double>(net.now().time_since_epoch()).count());
}

}  // namespace iwcm::test
