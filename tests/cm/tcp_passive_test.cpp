// Listener and SYN_RCVD, on exact frames (RFC 9293 3.10.7.2 and 3.10.7.4). Every frame the
// DUT sends is compared whole.
#include <cerrno>
#include <source_location>
#include <vector>

#include "cm/dut.hpp"

namespace iwcm::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// The DUT's answer to a SYN at `peer_seq` from no connection (RFC 9293 3.10.7.1):
// <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>, without a window.
Frame rst_ack_to_syn(const Dut& d, std::uint32_t peer_seq) {
    return d.sent_frame(tf::kRst | tf::kAck, wire::SeqNumber(0), wire::SeqNumber(peer_seq + 1))
        .with_window(0);
}

// The SYN-ACK the DUT answers a SYN at `peer_seq` with, from the listener at `local`: at the
// ISN RFC 6528 gives the tuple now, the window shift offered back only to a SYN that offered
// one.
Frame syn_ack_to(const Dut& d, const Endpoint& local, std::uint32_t peer_seq, bool wscale) {
    Frame f = d.sent_syn(tf::kSyn | tf::kAck, d.isn(local, d.peer), wire::SeqNumber(peer_seq + 1),
                         wscale);
    f.repr.ip.src = local.addr;
    f.repr.tcp.src_port = local.port;
    return f;
}

// Listen and take the peer's SYN: the DUT answers exactly with its SYN-ACK (SYN_RCVD).
// Returns that frame as expected; `raw`, when given, takes the bytes sent.
Frame syn_rcvd(Dut& d, std::optional<std::uint8_t> wscale = 7,
               std::optional<std::uint16_t> mss = 1460, std::vector<std::byte>* raw = nullptr,
               std::source_location at = std::source_location::current()) {
    const Frame sa = syn_ack_to(d, d.self, d.peer_iss, wscale.has_value());
    d.start_passive(wscale, mss);
    const std::vector<Sent> got = expect_sent(d, {sa}, at);
    if (raw != nullptr && !got.empty()) *raw = got[0].raw;
    return sa;
}

TEST(Listen, SynGetsSynAckWithOptions) {
    Dut d;
    Frame sa = d.sent_frame(tf::kSyn | tf::kAck, d.isn(), wire::SeqNumber(d.peer_iss + 1));
    sa.repr.tcp.options = {1460, 2, false, std::nullopt};  // MTU 1500 - 40, the driver's shift
    sa.repr.tcp.window = 64240;                            // unscaled in a SYN
    d.start_passive(/*wscale=*/7, /*mss=*/1400);
    expect_sent(d, {sa});
    EXPECT_EQ(d.transitions.back(), std::make_pair(CmState::kInited, CmState::kSynRcvd));
    EXPECT_EQ(d.core.stats().syns_received, 1u);
}

TEST(Listen, NoWindowScaleWhenPeerOffersNone) {
    Dut d;
    syn_rcvd(d, std::nullopt, std::nullopt);  // no window shift offered back
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    // MSS 536 when absent; window not scaled either way.
    d.send_mpa(request_v2(bytes("x"), 1, 1, false));
    expect_sent(d, {d.sent_ack().with_window(64240)});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    ASSERT_TRUE(d.core.accept(d.now, e[0].conn, {}).has_value());
    std::vector<std::byte> reply(reply_v2(1, 1, false, 0).buffer_len());
    reply_v2(1, 1, false, 0).emit(reply);
    expect_sent(
        d, {d.sent_frame(tf::kAck | tf::kPsh, d.dut_nxt, d.peer_nxt, reply).with_window(64240)});
    auto h = d.core.handoff(e[0].conn);
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->mss, 536);
    EXPECT_EQ(h->snd_wscale, 0);
    EXPECT_EQ(h->rcv_wscale, 0);
}

TEST(Listen, SynToClosedPortGetsRstAck) {
    Dut d;
    d.feed(d.frame(tf::kSyn, wire::SeqNumber(500), wire::SeqNumber(0)));
    // RFC 9293 3.10.7.1: <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
    expect_sent(d, {rst_ack_to_syn(d, 500)});
    EXPECT_EQ(d.core.stats().drops(DropReason::kNoListener), 1u);
}

// CoreConfig::listener_grace: a SYN to an endpoint whose listener was destroyed
// less than the grace ago goes unanswered (the peer retransmits it); a new
// listener on the endpoint takes the retransmission; after the grace, a reset.
TEST(Listen, SynInTheDestroyedListenersGraceWaitsForTheNextListener) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.listener_grace = seconds(3);
    Dut d(cfg);
    const Endpoint other_ep{ip_b(), 4792};
    auto first = d.core.listen({d.self, 0});
    auto other = d.core.listen({other_ep, 0});
    ASSERT_TRUE(first && other);
    ASSERT_TRUE(d.core.destroy_listen(d.now, *first).has_value());
    const auto syn = d.frame(tf::kSyn, wire::SeqNumber(500), wire::SeqNumber(0));
    d.feed(syn);
    expect_nothing_sent(d);  // no reset in the grace
    EXPECT_EQ(d.core.stats().drops(DropReason::kListenerGrace), 1u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kNoListener), 0u);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    // The program listens again; the peer's retransmission 1 s later is answered.
    d.now += seconds(1);
    auto second = d.core.listen({d.self, 0});
    ASSERT_TRUE(second.has_value());
    d.feed(syn);
    const Frame sa = syn_ack_to(d, d.self, 500, false);
    expect_sent(d, {sa});
    // Destroyed again and left: its half-open connection is reset, the grace ends 3 s on,
    // then a reset.
    ASSERT_TRUE(d.core.destroy_listen(d.now, *second).has_value());
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, sa.repr.tcp.seq + 1, wire::SeqNumber(501))
                        .with_window(64240)});
    auto late = d.frame(tf::kSyn, wire::SeqNumber(900), wire::SeqNumber(0));
    late.tcp.src_port = 5001;
    d.now += milliseconds(2999);
    d.feed(late);
    expect_nothing_sent(d);
    d.now += milliseconds(1);
    d.feed(late);
    Frame reset = rst_ack_to_syn(d, 900);
    reset.repr.tcp.dst_port = 5001;
    expect_sent(d, {reset});
    EXPECT_EQ(d.core.stats().drops(DropReason::kListenerGrace), 2u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kNoListener), 1u);
    // The other listener served all along.
    auto to_other = d.frame(tf::kSyn, wire::SeqNumber(700), wire::SeqNumber(0));
    to_other.tcp.dst_port = other_ep.port;
    d.feed(to_other);
    expect_sent(d, {syn_ack_to(d, other_ep, 700, false)});
}

TEST(Listen, WithoutAGraceADestroyedListenersSynIsReset) {
    Dut d;  // listener_grace 0, the default
    auto l = d.core.listen({d.self, 0});
    ASSERT_TRUE(l.has_value());
    ASSERT_TRUE(d.core.destroy_listen(d.now, *l).has_value());
    expect_nothing_sent(d);
    d.feed(d.frame(tf::kSyn, wire::SeqNumber(500), wire::SeqNumber(0)));
    expect_sent(d, {rst_ack_to_syn(d, 500)});
    EXPECT_EQ(d.core.stats().drops(DropReason::kListenerGrace), 0u);
}

TEST(Listen, AckToNothingGetsRstAtItsAck) {
    Dut d;
    d.feed(d.frame(tf::kAck, wire::SeqNumber(500), wire::SeqNumber(777)));
    // RFC 9293 3.10.7.1: <SEQ=SEG.ACK><CTL=RST>.
    expect_sent(d,
                {d.sent_frame(tf::kRst, wire::SeqNumber(777), wire::SeqNumber(0)).with_window(0)});
}

TEST(Listen, RstToNothingIsDropped) {
    Dut d;
    d.feed(d.frame(tf::kRst, wire::SeqNumber(500), wire::SeqNumber(0)));
    expect_nothing_sent(d);
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
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.stats().drops(DropReason::kNotForUs), 2u);
}

TEST(Listen, WildcardListenerAndSpecificOneWins) {
    Dut d;
    const IpAddr third = *IpAddr::parse("10.0.0.3");
    ASSERT_TRUE(d.core.add_address(third).has_value());
    auto any = d.core.listen({{*IpAddr::parse("0.0.0.0"), 4791}, 0});
    auto spec = d.core.listen({{ip_b(), 4791}, 0});
    ASSERT_TRUE(any && spec);
    EXPECT_EQ(d.core.listen({{ip_b(), 4791}, 0}).error(), ApiError::kAddressInUse);
    // To 10.0.0.2: the specific listener; to 10.0.0.3: the wildcard one.
    d.feed(d.frame(tf::kSyn, wire::SeqNumber(1000), wire::SeqNumber(0)));
    auto f = d.frame(tf::kSyn, wire::SeqNumber(2000), wire::SeqNumber(0));
    f.ip.dst = third;
    d.feed(f);
    const Frame to_spec = syn_ack_to(d, d.self, 1000, false);
    expect_sent(d, {to_spec, syn_ack_to(d, {third, 4791}, 2000, false)});
    // Destroying the specific listener resets its half-open connection only.
    ASSERT_TRUE(d.core.destroy_listen(d.now, *spec).has_value());
    expect_sent(d,
                {d.sent_frame(tf::kRst | tf::kAck, to_spec.repr.tcp.seq + 1, wire::SeqNumber(1001))
                     .with_window(64240)});
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
    // Two SYN-ACKs, two silent drops.
    auto syn_ack_to_port = [&](std::uint16_t port, std::uint32_t peer_seq) {
        Frame f = d.sent_syn(tf::kSyn | tf::kAck, d.isn(d.self, {d.peer.addr, port}),
                             wire::SeqNumber(peer_seq + 1), false);
        f.repr.tcp.dst_port = port;
        return f;
    };
    expect_sent(d, {syn_ack_to_port(6000, 0), syn_ack_to_port(6001, 1000)});
    EXPECT_EQ(d.core.stats().backlog_drops, 2u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kBacklogFull), 2u);
    EXPECT_EQ(d.core.live_nodes(), 2u);
}

TEST(Listen, DestroyListenResetsUnfinishedAndAnswersLaterSyns) {
    Dut d;
    syn_rcvd(d);
    ASSERT_TRUE(d.core.destroy_listen(d.now, d.listener).has_value());
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)});
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
    EXPECT_EQ(d.core.destroy_listen(d.now, d.listener).error(), ApiError::kStaleHandle);
    EXPECT_EQ(d.core.stats().listeners_destroyed, 1u);
}

TEST(SynRcvd, RetransmittedSynGetsTheSameSynAck) {
    Dut d;
    std::vector<std::byte> first;
    const Frame sa = syn_rcvd(d, 7, 1460, &first);
    d.feed(d.frame(tf::kSyn, wire::SeqNumber(d.peer_iss), wire::SeqNumber(0)));
    const std::vector<Sent> again = expect_sent(d, {sa});
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].raw, first);
}

TEST(SynRcvd, SynAckRetransmittedOnTimerThenDroppedQuietly) {
    Dut d;
    const Frame again = syn_rcvd(d);
    // Backoff 1, 2, 4, 8, 12, 12, 12, 12 s: retransmissions at 1, 3, 7, 15, 27, 39, 51, 63 s.
    for (int t : {1, 3, 7, 15, 27, 39, 51, 63}) {
        quiet_until(d, seconds(t));
        expect_sent(d, {again});
    }
    quiet_until(d, seconds(75));
    // Retries exhausted in SYN_RCVD: the half-open node goes without a word.
    expect_nothing_sent(d);
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.stats().retransmissions, 8u);
}

TEST(SynRcvd, AckWithWrongNumberGetsRst) {
    Dut d;
    syn_rcvd(d);
    d.feed(d.frame(tf::kAck, d.peer_nxt, d.dut_nxt + 5));
    // RFC 9293 3.10.7.4: <SEQ=SEG.ACK><CTL=RST>.
    expect_sent(d, {d.sent_frame(tf::kRst, d.dut_nxt + 5, wire::SeqNumber(0)).with_window(0)});
    EXPECT_EQ(d.core.live_nodes(), 1u);  // the half-open node stays
}

TEST(SynRcvd, ExactRstDropsNodeQuietly) {
    Dut d;
    syn_rcvd(d);
    d.feed(d.frame(tf::kRst, d.peer_nxt, wire::SeqNumber(0)));
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.stats().resets_received, 1u);
}

TEST(SynRcvd, InWindowRstGetsChallengeAck) {
    Dut d;
    syn_rcvd(d);
    d.feed(d.frame(tf::kRst, d.peer_nxt + 10, wire::SeqNumber(0)));
    expect_sent(d, {d.sent_ack()});
    EXPECT_EQ(d.core.live_nodes(), 1u);
}

TEST(SynRcvd, AckCarryingTheMpaRequestIsTaken) {
    Dut d;
    syn_rcvd(d);
    auto pd = bytes("piggyback");
    auto req = request_v2(pd);
    std::vector<std::byte> b(req.buffer_len());
    req.emit(b);
    d.seg(tf::kAck | tf::kPsh, b);
    expect_sent(d, {d.sent_ack()});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kConnectRequest);
    EXPECT_EQ(text(e[0].pdata), "piggyback");
}

TEST(MpaReqWait, RequestTimerResetsSilentPeer) {
    Dut d;
    syn_rcvd(d);
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.pending_timers(), 1u);  // the request wait; nothing to retransmit
    quiet_until(d, seconds(10));             // request_timeout 10 s
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)});
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

}  // namespace
}  // namespace iwcm::test
