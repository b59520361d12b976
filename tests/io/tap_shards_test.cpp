// The TAP driver on N threads against the kernel: in a private network
// namespace (a forked child that unshares CLONE_NEWNET), a multi-queue TAP
// with one core and one thread per queue listens; kernel TCP sockets connect
// to it and play MPA initiators (revision 1, a request with private data).
// The kernel picks the queue of each connection's first frames by its own
// hash, so some SYNs arrive on a thread that does not own them and must be
// handed over. Needs root, like tap_test.cpp: without it the test fails.
//
// Read first: src/io/tap/tap_shards.hpp, tests/io/tap_test.cpp.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <linux/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "io/kernel_side.hpp"
#include "io/tap/tap_shards.hpp"
#include "iwcm/shard.hpp"
#include "wire/mpa.hpp"

namespace iwcm::io {
namespace {

const char* kTap = "iwcmmq0";
constexpr std::uint16_t kPort = 4791;
constexpr int kClients = 32;
constexpr std::uint32_t kThreads = 2;

std::vector<std::byte> mpa_request() {
    static const char kPdata[] = "hello";
    wire::MpaRepr r;
    r.kind = wire::MpaKind::kRequest;
    r.revision = 1;
    r.private_data = std::as_bytes(std::span(kPdata, 5));
    std::vector<std::byte> out(r.buffer_len());
    r.emit(out);
    return out;
}

// The kernel side: kClients connections, each writes the request and reads
// the reply's 20-byte header. Returns how many got an MPA reply.
int kernel_clients() {
    const auto req = mpa_request();
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(kPort);
    ::inet_pton(AF_INET, "10.99.200.2", &to.sin_addr);
    std::vector<int> fds;
    for (int i = 0; i < kClients; ++i) {
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        timeval tv{10, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 ||
            ::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
            std::perror("kernel client connect/write");
            ::close(fd);
            continue;
        }
        fds.push_back(fd);
    }
    int replies = 0;
    for (int fd : fds) {
        char hdr[wire::kMpaHeaderLen];
        std::size_t got = 0;
        while (got < sizeof hdr) {
            ssize_t n = ::read(fd, hdr + got, sizeof hdr - got);
            if (n <= 0) break;
            got += static_cast<std::size_t>(n);
        }
        if (got == sizeof hdr && std::memcmp(hdr, "MPA ID Rep Frame", 16) == 0) ++replies;
        ::close(fd);
    }
    return replies;
}

struct ShardResult {
    int requests = 0;
    int established = 0;
    int misrouted = 0;  // frames a core received that hash to another shard
    int errors = 0;
};

int child() {
    if (::unshare(CLONE_NEWNET) != 0) {
        std::perror("unshare(CLONE_NEWNET)");
        return 10;
    }
    CoreConfig cfg;
    cfg.mac = *MacAddr::parse("02:00:0a:63:c8:02");
    cfg.mpa.peer_to_peer = false;
    TapShardsConfig tc;
    tc.tap = kTap;
    tc.shards = kThreads;
    tc.handle_signals = false;
    auto t = TapShards::open(tc, cfg, kNoVlan);
    if (!t) {
        std::fprintf(stderr, "%s\n", t.error().c_str());
        return 11;
    }
    TapShards& net = **t;
    if (!set_kernel_address(kTap, "10.99.200.1")) return 12;
    if (!net.add_address(Ipv4Addr{{10, 99, 200, 2}})) return 13;
    ListenParams lp;
    lp.local = {Ipv4Addr{{10, 99, 200, 2}}, kPort};
    if (!net.listen(lp)) return 14;
    std::vector<ShardResult> results(kThreads);
    for (std::uint32_t s = 0; s < kThreads; ++s) {
        net.core(s).set_trace([&results, s](const TraceRecord& r) {
            if (r.kind == TraceRecord::Kind::kFrameIn && frame_shard(r.frame, kThreads) != s)
                ++results[s].misrouted;
        });
    }
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (std::uint32_t s = 0; s < kThreads; ++s) {
        threads.emplace_back([&, s] {
            ShardResult& r = results[s];
            Core& core = net.core(s);
            while (!stop.load()) {
                const Instant now = TapHost::now();
                if (net.step(s, now + std::chrono::milliseconds(100)) == Wake::kError) ++r.errors;
                while (auto e = core.poll_event()) {
                    if (e->type == EventType::kConnectRequest) {
                        ++r.requests;
                        if (!core.accept(now, e->conn, {})) ++r.errors;
                    } else if (e->type == EventType::kEstablished) {
                        ++r.established;
                    }
                }
            }
        });
    }
    const int replies = kernel_clients();
    stop = true;
    net.wake_all();
    for (auto& th : threads) th.join();
    int requests = 0, established = 0, bad = 0;
    std::uint64_t handed = 0;
    for (std::uint32_t s = 0; s < kThreads; ++s) {
        requests += results[s].requests;
        established += results[s].established;
        bad += results[s].misrouted + results[s].errors;
        handed += net.counters(s).handed_off;
        std::fprintf(stderr, "thread %u: %d requests, %d established, %llu handed off\n", s,
                     results[s].requests, results[s].established,
                     static_cast<unsigned long long>(net.counters(s).handed_off));
    }
    if (replies != kClients || requests != kClients || established != kClients) {
        std::fprintf(stderr, "%d replies, %d requests, %d established of %d\n", replies, requests,
                     established, kClients);
        return 15;
    }
    if (bad != 0) {
        std::fprintf(stderr, "%d frames on the wrong shard or errors\n", bad);
        return 16;
    }
    // The kernel's queue choice is its own hash: with 32 connections and two
    // queues, all first frames landing on their owner is a 2^-32 event.
    if (handed == 0) {
        std::fprintf(stderr, "no frame was handed between threads\n");
        return 17;
    }
    return 0;
}

TEST(TapShards, KernelConnectionsReachTheThreadThatOwnsThem) {
    run_in_child(child);
}

// As TapHost: the threads refuse a core configured for segment offload,
// before any device is opened.
TEST(TapShards, RefusesSegmentOffload) {
    CoreConfig cfg;
    cfg.mac = *MacAddr::parse("02:00:0a:63:c8:02");
    cfg.stream.segment_offload = 44 * 1460;
    TapShardsConfig tc;
    tc.tap = "iwcmoff0";
    tc.handle_signals = false;
    auto t = TapShards::open(tc, cfg, kNoVlan);
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error(),
              "segment offload is only for the in-memory link or a TAP with the virtio-net header, "
              "not iwcmoff0");
}

}  // namespace
}  // namespace iwcm::io
