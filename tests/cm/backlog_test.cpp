// A backlog no peer can fill: connections past the handshake that never send their MPA
// request (MPAREQ_WAIT, "silent") are held apart from the backlog and the oldest is shed
// first, on exact frames with the virtual clock.
//
// Read first: docs/design.md "Backlog", src/cm/tcp.cpp (on_listen_syn, enter_silence,
// shed_oldest_silent), tests/cm/syncookie_test.cpp (the cookies beside it).
#include <algorithm>
#include <deque>

#include "cm/dut.hpp"
#include "cm/syncookie.hpp"

namespace iwcm::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// One peer connection as the peer sees it: its port, its ISN, the DUT's ISN.
struct PeerConn {
    std::uint16_t port = 0;
    std::uint32_t iss = 0;
    wire::SeqNumber dut_iss{};
};

// The SYN-ACK a node (not a cookie) answers a SYN with MSS 1460 and window shift 7.
Frame syn_ack_of(const Dut& d, const PeerConn& c) {
    Frame f = d.sent_frame(tf::kSyn | tf::kAck, c.dut_iss, wire::SeqNumber(c.iss + 1));
    f.repr.tcp.options = {1460, 2, false, std::nullopt};  // our MSS and scale
    f.repr.tcp.window = 64240;                            // a SYN's window is never scaled
    f.repr.tcp.dst_port = c.port;
    return f;
}

// The reset that ends a silent connection (shed, or at its request timer): at the DUT's next
// sequence, acknowledging the peer's SYN (nothing more came).
Frame reset_of(const Dut& d, const PeerConn& c) {
    Frame f = d.sent_frame(tf::kRst | tf::kAck, c.dut_iss + 1, wire::SeqNumber(c.iss + 1));
    f.repr.tcp.dst_port = c.port;
    return f;
}

// The peer of `c` sends its SYN; the DUT must answer it from a node (live_nodes grows, no
// cookie): exactly that SYN-ACK, at the ISN RFC 6528 gives the tuple. Fills in c.dut_iss.
void syn_answered(Dut& d, PeerConn& c, std::source_location at = std::source_location::current()) {
    d.peer.port = c.port;
    auto syn = d.frame(tf::kSyn, wire::SeqNumber(c.iss), wire::SeqNumber(0));
    syn.tcp.options.mss = 1460;
    syn.tcp.options.window_scale = 7;
    const std::size_t live = d.core.live_nodes();
    const std::uint64_t cookies = d.core.stats().syn_cookies_sent;
    d.feed(syn);
    c.dut_iss = d.isn();
    expect_sent(d, {syn_ack_of(d, c)}, at);
    EXPECT_EQ(d.core.live_nodes(), live + 1)
        << "port " << c.port << " (at line " << at.line() << ")";
    EXPECT_EQ(d.core.stats().syn_cookies_sent, cookies);
}

// The handshake's ACK of `c`, nothing in it.
void ack_handshake(Dut& d, const PeerConn& c) {
    d.peer.port = c.port;
    d.feed(d.frame(tf::kAck, wire::SeqNumber(c.iss + 1), c.dut_iss + 1));
}

// A peer that completes the handshake and then says nothing. `silent` holds the silent
// connections the DUT still has, oldest first: at the limit its ACK must shed the oldest
// of them with exactly one reset, and nothing else goes out.
void open_silent(Dut& d, PeerConn c, std::deque<PeerConn>& silent, std::size_t limit) {
    syn_answered(d, c);
    ack_handshake(d, c);
    if (silent.size() == limit) {
        expect_sent(d, {reset_of(d, silent.front())});
        silent.pop_front();
    } else {
        expect_nothing_sent(d);
    }
    silent.push_back(c);
}

// 1,000 peers connect and never speak, 100 more every virtual second for five seconds
// (the flood of issue 37, item 4): a listener of backlog 16 answers each SYN from a node,
// sheds the oldest silent connection for each new one, and a real client that arrives then
// connects at once: its SYN answered, its request reported, its reply sent, in one instant.
TEST(Backlog, SilentPeersCannotKeepAClientOut) {
    constexpr std::uint32_t kBacklog = 16;
    Dut d;
    auto l = d.core.listen({d.self, kBacklog});
    ASSERT_TRUE(l.has_value());
    std::deque<PeerConn> silent;
    std::uint32_t opened = 0;
    auto next = [&] {
        ++opened;
        return PeerConn{static_cast<std::uint16_t>(10000 + opened), 7919u * opened, {}};
    };
    for (int i = 0; i < 1000; ++i) open_silent(d, next(), silent, kBacklog);
    for (int second = 0; second < 5; ++second) {
        for (int i = 0; i < 100; ++i) {
            d.advance(milliseconds(10));
            open_silent(d, next(), silent, kBacklog);
        }
    }
    ASSERT_EQ(opened, 1500u);
    ASSERT_EQ(silent.size(), kBacklog);
    EXPECT_TRUE(d.evs().empty());  // nobody above heard of any of them
    EXPECT_EQ(d.core.stats().silent_shed, opened - kBacklog);
    EXPECT_EQ(d.core.live_nodes(), kBacklog);

    // The client: SYN answered from a node, not a cookie; its ACK sheds the oldest silent
    // connection (it is silent itself until its request comes); its request is reported at
    // once and accepted.
    const Instant arrived = d.now;
    PeerConn client{5000, d.peer_iss, {}};
    syn_answered(d, client);
    ack_handshake(d, client);
    expect_sent(d, {reset_of(d, silent.front())});
    silent.pop_front();
    d.peer.port = client.port;
    d.peer_nxt = wire::SeqNumber(client.iss + 1);
    d.dut_nxt = client.dut_iss + 1;
    d.send_mpa(request_v1(bytes("a real client")));
    expect_sent(d, {d.sent_ack()});  // the request's ACK (held for the reply, none yet)
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kConnectRequest);
    EXPECT_EQ(e[0].remote, (Endpoint{ip_a(), client.port}));
    EXPECT_EQ(e[0].listener, *l);
    EXPECT_EQ(text(e[0].pdata), "a real client");
    wire::MpaRepr reply = accept_and_take_reply(d, e[0], {}, 1);
    EXPECT_EQ(reply.kind, wire::MpaKind::kReply);
    EXPECT_EQ(d.now, arrived);  // no retransmission waited for: the same instant
    auto est = d.evs();
    ASSERT_EQ(est.size(), 1u);
    EXPECT_EQ(est[0].type, EventType::kEstablished);
    d.seg(tf::kAck);  // the client acknowledges the reply
    expect_nothing_sent(d);

    const Stats& s = d.core.stats();
    EXPECT_EQ(s.silent_shed, opened - kBacklog + 1);
    EXPECT_EQ(s.resets_sent, s.silent_shed);
    EXPECT_EQ(s.passive_errors, s.silent_shed);  // each a failed setup of the peer's
    EXPECT_EQ(s.backlog_drops, 0u);
    EXPECT_EQ(s.syn_cookies_sent, 0u);
    EXPECT_EQ(s.drops_total(), 0u);
    EXPECT_EQ(s.syns_received, opened + 1);
    EXPECT_EQ(s.accepts, 1u);
    EXPECT_EQ(s.established, 1u);
    EXPECT_EQ(d.core.live_nodes(), kBacklog);  // the silent ones left, and the client
    // The silent ones still end at their request timer, 10 s after each fell silent.
    d.advance(seconds(11));
    std::vector<Sent> last = d.out();
    ASSERT_EQ(last.size(), silent.size());
    for (std::size_t i = 0; i < last.size(); ++i) {
        const std::string diff = detail::frame_diff(reset_of(d, silent[i]), last[i]);
        EXPECT_TRUE(diff.empty()) << "request timer's reset " << i << ":\n" << diff;
    }
    EXPECT_EQ(d.core.live_nodes(), 1u);
    EXPECT_EQ(d.core.stats().silent_shed, opened - kBacklog + 1);
}

// Connections that spoke are not silent: they are never shed, and those that end or are
// answered meanwhile leave the order without disturbing it. A silent limit of its own
// (CoreConfig::silent_limit) apart from the backlog.
TEST(Backlog, OnlyTheOldestStillSilentIsShed) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.silent_limit = 3;
    Dut d(cfg);
    auto l = d.core.listen({d.self, 1000});
    ASSERT_TRUE(l.has_value());
    std::uint16_t port = 20000;
    auto conn = [&] { return PeerConn{++port, 1000u * port, {}}; };
    std::deque<PeerConn> silent;
    // The oldest falls silent first; then 200 peers that ACK, then send their request (the
    // kernel's two segments) and are rejected, each silent for a moment after a live one.
    open_silent(d, conn(), silent, 3);
    for (int i = 0; i < 200; ++i) {
        PeerConn c = conn();
        syn_answered(d, c);
        ack_handshake(d, c);
        expect_nothing_sent(d);
        d.peer_nxt = wire::SeqNumber(c.iss + 1);
        d.dut_nxt = c.dut_iss + 1;
        d.send_mpa(request_v1(bytes("speaks")));
        auto e = d.evs();
        ASSERT_EQ(e.size(), 1u);
        ASSERT_EQ(e[0].type, EventType::kConnectRequest);
        d.out();
        ASSERT_TRUE(d.core.reject(d.now, e[0].conn, {}).has_value());
        d.out();
    }
    // One whose request is reported and not yet answered: not silent, never shed.
    PeerConn waiting = conn();
    syn_answered(d, waiting);
    d.peer_nxt = wire::SeqNumber(waiting.iss + 1);
    d.dut_nxt = waiting.dut_iss + 1;
    d.send_mpa(request_v1(bytes("waits")));  // the request with the handshake's ACK
    auto req = d.evs();
    ASSERT_EQ(req.size(), 1u);
    d.out();
    // A silent one that ends by itself (its peer's RST) before it would be shed.
    PeerConn gone = conn();
    open_silent(d, gone, silent, 3);
    d.peer.port = gone.port;
    d.feed(d.frame(tf::kRst, wire::SeqNumber(gone.iss + 1), wire::SeqNumber(0)));
    expect_nothing_sent(d);
    silent.pop_back();
    // Two more fill the limit; the next sheds the first silent one, the next the second.
    for (int i = 0; i < 4; ++i) open_silent(d, conn(), silent, 3);
    EXPECT_EQ(d.core.stats().silent_shed, 2u);
    EXPECT_EQ(silent.size(), 3u);
    // The request still waits for its answer.
    ASSERT_TRUE(d.core.accept(d.now, req[0].conn, {}).has_value());
    EXPECT_EQ(d.core.stats().accepts, 1u);
    EXPECT_EQ(d.core.stats().rejects, 200u);
}

// Silent connections never count in the backlog: with the backlog's worth of them, a SYN
// is answered from a node; half-open ones and unanswered requests still fill it (cookies,
// then drops).
TEST(Backlog, SilentOnesDoNotCountInIt) {
    Dut d;
    ASSERT_TRUE(d.core.listen({d.self, 2}).has_value());
    std::deque<PeerConn> silent;
    open_silent(d, {30001, 11, {}}, silent, 2);
    open_silent(d, {30002, 22, {}}, silent, 2);
    PeerConn half{30003, 33, {}};
    syn_answered(d, half);  // a node, though two connections are held
    PeerConn asked{30004, 44, {}};
    syn_answered(d, asked);
    d.peer_nxt = wire::SeqNumber(asked.iss + 1);
    d.dut_nxt = asked.dut_iss + 1;
    d.send_mpa(request_v1(bytes("asks")));
    ASSERT_EQ(d.evs().size(), 1u);
    expect_sent(d, {d.sent_ack()});
    // One half-open and one unanswered request: the backlog of 2 is full; a SYN gets a
    // cookie (no node): our ISN the cookie of this tuple and period (src/cm/syncookie.hpp),
    // for a SYN without options (MSS 536, no window shift).
    d.peer.port = 30005;
    const std::size_t live = d.core.live_nodes();
    d.feed(d.frame(tf::kSyn, wire::SeqNumber(55), wire::SeqNumber(0)));
    const CoreConfig& cfg = d.core.config();
    const std::uint64_t period = cm::cookie_period(d.now, cfg.syn_cookie_period);
    const wire::SeqNumber cookie_isn(
        cm::make_cookie(cm::cookie_key(cfg.syn_cookie_secret, cfg.isn_secret, period), period,
                        {d.self, d.peer, kNoVlan, 55}, {536, std::nullopt}));
    expect_sent(d, {d.sent_syn(tf::kSyn | tf::kAck, cookie_isn, wire::SeqNumber(56), false)});
    EXPECT_EQ(d.core.live_nodes(), live);
    EXPECT_EQ(d.core.stats().syn_cookies_sent, 1u);
    EXPECT_EQ(d.core.stats().silent_shed, 0u);
    // Its ACK returns the cookie: the node it makes falls silent like any other, and at the
    // limit sheds the oldest silent one.
    PeerConn cookie{30005, 55, cookie_isn};
    ack_handshake(d, cookie);
    expect_sent(d, {reset_of(d, silent.front())});
    EXPECT_EQ(d.core.stats().syn_cookies_accepted, 1u);
    EXPECT_EQ(d.core.stats().silent_shed, 1u);
    EXPECT_EQ(d.core.live_nodes(), live);  // one made, one shed
}

// A listener destroyed with silent connections resets them all; its slot, listened on
// again, starts with none: the next ones fill the new limit before any is shed.
TEST(Backlog, DestroyedListenerTakesItsSilentOnes) {
    Dut d;
    auto l = d.core.listen({d.self, 2});
    ASSERT_TRUE(l.has_value());
    std::deque<PeerConn> silent;
    for (std::uint16_t p = 40001; p <= 40004; ++p) open_silent(d, {p, 100u * p, {}}, silent, 2);
    EXPECT_EQ(d.core.stats().silent_shed, 2u);
    ASSERT_TRUE(d.core.destroy_listen(d.now, *l).has_value());
    // In the table's order, not the silent ones' (destroy_listen walks the table).
    std::vector<Sent> resets = d.out();
    ASSERT_EQ(resets.size(), 2u);
    std::sort(resets.begin(), resets.end(),
              [](const Sent& a, const Sent& b) { return a.tcp().dst_port < b.tcp().dst_port; });
    for (std::size_t i = 0; i < 2; ++i)
        EXPECT_EQ(detail::frame_diff(reset_of(d, silent[i]), resets[i]), "") << i;
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_TRUE(d.evs().empty());
    silent.clear();
    ASSERT_TRUE(d.core.listen({d.self, 3}).has_value());
    for (std::uint16_t p = 40011; p <= 40014; ++p) open_silent(d, {p, 100u * p, {}}, silent, 3);
    EXPECT_EQ(d.core.stats().silent_shed, 3u);
    EXPECT_EQ(d.core.live_nodes(), 3u);
}

}  // namespace
}  // namespace iwcm::test
