// End-to-end scenarios between two cores wired back to back.
#include <cerrno>

#include "cm/harness.hpp"

namespace iwcm::test {
namespace {

TEST(EndToEnd, ConnectAcceptDisconnectV2PeerToPeer) {
    Pair p;
    auto l = p.b.listen({{ip_b(), 4791}, 0});
    ASSERT_TRUE(l.has_value());
    auto req_pd = bytes("hello from A");
    auto cp = p.connect_params();
    cp.private_data = req_pd;
    cp.ird = 4;
    cp.ord = 2;
    auto c = p.a.connect(p.now, cp);
    ASSERT_TRUE(c.has_value());
    p.pump();
    auto eb = events(p.b);
    ASSERT_EQ(eb.size(), 1u);
    EXPECT_EQ(eb[0].type, EventType::kConnectRequest);
    EXPECT_EQ(text(eb[0].pdata), "hello from A");
    EXPECT_EQ(eb[0].mpa.revision, 2);
    EXPECT_EQ(eb[0].mpa.ird, 4);
    EXPECT_EQ(eb[0].mpa.ord, 2);
    EXPECT_TRUE(eb[0].mpa.peer_to_peer);
    EXPECT_EQ(eb[0].mpa.rtr_offered, rtr::kAll);
    EXPECT_EQ(*p.b.state(eb[0].conn), CmState::kMpaReqRcvd);

    auto rep_pd = bytes("welcome, A");
    AcceptParams ap;
    ap.private_data = rep_pd;
    ap.ird = 2;
    ap.ord = 8;
    ASSERT_TRUE(p.b.accept(p.now, eb[0].conn, ap).has_value());
    p.pump();
    auto ea = events(p.a);
    ASSERT_EQ(ea.size(), 1u);
    EXPECT_EQ(ea[0].type, EventType::kEstablished);
    EXPECT_EQ(text(ea[0].pdata), "welcome, A");
    EXPECT_EQ(ea[0].mpa.rtr, RtrType::kSend);
    // Responder: ORD lowered to the initiator's IRD (4), IRD raised to its ORD (2).
    eb = events(p.b);
    ASSERT_EQ(eb.size(), 1u);
    EXPECT_EQ(eb[0].type, EventType::kEstablished);
    EXPECT_EQ(eb[0].mpa.ord, 4);
    EXPECT_EQ(eb[0].mpa.ird, 2);
    EXPECT_EQ(ea[0].mpa.ord, 2);

    ASSERT_TRUE(p.a.disconnect(p.now, *c, DisconnectMode::kGraceful).has_value());
    p.advance(p.now + std::chrono::seconds(1));
    ea = events(p.a);
    eb = events(p.b);
    ASSERT_EQ(ea.size(), 1u);
    EXPECT_EQ(ea[0].type, EventType::kDisconnected);
    ASSERT_EQ(eb.size(), 1u);
    EXPECT_EQ(eb[0].type, EventType::kDisconnected);
    EXPECT_EQ(p.a.live_nodes(), 0u);
    EXPECT_EQ(p.b.live_nodes(), 0u);
    EXPECT_EQ(p.a.pending_timers(), 0u);
    EXPECT_EQ(p.b.pending_timers(), 0u);
    EXPECT_EQ(p.a.stats().nodes_created, p.a.stats().nodes_destroyed);
    EXPECT_EQ(p.b.stats().nodes_created, p.b.stats().nodes_destroyed);
    EXPECT_EQ(p.a.state(*c).error(), ApiError::kStaleHandle);
}

}  // namespace
}  // namespace iwcm::test
