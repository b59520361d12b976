// The engine over an in-memory link pair: messages of every size end to end,
// segmentation, the ORD stall, completions. Errors: error_test.cpp.
#include "fixture.hpp"

namespace iwcm::rdma::test {
namespace {

struct SendCase {
    std::size_t size;
    bool crc;
    std::size_t ring;
    std::size_t chunk;
};

class SendRecv : public ::testing::TestWithParam<SendCase> {};

// Each message arrives whole and exactly where the receive points; it went
// out as ceil(size / room) FPDUs, each at most max_fpdu and one record.
TEST_P(SendRecv, PlacesEveryByteAndCutsIntoFpdus) {
    const SendCase c = GetParam();
    PairOptions o;
    o.crc = c.crc;
    o.ring = c.ring;
    Pair p(o);
    Buf src = Pair::buf(p.a, c.size, 0, 3);
    Buf dst = Pair::buf(p.b, c.size + 16, kAccessLocalWrite, 9);
    ByteVec before = dst.mem;
    Sge rs = dst.sge(8, c.size);
    ASSERT_TRUE(p.b.post_recv(p.qb, {77, std::span(&rs, 1)}).has_value());
    Sge ss = src.all();
    SendWr wr;
    wr.wr_id = 5;
    wr.sg_list = std::span(&ss, 1);
    ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
    p.pump(c.chunk);
    auto rw = Pair::wcs(p.b, p.bcq);
    ASSERT_EQ(rw.size(), 1u);
    EXPECT_EQ(rw[0].wr_id, 77u);
    EXPECT_EQ(rw[0].status, WcStatus::kSuccess);
    EXPECT_EQ(rw[0].opcode, WcOpcode::kRecv);
    EXPECT_EQ(rw[0].byte_len, c.size);
    EXPECT_FALSE(rw[0].solicited);
    EXPECT_TRUE(std::equal(src.mem.begin(), src.mem.end(), dst.mem.begin() + 8));
    EXPECT_TRUE(std::equal(before.begin(), before.begin() + 8, dst.mem.begin()));
    EXPECT_TRUE(std::equal(before.end() - 8, before.end(), dst.mem.end() - 8));
    auto sw = Pair::wcs(p.a, p.acq);
    ASSERT_EQ(sw.size(), 1u);
    EXPECT_EQ(sw[0].wr_id, 5u);
    EXPECT_EQ(sw[0].opcode, WcOpcode::kSend);
    EXPECT_EQ(sw[0].status, WcStatus::kSuccess);
    // Segmentation: ULPDU room = 1460 - 2 - 4 rounded down to 4, minus 2
    // (pad), minus the 18-byte untagged header.
    std::size_t room = wire::max_ulpdu_for_fpdu(1460) - 18;
    std::size_t want = std::max<std::size_t>(1, (c.size + room - 1) / room);
    const auto& sent = p.links.end(0).sent;
    ASSERT_EQ(sent.size(), want);
    std::uint32_t mo = 0;
    for (std::size_t i = 0; i < sent.size(); ++i) {
        EXPECT_LE(sent[i].size(), 1460u);
        EXPECT_EQ(sent[i][2], std::byte(i + 1 == sent.size() ? 0x41 : 0x01));
        EXPECT_EQ(get32(sent[i], 2 + 10), 1u);  // MSN 1 for every segment
        EXPECT_EQ(get32(sent[i], 2 + 14), mo);  // MO
        mo += get16(sent[i], 0) - 18;
    }
}

INSTANTIATE_TEST_SUITE_P(Sizes, SendRecv,
                         ::testing::Values(SendCase{1, false, 256 * 1024, SIZE_MAX},
                                           SendCase{4096, true, 256 * 1024, 1000},
                                           SendCase{65536, false, 10007, 777},
                                           SendCase{65536, true, 4099, 3},
                                           SendCase{1 << 20, true, 65537, 5000},
                                           SendCase{1 << 20, false, 256 * 1024, SIZE_MAX}));

TEST(Engine, WritePlacesAtTheTaggedOffset) {
    Pair p;
    Buf src = Pair::buf(p.a, 10000, 0, 1);
    Buf dst = Pair::buf(p.b, 20000, kAccessRemoteWrite, 2);
    ByteVec before = dst.mem;
    Sge ss = src.all();
    SendWr wr;
    wr.wr_id = 9;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.sg_list = std::span(&ss, 1);
    wr.remote_addr = dst.mr.addr + 100;
    wr.rkey = dst.mr.rkey;
    ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
    p.pump(1200);
    EXPECT_TRUE(std::equal(src.mem.begin(), src.mem.end(), dst.mem.begin() + 100));
    EXPECT_TRUE(std::equal(before.begin(), before.begin() + 100, dst.mem.begin()));
    EXPECT_TRUE(std::equal(before.begin() + 10100, before.end(), dst.mem.begin() + 10100));
    auto sw = Pair::wcs(p.a, p.acq);
    ASSERT_EQ(sw.size(), 1u);
    EXPECT_EQ(sw[0].opcode, WcOpcode::kRdmaWrite);
    EXPECT_EQ(sw[0].status, WcStatus::kSuccess);
    EXPECT_TRUE(Pair::wcs(p.b, p.bcq).empty());  // a Write completes nothing at the target
    // Tagged segments: T|L only on the last, TO advancing.
    const auto& sent = p.links.end(0).sent;
    ASSERT_GT(sent.size(), 1u);
    EXPECT_EQ(sent.back()[2], std::byte{0xC1});
    EXPECT_EQ(sent.front()[2], std::byte{0x81});
    EXPECT_EQ(get32(sent[1], 4), dst.mr.rkey);
}

TEST(Engine, ReadFetchesTheRemoteBytes) {
    PairOptions o;
    o.crc = true;
    Pair p(o);
    Buf sink = Pair::buf(p.a, 70000, kAccessLocalWrite, 1);
    Buf source = Pair::buf(p.b, 70000, kAccessRemoteRead, 2);
    Sge s = sink.sge(0, 65000);
    SendWr wr;
    wr.wr_id = 11;
    wr.opcode = WrOpcode::kRdmaRead;
    wr.sg_list = std::span(&s, 1);
    wr.remote_addr = source.mr.addr + 5;
    wr.rkey = source.mr.rkey;
    ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
    EXPECT_EQ(p.a.query_qp(p.qa)->reads_outstanding, 1u);
    p.pump(999);
    EXPECT_TRUE(std::equal(sink.mem.begin(), sink.mem.begin() + 65000, source.mem.begin() + 5));
    auto sw = Pair::wcs(p.a, p.acq);
    ASSERT_EQ(sw.size(), 1u);
    EXPECT_EQ(sw[0].wr_id, 11u);
    EXPECT_EQ(sw[0].opcode, WcOpcode::kRdmaRead);
    EXPECT_EQ(sw[0].status, WcStatus::kSuccess);
    EXPECT_EQ(sw[0].byte_len, 65000u);
    EXPECT_EQ(p.a.query_qp(p.qa)->reads_outstanding, 0u);
    // The request: 46-byte ULPDU on queue 1 naming both buffers.
    const ByteVec& rr = p.links.end(0).sent.at(0);
    EXPECT_EQ(get16(rr, 0), 46u);
    EXPECT_EQ(get32(rr, 2 + 6), 1u);
    EXPECT_EQ(get32(rr, 2 + 18), sink.mr.lkey);
    EXPECT_EQ(get32(rr, 2 + 30), 65000u);
    EXPECT_EQ(get32(rr, 2 + 34), source.mr.rkey);
    EXPECT_GT(p.links.end(1).sent.size(), 40u);  // the response in many FPDUs
}

TEST(Engine, SolicitedEventFlagReachesTheReceiver) {
    Pair p;
    Buf src = Pair::buf(p.a, 64, 0);
    Buf dst = Pair::buf(p.b, 128, kAccessLocalWrite);
    for (std::uint64_t id : {1, 2}) {
        Sge rs = dst.sge(id * 64 - 64, 64);
        ASSERT_TRUE(p.b.post_recv(p.qb, {id, std::span(&rs, 1)}).has_value());
    }
    Sge ss = src.all();
    SendWr wr;
    wr.sg_list = std::span(&ss, 1);
    wr.solicited = true;
    ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
    wr.solicited = false;
    ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
    p.pump();
    auto rw = Pair::wcs(p.b, p.bcq);
    ASSERT_EQ(rw.size(), 2u);
    EXPECT_EQ(rw[0].wr_id, 1u);
    EXPECT_TRUE(rw[0].solicited);
    EXPECT_EQ(rw[1].wr_id, 2u);
    EXPECT_FALSE(rw[1].solicited);
    EXPECT_EQ(p.links.end(0).sent[0][3], std::byte{0x45});  // RDMAP opcode 5
    EXPECT_EQ(p.links.end(0).sent[1][3], std::byte{0x43});
    EXPECT_EQ(get32(p.links.end(0).sent[1], 2 + 10), 2u);  // the second message's MSN
}

// ORD 1: the second READ's request waits until the first's response is
// placed, the third's until the second's.
TEST(Engine, OrdStallsTheSendQueueAtARead) {
    PairOptions o;
    o.ord_a = 1;
    Pair p(o);
    Buf sink = Pair::buf(p.a, 3 * 4000, kAccessLocalWrite, 1);
    Buf source = Pair::buf(p.b, 3 * 4000, kAccessRemoteRead, 2);
    for (std::uint64_t i = 0; i < 3; ++i) {
        Sge s = sink.sge(i * 4000, 4000);
        SendWr wr;
        wr.wr_id = i;
        wr.opcode = WrOpcode::kRdmaRead;
        wr.sg_list = std::span(&s, 1);
        wr.remote_addr = source.mr.addr + i * 4000;
        wr.rkey = source.mr.rkey;
        ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
    }
    auto requests = [&] {
        std::size_t n = 0;
        for (const ByteVec& r : p.links.end(0).sent) n += r[3] == std::byte{0x41};
        return n;
    };
    EXPECT_EQ(requests(), 1u);
    std::size_t completed = 0;
    for (int round = 0; round < 10000 && completed < 3; ++round) {
        p.links.deliver(0, 500);
        p.links.deliver(1, 500);
        p.b.on_readable(p.qb);
        p.a.on_readable(p.qa);
        completed += Pair::wcs(p.a, p.acq).size();
        // Never more than one request on the link ahead of the completions.
        ASSERT_LE(requests(), completed + 1);
    }
    EXPECT_EQ(completed, 3u);
    EXPECT_EQ(requests(), 3u);
    EXPECT_TRUE(sink.mem == source.mem);
}

// A record the link refuses is built again later; the message continues
// where it stopped once the link reports room.
TEST(Engine, FullLinkResumesOnWritable) {
    Pair p;
    p.links.end(0).send_cap = 3000;
    Buf src = Pair::buf(p.a, 50000, 0, 4);
    Buf dst = Pair::buf(p.b, 50000, kAccessLocalWrite);
    Sge rs = dst.all();
    ASSERT_TRUE(p.b.post_recv(p.qb, {1, std::span(&rs, 1)}).has_value());
    Sge ss = src.all();
    SendWr wr;
    wr.sg_list = std::span(&ss, 1);
    ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
    EXPECT_EQ(p.links.end(0).sent.size(), 2u);  // two 1460-byte FPDUs fill 3000
    EXPECT_TRUE(Pair::wcs(p.a, p.acq).empty());
    p.pump(700);
    EXPECT_TRUE(src.mem == dst.mem);
    EXPECT_EQ(Pair::wcs(p.a, p.acq).size(), 1u);
    EXPECT_EQ(Pair::wcs(p.b, p.bcq).size(), 1u);
}

// The FPDU boundaries fall everywhere in the ring (its end cuts length
// fields, headers and payloads) and in the delivered chunks.
TEST(Engine, ReassemblesAcrossEveryRingPosition) {
    for (std::size_t ring = 1500; ring < 1540; ++ring) {
        PairOptions o;
        o.ring = ring;
        o.max_fpdu = 300;
        Pair p(o);
        Buf src = Pair::buf(p.a, 5000, 0, ring);
        Buf dst = Pair::buf(p.b, 5000, kAccessLocalWrite);
        for (std::uint64_t i = 0; i < 5; ++i) {
            Sge rs = dst.sge(i * 1000, 1000);
            ASSERT_TRUE(p.b.post_recv(p.qb, {i, std::span(&rs, 1)}).has_value());
            Sge ss = src.sge(i * 1000, 1000 - i);
            SendWr wr;
            wr.sg_list = std::span(&ss, 1);
            ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
        }
        p.pump(ring % 7 + 1);
        auto rw = Pair::wcs(p.b, p.bcq);
        ASSERT_EQ(rw.size(), 5u) << "ring " << ring;
        for (std::size_t i = 0; i < 5; ++i) {
            EXPECT_EQ(rw[i].byte_len, 1000 - i);
            EXPECT_TRUE(std::equal(src.mem.begin() + i * 1000, src.mem.begin() + i * 1000 + 990,
                                   dst.mem.begin() + i * 1000))
                << "ring " << ring;
        }
    }
}

// A 37-byte ring after one 36-byte FPDU: the next FPDU's length field has
// one byte at the ring's end and one at its start.
TEST(Engine, LengthFieldStraddlingTheRingsEnd) {
    PairOptions o;
    o.ring = 37;
    Pair p(o);
    Buf src = Pair::buf(p.a, 20, 0, 6);
    Buf dst = Pair::buf(p.b, 20, kAccessLocalWrite);
    for (std::uint64_t i = 0; i < 2; ++i) {
        Sge rs = dst.sge(i * 10, 10);
        ASSERT_TRUE(p.b.post_recv(p.qb, {i, std::span(&rs, 1)}).has_value());
        Sge ss = src.sge(i * 10, 10);
        SendWr wr;
        wr.sg_list = std::span(&ss, 1);
        ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
    }
    ASSERT_EQ(p.links.end(0).sent.at(0).size(), 36u);
    p.pump();
    EXPECT_EQ(Pair::wcs(p.b, p.bcq).size(), 2u);
    EXPECT_EQ(src.mem, dst.mem);
}

TEST(Engine, GatherAndScatterOverSeveralSges) {
    Pair p;
    Buf src = Pair::buf(p.a, 300, 0, 5);
    Buf dst = Pair::buf(p.b, 300, kAccessLocalWrite);
    Sge rs[3] = {dst.sge(200, 100), dst.sge(0, 50), dst.sge(50, 150)};
    ASSERT_TRUE(p.b.post_recv(p.qb, {1, rs}).has_value());
    Sge ss[2] = {src.sge(100, 200), src.sge(0, 100)};
    SendWr wr;
    wr.sg_list = ss;
    ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
    p.pump(13);
    ByteVec sent(src.mem.begin() + 100, src.mem.end());
    sent.insert(sent.end(), src.mem.begin(), src.mem.begin() + 100);
    ByteVec got(dst.mem.begin() + 200, dst.mem.end());
    got.insert(got.end(), dst.mem.begin(), dst.mem.begin() + 200);
    EXPECT_EQ(got, sent);
}

// A Read into several SGEs: a Read Request per sink, each whole on the wire (queue 1,
// MSNs in turn, the sink SGE, its size, the source offset following on), as ORD allows;
// the bytes land in the sinks in order and the Read completes once, with the total.
class ReadSinks : public ::testing::TestWithParam<std::uint16_t> {};

TEST_P(ReadSinks, OneRequestPerSinkAndOneCompletion) {
    PairOptions o;
    o.ord_a = GetParam();
    o.crc = true;
    Pair p(o);
    Buf sink = Pair::buf(p.a, 9000, kAccessLocalWrite, 1);
    Buf source = Pair::buf(p.b, 9000, kAccessRemoteRead, 2);
    const ByteVec before = sink.mem;
    // Out of order in memory, one of no bytes, one over several Read Response FPDUs.
    Sge s[4] = {sink.sge(6000, 100), sink.sge(10, 0), sink.sge(100, 5000), sink.sge(7000, 7)};
    SendWr wr;
    wr.wr_id = 31;
    wr.opcode = WrOpcode::kRdmaRead;
    wr.sg_list = s;
    wr.remote_addr = source.mr.addr + 3;
    wr.rkey = source.mr.rkey;
    ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
    EXPECT_EQ(p.a.query_qp(p.qa)->reads_outstanding, std::min<std::uint32_t>(4, GetParam()));
    std::size_t most = 0;
    std::vector<WorkCompletion> done;
    for (int round = 0; round < 10000 && done.empty(); ++round) {
        p.links.deliver(0, 700);
        p.links.deliver(1, 700);
        p.b.on_readable(p.qb);
        p.a.on_readable(p.qa);
        most = std::max<std::size_t>(most, p.a.query_qp(p.qa)->reads_outstanding);
        done = Pair::wcs(p.a, p.acq);
    }
    EXPECT_EQ(most, std::min<std::size_t>(4, GetParam()));
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].wr_id, 31u);
    EXPECT_EQ(done[0].opcode, WcOpcode::kRdmaRead);
    EXPECT_EQ(done[0].status, WcStatus::kSuccess);
    EXPECT_EQ(done[0].byte_len, 5107u);
    EXPECT_EQ(p.a.query_qp(p.qa)->reads_outstanding, 0u);
    EXPECT_EQ(p.a.query_qp(p.qa)->send_queued, 0u);
    ByteVec expect = before;
    std::uint64_t from = 3;
    for (const Sge& g : s) {
        const std::size_t at = g.addr - sink.mr.addr;
        std::copy_n(source.mem.begin() + static_cast<std::ptrdiff_t>(from), g.length,
                    expect.begin() + static_cast<std::ptrdiff_t>(at));
        from += g.length;
    }
    EXPECT_EQ(sink.mem, expect);
    // The requests, whole: what a's link carried, byte for byte.
    std::vector<ByteVec> requests;
    for (const ByteVec& r : p.links.end(0).sent) {
        if (r[3] == std::byte{0x41}) requests.push_back(r);
    }
    ASSERT_EQ(requests.size(), 4u);
    from = 3;
    for (std::uint32_t i = 0; i < 4; ++i) {
        ByteVec want = fpdu(untagged(0x41, 0x41, 1, i + 1, 0,
                                     read_request(s[i].lkey, s[i].addr, s[i].length, source.mr.rkey,
                                                  source.mr.addr + from)),
                            true);
        EXPECT_EQ(requests[i], want) << "request " << i;
        from += s[i].length;
    }
}

INSTANTIATE_TEST_SUITE_P(Ord, ReadSinks, ::testing::Values(1, 2, 4));

// The peer's TERMINATE while a Read of several sinks is half asked: the Read completes
// once (with the peer's reason), nothing twice, and no ORD slot is left taken.
TEST(Engine, ReadOfSeveralSinksEndsOnceWhenThePeerTerminates) {
    PairOptions o;
    o.ord_a = 1;
    Pair p(o);
    Buf sink = Pair::buf(p.a, 300, kAccessLocalWrite, 1);
    Buf source = Pair::buf(p.b, 300, kAccessRemoteRead, 2);
    Sge s[3] = {sink.sge(0, 100), sink.sge(100, 100), sink.sge(200, 100)};
    SendWr wr;
    wr.wr_id = 8;
    wr.opcode = WrOpcode::kRdmaRead;
    wr.sg_list = s;
    wr.remote_addr = source.mr.addr;
    wr.rkey = source.mr.rkey + 1;  // no such STag at b: b answers with a TERMINATE
    ASSERT_TRUE(p.a.post_send(p.qa, wr).has_value());
    p.pump();
    auto wc = Pair::wcs(p.a, p.acq);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].wr_id, 8u);
    EXPECT_EQ(wc[0].status, WcStatus::kRemAccessErr);
    EXPECT_EQ(p.a.query_qp(p.qa)->reads_outstanding, 0u);
    EXPECT_EQ(p.a.query_qp(p.qa)->send_queued, 0u);
}

// ibv_poll_cq(3): an RC send queue completes in post order. A Write and a local
// invalidation posted after a Read end before the Read's response comes (the link takes
// the Write whole; the invalidation needs no peer); their completions wait for the Read's.
TEST(Engine, SendQueueCompletesInPostOrder) {
    Pair p;
    Buf sink = Pair::buf(p.a, 60000, kAccessLocalWrite, 1);
    Buf source = Pair::buf(p.b, 60000, kAccessRemoteRead, 2);
    Buf src = Pair::buf(p.a, 100, 0, 3);
    Buf target = Pair::buf(p.b, 100, kAccessRemoteWrite, 4);
    Buf ours = Pair::buf(p.a, 8, kAccessLocalWrite | kAccessRemoteWrite, 5);
    Sge rs = sink.all();
    SendWr read;
    read.wr_id = 1;
    read.opcode = WrOpcode::kRdmaRead;
    read.sg_list = std::span(&rs, 1);
    read.remote_addr = source.mr.addr;
    read.rkey = source.mr.rkey;
    Sge ws = src.all();
    SendWr write;
    write.wr_id = 2;
    write.opcode = WrOpcode::kRdmaWrite;
    write.sg_list = std::span(&ws, 1);
    write.remote_addr = target.mr.addr;
    write.rkey = target.mr.rkey;
    SendWr inv;
    inv.wr_id = 3;
    inv.opcode = WrOpcode::kLocalInvalidate;
    inv.invalidate_rkey = ours.mr.rkey;
    for (const SendWr* wr : {&read, &write, &inv}) {
        ASSERT_TRUE(p.a.post_send(p.qa, *wr).has_value());
    }
    EXPECT_TRUE(Pair::wcs(p.a, p.acq).empty()) << "Write and invalidation done, held";
    std::vector<WorkCompletion> got;
    for (int round = 0; round < 10000 && got.size() < 3; ++round) {
        p.links.deliver(0, 900);
        p.links.deliver(1, 900);
        p.b.on_readable(p.qb);
        p.a.on_readable(p.qa);
        for (const WorkCompletion& wc : Pair::wcs(p.a, p.acq)) got.push_back(wc);
    }
    ASSERT_EQ(got.size(), 3u);
    for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].wr_id, i + 1);
        EXPECT_EQ(got[i].status, WcStatus::kSuccess);
    }
    EXPECT_EQ(got[0].opcode, WcOpcode::kRdmaRead);
    EXPECT_EQ(got[1].opcode, WcOpcode::kRdmaWrite);
    EXPECT_EQ(got[2].opcode, WcOpcode::kLocalInvalidate);
    EXPECT_EQ(sink.mem, source.mem);
}

// A flush gives the send queue's requests in post order too, across the queues they
// were in (a Read awaiting its response, a Write done, a Read and a Write not yet sent).
TEST(Engine, FlushCompletesTheSendQueueInPostOrder) {
    PairOptions o;
    o.ord_a = 1;
    Pair p(o);
    Buf sink = Pair::buf(p.a, 64, kAccessLocalWrite, 1);
    Buf source = Pair::buf(p.b, 64, kAccessRemoteRead, 2);
    Buf src = Pair::buf(p.a, 16, 0, 3);
    Sge rs = sink.all();
    Sge ws = src.all();
    std::vector<SendWr> wrs(4);
    for (std::uint64_t i = 0; i < wrs.size(); ++i) {
        wrs[i].wr_id = i + 1;
        wrs[i].opcode = i % 2 == 0 ? WrOpcode::kRdmaRead : WrOpcode::kRdmaWrite;
        wrs[i].sg_list = std::span(i % 2 == 0 ? &rs : &ws, 1);
        wrs[i].remote_addr = source.mr.addr;
        wrs[i].rkey = source.mr.rkey;  // the Write is refused by b, if it ever got there
        ASSERT_TRUE(p.a.post_send(p.qa, wrs[i]).has_value());
    }
    // Nothing moves: the first Read waits for its response (ORD 1), the Write went (the
    // link took it whole: done, held behind the Read), the rest wait in the send queue.
    EXPECT_TRUE(Pair::wcs(p.a, p.acq).empty());
    ASSERT_TRUE(p.a.destroy_qp(p.qa).has_value());
    auto got = Pair::wcs(p.a, p.acq);
    ASSERT_EQ(got.size(), 4u);
    for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].wr_id, i + 1) << i;
        EXPECT_EQ(got[i].status, i == 1 ? WcStatus::kSuccess : WcStatus::kWrFlushErr) << i;
    }
}

TEST(Engine, IdleQueuePairIsSmall) {
    // The record plus the Device's connection slot (16 bytes) per idle QP.
    EXPECT_LE(kQpStateBytes + 16, 256u);
    std::printf("sizeof(QpRecord) = %zu, WrEntry = %zu\n", kQpStateBytes, sizeof(WrEntry));
    // Work requests come from the shared slab, not the QP.
    Pair p;
    EXPECT_EQ(p.a.wr_slab_size(), 0u);
}

}  // namespace
}  // namespace iwcm::rdma::test
