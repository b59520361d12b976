// The core's ledger: every Stats counter after whole scenarios, compared as a
// whole (a counter that moves when it should not fails as surely as one that
// does not move), and the event-queue limit as an operating limit.
//
// Read first: include/iwcm/stats.hpp (what each counter means; failures are
// counted once, when a node closes unestablished), src/cm/core.cpp
// count_failure.
#include <cerrno>
#include <sstream>

#include "cm/dut.hpp"

namespace iwcm::test {
namespace {

// Every counter, one per line, so that a failure shows exactly which moved.
std::string ledger(const Stats& s) {
    std::ostringstream o;
    o << "nodes_created " << s.nodes_created << "\nnodes_destroyed " << s.nodes_destroyed
      << "\nlisteners_created " << s.listeners_created << "\nlisteners_destroyed "
      << s.listeners_destroyed << "\nloopback_connections " << s.loopback_connections
      << "\naccepts " << s.accepts << "\nrejects " << s.rejects << "\nconnect_errors "
      << s.connect_errors << "\npassive_errors " << s.passive_errors << "\nretransmissions "
      << s.retransmissions << "\nbacklog_drops " << s.backlog_drops << "\nsyns_received "
      << s.syns_received << "\nresets_sent " << s.resets_sent << "\nresets_received "
      << s.resets_received << "\nestablished " << s.established << "\nframes_in " << s.frames_in
      << "\nframes_out " << s.frames_out << "\nmpa_v1_fallbacks " << s.mpa_v1_fallbacks
      << "\nconnect_refused_retries " << s.connect_refused_retries << "\nterminates_sent "
      << s.terminates_sent << "\n";
    for (std::size_t r = 0; r < kDropReasonCount; ++r)
        if (s.dropped[r] != 0)
            o << "dropped " << to_string(static_cast<DropReason>(r)) << " " << s.dropped[r] << "\n";
    return o.str();
}

// A passive connection (listener, SYN, ACK, MPA request) as far as the request.
Stats after_request() {
    Stats s;
    s.nodes_created = 1;
    s.listeners_created = 1;
    s.syns_received = 1;
    s.frames_in = 3;   // SYN, ACK, request
    s.frames_out = 2;  // SYN-ACK, ACK of the request
    return s;
}

// Before the fix, this counted passive_errors twice: once with the event, once
// after it because the node was no longer the application's.
TEST(Accounting, ResetWhileWaitingForAcceptIsOnePassiveError) {
    Dut d;
    d.to_mpareq_rcvd(request_v2(bytes("x")));
    d.seg(tf::kRst);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kConnectError);
    EXPECT_EQ(e[0].status, -ECONNRESET);
    EXPECT_TRUE(d.out().empty());
    Stats want = after_request();
    want.frames_in += 1;
    want.resets_received = 1;
    want.passive_errors = 1;
    want.nodes_destroyed = 1;
    EXPECT_EQ(ledger(d.core.stats()), ledger(want));
}

TEST(Accounting, ApplicationRejectIsNotAFailure) {
    Dut d;
    Ev req = d.to_mpareq_rcvd(request_v2(bytes("x")));
    ASSERT_TRUE(d.core.reject(d.now, req.conn, bytes("no")).has_value());
    auto o = d.out();
    ASSERT_EQ(o.size(), 2u);  // the reject reply, then our FIN
    EXPECT_TRUE(o[1].tcp().flags & tf::kFin);
    d.dut_nxt += static_cast<std::uint32_t>(o[0].payload.size()) + 1;
    d.seg(tf::kAck | tf::kFin);     // the peer acknowledges both and closes
    ASSERT_EQ(d.out().size(), 1u);  // our last ACK; TIME_WAIT
    d.advance(std::chrono::seconds(1));
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(d.core.live_nodes(), 0u);
    Stats want = after_request();
    want.rejects = 1;
    want.frames_in += 1;
    want.frames_out += 3;
    want.nodes_destroyed = 1;
    EXPECT_EQ(ledger(d.core.stats()), ledger(want));
}

TEST(Accounting, BadMpaRequestIsOnePassiveError) {
    Dut d;
    d.to_mpareq_wait();
    wire::MpaRepr reply;  // a reply where a request belongs
    reply.kind = wire::MpaKind::kReply;
    reply.revision = 1;
    d.send_mpa(reply);
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].tcp().flags & tf::kRst);
    EXPECT_TRUE(d.evs().empty());
    Stats want = after_request();
    want.frames_out = 2;  // SYN-ACK, reset
    want.resets_sent = 1;
    want.passive_errors = 1;
    want.nodes_destroyed = 1;
    want.dropped[static_cast<std::size_t>(DropReason::kBadMpa)] = 1;
    EXPECT_EQ(ledger(d.core.stats()), ledger(want));
}

TEST(Accounting, HalfOpenTimeoutIsOnePassiveError) {
    Dut d;
    d.to_syn_rcvd();
    d.advance(std::chrono::seconds(75));
    EXPECT_EQ(d.out().size(), 8u);  // the SYN-ACK's retransmissions, nothing else
    EXPECT_TRUE(d.evs().empty());
    Stats want;
    want.nodes_created = want.nodes_destroyed = 1;
    want.listeners_created = 1;
    want.syns_received = 1;
    want.frames_in = 1;
    want.frames_out = 9;
    want.retransmissions = 8;
    want.passive_errors = 1;
    EXPECT_EQ(ledger(d.core.stats()), ledger(want));
}

TEST(Accounting, RefusedConnectIsOneConnectError) {
    Dut d;
    d.to_syn_sent();
    d.feed(d.frame(tf::kRst | tf::kAck, wire::SeqNumber(0), d.dut_nxt));
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kRejected);
    Stats want;
    want.nodes_created = want.nodes_destroyed = 1;
    want.frames_in = 1;
    want.frames_out = 1;
    want.resets_received = 1;
    want.connect_errors = 1;
    EXPECT_EQ(ledger(d.core.stats()), ledger(want));
}

TEST(Accounting, EstablishedAndClosedCountsNoFailure) {
    Dut d;
    d.to_mpareq_sent();
    d.send_mpa(reply_v2(1, 1, false, 0));
    ASSERT_EQ(d.out().size(), 1u);  // the ACK of the reply
    ASSERT_EQ(d.evs().size(), 1u);  // established
    ASSERT_TRUE(d.core.disconnect(d.now, d.conn, DisconnectMode::kGraceful).has_value());
    ASSERT_EQ(d.out().size(), 1u);  // FIN
    d.dut_nxt += 1;
    d.seg(tf::kAck | tf::kFin);
    ASSERT_EQ(d.out().size(), 1u);  // last ACK
    d.advance(std::chrono::seconds(1));
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kDisconnected);
    Stats want;
    want.nodes_created = want.nodes_destroyed = 1;
    want.established = 1;
    want.frames_in = 3;   // SYN-ACK, reply, FIN
    want.frames_out = 5;  // SYN, request, ACK, FIN, ACK
    EXPECT_EQ(ledger(d.core.stats()), ledger(want));
}

// An application that never polls: new connections are refused once
// max_events wait (their SYNs go unanswered and are counted), nothing aborts,
// and once the application polls, the peers' SYN retransmissions get in.
TEST(EventQueue, ApplicationThatNeverPollsIsRefusedNewConnectionsNotAborted) {
    CoreConfig cb = config_for(kMacB, 2);
    cb.max_events = 4;
    Pair p(config_for(kMacA, 1), cb);
    ASSERT_TRUE(p.b.listen({{ip_b(), 4791}, 64}).has_value());
    constexpr int kConns = 10;
    // Four requests fill the queue; the next six find it full at their SYN.
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.a.connect(p.now, p.connect_params()).has_value());
    p.pump();
    EXPECT_EQ(p.b.queued_events(), 4u);
    for (int i = 4; i < kConns; ++i)
        ASSERT_TRUE(p.a.connect(p.now, p.connect_params()).has_value());
    p.pump();
    EXPECT_EQ(p.b.queued_events(), 4u);
    EXPECT_EQ(p.b.stats().drops(DropReason::kEventQueueFull), 6u);
    EXPECT_EQ(p.b.live_nodes(), 4u);
    // connect() on the full core is refused with a reason, not an abort.
    ConnectParams back;
    back.local = {ip_b(), 0};
    back.remote = {ip_a(), 9};
    back.remote_mac = kMacA;
    auto c = p.b.connect(p.now, back);
    ASSERT_FALSE(c.has_value());
    EXPECT_EQ(c.error(), ApiError::kEventQueueFull);
    // The application wakes up and accepts whatever comes, as it comes.
    int established = 0;
    for (int round = 0; round < 20 && established < kConns; ++round) {
        for (auto& e : events(p.b)) {
            if (e.type == EventType::kConnectRequest) {
                ASSERT_TRUE(p.b.accept(p.now, e.conn, {}).has_value());
            }
        }
        p.pump();
        for (auto& e : events(p.a)) established += e.type == EventType::kEstablished;
        p.advance(p.now + std::chrono::seconds(1));
    }
    EXPECT_EQ(established, kConns);
    EXPECT_EQ(p.a.stats().connect_errors, 0u);
    EXPECT_GE(p.a.stats().retransmissions, 6u);  // the refused SYNs came again
}

}  // namespace
}  // namespace iwcm::test
