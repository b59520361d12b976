// Replays real conversations with Linux soft-iWARP (siw) against the engine:
// siw's bytes from a recording reach an Engine, segment by segment as they
// came, while a small rping driver plays the recorded peer's role (rdma-core
// rping's exchange, tools/rping.hpp). Every FPDU the engine sends is compared
// with the recorded peer's FPDU at the same place, byte for byte where the
// protocol fixes it (DDP and RDMAP headers, MSNs, siw's STags and offsets,
// sizes, rping's data, CRC) and masked where it does not: our own STags and
// addresses, which a replay cannot reproduce. siw's FPDUs that name our
// buffers are rewritten to the buffers the engine advertised (and their CRC
// resealed), as siw would have named them.
//
// Read first: siw_replay.hpp (the recordings), docs/fixtures.md (what each
// recording shows), tools/rping.hpp (the exchange), src/rdma/engine.hpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "siw_replay.hpp"
#include "tools/rping.hpp"
#include "wire/crc32c.hpp"

namespace iwcm::rdma::test {
namespace {

// One byte link whose received bytes the test hands in and whose sent
// records it keeps.
class ReplayLinks final : public Links {
public:
    std::size_t send_space(LinkId) override { return kMaxFpdu * 64; }
    bool send_record(LinkId, wire::Bytes record) override {
        if (closed) return false;
        sent.emplace_back(record.begin(), record.end());
        return true;
    }
    std::size_t readable(LinkId) override { return rx_.size() - head_; }
    wire::Bytes peek(LinkId) override { return {rx_.data() + head_, rx_.size() - head_}; }
    void consume(LinkId, std::size_t n) override { head_ += n; }
    void close(LinkId, bool abortive) override {
        closed = true;
        closed_abortive = abortive;
    }
    void deliver(wire::Bytes b) {
        rx_.erase(rx_.begin(), rx_.begin() + static_cast<std::ptrdiff_t>(head_));
        head_ = 0;
        rx_.insert(rx_.end(), b.begin(), b.end());
    }

    std::vector<ByteVec> sent;
    bool closed = false;
    bool closed_abortive = false;

private:
    ByteVec rx_;
    std::size_t head_ = 0;
};

struct RoleOptions {
    bool server = false;
    std::uint32_t size = 100;      // -S of the recording
    std::uint32_t read_extra = 0;  // the server reads this much more (a fault)
    std::uint32_t count = 1;       // -C: the client's iterations
};

enum WrId : std::uint64_t { kRecv = 1, kSendInfo, kRead, kWrite };

// rping's exchange over the Engine, one step per completion (as
// tools/rping.cpp does it over a Device).
class RpingRole {
public:
    RpingRole(Engine& e, QpHandle qp, CqHandle cq, const RoleOptions& o)
        : e_(e), qp_(qp), cq_(cq), o_(o) {
        const std::uint32_t rw = kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite;
        reg(recv_, tools::RpingInfo::kWireSize, kAccessLocalWrite);
        reg(send_, tools::RpingInfo::kWireSize, 0);
        reg(rdma_, o.size + o.read_extra, rw);
        reg(start_, o.size, rw);
    }

    void start() {
        post_recv();
        if (!o_.server) client_iteration();
    }

    // Moves every completion on; false when nothing was there.
    bool poll() {
        WorkCompletion wcs[16];
        const std::size_t n = e_.poll_cq(cq_, wcs);
        for (std::size_t i = 0; i < n; ++i) on_wc(wcs[i]);
        return n > 0;
    }

    std::uint32_t iterations = 0;
    std::uint32_t verified = 0;
    std::vector<WorkCompletion> failed;

private:
    struct Mem {
        ByteVec mem;
        MemoryRegion mr;
    };
    enum class Step { kWaitStart, kReading, kWaitSink, kWriting, kWaitGoRead, kWaitGoWrite };

    void reg(Mem& m, std::size_t n, std::uint32_t access) {
        m.mem.assign(n, std::byte{0});
        auto mr = e_.reg_mr(m.mem, access);
        ASSERT_TRUE(mr.has_value());
        m.mr = *mr;
    }
    void post_recv() {
        const Sge sge{recv_.mr.addr, tools::RpingInfo::kWireSize, recv_.mr.lkey};
        RecvWr wr;
        wr.wr_id = kRecv;
        wr.sg_list = std::span(&sge, 1);
        EXPECT_TRUE(e_.post_recv(qp_, wr).has_value());
    }
    void post(std::uint64_t id, WrOpcode op, const Mem& m, std::uint32_t len,
              const tools::RpingInfo& to = {}) {
        const Sge sge{m.mr.addr, len, m.mr.lkey};
        SendWr wr;
        wr.wr_id = id;
        wr.opcode = op;
        wr.sg_list = std::span(&sge, 1);
        wr.remote_addr = to.buf;
        wr.rkey = to.rkey;
        EXPECT_TRUE(e_.post_send(qp_, wr).has_value());
    }
    void send_info(const Mem& of, std::uint32_t size) {
        const auto bytes = tools::RpingInfo{of.mr.addr, of.mr.rkey, size}.encode();
        std::copy(bytes.begin(), bytes.end(), send_.mem.begin());
        post(kSendInfo, WrOpcode::kSend, send_, tools::RpingInfo::kWireSize);
    }
    void client_iteration() {
        std::fill(rdma_.mem.begin(), rdma_.mem.end(), std::byte{0});
        tools::rping_fill(start_.mem, iterations);
        send_info(start_, o_.size);
        step_ = Step::kWaitGoRead;
    }

    void on_wc(const WorkCompletion& wc) {
        if (wc.status != WcStatus::kSuccess) {
            failed.push_back(wc);
            return;
        }
        if (wc.opcode == WcOpcode::kRecv) return on_recv();
        if (wc.opcode == WcOpcode::kRdmaRead) {
            EXPECT_EQ(step_, Step::kReading);
            ByteVec want(peer_.size);
            tools::rping_fill(want, iterations);
            if (std::equal(want.begin(), want.end(), rdma_.mem.begin())) ++verified;
            std::fill(send_.mem.begin(), send_.mem.end(), std::byte{0});
            post(kSendInfo, WrOpcode::kSend, send_, tools::RpingInfo::kWireSize);
            step_ = Step::kWaitSink;
        } else if (wc.opcode == WcOpcode::kRdmaWrite) {
            EXPECT_EQ(step_, Step::kWriting);
            post(kSendInfo, WrOpcode::kSend, send_, tools::RpingInfo::kWireSize);
            ++iterations;
            step_ = Step::kWaitStart;
        }
    }

    void on_recv() {
        const auto info = tools::RpingInfo::decode(
            std::span<const std::byte, tools::RpingInfo::kWireSize>(recv_.mem.data(), 16));
        post_recv();
        if (!o_.server) {
            if (step_ == Step::kWaitGoRead) {
                send_info(rdma_, o_.size);
                step_ = Step::kWaitGoWrite;
                return;
            }
            EXPECT_EQ(step_, Step::kWaitGoWrite);
            if (std::equal(start_.mem.begin(), start_.mem.end(), rdma_.mem.begin())) ++verified;
            if (++iterations < o_.count) client_iteration();
            return;
        }
        if (step_ == Step::kWaitStart) {
            peer_ = info;
            std::fill(rdma_.mem.begin(), rdma_.mem.end(), std::byte{0});
            post(kRead, WrOpcode::kRdmaRead, rdma_, info.size + o_.read_extra, info);
            step_ = Step::kReading;
            return;
        }
        EXPECT_EQ(step_, Step::kWaitSink);
        // rping writes strlen(rdma_buf) + 1: the text and its NUL.
        const auto nul = std::find(rdma_.mem.begin(), rdma_.mem.end(), std::byte{0});
        const auto len = static_cast<std::uint32_t>(nul - rdma_.mem.begin()) + 1;
        post(kWrite, WrOpcode::kRdmaWrite, rdma_, std::min(len, peer_.size), info);
        step_ = Step::kWriting;
    }

    Engine& e_;
    QpHandle qp_;
    CqHandle cq_;
    RoleOptions o_;
    Mem recv_, send_, rdma_, start_;
    tools::RpingInfo peer_;
    Step step_ = Step::kWaitStart;
};

// A buffer of ours: as the recording named it, and as the engine does.
struct Mapping {
    std::uint32_t rec_stag = 0, new_stag = 0;
    std::uint64_t rec_to = 0, new_to = 0;
    std::uint32_t len = 0;
};

void put_be(ByteVec& v, std::size_t off, std::uint64_t x, int bytes) {
    for (int i = bytes - 1; i >= 0; --i, x >>= 8) v[off + i] = static_cast<std::byte>(x & 0xFF);
}

void reseal(ByteVec& r, bool crc) {
    const std::uint32_t c = crc ? wire::crc32c(wire::Bytes(r.data(), r.size() - 4)) : 0;
    for (int i = 0; i < 4; ++i) r[r.size() - 4 + i] = static_cast<std::byte>(c >> (8 * i));
}

struct ReplayOptions {
    RoleOptions role;
    bool peer_crc_corrupt_first = false;  // the recorded peer broke its first CRC
};

class Replay {
public:
    Replay(const std::string& name, const ReplayOptions& o) : o_(o), engine_(links_, {}) {
        auto c = load_conversation(name);
        EXPECT_TRUE(c.has_value()) << name;
        if (c) conv_ = std::move(*c);
        cq_ = *engine_.create_cq(256);
        QpParams p;
        p.link = {0};
        p.attr.send_cq = p.attr.recv_cq = cq_;
        p.attr.max_send_wr = 16;
        p.attr.max_recv_wr = 2;
        p.attr.max_sge = 1;
        p.attr.sq_sig_all = true;
        p.crc = conv_.crc;
        p.max_fpdu = 1448;
        for (const auto& f : conv_.peer.fpdus)
            p.max_fpdu = std::max<std::uint32_t>(p.max_fpdu, static_cast<std::uint32_t>(f.size()));
        qp_ = *engine_.create_qp(p);
        role_.emplace(engine_, qp_, cq_, o.role);
    }

    // siw's bytes segment by segment; after each, the engine and the role
    // run until quiet and what the engine sent is compared.
    void run() {
        role_->start();
        settle();
        std::size_t fed = 0, next_fpdu = 0;
        for (std::size_t end : conv_.siw.ends) {
            while (next_fpdu < conv_.siw.starts.size() && conv_.siw.starts[next_fpdu] < end)
                translate(next_fpdu++);
            links_.deliver(wire::Bytes(conv_.siw.stream.data() + fed, end - fed));
            fed = end;
            settle();
        }
        EXPECT_EQ(compared_, conv_.peer.fpdus.size()) << "FPDUs the recorded peer sent";
        EXPECT_EQ(links_.sent.size(), conv_.peer.fpdus.size()) << "FPDUs the engine sent";
    }

    std::vector<QpEvent> events() {
        std::vector<QpEvent> out;
        while (auto e = engine_.poll_qp_event()) out.push_back(*e);
        return out;
    }

    Conversation conv_;
    ReplayOptions o_;
    ReplayLinks links_;
    Engine engine_;
    CqHandle cq_;
    QpHandle qp_;
    std::optional<RpingRole> role_;
    std::vector<Mapping> maps_;
    std::size_t compared_ = 0;
    std::size_t translated_ = 0;  // siw FPDUs that named our buffers

private:
    void settle() {
        for (int i = 0; i < 64; ++i) {
            engine_.on_readable(qp_);
            engine_.on_writable(qp_);
            if (!role_->poll() && links_.readable({0}) == 0) break;
        }
        while (compared_ < links_.sent.size() && compared_ < conv_.peer.fpdus.size()) {
            compare(links_.sent[compared_], conv_.peer.fpdus[compared_], compared_);
            ++compared_;
        }
    }

    // Masks (and learns) the fields where the engine names its own buffers.
    bool mask_ours(ByteVec& got, const ByteVec& want) {
        const Fpdu w{want};
        const std::size_t p = w.payload();
        std::size_t off = 0;
        if (!w.tagged() && w.opcode() == kOpSend && !o_.role.server && w.qn() == 0 &&
            want.size() >= p + 16 + 4) {
            // Our Send of {buffer, rkey, size}: the buffer and rkey are ours.
            maps_.push_back({be(want, p + 8, 4), be(got, p + 8, 4), be64(want, p), be64(got, p),
                             be(want, p + 12, 4)});
            off = p;
        } else if (!w.tagged() && w.opcode() == kOpReadRequest) {
            // Our Read Request: the sink STag and TO are ours.
            maps_.push_back({be(want, p, 4), be(got, p, 4), be64(want, p + 4), be64(got, p + 4),
                             be(want, p + 12, 4)});
            off = p;
        } else {
            return false;
        }
        const bool differs = !std::equal(want.begin() + static_cast<std::ptrdiff_t>(off),
                                         want.begin() + static_cast<std::ptrdiff_t>(off + 12),
                                         got.begin() + static_cast<std::ptrdiff_t>(off));
        std::copy_n(want.begin() + static_cast<std::ptrdiff_t>(off), 12,
                    got.begin() + static_cast<std::ptrdiff_t>(off));
        return differs;
    }

    void compare(const ByteVec& got_in, const ByteVec& want, std::size_t i) {
        ASSERT_EQ(got_in.size(), want.size()) << "FPDU " << i << " of the recorded peer";
        ByteVec got = got_in;
        // Our CRC is right for what we sent (zero without CRC) ...
        ByteVec resealed = got_in;
        reseal(resealed, conv_.crc);
        EXPECT_EQ(got_in, resealed) << "FPDU " << i << ": its CRC field";
        // ... and matches the recording's wherever our buffers are not named.
        const bool masked = mask_ours(got, want);
        if (masked || (o_.peer_crc_corrupt_first && i == 0))
            std::copy(want.end() - 4, want.end(), got.end() - 4);
        const auto at = std::mismatch(got.begin(), got.end(), want.begin());
        EXPECT_TRUE(at.first == got.end())
            << "FPDU " << i << " (opcode " << int(Fpdu{want}.opcode()) << ", " << want.size()
            << " bytes) differs from the recorded peer's at byte " << (at.first - got.begin());
    }

    // siw's FPDU names our buffer (a Write or Read Response into it, a Read
    // Request from it): as the recording named it, now as the engine does.
    void translate(std::size_t k) {
        ByteVec& r = conv_.siw.fpdus[k];
        const Fpdu f{r};
        std::size_t stag_at = 0;
        if (f.tagged() && (f.opcode() == kOpWrite || f.opcode() == kOpReadResponse))
            stag_at = 4;
        else if (!f.tagged() && f.opcode() == kOpReadRequest)
            stag_at = f.payload() + 16;  // the source: our buffer
        if (stag_at == 0) return;
        const std::uint32_t stag = be(r, stag_at, 4);
        const std::uint64_t to = be64(r, stag_at + 4);
        const auto m = std::find_if(maps_.begin(), maps_.end(), [&](const Mapping& x) {
            return x.rec_stag == stag && to >= x.rec_to && to <= x.rec_to + x.len;
        });
        ASSERT_NE(m, maps_.end()) << "siw's FPDU " << k << " names STag " << std::hex << stag
                                  << " that the recorded peer never advertised";
        put_be(r, stag_at, m->new_stag, 4);
        put_be(r, stag_at + 4, m->new_to + (to - m->rec_to), 8);
        reseal(r, conv_.crc);
        std::copy(r.begin(), r.end(),
                  conv_.siw.stream.begin() + static_cast<std::ptrdiff_t>(conv_.siw.starts[k]));
        ++translated_;
    }
};

struct Case {
    const char* file;
    bool server;  // the engine plays the rping server (siw was the client)
    std::uint32_t size;
    std::uint32_t iterations;
    bool crc;
};

void PrintTo(const Case& k, std::ostream* os) {
    *os << k.file;
}

class SiwRping : public ::testing::TestWithParam<Case> {};

// A whole rping conversation: the engine's FPDUs are the recorded peer's,
// every iteration completes and verifies, nothing fails.
TEST_P(SiwRping, EngineSendsWhatThePeerSent) {
    const Case& k = GetParam();
    ReplayOptions o;
    o.role.server = k.server;
    o.role.size = k.size;
    o.role.count = k.iterations;
    Replay r(k.file, o);
    ASSERT_EQ(r.conv_.crc, k.crc);
    ASSERT_EQ(r.conv_.siw_initiated, k.server);
    r.run();
    EXPECT_EQ(r.role_->iterations, k.iterations);
    EXPECT_EQ(r.role_->verified, k.iterations);
    EXPECT_TRUE(r.role_->failed.empty()) << to_string(r.role_->failed.front().status);
    EXPECT_TRUE(r.events().empty());
    // siw named our buffers: as the client in its Read Responses (one per
    // DDP segment), as the server in its Read Request and its Write.
    EXPECT_GE(r.translated_, (k.server ? 1u : 2u) * k.iterations);
}

INSTANTIATE_TEST_SUITE_P(Recordings, SiwRping,
                         ::testing::Values(Case{"client-rping-crc.pcap", true, 64, 1, true},
                                           Case{"client-rping-nocrc.pcap", true, 64, 1, false},
                                           Case{"client-rping-64k-crc.pcap", true, 65535, 1, true},
                                           Case{"iwcm-server-crc.pcap", true, 100, 2, true},
                                           Case{"iwcm-server-nocrc.pcap", true, 100, 2, false},
                                           Case{"iwcm-server-64k-crc.pcap", true, 65535, 1, true},
                                           Case{"server-rping-crc.pcap", false, 100, 2, true},
                                           Case{"server-rping-nocrc.pcap", false, 100, 2, false},
                                           Case{"iwcm-client-crc.pcap", false, 100, 2, true},
                                           Case{"iwcm-client-nocrc.pcap", false, 100, 2, false}),
                         [](const auto& info) {
                             std::string s = info.param.file;
                             s = s.substr(0, s.find('.'));
                             std::replace(s.begin(), s.end(), '-', '_');
                             return s;
                         });

// rping_peer.py's client broke the CRC of its first Send; siw answered with
// a Terminate (control `02 02 00 00`: siw's bit order for LLP, type 0, code
// 2, an MPA CRC error; read the RFC's way the same byte says RDMAP, remote
// operation error, code 2, and nothing in the word tells the two apart).
TEST(SiwTerminate, CrcErrorTerminateFromSiwEndsTheQp) {
    ReplayOptions o;
    o.role.size = 100;
    o.peer_crc_corrupt_first = true;
    Replay r("terminate-crc.pcap", o);
    ASSERT_TRUE(r.conv_.crc);
    ASSERT_EQ(r.conv_.siw.fpdus.size(), 1u);
    r.run();
    const auto ev = r.events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, QpEventType::kTerminateReceived);
    EXPECT_EQ(ev[0].term.control, 0x02020000u);
    EXPECT_EQ(ev[0].term.layer, 0);
    EXPECT_EQ(ev[0].term.etype, 2);
    EXPECT_EQ(ev[0].term.code, 2);
    EXPECT_FALSE(ev[0].term.siw_order);
    EXPECT_NE(describe(ev[0].term).find("control 02 02 00 00"), std::string::npos);
    // Our Send had gone; the receive rping posted is flushed; the
    // connection closes gracefully (no Terminate of ours back).
    ASSERT_EQ(r.role_->failed.size(), 1u);
    EXPECT_EQ(r.role_->failed[0].wr_id, kRecv);
    EXPECT_EQ(r.role_->failed[0].status, WcStatus::kWrFlushErr);
    EXPECT_TRUE(r.links_.closed);
    EXPECT_FALSE(r.links_.closed_abortive);
    EXPECT_EQ(r.links_.sent.size(), 1u);
    EXPECT_EQ(r.role_->iterations, 0u);
}

// rping_peer.py's server asked siw for 200 bytes of a 100-byte buffer; siw
// answered with a Terminate (control `10 01 07 00`: RDMAP, remote protection
// error, base or bounds violation, M, D and R set, all in siw's bit order,
// which the low M/D/R bits give away), quoting our Read Request.
TEST(SiwTerminate, ReadBeyondBoundsTerminateFailsTheRead) {
    ReplayOptions o;
    o.role.server = true;
    o.role.size = 100;
    o.role.read_extra = 100;
    Replay r("terminate-read-bounds.pcap", o);
    ASSERT_EQ(r.conv_.siw.fpdus.size(), 2u);
    r.run();
    EXPECT_EQ(r.translated_, 0u);  // siw quotes our request; it names nothing of ours
    const auto ev = r.events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, QpEventType::kTerminateReceived);
    EXPECT_EQ(ev[0].term.control, 0x10010700u);
    EXPECT_TRUE(ev[0].term.siw_order);
    EXPECT_EQ(ev[0].term.layer, 0);  // RDMAP
    EXPECT_EQ(ev[0].term.etype, 1);  // remote protection error
    EXPECT_EQ(ev[0].term.code, 1);   // base or bounds violation
    EXPECT_NE(describe(ev[0].term).find("control 10 01 07 00 in siw's bit order"),
              std::string::npos)
        << describe(ev[0].term);
    // The Read in flight takes siw's reason; the posted receive is flushed.
    ASSERT_EQ(r.role_->failed.size(), 2u);
    EXPECT_EQ(r.role_->failed[0].wr_id, kRead);
    EXPECT_EQ(r.role_->failed[0].status, WcStatus::kRemAccessErr);
    EXPECT_EQ(r.role_->failed[1].wr_id, kRecv);
    EXPECT_EQ(r.role_->failed[1].status, WcStatus::kWrFlushErr);
    EXPECT_TRUE(r.links_.closed);
    EXPECT_FALSE(r.links_.closed_abortive);
    EXPECT_EQ(r.role_->verified, 0u);
}

// ---- Send with Invalidate (tests/fixtures/siw/send_inv_peer.c, docs/fixtures.md)

constexpr std::uint8_t kOpSendInvalidate = 4;

// siw's Send with Invalidate, recorded with `send_inv_peer -c` in the guest and ours as
// the server: it names, in the untagged header's first word, the rkey our Send gave it.
// Fed to the engine with the engine's own region's STag in that word, it invalidates
// the region before the receive completes: IBV_WC_WITH_INV and that key.
TEST(SiwSendInvalidate, SiwsSendWithInvalidateInvalidatesOurRegion) {
    auto c = load_conversation("iwcm-server-send-inv.pcap");
    ASSERT_TRUE(c.has_value());
    ASSERT_TRUE(c->siw_initiated);
    ASSERT_EQ(c->peer.fpdus.size(), 1u);  // our Send of the region's rkey
    ASSERT_EQ(c->siw.fpdus.size(), 1u);   // siw's Send with Invalidate
    const ByteVec& ours = c->peer.fpdus[0];
    const ByteVec& theirs = c->siw.fpdus[0];
    const Fpdu f{theirs};
    ASSERT_FALSE(f.tagged());
    EXPECT_EQ(f.opcode(), kOpSendInvalidate);
    EXPECT_EQ(f.qn(), 0u);
    EXPECT_EQ(be(theirs, 4, 4), be(ours, Fpdu{ours}.payload(), 4));

    ReplayLinks links;
    Engine engine(links, {});
    const CqHandle cq = *engine.create_cq(16);
    QpParams p;
    p.link = {0};
    p.attr.send_cq = p.attr.recv_cq = cq;
    p.crc = c->crc;
    const QpHandle qp = *engine.create_qp(p);
    std::vector<std::byte> region(64), sink(64);
    const MemoryRegion mr = *engine.reg_mr(region, kAccessLocalWrite | kAccessRemoteWrite);
    const MemoryRegion mr_sink = *engine.reg_mr(sink, kAccessLocalWrite);
    Sge d{mr_sink.addr, 64, mr_sink.lkey};
    ASSERT_TRUE(engine.post_recv(qp, {7, std::span(&d, 1)}).has_value());

    ByteVec fpdu = theirs;
    put_be(fpdu, 4, mr.rkey, 4);
    reseal(fpdu, c->crc);
    links.deliver(fpdu);
    engine.on_readable(qp);
    WorkCompletion wc[4];
    ASSERT_EQ(engine.poll_cq(cq, wc), 1u);
    EXPECT_EQ(wc[0].wr_id, 7u);
    EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
    EXPECT_EQ(wc[0].opcode, WcOpcode::kRecv);
    const std::size_t len = theirs.size() - f.payload() - 4;
    EXPECT_EQ(wc[0].byte_len, len);
    EXPECT_TRUE(wc[0].with_invalidate);
    EXPECT_EQ(wc[0].invalidated_rkey, mr.rkey);
    EXPECT_TRUE(std::equal(sink.begin(), sink.begin() + static_cast<std::ptrdiff_t>(len),
                           theirs.begin() + static_cast<std::ptrdiff_t>(f.payload())));
    EXPECT_FALSE(engine.poll_qp_event().has_value());
    EXPECT_TRUE(links.sent.empty());
    // The region's STag names it no more, for us either.
    Sge own{mr.addr, 8, mr.lkey};
    SendWr w;
    w.sg_list = std::span(&own, 1);
    EXPECT_EQ(engine.post_send(qp, w).error(), VerbsError::kLocalProtection);
}

// Ours to siw, recorded with ours as the client (`run --settle 500`) and `send_inv_peer
// -s` in the guest: our Send with Invalidate names siw's rkey from its Send, and siw takes
// it (its log: "siw_invalidate_stag: STag ... now invalid"). It answers no TERMINATE:
// after its Send, its side carries nothing but the FIN.
TEST(SiwSendInvalidate, SiwTakesOurSendWithInvalidate) {
    auto c = load_conversation("iwcm-client-send-inv.pcap");
    ASSERT_TRUE(c.has_value());
    ASSERT_FALSE(c->siw_initiated);
    ASSERT_EQ(c->siw.fpdus.size(), 1u);   // siw's Send of its rkey, then no TERMINATE
    ASSERT_EQ(c->peer.fpdus.size(), 1u);  // our Send with Invalidate
    const ByteVec& theirs = c->siw.fpdus[0];
    const ByteVec& ours = c->peer.fpdus[0];
    EXPECT_EQ(Fpdu{theirs}.opcode(), kOpSend);
    EXPECT_EQ(Fpdu{ours}.opcode(), kOpSendInvalidate);
    EXPECT_EQ(be(ours, 4, 4), be(theirs, Fpdu{theirs}.payload(), 4));
}

}  // namespace
}  // namespace iwcm::rdma::test
