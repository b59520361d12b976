// The receive side: FPDUs out of the link, CRC, DDP and RDMAP checks,
// placement, completions, and the TERMINATE that answers every error.
//
// Read first: engine.hpp; RFC 5044 section 6-8 (FPDU, CRC: a bad one closes
// the stream), RFC 5041 section 7 and RFC 5040 section 7 (error layers,
// types and codes), RFC 5040 section 6.4 (Read Requests: at most IRD).
// Which code answers which error follows Linux siw (siw_qp_rx.c):
//   no receive posted, message too long   DDP untagged 2/2 (siw: "no buffer")
//   Send with a wrong QN / MSN / MO       DDP untagged 2/1, 2/3, 2/4
//   Write: unknown STag or no rights      DDP tagged 1/0 (siw: RFC 5041 has no rights code)
//   Write: outside the region             DDP tagged 1/1
//   Read Response nobody asked for        DDP catastrophic 0/0
//   Read Response to the wrong STag / TO  DDP tagged 1/0 / 1/1
//   Read Request: MSN                     DDP untagged 2/3
//   Read Request beyond IRD               RDMAP remote operation 2/7 (catastrophic stream)
//   Read Request source STag/rights/bounds RDMAP remote protection 1/0, 1/2, 1/1 (+ R)
//   bad DDP version                       DDP 1/4 or 2/6, nothing quoted
//   bad RDMAP version, unknown opcode     RDMAP 2/5, 2/6, nothing quoted
//   bad CRC                               MPA (LLP) 0/2, nothing quoted
// DDP-layer and RDMAP remote errors quote the segment's length (M) and DDP
// header (D), remote protection errors the Read Request too (R).
#include <algorithm>
#include <cstring>

#include "iwcm/assert.hpp"
#include "rdma/engine.hpp"
#include "wire/copy.hpp"
#include "wire/crc32c.hpp"
#include "wire/fpdu.hpp"

namespace iwcm::rdma {

namespace {

using wire::RdmapOpcode;
using wire::TermLayer;

wire::TerminateRepr term_of(TermLayer layer, std::uint8_t etype, std::uint8_t code) {
    wire::TerminateRepr t;
    t.layer = layer;
    t.etype = etype;
    t.code = code;
    return t;
}

// M and D: the segment's length and its DDP header as received.
wire::TerminateRepr quoting(TermLayer layer, std::uint8_t etype, std::uint8_t code,
                            const wire::DdpSegment& seg, std::size_t ulpdu_len) {
    wire::TerminateRepr t = term_of(layer, etype, code);
    t.ddp_segment_len = static_cast<std::uint16_t>(ulpdu_len);
    t.ddp_header = seg.header_bytes;
    return t;
}

wire::TerminateRepr ddp_tagged(std::uint8_t code, const wire::DdpSegment& seg, std::size_t len) {
    return quoting(TermLayer::kDdp, wire::kDdpEtypeTagged, code, seg, len);
}

wire::TerminateRepr ddp_untagged(std::uint8_t code, const wire::DdpSegment& seg, std::size_t len) {
    return quoting(TermLayer::kDdp, wire::kDdpEtypeUntagged, code, seg, len);
}

// siw_tagged_error: RFC 5041 has no access-rights code; siw says invalid STag.
std::uint8_t tagged_code(MemCheck c) {
    return c == MemCheck::kBaseBounds ? wire::kDdpTaggedBaseBounds : wire::kDdpTaggedInvalidStag;
}

// siw_rdmap_error.
std::uint8_t rdmap_code(MemCheck c) {
    switch (c) {
        case MemCheck::kInvalidStag: return wire::kRdmapCodeInvalidStag;
        case MemCheck::kAccessRights: return wire::kRdmapCodeAccessRights;
        case MemCheck::kBaseBounds: return wire::kRdmapCodeBaseBounds;
        case MemCheck::kOk: break;
    }
    return wire::kRdmapCodeUnspecified;
}

// The status of the request a peer's TERMINATE most likely answers.
WcStatus status_for(const wire::TermHeader& t) {
    if (t.layer == wire::kTermLayerRdmap && t.etype == wire::kRdmapEtypeRemoteProtection) {
        return WcStatus::kRemAccessErr;
    }
    if (t.layer == wire::kTermLayerDdp && t.etype == wire::kDdpEtypeTagged) {
        return WcStatus::kRemAccessErr;
    }
    if (t.layer == wire::kTermLayerDdp && t.etype == wire::kDdpEtypeUntagged) {
        return WcStatus::kRemInvReqErr;
    }
    return WcStatus::kRemOpErr;
}

// A received Terminate Control word. RFC 5040 section 4.8 puts the layer in
// the high nibble of the first byte and M, D, R in the top bits of the
// third; Linux siw writes the word from little-endian bitfields (siw.h
// struct iwarp_terminate): the layer in the low nibble, M/D/R in bits 0-2.
// The word is read siw's way only where it cannot be the RFC's: M/D/R bits
// low and none high, or a high nibble that names no layer over a low one
// that does (siw's CRC error, `02 02 00 00`, is valid both ways).
TermInfo read_term_control(wire::Bytes b) {
    TermInfo t;
    if (b.size() < 4) return t;
    const auto u = [&](std::size_t i) { return std::to_integer<std::uint8_t>(b[i]); };
    t.control = wire::load_be32(b, 0);
    const std::uint8_t hi = u(0) >> 4, lo = u(0) & 0xF;
    const bool low_flags = (u(2) & 0x07) != 0 && (u(2) & 0xE0) == 0;
    const bool low_layer = hi > wire::kTermLayerLlp && lo <= wire::kTermLayerLlp;
    t.siw_order = low_flags || low_layer;
    t.layer = t.siw_order ? lo : hi;
    t.etype = t.siw_order ? hi : lo;
    t.code = u(1);
    return t;
}

}  // namespace

void Engine::on_readable(QpHandle qp) {
    if (find_qp(qp) != nullptr) rx_drain(qp.index);
}

// FPDUs read in place are consumed together when the drain stops (`done`
// counts them): one consume, so one window update and at most one kReadable
// for the rest, per batch of FPDUs rather than per FPDU.
void Engine::rx_drain(std::uint32_t qp) {
    QpRecord& r = qps_[qp];
    std::size_t done = 0;
    while (r.live && r.link_up) {
        if (r.state != QpState::kRts) {
            // Closing: what the peer still sends is read and dropped.
            done = 0;
            while (std::size_t n = links_.peek(r.link).size()) links_.consume(r.link, n);
            break;
        }
        auto fpdu = rx_next_fpdu(qp, done);
        if (!fpdu) break;
        RxVerdict v = rx_fpdu(qp, *fpdu);
        // A TERMINATE ends the link in after_rx: what was read goes first.
        if (v.peer_terminated) rx_consume(qp, done);
        after_rx(qp, v);
    }
    if (r.live && r.link_up) rx_consume(qp, done);
    tx_progress(qp);
}

std::size_t Engine::on_in_order(QpHandle handle, wire::Bytes bytes) {
    const QpRecord* r = find_qp(handle);
    if (r == nullptr || !r->link_up || r->state != QpState::kRts || r->rx_held || r->term_pending) {
        return 0;
    }
    std::size_t taken = 0;
    while (bytes.size() - taken >= 2) {
        const wire::Bytes rest = bytes.subspan(taken);
        const std::size_t len = *wire::fpdu_frame_len(rest.first(2));
        if (rest.size() < len || !place_direct(handle.index, rest.first(len))) break;
        taken += len;
    }
    return taken;
}

// An RDMA Write FPDU's length field and tagged DDP header.
constexpr std::size_t kWriteHead = wire::kFpduLengthLen + wire::kDdpTaggedHeaderLen;

// Bytes in pieces read from a cursor: what an FPDU that spans pieces needs (its header
// copied out, its CRC summed, its payload copied into memory), each piece read in place.
class PieceReader {
public:
    explicit PieceReader(std::span<const wire::Bytes> pieces) : pieces_(pieces) {
        for (wire::Bytes p : pieces) left_ += p.size();
    }
    std::size_t left() const { return left_; }
    // The n bytes from the cursor when they lie in one piece.
    std::optional<wire::Bytes> contiguous(std::size_t n) const {
        std::size_t i = i_;
        std::size_t off = off_;
        while (i < pieces_.size() && off == pieces_[i].size()) {
            ++i;
            off = 0;
        }
        if (i == pieces_.size() || pieces_[i].size() - off < n) return std::nullopt;
        return pieces_[i].subspan(off, n);
    }
    // Calls fn(run) on the runs of bytes [from, from + n) after the cursor, in order.
    template <class Fn>
    void each(std::size_t from, std::size_t n, Fn&& fn) const {
        IWCM_ASSERT(from + n <= left_);
        std::size_t i = i_;
        std::size_t off = off_ + from;
        while (n > 0) {
            IWCM_ASSERT(i < pieces_.size());
            if (off >= pieces_[i].size()) {
                off -= pieces_[i].size();
                ++i;
                continue;
            }
            const std::size_t k = std::min(n, pieces_[i].size() - off);
            fn(pieces_[i].subspan(off, k));
            n -= k;
            off = 0;
            ++i;
        }
    }
    void copy(std::size_t from, std::size_t n, std::byte* to) const {
        each(from, n, [&to](wire::Bytes run) {
            wire::copy_bytes(to, run.data(), run.size());
            to += run.size();
        });
    }
    // The first n (a constant) bytes at the cursor into `to`: straight from the cursor's
    // piece when they lie in it, as an FPDU's header mostly does.
    template <std::size_t n>
    void head(std::byte* to) const {
        if (i_ < pieces_.size() && pieces_[i_].size() - off_ >= n) {
            std::memcpy(to, pieces_[i_].data() + off_, n);
            return;
        }
        copy(0, n, to);
    }
    void skip(std::size_t n) {
        IWCM_ASSERT(n <= left_);
        left_ -= n;
        off_ += n;
        while (i_ < pieces_.size() && off_ >= pieces_[i_].size() && off_ > 0) {
            off_ -= pieces_[i_].size();
            ++i_;
        }
    }

private:
    std::span<const wire::Bytes> pieces_;
    std::size_t i_ = 0;    // the cursor's piece
    std::size_t off_ = 0;  // and offset in it
    std::size_t left_ = 0;
};

std::size_t Engine::on_in_order_parts(QpHandle handle, std::span<const wire::Bytes> pieces) {
    const QpRecord* r = find_qp(handle);
    if (r == nullptr || !r->link_up || r->state != QpState::kRts || r->rx_held || r->term_pending) {
        return 0;
    }
    PieceReader in(pieces);
    std::size_t taken = 0;
    while (in.left() >= kWriteHead + wire::kFpduCrcLen) {
        // Long enough for a tagged header and a CRC; shorter ones are left to the buffer.
        std::byte head[kWriteHead];
        in.head<kWriteHead>(head);
        const std::size_t len = *wire::fpdu_frame_len(wire::Bytes(head, wire::kFpduLengthLen));
        if (in.left() < len) break;
        if (const auto one = in.contiguous(len)) {
            if (!place_direct(handle.index, *one)) break;
        } else if (!place_write_split(handle.index, in, len, head)) {
            // Not a Write (a Send, a Read Response): joined in the reassembly buffer, free
            // while the sink is offered bytes (nothing waits unread), and placed from there
            // as from a segment. Their copies stay two, as before frames came in pieces.
            if (len > rx_buf_.size()) break;
            in.copy(0, len, rx_buf_.data());
            joined_bytes_ += len;
            if (!place_direct(handle.index, wire::Bytes(rx_buf_).first(len))) break;
        }
        in.skip(len);
        taken += len;
    }
    return taken;
}

// An RDMA Write FPDU of `len` bytes at the cursor, across pieces: placed after the checks
// place_direct makes of a Write (CRC, versions, opcode, STag, rights, bounds), its payload
// copied from the pieces into its memory. Anything else is left for the buffer path.
bool Engine::place_write_split(std::uint32_t qp, const PieceReader& in, std::size_t len,
                               const std::byte* head) {
    constexpr std::size_t kHead = kWriteHead;
    if (len < kHead + wire::kFpduCrcLen) return false;
    const std::size_t ulpdu_len =
        (std::size_t{static_cast<std::uint8_t>(head[0])} << 8) | static_cast<std::uint8_t>(head[1]);
    if (ulpdu_len < wire::kDdpTaggedHeaderLen) return false;
    auto seg = wire::parse_ddp(wire::Bytes(head + wire::kFpduLengthLen, wire::kDdpTaggedHeaderLen));
    if (!seg) return false;
    const wire::DdpHeader& h = seg->header;
    if (!h.tagged || h.ddp_version != wire::kDdpVersion || h.rdmap_version != wire::kRdmapVersion ||
        static_cast<RdmapOpcode>(h.opcode) != RdmapOpcode::kWrite)
        return false;
    if (qps_[qp].crc) {
        std::uint32_t crc = 0;
        in.each(0, len - wire::kFpduCrcLen,
                [&crc](wire::Bytes run) { crc = wire::crc32c(run, crc); });
        std::byte field[wire::kFpduCrcLen];
        in.copy(len - wire::kFpduCrcLen, sizeof field, field);
        std::uint32_t carried = 0;
        for (std::size_t i = 0; i < sizeof field; ++i)
            carried |= std::uint32_t{static_cast<std::uint8_t>(field[i])} << (8 * i);  // LSB first
        if (carried != crc) return false;
    }
    message_end_ = message_end_ || h.last;
    const std::size_t n = ulpdu_len - wire::kDdpTaggedHeaderLen;
    if (n == 0) return true;
    std::byte* to = nullptr;
    if (mrs_.check(h.stag, h.to, n, kAccessRemoteWrite, &to) != MemCheck::kOk) return false;
    in.copy(kHead, n, to);
    placed_bytes_ += n;
    placed_direct_ += n;
    return true;
}

// One FPDU of on_in_order: placed if it is an RDMA Write, a Send or a Read
// Response that rx_fpdu would place without an error (the same checks: CRC,
// versions, opcode, then rx_write's, rx_send's or rx_read_response's, all
// before a byte is copied), else left alone for rx_fpdu.
bool Engine::place_direct(std::uint32_t qp, wire::Bytes fpdu) {
    auto f = wire::parse_fpdu(fpdu, qps_[qp].crc);
    if (!f || !f->crc_ok) return false;
    auto seg = wire::parse_ddp(f->ulpdu);
    if (!seg) return false;
    const wire::DdpHeader& h = seg->header;
    if (h.ddp_version != wire::kDdpVersion || h.rdmap_version != wire::kRdmapVersion) return false;
    const auto op = static_cast<RdmapOpcode>(h.opcode);
    const std::size_t n = seg->payload.size();
    if (op == RdmapOpcode::kWrite && h.tagged) {
        message_end_ = message_end_ || h.last;
        if (n == 0) return true;  // rx_write checks nothing of it either
        std::byte* to = nullptr;
        if (mrs_.check(h.stag, h.to, n, kAccessRemoteWrite, &to) != MemCheck::kOk) return false;
        wire::copy_bytes(to, seg->payload.data(), n);
        placed_bytes_ += n;
        placed_direct_ += n;
        return true;
    }
    RxVerdict v;
    if (op == RdmapOpcode::kReadResponse && h.tagged) {
        if (!read_response_placeable(qps_[qp], *seg)) return false;
        v = rx_read_response(qp, *seg, f->ulpdu.size());
    } else if ((op == RdmapOpcode::kSend || op == RdmapOpcode::kSendSe) && !h.tagged) {
        if (!send_placeable(qps_[qp], *seg)) return false;
        v = rx_send(qp, *seg, f->ulpdu.size());
        message_end_ = message_end_ || h.last;
    } else {
        return false;
    }
    IWCM_ASSERT(!v.terminate && !v.peer_terminated);
    placed_direct_ += n;
    return true;
}

// rx_send's checks, each of which ends in a TERMINATE there.
bool Engine::send_placeable(const QpRecord& r, const wire::DdpSegment& seg) {
    const wire::DdpHeader& h = seg.header;
    if (r.rq.empty() || h.qn != wire::kQnSend || h.msn != r.rx_msn_send) return false;
    const WrEntry& e = wrs_[r.rq.head];
    return h.mo == e.done && seg.payload.size() <= e.length - e.done &&
           place(e, e.done, seg.payload, true);
}

// rx_read_response's checks, each of which ends in a TERMINATE there.
bool Engine::read_response_placeable(const QpRecord& r, const wire::DdpSegment& seg) const {
    const wire::DdpHeader& h = seg.header;
    if (r.orq.empty()) return false;
    const WrEntry& e = wrs_[r.orq.head];
    const std::uint32_t sink_stag = e.num_sge > 0 ? e.sge[0].lkey : 0;
    const std::uint64_t sink_to = (e.num_sge > 0 ? e.sge[0].addr : 0) + e.done;
    const std::size_t n = seg.payload.size();
    if (h.stag != sink_stag || h.to != sink_to || n > e.length - e.done) return false;
    if (h.last && e.done + n != e.length) return false;
    // The last one frees an ORD slot a Read in the send queue may wait for:
    // it goes through the buffer, whose drain sends (the sink sends nothing).
    if (h.last && !r.sq.empty()) return false;
    return n == 0 || mrs_.check(sink_stag, h.to, n, kAccessLocalWrite, nullptr) == MemCheck::kOk;
}

void Engine::rx_consume(std::uint32_t qp, std::size_t& done) {
    if (done == 0) return;
    links_.consume(qps_[qp].link, done);
    done = 0;
}

// The next whole FPDU when it lies in one piece in the link's view after
// the `done` bytes already read; `done` then counts it too.
std::optional<wire::Bytes> Engine::rx_in_place(std::uint32_t qp, std::size_t& done) {
    const QpRecord& r = qps_[qp];
    if (r.rx_held) return std::nullopt;
    wire::Bytes view = links_.peek(r.link);
    if (view.size() < done + 2) return std::nullopt;
    view = view.subspan(done);
    const std::size_t len = *wire::fpdu_frame_len(view.first(2));
    if (view.size() < len) return std::nullopt;
    done += len;
    return view.first(len);
}

// The next whole FPDU: in place in the link's buffer when it lies in one
// piece (rx_in_place), else gathered into rx_buf_ (consumed, with the
// FPDUs before it). nullopt while it is incomplete.
std::optional<wire::Bytes> Engine::rx_next_fpdu(std::uint32_t qp, std::size_t& done) {
    if (auto f = rx_in_place(qp, done)) return f;
    if (done > 0) {
        // What is left may lie in one piece once the bytes before it are gone.
        rx_consume(qp, done);
        if (auto f = rx_in_place(qp, done)) return f;
    }
    QpRecord& r = qps_[qp];
    std::size_t avail = links_.readable(r.link) + (r.rx_held ? 1 : 0);
    if (avail < 2) return std::nullopt;
    wire::Bytes view = links_.peek(r.link);
    IWCM_ASSERT(!view.empty());
    if (!r.rx_held && view.size() < 2) {
        // The length field straddles the ring's end: hold its first byte.
        r.rx_held = true;
        r.rx_held_byte = view[0];
        links_.consume(r.link, 1);
        view = links_.peek(r.link);
        IWCM_ASSERT(!view.empty());
    }
    std::byte head[2] = {r.rx_held ? r.rx_held_byte : view[0], r.rx_held ? view[0] : view[1]};
    const std::size_t len = *wire::fpdu_frame_len(wire::Bytes(head, 2));
    if (avail < len) return std::nullopt;
    // Not in one piece (rx_in_place would have taken it): gather it.
    IWCM_ASSERT(r.rx_held || view.size() < len);
    std::size_t have = 0;
    if (r.rx_held) {
        rx_buf_[have++] = r.rx_held_byte;
        r.rx_held = false;
    }
    while (have < len) {
        wire::Bytes v = links_.peek(r.link);
        IWCM_ASSERT(!v.empty());
        std::size_t n = std::min(v.size(), len - have);
        std::memcpy(rx_buf_.data() + have, v.data(), n);
        joined_bytes_ += n;
        links_.consume(r.link, n);
        have += n;
    }
    return wire::Bytes(rx_buf_).first(len);
}

Engine::RxVerdict Engine::rx_fpdu(std::uint32_t qp, wire::Bytes fpdu) {
    auto f = wire::parse_fpdu(fpdu, qps_[qp].crc);
    if (!f || !f->crc_ok) return terminate_mpa(qp, wire::TermError::kCrcError);
    auto seg = wire::parse_ddp(f->ulpdu);
    if (!seg) {
        // Shorter than any DDP header: nothing to quote.
        return terminate(qp, term_of(TermLayer::kDdp, wire::kDdpEtypeLocalCatastrophic, 0));
    }
    return rx_segment(qp, *seg, f->ulpdu.size());
}

Engine::RxVerdict Engine::rx_segment(std::uint32_t qp, const wire::DdpSegment& seg,
                                     std::size_t len) {
    const wire::DdpHeader& h = seg.header;
    if (h.ddp_version != wire::kDdpVersion) {
        return h.tagged ? terminate(qp, term_of(TermLayer::kDdp, wire::kDdpEtypeTagged,
                                                wire::kDdpTaggedInvalidVersion))
                        : terminate(qp, term_of(TermLayer::kDdp, wire::kDdpEtypeUntagged,
                                                wire::kDdpUntaggedInvalidVersion));
    }
    auto remote_op = [&](std::uint8_t code) {
        return terminate(qp, term_of(TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation, code));
    };
    if (h.rdmap_version != wire::kRdmapVersion) return remote_op(wire::kRdmapCodeInvalidVersion);
    auto op = static_cast<RdmapOpcode>(h.opcode);
    bool tagged_op = op == RdmapOpcode::kWrite || op == RdmapOpcode::kReadResponse;
    if (h.opcode > static_cast<std::uint8_t>(RdmapOpcode::kTerminate) || tagged_op != h.tagged) {
        return remote_op(wire::kRdmapCodeUnexpectedOpcode);
    }
    switch (op) {
        case RdmapOpcode::kWrite: return rx_write(qp, seg, len);
        case RdmapOpcode::kReadRequest: return rx_read_request(qp, seg, len);
        case RdmapOpcode::kReadResponse: return rx_read_response(qp, seg, len);
        case RdmapOpcode::kSend:
        case RdmapOpcode::kSendSe: return rx_send(qp, seg, len);
        case RdmapOpcode::kTerminate: return rx_terminate(qp, seg);
        case RdmapOpcode::kSendInvalidate:
        case RdmapOpcode::kSendSeInvalidate: break;  // optional; not offered
    }
    return remote_op(wire::kRdmapCodeUnexpectedOpcode);
}

// Scatters data at the message offset into a receive's SGEs.
// `dry`: only checks that every byte has its place (nothing copied).
bool Engine::place(const WrEntry& e, std::size_t offset, wire::Bytes data, bool dry) {
    std::size_t placed = 0;
    for (std::uint8_t i = 0; i < e.num_sge && placed < data.size(); ++i) {
        const Sge& s = e.sge[i];
        if (offset >= s.length) {
            offset -= s.length;
            continue;
        }
        std::size_t n = std::min<std::size_t>(s.length - offset, data.size() - placed);
        std::byte* to = nullptr;
        if (mrs_.check(s.lkey, s.addr + offset, n, kAccessLocalWrite, &to) != MemCheck::kOk) {
            return false;
        }
        if (!dry) {
            wire::copy_bytes(to, data.data() + placed, n);
            placed_bytes_ += n;
        }
        placed += n;
        offset = 0;
    }
    return placed == data.size();
}

Engine::RxVerdict Engine::rx_send(std::uint32_t qp, const wire::DdpSegment& seg, std::size_t len) {
    QpRecord& r = qps_[qp];
    const wire::DdpHeader& h = seg.header;
    // siw_proc_send, then siw_send_check_ntoh, in their order.
    if (r.rq.empty()) return terminate(qp, ddp_untagged(wire::kDdpUntaggedNoBuffer, seg, len));
    if (h.qn != wire::kQnSend) {
        return terminate(qp, ddp_untagged(wire::kDdpUntaggedInvalidQn, seg, len));
    }
    if (h.msn != r.rx_msn_send) {
        return terminate(qp, ddp_untagged(wire::kDdpUntaggedMsnRange, seg, len));
    }
    std::uint32_t index = r.rq.head;
    WrEntry& e = wrs_[index];
    if (h.mo != e.done) return terminate(qp, ddp_untagged(wire::kDdpUntaggedInvalidMo, seg, len));
    if (seg.payload.size() > e.length - e.done) {
        pop(r.rq);
        --r.recv_count;
        complete_wr(qp, e, WcStatus::kLocLenErr, 0);
        free_wr(index);
        return terminate(qp, ddp_untagged(wire::kDdpUntaggedNoBuffer, seg, len));
    }
    if (!place(e, e.done, seg.payload)) {
        pop(r.rq);
        --r.recv_count;
        complete_wr(qp, e, WcStatus::kLocProtErr, 0);
        free_wr(index);
        return terminate(qp, term_of(TermLayer::kRdmap, wire::kRdmapEtypeLocalCatastrophic, 0));
    }
    e.done += static_cast<std::uint32_t>(seg.payload.size());
    r.rx_in_send = !h.last;
    if (h.last) {
        pop(r.rq);
        --r.recv_count;
        ++r.rx_msn_send;
        WorkCompletion wc;
        wc.wr_id = e.wr_id;
        wc.opcode = WcOpcode::kRecv;
        wc.byte_len = e.done;
        wc.qp = {qp, r.generation};
        wc.solicited = h.opcode == static_cast<std::uint8_t>(RdmapOpcode::kSendSe);
        complete(r.recv_cq, wc);
        free_wr(index);
    }
    return {};
}

Engine::RxVerdict Engine::rx_write(std::uint32_t qp, const wire::DdpSegment& seg, std::size_t len) {
    const wire::DdpHeader& h = seg.header;
    if (seg.payload.empty()) return {};  // siw checks nothing of a zero-length Write
    std::byte* to = nullptr;
    MemCheck c = mrs_.check(h.stag, h.to, seg.payload.size(), kAccessRemoteWrite, &to);
    if (c != MemCheck::kOk) return terminate(qp, ddp_tagged(tagged_code(c), seg, len));
    wire::copy_bytes(to, seg.payload.data(), seg.payload.size());
    placed_bytes_ += seg.payload.size();
    return {};
}

Engine::RxVerdict Engine::rx_read_request(std::uint32_t qp, const wire::DdpSegment& seg,
                                          std::size_t len) {
    QpRecord& r = qps_[qp];
    const wire::DdpHeader& h = seg.header;
    if (h.qn != wire::kQnReadRequest) {
        return terminate(qp, ddp_untagged(wire::kDdpUntaggedInvalidQn, seg, len));
    }
    if (h.msn != r.rx_msn_rreq) {
        return terminate(qp, ddp_untagged(wire::kDdpUntaggedMsnRange, seg, len));
    }
    auto rr = wire::parse_read_request(seg.payload);
    if (!rr || !h.last || h.mo != 0) {
        return terminate(qp, quoting(TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation,
                                     wire::kRdmapCodeUnspecified, seg, len));
    }
    if (r.irq_count >= r.ird) {
        return terminate(qp, quoting(TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation,
                                     wire::kRdmapCodeCatastrophicStream, seg, len));
    }
    MemCheck c = mrs_.check(rr->source_stag, rr->source_to, rr->size, kAccessRemoteRead, nullptr);
    if (c != MemCheck::kOk) {
        wire::TerminateRepr t =
            quoting(TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection, rdmap_code(c), seg, len);
        t.rdmap_header = seg.payload;
        return terminate(qp, t);
    }
    ++r.rx_msn_rreq;
    std::uint32_t index = alloc_wr();
    WrEntry& e = wrs_[index];
    e.kind = WrKind::kReadResponse;
    e.length = rr->size;
    e.rkey = rr->sink_stag;
    e.remote_addr = rr->sink_to;
    e.num_sge = 1;
    e.sge[0] = Sge{rr->source_to, rr->size, rr->source_stag};
    push(r.irq, index);
    ++r.irq_count;
    return {};
}

Engine::RxVerdict Engine::rx_read_response(std::uint32_t qp, const wire::DdpSegment& seg,
                                           std::size_t len) {
    QpRecord& r = qps_[qp];
    const wire::DdpHeader& h = seg.header;
    if (r.orq.empty()) {
        // siw_proc_rresp: nothing was asked for (ORQ empty).
        return terminate(qp,
                         quoting(TermLayer::kDdp, wire::kDdpEtypeLocalCatastrophic, 0, seg, len));
    }
    std::uint32_t index = r.orq.head;
    WrEntry& e = wrs_[index];
    std::uint32_t sink_stag = e.num_sge > 0 ? e.sge[0].lkey : 0;
    std::uint64_t sink_to = (e.num_sge > 0 ? e.sge[0].addr : 0) + e.done;
    std::size_t n = seg.payload.size();
    if (h.stag != sink_stag)
        return terminate(qp, ddp_tagged(wire::kDdpTaggedInvalidStag, seg, len));
    if (h.to != sink_to || n > e.length - e.done || (h.last && e.done + n != e.length)) {
        return terminate(qp, ddp_tagged(wire::kDdpTaggedBaseBounds, seg, len));
    }
    if (n > 0) {
        std::byte* to = nullptr;
        MemCheck c = mrs_.check(sink_stag, h.to, n, kAccessLocalWrite, &to);
        if (c != MemCheck::kOk) {
            pop(r.orq);
            --r.orq_count;
            --r.send_count;
            complete_wr(qp, e, WcStatus::kLocProtErr, 0);
            free_wr(index);
            return terminate(qp, ddp_tagged(tagged_code(c), seg, len));
        }
        wire::copy_bytes(to, seg.payload.data(), n);
        placed_bytes_ += n;
    }
    e.done += static_cast<std::uint32_t>(n);
    r.rx_in_rresp = !h.last;
    if (h.last) {
        pop(r.orq);
        --r.orq_count;
        --r.send_count;
        complete_wr(qp, e, WcStatus::kSuccess, e.length);
        free_wr(index);
    }
    return {};
}

Engine::RxVerdict Engine::rx_terminate(std::uint32_t qp, const wire::DdpSegment& seg) {
    QpRecord& r = qps_[qp];
    RxVerdict v;
    v.peer_terminated = true;
    // The Terminate Control word follows the untagged header.
    v.term = read_term_control(seg.payload);
    wire::TermHeader t;
    t.layer = v.term.layer;
    t.etype = v.term.etype;
    t.code = v.term.code;
    // The request in flight takes the peer's reason; the rest are flushed.
    WrQueue& q = !r.orq.empty() ? r.orq : r.sq;
    if (!q.empty()) {
        std::uint32_t index = pop(q);
        if (&q == &r.orq) --r.orq_count;
        --r.send_count;
        complete_wr(qp, wrs_[index], status_for(t), 0);
        free_wr(index);
    }
    enter_closing(qp);
    push_term_event(qp, QpEventType::kTerminateReceived, v.term);
    return v;
}

// Builds our TERMINATE (sent by tx_progress once the FPDU in hand is
// consumed), reports it and flushes the QP's work.
Engine::RxVerdict Engine::terminate(std::uint32_t qp, const wire::TerminateRepr& term) {
    QpRecord& r = qps_[qp];
    std::size_t ulpdu_len = wire::terminate_ulpdu_len(term);
    std::vector<std::byte>& out = pending_terms_[qp];
    out.assign(wire::fpdu_len_for_ulpdu(ulpdu_len), std::byte{0});
    std::size_t n = wire::emit_terminate_ulpdu(term, 1, wire::MutBytes(out).subspan(2));
    IWCM_ASSERT(n == ulpdu_len);
    std::size_t total = wire::seal_fpdu_in_place(ulpdu_len, r.crc, out);
    IWCM_ASSERT(total == out.size());
    return terminate_pending(qp, {static_cast<std::uint8_t>(term.layer), term.etype, term.code});
}

Engine::RxVerdict Engine::terminate_mpa(std::uint32_t qp, wire::TermError error) {
    QpRecord& r = qps_[qp];
    std::vector<std::byte>& out = pending_terms_[qp];
    out.assign(wire::terminate_fpdu_len(), std::byte{0});
    std::size_t n = wire::emit_terminate_fpdu(error, r.crc, out);
    IWCM_ASSERT(n == out.size());
    return terminate_pending(
        qp, {wire::kTermLayerLlp, wire::kTermEtypeMpa, static_cast<std::uint8_t>(error)});
}

// Our TERMINATE waits in pending_terms_: the QP closes, and the application
// hears kTerminateSent.
Engine::RxVerdict Engine::terminate_pending(std::uint32_t qp, const TermInfo& term) {
    QpRecord& r = qps_[qp];
    RxVerdict v;
    v.terminate = true;
    v.term = term;
    r.term_pending = true;
    enter_closing(qp);
    push_term_event(qp, QpEventType::kTerminateSent, term);
    return v;
}

void Engine::push_term_event(std::uint32_t qp, QpEventType type, const TermInfo& term) {
    const QpRecord& r = qps_[qp];
    QpEvent e;
    e.type = type;
    e.qp = {qp, r.generation};
    e.conn = r.conn;
    e.term = term;
    events_.push_back(e);
}

void Engine::after_rx(std::uint32_t qp, const RxVerdict& verdict) {
    QpRecord& r = qps_[qp];
    // The peer ended the stream with its TERMINATE: we close our side too.
    if (verdict.peer_terminated && r.link_up) links_.close(r.link, false);
}

}  // namespace iwcm::rdma
