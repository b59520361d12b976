// What the CM does for the data path around a peer-to-peer RTR (RFC 6581 section 6), on
// exact frames built from what the drivers send (docs/design.md, the RTR table):
//  * as responder it answers a READ RTR, as it reads it, with the zero-length Read
//    Response to the request's sink (siw's READ RTR names sink STag 0, offset 0:
//    siw_qp_mpa_rts; cxgb4's STag 1, offset 1: build_rtr_msg);
//  * the hand-off tells the data path where each untagged queue starts (MSN 2 after a
//    SEND or READ RTR) and whether our READ RTR's response is still due;
//  * our READ RTR's response arriving before the hand-off waits in the stream;
//  * a revision-2 request with the enhanced flag gets the IRD/ORD word back, even with
//    both values "no value" (siw_accept).
#include <cerrno>

#include "cm/dut.hpp"
#include "wire/bytes.hpp"
#include "wire/ddp.hpp"

namespace iwcm::test {
namespace {

// A READ RTR (CRC off): a zero-length Read Request on queue 1, MSN 1, with these sink
// and source fields (RFC 5040 section 4.4), written field by field.
std::vector<std::byte> read_rtr(std::uint32_t sink_stag, std::uint64_t sink_to,
                                std::uint32_t src_stag, std::uint64_t src_to) {
    std::vector<std::byte> b(52);
    wire::store_be16(b, 0, 46);
    b[2] = std::byte{0x41};          // L, DDP version 1
    b[3] = std::byte{0x41};          // RDMAP version 1, Read Request
    wire::store_be32(b, 2 + 6, 1);   // QN 1
    wire::store_be32(b, 2 + 10, 1);  // MSN 1
    wire::store_be32(b, 2 + 18, sink_stag);
    wire::store_be32(b, 2 + 22, static_cast<std::uint32_t>(sink_to >> 32));
    wire::store_be32(b, 2 + 26, static_cast<std::uint32_t>(sink_to));
    wire::store_be32(b, 2 + 34, src_stag);
    wire::store_be32(b, 2 + 38, static_cast<std::uint32_t>(src_to >> 32));
    wire::store_be32(b, 2 + 42, static_cast<std::uint32_t>(src_to));
    return b;
}

// The zero-length Read Response (CRC off): tagged, L, opcode 2, to this sink.
std::vector<std::byte> read_response(std::uint32_t stag, std::uint64_t to) {
    std::vector<std::byte> b(20);
    wire::store_be16(b, 0, 14);
    b[2] = std::byte{0xC1};  // T, L, DDP version 1
    b[3] = std::byte{0x42};  // RDMAP version 1, Read Response
    wire::store_be32(b, 2 + 2, stag);
    wire::store_be32(b, 2 + 6, static_cast<std::uint32_t>(to >> 32));
    wire::store_be32(b, 2 + 10, static_cast<std::uint32_t>(to));
    return b;
}

// Responder, the peer offered only `bits`: the RTR (its FPDU) arrives after our reply.
Ev accept_offering(Dut& d, std::uint8_t bits) {
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("x"), 1, 1, true, (bits & rtr::kSend) != 0,
                                       (bits & rtr::kWrite) != 0, (bits & rtr::kRead) != 0));
    accept_and_take_reply(d, e, {}, 1);
    return e;
}

TEST(OneSideEstablished, ReadRtrIsAnsweredWithTheZeroLengthReadResponse) {
    struct Peer {
        const char* name;
        std::uint32_t sink_stag, src_stag;
        std::uint64_t sink_to, src_to;
    };
    for (const Peer& p :
         {Peer{"siw", 0, 1, 0, 0}, Peer{"cxgb4", 1, 1, 1, 1}, Peer{"irdma", 0xABCD, 0x1234, 0, 0},
          Peer{"any", 0x80000001, 7, 0x0123456789ABCDEF, 9}}) {
        SCOPED_TRACE(p.name);
        Dut d;
        Ev e = accept_offering(d, rtr::kRead);
        d.seg(tf::kAck | tf::kPsh, read_rtr(p.sink_stag, p.sink_to, p.src_stag, p.src_to));
        auto ev = d.evs();
        ASSERT_EQ(ev.size(), 1u);
        EXPECT_EQ(ev[0].type, EventType::kEstablished);
        // The answer, carrying the ACK of the RTR.
        expect_sent(d, {d.sent_frame(tf::kAck | tf::kPsh, d.dut_nxt, d.peer_nxt,
                                     read_response(p.sink_stag, p.sink_to))});
        EXPECT_EQ(d.core.stats().terminates_sent, 0u);
        // Nothing waits for the data path: the peer's READ RTR took MSN 1 of queue 1.
        auto ctx = d.core.handoff(e.conn);
        ASSERT_TRUE(ctx.has_value());
        EXPECT_EQ(ctx->rtr_start.rx_msn_rreq, 2u);
        EXPECT_EQ(ctx->rtr_start.tx_msn_rreq, 1u);
        EXPECT_FALSE(ctx->rtr_start.read_response_due);
    }
}

// With CRC the answer carries its CRC32c (RFC 5044 section 4.4).
TEST(OneSideEstablished, ReadRtrAnswerCarriesItsCrc) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.mpa.crc = true;
    Dut d(cfg);
    accept_offering(d, rtr::kRead);
    std::vector<std::byte> rtr = read_rtr(0, 0, 1, 0);
    wire::seal_fpdu_in_place(46, true, rtr);
    d.seg(tf::kAck | tf::kPsh, rtr);
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    std::vector<std::byte> want = read_response(0, 0);
    wire::seal_fpdu_in_place(14, true, want);
    EXPECT_EQ(o[0].payload, want);
    auto f = wire::parse_fpdu(o[0].payload, true);
    ASSERT_TRUE(f.has_value());
    EXPECT_TRUE(f->crc_ok);
}

// The marks the hand-off carries, per role and RTR type.
struct MarkCase {
    bool initiator;
    std::uint8_t type;
    RtrStart want;
};

RtrStart marks(std::uint32_t txs, std::uint32_t rxs, std::uint32_t txr, std::uint32_t rxr,
               bool due) {
    RtrStart s;
    s.tx_msn_send = txs;
    s.rx_msn_send = rxs;
    s.tx_msn_rreq = txr;
    s.rx_msn_rreq = rxr;
    s.read_response_due = due;
    return s;
}

std::vector<std::byte> rtr_fpdu(wire::RtrType t) {
    std::vector<std::byte> b(wire::rtr_fpdu_len(t));
    wire::emit_rtr_fpdu({t, 1}, false, b);
    return b;
}

wire::RtrType wire_type(std::uint8_t bits) {
    return bits == rtr::kSend
               ? wire::RtrType::kSend
               : (bits == rtr::kWrite ? wire::RtrType::kWrite : wire::RtrType::kRead);
}

TEST(Handoff, CarriesTheRtrMarksOfEachTypeAndRole) {
    const MarkCase cases[] = {
        {true, rtr::kSend, marks(2, 1, 1, 1, false)},
        {true, rtr::kWrite, marks(1, 1, 1, 1, false)},
        {true, rtr::kRead, marks(1, 1, 2, 1, true)},
        {false, rtr::kSend, marks(1, 2, 1, 1, false)},
        {false, rtr::kWrite, marks(1, 1, 1, 1, false)},
        {false, rtr::kRead, marks(1, 1, 1, 2, false)},
    };
    for (const MarkCase& c : cases) {
        SCOPED_TRACE(::testing::Message()
                     << (c.initiator ? "initiator " : "responder ") << static_cast<int>(c.type));
        Dut d;
        if (c.initiator) {
            d.to_mpareq_sent();
            d.send_mpa(reply_v2(1, 1, true, c.type));
        } else {
            accept_offering(d, c.type);
            d.seg(tf::kAck | tf::kPsh, rtr_fpdu(wire_type(c.type)));
        }
        auto ev = d.evs();
        ASSERT_EQ(ev.size(), 1u);
        ASSERT_EQ(ev[0].type, EventType::kEstablished);
        auto ctx = d.core.handoff(ev[0].conn);
        ASSERT_TRUE(ctx.has_value());
        EXPECT_EQ(ctx->rtr_start.tx_msn_send, c.want.tx_msn_send);
        EXPECT_EQ(ctx->rtr_start.rx_msn_send, c.want.rx_msn_send);
        EXPECT_EQ(ctx->rtr_start.tx_msn_rreq, c.want.tx_msn_rreq);
        EXPECT_EQ(ctx->rtr_start.rx_msn_rreq, c.want.rx_msn_rreq);
        EXPECT_EQ(ctx->rtr_start.read_response_due, c.want.read_response_due);
    }
}

TEST(Handoff, NoRtrLeavesEveryQueueAtMsnOne) {
    Dut d;
    connect_active(d);
    auto ctx = d.core.handoff(d.conn);
    ASSERT_TRUE(ctx.has_value());
    EXPECT_EQ(ctx->rtr_start.tx_msn_send, 1u);
    EXPECT_EQ(ctx->rtr_start.tx_msn_rreq, 1u);
    EXPECT_FALSE(ctx->rtr_start.read_response_due);
}

// Initiator: irdma's responder picks READ among the three we offer
// (irdma_negotiate_mpa_v2_ird_ord tests the read bit first) and answers our READ RTR.
// An answer that comes before the application takes the connection over waits in the
// stream (the CM reads only a TERMINATE there): no event, nothing sent, and it is the
// data path's to read after the hand-off.
TEST(Established, ReadRtrResponseBeforeTheHandoffWaitsInTheStream) {
    Dut d;
    d.to_mpareq_sent();
    d.send_mpa(reply_v2(1, 1, true, rtr::kRead));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o[0].payload, rtr_fpdu(wire::RtrType::kRead));
    d.dut_nxt += static_cast<std::uint32_t>(o[0].payload.size());
    ASSERT_EQ(d.evs().size(), 1u);
    const std::vector<std::byte> resp = read_response(wire::kRtrStag, 0);
    d.seg(tf::kAck | tf::kPsh, resp);
    EXPECT_TRUE(d.evs().empty());
    EXPECT_EQ(*d.core.state(d.conn), CmState::kEstablished);
    EXPECT_EQ(d.core.stats().terminates_sent, 0u);
    auto ctx = d.core.handoff(d.conn);
    ASSERT_TRUE(ctx.has_value());
    EXPECT_TRUE(ctx->rtr_start.read_response_due);
    auto info = d.core.stream_info(d.conn);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->readable, resp.size());
    auto view = d.core.peek(d.conn);
    ASSERT_TRUE(view.has_value());
    EXPECT_EQ(std::vector<std::byte>(view->begin(), view->end()), resp);
}

// Enhanced flag set, IRD and ORD both 0x3FFF ("no value"), no peer-to-peer: the reply is
// revision 2 with the enhanced flag and the word (siw_accept writes it whenever the
// request had the flag; irdma_build_mpa_v2 always at revision 2), saying our values.
TEST(MpaReqRcvd, EnhancedRequestWithNoValuesGetsTheWordBack) {
    Dut d;
    const std::uint16_t none = wire::kIrdOrdNone;
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("x"), none, none, false));
    AcceptParams ap;
    ap.ird = 2;
    ap.ord = 3;
    auto rep = accept_and_take_reply(d, e, ap, 1);
    EXPECT_EQ(rep.revision, 2);
    ASSERT_TRUE(rep.v2.has_value());
    EXPECT_FALSE(rep.v2->peer_to_peer);
    EXPECT_EQ(rep.v2->ird, 2);
    EXPECT_EQ(rep.v2->ord, 3);
    EXPECT_FALSE(rep.v2->rtr_send || rep.v2->rtr_write || rep.v2->rtr_read);
    auto ev = d.evs();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, EventType::kEstablished);
}

// A revision-2 request without the enhanced flag has no word to answer.
TEST(MpaReqRcvd, RevisionTwoRequestWithoutTheWordGetsNone) {
    Dut d;
    wire::MpaRepr req;
    req.kind = wire::MpaKind::kRequest;
    req.revision = 2;
    Ev e = d.to_mpareq_rcvd(req);
    auto rep = accept_and_take_reply(d, e, {}, 1);
    EXPECT_EQ(rep.revision, 2);
    EXPECT_FALSE(rep.v2.has_value());
}

}  // namespace
}  // namespace iwcm::test
