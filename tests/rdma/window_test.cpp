// Memory windows (type 2B, bound through the send queue): what a bound window lets the
// peer reach, on the wire, and how it ends (local invalidation, the peer's Send with
// Invalidate, the QP's end). The table's own rules are in mr_table_test.cpp.
#include "fixture.hpp"

namespace iwcm::rdma::test {
namespace {

// The next key of a window's STag, as ibv_inc_rkey steps it.
std::uint32_t next_key(std::uint32_t stag) {
    return (stag & ~0xFFu) | ((stag + 1) & 0xFF);
}

// a's region, which allows no remote access of its own, and a window on it that a's QP
// binds to [64, 192) of it with remote read and write, under `stag`.
struct Bound {
    explicit Bound(std::uint32_t region_access = kAccessLocalWrite | kAccessMwBind)
        : region(Pair::buf(p.a, 256, region_access, 3)) {
        auto w = p.a.alloc_mw(0);
        EXPECT_TRUE(w.has_value());
        window = *w;
        stag = next_key(window.rkey);
    }
    SendWr bind_wr(std::uint64_t wr_id, std::uint32_t to_stag) const {
        SendWr wr;
        wr.wr_id = wr_id;
        wr.opcode = WrOpcode::kBindMw;
        wr.rkey = to_stag;
        wr.bind = {window.handle, region.mr.lkey, region.mr.addr + 64, 128,
                   kAccessRemoteRead | kAccessRemoteWrite};
        return wr;
    }
    // The bind goes and completes; nothing of it is on the wire.
    void bind() {
        ASSERT_TRUE(p.a.post_send(p.qa, bind_wr(9, stag)).has_value());
        p.pump();
        EXPECT_TRUE(p.links.end(0).sent.empty());
        auto wc = Pair::wcs(p.a, p.acq);
        ASSERT_EQ(wc.size(), 1u);
        EXPECT_EQ(wc[0].wr_id, 9u);
        EXPECT_EQ(wc[0].opcode, WcOpcode::kBindMw);
        EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
    }
    // A hand-made FPDU reaches a; a's answer is its last record.
    TermSeen hit(const ByteVec& ulpdu) {
        p.links.inject(0, fpdu(ulpdu, false));
        p.links.deliver(0, SIZE_MAX);
        p.a.on_readable(p.qa);
        EXPECT_FALSE(p.links.end(0).sent.empty());
        if (p.links.end(0).sent.empty()) return {};
        return read_terminate(p.links.end(0).sent.back());
    }

    Pair p;
    Buf region;
    MemoryWindow window;
    std::uint32_t stag = 0;
};

const ByteVec kEight(8, std::byte{0x5A});

TEST(MemoryWindow, ThePeersWriteAndReadReachTheBoundRange) {
    Bound t;
    t.bind();
    Buf src = Pair::buf(t.p.b, 16, 0, 11);
    Buf sink = Pair::buf(t.p.b, 16, kAccessLocalWrite);
    const ByteVec before = t.region.mem;
    SendWr write;
    write.wr_id = 1;
    write.opcode = WrOpcode::kRdmaWrite;
    Sge s = src.all();
    write.sg_list = std::span(&s, 1);
    write.remote_addr = t.region.mr.addr + 72;
    write.rkey = t.stag;
    ASSERT_TRUE(t.p.b.post_send(t.p.qb, write).has_value());
    SendWr read;
    read.wr_id = 2;
    read.opcode = WrOpcode::kRdmaRead;
    Sge d = sink.all();
    read.sg_list = std::span(&d, 1);
    read.remote_addr = t.region.mr.addr + 176;
    read.rkey = t.stag;
    ASSERT_TRUE(t.p.b.post_send(t.p.qb, read).has_value());
    t.p.pump();
    auto wc = Pair::wcs(t.p.b, t.p.bcq);
    ASSERT_EQ(wc.size(), 2u);
    EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
    EXPECT_EQ(wc[1].status, WcStatus::kSuccess);
    ByteVec expect = before;
    std::copy(src.mem.begin(), src.mem.end(), expect.begin() + 72);
    EXPECT_EQ(t.region.mem, expect);
    EXPECT_EQ(sink.mem, ByteVec(before.begin() + 176, before.begin() + 192));
}

// Outside the range (inside the region), with the allocation's key, or with the region's
// own STag (no remote rights): each is refused as the region's STag would be, and
// nothing is placed.
TEST(MemoryWindow, AWriteOutsideWhatTheWindowGivesIsATerminate) {
    struct Case {
        const char* what;
        std::uint32_t (*stag)(const Bound&);
        std::uint64_t offset;
        std::uint8_t code;  // DDP tagged buffer error
    };
    const Case cases[] = {
        {"below the range", [](const Bound& t) { return t.stag; }, 60, wire::kDdpTaggedBaseBounds},
        {"past the range", [](const Bound& t) { return t.stag; }, 188, wire::kDdpTaggedBaseBounds},
        {"the allocation's key", [](const Bound& t) { return t.window.rkey; }, 64,
         wire::kDdpTaggedInvalidStag},
        {"the region's STag", [](const Bound& t) { return t.region.mr.rkey; }, 64,
         wire::kDdpTaggedInvalidStag},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        Bound t;
        t.bind();
        const ByteVec before = t.region.mem;
        TermSeen term = t.hit(tagged(0xC1, 0x40, c.stag(t), t.region.mr.addr + c.offset, kEight));
        EXPECT_EQ(term.layer, 1);
        EXPECT_EQ(term.etype, 1);
        EXPECT_EQ(term.code, c.code);
        EXPECT_EQ(t.region.mem, before);
    }
}

// IBV_WR_LOCAL_INV of the window's STag unbinds it at its turn; the peer's Write after
// it finds an invalid STag.
TEST(MemoryWindow, LocalInvalidationEndsThePeersAccess) {
    Bound t;
    t.bind();
    SendWr inv;
    inv.wr_id = 4;
    inv.opcode = WrOpcode::kLocalInvalidate;
    inv.invalidate_rkey = t.stag;
    ASSERT_TRUE(t.p.a.post_send(t.p.qa, inv).has_value());
    t.p.pump();
    auto wc = Pair::wcs(t.p.a, t.p.acq);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].opcode, WcOpcode::kLocalInvalidate);
    EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
    const ByteVec before = t.region.mem;
    TermSeen term = t.hit(tagged(0xC1, 0x40, t.stag, t.region.mr.addr + 64, kEight));
    EXPECT_EQ(term.layer, 1);
    EXPECT_EQ(term.etype, 1);
    EXPECT_EQ(term.code, wire::kDdpTaggedInvalidStag);
    EXPECT_EQ(t.region.mem, before);
}

// The peer's Send with Invalidate of the window's STag unbinds it before the receive
// completes (with the key); bound again under the next key, the old STag names
// nothing and the new one serves.
TEST(MemoryWindow, ThePeersSendWithInvalidateUnbindsItAndItBindsAgain) {
    Bound t;
    t.bind();
    Buf rbuf = Pair::buf(t.p.a, 16, kAccessLocalWrite);
    Sge r = rbuf.all();
    ASSERT_TRUE(t.p.a.post_recv(t.p.qa, {21, std::span(&r, 1)}).has_value());
    Buf body = Pair::buf(t.p.b, 8, 0, 5);
    SendWr send;
    send.wr_id = 3;
    send.opcode = WrOpcode::kSendWithInvalidate;
    Sge s = body.all();
    send.sg_list = std::span(&s, 1);
    send.invalidate_rkey = t.stag;
    ASSERT_TRUE(t.p.b.post_send(t.p.qb, send).has_value());
    t.p.pump();
    auto wc = Pair::wcs(t.p.a, t.p.acq);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].wr_id, 21u);
    EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
    EXPECT_TRUE(wc[0].with_invalidate);
    EXPECT_EQ(wc[0].invalidated_rkey, t.stag);
    EXPECT_TRUE(t.p.links.end(0).sent.empty()) << "no TERMINATE";

    const std::uint32_t again = next_key(t.stag);
    ASSERT_TRUE(t.p.a.post_send(t.p.qa, t.bind_wr(10, again)).has_value());
    t.p.pump();
    wc = Pair::wcs(t.p.a, t.p.acq);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
    Buf src = Pair::buf(t.p.b, 8, 0, 13);
    SendWr write;
    write.opcode = WrOpcode::kRdmaWrite;
    Sge w = src.all();
    write.sg_list = std::span(&w, 1);
    write.remote_addr = t.region.mr.addr + 64;
    write.rkey = again;
    ASSERT_TRUE(t.p.b.post_send(t.p.qb, write).has_value());
    t.p.pump();
    EXPECT_EQ(ByteVec(t.region.mem.begin() + 64, t.region.mem.begin() + 72), src.mem);
    const ByteVec before = t.region.mem;
    TermSeen term = t.hit(tagged(0xC1, 0x40, t.stag, t.region.mr.addr + 64, kEight));
    EXPECT_EQ(term.code, wire::kDdpTaggedInvalidStag) << "the STag before names nothing";
    EXPECT_EQ(t.region.mem, before);
}

// A bind the rules refuse (here: a region registered without kAccessMwBind) completes
// with kMwBindErr and ends the QP with a TERMINATE (RDMAP, local catastrophic); the
// window stays invalid and the work behind the bind is flushed.
TEST(MemoryWindow, ARefusedBindIsMwBindErrAndEndsTheQueuePair) {
    Bound t(kAccessLocalWrite | kAccessRemoteWrite);
    Buf src = Pair::buf(t.p.a, 8, 0);
    ASSERT_TRUE(t.p.a.post_send(t.p.qa, t.bind_wr(9, t.stag)).has_value());
    t.p.pump();
    auto wc = Pair::wcs(t.p.a, t.p.acq);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].wr_id, 9u);
    EXPECT_EQ(wc[0].opcode, WcOpcode::kBindMw);
    EXPECT_EQ(wc[0].status, WcStatus::kMwBindErr);
    ASSERT_FALSE(t.p.links.end(0).sent.empty());
    TermSeen term = read_terminate(t.p.links.end(0).sent.back());
    EXPECT_EQ(term.layer, 0);
    EXPECT_EQ(term.etype, wire::kRdmapEtypeLocalCatastrophic);
    auto e = t.p.a.poll_qp_event();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->type, QpEventType::kTerminateSent);
    EXPECT_EQ(t.p.a.query_qp(t.p.qa)->state, QpState::kClosing);
    SendWr wr;
    wr.opcode = WrOpcode::kRdmaWrite;
    EXPECT_EQ(t.p.a.post_send(t.p.qa, wr).error(), VerbsError::kWrongState);
}

// A bind carries no SGEs and only remote rights.
TEST(MemoryWindow, ABindWithSgesOrLocalRightsIsRefusedAtPost) {
    Bound t;
    SendWr wr = t.bind_wr(1, t.stag);
    Sge s = t.region.sge(0, 8);
    wr.sg_list = std::span(&s, 1);
    EXPECT_EQ(t.p.a.post_send(t.p.qa, wr).error(), VerbsError::kTooManySge);
    wr.sg_list = {};
    wr.bind.access = kAccessLocalWrite;
    EXPECT_EQ(t.p.a.post_send(t.p.qa, wr).error(), VerbsError::kInvalidArgument);
    EXPECT_EQ(t.p.a.query_qp(t.p.qa)->send_queued, 0u);
}

// A region stays registered while a window is bound to it; the window's end (its
// deallocation, or the end of the QP it was bound on) lets it go.
TEST(MemoryWindow, ARegionWithABoundWindowStaysRegisteredUntilTheWindowEnds) {
    for (bool by_qp : {false, true}) {
        SCOPED_TRACE(by_qp ? "the QP destroyed" : "the window deallocated");
        Bound t;
        t.bind();
        EXPECT_EQ(t.p.a.dereg_mr(t.region.mr.handle).error(), VerbsError::kWrongState);
        if (by_qp) {
            ASSERT_TRUE(t.p.a.destroy_qp(t.p.qa).has_value());
        } else {
            ASSERT_TRUE(t.p.a.dealloc_mw(t.window.handle).has_value());
            EXPECT_EQ(t.p.a.dealloc_mw(t.window.handle).error(), VerbsError::kStaleHandle);
        }
        EXPECT_TRUE(t.p.a.dereg_mr(t.region.mr.handle).has_value());
    }
}

}  // namespace
}  // namespace iwcm::rdma::test
