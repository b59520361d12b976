// libFuzzer target: the RDMA engine (src/rdma/) fed a hostile peer's byte
// stream. Read first: fuzz/rdma_harness.hpp (the scene: one queue pair, six
// memory regions between guard bytes, posted receives, a Send, a Write and a
// Read of ours), src/rdma/engine.hpp.
//
// Input: byte 0 flags (bit 0 CRC, bit 1 deliver FPDU by FPDU instead of in
// chunks, bit 2 the link goes down at the end, bit 3 write right CRCs into
// the stream's FPDUs, bits 4-5 the largest FPDU we send, bits 6-7 IRD and
// ORD), byte 1 the chunk sizes and the receive ring's size (so FPDUs
// straddle its end), byte 2 the scene (bit 0 the queue pair takes its
// receives from a shared receive queue, bit 1 each receive is cut into up to
// six SGEs, bit 2 the SRQ's limit is armed, bit 3 our Send is a Send with
// Invalidate of the peer's STag, bit 4 with Solicited Event, bit 5 a local
// invalidate of region I goes first, bit 6 a fenced Send follows our Read),
// then the stream the peer sends. While the ring is empty
// a chunk is first offered, as a stream offers its sink, to on_in_order_parts
// cut into up to three pieces (or to on_in_order whole), as the generator
// decides: what the engine takes it placed from there, the rest goes to the ring.
//
// Properties, checked after every delivery and at the end:
//   - no crash, no ASan or UBSan report, no IWCM_ASSERT;
//   - the regions' STags are the same in every run (the seeds name them);
//   - every record we send is an FPDU that parses (with a right CRC when CRC
//     is on) with a DDP header, at most one is a TERMINATE, and nothing is
//     sent after the link was closed; a Send with Invalidate is ours only when
//     we posted one, and names the peer's STag;
//   - at most one kTerminateSent event; after a TERMINATE (sent or received)
//     no byte of memory changes and no receive or Read completes with
//     success;
//   - placement stays in registered memory with the rights it needs: the
//     guard bytes between the regions and the regions without local write
//     (R, S) or of another protection domain (F) never change;
//   - a receive that reports an invalidation names an STag of the queue pair's
//     domain; from then on, as after our local invalidate of I, that region's
//     bytes never change;
//   - the SRQ's limit event comes only when armed, once, and it came if the
//     queue pair took receives enough to fall below it;
//   - every work completion names a request we posted, with its opcode, at
//     most once; a receive's byte count fits its buffer; after destroy_qp
//     every posted request has completed exactly once, but for the receives
//     an SRQ still holds, which are the last posted, as many as it says.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "fuzz/fuzz_util.hpp"
#include "fuzz/rdma_harness.hpp"
#include "wire/crc32c.hpp"
#include "wire/ddp.hpp"
#include "wire/fpdu.hpp"

using namespace iwcm;
using fuzz::kRegionCount;

namespace {

// Byte 2 of the input.
constexpr std::uint8_t kSceneSrq = 1 << 0;
constexpr std::uint8_t kSceneSges = 1 << 1;
constexpr std::uint8_t kSceneLimit = 1 << 2;
constexpr std::uint8_t kSceneSendInvalidate = 1 << 3;
constexpr std::uint8_t kSceneSolicited = 1 << 4;
constexpr std::uint8_t kSceneLocalInvalidate = 1 << 5;
constexpr std::uint8_t kSceneFence = 1 << 6;

// The receive side: a ring (so a peek shows a prefix when it wraps); the
// send side: every record kept.
class FuzzLinks final : public rdma::Links {
public:
    explicit FuzzLinks(std::size_t ring) : ring_(ring) {}

    std::size_t send_space(rdma::LinkId) override { return closed ? 0 : std::size_t{1} << 20; }
    bool send_record(rdma::LinkId, wire::Bytes record) override {
        FUZZ_CHECK(!closed);
        sent.emplace_back(record.begin(), record.end());
        return true;
    }
    std::size_t readable(rdma::LinkId) override { return size_; }
    wire::Bytes peek(rdma::LinkId) override {
        return {ring_.data() + head_, std::min(size_, ring_.size() - head_)};
    }
    void consume(rdma::LinkId, std::size_t n) override {
        FUZZ_CHECK(n <= size_);
        head_ = (head_ + n) % ring_.size();
        size_ -= n;
    }
    void close(rdma::LinkId, bool) override { closed = true; }

    std::size_t space() const { return ring_.size() - size_; }
    void put(wire::Bytes bytes) {
        FUZZ_CHECK(bytes.size() <= space());
        for (std::byte b : bytes) ring_[(head_ + size_++) % ring_.size()] = b;
    }

    std::vector<std::vector<std::byte>> sent;
    bool closed = false;

private:
    std::vector<std::byte> ring_;
    std::size_t head_ = 0;
    std::size_t size_ = 0;
};

struct Posted {
    std::uint64_t wr_id;
    rdma::WcOpcode opcode;
    std::uint32_t length;
    bool done = false;
};

struct Run {
    bool crc = false;
    std::uint32_t max_fpdu = 0;
    std::uint8_t scene = 0;
    rdma::QpHandle qp;
    std::optional<rdma::SrqHandle> srq;
    bool limit_armed = false;
    bool limit_seen = false;
    rdma::MemoryRegion mrs[kRegionCount];
    // Regions whose STag was invalidated, and their bytes then.
    std::vector<std::size_t> frozen;
    std::vector<std::vector<std::byte>> frozen_bytes;
    std::vector<Posted> posted;
    std::size_t records_seen = 0;
    int terminates_sent = 0;           // TERMINATE records on the wire
    int terminate_events = 0;          // kTerminateSent
    bool ended = false;                // a TERMINATE was sent or received
    std::vector<std::byte> after_end;  // the arena when it was
    std::array<std::byte, fuzz::kArenaLen> initial{};
};

// The bytes that no placement may touch: the guards and the regions
// without local write (R, S), as [offset, end) ranges of the arena.
constexpr std::pair<std::size_t, std::size_t> kFixed[] = {
    {0, fuzz::kRegionW.offset},
    {fuzz::kRegionW.offset + fuzz::kRegionW.length, fuzz::kRegionL.offset},
    {fuzz::kRegionL.offset + fuzz::kRegionL.length, fuzz::kRegionI.offset},
    {fuzz::kRegionI.offset + fuzz::kRegionI.length, fuzz::kArenaLen},
};

bool unchanged_outside_writable(const Run& run) {
    for (const auto& [from, to] : kFixed)
        if (std::memcmp(fuzz::arena() + from, run.initial.data() + from, to - from) != 0)
            return false;
    for (std::size_t i = 0; i < run.frozen.size(); ++i) {
        const fuzz::RegionSpec& r = fuzz::kRegions[run.frozen[i]];
        if (std::memcmp(fuzz::arena() + r.offset, run.frozen_bytes[i].data(), r.length) != 0)
            return false;
    }
    return true;
}

// The region `stag` names no more: its bytes are what they are now.
void freeze(Run& run, std::uint32_t stag) {
    std::size_t i = 0;
    while (i < kRegionCount && run.mrs[i].rkey != stag) ++i;
    // One of the queue pair's domain: never F, never an STag nobody registered.
    FUZZ_CHECK(i < kRegionCount && i != fuzz::kForeign);
    if (std::find(run.frozen.begin(), run.frozen.end(), i) != run.frozen.end()) return;
    const fuzz::RegionSpec& r = fuzz::kRegions[i];
    run.frozen.push_back(i);
    run.frozen_bytes.emplace_back(fuzz::arena() + r.offset, fuzz::arena() + r.offset + r.length);
}

void check_records(Run& run, FuzzLinks& links) {
    for (; run.records_seen < links.sent.size(); ++run.records_seen) {
        const auto& rec = links.sent[run.records_seen];
        FUZZ_CHECK(run.terminates_sent == 0);  // nothing after our TERMINATE
        auto f = wire::parse_fpdu(rec, run.crc);
        FUZZ_CHECK(f.has_value() && f->crc_ok && f->total_len == rec.size());
        auto seg = wire::parse_ddp(f->ulpdu);
        FUZZ_CHECK(seg.has_value());
        const auto op = static_cast<wire::RdmapOpcode>(seg->header.opcode);
        if (op == wire::RdmapOpcode::kSendInvalidate ||
            op == wire::RdmapOpcode::kSendSeInvalidate) {
            FUZZ_CHECK((run.scene & kSceneSendInvalidate) != 0);
            FUZZ_CHECK(seg->header.inval_stag == fuzz::kPeerStag);
            FUZZ_CHECK((op == wire::RdmapOpcode::kSendSeInvalidate) ==
                       ((run.scene & kSceneSolicited) != 0));
        }
        if (op == wire::RdmapOpcode::kTerminate) {
            ++run.terminates_sent;
        } else {
            FUZZ_CHECK(rec.size() <= run.max_fpdu);
        }
    }
}

void check_completion(Run& run, const rdma::WorkCompletion& wc) {
    FUZZ_CHECK(wc.qp == run.qp);
    auto it = std::find_if(run.posted.begin(), run.posted.end(),
                           [&](const Posted& p) { return p.wr_id == wc.wr_id; });
    FUZZ_CHECK(it != run.posted.end() && !it->done && it->opcode == wc.opcode);
    it->done = true;
    if (wc.status != rdma::WcStatus::kSuccess) return;
    if (wc.with_invalidate) {
        FUZZ_CHECK(wc.opcode == rdma::WcOpcode::kRecv);
        freeze(run, wc.invalidated_rkey);
    }
    if (wc.opcode == rdma::WcOpcode::kLocalInvalidate)
        freeze(run, run.mrs[fuzz::kInvalidatable].rkey);
    if (wc.opcode == rdma::WcOpcode::kRecv) FUZZ_CHECK(wc.byte_len <= it->length);
    if (wc.opcode == rdma::WcOpcode::kRdmaRead) FUZZ_CHECK(wc.byte_len == it->length);
    if (wc.opcode == rdma::WcOpcode::kRecv || wc.opcode == rdma::WcOpcode::kRdmaRead)
        FUZZ_CHECK(!run.ended);
}

// After every delivery: events, completions, records, memory.
void check_step(Run& run, rdma::Engine& engine, FuzzLinks& links, rdma::CqHandle cq) {
    const bool was_ended = run.ended;
    if (was_ended) {
        FUZZ_CHECK(std::memcmp(fuzz::arena(), run.after_end.data(), fuzz::kArenaLen) == 0);
    }
    std::array<rdma::WorkCompletion, 16> wcs;
    // Completions made before the TERMINATE in this step may be successes.
    while (std::size_t n = engine.poll_cq(cq, wcs))
        for (std::size_t i = 0; i < n; ++i) check_completion(run, wcs[i]);
    while (auto e = engine.poll_qp_event()) {
        if (e->type == rdma::QpEventType::kSrqLimit) {
            FUZZ_CHECK(run.srq && e->srq == *run.srq && run.limit_armed && !run.limit_seen);
            run.limit_seen = true;
            continue;
        }
        FUZZ_CHECK(e->qp == run.qp);
        if (e->type == rdma::QpEventType::kTerminateSent) ++run.terminate_events;
        if (e->type != rdma::QpEventType::kDisconnected) run.ended = true;
    }
    FUZZ_CHECK(run.terminate_events <= 1);
    if (run.ended && !was_ended)
        run.after_end.assign(fuzz::arena(), fuzz::arena() + fuzz::kArenaLen);
    check_records(run, links);
    FUZZ_CHECK(unchanged_outside_writable(run));
}

// Rewrites the CRC field of every whole FPDU of the stream.
void fix_crcs(std::vector<std::byte>& s) {
    std::size_t pos = 0;
    while (pos + 2 <= s.size()) {
        std::size_t len = *wire::fpdu_frame_len(wire::Bytes(s).subspan(pos, 2));
        if (pos + len > s.size()) return;
        std::uint32_t c = wire::crc32c(wire::Bytes(s).subspan(pos, len - 4));
        for (int i = 0; i < 4; ++i) s[pos + len - 4 + i] = static_cast<std::byte>(c >> (8 * i));
        pos += len;
    }
}

// A receive of `len` bytes at `addr` in L: one SGE, or (kSceneSges) up to six.
std::size_t recv_sges(const Run& run, std::uint64_t addr, std::uint32_t len, rdma::Sge (&out)[6]) {
    const std::uint32_t lkey = run.mrs[2].lkey;
    if ((run.scene & kSceneSges) == 0) {
        out[0] = {addr, len, lkey};
        return 1;
    }
    std::size_t n = 0;
    for (std::uint32_t left = len; n < 6; ++n) {
        const std::uint32_t piece = n == 5 ? left : std::min<std::uint32_t>(left, 1 + len / 5 - n);
        out[n] = {addr, piece, lkey};
        addr += piece;
        left -= piece;
    }
    return n;
}

bool post_work(Run& run, rdma::Engine& e) {
    const rdma::MemoryRegion& l = run.mrs[2];
    const rdma::MemoryRegion& s = run.mrs[3];
    std::uint64_t off = 0;
    for (std::size_t i = 0; i < std::size(fuzz::kRecvLens); ++i) {
        rdma::Sge sges[6];
        const std::size_t n = recv_sges(run, l.addr + off, fuzz::kRecvLens[i], sges);
        off += fuzz::kRecvLens[i] / 2;  // overlapping on purpose
        rdma::RecvWr wr{100 + i, std::span(sges, n)};
        if (!(run.srq ? e.post_srq_recv(*run.srq, wr) : e.post_recv(run.qp, wr))) return false;
        run.posted.push_back({100 + i, rdma::WcOpcode::kRecv, fuzz::kRecvLens[i]});
    }
    if (run.srq && (run.scene & kSceneLimit) != 0) {
        if (!e.arm_srq_limit(*run.srq, 3)) return false;
        run.limit_armed = true;
    }
    const rdma::Sge src{s.addr, 200, s.lkey};
    const rdma::Sge sink{l.addr + fuzz::kReadSinkOffset, fuzz::kReadLen, l.lkey};
    const bool send_inv = (run.scene & kSceneSendInvalidate) != 0;
    const struct {
        std::uint64_t id;
        rdma::WrOpcode op;
        rdma::WcOpcode wc;
        rdma::Sge sge;
        bool fence;
    } sends[] = {
        {5, rdma::WrOpcode::kLocalInvalidate, rdma::WcOpcode::kLocalInvalidate, {}, false},
        {1,
         send_inv ? rdma::WrOpcode::kSendWithInvalidate : rdma::WrOpcode::kSend,
         rdma::WcOpcode::kSend,
         {s.addr, 100, s.lkey},
         false},
        {2, rdma::WrOpcode::kRdmaWrite, rdma::WcOpcode::kRdmaWrite, src, false},
        {3, rdma::WrOpcode::kRdmaRead, rdma::WcOpcode::kRdmaRead, sink, false},
        {4, rdma::WrOpcode::kSend, rdma::WcOpcode::kSend, {s.addr + 100, 50, s.lkey}, true}};
    for (const auto& w : sends) {
        if (w.id == 5 && (run.scene & kSceneLocalInvalidate) == 0) continue;
        if (w.id == 4 && (run.scene & kSceneFence) == 0) continue;
        rdma::SendWr wr;
        wr.wr_id = w.id;
        wr.opcode = w.op;
        if (w.sge.length > 0) wr.sg_list = std::span(&w.sge, 1);
        wr.rkey = fuzz::kPeerStag;
        wr.remote_addr = fuzz::kPeerTo;
        wr.solicited = (run.scene & kSceneSolicited) != 0;
        wr.fence = w.fence;
        wr.invalidate_rkey = w.id == 5 ? run.mrs[fuzz::kInvalidatable].rkey : fuzz::kPeerStag;
        if (!e.post_send(run.qp, wr)) return false;
        run.posted.push_back({w.id, w.wc, w.sge.length});
    }
    return true;
}

// Every run's scene is the same: the STags of one set of registrations do not change from
// run to run (a seed's Writes name them).
void check_stags_repeat(const Run& run) {
    static const auto first = [&] {
        std::array<std::uint32_t, kRegionCount> k{};
        for (std::size_t i = 0; i < kRegionCount; ++i) k[i] = run.mrs[i].rkey;
        return k;
    }();
    for (std::size_t i = 0; i < kRegionCount; ++i) FUZZ_CHECK(run.mrs[i].rkey == first[i]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 3) return 0;
    const std::uint8_t flags = data[0];
    const std::uint8_t shape = data[1];
    std::vector<std::byte> stream(reinterpret_cast<const std::byte*>(data) + 3,
                                  reinterpret_cast<const std::byte*>(data) + size);
    Run run;
    run.crc = flags & 1;
    run.scene = data[2];
    const bool by_fpdu = flags & 2;
    if (flags & 8) fix_crcs(stream);
    static constexpr std::uint32_t kFpdus[] = {128, 536, 1460, 8960};
    run.max_fpdu = kFpdus[(flags >> 4) & 3];
    fuzz::reset_arena();
    std::memcpy(run.initial.data(), fuzz::arena(), fuzz::kArenaLen);

    FuzzLinks links(512 + static_cast<std::size_t>(shape & 0x0F) * 1024);
    rdma::Engine engine(links, fuzz::device_config());
    FUZZ_CHECK(fuzz::register_regions(engine, run.mrs));
    check_stags_repeat(run);
    auto cq = engine.create_cq(64);
    FUZZ_CHECK(cq.has_value());
    rdma::QpParams p;
    p.attr.send_cq = p.attr.recv_cq = *cq;
    p.attr.sq_sig_all = true;
    p.attr.max_sge = 6;
    if (run.scene & kSceneSrq) {
        auto srq = engine.create_srq({8, 6, 0});
        FUZZ_CHECK(srq.has_value());
        run.srq = *srq;
        p.attr.srq = *srq;
    }
    p.crc = run.crc;
    p.ird = static_cast<std::uint16_t>(1 + ((flags >> 6) & 1) * 3);
    p.ord = static_cast<std::uint16_t>(1 + (flags >> 7));
    p.max_fpdu = run.max_fpdu;
    auto qp = engine.create_qp(p);
    FUZZ_CHECK(qp.has_value());
    run.qp = *qp;
    FUZZ_CHECK(post_work(run, engine));
    check_step(run, engine, links, *cq);

    // Chunk sizes from a small generator seeded by the shape byte.
    std::uint32_t x = 0x9E3779B9u ^ shape;
    const std::size_t most = std::size_t{1} << (1 + (shape >> 4) % 12);
    std::size_t pos = 0;
    while (pos < stream.size()) {
        std::size_t n = 0;
        if (by_fpdu && pos + 2 <= stream.size()) {
            n = *wire::fpdu_frame_len(wire::Bytes(stream).subspan(pos, 2));
        } else {
            x = x * 1664525u + 1013904223u;
            n = 1 + (x >> 8) % most;
        }
        n = std::min({n, stream.size() - pos, links.space()});
        if (n == 0) break;  // the ring is full of an FPDU longer than it: stuck
        const wire::Bytes chunk = wire::Bytes(stream).subspan(pos, n);
        x = x * 1664525u + 1013904223u;
        std::size_t taken = 0;
        if (links.readable(rdma::LinkId{}) == 0 && (x >> 28) != 0) {
            // The sink's way: in pieces (cut where the generator says), or whole.
            const std::size_t a = (x >> 8) % (n + 1);
            const std::size_t b = a + (x >> 16) % (n - a + 1);
            const wire::Bytes pieces[] = {chunk.first(a), chunk.subspan(a, b - a),
                                          chunk.subspan(b)};
            taken = (x >> 28) < 8 ? engine.on_in_order_parts(run.qp, pieces)
                                  : engine.on_in_order(run.qp, chunk);
            FUZZ_CHECK(taken <= n);
            (void)engine.take_message_end();
            check_step(run, engine, links, *cq);
        }
        if (taken < n) links.put(chunk.subspan(taken));
        pos += n;
        engine.on_readable(run.qp);
        engine.on_writable(run.qp);
        check_step(run, engine, links, *cq);
    }
    if (flags & 4) {
        engine.on_link_down(run.qp, -104);
        check_step(run, engine, links, *cq);
    }
    FUZZ_CHECK(engine.destroy_qp(run.qp).has_value());
    check_step(run, engine, links, *cq);
    if (run.srq) {
        // What the QP never took waits in the SRQ: the last receives posted.
        const std::uint32_t waiting = engine.query_srq(*run.srq)->posted;
        std::uint32_t last = 0;
        for (auto it = run.posted.rbegin(); it != run.posted.rend(); ++it) {
            if (it->opcode != rdma::WcOpcode::kRecv) continue;
            if (last++ >= waiting) break;
            FUZZ_CHECK(!it->done);
            it->done = true;
        }
        // Two taken of the four posted put it below the limit of 3: the event came.
        if (run.limit_armed && waiting + 2 <= std::size(fuzz::kRecvLens))
            FUZZ_CHECK(run.limit_seen);
        FUZZ_CHECK(engine.destroy_srq(*run.srq).has_value());
    }
    for (const Posted& w : run.posted) FUZZ_CHECK(w.done);
    FUZZ_CHECK(engine.live_qps() == 0);
    return 0;
}
