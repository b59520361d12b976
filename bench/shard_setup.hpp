// One shard of the sharded setup benchmark: the client and the server core of
// shard i, driven by thread i over the in-memory network on N threads.
//
// Read first: bench/setup_pair.hpp (what one setup is), bench/setup_driver.hpp
// (the batches and the checks, shared with SetupPair), src/io/threads/shard_net.hpp
// (the network: frames steered by 4-tuple, ports that hash back, listeners in
// every shard). Used by `iwarp-cm bench` (tools/bench_shards.cpp) for the
// setup-rate scaling.
//
// Thread i owns client core i and server core i. The client's ephemeral ports
// hash back to shard i and the flow hash is symmetric, so every frame of its
// connections, both ways, belongs to shard i: the network hands it from one
// core to the other inside the thread, and no frame crosses threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench/setup_driver.hpp"
#include "bench/setup_pair.hpp"
#include "io/threads/shard_net.hpp"
#include "iwcm/core.hpp"

namespace iwcm::bench {

class ShardSetup : public SetupDriver<ShardSetup> {
public:
    static constexpr std::size_t kClient = 0;
    static constexpr std::size_t kServer = 1;

    // The two hosts of the network, as SetupPair configures its two cores.
    static std::vector<CoreConfig> hosts() {
        std::vector<CoreConfig> h(2);
        for (std::uint8_t i = 0; i < 2; ++i) {
            h[i].mac = bench_mac(static_cast<std::uint8_t>(0x0a + i));
            h[i].isn_secret.fill(static_cast<std::uint8_t>(i + 1));
        }
        return h;
    }

    // Addresses on both hosts and the churn listener on every server core.
    static bool prepare(io::ShardNet& net) {
        ListenParams lp;
        lp.local = {SetupPair::ip_b(), SetupPair::kChurnPort};
        lp.backlog = 1u << 30;
        return net.add_address(kClient, SetupPair::ip_a()).has_value() &&
               net.add_address(kServer, SetupPair::ip_b()).has_value() &&
               net.listen(kServer, lp).has_value();
    }

    ShardSetup(io::ShardNet& net, std::uint32_t shard, std::size_t request_pdata,
               std::size_t reply_pdata)
        : SetupDriver(net.core(shard, kClient), net.core(shard, kServer), {SetupPair::ip_a(), 0},
                      {SetupPair::ip_b(), SetupPair::kChurnPort}, request_pdata, reply_pdata),
          net_(net),
          shard_(shard) {}

    std::size_t setup_round(std::size_t count) {
        return SetupDriver::setup_round(count, SetupPair::kChurnPort);
    }

    // One pass of the network and the events, for a thread that waits for
    // the others (frames from other shards may still come). The order is
    // SetupPair::step's.
    std::size_t step() {
        std::size_t moved = net_.receive_across(shard_, now_);
        moved += net_.drain(shard_, kClient, now_);
        events_b();
        moved += net_.drain(shard_, kServer, now_);
        events_a();
        net_.publish(shard_);
        return moved;
    }

private:
    io::ShardNet& net_;
    std::uint32_t shard_;
};

}  // namespace iwcm::bench
