// Two cores wired back to back for benchmarks: connection setup in batches,
// abortive teardown, and the process's resident memory.
//
// Read first: include/iwcm/core.hpp (the driving contract), tests/cm/harness.hpp
// (the same wiring for tests). Used by `iwarp-cm bench` (tools/bench.cpp) and
// the Google benchmarks (bench/setup_bench.cpp); results in README.md ("Performance").
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

class SetupPair {
public:
    // The port every benchmark connects to; its listener is the first one, so
    // that the listener match of a SYN finds it at once (see add_listener).
    static constexpr std::uint16_t kChurnPort = 5000;
    // Ephemeral ports per (local address, remote endpoint): 49152..65535.
    static constexpr std::size_t kPortsPerRemote = 16000;

    explicit SetupPair(std::size_t request_pdata = 32, std::size_t reply_pdata = 32)
        : a_(config(0x0a, 1)), b_(config(0x0b, 2)), req_pd_(request_pdata), rep_pd_(reply_pdata) {
        for (std::size_t i = 0; i < req_pd_.size(); ++i)
            req_pd_[i] = static_cast<std::byte>('a' + i % 26);
        for (std::size_t i = 0; i < rep_pd_.size(); ++i)
            rep_pd_[i] = static_cast<std::byte>('A' + i % 26);
        ok_ = a_.add_address(ip_a()).has_value() && b_.add_address(ip_b()).has_value();
        ok_ = ok_ && add_listener(kChurnPort);
        cp_.local = {ip_a(), 0};
        cp_.remote = {ip_b(), kChurnPort};
        cp_.remote_mac = mac(0x0b);
        cp_.private_data = req_pd_;
        cp_.ird = 16;
        cp_.ord = 16;
        cp_.mpa_revision = 2;
        ap_.private_data = rep_pd_;
        ap_.ird = 16;
        ap_.ord = 16;
    }

    bool ok() const { return ok_; }
    Core& a() { return a_; }
    Core& b() { return b_; }
    const SetupCounters& counters() const { return c_; }
    std::vector<ConnHandle>& handles() { return handles_; }

    // A listener on B with a backlog big enough to hold every half-open node.
    bool add_listener(std::uint16_t port) {
        ListenParams lp;
        lp.local = {ip_b(), port};
        lp.backlog = 1u << 30;
        return b_.listen(lp).has_value();
    }

    // Starts `count` connections to `port`; their SYNs wait in A's queue.
    // Appends the handles to handles(); returns how many were started.
    std::size_t connect_batch(std::size_t count, std::uint16_t port = kChurnPort) {
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

    // Moves frames both ways and polls events until both cores are quiet. The
    // responder accepts every request with its reply private data.
    void pump() {
        for (int round = 0; round < 100000; ++round) {
            bool moved = false;
            while (auto f = a_.poll_transmit()) {
                b_.receive(now_, *f);
                ++c_.frames;
                moved = true;
            }
            events_b();
            while (auto f = b_.poll_transmit()) {
                a_.receive(now_, *f);
                ++c_.frames;
                moved = true;
            }
            events_a();
            if (!moved) return;
        }
        ++c_.errors;
    }

    // Starts a batch, runs it to completion; returns the complete setups.
    std::size_t setup_round(std::size_t count, std::uint16_t port = kChurnPort) {
        std::uint64_t a0 = c_.established_a, b0 = c_.established_b;
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

    // Half-open: starts `count` connections whose SYNs reach B and whose
    // SYN-ACKs are lost. A holds SYN_SENT nodes, B SYN_RCVD ones.
    std::size_t half_open_round(std::size_t count, std::uint16_t port) {
        std::size_t n = connect_batch(count, port);
        while (auto f = a_.poll_transmit()) {
            b_.receive(now_, *f);
            ++c_.frames;
        }
        while (b_.poll_transmit()) {
        }
        return n;
    }

    static IpAddr ip_a() { return Ipv4Addr{{10, 0, 0, 1}}; }
    static IpAddr ip_b() { return Ipv4Addr{{10, 0, 0, 2}}; }

private:
    static MacAddr mac(std::uint8_t last) { return MacAddr{{0x02, 0, 0, 0, 0, last}}; }
    static CoreConfig config(std::uint8_t mac_last, std::uint8_t secret) {
        CoreConfig c;
        c.mac = mac(mac_last);
        c.isn_secret.fill(secret);
        return c;
    }

    void events_a() {
        while (auto e = a_.poll_event()) {
            switch (e->type) {
                case EventType::kEstablished:
                    if (e->private_data.size() == rep_pd_.size() && e->mpa.revision == 2) {
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
                    if (e->private_data.size() != req_pd_.size() || e->mpa.revision != 2)
                        ++c_.errors;
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

    Core a_;
    Core b_;
    bool ok_ = false;
    Instant now_ = at_ms(1000);
    std::vector<std::byte> req_pd_;
    std::vector<std::byte> rep_pd_;
    ConnectParams cp_;
    AcceptParams ap_;
    std::vector<ConnHandle> handles_;
    SetupCounters c_;
};

}  // namespace iwcm::bench
