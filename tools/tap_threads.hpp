// What the commands that run on N threads share (`listen --threads`,
// `connect --count --threads`): the thread count by default, the network of
// N queues (a multi-queue TAP, or with --dev an AF_XDP socket per receive
// queue of the interface) and the summed counters of the last line.
//
// Read first: src/io/tap/tap_shards.hpp (the queues, their cores and loops),
// src/io/shared/shared_shards.hpp (the same beside the kernel's TCP), docs/cli.md
// "Every core".
#pragma once

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/shared/shared_shards.hpp"
#include "io/tap/tap_shards.hpp"
#include "iwcm/shard.hpp"
#include "tools/wire_cli.hpp"

namespace iwcm::tools {

// One thread per CPU this process may run on.
inline unsigned cpu_threads() {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 1;
    return static_cast<unsigned>(std::max(1, CPU_COUNT(&allowed)));
}

// The threads' network: queue s of the TAP for thread s, or with --dev the
// AF_XDP socket on receive queue s (shared-address mode).
struct ThreadNet {
    std::unique_ptr<io::TapShards> tap;
    std::unique_ptr<io::SharedShards> shared;
    io::TapShards& net() { return shared ? shared->net() : *tap; }
};

// Opens n queues with a core each; with a TAP the address is the cores'
// (and announced), with --dev the kernel's (the cores follow it).
Expected<ThreadNet, std::string> open_thread_net(const WireOptions& o, const Interface& iface,
                                                 unsigned n);

// The stats line's fields of N threads: their number, the frames handed
// between them, and the connections each thread's core established.
std::vector<std::pair<std::string, std::string>> thread_fields(io::TapShards& net,
                                                               std::uint64_t handed_off);

// Every thread's counters summed; `handed_off` gets the frames read on a
// queue whose thread did not own them.
inline Reporter::Counters sum_thread_counters(io::TapShards& net, std::uint64_t& handed_off) {
    Reporter::Counters c;
    handed_off = 0;
    for (std::uint32_t s = 0; s < net.shards(); ++s) {
        add_stats(c.core, net.core(s).stats());
        const io::TapShardCounters& q = net.counters(s);
        c.tap.frames_in += q.tap.frames_in;
        c.tap.frames_out += q.tap.frames_out;
        c.tap.ignored += q.tap.ignored;
        c.live_nodes += net.core(s).live_nodes();
        handed_off += q.handed_off;
    }
    c.neighbors = net.neighbors().counters();
    return c;
}

}  // namespace iwcm::tools
