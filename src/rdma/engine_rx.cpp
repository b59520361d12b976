// The receive side: FPDUs out of the link, CRC, DDP and RDMAP checks,
// placement, completions, and the TERMINATE that answers every error.
//
// Read first: engine.hpp; RFC 5044 section 6-8 (FPDU, CRC: a bad one closes
// the stream), RFC 5041 section 7 and RFC 5040 section 7 (error layers,
// types and codes), RFC 5040 section 6.4 (Read Requests: at most IRD).
// Which code answers which error follows Linux siw (siw_qp_rx.c):
//   no receive posted, message too long   DDP untagged 2/2 (siw: "no buffer")
//   Send with a wrong QN / MSN / MO       DDP untagged 2/1, 2/3, 2/4
//   Send continued with another opcode    RDMAP remote operation 2/6 (siw drops the stream)
//   Write: unknown STag or no rights      DDP tagged 1/0 (siw: RFC 5041 has no rights code)
//   Write: outside the region             DDP tagged 1/1
//   Read Response nobody asked for        DDP catastrophic 0/0
//   our READ RTR's response, not empty    DDP tagged 1/1 (1/0 for another STag)
//   Read Response to the wrong STag / TO  DDP tagged 1/0 / 1/1
//   Read Request: MSN                     DDP untagged 2/3
//   Read Request beyond IRD               RDMAP remote operation 2/7 (catastrophic stream)
//   Read Request source STag/rights/bounds RDMAP remote protection 1/0, 1/2, 1/1 (+ R)
//   bad DDP version                       DDP 1/4 or 2/6, nothing quoted
//   bad RDMAP version, unknown opcode     RDMAP 2/5, 2/6, nothing quoted
//   bad CRC                               MPA (LLP) 0/2, nothing quoted
//   TERMINATE not on queue 2, MSN 1, MO 0, L  none: the stream is reset (siw_proc_terminate)
// DDP-layer and RDMAP remote errors quote the segment's length (M) and DDP
// header (D), remote protection errors the Read Request too (R).
#include <algorithm>
#include <cstring>

#include "iwcm/assert.hpp"
#include "rdma/engine.hpp"
#include "wire/copy.hpp"
#include "wire/fpdu.hpp"

namespace iwcm::rdma {

namespace {

using wire::RdmapOpcode;
using wire::TermLayer;

// The four Sends of RFC 5040 (section 4.3, opcodes 0x3 to 0x6), and those that invalidate.
constexpr bool is_send(RdmapOpcode op) {
    return op == RdmapOpcode::kSend || op == RdmapOpcode::kSendSe ||
           op == RdmapOpcode::kSendInvalidate || op == RdmapOpcode::kSendSeInvalidate;
}
constexpr bool invalidates(RdmapOpcode op) {
    return op == RdmapOpcode::kSendInvalidate || op == RdmapOpcode::kSendSeInvalidate;
}

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
    IWCM_ASSERT(c != MemCheck::kOk);  // asked only of a check that refused
    switch (c) {
        case MemCheck::kBaseBounds: return wire::kDdpTaggedBaseBounds;
        case MemCheck::kPdMismatch: return wire::kDdpTaggedStagNotAssociated;
        case MemCheck::kInvalidStag:
        case MemCheck::kAccessRights:
        case MemCheck::kOk: break;
    }
    return wire::kDdpTaggedInvalidStag;
}

// siw_rdmap_error.
std::uint8_t rdmap_code(MemCheck c) {
    IWCM_ASSERT(c != MemCheck::kOk);  // asked only of a check that refused
    switch (c) {
        case MemCheck::kInvalidStag: return wire::kRdmapCodeInvalidStag;
        case MemCheck::kPdMismatch: return wire::kRdmapCodeStagNotAssociated;
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
    // Either order reads the two nibbles of the first byte, one as layer, one as type.
    IWCM_ASSERT((t.layer | t.etype) <= 0xF &&
                (t.layer << 4 | t.etype) == (t.siw_order ? (lo << 4 | hi) : u(0)));
    return t;
}

}  // namespace

void Engine::on_readable(QpHandle qp) {
    const SettleOnExit settle{*this};
    if (find_qp(qp) == nullptr) return;
    const CheckScope check(*this, qp.index);
    rx_drain(qp.index);
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
        // Every verdict that ends the stream closed the QP (enter_closing).
        IWCM_ASSERT(!(v.terminate || v.peer_terminated || v.reset) || r.state != QpState::kRts);
        // A TERMINATE ends the link in after_rx: what was read goes first.
        if (v.peer_terminated || v.reset) rx_consume(qp, done);
        after_rx(qp, v);
    }
    if (r.live && r.link_up) rx_consume(qp, done);
    tx_progress(qp);
}

void Engine::take_early_rtr_response(QpHandle handle) {
    const SettleOnExit settle{*this};
    QpRecord* r = find_qp(handle);
    if (r == nullptr || !r->rtr_read_due || !r->link_up || r->rx_held) return;
    const CheckScope check(*this, handle.index);
    const wire::Bytes view = links_.peek(r->link);
    // The DDP control byte says tagged, the RDMAP one Read Response (RFC 5041 4.2, 5040 4.2).
    constexpr std::size_t kDdpCtrl = wire::kFpduLengthLen, kRdmapCtrl = kDdpCtrl + 1;
    if (view.size() <= kRdmapCtrl ||
        (std::to_integer<unsigned>(view[kDdpCtrl]) & wire::kDdpFlagTagged) == 0 ||
        (std::to_integer<unsigned>(view[kRdmapCtrl]) & 0x0F) !=
            static_cast<unsigned>(RdmapOpcode::kReadResponse)) {
        return;
    }
    std::size_t done = 0;
    const auto fpdu = rx_in_place(handle.index, done);
    if (!fpdu) return;  // split in the ring: the first receive's drain reads it
    const RxVerdict v = rx_fpdu(handle.index, *fpdu);
    // Our RTR's answer was taken, or the QP closed (flush_all forgets it).
    IWCM_ASSERT(!qps_[handle.index].rtr_read_due);
    rx_consume(handle.index, done);
    after_rx(handle.index, v);
    tx_progress(handle.index);
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
    IWCM_ASSERT(taken <= bytes.size());  // the sink takes whole FPDUs of what it was given
    return taken;
}

std::size_t Engine::on_in_order_parts(QpHandle handle, std::span<const wire::Bytes> pieces) {
    const QpRecord* r = find_qp(handle);
    if (r == nullptr || !r->link_up || r->state != QpState::kRts || r->rx_held || r->term_pending) {
        return 0;
    }
    wire::Pieces in(pieces);
    const std::size_t total = in.size();
    std::size_t taken = 0;
    while (in.size() >= 2) {
        std::byte field[wire::kFpduLengthLen];
        in.head<wire::kFpduLengthLen>(field);
        const std::size_t len = *wire::fpdu_frame_len(wire::Bytes(field));
        if (in.size() < len) break;
        const wire::Pieces fpdu = in.first(len);
        if (const auto one = fpdu.contiguous()) {
            if (!place_direct(handle.index, *one)) break;
        } else if (!place_split(handle.index, fpdu)) {
            break;
        }
        in = in.subspan(len);
        taken += len;
    }
    IWCM_ASSERT(taken + in.size() == total);  // what was taken is a prefix of the pieces
    return taken;
}

// An FPDU across pieces, placed as place_direct places one in a single span: its header
// copied out, its CRC summed over the pieces, its payload copied from them into memory.
bool Engine::place_split(std::uint32_t qp, const wire::Pieces& fpdu) {
    const std::size_t len = fpdu.size();
    if (len < wire::kFpduLengthLen + wire::kFpduCrcLen) return false;
    // The length field and the DDP header, or as much of them as the FPDU holds before its
    // CRC (parse_ddp refuses a short one).
    constexpr std::size_t kTaggedHead = wire::kFpduLengthLen + wire::kDdpTaggedHeaderLen;
    constexpr std::size_t kUntaggedHead = wire::kFpduLengthLen + wire::kDdpUntaggedHeaderLen;
    std::byte head[kUntaggedHead];
    fpdu.head<wire::kFpduLengthLen + 1>(head);  // and DDP's control byte
    const std::size_t want =
        wire::kFpduLengthLen + wire::ddp_header_len(static_cast<std::uint8_t>(head[2]));
    const std::size_t got = std::min(want, len - wire::kFpduCrcLen);
    IWCM_ASSERT(got >= wire::kFpduLengthLen && got <= sizeof(head));  // the copy fits `head`
    if (got == kTaggedHead) {
        fpdu.head<kTaggedHead>(head);
    } else if (got == kUntaggedHead) {
        fpdu.head<kUntaggedHead>(head);
    } else {
        fpdu.first(got).copy_to(head);
    }
    const std::size_t ulpdu_len = wire::load_be16(wire::Bytes(head, got), 0);
    const auto seg = wire::parse_ddp(
        wire::Bytes(head + wire::kFpduLengthLen, std::min(ulpdu_len, got - wire::kFpduLengthLen)));
    if (!seg) return false;
    if (qps_[qp].crc && !wire::fpdu_crc_ok(fpdu, len)) return false;
    const std::size_t header_len = seg->header.header_len();
    return place_segment(
        qp, *seg, ulpdu_len,
        fpdu.subspan(wire::kFpduLengthLen + header_len).first(ulpdu_len - header_len));
}

// One FPDU of on_in_order: placed if it is an RDMA Write, a Send or a Read
// Response that rx_fpdu would place without an error (the same checks: CRC,
// versions, opcode, then rx_write's, rx_send's or rx_read_response's, all
// before a byte is copied), else left alone for rx_fpdu.
bool Engine::place_direct(std::uint32_t qp, wire::Bytes fpdu) {
    // One whole FPDU, as its length field says (on_in_order cuts it so).
    IWCM_ASSERT(fpdu.size() >= wire::kFpduLengthLen &&
                fpdu.size() == *wire::fpdu_frame_len(fpdu.first(wire::kFpduLengthLen)));
    auto f = wire::parse_fpdu(fpdu, qps_[qp].crc);
    if (!f || !f->crc_ok) return false;
    auto seg = wire::parse_ddp(f->ulpdu);
    if (!seg) return false;
    return place_segment(qp, *seg, f->ulpdu.size(), wire::Pieces::of(seg->payload));
}

// A checked FPDU's segment (its payload where it lies): placed as rx_segment would place it,
// or left alone (false) when it is not a Write, a Send or a Read Response that rx_segment
// would place without an error.
bool Engine::place_segment(std::uint32_t qp, const wire::DdpSegment& seg, std::size_t ulpdu_len,
                           const wire::Pieces& payload) {
    const wire::DdpHeader& h = seg.header;
    if (h.ddp_version != wire::kDdpVersion || h.rdmap_version != wire::kRdmapVersion) return false;
    const auto op = static_cast<RdmapOpcode>(h.opcode);
    const std::size_t n = payload.size();
    if (op == RdmapOpcode::kWrite && h.tagged) {
        message_end_ = message_end_ || h.last;
        if (n == 0) return true;  // rx_write checks nothing of it either
        std::byte* to = nullptr;
        if (mrs_.check(h.stag, h.to, n, kAccessRemoteWrite, qps_[qp].pd, qp, &to) !=
            MemCheck::kOk) {
            return false;
        }
        payload.copy_to(to);
        placed_bytes_ += n;
        placed_direct_ += n;
        return true;
    }
    RxVerdict v;
    if (op == RdmapOpcode::kReadResponse && h.tagged) {
        if (!read_response_placeable(qps_[qp], h, n)) return false;
        v = rx_read_response(qp, seg, ulpdu_len, payload);
    } else if (is_send(op) && !h.tagged) {
        take_srq_recv(qp);
        if (!send_placeable(qp, h, payload)) return false;
        v = rx_send(qp, seg, ulpdu_len, payload);
        message_end_ = message_end_ || h.last;
    } else {
        return false;
    }
    IWCM_ASSERT(!v.terminate && !v.peer_terminated);
    placed_direct_ += n;
    return true;
}

// rx_send's checks, each of which ends in a TERMINATE there.
bool Engine::send_placeable(std::uint32_t qp, const wire::DdpHeader& h,
                            const wire::Pieces& payload) {
    const QpRecord& r = qps_[qp];
    if (r.rq.empty() || h.qn != wire::kQnSend || h.msn != r.rx_msn_send) return false;
    if (r.rx_in_send && h.opcode != r.rx_send_op) return false;
    // A last segment whose invalidation would fail ends in a TERMINATE there.
    if (h.last && invalidates(static_cast<RdmapOpcode>(h.opcode)) &&
        mrs_.invalidate(h.inval_stag, r.pd, qp, true) != MrTable::Invalidation::kOk)
        return false;
    const WrEntry& e = wrs_[r.rq.head];
    IWCM_ASSERT(e.kind == WrKind::kRecv && e.done <= e.length);
    return h.mo == e.done && payload.size() <= e.length - e.done &&
           place(r.pd, e, e.done, payload, true);
}

// rx_read_response's checks, each of which ends in a TERMINATE there.
bool Engine::read_response_placeable(const QpRecord& r, const wire::DdpHeader& h,
                                     std::size_t n) const {
    const std::uint32_t index = read_in_flight(r);
    if (index == kNil || r.rtr_read_due) return false;
    IWCM_ASSERT(r.orq_count > 0);  // a Read in flight holds its ORD slot
    const ReadSink sink = read_sink(wrs_[index]);
    if (h.stag != sink.stag || h.to != sink.to || n > sink.left) return false;
    if (h.last && n != sink.left) return false;
    // The last one frees an ORD slot a Read in the send queue may wait for:
    // it goes through the buffer, whose drain sends (the sink sends nothing).
    if (h.last && !r.sq.empty()) return false;
    return n == 0 || mrs_.check(sink.stag, h.to, n, kAccessLocalWrite, r.pd, kLocalUse, nullptr) ==
                         MemCheck::kOk;
}

std::uint32_t Engine::read_in_flight(const QpRecord& r) const {
    if (!r.orq.empty()) return r.orq.head;
    if (r.sq.empty()) return kNil;
    const WrEntry& e = wrs_[r.sq.head];
    return e.kind == WrKind::kRead && e.parts_sent > e.parts_done ? r.sq.head : kNil;
}

Engine::ReadSink Engine::read_sink(const WrEntry& e) {
    IWCM_ASSERT(e.kind == WrKind::kRead && e.parts_done < e.parts_sent);
    if (e.num_sge == 0) return {};
    std::uint64_t before = 0;
    for (std::uint8_t i = 0; i < e.parts_done; ++i) before += e.sge[i].length;
    const Sge& s = e.sge[e.parts_done];
    const auto within = static_cast<std::uint32_t>(e.done - before);
    IWCM_ASSERT(within <= s.length);
    return {s.lkey, s.addr + within, s.length - within};
}

void Engine::drop_read(std::uint32_t qp, std::uint32_t index) {
    QpRecord& r = qps_[qp];
    WrEntry& e = wrs_[index];
    IWCM_ASSERT(index == r.orq.head || index == r.sq.head);
    pop(index == r.orq.head ? r.orq : r.sq);
    const std::uint16_t slots = e.parts_sent - e.parts_done;
    IWCM_ASSERT(r.orq_count >= slots && r.send_count > 0);
    r.orq_count = static_cast<std::uint16_t>(r.orq_count - slots);
    --r.send_count;
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
    // An FPDU is at least its length field and CRC: each one read moves `done` on.
    IWCM_ASSERT(len >= wire::kFpduLengthLen + wire::kFpduCrcLen);
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
    // rx_drain reads only a running QP, and our RTR's answer is due only on one.
    IWCM_ASSERT(qps_[qp].live && qps_[qp].state == QpState::kRts);
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
    // The segment's payload is part of its ULPDU, of len bytes.
    IWCM_ASSERT(qp < qps_.size() && seg.payload.size() <= len);
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
    // A Write or Send completes at its sender once we acknowledge its last
    // segment: read from the stream's buffer (it came before its receive, or
    // behind unread bytes), it asks for the ACK at once too (ack_now).
    if ((op == RdmapOpcode::kWrite || is_send(op)) && h.last) message_end_ = true;
    switch (op) {
        case RdmapOpcode::kWrite: return rx_write(qp, seg, len);
        case RdmapOpcode::kReadRequest: return rx_read_request(qp, seg, len);
        case RdmapOpcode::kReadResponse:
            return rx_read_response(qp, seg, len, wire::Pieces::of(seg.payload));
        case RdmapOpcode::kSend:
        case RdmapOpcode::kSendSe:
        case RdmapOpcode::kSendInvalidate:
        case RdmapOpcode::kSendSeInvalidate:
            return rx_send(qp, seg, len, wire::Pieces::of(seg.payload));
        case RdmapOpcode::kTerminate: return rx_terminate(qp, seg);
    }
    return remote_op(wire::kRdmapCodeUnexpectedOpcode);
}

// Scatters data at the message offset into a receive's SGEs.
// `dry`: only checks that every byte has its place (nothing copied).
bool Engine::place(std::uint32_t pd, const WrEntry& e, std::size_t offset, const wire::Pieces& data,
                   bool dry) {
    IWCM_ASSERT(e.num_sge <= kMaxSge);
    std::size_t placed = 0;
    for (std::uint8_t i = 0; i < e.num_sge && placed < data.size(); ++i) {
        const Sge& s = e.sge[i];
        if (offset >= s.length) {
            offset -= s.length;
            continue;
        }
        std::size_t n = std::min<std::size_t>(s.length - offset, data.size() - placed);
        std::byte* to = nullptr;
        if (mrs_.check(s.lkey, s.addr + offset, n, kAccessLocalWrite, pd, kLocalUse, &to) !=
            MemCheck::kOk) {
            return false;
        }
        if (!dry) {
            data.subspan(placed).first(n).copy_to(to);
            placed_bytes_ += n;
        }
        placed += n;
        offset = 0;
    }
    IWCM_ASSERT(placed <= data.size());
    return placed == data.size();
}

Engine::RxVerdict Engine::rx_send(std::uint32_t qp, const wire::DdpSegment& seg, std::size_t len,
                                  const wire::Pieces& payload) {
    QpRecord& r = qps_[qp];
    const wire::DdpHeader& h = seg.header;
    // siw_proc_send, then siw_send_check_ntoh, in their order.
    take_srq_recv(qp);
    if (r.rq.empty()) return terminate(qp, ddp_untagged(wire::kDdpUntaggedNoBuffer, seg, len));
    if (h.qn != wire::kQnSend) {
        return terminate(qp, ddp_untagged(wire::kDdpUntaggedInvalidQn, seg, len));
    }
    if (h.msn != r.rx_msn_send) {
        return terminate(qp, ddp_untagged(wire::kDdpUntaggedMsnRange, seg, len));
    }
    std::uint32_t index = r.rq.head;
    WrEntry& e = wrs_[index];
    if (r.rx_in_send && h.opcode != r.rx_send_op) {
        // One message, one opcode (RFC 5040 section 4.3: the opcode is the message's).
        // siw_get_hdr refuses the change ("packet intersection"), completes the receive
        // in error and drops the stream; RFC 5040 section 7.2 asks for a TERMINATE: the
        // opcode is unexpected, as siw answers an unknown one (nothing quoted).
        pop(r.rq);
        --r.recv_count;
        complete_wr(qp, e, WcStatus::kGeneralErr, 0);
        free_wr(index);
        return terminate(qp, term_of(TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation,
                                     wire::kRdmapCodeUnexpectedOpcode));
    }
    if (h.mo != e.done) return terminate(qp, ddp_untagged(wire::kDdpUntaggedInvalidMo, seg, len));
    if (payload.size() > e.length - e.done) {
        pop(r.rq);
        --r.recv_count;
        complete_wr(qp, e, WcStatus::kLocLenErr, 0);
        free_wr(index);
        return terminate(qp, ddp_untagged(wire::kDdpUntaggedNoBuffer, seg, len));
    }
    if (!place(r.pd, e, e.done, payload)) {
        pop(r.rq);
        --r.recv_count;
        complete_wr(qp, e, WcStatus::kLocProtErr, 0);
        free_wr(index);
        // siw_proc_send raises IB_EVENT_QP_ACCESS_ERR when the receive's SGE fails its check.
        return terminate(qp, term_of(TermLayer::kRdmap, wire::kRdmapEtypeLocalCatastrophic, 0),
                         QpError::kAccess);
    }
    e.done += static_cast<std::uint32_t>(payload.size());
    IWCM_ASSERT(e.done <= e.length && r.recv_count > 0);
    r.rx_in_send = !h.last;
    r.rx_send_op = h.opcode;
    if (h.last) {
        pop(r.rq);
        --r.recv_count;
        ++r.rx_msn_send;
        const auto op = static_cast<RdmapOpcode>(h.opcode);
        WorkCompletion wc;
        wc.wr_id = e.wr_id;
        wc.opcode = WcOpcode::kRecv;
        wc.byte_len = e.done;
        wc.qp = {qp, r.generation};
        wc.solicited = op == RdmapOpcode::kSendSe || op == RdmapOpcode::kSendSeInvalidate;
        // RFC 5040 section 6.10: the STag is invalid before the receive completes.
        auto inv = MrTable::Invalidation::kOk;
        if (invalidates(op)) {
            inv = mrs_.invalidate(h.inval_stag, r.pd, qp);
            wc.with_invalidate = inv == MrTable::Invalidation::kOk;
            wc.invalidated_rkey = wc.with_invalidate ? h.inval_stag : 0;
        }
        complete(r.recv_cq, wc);
        free_wr(index);
        // As siw: the message was placed and its receive completes (without the
        // invalidation); an STag of another domain is a protection error, one that names
        // no region an operation error, both "cannot be invalidated".
        if (inv != MrTable::Invalidation::kOk) {
            const bool other_pd = inv == MrTable::Invalidation::kPdMismatch;
            return terminate(qp,
                             term_of(TermLayer::kRdmap,
                                     other_pd ? wire::kRdmapEtypeRemoteProtection
                                              : wire::kRdmapEtypeRemoteOperation,
                                     wire::kRdmapCodeCannotInvalidate),
                             other_pd ? QpError::kAccess : QpError::kFatal);
        }
    }
    return {};
}

Engine::RxVerdict Engine::rx_write(std::uint32_t qp, const wire::DdpSegment& seg, std::size_t len) {
    const wire::DdpHeader& h = seg.header;
    IWCM_ASSERT(h.tagged && seg.payload.size() <= len);  // rx_segment checked the opcode
    if (seg.payload.empty()) return {};  // siw checks nothing of a zero-length Write
    std::byte* to = nullptr;
    MemCheck c =
        mrs_.check(h.stag, h.to, seg.payload.size(), kAccessRemoteWrite, qps_[qp].pd, qp, &to);
    if (c != MemCheck::kOk) {
        return terminate(qp, ddp_tagged(tagged_code(c), seg, len), QpError::kAccess);
    }
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
    MemCheck c =
        mrs_.check(rr->source_stag, rr->source_to, rr->size, kAccessRemoteRead, r.pd, qp, nullptr);
    if (c != MemCheck::kOk) {
        wire::TerminateRepr t =
            quoting(TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection, rdmap_code(c), seg, len);
        t.rdmap_header = seg.payload;
        return terminate(qp, t, QpError::kAccess);
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
    IWCM_ASSERT(r.irq_count <= r.ird);  // the IRD the connection negotiated bounds them
    return {};
}

Engine::RxVerdict Engine::rx_read_response(std::uint32_t qp, const wire::DdpSegment& seg,
                                           std::size_t len, const wire::Pieces& payload) {
    QpRecord& r = qps_[qp];
    const wire::DdpHeader& h = seg.header;
    if (r.rtr_read_due) return rx_rtr_read_response(qp, seg, len, payload.size());
    const std::uint32_t index = read_in_flight(r);
    if (index == kNil) {
        // siw_proc_rresp: nothing was asked for (ORQ empty).
        return terminate(qp,
                         quoting(TermLayer::kDdp, wire::kDdpEtypeLocalCatastrophic, 0, seg, len));
    }
    WrEntry& e = wrs_[index];
    const ReadSink sink = read_sink(e);
    std::size_t n = payload.size();
    if (h.stag != sink.stag)
        return terminate(qp, ddp_tagged(wire::kDdpTaggedInvalidStag, seg, len));
    if (h.to != sink.to || n > sink.left || (h.last && n != sink.left)) {
        return terminate(qp, ddp_tagged(wire::kDdpTaggedBaseBounds, seg, len));
    }
    if (n > 0) {
        std::byte* to = nullptr;
        MemCheck c = mrs_.check(sink.stag, h.to, n, kAccessLocalWrite, r.pd, kLocalUse, &to);
        if (c != MemCheck::kOk) {
            drop_read(qp, index);
            complete_wr(qp, e, WcStatus::kLocProtErr, 0);
            free_wr(index);
            return terminate(qp, ddp_tagged(tagged_code(c), seg, len), QpError::kAccess);
        }
        payload.copy_to(to);
        placed_bytes_ += n;
    }
    e.done += static_cast<std::uint32_t>(n);
    r.rx_in_rresp = !h.last;
    if (!h.last) return {};
    // The part is answered whole: its ORD slot is free; the last part completes the Read.
    IWCM_ASSERT(r.orq_count > 0);
    --r.orq_count;
    const std::uint8_t parts = std::max<std::uint8_t>(e.num_sge, 1);
    if (++e.parts_done < parts) return {};
    IWCM_ASSERT(index == r.orq.head && e.done == e.length);
    pop(r.orq);
    --r.send_count;
    complete_wr(qp, e, WcStatus::kSuccess, e.length);
    free_wr(index);
    return {};
}

// The answer to our READ RTR (RFC 6581 section 6), the first Read Response of the
// connection: zero-length, whole, to the sink we named (wire::kRtrStag, offset 0), as
// siw_rresp_check_ntoh checks any response against its request. It completes nothing
// (the RTR is no request of the application's) and frees its ORD slot.
Engine::RxVerdict Engine::rx_rtr_read_response(std::uint32_t qp, const wire::DdpSegment& seg,
                                               std::size_t len, std::size_t payload_len) {
    QpRecord& r = qps_[qp];
    const wire::DdpHeader& h = seg.header;
    IWCM_ASSERT(r.rtr_read_due && r.orq_count > 0);
    if (h.stag != wire::kRtrStag)
        return terminate(qp, ddp_tagged(wire::kDdpTaggedInvalidStag, seg, len));
    if (h.to != 0 || payload_len != 0 || !h.last) {
        return terminate(qp, ddp_tagged(wire::kDdpTaggedBaseBounds, seg, len));
    }
    r.rtr_read_due = false;
    --r.orq_count;
    return {};
}

Engine::RxVerdict Engine::rx_terminate(std::uint32_t qp, const wire::DdpSegment& seg) {
    QpRecord& r = qps_[qp];
    RxVerdict v;
    const wire::DdpHeader& h = seg.header;
    IWCM_ASSERT(!h.tagged);  // rx_segment checked the opcode
    // RFC 5040 sections 4.8 and 5.3: a TERMINATE is one untagged, whole message on queue 2,
    // the first there (the stream ends after it), at MO 0. siw_proc_terminate takes
    // anything else as bogus and drops the stream without reading it: we reset it, report
    // no peer's error, and flush the work (the reset's kDisconnected follows).
    if (h.qn != wire::kQnTerminate || h.msn != 1 || h.mo != 0 || !h.last) {
        v.reset = true;
        enter_closing(qp);
        return v;
    }
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
    IWCM_ASSERT(r.state != QpState::kRts);  // no new work once the peer ended
    push_term_event(qp, QpEventType::kTerminateReceived, v.term, QpError::kFatal);
    return v;
}

// Builds our TERMINATE (sent by tx_progress once the FPDU in hand is
// consumed), reports it and flushes the QP's work.
Engine::RxVerdict Engine::terminate(std::uint32_t qp, const wire::TerminateRepr& term,
                                    QpError error) {
    QpRecord& r = qps_[qp];
    std::size_t ulpdu_len = wire::terminate_ulpdu_len(term);
    std::vector<std::byte>& out = pending_terms_[qp].fpdu;
    out.assign(wire::fpdu_len_for_ulpdu(ulpdu_len), std::byte{0});
    std::size_t n = wire::emit_terminate_ulpdu(term, 1, wire::MutBytes(out).subspan(2));
    IWCM_ASSERT(n == ulpdu_len);
    std::size_t total = wire::seal_fpdu_in_place(ulpdu_len, r.crc, out);
    IWCM_ASSERT(total == out.size());
    return terminate_pending(qp, {static_cast<std::uint8_t>(term.layer), term.etype, term.code},
                             error);
}

Engine::RxVerdict Engine::terminate_mpa(std::uint32_t qp, wire::TermError error) {
    QpRecord& r = qps_[qp];
    std::vector<std::byte>& out = pending_terms_[qp].fpdu;
    out.assign(wire::terminate_fpdu_len(), std::byte{0});
    std::size_t n = wire::emit_terminate_fpdu(error, r.crc, out);
    IWCM_ASSERT(n == out.size());
    return terminate_pending(
        qp, {wire::kTermLayerLlp, wire::kTermEtypeMpa, static_cast<std::uint8_t>(error)},
        QpError::kFatal);
}

// Our TERMINATE waits in pending_terms_: the QP closes, and the application
// hears kTerminateSent when the link takes it (tx_terminate), or
// kTerminateUnsent when it cannot.
Engine::RxVerdict Engine::terminate_pending(std::uint32_t qp, const TermInfo& term, QpError error) {
    QpRecord& r = qps_[qp];
    PendingTerm& pending = pending_terms_[qp];
    IWCM_ASSERT(!pending.fpdu.empty());  // terminate or terminate_mpa built it
    RxVerdict v;
    v.terminate = true;
    v.term = term;
    r.term_pending = true;
    pending.term = term;
    pending.error = error;
    enter_closing(qp);
    return v;
}

void Engine::push_term_event(std::uint32_t qp, QpEventType type, const TermInfo& term,
                             QpError error) {
    const QpRecord& r = qps_[qp];
    IWCM_ASSERT(r.live &&
                (type == QpEventType::kTerminateSent || type == QpEventType::kTerminateUnsent ||
                 type == QpEventType::kTerminateReceived));
    QpEvent e;
    e.type = type;
    e.qp = {qp, r.generation};
    e.conn = r.conn;
    e.term = term;
    e.error = error;
    events_.push_back(e);
}

void Engine::after_rx(std::uint32_t qp, const RxVerdict& verdict) {
    QpRecord& r = qps_[qp];
    // The peer ended the stream with its TERMINATE: we close our side too.
    if (verdict.peer_terminated && r.link_up) links_.close(r.link, false);
    if (verdict.reset && r.link_up) links_.close(r.link, true);
}

}  // namespace iwcm::rdma
