// Listeners, VLANs, addresses and TOS as the irdma driver has them:
// irdma_find_listener (a wildcard listener serves every address, each on its
// own VLAN; a specific one only its address's VLAN), irdma_if_notify (an
// address going away takes its connections, not its listeners), and
// irdma_make_cm_node / irdma_connect (a TOS per connection, the larger of the
// listener's and the SYN's for a passive one; the VLAN priority follows it).
#include <cerrno>

#include "cm/dut.hpp"

namespace iwcm::test {
namespace {

const IpAddr kIpC = *IpAddr::parse("10.0.0.3");

// The DUT's address 10.0.0.2 moves to `vlan` (and 10.0.0.3 is added on `vlan_c`).
void put_on(Dut& d, std::uint16_t vlan, std::uint16_t vlan_c = kNoVlan) {
    EXPECT_TRUE(d.core.remove_address(d.now, ip_b()).has_value());
    EXPECT_TRUE(d.core.add_address(ip_b(), vlan).has_value());
    if (vlan_c != kNoVlan) {
        EXPECT_TRUE(d.core.add_address(kIpC, vlan_c).has_value());
    }
}

wire::FrameRepr syn_to(const Dut& d, IpAddr dst, std::uint16_t vlan, std::uint8_t tos = 0) {
    auto syn = d.frame(tf::kSyn, wire::SeqNumber(1000), wire::SeqNumber(0));
    syn.ip.dst = dst;
    syn.ip.tos = tos;
    if (vlan != kNoVlan) syn.eth.vlan = wire::VlanTag{vlan, 0, false};
    return syn;
}

// The one frame the DUT answered with, which must be a SYN-ACK.
Sent syn_ack(Dut& d) {
    auto o = d.out();
    EXPECT_EQ(o.size(), 1u);
    if (o.empty()) return {};
    EXPECT_TRUE(o[0].flags(tf::kSyn | tf::kAck));
    return o[0];
}

TEST(Vlan, SpecificListenerServesOnlyItsAddressVlan) {
    Dut d;
    put_on(d, 100);
    ASSERT_TRUE(d.core.listen({d.self, 0}).has_value());
    // Untagged, or on another VLAN: the address does not live there.
    d.feed(syn_to(d, ip_b(), kNoVlan));
    d.feed(syn_to(d, ip_b(), 200));
    EXPECT_TRUE(d.out().empty());
    EXPECT_EQ(d.core.stats().drops(DropReason::kNotForUs), 2u);
    d.feed(syn_to(d, ip_b(), 100));
    Sent sa = syn_ack(d);
    ASSERT_TRUE(sa.repr.eth.vlan.has_value());
    EXPECT_EQ(*sa.repr.eth.vlan, (wire::VlanTag{100, 0, false}));
    EXPECT_EQ(d.core.live_nodes(), 1u);
}

TEST(Vlan, WildcardListenerServesEveryAddressOnItsOwnVlan) {
    Dut d;
    put_on(d, 100, 200);
    ASSERT_TRUE(d.core.listen({{*IpAddr::parse("0.0.0.0"), 4791}, 0}).has_value());
    d.feed(syn_to(d, ip_b(), 100));
    EXPECT_EQ(syn_ack(d).repr.eth.vlan->id, 100);
    d.feed(syn_to(d, kIpC, 200));
    Sent sa = syn_ack(d);
    ASSERT_TRUE(sa.repr.eth.vlan.has_value());
    EXPECT_EQ(sa.repr.eth.vlan->id, 200);
    EXPECT_EQ(sa.repr.ip.src, kIpC);
    // 10.0.0.3 on 10.0.0.2's VLAN is nobody's.
    d.feed(syn_to(d, kIpC, 100));
    EXPECT_TRUE(d.out().empty());
    EXPECT_EQ(d.core.live_nodes(), 2u);
}

TEST(Vlan, ListenAndConnectRefuseAVlanTheAddressIsNotOn) {
    Dut d;
    put_on(d, 100);
    EXPECT_EQ(d.core.listen({d.self, 0, 200}).error(), ApiError::kInvalidArgument);
    EXPECT_TRUE(d.core.listen({d.self, 0, 100}).has_value());
    ConnectParams p;
    p.local = {ip_b(), 0};
    p.remote = {ip_a(), 5000};
    p.remote_mac = kMacA;
    p.vlan = 200;
    EXPECT_EQ(d.core.connect(d.now, p).error(), ApiError::kInvalidArgument);
    EXPECT_EQ(d.core.add_address(kIpC, 4096).error(), ApiError::kInvalidArgument);
    EXPECT_TRUE(d.out().empty());
}

TEST(Vlan, ConnectTakesItsAddressVlan) {
    Dut d;
    put_on(d, 100);
    ConnectParams p = d.connect_params();
    Sent syn = d.to_syn_sent(p);
    ASSERT_TRUE(syn.repr.eth.vlan.has_value());
    EXPECT_EQ(*syn.repr.eth.vlan, (wire::VlanTag{100, 0, false}));
}

TEST(AddressDown, ListenerSurvivesHearsItAndServesAgain) {
    Dut d;
    auto l = d.core.listen({d.self, 0});
    ASSERT_TRUE(l.has_value());
    auto any = d.core.listen({{*IpAddr::parse("0.0.0.0"), 4792}, 0});
    ASSERT_TRUE(any.has_value());
    ASSERT_EQ(d.core.remove_address(d.now, ip_b()).value(), 0u);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);  // the specific listener only: the wildcard has other addresses
    EXPECT_EQ(e[0].type, EventType::kAddressDown);
    EXPECT_EQ(e[0].status, -ENETDOWN);
    EXPECT_EQ(e[0].listener, *l);
    EXPECT_FALSE(e[0].conn.valid());
    EXPECT_EQ(e[0].local, d.self);
    EXPECT_FALSE(e[0].terminal());
    // While it is gone a SYN finds nothing and draws nothing.
    d.feed(syn_to(d, ip_b(), kNoVlan));
    EXPECT_TRUE(d.out().empty());
    EXPECT_EQ(d.core.stats().drops(DropReason::kNotForUs), 1u);
    ASSERT_TRUE(d.core.add_address(ip_b()).has_value());
    e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kAddressUp);
    EXPECT_EQ(e[0].status, 0);
    EXPECT_EQ(e[0].listener, *l);
    d.feed(syn_to(d, ip_b(), kNoVlan));
    syn_ack(d);
    // destroy_listen still works on it, once.
    EXPECT_TRUE(d.core.destroy_listen(d.now, *l).has_value());
    EXPECT_EQ(d.core.destroy_listen(d.now, *l).error(), ApiError::kStaleHandle);
}

TEST(AddressDown, ConnectionsGoListenersStay) {
    Dut d;
    Ev req = d.to_mpareq_rcvd(request_v2(bytes("x")));
    ASSERT_EQ(d.core.remove_address(d.now, ip_b()).value(), 1u);
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].type, EventType::kConnectError);
    EXPECT_EQ(e[0].conn, req.conn);
    EXPECT_EQ(e[1].type, EventType::kAddressDown);
    EXPECT_EQ(e[1].listener, d.listener);
    EXPECT_EQ(d.core.stats().listeners_destroyed, 0u);
}

// DSCP 46 (EF): TOS 0xB8; PCP 46 / 8 = 5.
TEST(Tos, ConnectCarriesItsTosAndPriority) {
    Dut d;
    put_on(d, 100);
    ConnectParams p = d.connect_params();
    p.tos = 0xB8;
    Sent syn = d.to_syn_sent(p);
    EXPECT_EQ(syn.repr.ip.tos, 0xB8);
    ASSERT_TRUE(syn.repr.eth.vlan.has_value());
    EXPECT_EQ(*syn.repr.eth.vlan, (wire::VlanTag{100, 5, false}));
}

TEST(Tos, PassiveTakesTheLargerOfListenerAndSyn) {
    struct Case {
        std::uint8_t listener, syn, want;
    };
    for (Case c : {Case{0x20, 0x88, 0x88}, Case{0xB8, 0x00, 0xB8}, Case{0x00, 0x00, 0x00}}) {
        SCOPED_TRACE(::testing::Message()
                     << "listener " << int(c.listener) << " syn " << int(c.syn));
        Dut d;
        put_on(d, 100);
        ListenParams lp;
        lp.local = d.self;
        lp.tos = c.listener;
        ASSERT_TRUE(d.core.listen(lp).has_value());
        d.feed(syn_to(d, ip_b(), 100, c.syn));
        Sent sa = syn_ack(d);
        EXPECT_EQ(sa.repr.ip.tos, c.want);
        ASSERT_TRUE(sa.repr.eth.vlan.has_value());
        EXPECT_EQ(sa.repr.eth.vlan->priority, c.want >> 5);  // DSCP / 8
    }
}

TEST(Tos, PriorityMapIsOverridableAndHandedOff) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.dscp_to_pcp[46] = 6;
    cfg.tos = 0xB8;  // the default TOS of connections that name none
    Dut d(cfg);
    put_on(d, 100);
    ConnectParams p = d.connect_params();
    Sent syn = d.to_syn_sent(p);
    EXPECT_EQ(syn.repr.ip.tos, 0xB8);
    EXPECT_EQ(syn.repr.eth.vlan->priority, 6);
    auto sa = d.frame(tf::kSyn | tf::kAck, wire::SeqNumber(d.peer_iss), d.dut_nxt);
    sa.eth.vlan = wire::VlanTag{100, 0, false};
    d.feed(sa);
    auto req = d.out();
    ASSERT_EQ(req.size(), 1u);
    EXPECT_EQ(req[0].repr.ip.tos, 0xB8);
    EXPECT_EQ(req[0].repr.eth.vlan->priority, 6);
    d.dut_nxt += static_cast<std::uint32_t>(req[0].payload.size());
    const wire::MpaRepr rep = reply_v2(1, 1, false, 0);
    std::vector<std::byte> b(rep.buffer_len());
    rep.emit(b);
    auto f = d.frame(tf::kAck | tf::kPsh, d.peer_nxt, d.dut_nxt);
    f.eth.vlan = wire::VlanTag{100, 0, false};
    d.feed(f, b);
    ASSERT_EQ(d.evs().size(), 1u);  // established
    auto ctx = d.core.handoff(d.conn);
    ASSERT_TRUE(ctx.has_value());
    EXPECT_EQ(ctx->tos, 0xB8);
    EXPECT_EQ(ctx->pcp, 6);
    EXPECT_EQ(ctx->vlan, 100);
}

}  // namespace
}  // namespace iwcm::test
