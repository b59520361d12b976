// iwcm::Runtime on real TAP devices: two runtimes in one process, each on its
// own TAP, the two TAPs on a Linux bridge inside a network namespace that a
// forked child makes (nothing touches the host). The child resolves, connects,
// carries RDMA messages from several threads and closes, and checks what the
// runtimes report; the parent checks that the child exited 0.
// Needs root, like the interop tests: without it the tests fail, loudly.
//
// Read first: include/iwcm/runtime.hpp.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "iwcm/runtime.hpp"

namespace iwcm {
namespace {

// A failed check in the child: a line on stderr and a distinct exit code.
#define CHILD_CHECK(cond, code)                                                           \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            return code;                                                                  \
        }                                                                                 \
    } while (0)

int sh(const std::string& cmd) {
    return std::system(cmd.c_str());
}

// Two TAPs (the runtimes make them) on a bridge, all up.
bool bridge(const char* a, const char* b) {
    return sh("ip link set lo up && ip link add iwcmbr0 type bridge && "
              "ip link set iwcmbr0 up") == 0 &&
           sh(std::string("ip link set ") + a + " master iwcmbr0 && ip link set " + a + " up") ==
               0 &&
           sh(std::string("ip link set ") + b + " master iwcmbr0 && ip link set " + b + " up") == 0;
}

RuntimeConfig tap_config(const char* tap, const char* ip) {
    RuntimeConfig c;
    c.tap = tap;
    c.ip = ip;
    return c;
}

template <class T>
std::optional<T> wait_for(Runtime& rt, Duration timeout = std::chrono::seconds(5)) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
        auto e = rt.wait_event(std::chrono::milliseconds(100));
        if (!e) continue;
        if (auto* t = std::get_if<T>(&*e)) return *t;
    }
    return std::nullopt;
}

std::optional<CoreEvent> wait_core(Runtime& rt, EventType type) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < until) {
        auto e = wait_for<CoreEvent>(rt, std::chrono::milliseconds(200));
        if (e && e->event.type == type) return e;
    }
    return std::nullopt;
}

struct End {
    rdma::CqHandle cq;
    rdma::QpHandle qp;
};

// Both ends established: a CQ and a QP on each.
std::optional<End> make_qp(Runtime& rt, ConnHandle conn) {
    return rt.call([&](Session& s) -> std::optional<End> {
        auto cq = s.device().create_cq(256);
        if (!cq) return std::nullopt;
        rdma::QpAttr attr;
        attr.send_cq = attr.recv_cq = *cq;
        attr.max_send_wr = 128;
        attr.max_recv_wr = 128;
        auto qp = s.device().create_qp(s.now(), conn, attr);
        if (!qp) return std::nullopt;
        return End{*cq, *qp};
    });
}

constexpr int kThreads = 4;
constexpr int kPerThread = 25;
constexpr std::uint32_t kMessage = 64;

int connect_and_carry() {
    if (::unshare(CLONE_NEWNET) != 0) {
        std::perror("unshare(CLONE_NEWNET)");
        return 10;
    }
    auto a = Runtime::start(tap_config("iwcmrt-a", "10.99.210.1/24"));
    auto b = Runtime::start(tap_config("iwcmrt-b", "10.99.210.2/24"));
    if (!a || !b) {
        std::fprintf(stderr, "start: %s\n", (!a ? a.error() : b.error()).c_str());
        return 11;
    }
    CHILD_CHECK(bridge("iwcmrt-a", "iwcmrt-b"), 12);
    Runtime& ra = **a;
    Runtime& rb = **b;
    CHILD_CHECK(ra.info().addr == *IpAddr::parse("10.99.210.1") && ra.info().prefix == 24, 13);

    const Endpoint server{*IpAddr::parse("10.99.210.1"), 7174};
    auto listening = ra.call([&](Session& s) { return s.listen({server, 8}); });
    CHILD_CHECK(listening.has_value(), 14);

    // Resolution: a through its ARP answer; the event names the token.
    CHILD_CHECK(rb.call([&](Session& s) {
        return s.resolve(server.addr, 42, std::chrono::seconds(3)).has_value();
    }),
                15);
    auto resolved = wait_for<ResolvedEvent>(rb);
    CHILD_CHECK(resolved && resolved->token == 42 && resolved->mac == ra.info().mac, 16);

    const std::string hello = "from b";
    auto conn = rb.call([&](Session& s) {
        ConnectParams cp;
        cp.remote = server;
        cp.remote_mac = *resolved->mac;
        cp.private_data = std::as_bytes(std::span(hello));
        cp.ird = cp.ord = 4;
        return s.connect(cp);
    });
    CHILD_CHECK(conn.has_value(), 17);
    auto request = wait_core(ra, EventType::kConnectRequest);
    CHILD_CHECK(request.has_value(), 18);
    CHILD_CHECK(std::string(reinterpret_cast<const char*>(request->private_data.data()),
                            request->private_data.size()) == hello,
                19);
    CHILD_CHECK(ra.call([&](Session& s) {
        return s.core().accept(s.now(), request->event.conn, {{}, 4, 4}).has_value();
    }),
                20);
    auto up_a = wait_core(ra, EventType::kEstablished);
    auto up_b = wait_core(rb, EventType::kEstablished);
    CHILD_CHECK(up_a && up_b, 21);
    CHILD_CHECK(up_b->event.local.addr == rb.info().addr && up_b->event.remote == server, 22);

    auto end_a = make_qp(ra, up_a->event.conn);
    auto end_b = make_qp(rb, up_b->event.conn);
    CHILD_CHECK(end_a && end_b, 23);

    // a posts a receive for every message, then b's threads send at once.
    constexpr int kTotal = kThreads * kPerThread;
    std::vector<std::byte> inbox(kTotal * kMessage), outbox(kTotal * kMessage);
    for (std::size_t i = 0; i < outbox.size(); ++i) outbox[i] = std::byte(i * 13 % 251);
    auto mr_in =
        ra.call([&](Session& s) { return s.device().reg_mr(inbox, rdma::kAccessLocalWrite); });
    auto mr_out = rb.call([&](Session& s) { return s.device().reg_mr(outbox, 0); });
    CHILD_CHECK(mr_in && mr_out, 24);
    for (int i = 0; i < kTotal; ++i) {
        const rdma::Sge sge{mr_in->addr + static_cast<std::uint64_t>(i) * kMessage, kMessage,
                            mr_in->lkey};
        CHILD_CHECK(ra.call([&](Session& s) {
            return s.device()
                .post_recv(s.now(), end_a->qp, {static_cast<std::uint64_t>(i), std::span(&sge, 1)})
                .has_value();
        }),
                    25);
    }
    std::atomic<int> refused{0};
    std::vector<std::thread> senders;
    for (int t = 0; t < kThreads; ++t) {
        senders.emplace_back([&, t] {
            for (int k = 0; k < kPerThread; ++k) {
                const int i = t * kPerThread + k;
                const rdma::Sge sge{mr_out->addr + static_cast<std::uint64_t>(i) * kMessage,
                                    kMessage, mr_out->lkey};
                rdma::SendWr wr;
                wr.wr_id = static_cast<std::uint64_t>(i);
                wr.sg_list = std::span(&sge, 1);
                wr.signaled = true;
                const bool ok = rb.call([&](Session& s) {
                    return s.device().post_send(s.now(), end_b->qp, wr).has_value();
                });
                if (!ok) ++refused;
            }
        });
    }
    for (auto& th : senders) th.join();
    CHILD_CHECK(refused == 0, 26);

    // Every receive completes, each announced by a CompletionEvent first.
    int received = 0;
    std::vector<bool> seen(kTotal, false);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (received < kTotal && std::chrono::steady_clock::now() < until) {
        auto note = wait_for<CompletionEvent>(ra, std::chrono::milliseconds(500));
        if (!note) continue;
        CHILD_CHECK(note->cq == end_a->cq, 27);
        rdma::WorkCompletion wc[32];
        for (std::size_t n;
             (n = ra.call([&](Session& s) { return s.device().poll_cq(end_a->cq, wc); })) > 0;) {
            for (std::size_t k = 0; k < n; ++k) {
                CHILD_CHECK(wc[k].status == rdma::WcStatus::kSuccess, 28);
                CHILD_CHECK(wc[k].opcode == rdma::WcOpcode::kRecv && wc[k].byte_len == kMessage,
                            29);
                CHILD_CHECK(wc[k].wr_id < kTotal && !seen[wc[k].wr_id], 30);
                seen[wc[k].wr_id] = true;
                ++received;
            }
        }
    }
    CHILD_CHECK(received == kTotal, 31);
    // Sends in posting order per thread land in posting order of the QP: every
    // inbox slot holds one whole message of outbox (which one depends on the
    // threads' interleaving), and each message arrived once.
    std::vector<bool> landed(kTotal, false);
    for (int i = 0; i < kTotal; ++i) {
        int match = -1;
        for (int j = 0; j < kTotal; ++j)
            if (!landed[j] &&
                std::memcmp(&inbox[static_cast<std::size_t>(i) * kMessage],
                            &outbox[static_cast<std::size_t>(j) * kMessage], kMessage) == 0) {
                match = j;
                break;
            }
        CHILD_CHECK(match >= 0, 32);
        landed[match] = true;
    }

    // b closes: a hears the end of its queue pair, its handle stale after.
    CHILD_CHECK(
        rb.call([&](Session& s) { return s.device().destroy_qp(s.now(), end_b->qp).has_value(); }),
        33);
    auto ended = wait_for<rdma::QpEvent>(ra);
    CHILD_CHECK(ended && ended->type == rdma::QpEventType::kDisconnected && ended->qp == end_a->qp,
                34);
    CHILD_CHECK(ended->status == 0, 35);
    // The clock the idle test reads counts this thread's work.
    CHILD_CHECK(ra.progress_cpu_time() > Duration::zero(), 36);
    return 0;
}

// The progress thread's CPU in 2 idle seconds at most: it sleeps the whole span (0 us
// measured, in the ThreadSanitizer build too), and a loop that woke every millisecond
// would use tens of milliseconds (64 ms measured, 91 under ThreadSanitizer).
constexpr Duration kIdleCpuBound = std::chrono::milliseconds(1);

// The frames the kernel took from the TAP `dev` (its receive count in /proc/net/dev, which,
// unlike /sys, shows this process's network namespace); 0 if it cannot be read.
std::uint64_t frames_from_tap(const std::string& dev) {
    std::ifstream in("/proc/net/dev");
    std::string line;
    while (std::getline(in, line)) {
        const std::size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        const std::size_t name = line.find_first_not_of(' ');
        if (line.compare(name, colon - name, dev) != 0) continue;
        std::istringstream fields(line.substr(colon + 1));
        std::uint64_t bytes = 0;
        std::uint64_t packets = 0;
        fields >> bytes >> packets;
        return packets;
    }
    return 0;
}

int idle_sleeps() {
    if (::unshare(CLONE_NEWNET) != 0) {
        std::perror("unshare(CLONE_NEWNET)");
        return 10;
    }
    // No IPv6 in this namespace: the kernel's router solicitations and
    // listener reports on a new link would wake the loop in the span measured.
    CHILD_CHECK(sh("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 "
                   "net.ipv6.conf.default.disable_ipv6=1") == 0,
                9);
    auto rt = Runtime::start(tap_config("iwcmrt-idle", "10.99.211.1/24"));
    if (!rt) {
        std::fprintf(stderr, "start: %s\n", rt.error().c_str());
        return 11;
    }
    CHILD_CHECK(sh("ip link set iwcmrt-idle up") == 0, 12);
    // A listener is armed and the address announced twice, 2 s apart (NeighborConfig);
    // once the second reached the kernel nothing is due until a frame comes. Polled, at
    // most 5 s: the frames the kernel took from the TAP.
    CHILD_CHECK((*rt)->call([&](Session& s) {
        return s.listen({{*IpAddr::parse("10.99.211.1"), 7174}, 0}).has_value();
    }),
                13);
    const auto frames_in = [] { return frames_from_tap("iwcmrt-idle"); };
    for (int i = 0; i < 500 && frames_in() < 2; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const std::uint64_t announced = frames_in();
    CHILD_CHECK(announced == 2, 16);
    const Duration before = (*rt)->progress_cpu_time();
    std::this_thread::sleep_for(std::chrono::seconds(2));  // the span measured
    const Duration used = (*rt)->progress_cpu_time() - before;
    std::fprintf(stderr, "progress thread: %lld us of CPU in 2 s idle\n",
                 static_cast<long long>(used.count() / 1000));
    CHILD_CHECK(before >= Duration::zero(), 14);
    CHILD_CHECK(frames_in() == announced, 17);  // nothing was sent in the span
    // Sleeping in epoll_wait costs nothing; a loop that spun or polled every
    // millisecond would use many times the bound (2 000 wake-ups of microseconds each).
    CHILD_CHECK(used < kIdleCpuBound, 15);
    return 0;
}

// The progress thread's nice value: -20 by default (the tests run as root), what the
// configuration asks, or the process's own when the configuration leaves it.
int progress_priority() {
    if (::unshare(CLONE_NEWNET) != 0) {
        std::perror("unshare(CLONE_NEWNET)");
        return 10;
    }
    CHILD_CHECK(::setpriority(PRIO_PROCESS, 0, 3) == 0, 11);  // this thread's, inherited
    const std::pair<std::optional<int>, int> cases[] = {{-20, -20}, {5, 5}, {std::nullopt, 3}};
    int code = 12;
    for (const auto& [asked, want] : cases) {
        RuntimeConfig c = tap_config("iwcmrt-nice", "10.99.212.1/24");
        c.progress_nice = asked;
        auto rt = Runtime::start(c);
        if (!rt) {
            std::fprintf(stderr, "start: %s\n", rt.error().c_str());
            return code;
        }
        std::fprintf(stderr, "progress thread nice %d (asked %d)\n", (*rt)->progress_nice(),
                     asked.value_or(99));
        CHILD_CHECK((*rt)->progress_nice() == want, code + 1);
        code += 2;
    }
    // The application's thread keeps its own.
    CHILD_CHECK(::getpriority(PRIO_PROCESS, 0) == 3, 20);
    return 0;
}

// RuntimeConfig::settle_ms: a connect whose SYN meets a port nobody listens on yet is tried
// again, and the server that listens a moment later gets it; without it the reset is final.
int refused_then_listening() {
    if (::unshare(CLONE_NEWNET) != 0) {
        std::perror("unshare(CLONE_NEWNET)");
        return 10;
    }
    RuntimeConfig client = tap_config("iwcmrt-rc", "10.99.213.2/24");
    client.settle_ms = 500;
    auto a = Runtime::start(tap_config("iwcmrt-rs", "10.99.213.1/24"));
    auto b = Runtime::start(client);
    auto c = Runtime::start(tap_config("iwcmrt-r0", "10.99.213.3/24"));
    if (!a || !b || !c) {
        std::fprintf(stderr, "start: %s\n", (!a ? a.error() : !b ? b.error() : c.error()).c_str());
        return 11;
    }
    CHILD_CHECK(bridge("iwcmrt-rs", "iwcmrt-rc") &&
                    sh("ip link set iwcmrt-r0 master iwcmbr0 && ip link set iwcmrt-r0 up") == 0,
                12);
    Runtime& server = **a;
    const Endpoint at{*IpAddr::parse("10.99.213.1"), 7175};
    auto connect = [&](Runtime& rt) -> std::optional<ConnHandle> {
        if (!rt.call([&](Session& s) {
                return s.resolve(at.addr, 1, std::chrono::seconds(3)).has_value();
            }))
            return std::nullopt;
        auto resolved = wait_for<ResolvedEvent>(rt);
        if (!resolved || !resolved->mac) return std::nullopt;
        auto conn = rt.call([&](Session& s) {
            ConnectParams cp;
            cp.remote = at;
            cp.remote_mac = *resolved->mac;
            return s.connect(cp);
        });
        if (!conn) return std::nullopt;
        return *conn;
    };
    auto stats = [](Runtime& rt) { return rt.call([](Session& s) { return s.core().stats(); }); };

    // Without settle: REJECTED, -ECONNREFUSED, and no SYN sent again.
    CHILD_CHECK(connect(**c).has_value(), 13);
    auto refused = wait_core(**c, EventType::kRejected);
    CHILD_CHECK(refused && refused->event.status == -ECONNREFUSED, 14);
    CHILD_CHECK(stats(**c).connect_refused_retries == 0, 15);

    // With it: the server resets the first SYN, then listens; the SYN sent again gets in.
    const std::uint64_t resets_before = stats(server).resets_sent;
    CHILD_CHECK(connect(**b).has_value(), 16);
    bool reset = false;
    for (int i = 0; i < 2000 && !reset; ++i) {  // a bounded poll of the server's counter
        reset = stats(server).resets_sent > resets_before;
        if (!reset) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHILD_CHECK(reset, 17);
    CHILD_CHECK(server.call([&](Session& s) { return s.listen({at, 8}); }).has_value(), 18);
    auto request = wait_core(server, EventType::kConnectRequest);
    CHILD_CHECK(request.has_value(), 19);
    CHILD_CHECK(server.call([&](Session& s) {
        return s.core().accept(s.now(), request->event.conn, {}).has_value();
    }),
                20);
    CHILD_CHECK(wait_core(**b, EventType::kEstablished).has_value(), 21);
    CHILD_CHECK(stats(**b).connect_refused_retries >= 1, 22);
    return 0;
}

// RuntimeConfig::keepalive_*: a peer that vanishes without a FIN or reset (here its TAP goes
// down; a killed process does the same) ends an idle connection after the idle time and the
// unanswered probes, and the application hears of it.
int vanished_peer() {
    if (::unshare(CLONE_NEWNET) != 0) {
        std::perror("unshare(CLONE_NEWNET)");
        return 10;
    }
    RuntimeConfig watcher = tap_config("iwcmrt-ka", "10.99.214.1/24");
    watcher.keepalive_idle = std::chrono::seconds(1);
    watcher.keepalive_interval = std::chrono::milliseconds(200);
    watcher.keepalive_probes = 3;
    auto a = Runtime::start(watcher);
    auto b = Runtime::start(tap_config("iwcmrt-kb", "10.99.214.2/24"));
    if (!a || !b) {
        std::fprintf(stderr, "start: %s\n", (!a ? a.error() : b.error()).c_str());
        return 11;
    }
    CHILD_CHECK(bridge("iwcmrt-ka", "iwcmrt-kb"), 12);
    Runtime& ra = **a;
    Runtime& rb = **b;
    const Endpoint server{*IpAddr::parse("10.99.214.1"), 7176};
    CHILD_CHECK(ra.call([&](Session& s) { return s.listen({server, 8}); }).has_value(), 13);
    CHILD_CHECK(rb.call([&](Session& s) {
        return s.resolve(server.addr, 1, std::chrono::seconds(3)).has_value();
    }),
                14);
    auto resolved = wait_for<ResolvedEvent>(rb);
    CHILD_CHECK(resolved && resolved->mac, 15);
    CHILD_CHECK(rb.call([&](Session& s) {
        ConnectParams cp;
        cp.remote = server;
        cp.remote_mac = *resolved->mac;
        return s.connect(cp).has_value();
    }),
                16);
    auto request = wait_core(ra, EventType::kConnectRequest);
    CHILD_CHECK(request.has_value(), 17);
    CHILD_CHECK(ra.call([&](Session& s) {
        return s.core().accept(s.now(), request->event.conn, {}).has_value();
    }),
                18);
    auto up_a = wait_core(ra, EventType::kEstablished);
    auto up_b = wait_core(rb, EventType::kEstablished);
    CHILD_CHECK(up_a && up_b, 19);
    auto end_a = make_qp(ra, up_a->event.conn);
    auto end_b = make_qp(rb, up_b->event.conn);
    CHILD_CHECK(end_a && end_b, 20);
    const auto gone = std::chrono::steady_clock::now();
    CHILD_CHECK(sh("ip link set iwcmrt-kb down") == 0, 21);
    auto ended = wait_for<rdma::QpEvent>(ra, std::chrono::seconds(10));
    const auto after = std::chrono::steady_clock::now() - gone;
    std::fprintf(stderr, "the connection ended %lld ms after the peer went\n",
                 static_cast<long long>(
                     std::chrono::duration_cast<std::chrono::milliseconds>(after).count()));
    CHILD_CHECK(ended && ended->type == rdma::QpEventType::kDisconnected &&
                    ended->qp == end_a->qp && ended->status == -ETIMEDOUT,
                22);
    // Not before the idle time and the probes' intervals (1.6 s after the peer's last
    // segment, which came a little before it went).
    CHILD_CHECK(after >= std::chrono::milliseconds(1400), 23);
    return 0;
}

void run_in_child(int (*body)()) {
    ASSERT_EQ(::geteuid(), 0u) << "needs root: TAP devices and network namespaces";
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ::_exit(body());
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's message above";
}

TEST(RuntimeTap, ConnectCarryFromThreadsAndClose) {
    run_in_child(connect_and_carry);
}

TEST(RuntimeTap, IdleRuntimeUsesNoCpu) {
    run_in_child(idle_sleeps);
}

TEST(RuntimeTap, ProgressThreadTakesItsNiceValue) {
    run_in_child(progress_priority);
}

TEST(RuntimeTap, SettleRetriesARefusedConnect) {
    run_in_child(refused_then_listening);
}

TEST(RuntimeTap, KeepaliveEndsTheConnectionOfAVanishedPeer) {
    run_in_child(vanished_peer);
}

// ---- configuration (no device touched) ----

struct EnvGuard {
    std::vector<std::string> names;
    void set(const char* name, const char* value) {
        names.emplace_back(name);
        ::setenv(name, value, 1);
    }
    ~EnvGuard() {
        for (const auto& n : names) ::unsetenv(n.c_str());
    }
};

TEST(RuntimeConfig, FromEnvironment) {
    EnvGuard env;
    env.set("IWCM_TAP", "iwcm0");
    env.set("IWCM_IP", "10.0.0.1/24");
    env.set("IWCM_CRC", "1");
    env.set("IWCM_TOS", "0x10");
    env.set("IWCM_VLAN", "7");
    env.set("IWCM_MPA_REV", "1");
    env.set("IWCM_SETTLE", "500");
    env.set("IWCM_BUSY_POLL", "50");
    env.set("IWCM_TAP_OFFLOAD", "0");
    auto c = RuntimeConfig::from_env();
    ASSERT_TRUE(c.has_value()) << c.error();
    EXPECT_EQ(c->tap, "iwcm0");
    EXPECT_EQ(c->ip, "10.0.0.1/24");
    EXPECT_TRUE(c->crc);
    EXPECT_EQ(c->tos, 16);
    EXPECT_EQ(c->vlan, 7);
    EXPECT_EQ(c->mpa_revision, 1);
    EXPECT_EQ(c->settle_ms, 500);
    EXPECT_EQ(c->busy_poll_us, 50u);
    EXPECT_FALSE(c->tap_offload);
    EXPECT_TRUE(c->dev.empty());
}

TEST(RuntimeConfig, EnvironmentErrorsNameTheVariable) {
    const std::pair<const char*, const char*> bad[] = {
        {"IWCM_VLAN", "4095"},     {"IWCM_VLAN", "x"},         {"IWCM_CRC", "yes"},
        {"IWCM_TOS", "256"},       {"IWCM_MPA_REV", "3"},      {"IWCM_XDP_MODE", "fast"},
        {"IWCM_SETTLE", "60001"},  {"IWCM_SETTLE", "-1"},      {"IWCM_BUSY_POLL", "1000001"},
        {"IWCM_BUSY_POLL", "0.5"}, {"IWCM_TAP_OFFLOAD", "on"},
    };
    for (const auto& [name, value] : bad) {
        EnvGuard env;
        env.set("IWCM_TAP", "iwcm0");
        env.set("IWCM_IP", "10.0.0.1/24");
        env.set(name, value);
        auto c = RuntimeConfig::from_env();
        ASSERT_FALSE(c.has_value()) << name << "=" << value;
        EXPECT_NE(c.error().find(std::string(name) + "=" + value), std::string::npos) << c.error();
    }
    EnvGuard none;
    auto c = RuntimeConfig::from_env();
    ASSERT_FALSE(c.has_value());
    EXPECT_NE(c.error().find("IWCM_TAP"), std::string::npos) << c.error();
}

TEST(RuntimeConfig, ValidateRefusesContradictions) {
    RuntimeConfig both;
    both.tap = "iwcm0";
    both.dev = "eth0";
    EXPECT_FALSE(both.validate().has_value());
    RuntimeConfig neither;
    EXPECT_FALSE(neither.validate().has_value());
    RuntimeConfig shared_mac;
    shared_mac.dev = "eth0";
    shared_mac.mac = "02:00:00:00:00:01";
    EXPECT_FALSE(shared_mac.validate().has_value());
    RuntimeConfig ok;
    ok.tap = "iwcm0";
    ok.ip = "10.0.0.1/24";
    EXPECT_TRUE(ok.validate().has_value());
    for (int nice : {-21, 20}) {
        RuntimeConfig bad = ok;
        bad.progress_nice = nice;
        EXPECT_FALSE(bad.validate().has_value()) << nice;
    }
}

TEST(RuntimeConfig, StartRefusesABadAddressBeforeTouchingADevice) {
    RuntimeConfig c;
    c.tap = "iwcm-never";
    c.ip = "10.0.0.1";  // no prefix
    auto rt = Runtime::start(c);
    ASSERT_FALSE(rt.has_value());
    EXPECT_NE(rt.error().find("ADDR/PREFIX"), std::string::npos) << rt.error();
}

}  // namespace
}  // namespace iwcm
