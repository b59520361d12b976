// Device over two Cores on an in-memory wire, driven with a virtual clock:
// an rping-like exchange (Send of the client's buffer info, the server's
// Read of it, go-ahead Send, Send of the sink info, the server's Write,
// final Send), data verified, CRC on and off, then both sides close.
// Read first: examples/stream_pair.cpp (how two cores are driven).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <functional>
#include <tuple>
#include <utility>
#include <vector>

#include "iwcm/verbs.hpp"
#include "wire/ddp.hpp"
#include "wire/frame.hpp"

namespace iwcm::rdma::test {
namespace {

struct Side {
    explicit Side(Core& c) : core(c), dev(c) {}
    Core& core;
    Device dev;
    ConnHandle conn;
    QpHandle qp;
    CqHandle cq;
    bool up = false;
    int disconnected = 0;
    std::vector<WorkCompletion> wcs;
    std::vector<QpEvent> qp_events;
    // wcs.size() as each of qp_events was taken: the completions the CQ had given by then.
    std::vector<std::size_t> wcs_at_event;
};

struct Net {
    explicit Net(bool crc, std::uint16_t offload = 0, bool checksum_offload = false,
                 std::uint8_t b_rtr_types = rtr::kAll, std::uint8_t revision = 2,
                 bool peer_to_peer = true, Duration a_send_wait = Duration::zero())
        : a(config(0x0a, crc, offload, checksum_offload, rtr::kAll, revision, peer_to_peer,
                   a_send_wait)),
          b(config(0x0b, crc, offload, checksum_offload, b_rtr_types, revision, peer_to_peer)),
          sa(a),
          sb(b) {
        EXPECT_TRUE(a.add_address(ip_a).has_value());
        EXPECT_TRUE(b.add_address(ip_b).has_value());
        EXPECT_TRUE(b.listen({{ip_b, 4791}, 0}).has_value());
        ConnectParams p;
        p.local = {ip_a, 0};
        p.remote = {ip_b, 4791};
        p.remote_mac = b.config().mac;
        auto c = a.connect(now, p);
        EXPECT_TRUE(c.has_value());
        sa.conn = *c;
    }
    static CoreConfig config(std::uint8_t mac, bool crc, std::uint16_t offload,
                             bool checksum_offload, std::uint8_t rtr_types, std::uint8_t revision,
                             bool peer_to_peer, Duration send_wait = Duration::zero()) {
        CoreConfig c;
        c.mac = MacAddr{{0x02, 0, 0, 0, 0, mac}};
        c.mpa.rtr_types = rtr_types;
        c.mpa.revision = revision;
        c.mpa.peer_to_peer = peer_to_peer;
        c.mpa.initiator_send_wait = send_wait;
        c.mpa.crc = crc;
        c.checksum_offload = checksum_offload;
        c.stream.segment_offload = offload;
        return c;
    }

    // Moves frames and events until `done` holds or nothing moves (then time
    // runs to the next deadline); a bounded number of steps.
    template <class Done>
    bool run(Done done) {
        for (int step = 0; step < 200000; ++step) {
            if (done()) return true;
            if (step_once() > 0) continue;
            auto next = a.next_deadline(), nb = b.next_deadline();
            if (nb && (!next || *nb < *next)) next = nb;
            if (!next) return done();
            now = std::max(now, *next);
            a.on_timer(now);
            b.on_timer(now);
        }
        return false;
    }

    // One round at the current instant: each side's frames to the other, then the events
    // and completions. Returns how much moved.
    int step_once() {
        Side* sides[2] = {&sa, &sb};
        int moved = 0;
        for (int i = 0; i < 2; ++i) {
            if (in_parts) {
                moved += move_parts(sides[i]->core, sides[1 - i]->core);
                continue;
            }
            for (; auto f = sides[i]->core.poll_transmit(); ++moved) {
                longest = std::max(longest, f->size());
                if (i == 1 && drop_b_to_a && drop_b_to_a(f->size())) continue;
                if (on_wire && on_wire(i, *f)) continue;
                sides[1 - i]->core.receive(now, *f);
            }
        }
        for (Side* s : {&sa, &sb}) moved += events(*s);
        return moved;
    }

    // Frames in parts (Core::poll_transmit_parts / receive_parts): each payload re-cut into
    // pieces of at most `cut` bytes (0: as the sender's pieces are), `tamper` may change
    // the pieces' bytes on the way (they are copied first then).
    int move_parts(Core& from, Core& to) {
        int moved = 0;
        for (; auto t = from.poll_transmit_parts(); ++moved) {
            longest = std::max(longest, t->size());
            std::vector<std::span<const std::byte>> pieces;
            for (auto piece : t->payload) {
                for (std::size_t off = 0; off < piece.size();) {
                    const std::size_t n =
                        cut == 0 ? piece.size() : std::min(cut, piece.size() - off);
                    pieces.push_back(piece.subspan(off, n));
                    off += n;
                }
            }
            std::vector<std::byte> copy;
            if (tamper) {
                for (auto p : pieces) copy.insert(copy.end(), p.begin(), p.end());
                tamper(copy);
                std::size_t off = 0;
                for (auto& p : pieces) {
                    p = std::span<const std::byte>(copy).subspan(off, p.size());
                    off += p.size();
                }
            }
            multi_piece += pieces.size() > 1 ? 1 : 0;
            to.receive_parts(now, t->headers, pieces);
        }
        return moved;
    }

    int events(Side& s) {
        int moved = 0;
        while (auto e = s.core.poll_event()) {
            ++moved;
            if (s.dev.on_event(now, *e)) continue;
            if (e->type == EventType::kConnectRequest) {
                AcceptParams ap;
                ap.ird = ap.ord = 2;
                EXPECT_TRUE(s.core.accept(now, e->conn, ap).has_value());
            }
            if (e->type == EventType::kEstablished) {
                s.conn = e->conn;
                if (&s == &sa && defer_qp_a) continue;  // the test makes it later
                make_qp(s);
            }
            if (e->type == EventType::kDisconnected) ++s.disconnected;
        }
        WorkCompletion wc[16];
        for (std::size_t n; (n = s.dev.poll_cq(s.cq, wc)) > 0; moved += static_cast<int>(n)) {
            s.wcs.insert(s.wcs.end(), wc, wc + n);
        }
        while (auto q = s.dev.poll_qp_event()) {
            s.qp_events.push_back(*q);
            s.wcs_at_event.push_back(s.wcs.size());
        }
        return moved;
    }

    void make_qp(Side& s) {
        s.cq = *s.dev.create_cq(64);
        QpAttr attr;
        attr.send_cq = attr.recv_cq = s.cq;
        attr.max_sge = max_sge;
        auto qp = s.dev.create_qp(now, s.conn, attr);
        EXPECT_TRUE(qp.has_value());
        s.qp = *qp;
        s.up = true;
    }

    IpAddr ip_a = *IpAddr::parse("192.0.2.1");
    IpAddr ip_b = *IpAddr::parse("192.0.2.2");
    Instant now = kInstantZero;
    std::size_t longest = 0;  // the longest frame moved
    // Frames from b to a (by length) this returns true for are lost.
    std::function<bool(std::size_t)> drop_b_to_a;
    // Sees every frame (from 0: a, 1: b) and drops those it returns true for.
    std::function<bool(int, std::span<const std::byte>)> on_wire;
    bool in_parts = false;
    std::size_t cut = 0;
    std::function<void(std::vector<std::byte>&)> tamper;
    std::size_t multi_piece = 0;  // frames handed over in more than one piece
    bool defer_qp_a = false;      // a's QP is not made at ESTABLISHED (make_qp(sa))
    std::uint32_t max_sge = 4;    // QpAttr::max_sge of the QPs make_qp makes
    Core a, b;
    Side sa, sb;
};

// rping's info message: address, rkey, size in network byte order.
std::vector<std::byte> info(std::uint64_t addr, std::uint32_t rkey, std::uint32_t size) {
    std::vector<std::byte> v(16);
    for (int i = 0; i < 8; ++i) v[i] = std::byte(addr >> (56 - 8 * i));
    for (int i = 0; i < 4; ++i) v[8 + i] = std::byte(rkey >> (24 - 8 * i));
    for (int i = 0; i < 4; ++i) v[12 + i] = std::byte(size >> (24 - 8 * i));
    return v;
}

std::uint64_t be(const std::vector<std::byte>& v, std::size_t off, int n) {
    std::uint64_t x = 0;
    for (int i = 0; i < n; ++i) x = x << 8 | static_cast<std::uint8_t>(v[off + i]);
    return x;
}

bool has(const Side& s, WcOpcode op, std::size_t n) {
    std::size_t k = 0;
    for (const auto& w : s.wcs) k += w.opcode == op && w.status == WcStatus::kSuccess;
    return k >= n;
}

// CRC off or on, and segments of one MSS or (segment offload) many FPDUs.
class DevicePair : public ::testing::TestWithParam<std::tuple<bool, std::uint16_t>> {};

TEST_P(DevicePair, RpingLikeExchangeMovesAndVerifiesTheData) {
    constexpr std::size_t kSize = 64 * 1024;
    const bool crc = std::get<0>(GetParam());
    Net n(crc, std::get<1>(GetParam()));
    ASSERT_TRUE(n.run([&] { return n.sa.up && n.sb.up; }));
    EXPECT_EQ(n.sa.dev.query_qp(n.sa.qp)->crc, crc);
    EXPECT_LE(n.sa.dev.query_qp(n.sa.qp)->max_fpdu, 1460u);
    Device& ca = n.sa.dev;  // client
    Device& sv = n.sb.dev;  // server
    std::vector<std::byte> start(kSize), sink(kSize, std::byte{0}), srv(kSize, std::byte{0});
    for (std::size_t i = 0; i < kSize; ++i) start[i] = std::byte('a' + i % 26);
    std::vector<std::byte> c_send(16), c_recv(16), s_send(16), s_recv(16);
    auto mr_start = *ca.reg_mr(start, kAccessRemoteRead);
    auto mr_sink = *ca.reg_mr(sink, kAccessRemoteWrite | kAccessLocalWrite);
    auto mr_cs = *ca.reg_mr(c_send, 0);
    auto mr_cr = *ca.reg_mr(c_recv, kAccessLocalWrite);
    auto mr_srv = *sv.reg_mr(srv, kAccessLocalWrite);
    auto mr_ss = *sv.reg_mr(s_send, 0);
    auto mr_sr = *sv.reg_mr(s_recv, kAccessLocalWrite);
    Sge cs{mr_cs.addr, 16, mr_cs.lkey}, cr{mr_cr.addr, 16, mr_cr.lkey};
    Sge ss{mr_ss.addr, 16, mr_ss.lkey}, sr{mr_sr.addr, 16, mr_sr.lkey};
    auto recv = [&](Device& d, QpHandle qp, Sge& s) {
        ASSERT_TRUE(d.post_recv(n.now, qp, {1, std::span(&s, 1)}).has_value());
    };
    auto send = [&](Device& d, QpHandle qp, Sge& s) {
        SendWr wr;
        wr.sg_list = std::span(&s, 1);
        ASSERT_TRUE(d.post_send(n.now, qp, wr).has_value());
    };
    recv(sv, n.sb.qp, sr);
    recv(ca, n.sa.qp, cr);
    // 1. The client sends its start buffer's address, rkey and size.
    auto put = [&](const std::vector<std::byte>& v) {
        std::copy(v.begin(), v.end(), c_send.begin());
    };
    put(info(mr_start.addr, mr_start.rkey, kSize));
    send(ca, n.sa.qp, cs);
    ASSERT_TRUE(n.run([&] { return has(n.sb, WcOpcode::kRecv, 1); }));
    // 2. The server reads it. Its Read and Write go to the buffer the last info named.
    const Sge srv_sge{mr_srv.addr, kSize, mr_srv.lkey};
    auto to_named = [&](WrOpcode opcode) {
        SendWr wr;
        wr.opcode = opcode;
        wr.sg_list = std::span(&srv_sge, 1);
        wr.remote_addr = be(s_recv, 0, 8);
        wr.rkey = static_cast<std::uint32_t>(be(s_recv, 8, 4));
        return wr;
    };
    ASSERT_EQ(be(s_recv, 12, 4), kSize);
    ASSERT_TRUE(sv.post_send(n.now, n.sb.qp, to_named(WrOpcode::kRdmaRead)).has_value());
    ASSERT_TRUE(n.run([&] { return has(n.sb, WcOpcode::kRdmaRead, 1); }));
    EXPECT_TRUE(srv == start);
    // 3. Go-ahead; 4. the client sends its sink's info.
    recv(sv, n.sb.qp, sr);
    send(sv, n.sb.qp, ss);
    ASSERT_TRUE(n.run([&] { return has(n.sa, WcOpcode::kRecv, 1); }));
    recv(ca, n.sa.qp, cr);
    put(info(mr_sink.addr, mr_sink.rkey, kSize));
    send(ca, n.sa.qp, cs);
    ASSERT_TRUE(n.run([&] { return has(n.sb, WcOpcode::kRecv, 2); }));
    // 5. The server writes what it read into the client's sink; 6. final Send.
    ASSERT_TRUE(sv.post_send(n.now, n.sb.qp, to_named(WrOpcode::kRdmaWrite)).has_value());
    send(sv, n.sb.qp, ss);
    ASSERT_TRUE(n.run([&] { return has(n.sa, WcOpcode::kRecv, 2); }));
    EXPECT_TRUE(sink == start);
    // Nothing was lost or waited unread: the Write's and the Read Response's
    // FPDUs and the Sends (each with its receive posted) went from the
    // segments straight into memory, none through the receive buffer.
    EXPECT_EQ(ca.placement().direct, kSize + 2 * 16);
    EXPECT_EQ(ca.placement().placed, kSize + 2 * 16);
    EXPECT_EQ(sv.placement().direct, kSize + 2 * 16);
    EXPECT_EQ(sv.placement().placed, kSize + 2 * 16);
    auto info_a = n.a.stream_info(n.sa.conn);
    ASSERT_TRUE(info_a.has_value());
    EXPECT_GT(info_a->sunk, kSize);  // the FPDUs' headers and CRC too
    EXPECT_LT(info_a->copied_received, kSize / 2);
    // Offload joined FPDUs into segments longer than the MTU; else none is.
    if (std::get<1>(GetParam()) > 0) {
        EXPECT_GT(n.longest, 1514u);
    } else {
        EXPECT_LE(n.longest, 1514u);
    }
    EXPECT_TRUE(n.sa.qp_events.empty());
    EXPECT_TRUE(n.sb.qp_events.empty());
    // The client ends its QP: both sides see the end, nothing leaks.
    ASSERT_TRUE(ca.destroy_qp(n.now, n.sa.qp).has_value());
    ASSERT_TRUE(n.run([&] { return n.a.live_nodes() + n.b.live_nodes() == 0; }));
    ASSERT_EQ(n.sb.qp_events.size(), 1u);
    EXPECT_EQ(n.sb.qp_events[0].type, QpEventType::kDisconnected);
    EXPECT_EQ(sv.query_qp(n.sb.qp)->state, QpState::kError);
    // The client's QP was gone before its connection closed: the end is the
    // application's. The server's became its QP's kDisconnected.
    EXPECT_EQ(n.sa.disconnected, 1);
    EXPECT_EQ(n.sb.disconnected, 0);
}

INSTANTIATE_TEST_SUITE_P(Crc, DevicePair,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(std::uint16_t{0},
                                                              std::uint16_t{60000})));

// A Write whose segments arrive out of order after a loss: what arrives in
// order while nothing waits is placed from the segment, the rest goes
// through the receive buffer, and the sink ends up right either way.
TEST(DevicePlacement, WriteAfterALossFallsBackToTheBufferAndStaysRight) {
    constexpr std::size_t kSize = 256 * 1024;
    Net n(true);
    ASSERT_TRUE(n.run([&] { return n.sa.up && n.sb.up; }));
    std::vector<std::byte> src(kSize), sink(kSize, std::byte{0}), note(16), got(16);
    for (std::size_t i = 0; i < kSize; ++i) src[i] = std::byte(i * 7 + i / 251);
    auto mr_sink = *n.sa.dev.reg_mr(sink, kAccessRemoteWrite);
    auto mr_got = *n.sa.dev.reg_mr(got, kAccessLocalWrite);
    auto mr_src = *n.sb.dev.reg_mr(src, 0);
    auto mr_note = *n.sb.dev.reg_mr(note, 0);
    Sge g{mr_got.addr, 16, mr_got.lkey};
    ASSERT_TRUE(n.sa.dev.post_recv(n.now, n.sa.qp, {1, std::span(&g, 1)}).has_value());
    // Every 40th full-sized frame from the server is lost once.
    int full = 0;
    n.drop_b_to_a = [&](std::size_t len) { return len > 1000 && ++full % 40 == 0; };
    Sge w{mr_src.addr, kSize, mr_src.lkey};
    SendWr write;
    write.opcode = WrOpcode::kRdmaWrite;
    write.sg_list = std::span(&w, 1);
    write.remote_addr = mr_sink.addr;
    write.rkey = mr_sink.rkey;
    ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, write).has_value());
    Sge s{mr_note.addr, 16, mr_note.lkey};
    SendWr send;
    send.sg_list = std::span(&s, 1);
    ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, send).has_value());
    ASSERT_TRUE(n.run([&] { return has(n.sa, WcOpcode::kRecv, 1); }));
    EXPECT_GT(full, 40);
    EXPECT_TRUE(sink == src);
    const Device::Placement p = n.sa.dev.placement();
    EXPECT_EQ(p.placed, kSize + 16);
    EXPECT_GT(p.direct, 0u);
    EXPECT_LT(p.direct, kSize);  // the segments behind each hole came from the buffer
    EXPECT_TRUE(n.sa.qp_events.empty());
}

// A Read waits at the head of the send queue while ORD Reads are out; the
// Read Response that ends the one before it must let it go even when its
// FPDUs were placed from the segments (no kReadable follows them).
TEST(DevicePlacement, ReadResponseFreesTheReadWaitingForOrd) {
    constexpr std::size_t kSize = 16 * 1024;
    Net n(false);
    ASSERT_TRUE(n.run([&] { return n.sa.up && n.sb.up; }));
    ASSERT_EQ(n.sb.dev.query_qp(n.sb.qp)->ord, 1u);
    std::vector<std::byte> src(kSize, std::byte{5}), dst1(kSize), dst2(kSize);
    auto mr_src = *n.sa.dev.reg_mr(src, kAccessRemoteRead);
    auto mr1 = *n.sb.dev.reg_mr(dst1, kAccessLocalWrite);
    auto mr2 = *n.sb.dev.reg_mr(dst2, kAccessLocalWrite);
    Sge d1{mr1.addr, kSize, mr1.lkey}, d2{mr2.addr, kSize, mr2.lkey};
    for (Sge* d : {&d1, &d2}) {
        SendWr read;
        read.opcode = WrOpcode::kRdmaRead;
        read.sg_list = std::span(d, 1);
        read.remote_addr = mr_src.addr;
        read.rkey = mr_src.rkey;
        ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, read).has_value());
    }
    ASSERT_TRUE(n.run([&] { return has(n.sb, WcOpcode::kRdmaRead, 2); }));
    EXPECT_TRUE(dst1 == src);
    EXPECT_TRUE(dst2 == src);
    EXPECT_GT(n.sb.dev.placement().direct, 0u);
}

// Ours against ours with the READ RTR (the responder accepts only READ): the responder's
// CM answers it with the zero-length Read Response, which reaches the initiator before its
// application makes the QP and waits in the stream. Making the QP reads that answer (and
// no other byte of the hand-off: those wait for the first receive), so the RTR's ORD slot
// (ORD 1) is free at once; a Read posted before any receive goes out as MSN 2 of queue 1,
// which the responder's engine expects, and completes with the data.
TEST(DeviceRtr, ReadRtrAnsweredBeforeTheQpIsMadeThenTheFirstReadIsMsnTwo) {
    Net n(false, 0, false, rtr::kRead);
    n.defer_qp_a = true;
    // Until a acknowledged b's answer (the bytes b's stream took over unacknowledged).
    ASSERT_TRUE(n.run([&] {
        if (!n.sb.up || !n.sa.conn.valid()) return false;
        auto i = n.b.stream_info(n.sb.conn);
        return i && i->written > 0 && i->acked == i->written;
    }));
    ASSERT_FALSE(n.sa.up);
    auto info = n.a.stream_info(n.sa.conn);
    EXPECT_FALSE(info.has_value());  // not handed off yet: the answer waits in the CM's rx
    n.make_qp(n.sa);
    auto q = n.sa.dev.query_qp(n.sa.qp);
    ASSERT_TRUE(q.has_value());
    EXPECT_EQ(q->ord, 1u);
    EXPECT_EQ(q->reads_outstanding, 0u);  // the RTR's answer was taken
    EXPECT_EQ(q->state, QpState::kRts);
    std::vector<std::byte> src(64), dst(64);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = std::byte(i + 1);
    auto mr_dst = *n.sa.dev.reg_mr(dst, kAccessLocalWrite);
    auto mr_src = *n.sb.dev.reg_mr(src, kAccessRemoteRead);
    Sge d{mr_dst.addr, 64, mr_dst.lkey};
    SendWr read;
    read.wr_id = 77;
    read.opcode = WrOpcode::kRdmaRead;
    read.sg_list = std::span(&d, 1);
    read.remote_addr = mr_src.addr;
    read.rkey = mr_src.rkey;
    ASSERT_TRUE(n.sa.dev.post_send(n.now, n.sa.qp, read).has_value());
    ASSERT_TRUE(n.run([&] { return has(n.sa, WcOpcode::kRdmaRead, 1); }));
    EXPECT_TRUE(dst == src);
    EXPECT_EQ(n.sa.wcs.size(), 1u);  // the Read only: nothing for the RTR
    EXPECT_TRUE(n.sa.qp_events.empty());
    EXPECT_TRUE(n.sb.qp_events.empty());
}

// RFC 5044 section 7.1: without peer-to-peer mode (MPA revision 1, or 2 without the A
// bit) the responder sends no FPDU before the initiator's first, for at most
// MpaConfig::responder_send_wait (100 ms) after ESTABLISHED. siw's initiator reads its MPA
// reply with room for 4 bytes more and fails the connection ("peer sent extra data") when
// an FPDU came right behind the reply. With peer-to-peer the RTR was the initiator's
// first FPDU, and the responder sends at once.
struct ResponderRun {
    struct Seen {
        int from;
        Instant at;
        std::vector<std::byte> payload;
    };
    explicit ResponderRun(std::uint8_t revision, bool p2p, Duration a_wait = Duration::zero())
        : n(false, 0, false, rtr::kAll, revision, p2p, a_wait) {
        n.on_wire = [this](int from, std::span<const std::byte> f) {
            auto frame = wire::parse_tcp_frame(f);
            EXPECT_TRUE(frame.has_value());
            if (watch && frame && !frame->payload.empty()) {
                seen.push_back({from, n.now, {frame->payload.begin(), frame->payload.end()}});
            }
            return false;
        };
        EXPECT_TRUE(n.run([&] { return n.sa.up && n.sb.up; }));
        established_b = n.now;
        for (std::size_t i = 0; i < 16; ++i) {
            body[0][i] = std::byte(0xA0 + i);
            body[1][i] = std::byte(0xB0 + i);
        }
        for (int i = 0; i < 2; ++i) {
            Side& s = side(i);
            src[i] = *s.dev.reg_mr(body[i], 0);
            dst[i] = *s.dev.reg_mr(sink[i], kAccessLocalWrite);
            Sge d{dst[i].addr, 64, dst[i].lkey};
            RecvWr r;
            r.wr_id = 1;
            r.sg_list = std::span(&d, 1);
            EXPECT_TRUE(s.dev.post_recv(n.now, s.qp, r).has_value());
        }
        watch = true;
    }
    Side& side(int i) { return i == 0 ? n.sa : n.sb; }
    void send(int i) {
        Sge g{src[i].addr, 16, src[i].lkey};
        SendWr w;
        w.wr_id = 2;
        w.sg_list = std::span(&g, 1);
        ASSERT_TRUE(side(i).dev.post_send(n.now, side(i).qp, w).has_value());
    }
    bool received(int i) { return has(side(i), WcOpcode::kRecv, 1); }
    // The FPDU of side i's whole Send: length, DDP (L, version 1), RDMAP (version 1, Send),
    // QN 0, the MSN, MO 0, the 16 bytes, a zero CRC field.
    std::vector<std::byte> send_fpdu(int i, std::uint32_t msn = 1) const {
        std::vector<std::byte> v{std::byte{0}, std::byte{18 + 16}, std::byte{0x41},
                                 std::byte{0x43}};
        for (std::uint32_t word : {0u, 0u, msn, 0u}) {
            for (int sh = 24; sh >= 0; sh -= 8) v.push_back(std::byte(word >> sh));
        }
        v.insert(v.end(), body[i].begin(), body[i].end());
        v.resize(v.size() + 4);  // 2 + 18 + 16 bytes need no pad; the CRC field
        return v;
    }
    Net n;
    bool watch = false;
    std::vector<Seen> seen;  // TCP segments with data, once both QPs exist
    Instant established_b{};
    std::array<std::array<std::byte, 16>, 2> body{};
    std::array<std::vector<std::byte>, 2> sink{std::vector<std::byte>(64),
                                               std::vector<std::byte>(64)};
    MemoryRegion src[2], dst[2];
};

class DeviceResponder : public ::testing::TestWithParam<int> {};  // the MPA revision

// The responder's Send, posted at ESTABLISHED, does not leave then; the initiator's
// first Send, a little later, brings it out at that instant (no timer waited).
TEST_P(DeviceResponder, SendFollowsTheInitiatorsFirstFpdu) {
    ResponderRun r(static_cast<std::uint8_t>(GetParam()), false);
    r.send(1);
    // Everything due at ESTABLISHED moves; time stands still.
    for (int i = 0; i < 100 && r.n.step_once() > 0; ++i) {
    }
    EXPECT_TRUE(r.seen.empty()) << r.seen.size() << " segments with data";
    EXPECT_TRUE(r.n.sb.wcs.empty());
    r.send(0);
    const Instant sent_a = r.n.now;
    ASSERT_TRUE(r.n.run([&] { return r.received(0) && r.received(1); }));
    ASSERT_EQ(r.seen.size(), 2u);
    EXPECT_EQ(r.seen[0].from, 0);
    EXPECT_EQ(r.seen[0].payload, r.send_fpdu(0));
    EXPECT_EQ(r.seen[1].from, 1);
    EXPECT_EQ(r.seen[1].payload, r.send_fpdu(1));
    EXPECT_EQ(r.seen[1].at, sent_a);  // as a's Send arrived: no timer waited
    EXPECT_TRUE(std::equal(r.body[1].begin(), r.body[1].end(), r.sink[0].begin()));
    EXPECT_TRUE(std::equal(r.body[0].begin(), r.body[0].end(), r.sink[1].begin()));
    EXPECT_TRUE(r.n.sa.qp_events.empty() && r.n.sb.qp_events.empty());
}

// A server that speaks first (ucmatose): its Send leaves exactly 100 ms after ESTABLISHED.
TEST_P(DeviceResponder, SendWaitsAtMostTheResponderWait) {
    ResponderRun r(static_cast<std::uint8_t>(GetParam()), false);
    r.send(1);
    ASSERT_TRUE(r.n.run([&] { return r.received(0); }));
    ASSERT_EQ(r.seen.size(), 1u);
    EXPECT_EQ(r.seen[0].from, 1);
    EXPECT_EQ(r.seen[0].payload, r.send_fpdu(1));
    EXPECT_EQ(r.seen[0].at, r.established_b + std::chrono::milliseconds(100));
}

INSTANTIATE_TEST_SUITE_P(Revision, DeviceResponder, ::testing::Values(1, 2));

// MpaConfig::initiator_send_wait (`iwarp-cm run --settle`): the initiator offers no RTR, and
// its first Send waits 200 ms after ESTABLISHED, or follows the responder's first. Our
// responder holds its own first Send too (RFC 5044's rule, 100 ms): the two waits end at
// its bound, the responder's Send first and the initiator's at the same instant.
TEST(DeviceInitiatorWait, FirstSendWaitsOrFollowsTheResponder) {
    ResponderRun alone(2, true, std::chrono::milliseconds(200));
    alone.send(0);
    ASSERT_TRUE(alone.n.run([&] { return alone.received(1); }));
    ASSERT_EQ(alone.seen.size(), 1u);
    EXPECT_EQ(alone.seen[0].from, 0);
    EXPECT_EQ(alone.seen[0].payload, alone.send_fpdu(0, 1));  // MSN 1: no RTR went before
    EXPECT_EQ(alone.seen[0].at, alone.established_b + std::chrono::milliseconds(200));

    ResponderRun answered(2, true, std::chrono::milliseconds(200));
    answered.send(0);
    answered.send(1);
    ASSERT_TRUE(answered.n.run([&] { return answered.received(0) && answered.received(1); }));
    ASSERT_EQ(answered.seen.size(), 2u);
    EXPECT_EQ(answered.seen[0].from, 1);
    EXPECT_EQ(answered.seen[0].at, answered.established_b + std::chrono::milliseconds(100));
    EXPECT_EQ(answered.seen[1].from, 0);
    EXPECT_EQ(answered.seen[1].payload, answered.send_fpdu(0, 1));
    EXPECT_EQ(answered.seen[1].at, answered.seen[0].at);
}

TEST(DeviceResponderPeerToPeer, SendsAtOnce) {
    ResponderRun r(2, true);
    r.send(1);
    const Instant posted = r.n.now;
    ASSERT_TRUE(r.n.run([&] { return r.received(0); }));
    ASSERT_EQ(r.seen.size(), 1u);
    EXPECT_EQ(r.seen[0].from, 1);
    EXPECT_EQ(r.seen[0].payload, r.send_fpdu(1));
    EXPECT_EQ(r.seen[0].at, posted);
}

// Once a is connected (its QP deferred), makes a's QP on a CQ of `capacity` entries,
// which the Net does not poll (n.sa.cq stays unset); returns that CQ.
CqHandle make_qp_on_cq_of(Net& n, std::uint32_t capacity) {
    EXPECT_TRUE(n.run([&] { return n.sb.up && n.sa.conn.valid(); }));
    const CqHandle cq = *n.sa.dev.create_cq(capacity);
    QpAttr attr;
    attr.send_cq = attr.recv_cq = cq;
    auto qp = n.sa.dev.create_qp(n.now, n.sa.conn, attr);
    EXPECT_TRUE(qp.has_value());
    if (qp) n.sa.qp = *qp;
    return cq;
}

// A CQ too small for its work overflows: an error, never a silent loss. The two receives
// it holds still come out, then nothing (cq_failed); the application hears kCqError, and
// the QP on it ends with a TERMINATE (RDMAP, local catastrophic error) that the peer
// receives; the rest of the QP's work is flushed into the failed CQ, which takes none.
TEST(DeviceCq, OverflowIsAnErrorThatEndsItsQueuePairs) {
    Net n(false);
    n.defer_qp_a = true;
    const CqHandle small = make_qp_on_cq_of(n, 2);
    std::vector<std::byte> sink(4 * 64), body(64, std::byte{0x5a});
    auto mr_sink = *n.sa.dev.reg_mr(sink, kAccessLocalWrite);
    auto mr_body = *n.sb.dev.reg_mr(body, 0);
    for (std::uint64_t i = 0; i < 4; ++i) {
        Sge d{mr_sink.addr + i * 64, 64, mr_sink.lkey};
        RecvWr r;
        r.wr_id = i;
        r.sg_list = std::span(&d, 1);
        ASSERT_TRUE(n.sa.dev.post_recv(n.now, n.sa.qp, r).has_value());
    }
    for (std::uint64_t i = 0; i < 4; ++i) {
        Sge g{mr_body.addr, 64, mr_body.lkey};
        SendWr w;
        w.wr_id = 10 + i;
        w.sg_list = std::span(&g, 1);
        w.signaled = true;
        ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, w).has_value());
    }
    ASSERT_TRUE(n.run([&] { return n.sa.qp_events.size() >= 3 && !n.sb.qp_events.empty(); }));
    ASSERT_GE(n.sa.qp_events.size(), 3u);
    EXPECT_EQ(n.sa.qp_events[0].type, QpEventType::kCqError);
    EXPECT_EQ(n.sa.qp_events[0].cq, small);
    EXPECT_EQ(n.sa.qp_events[0].status, -EOVERFLOW);
    EXPECT_EQ(n.sa.qp_events[1].type, QpEventType::kTerminateSent);
    EXPECT_EQ(n.sa.qp_events[1].qp, n.sa.qp);
    EXPECT_EQ(n.sa.qp_events[1].term.layer, 0u);  // RDMAP
    EXPECT_EQ(n.sa.qp_events[1].term.etype, wire::kRdmapEtypeLocalCatastrophic);
    EXPECT_EQ(n.sa.qp_events[2].type, QpEventType::kDisconnected);
    EXPECT_EQ(n.sb.qp_events[0].type, QpEventType::kTerminateReceived);
    EXPECT_EQ(n.sb.qp_events[0].term.layer, 0u);
    EXPECT_EQ(n.sb.qp_events[0].term.etype, wire::kRdmapEtypeLocalCatastrophic);
    // What the CQ took before it filled, in order; then nothing, and it says why.
    WorkCompletion wc[8];
    ASSERT_EQ(n.sa.dev.poll_cq(small, wc), 2u);
    for (std::uint64_t i = 0; i < 2; ++i) {
        EXPECT_EQ(wc[i].wr_id, i);
        EXPECT_EQ(wc[i].status, WcStatus::kSuccess);
        EXPECT_EQ(wc[i].opcode, WcOpcode::kRecv);
        EXPECT_EQ(wc[i].byte_len, 64u);
    }
    EXPECT_EQ(n.sa.dev.poll_cq(small, wc), 0u);
    EXPECT_TRUE(n.sa.dev.cq_failed(small));
    EXPECT_FALSE(n.sb.dev.cq_failed(n.sb.cq));
    EXPECT_EQ(n.sa.dev.query_qp(n.sa.qp)->state, QpState::kError);
}

// The connection's end flushes more receives than the QP's CQ can take: the CQ's failure
// is reported as it happens, before the end whose flush overflowed it (the application
// hears IBV_EVENT_CQ_ERR before anything of the QPs on the CQ).
TEST(DeviceCq, AnOverflowByAFlushComesBeforeTheEndThatFlushed) {
    Net n(false);
    n.defer_qp_a = true;
    const CqHandle small = make_qp_on_cq_of(n, 1);
    std::vector<std::byte> sink(3 * 64);
    auto mr = *n.sa.dev.reg_mr(sink, kAccessLocalWrite);
    for (std::uint64_t i = 0; i < 3; ++i) {
        Sge d{mr.addr + i * 64, 64, mr.lkey};
        ASSERT_TRUE(n.sa.dev.post_recv(n.now, n.sa.qp, {i, std::span(&d, 1)}).has_value());
    }
    ASSERT_TRUE(n.b.disconnect(n.now, n.sb.conn, DisconnectMode::kGraceful).has_value());
    ASSERT_TRUE(n.run([&] { return n.sa.qp_events.size() >= 2; }));
    ASSERT_EQ(n.sa.qp_events.size(), 2u);
    EXPECT_EQ(n.sa.qp_events[0].type, QpEventType::kCqError);
    EXPECT_EQ(n.sa.qp_events[0].cq, small);
    EXPECT_EQ(n.sa.qp_events[1].type, QpEventType::kDisconnected);
    EXPECT_EQ(n.sa.qp_events[1].qp, n.sa.qp);
    EXPECT_EQ(n.sa.qp_events[1].status, 0);
    EXPECT_TRUE(n.sa.dev.cq_failed(small));
}

// The peer goes silent (every frame is lost): a's retransmissions run out and its
// connection is lost (-ETIMEDOUT), a fatal error of its QP. The QP's work was flushed
// before the event could be polled.
TEST(DeviceQpError, ASilentPeerIsAFatalEndAfterTheFlushes) {
    Net n(false);
    ASSERT_TRUE(n.run([&] { return n.sa.up && n.sb.up; }));
    std::vector<std::byte> buf(3 * 64);
    auto mr = *n.sa.dev.reg_mr(buf, kAccessLocalWrite);
    for (std::uint64_t i = 0; i < 2; ++i) {
        Sge d{mr.addr + i * 64, 64, mr.lkey};
        ASSERT_TRUE(n.sa.dev.post_recv(n.now, n.sa.qp, {i, std::span(&d, 1)}).has_value());
    }
    n.on_wire = [](int, std::span<const std::byte>) { return true; };
    Sge g{mr.addr + 128, 64, mr.lkey};
    SendWr w;
    w.wr_id = 9;
    w.sg_list = std::span(&g, 1);
    ASSERT_TRUE(n.sa.dev.post_send(n.now, n.sa.qp, w).has_value());
    ASSERT_TRUE(n.run([&] { return !n.sa.qp_events.empty(); }));
    const QpEvent& e = n.sa.qp_events[0];
    EXPECT_EQ(e.type, QpEventType::kDisconnected);
    EXPECT_EQ(e.status, -ETIMEDOUT);
    EXPECT_EQ(e.error, QpError::kFatal) << to_string(e.error);
    ASSERT_EQ(n.sa.wcs_at_event[0], 3u);  // the Send, then both receives
    EXPECT_EQ(n.sa.wcs[0].wr_id, 9u);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(n.sa.wcs[i].status, WcStatus::kWrFlushErr);
    EXPECT_TRUE(n.sb.qp_events.empty());  // b has sent nothing, and waits
}

// b resets its connection: no error of either QP (siw and irdma raise no QP event for a
// reset; the application hears the connection's end), each QP in ERR.
TEST(DeviceQpError, AResetIsNoErrorOfTheQp) {
    Net n(false);
    ASSERT_TRUE(n.run([&] { return n.sa.up && n.sb.up; }));
    ASSERT_TRUE(n.b.disconnect(n.now, n.sb.conn, DisconnectMode::kAbortive).has_value());
    ASSERT_TRUE(n.run([&] { return !n.sa.qp_events.empty() && !n.sb.qp_events.empty(); }));
    EXPECT_EQ(n.sa.qp_events[0].type, QpEventType::kDisconnected);
    EXPECT_EQ(n.sa.qp_events[0].status, -ECONNRESET);
    EXPECT_EQ(n.sa.qp_events[0].error, QpError::kNone);
    EXPECT_EQ(n.sb.qp_events[0].type, QpEventType::kDisconnected);
    EXPECT_EQ(n.sb.qp_events[0].status, 0);
    EXPECT_EQ(n.sb.qp_events[0].error, QpError::kNone);
    EXPECT_EQ(n.sa.dev.query_qp(n.sa.qp)->state, QpState::kError);
}

// Two Sends wait in the stream for the QP's first receives (they came right after the
// hand-off). Posted in one RecvBatch, the two receives both take one; posted one by one,
// the first receive's post would read both Sends and the second would find no buffer.
TEST(DeviceRecvBatch, ReceivesPostedTogetherTakeTheMessagesThatWaited) {
    Net n(false);
    n.defer_qp_a = true;
    ASSERT_TRUE(n.run([&] { return n.sb.up && n.sa.conn.valid(); }));
    std::vector<std::byte> body(16, std::byte{0x33}), sink(64);
    auto mr_body = *n.sb.dev.reg_mr(body, 0);
    for (std::uint64_t i = 0; i < 2; ++i) {
        Sge g{mr_body.addr, 16, mr_body.lkey};
        SendWr w;
        w.wr_id = 20 + i;
        w.sg_list = std::span(&g, 1);
        ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, w).has_value());
    }
    // Until both Sends wait, acknowledged, in a's stream.
    ASSERT_TRUE(n.run([&] { return has(n.sb, WcOpcode::kSend, 2); }));
    n.make_qp(n.sa);
    auto mr_sink = *n.sa.dev.reg_mr(sink, kAccessLocalWrite);
    {
        const Device::RecvBatch batch(n.sa.dev, n.now, n.sa.qp);
        for (std::uint64_t i = 0; i < 2; ++i) {
            Sge d{mr_sink.addr + i * 32, 32, mr_sink.lkey};
            RecvWr r;
            r.wr_id = i;
            r.sg_list = std::span(&d, 1);
            ASSERT_TRUE(n.sa.dev.post_recv(n.now, n.sa.qp, r).has_value());
            EXPECT_EQ(n.sa.dev.query_qp(n.sa.qp)->recv_posted, i + 1);  // nothing read yet
        }
    }
    ASSERT_TRUE(n.run([&] { return has(n.sa, WcOpcode::kRecv, 2); }));
    EXPECT_EQ(n.sa.wcs[0].wr_id, 0u);
    EXPECT_EQ(n.sa.wcs[1].wr_id, 1u);
    EXPECT_TRUE(n.sa.qp_events.empty());
    EXPECT_TRUE(n.sb.qp_events.empty());
}

// Six SGEs a work request, as siw: a Send gathered from six pieces of three regions into a
// receive that scatters it over six, and an RDMA Write gathered from six; every byte lands
// where the SGEs say, and a seventh SGE is refused.
TEST(DeviceSge, SixSgesGatherAndScatter) {
    Net n(false);
    n.max_sge = 6;
    ASSERT_TRUE(n.run([&] { return n.sa.up && n.sb.up; }));
    // b: the message in three regions, six pieces of 10, 20, ... 60 bytes.
    std::vector<std::vector<std::byte>> src(3, std::vector<std::byte>(150));
    std::vector<MemoryRegion> mr_src;
    for (std::size_t r = 0; r < 3; ++r) {
        for (std::size_t i = 0; i < 150; ++i) src[r][i] = std::byte((r * 150 + i) * 7 % 251);
        mr_src.push_back(*n.sb.dev.reg_mr(src[r], 0));
    }
    std::vector<Sge> gather;
    std::vector<std::byte> want;
    for (std::size_t k = 0; k < 6; ++k) {
        const std::size_t r = k % 3, off = (k / 3) * 70, len = 10 * (k + 1);
        gather.push_back({mr_src[r].addr + off, static_cast<std::uint32_t>(len), mr_src[r].lkey});
        want.insert(want.end(), src[r].begin() + static_cast<std::ptrdiff_t>(off),
                    src[r].begin() + static_cast<std::ptrdiff_t>(off + len));
    }
    // a: six sinks of 35 bytes each, every other one in a second region.
    std::vector<std::byte> sink_a(210), sink_b(210), target(210);
    auto mr_a = *n.sa.dev.reg_mr(sink_a, kAccessLocalWrite);
    auto mr_b = *n.sa.dev.reg_mr(sink_b, kAccessLocalWrite);
    auto mr_t = *n.sa.dev.reg_mr(target, kAccessLocalWrite | kAccessRemoteWrite);
    std::vector<Sge> scatter;
    for (std::size_t k = 0; k < 6; ++k) {
        const MemoryRegion& m = k % 2 ? mr_b : mr_a;
        scatter.push_back({m.addr + k * 35, 35, m.lkey});
    }
    ASSERT_TRUE(n.sa.dev.post_recv(n.now, n.sa.qp, {1, scatter}).has_value());
    SendWr send;
    send.wr_id = 2;
    send.sg_list = gather;
    ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, send).has_value());
    SendWr write;
    write.wr_id = 3;
    write.opcode = WrOpcode::kRdmaWrite;
    write.sg_list = gather;
    write.remote_addr = mr_t.addr;
    write.rkey = mr_t.rkey;
    ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, write).has_value());
    ASSERT_TRUE(n.run([&] { return has(n.sa, WcOpcode::kRecv, 1) && n.sb.wcs.size() >= 2; }));
    EXPECT_EQ(n.sa.wcs[0].byte_len, 210u);
    std::vector<std::byte> got;
    for (std::size_t k = 0; k < 6; ++k) {
        const std::vector<std::byte>& s = k % 2 ? sink_b : sink_a;
        got.insert(got.end(), s.begin() + static_cast<std::ptrdiff_t>(k * 35),
                   s.begin() + static_cast<std::ptrdiff_t>(k * 35 + 35));
    }
    EXPECT_EQ(got, want);
    EXPECT_EQ(target, want);
    Sge seven[7] = {gather[0], gather[0], gather[0], gather[0], gather[0], gather[0], gather[0]};
    send.sg_list = seven;
    EXPECT_EQ(n.sa.dev.post_send(n.now, n.sa.qp, send).error(), VerbsError::kTooManySge);
}

// IBV_SEND_FENCE: a's Send posted right behind its 64 KiB Read leaves only after the last
// Read Response came in; without the fence it leaves right behind the Read Request.
TEST(DeviceFence, AFencedSendWaitsForTheReadBeforeIt) {
    for (bool fence : {true, false}) {
        Net n(false);
        // The DDP/RDMAP header of each FPDU on the wire, in order, with its sender.
        std::vector<std::pair<int, wire::DdpHeader>> seen;
        n.on_wire = [&](int from, std::span<const std::byte> f) {
            auto frame = wire::parse_tcp_frame(f);
            if (frame && !frame->payload.empty()) {
                if (auto fpdu = wire::parse_fpdu(frame->payload, false)) {
                    if (auto seg = wire::parse_ddp(fpdu->ulpdu))
                        seen.emplace_back(from, seg->header);
                }
            }
            return false;
        };
        ASSERT_TRUE(n.run([&] { return n.sa.up && n.sb.up; }));
        std::vector<std::byte> src(65536, std::byte{0x77}), dst(65536), msg(16), in(16);
        auto mr_src = *n.sb.dev.reg_mr(src, kAccessRemoteRead);
        auto mr_dst = *n.sa.dev.reg_mr(dst, kAccessLocalWrite);
        auto mr_msg = *n.sa.dev.reg_mr(msg, 0);
        auto mr_in = *n.sb.dev.reg_mr(in, kAccessLocalWrite);
        Sge r{mr_in.addr, 16, mr_in.lkey};
        ASSERT_TRUE(n.sb.dev.post_recv(n.now, n.sb.qp, {1, std::span(&r, 1)}).has_value());
        seen.clear();
        Sge d{mr_dst.addr, 65536, mr_dst.lkey};
        SendWr read;
        read.wr_id = 10;
        read.opcode = WrOpcode::kRdmaRead;
        read.sg_list = std::span(&d, 1);
        read.remote_addr = mr_src.addr;
        read.rkey = mr_src.rkey;
        ASSERT_TRUE(n.sa.dev.post_send(n.now, n.sa.qp, read).has_value());
        Sge m{mr_msg.addr, 16, mr_msg.lkey};
        SendWr send;
        send.wr_id = 11;
        send.sg_list = std::span(&m, 1);
        send.fence = fence;
        ASSERT_TRUE(n.sa.dev.post_send(n.now, n.sa.qp, send).has_value());
        ASSERT_TRUE(n.run(
            [&] { return has(n.sb, WcOpcode::kRecv, 1) && has(n.sa, WcOpcode::kRdmaRead, 1); }));
        const auto op = [](const wire::DdpHeader& h) {
            return static_cast<wire::RdmapOpcode>(h.opcode);
        };
        std::ptrdiff_t send_at = -1, last_response_at = -1;
        for (std::size_t i = 0; i < seen.size(); ++i) {
            if (seen[i].first == 0 && op(seen[i].second) == wire::RdmapOpcode::kSend) send_at = i;
            if (seen[i].first == 1 && op(seen[i].second) == wire::RdmapOpcode::kReadResponse &&
                seen[i].second.last)
                last_response_at = static_cast<std::ptrdiff_t>(i);
        }
        ASSERT_GE(send_at, 0);
        ASSERT_GE(last_response_at, 0);
        ASSERT_FALSE(seen.empty());
        EXPECT_EQ(op(seen[0].second), wire::RdmapOpcode::kReadRequest);
        if (fence) {
            EXPECT_GT(send_at, last_response_at) << "the fenced Send went before the Read's end";
        } else {
            EXPECT_EQ(send_at, 1) << "the Send right behind the Read Request";
        }
        EXPECT_TRUE(dst == src);
    }
}

// A shared receive queue under two QPs of one device: each QP's Send takes the SRQ's
// oldest receive, completes on that QP's CQ with that QP's handle, and the limit event
// comes once fewer receives than the armed limit are left.
TEST(DeviceSrq, TwoQueuePairsTakeTheSharedReceivesInTurn) {
    Net n(false);
    n.defer_qp_a = true;
    ASSERT_TRUE(n.run([&] { return n.sb.up && n.sa.conn.valid(); }));
    const ConnHandle conn1 = n.sa.conn;
    const QpHandle qp_b1 = n.sb.qp;
    ConnectParams p;
    p.local = {n.ip_a, 0};
    p.remote = {n.ip_b, 4791};
    p.remote_mac = n.b.config().mac;
    ASSERT_TRUE(n.a.connect(n.now, p).has_value());
    ASSERT_TRUE(n.run([&] { return n.sa.conn != conn1 && n.sb.qp != qp_b1; }));
    const ConnHandle conn2 = n.sa.conn;
    const QpHandle qp_b2 = n.sb.qp;

    const SrqHandle srq = *n.sa.dev.create_srq({8, 1, 0});
    n.sa.cq = *n.sa.dev.create_cq(16);  // the Net polls it
    QpAttr attr;
    attr.send_cq = attr.recv_cq = n.sa.cq;
    attr.srq = srq;
    const QpHandle qa1 = *n.sa.dev.create_qp(n.now, conn1, attr);
    const QpHandle qa2 = *n.sa.dev.create_qp(n.now, conn2, attr);
    std::vector<std::byte> sink(3 * 32), body(16, std::byte{0x61});
    auto mr_sink = *n.sa.dev.reg_mr(sink, kAccessLocalWrite);
    auto mr_body = *n.sb.dev.reg_mr(body, 0);
    for (std::uint64_t i = 0; i < 3; ++i) {
        Sge d{mr_sink.addr + i * 32, 32, mr_sink.lkey};
        ASSERT_TRUE(n.sa.dev.post_srq_recv(n.now, srq, {100 + i, std::span(&d, 1)}).has_value());
    }
    ASSERT_TRUE(n.sa.dev.arm_srq_limit(srq, 2).has_value());
    EXPECT_EQ(n.sa.dev.query_srq(srq)->posted, 3u);
    Sge own{mr_sink.addr, 8, mr_sink.lkey};
    EXPECT_EQ(n.sa.dev.post_recv(n.now, qa1, {1, std::span(&own, 1)}).error(),
              VerbsError::kInvalidArgument);

    Sge g{mr_body.addr, 16, mr_body.lkey};
    SendWr w;
    w.sg_list = std::span(&g, 1);
    ASSERT_TRUE(n.sb.dev.post_send(n.now, qp_b2, w).has_value());
    ASSERT_TRUE(n.run([&] { return has(n.sa, WcOpcode::kRecv, 1); }));
    EXPECT_TRUE(n.sa.qp_events.empty());  // two left: not below the limit
    ASSERT_TRUE(n.sb.dev.post_send(n.now, qp_b1, w).has_value());
    ASSERT_TRUE(n.run([&] { return has(n.sa, WcOpcode::kRecv, 2); }));
    ASSERT_EQ(n.sa.wcs.size(), 2u);
    EXPECT_EQ(n.sa.wcs[0].wr_id, 100u);
    EXPECT_EQ(n.sa.wcs[0].qp, qa2);
    EXPECT_EQ(n.sa.wcs[1].wr_id, 101u);
    EXPECT_EQ(n.sa.wcs[1].qp, qa1);
    ASSERT_EQ(n.sa.qp_events.size(), 1u);
    EXPECT_EQ(n.sa.qp_events[0].type, QpEventType::kSrqLimit);
    EXPECT_EQ(n.sa.qp_events[0].srq, srq);
    EXPECT_EQ(n.sa.dev.query_srq(srq)->posted, 1u);
    EXPECT_EQ(n.sa.dev.query_srq(srq)->limit, 0u);  // disarmed
    EXPECT_EQ(n.sa.dev.destroy_srq(srq).error(), VerbsError::kWrongState);
    ASSERT_TRUE(n.sa.dev.destroy_qp(n.now, qa1).has_value());
    ASSERT_TRUE(n.sa.dev.destroy_qp(n.now, qa2).has_value());
    EXPECT_TRUE(n.sa.dev.destroy_srq(srq).has_value());
    EXPECT_EQ(n.sa.dev.query_srq(srq).error(), VerbsError::kStaleHandle);
}

// IBV_WR_LOCAL_INV: our own STag is invalidated at its turn in the send queue and the
// request completes (IBV_WC_LOCAL_INV); the peer's Write to it is refused after. An STag
// of another domain is not ours to invalidate: the request fails and the QP ends.
TEST(DeviceLocalInvalidate, InvalidatesOurStagInSendQueueOrder) {
    for (bool other_pd : {false, true}) {
        Net n(false);
        ASSERT_TRUE(n.run([&] { return n.sa.up && n.sb.up; }));
        std::vector<std::byte> region(64), body(8, std::byte{0x21});
        const auto mr =
            *n.sa.dev.reg_mr(region, kAccessLocalWrite | kAccessRemoteWrite, other_pd ? 3 : 0);
        const auto mr_body = *n.sb.dev.reg_mr(body, 0);
        SendWr inv;
        inv.wr_id = 5;
        inv.opcode = WrOpcode::kLocalInvalidate;
        inv.invalidate_rkey = mr.rkey;
        Sge stray{mr_body.addr, 8, mr_body.lkey};
        inv.sg_list = std::span(&stray, 1);
        EXPECT_EQ(n.sa.dev.post_send(n.now, n.sa.qp, inv).error(), VerbsError::kTooManySge);
        inv.sg_list = {};
        ASSERT_TRUE(n.sa.dev.post_send(n.now, n.sa.qp, inv).has_value());
        ASSERT_TRUE(n.run([&] { return !n.sa.wcs.empty(); }));
        EXPECT_EQ(n.sa.wcs[0].wr_id, 5u);
        EXPECT_EQ(n.sa.wcs[0].opcode, WcOpcode::kLocalInvalidate);
        if (other_pd) {
            EXPECT_EQ(n.sa.wcs[0].status, WcStatus::kLocProtErr);
            ASSERT_TRUE(n.run([&] { return !n.sa.qp_events.empty(); }));
            EXPECT_EQ(n.sa.qp_events[0].type, QpEventType::kTerminateSent);
            continue;
        }
        EXPECT_EQ(n.sa.wcs[0].status, WcStatus::kSuccess);
        Sge g{mr_body.addr, 8, mr_body.lkey};
        SendWr write;
        write.opcode = WrOpcode::kRdmaWrite;
        write.sg_list = std::span(&g, 1);
        write.remote_addr = mr.addr;
        write.rkey = mr.rkey;
        ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, write).has_value());
        ASSERT_TRUE(n.run([&] { return !n.sb.qp_events.empty(); }));
        EXPECT_EQ(n.sb.qp_events[0].type, QpEventType::kTerminateReceived);
        EXPECT_EQ(n.sb.qp_events[0].term.code, wire::kDdpTaggedInvalidStag);
        EXPECT_TRUE(std::all_of(region.begin(), region.end(),
                                [](std::byte b) { return b == std::byte{0}; }));
    }
}

// ---- Send with Invalidate (RFC 5040 sections 4.4 and 6.10)

// b's Sends and the DDP header of each, as the wire carries them.
struct InvalidateRun {
    Net n{false};
    std::vector<std::byte> sink = std::vector<std::byte>(256);
    std::vector<std::byte> target = std::vector<std::byte>(64);
    std::vector<std::byte> body = std::vector<std::byte>(32, std::byte{0x42});
    MemoryRegion mr_sink, mr_target, mr_body;
    std::vector<wire::DdpHeader> sent_by_b;

    explicit InvalidateRun(std::uint32_t target_pd = 0) {
        n.on_wire = [this](int from, std::span<const std::byte> f) {
            auto frame = wire::parse_tcp_frame(f);
            if (from == 1 && frame && !frame->payload.empty()) {
                auto fpdu = wire::parse_fpdu(frame->payload, false);
                if (fpdu) {
                    if (auto seg = wire::parse_ddp(fpdu->ulpdu)) sent_by_b.push_back(seg->header);
                }
            }
            return false;
        };
        EXPECT_TRUE(n.run([&] { return n.sa.up && n.sb.up; }));
        mr_sink = *n.sa.dev.reg_mr(sink, kAccessLocalWrite);
        mr_target = *n.sa.dev.reg_mr(target, kAccessLocalWrite | kAccessRemoteWrite, target_pd);
        mr_body = *n.sb.dev.reg_mr(body, 0);
        Sge d{mr_sink.addr, 256, mr_sink.lkey};
        RecvWr r;
        r.wr_id = 1;
        r.sg_list = std::span(&d, 1);
        EXPECT_TRUE(n.sa.dev.post_recv(n.now, n.sa.qp, r).has_value());
    }
    VResult<void> send(std::uint32_t stag, bool solicited) {
        Sge g{mr_body.addr, 32, mr_body.lkey};
        SendWr w;
        w.wr_id = 9;
        w.opcode = WrOpcode::kSendWithInvalidate;
        w.sg_list = std::span(&g, 1);
        w.solicited = solicited;
        w.invalidate_rkey = stag;
        return n.sb.dev.post_send(n.now, n.sb.qp, w);
    }
    // The header b's Send carries: opcode 0x4 (or 0x6 with Solicited Event) and the STag
    // in the untagged header's first word; MSN 1 (b, the responder, sent no RTR).
    static wire::DdpHeader expected(std::uint32_t stag, bool solicited) {
        wire::DdpHeader h;
        h.tagged = false;
        h.last = true;
        h.opcode = static_cast<std::uint8_t>(solicited ? wire::RdmapOpcode::kSendSeInvalidate
                                                       : wire::RdmapOpcode::kSendInvalidate);
        h.inval_stag = stag;
        h.qn = wire::kQnSend;
        h.msn = 1;
        h.mo = 0;
        return h;
    }
};

class DeviceSendInvalidate : public ::testing::TestWithParam<bool> {};

// The named STag is invalid before the receive completes, and the completion says so; the
// peer's Write to it afterwards draws a TERMINATE (DDP, invalid STag), and our own use of
// it is refused at post time.
TEST_P(DeviceSendInvalidate, InvalidatesTheStagBeforeTheReceiveCompletes) {
    const bool solicited = GetParam();
    InvalidateRun t;
    const std::uint32_t stag = t.mr_target.rkey;
    ASSERT_TRUE(t.send(stag, solicited).has_value());
    ASSERT_TRUE(t.n.run([&] { return has(t.n.sa, WcOpcode::kRecv, 1); }));
    ASSERT_EQ(t.sent_by_b.size(), 1u);
    EXPECT_EQ(t.sent_by_b[0], InvalidateRun::expected(stag, solicited));
    ASSERT_EQ(t.n.sa.wcs.size(), 1u);
    const WorkCompletion& wc = t.n.sa.wcs[0];
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_EQ(wc.byte_len, 32u);
    EXPECT_TRUE(wc.with_invalidate);
    EXPECT_EQ(wc.invalidated_rkey, stag);
    EXPECT_EQ(wc.solicited, solicited);
    EXPECT_TRUE(std::all_of(t.sink.begin(), t.sink.begin() + 32,
                            [](std::byte b) { return b == std::byte{0x42}; }));
    ASSERT_TRUE(t.n.run([&] { return has(t.n.sb, WcOpcode::kSend, 1); }));
    EXPECT_TRUE(t.n.sa.qp_events.empty());
    // Ours no more, locally either.
    Sge local{t.mr_target.addr, 8, t.mr_target.lkey};
    SendWr own;
    own.sg_list = std::span(&local, 1);
    EXPECT_EQ(t.n.sa.dev.post_send(t.n.now, t.n.sa.qp, own).error(), VerbsError::kLocalProtection);
    // The peer's Write with the old STag.
    Sge g{t.mr_body.addr, 8, t.mr_body.lkey};
    SendWr write;
    write.opcode = WrOpcode::kRdmaWrite;
    write.sg_list = std::span(&g, 1);
    write.remote_addr = t.mr_target.addr;
    write.rkey = stag;
    ASSERT_TRUE(t.n.sb.dev.post_send(t.n.now, t.n.sb.qp, write).has_value());
    ASSERT_TRUE(t.n.run([&] { return !t.n.sb.qp_events.empty(); }));
    EXPECT_EQ(t.n.sb.qp_events[0].type, QpEventType::kTerminateReceived);
    EXPECT_EQ(t.n.sb.qp_events[0].term.layer, 1u);  // DDP
    EXPECT_EQ(t.n.sb.qp_events[0].term.code, wire::kDdpTaggedInvalidStag);
    EXPECT_TRUE(std::all_of(t.target.begin(), t.target.end(),
                            [](std::byte b) { return b == std::byte{0}; }));
}

INSTANTIATE_TEST_SUITE_P(SolicitedEvent, DeviceSendInvalidate, ::testing::Bool());

// An STag that cannot be invalidated: one of another protection domain (RDMAP, remote
// protection error) or one that names no region (remote operation error), both with code
// "cannot be invalidated", as siw answers. The message was placed: its receive completes,
// without the invalidation.
TEST(DeviceSendInvalidate, AnStagThatCannotBeInvalidatedIsATerminate) {
    for (bool other_pd : {true, false}) {
        InvalidateRun t(other_pd ? 7 : 0);
        const std::uint32_t stag = other_pd ? t.mr_target.rkey : (t.mr_target.rkey ^ 0x5500);
        ASSERT_TRUE(t.send(stag, false).has_value());
        ASSERT_TRUE(t.n.run([&] { return !t.n.sb.qp_events.empty(); })) << other_pd;
        ASSERT_EQ(t.n.sa.wcs.size(), 1u) << other_pd;  // the receive, then nothing
        EXPECT_EQ(t.n.sa.wcs[0].status, WcStatus::kSuccess);
        EXPECT_FALSE(t.n.sa.wcs[0].with_invalidate);
        ASSERT_FALSE(t.n.sa.qp_events.empty());
        EXPECT_EQ(t.n.sa.qp_events[0].type, QpEventType::kTerminateSent);
        // Another domain's STag is a protection error of the request; no region, not.
        EXPECT_EQ(t.n.sa.qp_events[0].error, other_pd ? QpError::kAccess : QpError::kFatal);
        const QpEvent& got = t.n.sb.qp_events[0];
        EXPECT_EQ(got.type, QpEventType::kTerminateReceived);
        EXPECT_EQ(got.term.layer, 0u);  // RDMAP
        EXPECT_EQ(got.term.etype,
                  other_pd ? wire::kRdmapEtypeRemoteProtection : wire::kRdmapEtypeRemoteOperation);
        EXPECT_EQ(got.term.code, wire::kRdmapCodeCannotInvalidate);
    }
}

// An in-order Write the checks refuse (an STag nobody registered) is not
// placed from the segment: it goes through the buffer to rx_fpdu, whose
// TERMINATE ends the queue pair on both sides.
TEST(DevicePlacement, RefusedWriteStillDrawsTheTerminate) {
    Net n(false);
    ASSERT_TRUE(n.run([&] { return n.sa.up && n.sb.up; }));
    std::vector<std::byte> src(4096, std::byte{7}), sink(4096, std::byte{0});
    auto mr_sink = *n.sa.dev.reg_mr(sink, kAccessRemoteWrite);
    auto mr_src = *n.sb.dev.reg_mr(src, 0);
    Sge w{mr_src.addr, 4096, mr_src.lkey};
    SendWr write;
    write.opcode = WrOpcode::kRdmaWrite;
    write.sg_list = std::span(&w, 1);
    write.remote_addr = mr_sink.addr;
    write.rkey = mr_sink.rkey ^ 0x100;  // no such STag
    ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, write).has_value());
    ASSERT_TRUE(n.run([&] { return !n.sa.qp_events.empty() && !n.sb.qp_events.empty(); }));
    EXPECT_EQ(n.sa.qp_events[0].type, QpEventType::kTerminateSent);
    EXPECT_EQ(n.sb.qp_events[0].type, QpEventType::kTerminateReceived);
    EXPECT_EQ(n.sa.dev.placement().placed, 0u);
    EXPECT_TRUE(
        std::all_of(sink.begin(), sink.end(), [](std::byte b) { return b == std::byte{0}; }));
}

// ---- the close after a TERMINATE (RFC 5040 section 7.2, RFC 5044 section 8)

// One frame on the wire: who sent it, its TCP header, its payload, whether
// the test dropped it.
struct Seen {
    int from = 0;
    wire::TcpRepr tcp;
    std::vector<std::byte> payload;
    bool dropped = false;
};

// b Writes to an STag a does not have: a answers with a TERMINATE (DDP
// tagged, invalid STag). Every frame is recorded; `drop` picks the lost ones.
struct TermRun {
    explicit TermRun(std::function<bool(const Seen&)> drop_if = {}) : drop(std::move(drop_if)) {
        EXPECT_TRUE(n.run([&] { return n.sa.up && n.sb.up; }));
        n.on_wire = [this](int from, std::span<const std::byte> f) {
            auto p = wire::parse_tcp_frame(f);
            EXPECT_TRUE(p.has_value());
            if (!p) return false;
            Seen s{from, p->repr.tcp, {p->payload.begin(), p->payload.end()}, false};
            s.dropped = drop && drop(s);
            seen.push_back(s);
            return s.dropped;
        };
        mr_sink = *n.sa.dev.reg_mr(sink, kAccessRemoteWrite);
        mr_src = *n.sb.dev.reg_mr(src, 0);
        sge = {mr_src.addr, 4096, mr_src.lkey};
        write.opcode = WrOpcode::kRdmaWrite;
        write.sg_list = std::span(&sge, 1);
        write.remote_addr = mr_sink.addr;
        write.rkey = mr_sink.rkey ^ 0x100;  // no such STag
    }
    // Each application destroys its QP on its TERMINATE event, as rping does;
    // then until both cores are empty (TIME_WAIT included).
    bool close_on_terminate() {
        bool gone_a = false, gone_b = false;
        return n.run([&] {
            if (!gone_a && !n.sa.qp_events.empty()) {
                gone_a = true;
                EXPECT_TRUE(n.sa.dev.destroy_qp(n.now, n.sa.qp).has_value());
            }
            if (!gone_b && !n.sb.qp_events.empty()) {
                gone_b = true;
                EXPECT_TRUE(n.sb.dev.destroy_qp(n.now, n.sb.qp).has_value());
            }
            return gone_a && gone_b && n.a.live_nodes() == 0 && n.b.live_nodes() == 0;
        });
    }
    std::vector<const Seen*> from(int side) const {
        std::vector<const Seen*> out;
        for (const Seen& s : seen)
            if (s.from == side) out.push_back(&s);
        return out;
    }

    Net n{false};
    std::function<bool(const Seen&)> drop;
    std::vector<Seen> seen;
    std::vector<std::byte> src = std::vector<std::byte>(4096, std::byte{7});
    std::vector<std::byte> sink = std::vector<std::byte>(4096, std::byte{0});
    MemoryRegion mr_sink, mr_src;
    Sge sge{};
    SendWr write;
};

bool is_terminate(const Seen& s) {
    // FPDU length, then DDP untagged last (0x41) and RDMAP Terminate (0x47).
    return s.payload.size() > 4 && s.payload[2] == std::byte{0x41} &&
           s.payload[3] == std::byte{0x47};
}

// Each side's frames after the TERMINATE are the FIN handshake: no RST from
// either (issue 37: destroy_qp's second close used to reset ~10 us after the FIN).
void expect_clean_close(const TermRun& t) {
    for (const Seen& s : t.seen) EXPECT_FALSE(s.tcp.has(wire::tcp_flags::kRst)) << s.from;
    EXPECT_EQ(t.n.a.stats().resets_sent, 0u);
    EXPECT_EQ(t.n.b.stats().resets_sent, 0u);
    for (int side : {0, 1}) {
        auto frames = t.from(side);
        EXPECT_TRUE(std::any_of(frames.begin(), frames.end(),
                                [](const Seen* s) { return s->tcp.has(wire::tcp_flags::kFin); }))
            << "side " << side << " sent no FIN";
    }
}

// b hears a's TERMINATE, then (when a's FIN came in the same round) the
// clean end of the connection.
void expect_terminate_received(const TermRun& t) {
    const auto& q = t.n.sb.qp_events;
    ASSERT_GE(q.size(), 1u);
    ASSERT_LE(q.size(), 2u);
    EXPECT_EQ(q[0].type, QpEventType::kTerminateReceived);
    if (q.size() == 2) {
        EXPECT_EQ(q[1].type, QpEventType::kDisconnected);
        EXPECT_EQ(q[1].status, 0);
        EXPECT_EQ(q[1].error, QpError::kNone);
    }
}

TEST(DeviceTerminate, SentThenFinAndNoResetEitherSide) {
    TermRun t;
    ASSERT_TRUE(t.n.sb.dev.post_send(t.n.now, t.n.sb.qp, t.write).has_value());
    ASSERT_TRUE(t.close_on_terminate());
    ASSERT_EQ(t.n.sa.qp_events.size(), 1u);
    EXPECT_EQ(t.n.sa.qp_events[0].type, QpEventType::kTerminateSent);
    // a refused the Write's STag: an access error; b's end is the peer's TERMINATE.
    EXPECT_EQ(t.n.sa.qp_events[0].error, QpError::kAccess);
    expect_terminate_received(t);
    EXPECT_EQ(t.n.sb.qp_events[0].error, QpError::kFatal);
    EXPECT_EQ(t.n.sb.qp_events[0].term.layer, 1);  // DDP, tagged, invalid STag
    EXPECT_EQ(t.n.sb.qp_events[0].term.etype, 1);
    EXPECT_EQ(t.n.sb.qp_events[0].term.code, 0);
    // a's data: the TERMINATE alone, then its FIN right behind it in sequence.
    auto a = t.from(0);
    auto term = std::find_if(a.begin(), a.end(), [](const Seen* s) { return is_terminate(*s); });
    ASSERT_NE(term, a.end());
    const wire::SeqNumber fin_seq = (*term)->tcp.seq + (*term)->payload.size();
    auto fin = std::find_if(term, a.end(),
                            [](const Seen* s) { return s->tcp.has(wire::tcp_flags::kFin); });
    ASSERT_NE(fin, a.end());
    EXPECT_EQ((*fin)->tcp.seq + (*fin)->payload.size(), fin_seq);
    EXPECT_EQ(std::count_if(a.begin(), a.end(), [](const Seen* s) { return is_terminate(*s); }), 1);
    expect_clean_close(t);
}

// The segment carrying the TERMINATE is lost once: the stream retransmits
// it (the same bytes at the same sequence number), the peer gets it, and
// both close with FINs; nothing is reset.
TEST(DeviceTerminate, LostTerminateIsRetransmittedAndReachesThePeer) {
    bool lost = false;
    TermRun t([&](const Seen& s) {
        if (s.from != 0 || lost || !is_terminate(s)) return false;
        lost = true;
        return true;
    });
    ASSERT_TRUE(t.n.sb.dev.post_send(t.n.now, t.n.sb.qp, t.write).has_value());
    ASSERT_TRUE(t.close_on_terminate());
    ASSERT_TRUE(lost);
    std::vector<const Seen*> terms;
    for (const Seen* s : t.from(0))
        if (is_terminate(*s)) terms.push_back(s);
    ASSERT_GE(terms.size(), 2u);
    EXPECT_TRUE(terms[0]->dropped);
    EXPECT_FALSE(terms[1]->dropped);
    EXPECT_EQ(terms[1]->tcp.seq, terms[0]->tcp.seq);
    EXPECT_EQ(terms[1]->payload, terms[0]->payload);
    expect_terminate_received(t);
    expect_clean_close(t);
}

// b's bad Write and its FIN arrive before a's application reads: a's core
// has queued a's FIN at the peer's, so a's TERMINATE cannot go. The event
// says it was not sent, and nothing is sent but the FIN handshake.
TEST(DeviceTerminate, AfterThePeersFinIsReportedUnsent) {
    TermRun t;
    ASSERT_TRUE(t.n.sb.dev.post_send(t.n.now, t.n.sb.qp, t.write).has_value());
    ASSERT_TRUE(t.n.sb.dev.destroy_qp(t.n.now, t.n.sb.qp).has_value());  // FIN after the Write
    ASSERT_TRUE(t.n.run([&] { return t.n.sa.qp_events.size() >= 2; }));
    EXPECT_EQ(t.n.sa.qp_events[0].type, QpEventType::kTerminateUnsent);
    EXPECT_EQ(t.n.sa.qp_events[0].term.layer, 1);
    EXPECT_EQ(t.n.sa.qp_events[1].type, QpEventType::kDisconnected);
    EXPECT_EQ(t.n.sa.qp_events[1].status, 0);
    for (const Seen* s : t.from(0)) EXPECT_TRUE(s->payload.empty());
    ASSERT_TRUE(t.n.run([&] { return t.n.a.live_nodes() == 0 && t.n.b.live_nodes() == 0; }));
    EXPECT_EQ(t.n.a.stats().resets_sent, 0u);
    EXPECT_EQ(t.n.b.stats().resets_sent, 0u);
}

// A receive buffer that cannot hold the largest FPDU is refused up front:
// the engine reads an FPDU only when all of it has arrived.
// ---- transmit from registered memory (docs/perf.md "Copies")

// A Write of kSize from b's `src` to a's `sink`, both registered, once both QPs are up.
struct WriteSetup {
    static constexpr std::size_t kSize = 64 * 1024;
    explicit WriteSetup(Net& n) : src(kSize), sink(kSize, std::byte{0}) {
        EXPECT_TRUE(n.run([&] { return n.sa.up && n.sb.up; }));
        for (std::size_t i = 0; i < kSize; ++i) src[i] = std::byte(i * 5 + i / 253);
        mr_sink = *n.sa.dev.reg_mr(sink, kAccessRemoteWrite);
        mr_src = *n.sb.dev.reg_mr(src, 0);
        sge = {mr_src.addr, kSize, mr_src.lkey};
        wr.opcode = WrOpcode::kRdmaWrite;
        wr.sg_list = std::span(&sge, 1);
        wr.remote_addr = mr_sink.addr;
        wr.rkey = mr_sink.rkey;
    }
    std::vector<std::byte> src, sink;
    MemoryRegion mr_sink, mr_src;
    Sge sge;
    SendWr wr;
};

TEST(DeviceTransmit, WriteLeavesFromTheRegionAndCompletesAtTheAck) {
    Net n(true);
    WriteSetup w(n);
    const StreamInfo before = *n.b.stream_info(n.sb.conn);
    ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, w.wr).has_value());
    // Every frame reaches a; none of a's ACKs reaches b yet.
    std::size_t frames = 0;
    for (int round = 0; round < 100 && frames < 40; ++round) {
        while (auto f = n.b.poll_transmit()) {
            ++frames;
            n.a.receive(n.now, *f);
        }
        while (n.a.poll_transmit()) {
        }
        n.now += std::chrono::milliseconds(1);
        n.b.on_timer(n.now);
    }
    const StreamInfo mid = *n.b.stream_info(n.sb.conn);
    // The first window went (cwnd bounds it) and is not acknowledged: no completion.
    EXPECT_GT(frames, 5U);
    EXPECT_EQ(mid.acked, before.acked);
    WorkCompletion wc[4];
    EXPECT_EQ(n.sb.dev.poll_cq(n.sb.cq, wc), 0U);
    // The ACKs flow: the rest goes and the Write completes.
    ASSERT_TRUE(n.run([&] { return has(n.sb, WcOpcode::kRdmaWrite, 1); }));
    EXPECT_TRUE(w.sink == w.src);
    const StreamInfo after = *n.b.stream_info(n.sb.conn);
    EXPECT_EQ(after.acked, after.written);  // the whole Write acknowledged
    // Only the FPDU headers and trailers were copied into the send buffer;
    // the payload went from the region into each frame.
    const std::uint64_t copied_in = after.copied_in - before.copied_in;
    EXPECT_LT(copied_in, WriteSetup::kSize / 50) << copied_in;
    EXPECT_GE(after.copied_to_frames - before.copied_to_frames, WriteSetup::kSize);
}

TEST(DeviceTransmit, RetransmissionRereadsTheRegion) {
    Net n(false);  // with CRC the peer would refuse it: the CRC is the first sending's
    WriteSetup w(n);
    ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, w.wr).has_value());
    std::size_t lost = 0;
    while (n.b.poll_transmit()) ++lost;  // the first flight is lost
    ASSERT_GT(lost, 0U);
    // The memory changes before the retransmission (against the rule that
    // it stays unchanged until the completion): the peer gets the new bytes.
    w.src[100] = ~w.src[100];
    ASSERT_TRUE(n.run([&] { return has(n.sb, WcOpcode::kRdmaWrite, 1); }));
    EXPECT_TRUE(w.sink == w.src);
    EXPECT_GT(n.b.stream_info(n.sb.conn)->retransmitted_segments, 0U);
}

TEST(DeviceTransmit, DeregWithUnackedBytesCopiesThemFirst) {
    Net n(false);
    WriteSetup w(n);
    const std::vector<std::byte> original = w.src;
    ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, w.wr).has_value());
    while (n.b.poll_transmit()) {
    }  // lost
    const std::uint64_t copied_before = n.b.stream_info(n.sb.conn)->copied_in;
    // The region goes while its bytes are unacknowledged: the stream copies
    // them first, so the retransmissions read the copy, not the memory.
    ASSERT_TRUE(n.sb.dev.dereg_mr(w.mr_src.handle).has_value());
    EXPECT_GT(n.b.stream_info(n.sb.conn)->copied_in, copied_before);
    std::fill(w.src.begin(), w.src.end(), std::byte{0x5A});
    ASSERT_TRUE(n.run([&] { return has(n.sb, WcOpcode::kRdmaWrite, 1); }));
    EXPECT_TRUE(w.sink == original);
}

TEST(DeviceTransmit, DestroyedQpLeavesNothingByReference) {
    Net n(false);
    WriteSetup w(n);
    const std::vector<std::byte> original = w.src;
    ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, w.wr).has_value());
    const std::uint64_t copied_before = n.b.stream_info(n.sb.conn)->copied_in;
    ASSERT_TRUE(n.sb.dev.destroy_qp(n.now, n.sb.qp).has_value());
    // The stream goes on (a graceful close after the bytes) from its own copy.
    EXPECT_GT(n.b.stream_info(n.sb.conn)->copied_in, copied_before);
    WorkCompletion wc[4];
    ASSERT_EQ(n.sb.dev.poll_cq(n.sb.cq, wc), 1U);
    EXPECT_EQ(wc[0].status, WcStatus::kWrFlushErr);  // the QP went before the ACK
    std::fill(w.src.begin(), w.src.end(), std::byte{0x5A});
    ASSERT_TRUE(n.run([&] { return !n.sa.qp_events.empty(); }));  // a's QP hears the end
    std::size_t placed = 0;
    for (std::size_t i = 0; i < w.sink.size(); ++i) {
        if (w.sink[i] == std::byte{0}) continue;
        ++placed;
        ASSERT_EQ(w.sink[i], original[i]) << i;
    }
    EXPECT_GT(placed, 0U);
}

// ---- frames in parts (Core::poll_transmit_parts, Core::receive_parts)

// An RDMA Write sent from registered memory and handed over in parts reaches the sink with
// one copy of each byte: the sender's frames read the region where it lies (nothing copied
// into frames), the receiver places every FPDU straight from the pieces, its header, payload
// and CRC in separate ones (or cut smaller still: an FPDU's length field split in two).
TEST(DeviceParts, WriteIsPlacedFromThePiecesWithOneCopy) {
    for (bool crc : {false, true}) {
        for (std::size_t cut : {std::size_t{0}, std::size_t{7}, std::size_t{1}}) {
            Net n(crc, 44 * 1460);  // segments of many FPDUs: above the copybreak
            n.in_parts = true;
            n.cut = cut;
            WriteSetup w(n);
            const StreamInfo before_b = *n.b.stream_info(n.sb.conn);
            const StreamInfo before_a = *n.a.stream_info(n.sa.conn);
            const Device::Placement before = n.sa.dev.placement();
            ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, w.wr).has_value());
            ASSERT_TRUE(n.run([&] { return has(n.sb, WcOpcode::kRdmaWrite, 1); }));
            EXPECT_TRUE(w.sink == w.src) << "crc " << crc << " cut " << cut;
            const Device::Placement p = n.sa.dev.placement();
            EXPECT_EQ(p.placed - before.placed, WriteSetup::kSize);
            EXPECT_EQ(p.direct - before.direct, WriteSetup::kSize);
            const StreamInfo b = *n.b.stream_info(n.sb.conn);
            const StreamInfo a = *n.a.stream_info(n.sa.conn);
            EXPECT_EQ(b.copied_to_frames - before_b.copied_to_frames, 0u);
            EXPECT_EQ(a.copied_received - before_a.copied_received, 0u);
            EXPECT_GE(n.multi_piece, 2u);  // the Write's segments, each many FPDUs
        }
    }
}

// A Send into a receive of two SGEs, and the Read Response of an RDMA Read, sent from
// registered memory and handed over in parts: each FPDU across pieces is read where it lies
// (its CRC summed over them) and placed from them, nothing joined; only a message's last
// segment, when it is shorter than the copybreak (4 KiB), is copied into its frame.
TEST(DeviceParts, SendAndReadResponseArePlacedFromThePieces) {
    constexpr std::size_t kSize = 64 * 1024;
    constexpr std::size_t kFirstSge = 40000;  // a piece of some FPDU straddles the SGEs
    for (bool crc : {false, true}) {
        for (std::size_t cut : {std::size_t{0}, std::size_t{7}, std::size_t{1}}) {
            Net n(crc, 44 * 1460);
            n.in_parts = true;
            n.cut = cut;
            ASSERT_TRUE(n.run([&] { return n.sa.up && n.sb.up; }));
            std::vector<std::byte> src(kSize), into(kSize, std::byte{0}), read(kSize);
            for (std::size_t i = 0; i < kSize; ++i) src[i] = std::byte(i * 3 + i / 251);
            const auto mr_src = *n.sb.dev.reg_mr(src, kAccessRemoteRead);
            const auto mr_into = *n.sa.dev.reg_mr(into, kAccessLocalWrite);
            const auto mr_read = *n.sa.dev.reg_mr(read, kAccessLocalWrite);
            Sge recv_sges[2] = {{mr_into.addr, kFirstSge, mr_into.lkey},
                                {mr_into.addr + kFirstSge, kSize - kFirstSge, mr_into.lkey}};
            ASSERT_TRUE(n.sa.dev.post_recv(n.now, n.sa.qp, {1, recv_sges}).has_value());
            const StreamInfo before_b = *n.b.stream_info(n.sb.conn);
            const StreamInfo before_a = *n.a.stream_info(n.sa.conn);
            const Device::Placement before = n.sa.dev.placement();
            Sge send_sge{mr_src.addr, kSize, mr_src.lkey};
            SendWr send;
            send.sg_list = std::span(&send_sge, 1);
            ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, send).has_value());
            ASSERT_TRUE(n.run([&] { return has(n.sa, WcOpcode::kRecv, 1); }));
            EXPECT_TRUE(into == src) << "crc " << crc << " cut " << cut;
            Sge read_sge{mr_read.addr, kSize, mr_read.lkey};
            SendWr rd;
            rd.opcode = WrOpcode::kRdmaRead;
            rd.sg_list = std::span(&read_sge, 1);
            rd.remote_addr = mr_src.addr;
            rd.rkey = mr_src.rkey;
            ASSERT_TRUE(n.sa.dev.post_send(n.now, n.sa.qp, rd).has_value());
            ASSERT_TRUE(n.run([&] { return has(n.sa, WcOpcode::kRdmaRead, 1); }));
            EXPECT_TRUE(read == src) << "crc " << crc << " cut " << cut;
            const Device::Placement p = n.sa.dev.placement();
            EXPECT_EQ(p.placed - before.placed, 2 * kSize);
            EXPECT_EQ(p.direct - before.direct, 2 * kSize);
            EXPECT_EQ(p.joined - before.joined, 0u);
            EXPECT_LT(n.b.stream_info(n.sb.conn)->copied_to_frames - before_b.copied_to_frames,
                      2u * 4096);
            EXPECT_EQ(n.a.stream_info(n.sa.conn)->copied_received - before_a.copied_received, 0u);
            EXPECT_GE(n.multi_piece, 4u);
        }
    }
}

// Below the copybreak (cm::kGatherMin) a segment whose payload lies in several pieces, one
// MSS-sized FPDU, comes whole: copied into its frame, placed from the frame.
TEST(DeviceParts, OneFpduSegmentsComeWholeBelowTheCopybreak) {
    Net n(false);
    n.in_parts = true;
    WriteSetup w(n);
    const StreamInfo before = *n.b.stream_info(n.sb.conn);
    ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, w.wr).has_value());
    ASSERT_TRUE(n.run([&] { return has(n.sb, WcOpcode::kRdmaWrite, 1); }));
    EXPECT_TRUE(w.sink == w.src);
    EXPECT_EQ(n.multi_piece, 0u);
    EXPECT_GE(n.b.stream_info(n.sb.conn)->copied_to_frames - before.copied_to_frames,
              WriteSetup::kSize);
    EXPECT_GE(n.sa.dev.placement().direct, WriteSetup::kSize);
}

// A bit flipped in a Write's payload on the way, past TCP (checksum offload: a link that
// trusts its frames): the MPA CRC summed over the pieces refuses it, so it is not placed
// from them; the buffer path finds the same CRC error and answers with the TERMINATE
// (RFC 5044 section 8).
TEST(DeviceParts, BadCrcOverThePiecesIsNotPlaced) {
    Net n(true, 44 * 1460, true);
    n.in_parts = true;
    WriteSetup w(n);
    int frames = 0;
    n.tamper = [&](std::vector<std::byte>& payload) {
        if (payload.size() > 1000 && ++frames == 1) payload[500] ^= std::byte{0x10};
    };
    ASSERT_TRUE(n.sb.dev.post_send(n.now, n.sb.qp, w.wr).has_value());
    ASSERT_TRUE(n.run([&] { return !n.sa.qp_events.empty() && !n.sb.qp_events.empty(); }));
    EXPECT_EQ(n.sa.qp_events[0].type, QpEventType::kTerminateSent);
    EXPECT_EQ(n.sb.qp_events[0].type, QpEventType::kTerminateReceived);
    // The bad FPDU is the Write's first: nothing of it or after it was placed.
    EXPECT_EQ(n.sa.dev.placement().placed, 0u);
    EXPECT_FALSE(w.sink == w.src);
}

TEST(DeviceConfig, ReceiveBufferSmallerThanTheLargestFpduIsRefused) {
    for (std::uint32_t buffer : {std::uint32_t{65535}, std::uint32_t{256 * 1024}}) {
        CoreConfig c;
        c.stream.recv_buffer = buffer;
        Core core(c);
        Device dev(core);
        const IpAddr a = *IpAddr::parse("192.0.2.1");
        ASSERT_TRUE(core.add_address(a).has_value());
        ConnectParams p;
        p.local = {a, 0};
        p.remote = {*IpAddr::parse("192.0.2.2"), 4791};
        auto conn = core.connect(kInstantZero, p);
        ASSERT_TRUE(conn.has_value());
        auto cq = dev.create_cq(4);
        ASSERT_TRUE(cq.has_value());
        // With room for an FPDU the refusal is the connection's state (not
        // established yet); without, the buffer.
        EXPECT_EQ(dev.create_qp(kInstantZero, *conn, {*cq, *cq}).error(),
                  buffer < 65544 ? VerbsError::kInvalidArgument : VerbsError::kWrongState);
    }
}

}  // namespace
}  // namespace iwcm::rdma::test
