// One shard of the sharded setup benchmark: the client and the server core of
// shard i, driven by thread i over the in-memory network on N threads.
//
// Read first: bench/setup_pair.hpp (what one setup is; this is the same
// exchange and the same checks), src/io/shard_net.hpp (the network: frames
// steered by 4-tuple, ports that hash back, listeners in every shard). Used
// by `iwarp-cm bench` (tools/bench_shards.cpp) for the setup-rate scaling.
//
// Thread i owns client core i and server core i. The client's ephemeral ports
// hash back to shard i and the flow hash is symmetric, so every frame of its
// connections, both ways, belongs to shard i: the network hands it from one
// core to the other inside the thread, and no frame crosses threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench/setup_pair.hpp"
#include "io/shard_net.hpp"
#include "iwcm/core.hpp"

namespace iwcm::bench {

class ShardSetup {
public:
    static constexpr std::size_t kClient = 0;
    static constexpr std::size_t kServer = 1;

    // The two hosts of the network, as SetupPair configures its two cores.
    static std::vector<CoreConfig> hosts() {
        std::vector<CoreConfig> h(2);
        for (std::uint8_t i = 0; i < 2; ++i) {
            h[i].mac = mac(static_cast<std::uint8_t>(0x0a + i));
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
        : net_(net),
          shard_(shard),
          a_(net.core(shard, kClient)),
          b_(net.core(shard, kServer)),
          req_pd_(request_pdata),
          rep_pd_(reply_pdata) {
        for (std::size_t i = 0; i < req_pd_.size(); ++i)
            req_pd_[i] = static_cast<std::byte>('a' + i % 26);
        for (std::size_t i = 0; i < rep_pd_.size(); ++i)
            rep_pd_[i] = static_cast<std::byte>('A' + i % 26);
        cp_.local = {SetupPair::ip_a(), 0};
        cp_.remote = {SetupPair::ip_b(), SetupPair::kChurnPort};
        cp_.remote_mac = mac(0x0b);
        cp_.private_data = req_pd_;
        cp_.ird = cp_.ord = 16;
        cp_.mpa_revision = 2;
        ap_.private_data = rep_pd_;
        ap_.ird = ap_.ord = 16;
    }

    const SetupCounters& counters() const { return c_; }

    // Starts `count` connections, runs them to completion; returns the
    // complete setups (kEstablished on both sides with the right private data).
    std::size_t setup_round(std::size_t count) {
        std::uint64_t a0 = c_.established_a, b0 = c_.established_b;
        for (std::size_t i = 0; i < count; ++i) {
            auto h = a_.connect(now_, cp_);
            if (!h) {
                ++c_.errors;
                break;
            }
            handles_.push_back(*h);
            ++c_.connects;
        }
        pump();
        return static_cast<std::size_t>(std::min(c_.established_a - a0, c_.established_b - b0));
    }

    // Aborts every connection (RST) and drains both sides.
    void teardown_all() {
        for (ConnHandle h : handles_)
            if (!a_.disconnect(now_, h, DisconnectMode::kAbortive)) ++c_.errors;
        handles_.clear();
        pump();
    }

    // One pass of the network and the events, for a thread that waits for
    // the others (frames from other shards may still come).
    // The order is SetupPair::pump's: the responder's events (its accept)
    // before its frames go out, so that the MPA reply carries the ACK.
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
    static MacAddr mac(std::uint8_t last) { return MacAddr{{0x02, 0, 0, 0, 0, last}}; }

    void pump() {
        for (int round = 0; round < 100000; ++round) {
            std::size_t moved = step();
            c_.frames += moved;
            if (moved == 0) return;
        }
        ++c_.errors;
    }

    void events_a() {
        while (auto e = a_.poll_event()) {
            if (e->type == EventType::kEstablished && e->private_data.size() == rep_pd_.size() &&
                e->mpa.revision == 2) {
                ++c_.established_a;
            } else if (e->type == EventType::kDisconnected) {
                ++c_.disconnected_a;
            } else {
                ++c_.errors;
            }
        }
    }

    void events_b() {
        while (auto e = b_.poll_event()) {
            if (e->type == EventType::kConnectRequest) {
                if (e->private_data.size() != req_pd_.size() || e->mpa.revision != 2) ++c_.errors;
                ++c_.requests_b;
                if (!b_.accept(now_, e->conn, ap_)) ++c_.errors;
            } else if (e->type == EventType::kEstablished) {
                ++c_.established_b;
            } else if (e->type == EventType::kDisconnected) {
                ++c_.disconnected_b;
            } else {
                ++c_.errors;
            }
        }
    }

    io::ShardNet& net_;
    std::uint32_t shard_;
    Core& a_;
    Core& b_;
    Instant now_ = at_ms(1000);
    std::vector<std::byte> req_pd_;
    std::vector<std::byte> rep_pd_;
    ConnectParams cp_;
    AcceptParams ap_;
    std::vector<ConnHandle> handles_;
    SetupCounters c_;
};

}  // namespace iwcm::bench
