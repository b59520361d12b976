// Two cores wired back to back for benchmarks: connection setup in batches,
// abortive teardown, and the process's resident memory.
//
// Read first: include/iwcm/core.hpp (the driving contract), tests/cm/harness.hpp
// (the same wiring for tests), bench/setup_driver.hpp (the batches and the
// event checks, shared with bench/shard_setup.hpp). Used by `iwarp-cm bench` (tools/bench.cpp) and
// the Google benchmarks (bench/setup_bench.cpp); results in docs/perf.md.
//
// The wiring costs nothing per frame: a view from a.poll_transmit() stays valid
// until the next call of any member of `a`, so it is handed straight to
// b.receive() without a copy. One setup is the whole iWARP connection setup:
// SYN, SYN-ACK, ACK + MPA revision-2 request with private data, reply with
// private data, RTR (zero-length SEND, peer-to-peer), the final ACK, and every
// event polled on both sides (the responder accepts from its kConnectRequest).
// A setup counts only when both sides reported kEstablished with the private
// data of the other side. Teardown is abortive (RST): both nodes are gone at
// once, with no TIME_WAIT to wait out.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "iwcm/core.hpp"
#include "setup_driver.hpp"

namespace iwcm::bench {

// Resident set size of this process, in bytes (/proc/self/statm).
inline std::size_t rss_bytes() {
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    if (f == nullptr) return 0;
    unsigned long long size = 0, resident = 0;
    int n = std::fscanf(f, "%llu %llu", &size, &resident);
    std::fclose(f);
    if (n != 2) return 0;
    return static_cast<std::size_t>(resident) * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// The two cores a SetupPair owns, made before its SetupDriver base refers to them.
struct PairCores {
    Core a;
    Core b;
};

class SetupPair : private PairCores, public SetupDriver<SetupPair> {
public:
    // The port every benchmark connects to; its listener is the first one, so
    // that the listener match of a SYN finds it at once (see add_listener).
    static constexpr std::uint16_t kChurnPort = 5000;
    // Ephemeral ports per (local address, remote endpoint): 49152..65535.
    static constexpr std::size_t kPortsPerRemote = 16000;

    // checksum_offload: both cores skip the IPv4 header and TCP checksums
    // (CoreConfig::checksum_offload), as Linux's loopback skips the TCP one.
    explicit SetupPair(std::size_t request_pdata = 32, std::size_t reply_pdata = 32,
                       bool checksum_offload = false)
        : PairCores{Core(config(0x0a, 1, checksum_offload)),
                    Core(config(0x0b, 2, checksum_offload))},
          SetupDriver(PairCores::a, PairCores::b, {ip_a(), 0}, {ip_b(), kChurnPort}, request_pdata,
                      reply_pdata) {
        ok_ = a_.add_address(ip_a()).has_value() && b_.add_address(ip_b()).has_value();
        ok_ = ok_ && add_listener(kChurnPort);
    }

    bool ok() const { return ok_; }
    Core& a() { return a_; }
    Core& b() { return b_; }

    // A listener on B with a backlog big enough to hold every half-open node.
    bool add_listener(std::uint16_t port) {
        ListenParams lp;
        lp.local = {ip_b(), port};
        lp.backlog = 1u << 30;
        return b_.listen(lp).has_value();
    }

    std::size_t connect_batch(std::size_t count, std::uint16_t port = kChurnPort) {
        return SetupDriver::connect_batch(count, port);
    }
    std::size_t setup_round(std::size_t count, std::uint16_t port = kChurnPort) {
        return SetupDriver::setup_round(count, port);
    }

    // One pass: A's frames to B, B's events, B's frames to A, A's events. Each frame goes
    // with the flow hash its sender knows (the cores share the default flow key), as
    // Linux's loopback carries skb->hash from sender to receiver.
    std::size_t step() {
        std::size_t moved = 0;
        while (auto t = a_.poll_transmit_hashed()) {
            b_.receive(now_, t->frame, t->flow_hash);
            ++moved;
        }
        events_b();
        while (auto t = b_.poll_transmit_hashed()) {
            a_.receive(now_, t->frame, t->flow_hash);
            ++moved;
        }
        events_a();
        return moved;
    }

    // Half-open: starts `count` connections whose SYNs reach B and whose
    // SYN-ACKs are lost. A holds SYN_SENT nodes, B SYN_RCVD ones.
    std::size_t half_open_round(std::size_t count, std::uint16_t port) {
        std::size_t n = connect_batch(count, port);
        while (auto t = a_.poll_transmit_hashed()) {
            b_.receive(now_, t->frame, t->flow_hash);
            ++c_.frames;
        }
        while (b_.poll_transmit()) {
        }
        return n;
    }

    static IpAddr ip_a() { return Ipv4Addr{{10, 0, 0, 1}}; }
    static IpAddr ip_b() { return Ipv4Addr{{10, 0, 0, 2}}; }

private:
    static CoreConfig config(std::uint8_t mac_last, std::uint8_t secret, bool checksum_offload) {
        CoreConfig c;
        c.mac = bench_mac(mac_last);
        c.isn_secret.fill(secret);
        c.checksum_offload = checksum_offload;
        return c;
    }

    bool ok_ = false;
};

}  // namespace iwcm::bench
