// What the setup benchmarks do over any network of two cores: start a batch
// of connections, run them to completion checking every event, tear them
// down abortively.
//
// Read first: bench/setup_pair.hpp (what one setup is: the frames, the
// events, what counts as complete). The networks are the derived classes:
// bench/setup_pair.hpp (two cores wired back to back) and
// bench/shard_setup.hpp (the two cores of one shard of the in-memory network
// on N threads). Each gives step(): one pass that moves every frame waiting
// on both cores, calling events_b() after the initiator's frames and
// events_a() after the responder's (so that the responder's accept goes out
// with the ACK it owes), and returns the frames moved.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "iwcm/core.hpp"

namespace iwcm::bench {

struct SetupCounters {
    std::uint64_t connects = 0;       // connect() calls that succeeded
    std::uint64_t established_a = 0;  // kEstablished on the initiator, reply pdata checked
    std::uint64_t established_b = 0;  // kEstablished on the responder
    std::uint64_t requests_b = 0;     // kConnectRequest on the responder, request pdata checked
    std::uint64_t disconnected_a = 0;
    std::uint64_t disconnected_b = 0;
    std::uint64_t errors = 0;  // failed commands, other events, wrong private data
    std::uint64_t frames = 0;  // frames moved between the cores
};

// The MAC address of the benchmarks' host `last` (0x0a: initiator, 0x0b: responder).
inline MacAddr bench_mac(std::uint8_t last) {
    return MacAddr{{0x02, 0, 0, 0, 0, last}};
}

template <class Net>
class SetupDriver {
public:
    // The time every call of the driver hands the cores (it does not move).
    Instant now() const { return now_; }
    const SetupCounters& counters() const { return c_; }
    std::vector<ConnHandle>& handles() { return handles_; }

    // Starts `count` connections to `port`; their SYNs wait in A's queue.
    // Appends the handles to handles(); returns how many were started.
    std::size_t connect_batch(std::size_t count, std::uint16_t port) {
        cp_.remote.port = port;
        std::size_t started = 0;
        for (; started < count; ++started) {
            auto h = a_.connect(now_, cp_);
            if (!h) {
                ++c_.errors;
                break;
            }
            handles_.push_back(*h);
        }
        c_.connects += started;
        return started;
    }

    // Starts a batch, runs it to completion; returns the complete setups
    // (kEstablished on both sides with the right private data).
    std::size_t setup_round(std::size_t count, std::uint16_t port) {
        const std::uint64_t a0 = c_.established_a, b0 = c_.established_b;
        connect_batch(count, port);
        pump();
        return static_cast<std::size_t>(std::min(c_.established_a - a0, c_.established_b - b0));
    }

    // Aborts every connection in handles() (RST) and drains both sides.
    void teardown_all() {
        for (ConnHandle h : handles_)
            if (!a_.disconnect(now_, h, DisconnectMode::kAbortive)) ++c_.errors;
        handles_.clear();
        pump();
    }

    // Passes of the network and the events until nothing moves.
    void pump() {
        for (int round = 0; round < 100000; ++round) {
            const std::size_t moved = static_cast<Net&>(*this).step();
            c_.frames += moved;
            if (moved == 0) return;
        }
        ++c_.errors;
    }

protected:
    // `a` connects to `remote` (its host's MAC 0x0b) with `request_pdata`
    // bytes of private data; `b` accepts with `reply_pdata` bytes.
    SetupDriver(Core& a, Core& b, Endpoint local, Endpoint remote, std::size_t request_pdata,
                std::size_t reply_pdata)
        : a_(a), b_(b), req_pd_(request_pdata), rep_pd_(reply_pdata) {
        for (std::size_t i = 0; i < req_pd_.size(); ++i)
            req_pd_[i] = static_cast<std::byte>('a' + i % 26);
        for (std::size_t i = 0; i < rep_pd_.size(); ++i)
            rep_pd_[i] = static_cast<std::byte>('A' + i % 26);
        cp_.local = local;
        cp_.remote = remote;
        cp_.remote_mac = bench_mac(0x0b);
        cp_.private_data = req_pd_;
        cp_.ird = cp_.ord = 16;
        cp_.mpa_revision = 2;
        ap_.private_data = rep_pd_;
        ap_.ird = ap_.ord = 16;
    }

    void events_a() {
        while (auto e = a_.poll_event()) {
            switch (e->type) {
                case EventType::kEstablished:
                    if (same(e->private_data, rep_pd_) && e->mpa.revision == 2) {
                        ++c_.established_a;
                    } else {
                        ++c_.errors;
                    }
                    break;
                case EventType::kDisconnected: ++c_.disconnected_a; break;
                case EventType::kConnectRequest:
                case EventType::kRejected:
                case EventType::kUnreachable:
                case EventType::kConnectError:
                case EventType::kAddressDown:
                case EventType::kAddressUp:
                case EventType::kReadable:
                case EventType::kWritable: ++c_.errors; break;
            }
        }
    }

    void events_b() {
        while (auto e = b_.poll_event()) {
            switch (e->type) {
                case EventType::kConnectRequest:
                    if (!same(e->private_data, req_pd_) || e->mpa.revision != 2) ++c_.errors;
                    ++c_.requests_b;
                    if (!b_.accept(now_, e->conn, ap_)) ++c_.errors;
                    break;
                case EventType::kEstablished: ++c_.established_b; break;
                case EventType::kDisconnected: ++c_.disconnected_b; break;
                case EventType::kRejected:
                case EventType::kUnreachable:
                case EventType::kConnectError:
                case EventType::kAddressDown:
                case EventType::kAddressUp:
                case EventType::kReadable:
                case EventType::kWritable: ++c_.errors; break;
            }
        }
    }

    Core& a_;
    Core& b_;
    Instant now_ = at_ms(1000);
    SetupCounters c_;

private:
    // The private data an event carries is the other side's, byte for byte (memcmp: a
    // byte loop here would be a few hundred of the profiled instructions per setup).
    static bool same(std::span<const std::byte> got, const std::vector<std::byte>& sent) {
        return got.size() == sent.size() &&
               (got.empty() || std::memcmp(got.data(), sent.data(), got.size()) == 0);
    }

    std::vector<std::byte> req_pd_;
    std::vector<std::byte> rep_pd_;
    ConnectParams cp_;
    AcceptParams ap_;
    std::vector<ConnHandle> handles_;
};

}  // namespace iwcm::bench
