// SYN cookies, the effective MSS and challenge-ACK limits, on exact frames.
//
// Read first: src/cm/syncookie.hpp (the cookie's bits and what it loses),
// RFC 4987 section 3.6, RFC 9293 section 3.7.1 (MSS), RFC 5961 section 7.
#include "cm/syncookie.hpp"

#include <cerrno>
#include <source_location>

#include "cm/dut.hpp"

namespace iwcm::test {
namespace {

using std::chrono::seconds;

// ---------------------------------------------------------------- the codec

cm::CookieTuple tuple() {
    return {{ip_b(), 4791}, {ip_a(), 5000}, kNoVlan, 123456789u};
}

TEST(SynCookie, RoundTripKeepsMssAndWindowShift) {
    cm::CookieKey key = cm::cookie_key({1}, {2}, 7);
    for (std::uint16_t mss : {88, 536, 1000, 1460, 9000}) {
        for (std::optional<std::uint8_t> ws :
             {std::optional<std::uint8_t>{}, std::optional<std::uint8_t>{0},
              std::optional<std::uint8_t>{7}, std::optional<std::uint8_t>{14}}) {
            std::uint32_t c = cm::make_cookie(key, 7, tuple(), {mss, ws});
            auto d = cm::check_cookie(key, 7, tuple(), c);
            ASSERT_TRUE(d.has_value()) << mss;
            EXPECT_EQ(d->wscale, ws);
            // Rounded down to the table: never more than the peer can take.
            EXPECT_LE(d->mss, mss);
            EXPECT_EQ(d->mss, mss == 1000 ? 536 : mss == 9000 ? 8960 : mss);
        }
    }
}

TEST(SynCookie, AnyChangeBreaksIt) {
    cm::CookieKey key = cm::cookie_key({1}, {2}, 8);
    std::uint32_t c = cm::make_cookie(key, 8, tuple(), {1460, 7});
    for (int bit = 0; bit < 32; ++bit)
        EXPECT_FALSE(cm::check_cookie(key, 8, tuple(), c ^ (1u << bit)).has_value()) << bit;
    auto t = tuple();
    t.peer_isn += 1;
    EXPECT_FALSE(cm::check_cookie(key, 8, t, c).has_value());
    t = tuple();
    t.remote.port = 5001;
    EXPECT_FALSE(cm::check_cookie(key, 8, t, c).has_value());
    t = tuple();
    t.vlan = 5;
    EXPECT_FALSE(cm::check_cookie(key, 8, t, c).has_value());
    // Another period (same parity, so only the key tells): refused.
    EXPECT_FALSE(cm::check_cookie(cm::cookie_key({1}, {2}, 10), 10, tuple(), c).has_value());
    // The key rotates: each period's differs, and each secret changes it.
    EXPECT_NE(cm::cookie_key({1}, {2}, 8), cm::cookie_key({1}, {2}, 9));
    EXPECT_NE(cm::cookie_key({1}, {2}, 8), cm::cookie_key({3}, {2}, 8));
    EXPECT_NE(cm::cookie_key({1}, {2}, 8), cm::cookie_key({1}, {3}, 8));
}

// The hash covers both addresses whole, IPv4 and IPv6: a cookie made for one peer is
// no good from another, nor to another of our addresses. Each address is changed in its
// first and in its last byte (a hash over a prefix, or over one address, would pass).
TEST(SynCookie, BothAddressesAreHashed) {
    for (const char* family : {"v4", "v6"}) {
        SCOPED_TRACE(family);
        const bool v6 = family[1] == '6';
        cm::CookieTuple base = tuple();
        if (v6) {
            base.local.addr = *IpAddr::parse("fd00::2");
            base.remote.addr = *IpAddr::parse("fd00::1");
        }
        cm::CookieKey key = cm::cookie_key({1}, {2}, 8);
        std::uint32_t c = cm::make_cookie(key, 8, base, {1460, 7});
        ASSERT_TRUE(cm::check_cookie(key, 8, base, c).has_value());
        const char* others[] = {v6 ? "fd00::3" : "10.0.0.3", v6 ? "fc00::1" : "11.0.0.1"};
        for (const char* other : others) {
            SCOPED_TRACE(other);
            cm::CookieTuple t = base;
            t.remote.addr = *IpAddr::parse(other);
            EXPECT_FALSE(cm::check_cookie(key, 8, t, c).has_value()) << "remote";
            t = base;
            t.local.addr = *IpAddr::parse(other);
            EXPECT_FALSE(cm::check_cookie(key, 8, t, c).has_value()) << "local";
        }
        // The two addresses swapped (with the ports kept): another connection.
        cm::CookieTuple t = base;
        std::swap(t.local.addr, t.remote.addr);
        EXPECT_FALSE(cm::check_cookie(key, 8, t, c).has_value()) << "swapped";
        t = base;
        t.local.port = 4792;
        EXPECT_FALSE(cm::check_cookie(key, 8, t, c).has_value()) << "local port";
    }
}

// ---------------------------------------------------------------- the core

// A listener with backlog n, filled with n half-open connections from other ports: each
// SYN (no options) answered by a node's SYN-ACK, at the ISN of its tuple.
ListenHandle fill_backlog(Dut& d, std::uint32_t n,
                          std::source_location at = std::source_location::current()) {
    auto l = d.core.listen({d.self, n});
    EXPECT_TRUE(l.has_value());
    d.listener = *l;
    for (std::uint32_t i = 0; i < n; ++i) {
        const auto port = static_cast<std::uint16_t>(6000 + i);
        auto f = d.frame(tf::kSyn, wire::SeqNumber(70000u * i), wire::SeqNumber(0));
        f.tcp.src_port = port;
        d.feed(f);
        Frame sa = d.sent_syn(tf::kSyn | tf::kAck, d.isn(d.self, {d.peer.addr, port}),
                              wire::SeqNumber(70000u * i + 1), false);
        sa.repr.tcp.dst_port = port;
        expect_sent(d, {sa}, at);
    }
    return *l;
}

// The SYN-ACK of a cookie for the peer's SYN at peer_iss with this MSS and window shift: the
// options a node's would carry, our ISN the cookie of the current period (src/cm/syncookie.hpp).
Frame cookie_frame(const Dut& d, std::uint16_t mss, std::optional<std::uint8_t> ws) {
    const CoreConfig& c = d.core.config();
    const std::uint64_t period = cm::cookie_period(d.now, c.syn_cookie_period);
    const cm::CookieKey key = cm::cookie_key(c.syn_cookie_secret, c.isn_secret, period);
    const cm::CookieTuple t{d.self, d.peer, kNoVlan, d.peer_iss};
    const std::uint32_t cookie = cm::make_cookie(key, period, t, {mss, ws});
    return d.sent_syn(tf::kSyn | tf::kAck, wire::SeqNumber(cookie), wire::SeqNumber(d.peer_iss + 1),
                      ws.has_value());
}

// The peer's SYN (MSS 1460, window shift `ws`) answered with exactly the cookie's SYN-ACK;
// returns it. dut_nxt is past the cookie.
Frame cookie_syn_ack(Dut& d, std::optional<std::uint8_t> ws = 7,
                     std::source_location at = std::source_location::current()) {
    auto syn = d.frame(tf::kSyn, wire::SeqNumber(d.peer_iss), wire::SeqNumber(0));
    syn.tcp.options.mss = 1460;
    syn.tcp.options.window_scale = ws;
    d.wscale = ws.has_value();
    d.feed(syn);
    const Frame sa = cookie_frame(d, 1460, ws);
    expect_sent(d, {sa}, at);
    d.dut_nxt = sa.repr.tcp.seq + 1;
    return sa;
}

// RFC 9293 3.10.7.2: an ACK for no connection gets <SEQ=SEG.ACK><CTL=RST>, without a window.
Frame rst_at(const Dut& d, wire::SeqNumber seg_ack) {
    return d.sent_frame(tf::kRst, seg_ack, wire::SeqNumber(0)).with_window(0);
}

TEST(SynCookie, BacklogFullAnswersWithCookie) {
    Dut d;
    fill_backlog(d, 2);
    std::size_t live = d.core.live_nodes();
    // Our MSS 1460 and window shift 2, the window 64240 unscaled, as a node's SYN-ACK.
    Frame sa = cookie_frame(d, 1460, 7);
    sa.repr.tcp.options = {1460, 2, false, std::nullopt};
    sa.repr.tcp.window = 64240;
    auto syn = d.frame(tf::kSyn, wire::SeqNumber(d.peer_iss), wire::SeqNumber(0));
    syn.tcp.options.mss = 1460;
    syn.tcp.options.window_scale = 7;
    d.feed(syn);
    expect_sent(d, {sa});
    EXPECT_EQ(d.core.live_nodes(), live);    // nothing kept
    EXPECT_EQ(d.core.pending_timers(), 2u);  // only the two half-open nodes' timers
    EXPECT_EQ(d.core.stats().syn_cookies_sent, 1u);
    EXPECT_EQ(d.core.stats().backlog_drops, 0u);
    // No window scaling offered: none answered (and none kept).
    d.peer.port = 5001;
    EXPECT_FALSE(cookie_syn_ack(d, std::nullopt).repr.tcp.options.window_scale.has_value());
}

TEST(SynCookie, AckMakesTheNodeAndMpaProceeds) {
    Dut d;
    fill_backlog(d, 2);
    cookie_syn_ack(d, 7);
    std::size_t live = d.core.live_nodes();
    d.transitions.clear();
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.live_nodes(), live + 1);
    EXPECT_EQ(d.core.stats().syn_cookies_accepted, 1u);
    // As from SYN_RCVD: MPAREQ_WAIT, waiting for the request with its timer.
    ASSERT_EQ(d.transitions.size(), 2u);
    EXPECT_EQ(d.transitions[0], std::make_pair(CmState::kInited, CmState::kSynRcvd));
    EXPECT_EQ(d.transitions[1], std::make_pair(CmState::kSynRcvd, CmState::kMpaReqWait));
    d.send_mpa(request_v2(bytes("through the flood"), 2, 2, false));
    expect_sent(d, {d.sent_ack()});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kConnectRequest);
    EXPECT_EQ(text(e[0].pdata), "through the flood");
    ASSERT_TRUE(d.core.accept(d.now, e[0].conn, {}).has_value());
    auto h = d.core.handoff(e[0].conn);
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->mss, 1460);
    EXPECT_EQ(h->snd_wscale, 7);
    EXPECT_EQ(h->rcv_wscale, 2);
    EXPECT_EQ(h->snd_una, d.dut_nxt.value());  // the cookie + 1, acknowledged
    EXPECT_EQ(h->rcv_nxt, d.peer_nxt.value());
}

TEST(SynCookie, LostAckTheRequestCarriesTheCookie) {
    // The handshake's ACK is lost; the MPA request (ACK set, first byte at
    // ISN + 1) brings the cookie back and is taken at once.
    Dut d;
    fill_backlog(d, 1);
    cookie_syn_ack(d);
    d.send_mpa(request_v1(bytes("late")));
    expect_sent(d, {d.sent_ack()});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kConnectRequest);
    EXPECT_EQ(text(e[0].pdata), "late");
}

TEST(SynCookie, BadCookieGetsRstAndIsCounted) {
    Dut d;
    fill_backlog(d, 1);
    cookie_syn_ack(d);
    std::size_t live = d.core.live_nodes();
    wire::SeqNumber wrong = d.dut_nxt + 0x100;  // another hash, same low byte
    d.feed(d.frame(tf::kAck, d.peer_nxt, wrong));
    expect_sent(d, {rst_at(d, wrong)});
    // The right cookie with the wrong peer sequence: refused too.
    d.feed(d.frame(tf::kAck, d.peer_nxt + 1, d.dut_nxt));
    expect_sent(d, {rst_at(d, d.dut_nxt)});
    EXPECT_EQ(d.core.stats().syn_cookies_failed, 2u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kBadCookie), 2u);
    EXPECT_EQ(d.core.live_nodes(), live);
    // The right one still works.
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.live_nodes(), live + 1);
}

TEST(SynCookie, ValidInItsPeriodAndTheNextOnly) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.syn_cookie_period = seconds(8);
    Dut d(cfg);
    d.now = Instant{seconds(1000)};  // the start of period 125
    fill_backlog(d, 2);
    cookie_syn_ack(d);
    d.now += seconds(15);  // period 126: still taken
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.stats().syn_cookies_accepted, 1u);
    // Another peer's cookie from period 126, returned in period 128.
    d.peer.port = 5001;
    cookie_syn_ack(d);
    wire::SeqNumber old_ack = d.dut_nxt;
    d.now += seconds(16);
    d.peer.port = 5002;
    cookie_syn_ack(d);  // cookies still in play
    d.peer.port = 5001;
    d.feed(d.frame(tf::kAck, d.peer_nxt, old_ack));
    expect_sent(d, {rst_at(d, old_ack)});
    EXPECT_EQ(d.core.stats().syn_cookies_failed, 1u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kBadCookie), 1u);
    // Two periods after the last cookie, none is in play: an ACK for nothing.
    d.now += seconds(16);
    d.peer.port = 5002;
    d.seg(tf::kAck);
    expect_sent(d, {rst_at(d, d.dut_nxt)});
    EXPECT_EQ(d.core.stats().syn_cookies_failed, 1u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kNoListener), 1u);
}

TEST(SynCookie, NoRoomPastTheHandshakeDropsTheAck) {
    // Backlog 1 held by a connection the application has not answered:
    // further SYNs are dropped (no cookie: there would be no room anyway).
    Dut d;
    auto l = d.core.listen({d.self, 1});
    ASSERT_TRUE(l.has_value());
    auto syn = d.frame(tf::kSyn, wire::SeqNumber(d.peer_iss), wire::SeqNumber(0));
    d.feed(syn);
    d.wscale = false;
    expect_sent(d,
                {d.sent_syn(tf::kSyn | tf::kAck, d.isn(), wire::SeqNumber(d.peer_iss + 1), false)});
    d.dut_nxt = d.isn() + 1;
    d.seg(tf::kAck);
    expect_nothing_sent(d);
    d.send_mpa(request_v1(bytes("x")));
    ASSERT_EQ(d.evs().size(), 1u);
    expect_sent(d, {d.sent_ack()});
    auto f = d.frame(tf::kSyn, wire::SeqNumber(5), wire::SeqNumber(0));
    f.tcp.src_port = 7000;
    d.feed(f);
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.stats().backlog_drops, 1u);
    EXPECT_EQ(d.core.stats().syn_cookies_sent, 0u);
}

TEST(SynCookie, OffDropsAsTheDriverDoes) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.syn_cookies = false;
    Dut d(cfg);
    fill_backlog(d, 1);
    auto syn = d.frame(tf::kSyn, wire::SeqNumber(d.peer_iss), wire::SeqNumber(0));
    d.feed(syn);
    expect_nothing_sent(d);
    EXPECT_EQ(d.core.stats().backlog_drops, 1u);
    EXPECT_EQ(d.core.stats().drops(DropReason::kBacklogFull), 1u);
    // No cookie was ever sent: an ACK for nothing is an ACK for nothing.
    d.feed(d.frame(tf::kAck, d.peer_nxt, wire::SeqNumber(99)));
    expect_sent(d, {rst_at(d, wire::SeqNumber(99))});
    EXPECT_EQ(d.core.stats().drops(DropReason::kNoListener), 1u);
    EXPECT_EQ(d.core.stats().syn_cookies_failed, 0u);
}

// ---------------------------------------------------------------- MSS

std::uint16_t handoff_mss(Dut& d, std::optional<std::uint16_t> mss) {
    d.to_syn_rcvd(7, mss);
    d.seg(tf::kAck);
    d.send_mpa(request_v2(bytes("m"), 1, 1, false));
    auto e = d.evs();
    EXPECT_EQ(e.size(), 1u);
    if (e.empty()) return 0;
    EXPECT_TRUE(d.core.accept(d.now, e[0].conn, {}).has_value());
    auto h = d.core.handoff(e[0].conn);
    EXPECT_TRUE(h.has_value());
    return h ? h->mss : 0;
}

TEST(Mss, PeerAboveOursIsCutToOurs) {
    Dut d;
    EXPECT_EQ(handoff_mss(d, 9000), 1460);  // MTU 1500 - 40
}

TEST(Mss, PeerBelowTheFloorIsRaised) {
    Dut d;
    EXPECT_EQ(handoff_mss(d, 40), 536);
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.min_peer_mss = 88;
    Dut linux_like(cfg);
    EXPECT_EQ(handoff_mss(linux_like, 40), 88);
    Dut linux_like2(cfg);
    EXPECT_EQ(handoff_mss(linux_like2, 100), 100);
}

TEST(Mss, NoOptionMeansTheRfcDefault) {
    Dut d;
    EXPECT_EQ(handoff_mss(d, std::nullopt), 536);
}

}  // namespace
}  // namespace iwcm::test
