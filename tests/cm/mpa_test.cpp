// The MPA half on exact frames: request/reply/reject, revisions, IRD/ORD,
// RTR, CRC, markers, reassembly, timeouts, TERMINATE (RFC 5044 7.1, RFC 6581).
#include <cerrno>

#include "cm/dut.hpp"

namespace iwcm::test {
namespace {

TEST(MpaReqRcvd, RequestRaisesConnectRequestWithPeerOffer) {
    Dut d;
    auto pd = bytes("req data");
    Ev e = d.to_mpareq_rcvd(request_v2(pd, 7, 3, true, false, true, false));
    EXPECT_EQ(e.type, EventType::kConnectRequest);
    EXPECT_EQ(text(e.pdata), "req data");
    EXPECT_EQ(e.mpa.revision, 2);
    EXPECT_EQ(e.mpa.ird, 7);
    EXPECT_EQ(e.mpa.ord, 3);
    EXPECT_TRUE(e.mpa.peer_to_peer);
    EXPECT_EQ(e.mpa.rtr_offered, rtr::kWrite);
    EXPECT_EQ(e.state, CmState::kMpaReqRcvd);
    EXPECT_EQ(e.remote, d.peer);
}

TEST(MpaReqRcvd, AcceptV2NegotiatesIrdOrdAndPicksOneRtr) {
    Dut d;
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("x"), /*ird=*/2, /*ord=*/6, true, false, true, true));
    AcceptParams ap;
    auto rpd = bytes("reply data");
    ap.private_data = rpd;
    ap.ird = 4;  // below the peer's ORD 6: raised to 6 (max_ird 128)
    ap.ord = 5;  // above the peer's IRD 2: lowered to 2
    auto rep = accept_and_take_reply(d, e, ap);
    EXPECT_EQ(rep.kind, wire::MpaKind::kReply);
    EXPECT_FALSE(rep.reject);
    EXPECT_EQ(rep.revision, 2);
    ASSERT_TRUE(rep.v2.has_value());
    EXPECT_EQ(rep.v2->ird, 6);
    EXPECT_EQ(rep.v2->ord, 2);
    EXPECT_TRUE(rep.v2->peer_to_peer);
    EXPECT_FALSE(rep.v2->rtr_send);
    EXPECT_TRUE(rep.v2->rtr_write);  // the first offered of send, write, read
    EXPECT_FALSE(rep.v2->rtr_read);
    EXPECT_EQ(text(rep.private_data), "reply data");
    // Not established until the RTR arrives.
    EXPECT_EQ(*d.core.state(e.conn), CmState::kOneSideEstablished);
    EXPECT_TRUE(d.evs().empty());
    std::vector<std::byte> rtr(wire::rtr_fpdu_len(wire::RtrType::kWrite));
    wire::emit_rtr_fpdu({wire::RtrType::kWrite, 0x1234}, false, rtr);
    d.seg(tf::kAck | tf::kPsh, rtr);
    auto ev = d.evs();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, EventType::kEstablished);
    EXPECT_EQ(ev[0].mpa.rtr, RtrType::kWrite);
    EXPECT_EQ(ev[0].mpa.ird, 6);
    EXPECT_EQ(ev[0].mpa.ord, 2);
}

TEST(MpaReqRcvd, StrictModeRefusesWithTerminate) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.mpa.strict_ird_ord = true;
    Dut d(cfg);
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("x"), 1, 8));
    AcceptParams ap;
    ap.ird = 2;  // cannot cover the peer's ORD 8
    ap.ord = 1;
    ASSERT_TRUE(d.core.accept(d.now, e.conn, ap).has_value());
    auto o = d.out();
    ASSERT_GE(o.size(), 3u);  // reply, TERMINATE, FIN
    expect_terminate(o[1], wire::TermError::kInsufficientIrd);
    EXPECT_TRUE(o[2].tcp().has(tf::kFin));
    auto ev = d.evs();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, EventType::kConnectError);
    EXPECT_EQ(d.core.stats().terminates_sent, 1u);
}

TEST(MpaReqRcvd, NoCommonRtrEndsWithTerminate) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.mpa.rtr_types = rtr::kSend;
    Dut d(cfg);
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("x"), 1, 1, true, false, false, true));  // READ only
    ASSERT_TRUE(d.core.accept(d.now, e.conn, {}).has_value());
    auto o = d.out();
    ASSERT_GE(o.size(), 2u);
    expect_terminate(o[1], wire::TermError::kNoMatchingRtr);
    auto ev = d.evs();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, EventType::kConnectError);
}

TEST(MpaReqRcvd, SiwStyleRequestWithoutPeerToPeerIsEstablishedOnReply) {
    // Linux siw: revision 2, enhanced flag, CRC off, IRD 1 / ORD 1, no A bit.
    Dut d;
    Ev e = d.to_mpareq_rcvd(request_v2(bytes(""), 1, 1, /*p2p=*/false));
    auto rep = accept_and_take_reply(d, e);
    ASSERT_TRUE(rep.v2.has_value());
    EXPECT_FALSE(rep.v2->peer_to_peer);
    EXPECT_FALSE(rep.v2->rtr_send || rep.v2->rtr_write || rep.v2->rtr_read);
    auto ev = d.evs();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, EventType::kEstablished);
    EXPECT_EQ(ev[0].mpa.rtr, RtrType::kNone);
}

TEST(MpaReqRcvd, Revision1RequestIsAnsweredAtRevision1) {
    Dut d;
    auto pd = bytes("v1 please");
    Ev e = d.to_mpareq_rcvd(request_v1(pd));
    EXPECT_EQ(e.mpa.revision, 1);
    EXPECT_EQ(text(e.pdata), "v1 please");
    auto rep = accept_and_take_reply(d, e);
    EXPECT_EQ(rep.revision, 1);
    EXPECT_FALSE(rep.v2.has_value());
    auto ev = d.evs();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, EventType::kEstablished);
}

TEST(MpaReqRcvd, CrcIsUsedIfEitherSideAsks) {
    for (bool ours : {false, true}) {
        for (bool theirs : {false, true}) {
            CoreConfig cfg = config_for(kMacB, 7);
            cfg.mpa.crc = ours;
            Dut d(cfg);
            auto pd = bytes("c");
            auto req = request_v2(pd, 1, 1, false);
            req.crc = theirs;
            Ev e = d.to_mpareq_rcvd(req);
            auto rep = accept_and_take_reply(d, e);
            EXPECT_EQ(rep.crc, ours || theirs) << ours << theirs;
            auto ev = d.evs();
            ASSERT_EQ(ev.size(), 1u);
            EXPECT_EQ(ev[0].mpa.crc, ours || theirs);
        }
    }
}

TEST(MpaReqWait, MarkersAreRefusedWithARejectReply) {
    Dut d;
    d.to_mpareq_wait();
    auto pd = bytes("m");
    auto req = request_v2(pd, 1, 1, false);
    req.markers = true;
    d.send_mpa(req);
    auto o = d.out();
    ASSERT_GE(o.size(), 1u);
    auto rep = parse_mpa_or_fail(o[0].payload);
    EXPECT_TRUE(rep.reject);
    EXPECT_FALSE(rep.markers);
    EXPECT_TRUE(o[0].tcp().has(tf::kFin) || (o.size() > 1 && o[1].tcp().has(tf::kFin)));
    EXPECT_TRUE(d.evs().empty());
}

TEST(MpaReqRcvd, RejectSendsRejectReplyWithPrivateDataThenFin) {
    Dut d;
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("let me in"), 1, 1));
    auto why = bytes("go away");
    ASSERT_TRUE(d.core.reject(d.now, e.conn, why).has_value());
    auto o = d.out();
    ASSERT_EQ(o.size(), 2u);
    auto rep = parse_mpa_or_fail(o[0].payload);
    EXPECT_TRUE(rep.reject);
    EXPECT_EQ(text(rep.private_data), "go away");
    EXPECT_TRUE(o[1].flags(tf::kFin | tf::kAck));
    EXPECT_EQ(d.core.stats().rejects, 1u);
    EXPECT_EQ(d.core.state(e.conn).error(), ApiError::kStaleHandle);
}

TEST(MpaReqWait, RequestSplitAcrossSegmentsIsReassembled) {
    Dut d;
    d.to_mpareq_wait();
    auto pd = bytes("split into three segments");
    auto req = request_v2(pd);
    std::vector<std::byte> b(req.buffer_len());
    req.emit(b);
    std::span<const std::byte> all(b);
    d.seg(tf::kAck, all.first(7));
    d.seg(tf::kAck, all.subspan(7, 20));
    EXPECT_TRUE(d.evs().empty());
    d.seg(tf::kAck | tf::kPsh, all.subspan(27));
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(text(e[0].pdata), "split into three segments");
}

TEST(MpaReqRcvd, BytesAfterTheRequestAreKeptForTheDataPath) {
    Dut d;
    d.to_mpareq_wait();
    auto pd = bytes("req");
    auto req = request_v2(pd, 1, 1, false);
    std::vector<std::byte> b(req.buffer_len());
    req.emit(b);
    auto extra = bytes("FIRST-ULPDU");
    b.insert(b.end(), extra.begin(), extra.end());
    d.seg(tf::kAck | tf::kPsh, b);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    ASSERT_TRUE(d.core.accept(d.now, e[0].conn, {}).has_value());
    auto h = d.core.handoff(e[0].conn, HandoffParams{HandoffMode::kExternal});
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(text(h->pending_rx), "FIRST-ULPDU");
}

TEST(MpaReqWait, ReplyInsteadOfRequestIsReset) {
    Dut d;
    d.to_mpareq_wait();
    d.send_mpa(reply_v2(1, 1, false, 0));
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)});
    EXPECT_EQ(d.core.stats().drops(DropReason::kBadMpa), 1u);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(MpaReqRcvd, AcceptTimeoutEndsTheRequest) {
    Dut d;
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("x")));
    d.advance(std::chrono::seconds(31));
    auto ev = d.evs();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, EventType::kUnreachable);
    EXPECT_EQ(ev[0].status, -ETIMEDOUT);
    EXPECT_EQ(d.core.accept(d.now, e.conn, {}).error(), ApiError::kStaleHandle);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(MpaReqSent, ReplyEstablishesAndSendsRtr) {
    Dut d;
    d.to_mpareq_sent();
    auto rep = reply_v2(1, 1, true, rtr::kRead);
    auto rpd = bytes("hi");
    rep.private_data = rpd;
    d.send_mpa(rep);
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    auto fpdu = wire::parse_fpdu(o[0].payload, false);
    ASSERT_TRUE(fpdu.has_value());
    EXPECT_EQ(*wire::parse_rtr(fpdu->ulpdu), wire::RtrType::kRead);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kEstablished);
    EXPECT_EQ(text(e[0].pdata), "hi");
    EXPECT_EQ(e[0].mpa.rtr, RtrType::kRead);
}

TEST(MpaReqSent, RtrCarriesCrcWhenNegotiated) {
    Dut d;
    d.to_mpareq_sent();
    auto rep = reply_v2(1, 1, true, rtr::kSend);
    rep.crc = true;  // the responder asked for CRC
    d.send_mpa(rep);
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    auto fpdu = wire::parse_fpdu(o[0].payload, true);
    ASSERT_TRUE(fpdu.has_value());
    EXPECT_TRUE(fpdu->crc_ok);
}

TEST(MpaReqSent, ReplyWithTwoRtrTypesGetsTerminate) {
    Dut d;
    d.to_mpareq_sent();
    d.send_mpa(reply_v2(1, 1, true, rtr::kSend | rtr::kWrite));
    auto o = d.out();
    ASSERT_GE(o.size(), 2u);
    expect_terminate(o[0], wire::TermError::kNoMatchingRtr);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kConnectError);
}

// RFC 6581 section 6: the responder picks one of the types offered. A reply naming one
// we never offered is a TERMINATE "no matching RTR" (docs/library.md "Negotiation rules") and a
// connect error -EINVAL: no RTR goes out and the connection is never established.
TEST(MpaReqSent, ReplyNamingAnUnofferedRtrGetsTerminate) {
    for (std::uint8_t offered : {rtr::kSend, rtr::kWrite, rtr::kRead})
        for (std::uint8_t chosen : {rtr::kSend, rtr::kWrite, rtr::kRead}) {
            if (chosen == offered) continue;
            SCOPED_TRACE(::testing::Message()
                         << "offered " << int(offered) << " chosen " << int(chosen));
            CoreConfig cfg = config_for(kMacB, 7);
            cfg.mpa.rtr_types = offered;
            Dut d(cfg);
            auto req = parse_mpa_or_fail(d.to_mpareq_sent().payload);
            ASSERT_TRUE(req.v2.has_value());
            EXPECT_EQ(req.v2->rtr_send, offered == rtr::kSend);
            EXPECT_EQ(req.v2->rtr_write, offered == rtr::kWrite);
            EXPECT_EQ(req.v2->rtr_read, offered == rtr::kRead);
            d.send_mpa(reply_v2(4, 4, true, chosen));
            auto o = d.out();
            ASSERT_GE(o.size(), 1u);
            expect_terminate(o[0], wire::TermError::kNoMatchingRtr);
            for (const Sent& s : o) {
                auto fpdu = wire::parse_fpdu(s.payload, false);
                if (fpdu) {
                    EXPECT_FALSE(wire::parse_rtr(fpdu->ulpdu).has_value());
                }
            }
            auto e = d.evs();
            ASSERT_EQ(e.size(), 1u);
            EXPECT_EQ(e[0].type, EventType::kConnectError);
            EXPECT_EQ(e[0].status, -EINVAL);
            EXPECT_EQ(d.core.stats().established, 0u);
            EXPECT_EQ(d.core.stats().terminates_sent, 1u);
        }
}

TEST(MpaReqSent, RelaxedOrdFollowsResponderIrd) {
    Dut d;
    ConnectParams p = d.connect_params();
    p.ird = 4;
    p.ord = 16;
    d.to_mpareq_sent(p);
    d.send_mpa(reply_v2(/*ird=*/3, /*ord=*/2, true, rtr::kSend));
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kEstablished);
    EXPECT_EQ(e[0].mpa.ord, 3);
    EXPECT_EQ(e[0].mpa.ird, 4);
}

TEST(MpaReqSent, RejectReportsPrivateDataAndCloses) {
    Dut d;
    d.to_mpareq_sent();
    auto rep = reply_v2(1, 1, false, 0);
    rep.reject = true;
    auto why = bytes("busy");
    rep.private_data = why;
    d.send_mpa(rep);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kRejected);
    EXPECT_EQ(e[0].status, -ECONNREFUSED);
    EXPECT_EQ(text(e[0].pdata), "busy");
    EXPECT_EQ(e[0].state, CmState::kMpaRejRcvd);
    expect_sent(d, {d.sent_frame(tf::kFin | tf::kAck, d.dut_nxt, d.peer_nxt)});
}

TEST(MpaReqSent, Revision1ReplyToRevision2Request) {
    Dut d;
    d.to_mpareq_sent();
    wire::MpaRepr rep;
    rep.kind = wire::MpaKind::kReply;
    rep.revision = 1;
    d.send_mpa(rep);
    expect_sent(d, {d.sent_ack()});  // an ACK: no RTR at revision 1
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kEstablished);
    EXPECT_EQ(e[0].mpa.revision, 1);
    EXPECT_FALSE(e[0].mpa.peer_to_peer);
}

TEST(MpaReqSent, WrongKeyIsAProtocolError) {
    Dut d;
    d.to_mpareq_sent();
    auto rep = reply_v2(1, 1, false, 0);
    std::vector<std::byte> b(rep.buffer_len());
    rep.emit(b);
    b[4] = std::byte{'X'};
    d.seg(tf::kAck | tf::kPsh, b);
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kConnectError);
    EXPECT_EQ(e[0].status, -EPROTO);
}

TEST(MpaReqSent, ReplyTimeoutIsUnreachable) {
    Dut d;
    d.to_mpareq_sent();
    d.seg(tf::kAck);  // the request is acknowledged, no reply comes
    d.advance(std::chrono::seconds(10));
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kUnreachable);
    EXPECT_EQ(e[0].status, -ETIMEDOUT);
    EXPECT_EQ(d.core.live_nodes(), 0u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

TEST(OneSideEstablished, WrongRtrTypeGetsTerminate) {
    Dut d;
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("x"), 1, 1, true, true, false, false));
    accept_and_take_reply(d, e);
    std::vector<std::byte> rtr(wire::rtr_fpdu_len(wire::RtrType::kWrite));
    wire::emit_rtr_fpdu({wire::RtrType::kWrite, 7}, false, rtr);
    d.seg(tf::kAck | tf::kPsh, rtr);
    auto o = d.out();
    ASSERT_GE(o.size(), 1u);
    expect_terminate(o[0], wire::TermError::kNoMatchingRtr);
    auto ev = d.evs();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, EventType::kConnectError);
}

TEST(OneSideEstablished, RtrTimeout) {
    Dut d;
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("x")));
    accept_and_take_reply(d, e, {}, 1);
    d.seg(tf::kAck);  // the reply is acknowledged: only the RTR wait is left
    EXPECT_EQ(d.core.pending_timers(), 1u);
    quiet_until(d, std::chrono::seconds(10));
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)});
    auto ev = d.evs();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, EventType::kUnreachable);
    EXPECT_EQ(ev[0].status, -ETIMEDOUT);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

}  // namespace
}  // namespace iwcm::test

namespace iwcm::test {
namespace {

TEST(MpaReqRcvd, AcceptBeforeTransmitLetsTheReplyCarryTheAck) {
    Dut d;
    d.to_mpareq_wait();
    auto pd = bytes("quick");
    auto req = request_v2(pd, 1, 1, false);
    std::vector<std::byte> b(req.buffer_len());
    req.emit(b);
    d.seg(tf::kAck | tf::kPsh, b);
    auto e = d.evs();  // the application accepts before it takes frames
    ASSERT_EQ(e.size(), 1u);
    ASSERT_TRUE(d.core.accept(d.now, e[0].conn, {}).has_value());
    // No pure ACK: the reply (revision 2, IRD and ORD 1, no RTR) acknowledges the request.
    const wire::MpaRepr rep = reply_v2(1, 1, false, 0);
    std::vector<std::byte> reply(rep.buffer_len());
    rep.emit(reply);
    expect_sent(d, {d.sent_frame(tf::kAck | tf::kPsh, d.dut_nxt, d.peer_nxt, reply)});
}

TEST(MpaReqRcvd, DeferredAckGoesOutAtTheNextTransmitPoll) {
    Dut d;
    d.to_mpareq_wait();
    d.send_mpa(request_v2(bytes("slow app"), 1, 1, false));
    expect_sent(d, {d.sent_ack()});
}

}  // namespace
}  // namespace iwcm::test

namespace iwcm::test {
namespace {

TEST(Established, TerminateFromThePeerBeforeHandoffEndsTheConnection) {
    // A strict responder accepts, then finds IRD/ORD do not fit: its reply
    // is followed by a TERMINATE. The initiator (no p2p) was established on
    // the reply; the TERMINATE ends it.
    Dut d;
    d.to_mpareq_sent();
    auto rep = reply_v2(1, 1, false, 0);
    std::vector<std::byte> b(rep.buffer_len());
    rep.emit(b);
    std::vector<std::byte> term(wire::terminate_fpdu_len());
    wire::emit_terminate_fpdu(wire::TermError::kInsufficientIrd, false, term);
    b.insert(b.end(), term.begin(), term.end());
    d.seg(tf::kAck | tf::kPsh, b);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].type, EventType::kEstablished);
    EXPECT_EQ(e[1].type, EventType::kDisconnected);
    EXPECT_EQ(e[1].status, -ECONNRESET);
    // The TERMINATE is acknowledged.
    expect_sent(d, {d.sent_frame(tf::kFin | tf::kAck, d.dut_nxt, d.peer_nxt)});
}

TEST(Established, OtherFpdusWaitForTheDataPath) {
    Dut d;
    d.to_mpareq_sent();
    auto rep = reply_v2(1, 1, false, 0);
    std::vector<std::byte> b(rep.buffer_len());
    rep.emit(b);
    std::vector<std::byte> send(wire::rtr_fpdu_len(wire::RtrType::kSend));
    wire::emit_rtr_fpdu({wire::RtrType::kSend, 1}, false, send);
    b.insert(b.end(), send.begin(), send.end());
    d.seg(tf::kAck | tf::kPsh, b);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kEstablished);
    auto h = d.core.handoff(d.conn, HandoffParams{HandoffMode::kExternal});
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->pending_rx.size(), send.size());
}

}  // namespace
}  // namespace iwcm::test
