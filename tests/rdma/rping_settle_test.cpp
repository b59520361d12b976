// `iwarp-cm rping`'s exchange (tools::Rping) over two Devices on two Cores
// joined in memory, on a virtual clock: the client's settle time (--settle)
// holds its first Send back by exactly that long, the loop wakes for it
// through Rping::next_wake(), and the iterations then run and verify.
//
// Read first: tools/rping.hpp, tests/rdma/device_test.cpp (the same wiring).
#include <gtest/gtest.h>

#include <optional>

#include "iwcm/verbs.hpp"
#include "tools/rping.hpp"

namespace iwcm::rdma::test {
namespace {

using namespace std::chrono_literals;

struct End {
    End(Core& c, const tools::RpingConfig& cfg) : core(c), dev(c), rping(dev, cfg) {}
    Core& core;
    Device dev;
    tools::Rping rping;
    std::optional<Instant> established;
};

struct RpingNet {
    explicit RpingNet(Duration settle, std::uint64_t count)
        : a(config(0x0a)),
          b(config(0x0b)),
          client(a, {false, 100, count, true, false, settle}),
          server(b, {true, 100, count, true, false, {}}) {
        EXPECT_TRUE(a.add_address(ip_a).has_value());
        EXPECT_TRUE(b.add_address(ip_b).has_value());
        EXPECT_TRUE(b.listen({{ip_b, 7174}, 0}).has_value());
        ConnectParams p;
        p.local = {ip_a, 0};
        p.remote = {ip_b, 7174};
        p.remote_mac = b.config().mac;
        p.ird = p.ord = 1;
        EXPECT_TRUE(a.connect(now, p).has_value());
    }
    static CoreConfig config(std::uint8_t mac) {
        CoreConfig c;
        c.mac = MacAddr{{0x02, 0, 0, 0, 0, mac}};
        return c;
    }

    int events(End& e) {
        int moved = 0;
        while (auto ev = e.core.poll_event()) {
            ++moved;
            if (e.dev.on_event(now, *ev)) continue;
            if (ev->type == EventType::kConnectRequest) {
                AcceptParams ap;
                ap.ird = ap.ord = 1;
                EXPECT_TRUE(e.core.accept(now, ev->conn, ap).has_value());
            }
            if (ev->type == EventType::kEstablished) {
                e.established = now;
                EXPECT_TRUE(e.rping.start(now, ev->conn));
            }
        }
        while (auto q = e.dev.poll_qp_event()) e.rping.on_qp_event(*q);
        const auto before = e.rping.last_progress();
        e.rping.poll(now);
        return moved + (e.rping.last_progress() != before ? 1 : 0);
    }

    // Frames and events until both are done or nothing moves; then the
    // clock runs to the next core deadline or Rping wake, whichever is first.
    bool run() {
        End* ends[2] = {&client, &server};
        const auto over = [](const End& e) {
            return e.rping.phase() == tools::Rping::Phase::kDone ||
                   e.rping.phase() == tools::Rping::Phase::kFailed;
        };
        const auto done = [&] { return over(client) && over(server); };
        for (int step = 0; step < 100000 && !done(); ++step) {
            int moved = 0;
            for (; auto f = a.poll_transmit(); ++moved) b.receive(now, *f);
            for (; auto f = b.poll_transmit(); ++moved) a.receive(now, *f);
            for (End* e : ends) moved += events(*e);
            if (moved > 0) continue;
            std::optional<Instant> next;
            for (auto t : {a.next_deadline(), b.next_deadline(), client.rping.next_wake()})
                if (t && (!next || *t < *next)) next = t;
            if (!next) return false;
            now = std::max(now, *next);
            a.on_timer(now);
            b.on_timer(now);
        }
        return done();
    }

    IpAddr ip_a = *IpAddr::parse("192.0.2.1");
    IpAddr ip_b = *IpAddr::parse("192.0.2.2");
    Instant now = kInstantZero;
    Core a, b;
    End client, server;
};

TEST(RpingSettle, FirstSendWaitsTheSettleTime) {
    RpingNet net(500ms, 3);
    ASSERT_TRUE(net.run());
    EXPECT_EQ(net.client.rping.phase(), tools::Rping::Phase::kDone) << net.client.rping.reason();
    EXPECT_EQ(net.server.rping.phase(), tools::Rping::Phase::kDone) << net.server.rping.reason();
    EXPECT_EQ(net.client.rping.iterations(), 3u);
    EXPECT_EQ(net.server.rping.iterations(), 3u);
    ASSERT_TRUE(net.client.established && net.server.established);
    // Nothing reached the server's rping before the settle time was over.
    // (The server's last progress is its last Write's completion: iterations
    // on a zero-delay wire take no virtual time.)
    EXPECT_GE(net.server.rping.last_progress(), *net.client.established + 500ms);
    EXPECT_LT(net.server.rping.last_progress(), *net.client.established + 600ms);
}

TEST(RpingSettle, ZeroSettleSendsAtOnce) {
    RpingNet net(Duration::zero(), 3);
    ASSERT_TRUE(net.run());
    EXPECT_EQ(net.client.rping.iterations(), 3u);
    EXPECT_EQ(net.server.rping.iterations(), 3u);
    ASSERT_TRUE(net.client.established);
    EXPECT_LT(net.server.rping.last_progress(), *net.client.established + 100ms);
    EXPECT_FALSE(net.client.rping.next_wake().has_value());
}

}  // namespace
}  // namespace iwcm::rdma::test
