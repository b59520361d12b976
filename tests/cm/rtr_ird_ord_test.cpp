// What real peers send in the RTR and IRD/ORD words, on exact frames: RTRs
// with any STag and tagged offset (RFC 6581 asks no check; siw sends STag 1,
// other peers 0), IRD/ORD clamped to max_ird / max_ord as irdma_record_ird_ord
// does, and the READ RTR's one read each way (irdma_negotiate_mpa_v2_ird_ord).
#include <cerrno>

#include "cm/dut.hpp"
#include "wire/bytes.hpp"

namespace iwcm::test {
namespace {

// The RTR FPDU (CRC off) with its STag fields and tagged offsets overwritten.
std::vector<std::byte> rtr_with_stag(wire::RtrType type, std::uint32_t stag, std::uint32_t to_low) {
    std::vector<std::byte> b(wire::rtr_fpdu_len(type));
    wire::emit_rtr_fpdu({type, 1}, false, b);
    if (type == wire::RtrType::kWrite) {
        wire::store_be32(b, 2 + 2, stag);     // STag
        wire::store_be32(b, 2 + 10, to_low);  // tagged offset, low word
    } else {
        wire::store_be32(b, 2 + 18, stag);    // sink STag
        wire::store_be32(b, 2 + 26, to_low);  // sink tagged offset, low word
        wire::store_be32(b, 2 + 34, stag);    // source STag
        wire::store_be32(b, 2 + 42, to_low);  // source tagged offset, low word
    }
    return b;
}

void expect_rtr_establishes(wire::RtrType type, std::uint32_t stag) {
    SCOPED_TRACE(::testing::Message() << "STag " << stag);
    Dut d;
    const bool write = type == wire::RtrType::kWrite;
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("x"), 1, 1, true, false, write, !write));
    auto rep = accept_and_take_reply(d, e, {}, 1);
    ASSERT_TRUE(rep.v2.has_value());
    EXPECT_EQ(rep.v2->rtr_write, write);
    EXPECT_EQ(rep.v2->rtr_read, !write);
    d.seg(tf::kAck | tf::kPsh, rtr_with_stag(type, stag, 0x89ABCDEF));
    auto ev = d.evs();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, EventType::kEstablished);
    EXPECT_EQ(ev[0].mpa.rtr, write ? RtrType::kWrite : RtrType::kRead);
    EXPECT_EQ(*d.core.state(e.conn), CmState::kEstablished);
    // Only the ACK of the RTR goes out (no TERMINATE, no reset); a READ RTR's ACK rides on
    // its answer, the zero-length Read Response to the RTR's sink (rtr_data_path_test).
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o[0].tcp().flags & tf::kAck);
    EXPECT_FALSE(o[0].tcp().flags & (tf::kRst | tf::kFin));
    EXPECT_EQ(o[0].payload.size(), write ? 0u : wire::kReadRtrResponseFpduLen);
    EXPECT_EQ(d.core.stats().terminates_sent, 0u);
}

TEST(OneSideEstablished, WriteRtrWithAnyStagAndOffsetEstablishes) {
    for (std::uint32_t stag : {0u, 1u, 0x80000000u})
        expect_rtr_establishes(wire::RtrType::kWrite, stag);
}

TEST(OneSideEstablished, ReadRtrWithAnyStagAndOffsetEstablishes) {
    for (std::uint32_t stag : {0u, 1u, 0x80000000u})
        expect_rtr_establishes(wire::RtrType::kRead, stag);
}

TEST(MpaReqSent, OurRtrCarriesStagOne) {
    for (auto [bits, type] : {std::pair{rtr::kWrite, wire::RtrType::kWrite},
                              std::pair{rtr::kRead, wire::RtrType::kRead}}) {
        Dut d;
        d.to_mpareq_sent();
        d.send_mpa(reply_v2(1, 1, true, bits));
        auto o = d.out();
        ASSERT_EQ(o.size(), 1u);
        std::vector<std::byte> expected(wire::rtr_fpdu_len(type));
        wire::emit_rtr_fpdu({type, 1}, false, expected);
        EXPECT_EQ(o[0].payload, expected);
        const std::size_t stag_off = type == wire::RtrType::kWrite ? 2 + 2 : 2 + 18;
        EXPECT_EQ(wire::load_be32(o[0].payload, stag_off), 1u);
    }
}

// irdma_record_ird_ord: the application's IRD/ORD clamped to max_ird / max_ord.
TEST(SynSent, ConnectClampsIrdOrdToTheMaxima) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.mpa.max_ird = 16;
    cfg.mpa.max_ord = 8;
    Dut d(cfg);
    ConnectParams p = d.connect_params();
    p.ird = 100;
    p.ord = 50;
    auto req = d.to_mpareq_sent(p);
    auto m = parse_mpa_or_fail(req.payload);
    ASSERT_TRUE(m.v2.has_value());
    EXPECT_EQ(m.v2->ird, 16);
    EXPECT_EQ(m.v2->ord, 8);
}

TEST(SynSent, NoValuePassesUnclamped) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.mpa.max_ird = 16;
    cfg.mpa.max_ord = 8;
    Dut d(cfg);
    ConnectParams p = d.connect_params();
    p.ird = wire::kIrdOrdNone;
    p.ord = wire::kIrdOrdNone;
    auto m = parse_mpa_or_fail(d.to_mpareq_sent(p).payload);
    ASSERT_TRUE(m.v2.has_value());
    EXPECT_EQ(m.v2->ird, wire::kIrdOrdNone);
    EXPECT_EQ(m.v2->ord, wire::kIrdOrdNone);
}

TEST(SynSent, NoReadRtrOfferedWithoutOrd) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.mpa.max_ord = 0;
    Dut d(cfg);
    auto m = parse_mpa_or_fail(d.to_mpareq_sent().payload);
    ASSERT_TRUE(m.v2.has_value());
    EXPECT_TRUE(m.v2->rtr_send);
    EXPECT_TRUE(m.v2->rtr_write);
    EXPECT_FALSE(m.v2->rtr_read);
    EXPECT_EQ(m.v2->ord, 0);
}

TEST(MpaReqRcvd, AcceptClampsIrdOrdToTheMaxima) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.mpa.max_ird = 16;
    cfg.mpa.max_ord = 8;
    Dut d(cfg);
    // The peer can take 100 reads and issue 100: we still promise only 16 / 8.
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("x"), 100, 100, true, true, false, false));
    AcceptParams ap;
    ap.ird = 500;
    ap.ord = 500;
    auto rep = accept_and_take_reply(d, e, ap, 1);
    ASSERT_TRUE(rep.v2.has_value());
    EXPECT_EQ(rep.v2->ird, 16);
    EXPECT_EQ(rep.v2->ord, 8);
}

TEST(MpaReqRcvd, ReplyWithReadRtrNeverSaysIrdZero) {
    Dut d;
    // The peer offers only the READ RTR and needs no reads of its own (ORD 0).
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("x"), 0, 0, true, false, false, true));
    AcceptParams ap;
    ap.ird = 0;
    ap.ord = 0;
    auto rep = accept_and_take_reply(d, e, ap, 1);
    ASSERT_TRUE(rep.v2.has_value());
    EXPECT_TRUE(rep.v2->rtr_read);
    EXPECT_EQ(rep.v2->ird, 1);
    EXPECT_EQ(rep.v2->ord, 0);
}

TEST(MpaReqRcvd, NoReadRtrPickedWithoutIrd) {
    CoreConfig cfg = config_for(kMacB, 7);
    cfg.mpa.max_ird = 0;
    Dut d(cfg);
    Ev e = d.to_mpareq_rcvd(request_v2(bytes("x"), 1, 1, true, false, false, true));
    EXPECT_TRUE(d.core.accept(d.now, e.conn, {}).has_value());
    auto o = d.out();
    ASSERT_EQ(o.size(), 3u);  // reply, TERMINATE, FIN
    auto rep = parse_mpa_or_fail(o[0].payload);
    ASSERT_TRUE(rep.v2.has_value());
    EXPECT_FALSE(rep.v2->rtr_read);
    expect_terminate(o[1], wire::TermError::kNoMatchingRtr);
    EXPECT_TRUE(o[2].tcp().flags & tf::kFin);
    auto ev = d.evs();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, EventType::kConnectError);
    EXPECT_EQ(ev[0].status, -EINVAL);
}

TEST(MpaReqSent, ReadRtrRaisesOrdZeroToOne) {
    Dut d;
    ConnectParams p = d.connect_params();
    p.ird = 0;
    p.ord = 0;
    d.to_mpareq_sent(p);
    d.send_mpa(reply_v2(/*ird=*/1, /*ord=*/0, true, rtr::kRead));
    auto o = d.out();
    ASSERT_EQ(o.size(), 1u);
    auto fpdu = wire::parse_fpdu(o[0].payload, false);
    ASSERT_TRUE(fpdu.has_value());
    EXPECT_EQ(*wire::parse_rtr(fpdu->ulpdu), wire::RtrType::kRead);
    auto ev = d.evs();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, EventType::kEstablished);
    EXPECT_EQ(ev[0].mpa.ord, 1);
}

TEST(MpaReqSent, ReadRtrFromAResponderWithoutIrdGetsTerminate) {
    Dut d;
    d.to_mpareq_sent();
    d.send_mpa(reply_v2(/*ird=*/0, /*ord=*/1, true, rtr::kRead));
    auto o = d.out();
    ASSERT_EQ(o.size(), 2u);  // TERMINATE, FIN
    expect_terminate(o[0], wire::TermError::kInsufficientIrd);
    EXPECT_TRUE(o[1].tcp().flags & tf::kFin);
    auto ev = d.evs();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, EventType::kConnectError);
    EXPECT_EQ(ev[0].status, -EINVAL);
}

}  // namespace
}  // namespace iwcm::test
