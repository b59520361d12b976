// The data path after a peer-to-peer RTR (RFC 6581 section 6), against frames built
// from what the peers' drivers send (docs/design.md "MPA facts", the RTR table):
//  * our READ RTR (initiator): irdma's and siw's responders answer its zero-length
//    Read Request with a zero-length Read Response to its sink (siw_init_rresp; irdma's
//    hardware does the same). It is no request of the application's: taken without a
//    completion, it holds one ORD slot until it comes, and our next Read Request is MSN 2.
//  * the peer's READ RTR (responder): the CM answered it; the peer's first real Read
//    Request is MSN 2 on queue 1.
//  * a SEND RTR took MSN 1 of queue 0: the first Send of the data path is MSN 2, sent
//    (initiator) and expected (responder).
// And the TERMINATE and Send checks siw makes: a TERMINATE off queue 2 / MSN 1 / MO 0 is
// bogus (siw_proc_terminate resets the stream), a Send's opcode does not change between
// its segments (siw_get_hdr: "packet intersection").
//
// Read first: fixture.hpp (the hand-made FPDUs), src/rdma/engine_rx.cpp.
#include "fixture.hpp"

namespace iwcm::rdma::test {
namespace {

// One QP (end 1 of the pipe) whose hand-off says `rtr`; the peer is played by hand.
struct Lone {
    explicit Lone(const RtrStart& rtr, std::uint16_t ord = 1, std::uint16_t ird = 1)
        : e(links, {}) {
        cq = *e.create_cq(64);
        QpParams p;
        p.link = {1};
        p.attr.send_cq = p.attr.recv_cq = cq;
        p.attr.max_send_wr = p.attr.max_recv_wr = 16;
        p.attr.sq_sig_all = true;
        p.ird = ird;
        p.ord = ord;
        p.rtr = rtr;
        qp = *e.create_qp(p);
    }
    // The peer's FPDU (CRC off) arrives and is read.
    void from_peer(const ByteVec& ulpdu) {
        links.inject(1, fpdu(ulpdu, false));
        links.deliver(1, SIZE_MAX);
        e.on_readable(qp);
    }
    std::vector<ByteVec>& sent() { return links.end(1).sent; }
    std::vector<WorkCompletion> wcs() { return Pair::wcs(e, cq); }
    void post_read(std::uint64_t id, const Buf& sink, std::uint32_t rkey, std::uint64_t raddr) {
        Sge s = sink.all();
        SendWr wr;
        wr.wr_id = id;
        wr.opcode = WrOpcode::kRdmaRead;
        wr.sg_list = std::span(&s, 1);
        wr.rkey = rkey;
        wr.remote_addr = raddr;
        ASSERT_TRUE(e.post_send(qp, wr).has_value());
    }

    PipeLinks links;
    Engine e;
    CqHandle cq;
    QpHandle qp;
};

RtrStart initiator_read() {
    RtrStart s;
    s.tx_msn_rreq = 2;
    s.read_response_due = true;
    return s;
}

// The zero-length Read Response a responder sends for our READ RTR: to its sink, STag
// wire::kRtrStag (1) at offset 0, L set (tagged 0xC1, RDMAP 0x42).
ByteVec rtr_read_response(std::uint32_t stag = wire::kRtrStag, std::uint64_t to = 0,
                          const ByteVec& data = {}) {
    return tagged(0xC1, 0x42, stag, to, data);
}

constexpr std::uint32_t kPeerStag = 0x00ABCD01;
constexpr std::uint64_t kPeerTo = 0x7F0000001000;

TEST(RtrInitiator, ReadRtrResponseIsTakenWithoutCompletionOrTerminate) {
    Lone l(initiator_read());
    EXPECT_EQ(l.e.query_qp(l.qp)->reads_outstanding, 1u);  // the RTR's ORD slot
    l.from_peer(rtr_read_response());
    EXPECT_TRUE(l.sent().empty());  // no TERMINATE
    EXPECT_FALSE(l.links.end(1).closed);
    EXPECT_FALSE(l.e.poll_qp_event().has_value());
    EXPECT_TRUE(l.wcs().empty());
    auto info = l.e.query_qp(l.qp);
    EXPECT_EQ(info->state, QpState::kRts);
    EXPECT_EQ(info->reads_outstanding, 0u);
    // The next response nobody asked for is unsolicited again (siw_proc_rresp).
    l.from_peer(rtr_read_response());
    ASSERT_EQ(l.sent().size(), 1u);
    TermSeen t = read_terminate(l.sent()[0]);
    EXPECT_EQ(t.layer, 1);
    EXPECT_EQ(t.etype, 0);
    EXPECT_EQ(t.code, 0);
}

// With ORD 1 the first real Read waits for the RTR's response, then goes out as MSN 2 of
// queue 1, the whole FPDU as RFC 5040 section 4.4 lays it out.
TEST(RtrInitiator, OrdOneFirstReadWaitsForTheRtrResponseThenIsMsnTwo) {
    Lone l(initiator_read());
    Buf sink = Pair::buf(l.e, 64, kAccessLocalWrite);
    l.post_read(7, sink, kPeerStag, kPeerTo);
    EXPECT_TRUE(l.sent().empty());
    l.from_peer(rtr_read_response());
    ASSERT_EQ(l.sent().size(), 1u);
    ByteVec want = fpdu(untagged(0x41, 0x41, 1, 2, 0,
                                 read_request(sink.mr.lkey, sink.mr.addr, 64, kPeerStag, kPeerTo)),
                        false);
    EXPECT_EQ(l.sent()[0], want);
    // Its response completes it, and only it.
    l.from_peer(tagged(0xC1, 0x42, sink.mr.lkey, sink.mr.addr, ByteVec(64, std::byte{0x33})));
    auto w = l.wcs();
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].wr_id, 7u);
    EXPECT_EQ(w[0].status, WcStatus::kSuccess);
    EXPECT_EQ(w[0].opcode, WcOpcode::kRdmaRead);
    EXPECT_EQ(sink.mem, ByteVec(64, std::byte{0x33}));
}

// With ORD 2 a real Read goes out at once (MSN 2); the RTR's response comes first, as
// responses come in order, and completes nothing.
TEST(RtrInitiator, OrdTwoReadGoesAtOnceAndTheRtrResponseComesFirst) {
    Lone l(initiator_read(), /*ord=*/2);
    Buf sink = Pair::buf(l.e, 16, kAccessLocalWrite);
    l.post_read(8, sink, kPeerStag, kPeerTo);
    ASSERT_EQ(l.sent().size(), 1u);
    EXPECT_EQ(get32(l.sent()[0], 2 + 10), 2u);  // MSN
    EXPECT_EQ(l.e.query_qp(l.qp)->reads_outstanding, 2u);
    l.from_peer(rtr_read_response());
    EXPECT_TRUE(l.wcs().empty());
    l.from_peer(tagged(0xC1, 0x42, sink.mr.lkey, sink.mr.addr, ByteVec(16, std::byte{1})));
    auto w = l.wcs();
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].wr_id, 8u);
    EXPECT_EQ(w[0].status, WcStatus::kSuccess);
    EXPECT_EQ(l.sent().size(), 1u);
}

// The RTR's response is checked as siw_rresp_check_ntoh checks any: another STag is an
// invalid STag (DDP tagged 1/0), data or another offset base-or-bounds (1/1).
TEST(RtrInitiator, RtrResponseToAnotherSinkOrWithDataIsRefused) {
    struct Bad {
        ByteVec u;
        std::uint8_t code;
    };
    for (const Bad& b : {Bad{rtr_read_response(0x1234), 0}, Bad{rtr_read_response(1, 8), 1},
                         Bad{rtr_read_response(1, 0, ByteVec(4, std::byte{9})), 1}}) {
        Lone l(initiator_read());
        l.from_peer(b.u);
        ASSERT_EQ(l.sent().size(), 1u);
        TermSeen t = read_terminate(l.sent()[0]);
        EXPECT_EQ(t.layer, 1);
        EXPECT_EQ(t.etype, 1);
        EXPECT_EQ(t.code, b.code);
        EXPECT_EQ(l.e.query_qp(l.qp)->state, QpState::kClosing);
        EXPECT_TRUE(l.wcs().empty());  // nothing of the application's was outstanding
    }
}

// A flush while the RTR's response is due reports the application's work only.
TEST(RtrInitiator, FlushReportsNoCompletionForTheRtrRead) {
    Lone l(initiator_read());
    Buf sink = Pair::buf(l.e, 16, kAccessLocalWrite);
    l.post_read(9, sink, kPeerStag, kPeerTo);  // waits behind the RTR (ORD 1)
    EXPECT_TRUE(l.sent().empty());
    EXPECT_EQ(l.e.query_qp(l.qp)->reads_outstanding, 1u);
    l.e.on_link_down(l.qp, -104);
    auto w = l.wcs();
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].wr_id, 9u);
    EXPECT_EQ(w[0].status, WcStatus::kWrFlushErr);
    EXPECT_EQ(l.e.query_qp(l.qp)->reads_outstanding, 0u);
}

// The peer's READ RTR took MSN 1 of queue 1 (our CM answered it): its first real Read
// Request is MSN 2, and MSN 1 again is out of range (DDP untagged 2/3, siw_init_rresp).
TEST(RtrResponder, PeersFirstReadAfterItsReadRtrIsMsnTwo) {
    RtrStart s;
    s.rx_msn_rreq = 2;
    {
        Lone l(s);
        Buf src = Pair::buf(l.e, 32, kAccessRemoteRead, 5);
        l.from_peer(untagged(0x41, 0x41, 1, 2, 0,
                             read_request(kPeerStag, kPeerTo, 32, src.mr.rkey, src.mr.addr)));
        ASSERT_EQ(l.sent().size(), 1u);
        ByteVec resp = tagged(0xC1, 0x42, kPeerStag, kPeerTo, src.mem);
        EXPECT_EQ(l.sent()[0], fpdu(resp, false));
    }
    {
        Lone l(s);
        Buf src = Pair::buf(l.e, 32, kAccessRemoteRead, 5);
        l.from_peer(untagged(0x41, 0x41, 1, 1, 0,
                             read_request(kPeerStag, kPeerTo, 32, src.mr.rkey, src.mr.addr)));
        ASSERT_EQ(l.sent().size(), 1u);
        TermSeen t = read_terminate(l.sent()[0]);
        EXPECT_EQ(t.layer, 1);
        EXPECT_EQ(t.etype, 2);
        EXPECT_EQ(t.code, 3);
    }
}

// A SEND RTR sent (initiator): our first Send is MSN 2 of queue 0.
TEST(RtrInitiator, FirstSendAfterASendRtrIsMsnTwo) {
    RtrStart s;
    s.tx_msn_send = 2;
    Lone l(s);
    Buf src = Pair::buf(l.e, 16, kAccessLocalWrite, 3);
    Sge sge = src.all();
    SendWr wr;
    wr.sg_list = std::span(&sge, 1);
    ASSERT_TRUE(l.e.post_send(l.qp, wr).has_value());
    ASSERT_TRUE(l.e.post_send(l.qp, wr).has_value());
    ASSERT_EQ(l.sent().size(), 2u);
    EXPECT_EQ(l.sent()[0], fpdu(untagged(0x41, 0x43, 0, 2, 0, src.mem), false));
    EXPECT_EQ(l.sent()[1], fpdu(untagged(0x41, 0x43, 0, 3, 0, src.mem), false));
}

// A SEND RTR received (responder): the peer's first Send is MSN 2; MSN 1 again is out of
// range (DDP untagged 2/3).
TEST(RtrResponder, PeersFirstSendAfterItsSendRtrIsMsnTwo) {
    RtrStart s;
    s.rx_msn_send = 2;
    for (std::uint32_t msn : {2u, 1u}) {
        Lone l(s);
        Buf dst = Pair::buf(l.e, 64, kAccessLocalWrite);
        Sge sge = dst.all();
        ASSERT_TRUE(l.e.post_recv(l.qp, {5, std::span(&sge, 1)}).has_value());
        l.from_peer(untagged(0x41, 0x43, 0, msn, 0, ByteVec(8, std::byte{0x44})));
        auto w = l.wcs();
        if (msn == 2) {
            ASSERT_EQ(w.size(), 1u);
            EXPECT_EQ(w[0].status, WcStatus::kSuccess);
            EXPECT_EQ(w[0].byte_len, 8u);
            EXPECT_TRUE(l.sent().empty());
        } else {
            ASSERT_EQ(l.sent().size(), 1u);
            TermSeen t = read_terminate(l.sent()[0]);
            EXPECT_EQ(t.layer, 1);
            EXPECT_EQ(t.etype, 2);
            EXPECT_EQ(t.code, 3);
        }
    }
}

// ---- TERMINATE and Send checks (siw_qp_rx.c) ----

// A TERMINATE as siw sends it (siw_send_terminate: QN 2, MSN 1, MO 0, L), here a CRC error.
ByteVec terminate_ulpdu(std::uint8_t c0 = 0x41, std::uint32_t qn = 2, std::uint32_t msn = 1,
                        std::uint32_t mo = 0) {
    return untagged(c0, 0x47, qn, msn, mo, ByteVec{std::byte{0x20}, std::byte{0x02}, {}, {}});
}

TEST(RxTerminate, OnQueueTwoMsnOneIsThePeersError) {
    Lone l({});
    l.from_peer(terminate_ulpdu());
    auto e = l.e.poll_qp_event();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->type, QpEventType::kTerminateReceived);
    EXPECT_EQ(e->term.layer, 2);
    EXPECT_EQ(e->term.code, 2);
    EXPECT_TRUE(l.links.end(1).closed);
    EXPECT_FALSE(l.links.end(1).abortive);
}

// Not queue 2, not MSN 1, not MO 0, or without L: siw calls it bogus and drops the
// stream (siw_proc_terminate returns -ECONNRESET before reading it). We reset the link,
// report no peer's error (no kTerminateReceived), send nothing and flush.
TEST(RxTerminate, BogusQueueMsnOffsetOrLastResetsTheStream) {
    const ByteVec bogus[] = {terminate_ulpdu(0x41, 0),       terminate_ulpdu(0x41, 1),
                             terminate_ulpdu(0x41, 2, 2),    terminate_ulpdu(0x41, 2, 0),
                             terminate_ulpdu(0x41, 2, 1, 4), terminate_ulpdu(0x01)};
    for (const ByteVec& u : bogus) {
        SCOPED_TRACE(::testing::Message()
                     << "QN " << get32(u, 6) << " MSN " << get32(u, 10) << " MO " << get32(u, 14)
                     << " ctrl " << static_cast<int>(u[0]));
        Lone l({});
        Buf dst = Pair::buf(l.e, 64, kAccessLocalWrite);
        Sge sge = dst.all();
        ASSERT_TRUE(l.e.post_recv(l.qp, {5, std::span(&sge, 1)}).has_value());
        l.from_peer(u);
        EXPECT_FALSE(l.e.poll_qp_event().has_value());
        EXPECT_TRUE(l.links.end(1).closed);
        EXPECT_TRUE(l.links.end(1).abortive);
        EXPECT_TRUE(l.sent().empty());
        EXPECT_EQ(l.e.query_qp(l.qp)->state, QpState::kClosing);
        auto w = l.wcs();
        ASSERT_EQ(w.size(), 1u);
        EXPECT_EQ(w[0].status, WcStatus::kWrFlushErr);
    }
}

// A Send whose next segment (same queue, MSN, next MO) carries another opcode: siw_get_hdr
// refuses the change. The receive completes in error and the answer is RDMAP remote
// operation / unexpected opcode (2/6), nothing quoted, as for an unknown opcode.
TEST(RxSend, OpcodeChangeInsideOneMessageIsRefused) {
    Lone l({});
    Buf dst = Pair::buf(l.e, 64, kAccessLocalWrite);
    Sge sge = dst.all();
    ASSERT_TRUE(l.e.post_recv(l.qp, {5, std::span(&sge, 1)}).has_value());
    l.from_peer(untagged(0x01, 0x43, 0, 1, 0, ByteVec(8, std::byte{1})));  // Send, not last
    EXPECT_TRUE(l.sent().empty());
    l.from_peer(untagged(0x41, 0x45, 0, 1, 8, ByteVec(8, std::byte{2})));  // Send SE, last
    ASSERT_EQ(l.sent().size(), 1u);
    TermSeen t = read_terminate(l.sent()[0]);
    EXPECT_EQ(t.layer, 0);
    EXPECT_EQ(t.etype, 2);
    EXPECT_EQ(t.code, 6);
    EXPECT_FALSE(t.m);
    EXPECT_FALSE(t.d);
    auto w = l.wcs();
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].wr_id, 5u);
    EXPECT_EQ(w[0].status, WcStatus::kGeneralErr);
}

TEST(RxSend, SameOpcodeAcrossSegmentsStillCompletes) {
    Lone l({});
    Buf dst = Pair::buf(l.e, 64, kAccessLocalWrite);
    Sge sge = dst.all();
    ASSERT_TRUE(l.e.post_recv(l.qp, {5, std::span(&sge, 1)}).has_value());
    l.from_peer(untagged(0x01, 0x45, 0, 1, 0, ByteVec(8, std::byte{1})));
    l.from_peer(untagged(0x41, 0x45, 0, 1, 8, ByteVec(8, std::byte{2})));
    EXPECT_TRUE(l.sent().empty());
    auto w = l.wcs();
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, WcStatus::kSuccess);
    EXPECT_EQ(w[0].byte_len, 16u);
    EXPECT_TRUE(w[0].solicited);
}

}  // namespace
}  // namespace iwcm::rdma::test
