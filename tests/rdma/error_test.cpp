// Every DDP/RDMAP/MPA error a peer can cause is answered with a TERMINATE
// carrying siw's layer/type/code and the quoted header; the QP closes and
// its work flushes. Misuse of the API returns a VerbsError.
#include <cerrno>

#include "fixture.hpp"

namespace iwcm::rdma::test {
namespace {

// A hand-made FPDU goes to b; b's answer is its last record.
struct Victim {
    explicit Victim(bool crc = false) : p(opts(crc)) {}
    static PairOptions opts(bool crc) {
        PairOptions o;
        o.crc = crc;
        o.ird_b = 1;
        return o;
    }
    TermSeen hit(const ByteVec& ulpdu) { return hit_raw(fpdu(ulpdu, crc())); }
    TermSeen hit_raw(const ByteVec& bytes) {
        p.links.inject(1, bytes);
        p.links.deliver(1, SIZE_MAX);
        p.b.on_readable(p.qb);
        EXPECT_FALSE(p.links.end(1).sent.empty());
        if (p.links.end(1).sent.empty()) return {};
        EXPECT_TRUE(p.links.end(1).closed);  // the stream ends after the TERMINATE
        EXPECT_FALSE(p.links.end(1).abortive);
        auto e = p.b.poll_qp_event();
        EXPECT_TRUE(e.has_value());
        if (e) {
            EXPECT_EQ(e->type, QpEventType::kTerminateSent);
            EXPECT_EQ(e->qp, p.qb);
        }
        EXPECT_EQ(p.b.query_qp(p.qb)->state, QpState::kClosing);
        TermSeen t = read_terminate(p.links.end(1).sent.back());
        if (e) {
            EXPECT_EQ(e->term.layer, t.layer);
            EXPECT_EQ(e->term.etype, t.etype);
            EXPECT_EQ(e->term.code, t.code);
            error = e->error;
        }
        return t;
    }
    bool crc() const { return p.b.query_qp(p.qb)->crc; }
    void post_recv(std::size_t len) {
        rs = dst.sge(0, len);
        ASSERT_TRUE(p.b.post_recv(p.qb, {42, std::span(&rs, 1)}).has_value());
    }

    Pair p;
    Buf dst = Pair::buf(p.b, 4096, kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
    Buf ro = Pair::buf(p.b, 4096, kAccessRemoteRead);   // no remote write
    Buf wo = Pair::buf(p.b, 4096, kAccessRemoteWrite);  // no remote read
    Sge rs{};
    QpError error = QpError::kNone;  // the last hit's
};

void expect_quoted(const TermSeen& t, const ByteVec& ulpdu, std::size_t header_len) {
    EXPECT_TRUE(t.m);
    EXPECT_TRUE(t.d);
    EXPECT_EQ(t.seg_len, ulpdu.size());
    EXPECT_EQ(t.ddp_header, ByteVec(ulpdu.begin(), ulpdu.begin() + header_len));
}

const ByteVec kEight(8, std::byte{0x5A});

TEST(Terminate, WriteToUnknownStagIsDdpTaggedInvalidStag) {
    Victim v;
    ByteVec u = tagged(0xC1, 0x40, 0x00DEAD01, v.dst.mr.addr, kEight);
    TermSeen t = v.hit(u);
    EXPECT_EQ(t.layer, 1);
    EXPECT_EQ(t.etype, 1);
    EXPECT_EQ(t.code, 0);
    EXPECT_FALSE(t.r);
    expect_quoted(t, u, 14);
    EXPECT_EQ(v.error, QpError::kAccess) << to_string(v.error);
}

TEST(Terminate, WriteOutsideTheRegionIsBaseBounds) {
    Victim v;
    ByteVec u = tagged(0xC1, 0x40, v.dst.mr.rkey, v.dst.mr.addr + 4090, kEight);
    TermSeen t = v.hit(u);
    EXPECT_EQ(v.error, QpError::kAccess);
    EXPECT_EQ(t.layer, 1);
    EXPECT_EQ(t.etype, 1);
    EXPECT_EQ(t.code, 1);
    expect_quoted(t, u, 14);
}

TEST(Terminate, WriteWithoutRemoteWriteRightIsInvalidStagAsSiwSays) {
    Victim v;
    ByteVec u = tagged(0xC1, 0x40, v.ro.mr.rkey, v.ro.mr.addr, kEight);
    TermSeen t = v.hit(u);
    EXPECT_EQ(v.error, QpError::kAccess);
    EXPECT_EQ(t.layer, 1);
    EXPECT_EQ(t.etype, 1);
    EXPECT_EQ(t.code, 0);
    expect_quoted(t, u, 14);
    EXPECT_NE(v.ro.mem[0], std::byte{0x5A});
}

TEST(Terminate, StaleStagAfterDeregistrationFails) {
    Victim v;
    std::uint32_t old = v.wo.mr.rkey;
    ASSERT_TRUE(v.p.b.dereg_mr(v.wo.mr.handle).has_value());
    auto again = v.p.b.reg_mr(v.wo.mem, kAccessRemoteWrite);
    ASSERT_TRUE(again.has_value());
    EXPECT_NE(again->rkey, old);  // a slot reused gets another key (MrTable tests)
    TermSeen t = v.hit(tagged(0xC1, 0x40, old, v.wo.mr.addr, kEight));
    EXPECT_EQ(t.layer, 1);
    EXPECT_EQ(t.etype, 1);
    EXPECT_EQ(t.code, 0);
    EXPECT_NE(v.wo.mem[0], std::byte{0x5A});
}

// A region of another protection domain than the QP's: RFC 5041's "STag not
// associated with DDP Stream" for a Write, RFC 5040's "STag not associated
// with RDMAP Stream" for a Read Request (siw_tagged_error, siw_rdmap_error),
// checked before the rights and the bounds; nothing of the Write is placed.
TEST(Terminate, WriteToAnotherProtectionDomainIsStagNotAssociated) {
    Victim v;
    Buf other = Pair::buf(v.p.b, 64, kAccessLocalWrite | kAccessRemoteWrite, 3, 7);
    const ByteVec before = other.mem;
    ByteVec u = tagged(0xC1, 0x40, other.mr.rkey, other.mr.addr, kEight);
    TermSeen t = v.hit(u);
    EXPECT_EQ(v.error, QpError::kAccess);
    EXPECT_EQ(t.layer, 1);
    EXPECT_EQ(t.etype, 1);
    EXPECT_EQ(t.code, 2);
    expect_quoted(t, u, 14);
    EXPECT_EQ(other.mem, before);
    // Out of bounds and without the right as well: the domain is named first.
    Victim w;
    Buf ro = Pair::buf(w.p.b, 64, kAccessRemoteRead, 3, 7);
    t = w.hit(tagged(0xC1, 0x40, ro.mr.rkey, ro.mr.addr + 60, kEight));
    EXPECT_EQ(t.layer, 1);
    EXPECT_EQ(t.etype, 1);
    EXPECT_EQ(t.code, 2);
}

TEST(Terminate, ReadRequestForAnotherProtectionDomainIsStagNotAssociated) {
    Victim v;
    Buf other = Pair::buf(v.p.b, 64, kAccessRemoteRead, 3, 7);
    ByteVec rr = read_request(0x1234501, 0x1000, 16, other.mr.rkey, other.mr.addr);
    ByteVec u = untagged(0x41, 0x41, 1, 1, 0, rr);
    TermSeen t = v.hit(u);
    EXPECT_EQ(v.error, QpError::kAccess);
    EXPECT_EQ(t.layer, 0);
    EXPECT_EQ(t.etype, 1);
    EXPECT_EQ(t.code, 3);
    EXPECT_TRUE(t.r);
    EXPECT_EQ(t.rdmap_header, rr);
    expect_quoted(t, u, 18);
    EXPECT_EQ(v.p.links.end(1).sent.size(), 1u) << "the TERMINATE alone, no Read Response";
}

TEST(Terminate, SendWithWrongMsnIsMsnRange) {
    Victim v;
    v.post_recv(64);
    ByteVec u = untagged(0x41, 0x43, 0, 5, 0, kEight);
    TermSeen t = v.hit(u);
    EXPECT_EQ(v.error, QpError::kFatal);  // an invalid request: QP_FATAL as siw and irdma
    EXPECT_EQ(t.layer, 1);
    EXPECT_EQ(t.etype, 2);
    EXPECT_EQ(t.code, 3);
    expect_quoted(t, u, 18);
    // The posted receive flushes.
    auto w = Pair::wcs(v.p.b, v.p.bcq);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, WcStatus::kWrFlushErr);
    EXPECT_EQ(w[0].wr_id, 42u);
}

TEST(Terminate, SendWithoutReceiveIsNoBuffer) {
    Victim v;
    ByteVec u = untagged(0x41, 0x43, 0, 1, 0, kEight);
    TermSeen t = v.hit(u);
    EXPECT_EQ(v.error, QpError::kFatal);
    EXPECT_EQ(t.layer, 1);
    EXPECT_EQ(t.etype, 2);
    EXPECT_EQ(t.code, 2);
    expect_quoted(t, u, 18);
}

TEST(Terminate, SendLongerThanTheReceiveIsNoBufferWithLocLenErr) {
    Victim v;
    v.post_recv(4);
    ByteVec u = untagged(0x41, 0x43, 0, 1, 0, kEight);
    TermSeen t = v.hit(u);
    EXPECT_EQ(t.layer, 1);
    EXPECT_EQ(t.etype, 2);
    EXPECT_EQ(t.code, 2);  // siw: "no buffer", not RFC 5041's "too long" (5)
    auto w = Pair::wcs(v.p.b, v.p.bcq);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, WcStatus::kLocLenErr);
}

TEST(Terminate, SendToWrongQueueOrOffset) {
    {
        Victim v;
        v.post_recv(64);
        TermSeen t = v.hit(untagged(0x41, 0x43, 3, 1, 0, kEight));
        EXPECT_EQ(v.error, QpError::kFatal);
        EXPECT_EQ(t.etype, 2);
        EXPECT_EQ(t.code, 1);  // invalid QN
    }
    {
        Victim v;
        v.post_recv(64);
        TermSeen t = v.hit(untagged(0x41, 0x43, 0, 1, 4, kEight));
        EXPECT_EQ(t.etype, 2);
        EXPECT_EQ(t.code, 4);  // invalid MO
    }
}

TEST(Terminate, BadDdpVersionQuotesNothing) {
    Victim v;
    v.post_recv(64);
    TermSeen t = v.hit(untagged(0x42, 0x43, 0, 1, 0, kEight));
    EXPECT_EQ(t.layer, 1);
    EXPECT_EQ(t.etype, 2);
    EXPECT_EQ(t.code, 6);
    EXPECT_FALSE(t.m || t.d || t.r);
}

TEST(Terminate, BadRdmapVersionAndUnknownOpcode) {
    {
        Victim v;
        v.post_recv(64);
        TermSeen t = v.hit(untagged(0x41, 0x83, 0, 1, 0, kEight));
        EXPECT_EQ(t.layer, 0);
        EXPECT_EQ(t.etype, 2);
        EXPECT_EQ(t.code, 5);
        EXPECT_FALSE(t.m || t.d || t.r);
    }
    {
        Victim v;
        TermSeen t = v.hit(untagged(0x41, 0x49, 0, 1, 0, kEight));
        EXPECT_EQ(v.error, QpError::kFatal);  // an unknown opcode
        EXPECT_EQ(t.layer, 0);
        EXPECT_EQ(t.etype, 2);
        EXPECT_EQ(t.code, 6);
        EXPECT_FALSE(t.m || t.d || t.r);
    }
}

TEST(Terminate, UnsolicitedReadResponseIsDdpCatastrophic) {
    Victim v;
    ByteVec u = tagged(0xC1, 0x42, v.dst.mr.rkey, v.dst.mr.addr, kEight);
    TermSeen t = v.hit(u);
    EXPECT_EQ(v.error, QpError::kFatal);
    EXPECT_EQ(t.layer, 1);
    EXPECT_EQ(t.etype, 0);
    EXPECT_EQ(t.code, 0);
    expect_quoted(t, u, 14);
}

TEST(Terminate, ReadRequestForUnreadableSourceIsRemoteProtectionWithR) {
    Victim v;
    ByteVec rr = read_request(0x1234501, 0x1000, 16, v.wo.mr.rkey, v.wo.mr.addr);
    ByteVec u = untagged(0x41, 0x41, 1, 1, 0, rr);
    TermSeen t = v.hit(u);
    EXPECT_EQ(v.error, QpError::kAccess);
    EXPECT_EQ(t.layer, 0);
    EXPECT_EQ(t.etype, 1);
    EXPECT_EQ(t.code, 2);  // access rights
    EXPECT_TRUE(t.r);
    EXPECT_EQ(t.rdmap_header, rr);
    expect_quoted(t, u, 18);
}

TEST(Terminate, ReadRequestForUnknownStagOrOutOfBounds) {
    {
        Victim v;
        TermSeen t =
            v.hit(untagged(0x41, 0x41, 1, 1, 0, read_request(1, 0, 16, 0x00BEEF01, v.dst.mr.addr)));
        EXPECT_EQ(v.error, QpError::kAccess);
        EXPECT_EQ(t.layer, 0);
        EXPECT_EQ(t.etype, 1);
        EXPECT_EQ(t.code, 0);
    }
    {
        Victim v;
        TermSeen t = v.hit(
            untagged(0x41, 0x41, 1, 1, 0, read_request(1, 0, 4097, v.dst.mr.rkey, v.dst.mr.addr)));
        EXPECT_EQ(t.layer, 0);
        EXPECT_EQ(t.etype, 1);
        EXPECT_EQ(t.code, 1);
    }
}

TEST(Terminate, ReadRequestWithWrongMsnIsMsnRange) {
    Victim v;
    TermSeen t =
        v.hit(untagged(0x41, 0x41, 1, 2, 0, read_request(1, 0, 16, v.dst.mr.rkey, v.dst.mr.addr)));
    EXPECT_EQ(t.layer, 1);
    EXPECT_EQ(t.etype, 2);
    EXPECT_EQ(t.code, 3);
}

// b serves one read at a time (IRD 1); a, misconfigured with ORD 4, asks
// for two. b's whole answer, byte for byte (RFC 5040 4.8, siw's choice of
// RDMAP remote operation / catastrophic stream, quoting the second request's
// DDP header); a reports the TERMINATE and fails its reads.
TEST(Terminate, IrdExceededWholeBytes) {
    PairOptions o;
    o.ird_b = 1;
    Pair p(o);
    Buf sink = Pair::buf(p.a, 64, kAccessLocalWrite);
    Buf source = Pair::buf(p.b, 64, kAccessRemoteRead);
    for (std::uint64_t i = 0; i < 2; ++i) {
        Sge s = sink.sge(i * 32, 32);
        SendWr wr;
        wr.wr_id = i;
        wr.opcode = WrOpcode::kRdmaRead;
        wr.sg_list = std::span(&s, 1);
        wr.remote_addr = source.mr.addr;
        wr.rkey = source.mr.rkey;
        ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
    }
    // Both requests reach b in one delivery, before it can answer.
    p.links.deliver(1, SIZE_MAX);
    p.b.on_readable(p.qb);
    ASSERT_EQ(p.links.end(1).sent.size(), 1u);
    ByteVec want = {
        std::byte{0x00}, std::byte{42},                                      // ULPDU length
        std::byte{0x41}, std::byte{0x47},                                    // L, v1; Terminate
        std::byte{0},    std::byte{0},    std::byte{0},    std::byte{0},     // reserved
        std::byte{0},    std::byte{0},    std::byte{0},    std::byte{2},     // QN 2
        std::byte{0},    std::byte{0},    std::byte{0},    std::byte{1},     // MSN 1
        std::byte{0},    std::byte{0},    std::byte{0},    std::byte{0},     // MO 0
        std::byte{0x02}, std::byte{0x07}, std::byte{0xC0}, std::byte{0x00},  // RDMAP 2/7, M D
        std::byte{0},    std::byte{46},                                      // segment length
        std::byte{0x41}, std::byte{0x41},                                    // the Read Request
        std::byte{0},    std::byte{0},    std::byte{0},    std::byte{0},
        std::byte{0},    std::byte{0},    std::byte{0},    std::byte{1},  // QN 1
        std::byte{0},    std::byte{0},    std::byte{0},    std::byte{2},  // MSN 2
        std::byte{0},    std::byte{0},    std::byte{0},    std::byte{0},  // MO 0
        std::byte{0},    std::byte{0},    std::byte{0},    std::byte{0},  // no pad (44); CRC off
    };
    EXPECT_EQ(p.links.end(1).sent[0], want);
    // a reads it: the first read takes the peer's reason, the second flushes.
    p.links.deliver(0, SIZE_MAX);
    p.a.on_readable(p.qa);
    auto e = p.a.poll_qp_event();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->type, QpEventType::kTerminateReceived);
    EXPECT_EQ(e->error, QpError::kFatal);  // the peer's TERMINATE, whatever its reason
    EXPECT_EQ(e->term.layer, 0);
    EXPECT_EQ(e->term.etype, 2);
    EXPECT_EQ(e->term.code, 7);
    EXPECT_TRUE(p.links.end(0).closed);
    auto w = Pair::wcs(p.a, p.acq);
    ASSERT_EQ(w.size(), 2u);
    EXPECT_EQ(w[0].wr_id, 0u);
    EXPECT_EQ(w[0].status, WcStatus::kRemOpErr);
    EXPECT_EQ(w[1].wr_id, 1u);
    EXPECT_EQ(w[1].status, WcStatus::kWrFlushErr);
    EXPECT_EQ(p.a.post_send(p.qa, SendWr{}).error(), VerbsError::kWrongState);
}

// RFC 5044 section 8: a bad CRC ends the stream with an MPA TERMINATE.
TEST(Terminate, BadCrcIsMpaTerminate) {
    Victim v(true);
    v.post_recv(64);
    ByteVec f = fpdu(untagged(0x41, 0x43, 0, 1, 0, kEight), true);
    f.back() ^= std::byte{1};
    TermSeen t = v.hit_raw(f);
    EXPECT_EQ(v.error, QpError::kFatal);
    EXPECT_EQ(t.layer, 2);
    EXPECT_EQ(t.etype, 0);
    EXPECT_EQ(t.code, 2);
    EXPECT_FALSE(t.m || t.d || t.r);
    ByteVec want_ulpdu = untagged(0x41, 0x47, 2, 1, 0,
                                  {std::byte{0x20}, std::byte{0x02}, std::byte{0}, std::byte{0}});
    EXPECT_EQ(v.p.links.end(1).sent.back(), fpdu(want_ulpdu, true));
    EXPECT_NE(v.dst.mem[0], std::byte{0x5A});  // nothing placed
}

TEST(Terminate, NothingIsReadAfterIt) {
    Victim v;
    v.post_recv(64);
    ByteVec bad = fpdu(untagged(0x41, 0x43, 0, 9, 0, kEight), false);
    ByteVec good = fpdu(untagged(0x41, 0x43, 0, 1, 0, kEight), false);
    bad.insert(bad.end(), good.begin(), good.end());
    v.hit_raw(bad);
    EXPECT_EQ(v.p.links.end(1).sent.size(), 1u);
    EXPECT_NE(v.dst.mem[0], std::byte{0x5A});
    EXPECT_EQ(v.p.links.end(1).rx.size(), 0u);  // drained and dropped
}

// An error found once our side of the link is closed (the core queues our FIN
// at once when the peer's FIN comes): the TERMINATE cannot go, and the event
// says so instead of claiming it was sent.
TEST(Terminate, AfterOurSideClosedIsReportedUnsent) {
    Victim v;
    v.post_recv(64);
    v.p.links.end(1).closed = true;
    v.p.links.inject(1, fpdu(untagged(0x41, 0x43, 0, 9, 0, kEight), false));  // MSN 9
    v.p.links.deliver(1, SIZE_MAX);
    v.p.b.on_readable(v.p.qb);
    EXPECT_TRUE(v.p.links.end(1).sent.empty());
    auto e = v.p.b.poll_qp_event();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->type, QpEventType::kTerminateUnsent);
    EXPECT_EQ(e->error, QpError::kFatal);
    EXPECT_EQ(e->term.layer, 1);  // DDP, untagged, MSN out of range
    EXPECT_EQ(e->term.etype, 2);
    EXPECT_EQ(e->term.code, 3);
    EXPECT_FALSE(v.p.b.poll_qp_event().has_value());
    EXPECT_EQ(v.p.b.query_qp(v.p.qb)->state, QpState::kClosing);
    v.p.b.on_link_down(v.p.qb, 0);
    e = v.p.b.poll_qp_event();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->type, QpEventType::kDisconnected);
    EXPECT_EQ(e->status, 0);
}

// A TERMINATE the link refuses for want of room waits, and is reported only
// once the link takes it; the link is closed once, gracefully, after it, and
// destroy_qp closes nothing again.
TEST(Terminate, ReportedWhenTheLinkTakesItAndClosedOnce) {
    Victim v;
    v.post_recv(64);
    v.p.links.end(1).send_cap = 0;
    v.p.links.inject(1, fpdu(untagged(0x41, 0x43, 0, 9, 0, kEight), false));
    v.p.links.deliver(1, SIZE_MAX);
    v.p.b.on_readable(v.p.qb);
    EXPECT_TRUE(v.p.links.end(1).sent.empty());
    EXPECT_FALSE(v.p.b.poll_qp_event().has_value());
    EXPECT_FALSE(v.p.links.end(1).closed);
    v.p.links.end(1).send_cap = 4096;
    v.p.b.on_writable(v.p.qb);
    ASSERT_EQ(v.p.links.end(1).sent.size(), 1u);
    TermSeen t = read_terminate(v.p.links.end(1).sent[0]);
    EXPECT_EQ(t.layer, 1);
    auto e = v.p.b.poll_qp_event();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->type, QpEventType::kTerminateSent);
    EXPECT_TRUE(v.p.links.end(1).closed);
    EXPECT_FALSE(v.p.links.end(1).abortive);
    v.p.links.end(1).closed = false;  // what a second close would set again
    ASSERT_TRUE(v.p.b.destroy_qp(v.p.qb).has_value());
    EXPECT_FALSE(v.p.links.end(1).closed);
}

// The stream ends inside an FPDU (its first 10 bytes, then a clean FIN): the
// peer's bytes were cut, which is not a clean end.
TEST(Flush, StreamEndingInsideAnFpduIsAProtocolError) {
    Victim v;
    v.post_recv(64);
    ByteVec f = fpdu(untagged(0x41, 0x43, 0, 1, 0, kEight), false);
    f.resize(10);
    v.p.links.inject(1, f);
    v.p.links.deliver(1, SIZE_MAX);
    v.p.b.on_readable(v.p.qb);
    EXPECT_FALSE(v.p.b.poll_qp_event().has_value());
    v.p.b.on_link_down(v.p.qb, 0);
    auto e = v.p.b.poll_qp_event();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->type, QpEventType::kDisconnected);
    EXPECT_EQ(e->status, -EPROTO);
    EXPECT_EQ(e->error, QpError::kFatal);
    EXPECT_TRUE(v.p.links.end(1).sent.empty());  // no TERMINATE after the peer's FIN
}

// Between FPDUs a clean FIN stays a clean end.
TEST(Flush, StreamEndingBetweenFpdusIsClean) {
    Victim v;
    v.post_recv(64);
    v.p.links.inject(1, fpdu(untagged(0x41, 0x43, 0, 1, 0, kEight), false));
    v.p.links.deliver(1, SIZE_MAX);
    v.p.b.on_readable(v.p.qb);
    v.p.b.on_link_down(v.p.qb, 0);
    auto e = v.p.b.poll_qp_event();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->type, QpEventType::kDisconnected);
    EXPECT_EQ(e->status, 0);
    EXPECT_EQ(e->error, QpError::kNone);
}

// A connection that ends otherwise than by a close is an error of its QP: a
// retransmission or keepalive timeout, or the address gone. Not the peer's reset:
// siw and irdma raise no QP event for one (the reset is the connection's end).
TEST(Flush, ALostConnectionIsFatalAResetIsNot) {
    for (const int status : {-ETIMEDOUT, -ECONNABORTED, -ECONNRESET, 0}) {
        Pair p;
        p.a.on_link_down(p.qa, status);
        auto e = p.a.poll_qp_event();
        ASSERT_TRUE(e.has_value());
        EXPECT_EQ(e->type, QpEventType::kDisconnected);
        EXPECT_EQ(e->status, status);
        const bool lost = status == -ETIMEDOUT || status == -ECONNABORTED;
        EXPECT_EQ(e->error, lost ? QpError::kFatal : QpError::kNone)
            << status << ": " << to_string(e->error);
    }
}

TEST(Flush, LinkDownFlushesEverythingAndReports) {
    Pair p;
    p.links.end(0).send_cap = 0;  // nothing leaves
    Buf src = Pair::buf(p.a, 100, kAccessLocalWrite);
    Sge s = src.all();
    SendWr wr;
    wr.sg_list = std::span(&s, 1);
    for (std::uint64_t i = 0; i < 3; ++i) {
        wr.wr_id = i;
        ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
    }
    ASSERT_TRUE(p.a.post_recv(p.qa, {9, std::span(&s, 1)}).has_value());
    p.a.on_link_down(p.qa, -104);
    auto e = p.a.poll_qp_event();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->type, QpEventType::kDisconnected);
    EXPECT_EQ(e->status, -104);
    auto w = Pair::wcs(p.a, p.acq);
    ASSERT_EQ(w.size(), 4u);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(w[i].wr_id, i);
        EXPECT_EQ(w[i].status, WcStatus::kWrFlushErr);
        EXPECT_EQ(w[i].opcode, WcOpcode::kSend);
    }
    EXPECT_EQ(w[3].opcode, WcOpcode::kRecv);
    EXPECT_EQ(p.a.query_qp(p.qa)->state, QpState::kError);
    EXPECT_EQ(p.a.post_recv(p.qa, {9, std::span(&s, 1)}).error(), VerbsError::kWrongState);
    EXPECT_TRUE(p.links.end(0).sent.empty());
}

TEST(Misuse, HandlesAndArgumentsAreChecked) {
    Pair p;
    Buf ro = Pair::buf(p.a, 100, 0);
    Buf rw = Pair::buf(p.a, 100, kAccessLocalWrite);
    SendWr wr;
    Sge s = ro.sge(50, 51);  // one byte past the region
    wr.sg_list = std::span(&s, 1);
    EXPECT_EQ(p.a.post_send(p.qa, wr).error(), VerbsError::kLocalProtection);
    s = ro.sge(0, 10);
    wr.opcode = WrOpcode::kRdmaRead;  // a sink without local write
    EXPECT_EQ(p.a.post_send(p.qa, wr).error(), VerbsError::kLocalProtection);
    EXPECT_EQ(p.a.post_recv(p.qa, {1, std::span(&s, 1)}).error(), VerbsError::kLocalProtection);
    Sge five[5] = {rw.all(), rw.all(), rw.all(), rw.all(), rw.all()};
    wr.opcode = WrOpcode::kSend;
    wr.sg_list = five;
    EXPECT_EQ(p.a.post_send(p.qa, wr).error(), VerbsError::kTooManySge);
    // A deregistered region's key is refused.
    Sge g = rw.all();
    ASSERT_TRUE(p.a.dereg_mr(rw.mr.handle).has_value());
    EXPECT_EQ(p.a.dereg_mr(rw.mr.handle).error(), VerbsError::kStaleHandle);
    EXPECT_EQ(p.a.post_recv(p.qa, {1, std::span(&g, 1)}).error(), VerbsError::kLocalProtection);
    EXPECT_EQ(p.a.reg_mr({}, 0).error(), VerbsError::kInvalidArgument);
    // A region of another protection domain is no local key of this QP.
    Buf other = Pair::buf(p.a, 100, kAccessLocalWrite, 0, 5);
    Sge o = other.all();
    wr.opcode = WrOpcode::kSend;
    wr.sg_list = std::span(&o, 1);
    EXPECT_EQ(p.a.post_send(p.qa, wr).error(), VerbsError::kLocalProtection);
    EXPECT_EQ(p.a.post_recv(p.qa, {1, std::span(&o, 1)}).error(), VerbsError::kLocalProtection);
    // Handles.
    EXPECT_EQ(p.a.post_send(QpHandle{}, SendWr{}).error(), VerbsError::kInvalidHandle);
    EXPECT_EQ(p.a.destroy_cq(p.acq).error(), VerbsError::kWrongState);  // in use
    ASSERT_TRUE(p.a.destroy_qp(p.qa).has_value());
    EXPECT_TRUE(p.links.end(0).closed);
    EXPECT_EQ(p.a.post_send(p.qa, SendWr{}).error(), VerbsError::kStaleHandle);
    EXPECT_EQ(p.a.query_qp(p.qa).error(), VerbsError::kStaleHandle);
    EXPECT_EQ(p.a.destroy_qp(p.qa).error(), VerbsError::kStaleHandle);
    ASSERT_TRUE(p.a.destroy_cq(p.acq).has_value());
    EXPECT_EQ(p.a.destroy_cq(p.acq).error(), VerbsError::kStaleHandle);
    WorkCompletion out[1];
    EXPECT_EQ(p.a.poll_cq(p.acq, out), 0u);
}

TEST(Misuse, QueuesAreBounded) {
    PairOptions o;
    o.max_send_wr = 2;
    o.max_recv_wr = 1;
    Pair p(o);
    p.links.end(0).send_cap = 0;
    Buf b = Pair::buf(p.a, 10, kAccessLocalWrite);
    Sge s = b.all();
    SendWr wr;
    wr.sg_list = std::span(&s, 1);
    ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
    ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
    EXPECT_EQ(p.a.post_send(p.qa, wr).error(), VerbsError::kQueueFull);
    ASSERT_TRUE(p.a.post_recv(p.qa, {1, std::span(&s, 1)}).has_value());
    EXPECT_EQ(p.a.post_recv(p.qa, {2, std::span(&s, 1)}).error(), VerbsError::kQueueFull);
    EXPECT_EQ(p.a.query_qp(p.qa)->send_queued, 2u);
    // Room again once the link takes them.
    p.links.end(0).send_cap = 1 << 20;
    p.a.on_writable(p.qa);
    EXPECT_EQ(p.a.query_qp(p.qa)->send_queued, 0u);
    EXPECT_TRUE(p.a.post_send(p.qa, wr).has_value());
}

}  // namespace
}  // namespace iwcm::rdma::test
