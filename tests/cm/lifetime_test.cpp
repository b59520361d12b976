// Lifetimes, API misuse, loopback, and end-to-end runs under loss.
#include <cerrno>

#include "cm/dut.hpp"
#include "io/sim/sim.hpp"

namespace iwcm::test {
namespace {

TEST(Api, MisuseReturnsErrorsThatSayWhat) {
    Dut d;
    EXPECT_EQ(d.core.accept(d.now, ConnHandle{}, {}).error(), ApiError::kInvalidHandle);
    EXPECT_EQ(d.core.accept(d.now, ConnHandle{5000, 1}, {}).error(), ApiError::kInvalidHandle);
    EXPECT_EQ(d.core.listen({{ip_b(), 0}, 0}).error(), ApiError::kInvalidArgument);
    EXPECT_EQ(d.core.listen({{*IpAddr::parse("10.9.9.9"), 80}, 0}).error(),
              ApiError::kAddressNotLocal);
    ConnectParams p;
    p.local = {ip_b(), 0};
    p.remote = {*IpAddr::parse("fe80::1"), 80};
    EXPECT_EQ(d.core.connect(d.now, p).error(), ApiError::kFamilyMismatch);
    p.remote = {ip_a(), 80};
    std::vector<std::byte> big(509);
    p.private_data = big;
    EXPECT_EQ(d.core.connect(d.now, p).error(),
              ApiError::kPrivateDataTooLong);  // 508 at revision 2
    p.mpa_revision = 1;
    p.private_data = std::span<const std::byte>(big).first(508);
    EXPECT_TRUE(d.core.connect(d.now, p).has_value());  // 512 at revision 1
    p.mpa_revision = 3;
    EXPECT_EQ(d.core.connect(d.now, p).error(), ApiError::kInvalidArgument);
    EXPECT_EQ(d.core.add_address(ip_b()).error(), ApiError::kAddressInUse);
    EXPECT_FALSE(to_string(ApiError::kWrongState).empty());
}

TEST(Api, AcceptOnAConnectionNotWaitingIsWrongState) {
    Dut d;
    d.to_mpareq_sent();
    EXPECT_EQ(d.core.accept(d.now, d.conn, {}).error(), ApiError::kWrongState);
    EXPECT_EQ(d.core.reject(d.now, d.conn, {}).error(), ApiError::kWrongState);
    EXPECT_EQ(d.core.handoff(d.conn).error(), ApiError::kWrongState);
}

TEST(Api, AcceptTwiceIsWrongStateAndStaleAfterTheEnd) {
    Dut d;
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("x"), 1, 1, false));
    EXPECT_TRUE(d.core.accept(d.now, e.conn, {}).has_value());
    EXPECT_EQ(d.core.accept(d.now, e.conn, {}).error(), ApiError::kWrongState);
    EXPECT_TRUE(d.core.disconnect(d.now, e.conn, DisconnectMode::kAbortive).has_value());
    EXPECT_EQ(d.core.accept(d.now, e.conn, {}).error(), ApiError::kStaleHandle);
}

TEST(Lifetime, QueuedEventKeepsNodeUntilPolled) {
    Dut d;
    d.to_syn_sent();
    d.feed(d.frame(tf::kRst | tf::kAck, wire::SeqNumber(0), d.dut_nxt));
    // The node is out of the table, but the queued event still refers to it.
    EXPECT_EQ(d.core.live_nodes(), 1u);
    EXPECT_EQ(d.core.queued_events(), 1u);
    auto e = d.core.poll_event();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->conn, d.conn);
    EXPECT_FALSE(d.core.poll_event().has_value());
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.stats().nodes_created, d.core.stats().nodes_destroyed);
}

TEST(Lifetime, ArmedTimerKeepsHalfOpenNodeAndSlotIsReusedWithNewGeneration) {
    Dut d;
    d.to_syn_sent();
    ConnHandle old = d.conn;
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kAbortive).has_value());
    d.evs();
    EXPECT_EQ(d.core.live_nodes(), 0u);
    Dut* same = &d;
    same->peer.port = 5001;
    ConnectParams p;
    p.local = {ip_b(), 4792};
    p.remote = {ip_a(), 5001};
    p.remote_mac = kMacA;
    auto c = d.core.connect(d.now, p);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->index, old.index);
    EXPECT_NE(c->generation, old.generation);
    EXPECT_EQ(d.core.state(old).error(), ApiError::kStaleHandle);
    EXPECT_EQ(*d.core.state(*c), CmState::kSynSent);
}

TEST(Loopback, ConnectToOwnAddressWorksWithoutTheWire) {
    Dut d;
    ASSERT_TRUE(d.core.add_address(*IpAddr::parse("10.0.0.3")).has_value());
    ASSERT_TRUE(d.core.listen({d.self, 0}).has_value());
    ConnectParams p;
    p.local = {*IpAddr::parse("10.0.0.3"), 0};
    p.remote = d.self;
    auto pd = bytes("to myself");
    p.private_data = pd;
    auto c = d.core.connect(d.now, p);
    ASSERT_TRUE(c.has_value());
    EXPECT_TRUE(d.out().empty());  // nothing on the wire
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kConnectRequest);
    EXPECT_EQ(text(e[0].pdata), "to myself");
    ASSERT_TRUE(d.core.accept(d.now, e[0].conn, {}).has_value());
    e = d.evs();
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].type, EventType::kEstablished);
    EXPECT_EQ(e[1].type, EventType::kEstablished);
    EXPECT_EQ(d.core.stats().loopback_connections, 1u);
    ASSERT_TRUE(d.core.disconnect(d.now, *c, DisconnectMode::kGraceful).has_value());
    d.advance(std::chrono::seconds(1));
    EXPECT_EQ(d.evs().size(), 2u);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_TRUE(d.out().empty());
}

// Two cores on the simulated network; B accepts everything.
struct SimPair {
    Core a{config_for(kMacA, 1)};
    Core b{config_for(kMacB, 2)};
    std::vector<Ev> ea, eb;
    io::CoreHost ha{a, [this](Instant, Core& c) {
                        for (auto& e : events(c)) ea.push_back(e);
                    }};
    io::CoreHost hb{b, [this](Instant now, Core& c) {
                        for (auto& e : events(c)) {
                            if (e.type == EventType::kConnectRequest)
                                (void)c.accept(now, e.conn, {});
                            eb.push_back(e);
                        }
                    }};
    io::SimNetwork net;
    explicit SimPair(std::uint64_t seed, double loss) : net(seed) {
        EXPECT_TRUE(a.add_address(ip_a()).has_value());
        EXPECT_TRUE(b.add_address(ip_b()).has_value());
        EXPECT_TRUE(b.listen({{ip_b(), 4791}, 0}).has_value());
        net.add_host(ha);
        net.add_host(hb);
        io::LinkFaults f;
        f.loss = loss;
        net.set_faults(f);
    }
    std::size_t count(const std::vector<Ev>& v, EventType t) {
        return static_cast<std::size_t>(
            std::count_if(v.begin(), v.end(), [t](const Ev& e) { return e.type == t; }));
    }
};

TEST(EndToEndLoss, ThirtyPercentLossConnectsAndClosesThroughRetransmissions) {
    const std::uint64_t seed = 7;
    SimPair s(seed, 0.3);
    ConnectParams p;
    p.local = {ip_a(), 0};
    p.remote = {ip_b(), 4791};
    p.remote_mac = kMacB;
    auto pd = bytes("lossy hello");
    p.private_data = pd;
    auto c = s.a.connect(s.net.now(), p);
    ASSERT_TRUE(c.has_value());
    s.net.run_until(s.net.now() + std::chrono::seconds(60));
    ASSERT_EQ(s.count(s.ea, EventType::kEstablished), 1u) << "seed " << seed;
    ASSERT_EQ(s.count(s.eb, EventType::kEstablished), 1u) << "seed " << seed;
    ASSERT_TRUE(s.a.disconnect(s.net.now(), *c, DisconnectMode::kGraceful).has_value());
    s.net.run(1000000);
    EXPECT_EQ(s.count(s.ea, EventType::kDisconnected), 1u);
    EXPECT_EQ(s.count(s.eb, EventType::kDisconnected), 1u);
    EXPECT_EQ(s.ea.back().status, 0) << "A's close completed gracefully";
    EXPECT_GT(s.a.stats().retransmissions + s.b.stats().retransmissions, 0u);
    EXPECT_GT(s.net.counters().lost, 0u);
    EXPECT_EQ(s.a.live_nodes() + s.b.live_nodes(), 0u);
    EXPECT_EQ(s.a.pending_timers() + s.b.pending_timers(), 0u);
}

TEST(EndToEndLoss, TotalLossFailsAfterFullBackoffNothingLeaked) {
    SimPair s(1, 1.0);
    ConnectParams p;
    p.local = {ip_a(), 0};
    p.remote = {ip_b(), 4791};
    p.remote_mac = kMacB;
    ASSERT_TRUE(s.a.connect(s.net.now(), p).has_value());
    s.net.run(1000000);
    ASSERT_EQ(s.ea.size(), 1u);
    EXPECT_EQ(s.ea[0].type, EventType::kUnreachable);
    EXPECT_EQ(s.ea[0].status, -ETIMEDOUT);
    EXPECT_EQ(s.net.now(), Instant{std::chrono::seconds(75)});  // 1+2+4+8+12*4 s
    EXPECT_EQ(s.a.stats().retransmissions, 8u);
    EXPECT_EQ(s.a.live_nodes(), 0u);
    EXPECT_EQ(s.a.pending_timers(), 0u);
    EXPECT_TRUE(s.eb.empty());
}

TEST(EndToEndLoss, ManySeedsAllConnect) {
    for (std::uint64_t seed = 100; seed < 140; ++seed) {
        SimPair s(seed, 0.2);
        ConnectParams p;
        p.local = {ip_a(), 0};
        p.remote = {ip_b(), 4791};
        p.remote_mac = kMacB;
        auto c = s.a.connect(s.net.now(), p);
        ASSERT_TRUE(c.has_value());
        s.net.run_until(s.net.now() + std::chrono::seconds(120));
        bool ok = s.count(s.ea, EventType::kEstablished) == 1;
        if (ok) (void)s.a.disconnect(s.net.now(), *c, DisconnectMode::kGraceful);
        s.net.run(1000000);
        EXPECT_EQ(s.a.live_nodes() + s.b.live_nodes(), 0u) << "seed " << seed;
        EXPECT_EQ(s.a.pending_timers() + s.b.pending_timers(), 0u) << "seed " << seed;
        EXPECT_EQ(s.a.stats().nodes_created, s.a.stats().nodes_destroyed) << "seed " << seed;
    }
}

}  // namespace
}  // namespace iwcm::test

namespace iwcm::test {
namespace {

TEST(Api, ReserveKeepsWorkingAndHandlesStayValid) {
    Dut d;
    d.core.reserve(10000);
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("after reserve"), 1, 1, false));
    EXPECT_EQ(text(e.pdata), "after reserve");
    ASSERT_TRUE(d.core.accept(d.now, e.conn, {}).has_value());
    d.core.reserve(20000);  // growing again keeps existing nodes and handles
    EXPECT_EQ(*d.core.state(e.conn), CmState::kEstablished);
}

}  // namespace
}  // namespace iwcm::test
