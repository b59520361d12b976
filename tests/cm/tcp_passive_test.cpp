// Listener and SYN_RCVD, on exact frames (RFC 9293 3.10.7.2 and 3.10.7.4).
#include <cerrno>

#include "cm/dut.hpp"

namespace iwcm::test {
namespace {

TEST(Listen, SynGetsSynAckWithOptions) {
    Dut d;
    Sent sa = d.to_syn_rcvd(/*wscale=*/7, /*mss=*/1400);
    EXPECT_TRUE(sa.flags(tf::kSyn | tf::kAck));
    EXPECT_EQ(sa.tcp().ack.value(), d.peer_iss + 1);
    EXPECT_EQ(sa.tcp().options.mss, 1460);        // MTU 1500 - 40
    EXPECT_EQ(sa.tcp().options.window_scale, 2);  // the driver's shift
    EXPECT_EQ(sa.tcp().window, 64240);            // unscaled in a SYN
    EXPECT_EQ(sa.repr.eth.dst, kMacA);
    EXPECT_EQ(sa.repr.ip.dst, ip_a());
    EXPECT_EQ(d.transitions.back(), std::make_pair(CmState::kInited, CmState::kSynRcvd));
    EXPECT_EQ(d.core.stats().syns_received, 1u);
}

TEST(Listen, NoWindowScaleWhenPeerOffersNone) {
    Dut d;
    Sent sa = d.to_syn_rcvd(std::nullopt, std::nullopt);
    EXPECT_FALSE(sa.tcp().options.window_scale.has_value());
    d.seg(tf::kAck);
    // MSS 536 when absent; window not scaled either way.
    d.send_mpa(request_v2(bytes("x"), 1, 1, false));
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    ASSERT_TRUE(d.core.accept(d.now, e[0].conn, {}).has_value());
    auto h = d.core.handoff(e[0].conn);
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->mss, 536);
    EXPECT_EQ(h->snd_wscale, 0);
    EXPECT_EQ(h->rcv_wscale, 0);
}

TEST(Listen, SynToClosedPortGetsRstAck) {
    Dut d;
    d.feed(d.frame(tf::kSyn, wire::SeqNumber(500), wire::SeqNumber(0)));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    // RFC 9293 3.10.7.1: <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
    EXPECT_TRUE(o[0].flags(tf::kRst | tf::kAck));
    EXPECT_EQ(o[0].tcp().seq.value(), 0u);
    EXPECT_EQ(o[0].tcp().ack.value(), 501u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kNoListener), 1u);
}

// CoreConfig::listener_grace: a SYN to an endpoint whose listener was destroyed
// less than the grace ago goes unanswered (the peer retransmits it); a new
// listener on the endpoint takes the retransmission; after the grace, a reset.
TEST(Listen, SynInTheDestroyedListenersGraceWaitsForTheNextListener) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.listener_grace = std::chrono::seconds(3);
    Dut d(cfg);
    auto first = d.core.listen({d.self, 0});
    auto other = d.core.listen({{ip_b(), 4792}, 0});
    ASSERT_TRUE(first && other);
    ASSERT_TRUE(d.core.destroy_listen(d.now, *first).has_value());
    const auto syn = d.frame(tf::kSyn, wire::SeqNumber(500), wire::SeqNumber(0));
    d.feed(syn);
    EXPECT_TRUE(d.out().empty()) << "no reset in the grace";
    EXPECT_EQ(d.core.stats().drops(DropReason::kListenerGrace), 1u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kNoListener), 0u);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    // The program listens again; the peer's retransmission 1 s later is answered.
    d.now += std::chrono::seconds(1);
    auto second = d.core.listen({d.self, 0});
    ASSERT_TRUE(second.has_value());
    d.feed(syn);
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].flags(tf::kSyn | tf::kAck));
    EXPECT_EQ(o[0].tcp().ack.value(), 501u);
    // Destroyed again and left: the grace ends 3 s on, then a reset.
    ASSERT_TRUE(d.core.destroy_listen(d.now, *second).has_value());
    (void)d.out();
    auto late = d.frame(tf::kSyn, wire::SeqNumber(900), wire::SeqNumber(0));
    late.tcp.src_port = 5001;
    d.now += std::chrono::milliseconds(2999);
    d.feed(late);
    EXPECT_TRUE(d.out().empty());
    d.now += std::chrono::milliseconds(1);
    d.feed(late);
    o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].flags(tf::kRst | tf::kAck));
    EXPECT_EQ(o[0].tcp().ack.value(), 901u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kListenerGrace), 2u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kNoListener), 1u);
    // The other listener served all along.
    auto to_other = d.frame(tf::kSyn, wire::SeqNumber(700), wire::SeqNumber(0));
    to_other.tcp.dst_port = 4792;
    d.feed(to_other);
    o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].flags(tf::kSyn | tf::kAck));
}

TEST(Listen, WithoutAGraceADestroyedListenersSynIsReset) {
    Dut d;  // listener_grace 0, the default
    auto l = d.core.listen({d.self, 0});
    ASSERT_TRUE(l.has_value());
    ASSERT_TRUE(d.core.destroy_listen(d.now, *l).has_value());
    d.feed(d.frame(tf::kSyn, wire::SeqNumber(500), wire::SeqNumber(0)));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].flags(tf::kRst | tf::kAck));
    EXPECT_EQ(d.core.stats().drops(DropReason::kListenerGrace), 0u);
}

TEST(Listen, AckToNothingGetsRstAtItsAck) {
    Dut d;
    d.feed(d.frame(tf::kAck, wire::SeqNumber(500), wire::SeqNumber(777)));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].flags(tf::kRst));
    EXPECT_EQ(o[0].tcp().seq.value(), 777u);
}

TEST(Listen, RstToNothingIsDropped) {
    Dut d;
    d.feed(d.frame(tf::kRst, wire::SeqNumber(500), wire::SeqNumber(0)));
    EXPECT_TRUE(d.out().empty());
    EXPECT_EQ(d.core.stats().drops(DropReason::kRstIgnored), 1u);
}

TEST(Listen, FrameForAnotherMacOrAddressIsIgnored) {
    Dut d;
    auto f = d.frame(tf::kSyn, wire::SeqNumber(500), wire::SeqNumber(0));
    f.eth.dst = kMacA;
    d.feed(f);
    f = d.frame(tf::kSyn, wire::SeqNumber(500), wire::SeqNumber(0));
    f.ip.dst = *IpAddr::parse("10.0.0.99");
    d.feed(f);
    EXPECT_TRUE(d.out().empty());
    EXPECT_EQ(d.core.stats().drops(DropReason::kNotForUs), 2u);
}

TEST(Listen, WildcardListenerAndSpecificOneWins) {
    Dut d;
    ASSERT_TRUE(d.core.add_address(*IpAddr::parse("10.0.0.3")).has_value());
    auto any = d.core.listen({{*IpAddr::parse("0.0.0.0"), 4791}, 0});
    auto spec = d.core.listen({{ip_b(), 4791}, 0});
    ASSERT_TRUE(any && spec);
    EXPECT_EQ(d.core.listen({{ip_b(), 4791}, 0}).error(), ApiError::kAddressInUse);
    // To 10.0.0.2: the specific listener; to 10.0.0.3: the wildcard one.
    d.feed(d.frame(tf::kSyn, wire::SeqNumber(1000), wire::SeqNumber(0)));
    auto f = d.frame(tf::kSyn, wire::SeqNumber(2000), wire::SeqNumber(0));
    f.ip.dst = *IpAddr::parse("10.0.0.3");
    d.feed(f);
    auto o = d.out();
    ASSERT_EQ(o.size(), 2u);
    EXPECT_TRUE(o[0].flags(tf::kSyn | tf::kAck));
    EXPECT_TRUE(o[1].flags(tf::kSyn | tf::kAck));
    EXPECT_EQ(o[1].repr.ip.src, *IpAddr::parse("10.0.0.3"));
    // Destroying the specific listener resets its half-open connection only.
    ASSERT_TRUE(d.core.destroy_listen(d.now, *spec).has_value());
    o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].tcp().has(tf::kRst));
    EXPECT_EQ(o[0].repr.ip.src, ip_b());
    EXPECT_EQ(d.core.live_nodes(), 1u);
}

TEST(Listen, BacklogFullDropsSynAndCounts) {
    // With SYN cookies off (tests/cm/syncookie_test.cpp: on).
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.syn_cookies = false;
    Dut d(cfg);
    ASSERT_TRUE(d.core.listen({d.self, 2}).has_value());
    for (std::uint16_t i = 0; i < 4; ++i) {
        auto f = d.frame(tf::kSyn, wire::SeqNumber(1000u * i), wire::SeqNumber(0));
        f.tcp.src_port = static_cast<std::uint16_t>(6000 + i);
        d.feed(f);
    }
    EXPECT_EQ(d.out().size(), 2u);  // two SYN-ACKs, two silent drops
    EXPECT_EQ(d.core.stats().backlog_drops, 2u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kBacklogFull), 2u);
    EXPECT_EQ(d.core.live_nodes(), 2u);
}

TEST(Listen, DestroyListenResetsUnfinishedAndAnswersLaterSyns) {
    Dut d;
    d.to_syn_rcvd();
    ASSERT_TRUE(d.core.destroy_listen(d.now, d.listener).has_value());
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].flags(tf::kRst | tf::kAck));
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
    EXPECT_EQ(d.core.destroy_listen(d.now, d.listener).error(), ApiError::kStaleHandle);
    EXPECT_EQ(d.core.stats().listeners_destroyed, 1u);
}

TEST(SynRcvd, RetransmittedSynGetsTheSameSynAck) {
    Dut d;
    Sent first = d.to_syn_rcvd();
    d.feed(d.frame(tf::kSyn, wire::SeqNumber(d.peer_iss), wire::SeqNumber(0)));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o[0].raw, first.raw);
}

TEST(SynRcvd, SynAckRetransmittedOnTimerThenDroppedQuietly) {
    Dut d;
    Sent first = d.to_syn_rcvd();
    Frame again = d.sent_frame(tf::kSyn | tf::kAck, first.tcp().seq, d.peer_nxt);
    again.repr.tcp.options = {1460, 2, false, std::nullopt};  // our MSS and scale, unscaled window
    again.repr.tcp.window = 64240;
    // Backoff 1, 2, 4, 8, 12, 12, 12, 12 s: retransmissions at 1, 3, 7, 15, 27, 39, 51, 63 s.
    for (int t : {1, 3, 7, 15, 27, 39, 51, 63}) {
        quiet_until(d, std::chrono::seconds(t));
        expect_sent(d, {again});
    }
    quiet_until(d, std::chrono::seconds(75));
    // Retries exhausted in SYN_RCVD: the half-open node goes without a word.
    expect_nothing_sent(d);
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.stats().retransmissions, 8u);
}

TEST(SynRcvd, AckWithWrongNumberGetsRst) {
    Dut d;
    d.to_syn_rcvd();
    d.feed(d.frame(tf::kAck, d.peer_nxt, d.dut_nxt + 5));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].flags(tf::kRst));
    EXPECT_EQ(o[0].tcp().seq, d.dut_nxt + 5);
    EXPECT_EQ(d.core.live_nodes(), 1u);  // the half-open node stays
}

TEST(SynRcvd, ExactRstDropsNodeQuietly) {
    Dut d;
    d.to_syn_rcvd();
    d.feed(d.frame(tf::kRst, d.peer_nxt, wire::SeqNumber(0)));
    EXPECT_TRUE(d.out().empty());
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.stats().resets_received, 1u);
}

TEST(SynRcvd, InWindowRstGetsChallengeAck) {
    Dut d;
    d.to_syn_rcvd();
    d.feed(d.frame(tf::kRst, d.peer_nxt + 10, wire::SeqNumber(0)));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].flags(tf::kAck));
    EXPECT_EQ(o[0].tcp().ack, d.peer_nxt);
    EXPECT_EQ(d.core.live_nodes(), 1u);
}

TEST(SynRcvd, AckCarryingTheMpaRequestIsTaken) {
    Dut d;
    d.to_syn_rcvd();
    auto pd = bytes("piggyback");
    auto req = request_v2(pd);
    std::vector<std::byte> b(req.buffer_len());
    req.emit(b);
    d.seg(tf::kAck | tf::kPsh, b);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kConnectRequest);
    EXPECT_EQ(text(e[0].pdata), "piggyback");
}

TEST(MpaReqWait, RequestTimerResetsSilentPeer) {
    Dut d;
    d.to_mpareq_wait();
    EXPECT_EQ(d.core.pending_timers(), 1u);    // the request wait; nothing to retransmit
    quiet_until(d, std::chrono::seconds(10));  // request_timeout 10 s
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)});
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

}  // namespace
}  // namespace iwcm::test
