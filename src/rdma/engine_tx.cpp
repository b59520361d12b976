// The transmit side: the send queue (Send, Send with Solicited Event, RDMA
// Write, RDMA Read Request), Read Responses to the peer's reads, TERMINATE.
//
// Read first: engine.hpp; RFC 5040 section 5 (which queue and header each
// message uses), RFC 5041 section 5 (segmentation: MO, L), RFC 5044 section
// 6 ("MPA-aware" senders: one FPDU per TCP segment). Every FPDU is one
// record of the link, at most max_fpdu bytes; a message longer than that is
// cut into DDP segments, L on the last. One message goes out whole before
// the next starts; Read Responses go before the send queue.
#include <algorithm>
#include <cstring>

#include "iwcm/assert.hpp"
#include "rdma/engine.hpp"
#include "wire/crc32c.hpp"
#include "wire/fpdu.hpp"

namespace iwcm::rdma {

using wire::kDdpTaggedHeaderLen;
using wire::kDdpUntaggedHeaderLen;

void Engine::on_writable(QpHandle qp) {
    const SettleOnExit settle{*this};
    if (find_qp(qp) == nullptr) return;
    const CheckScope check(*this, qp.index);
    tx_progress(qp.index);
}

void Engine::tx_progress(std::uint32_t qp) {
    IWCM_ASSERT(qp < qps_.size());
    QpRecord& r = qps_[qp];
    if (!r.live || !r.link_up) return;
    if (r.term_pending) {
        tx_terminate(qp);
        return;
    }
    bool any = false;
    while (r.state == QpState::kRts) {
        bool sent = false;
        if (r.tx_active == TxActive::kReadResponse ||
            (r.tx_active == TxActive::kNone && !r.irq.empty())) {
            sent = tx_read_response(qp);
        } else if (!r.sq.empty()) {
            sent = tx_send_queue(qp);
        }
        if (!sent) break;
        any = true;
        IWCM_ASSERT(r.send_count <= r.max_send_wr && r.irq_count <= r.ird);
    }
    if (r.term_pending) {
        tx_terminate(qp);  // a local failure while sending (it flushes what went before)
    } else if (any && r.link_up) {
        links_.flush(r.link);  // the round's FPDUs leave together
    }
}

// Seals the ULPDU built at tx_buf_[2...] and hands it to the link.
bool Engine::send_fpdu(std::uint32_t qp, std::size_t ulpdu_len) {
    const QpRecord& r = qps_[qp];
    std::size_t n = wire::seal_fpdu_in_place(ulpdu_len, r.crc, tx_buf_);
    IWCM_ASSERT(n <= r.max_fpdu);
    return links_.send_record(r.link, wire::Bytes(tx_buf_).first(n));
}

// Sends an FPDU whose header was built at tx_buf_[2...] and whose payload
// stays where it is (registered memory): the link gathers the pieces, or
// (the Device's stream) keeps the payload by reference and copies it only
// into each frame that carries it. The CRC runs over the pieces in order.
bool Engine::send_fpdu(std::uint32_t qp, std::size_t header_len, const Views& payload) {
    QpRecord& r = qps_[qp];
    if (payload.count > 0) r.refs_out = true;
    std::size_t ulpdu_len = header_len;
    for (std::size_t i = 0; i < payload.count; ++i) ulpdu_len += payload.part[i].size();
    IWCM_ASSERT(ulpdu_len <= 0xFFFF);
    wire::store_be16(tx_buf_, 0, static_cast<std::uint16_t>(ulpdu_len));
    wire::Bytes head = wire::Bytes(tx_buf_).first(2 + header_len);
    std::optional<std::uint32_t> crc;
    if (r.crc) {
        crc = wire::crc32c(head);
        for (std::size_t i = 0; i < payload.count; ++i) crc = wire::crc32c(payload.part[i], *crc);
    }
    std::byte trailer[8];
    std::size_t trailer_len = wire::emit_fpdu_trailer(ulpdu_len, crc, trailer);
    wire::Bytes parts[kMaxSge + 2];
    std::size_t n = 0;
    parts[n++] = head;
    for (std::size_t i = 0; i < payload.count; ++i) parts[n++] = payload.part[i];
    parts[n++] = wire::Bytes(trailer, trailer_len);
    IWCM_ASSERT(2 + ulpdu_len + trailer_len <= r.max_fpdu);
    const auto by_ref = static_cast<std::uint32_t>(((1U << payload.count) - 1) << 1);
    framing_sent_ += head.size() + trailer_len;
    return links_.send_record_ref(r.link, std::span<const wire::Bytes>(parts, n), by_ref);
}

// Finds the message's bytes [offset, offset + len) in its SGEs. False when a
// region went away or shrank under the request.
bool Engine::gather(std::uint32_t qp, const WrEntry& e, std::size_t offset, std::size_t len,
                    Views& out) const {
    // A Read Response's source is the peer's to name (it may be a window of this QP).
    const bool remote = e.kind == WrKind::kReadResponse;
    const std::uint32_t access = remote ? std::uint32_t{kAccessRemoteRead} : 0u;
    const std::uint32_t user = remote ? qp : kLocalUse;
    const std::uint32_t pd = qps_[qp].pd;
    IWCM_ASSERT(e.num_sge <= kMaxSge);  // out.part holds as many
    std::size_t found = 0;
    out.count = 0;
    for (std::uint8_t i = 0; i < e.num_sge && found < len; ++i) {
        const Sge& s = e.sge[i];
        if (offset >= s.length) {
            offset -= s.length;
            continue;
        }
        std::size_t n = std::min<std::size_t>(s.length - offset, len - found);
        std::byte* from = nullptr;
        if (mrs_.check(s.lkey, s.addr + offset, n, access, pd, user, &from) != MemCheck::kOk)
            return false;
        out.part[out.count++] = wire::Bytes(from, n);
        found += n;
        offset = 0;
    }
    return found == len;
}

bool Engine::tx_send_queue(std::uint32_t qp) {
    QpRecord& r = qps_[qp];
    std::uint32_t index = r.sq.head;
    WrEntry& e = wrs_[index];
    // IBV_SEND_FENCE: the request waits until every earlier Read has completed (the
    // last Read Response's drain sends again, rx_drain).
    if (e.fence && e.done == 0 && e.parts_sent == 0 && r.orq_count > 0) return false;
    if (e.kind == WrKind::kRead) {
        // The send queue stalls at a READ while ORD reads are outstanding.
        return r.orq_count < r.ord && tx_read_request(qp, e);
    }
    if (e.kind == WrKind::kLocalInvalidate || e.kind == WrKind::kBindMw) return tx_local(qp);
    bool send = e.kind == WrKind::kSend;
    std::size_t header_len = send ? kDdpUntaggedHeaderLen : kDdpTaggedHeaderLen;
    std::size_t room = wire::max_ulpdu_for_fpdu(r.max_fpdu) - header_len;
    std::size_t chunk = std::min<std::size_t>(e.length - e.done, room);
    bool last = e.done + chunk == e.length;
    wire::DdpHeader h;
    h.tagged = !send;
    h.last = last;
    if (send) {
        using Op = wire::RdmapOpcode;
        const Op op = e.invalidate ? (e.solicited ? Op::kSendSeInvalidate : Op::kSendInvalidate)
                                   : (e.solicited ? Op::kSendSe : Op::kSend);
        h.opcode = static_cast<std::uint8_t>(op);
        // Every segment of the message names the STag (siw reads it from the last).
        if (e.invalidate) h.inval_stag = e.rkey;
        h.qn = wire::kQnSend;
        h.msn = r.tx_msn_send;
        h.mo = e.done;
    } else {
        h.opcode = static_cast<std::uint8_t>(wire::RdmapOpcode::kWrite);
        h.stag = e.rkey;
        h.to = e.remote_addr + e.done;
    }
    wire::MutBytes ulpdu = wire::MutBytes(tx_buf_).subspan(2);
    std::size_t written = wire::emit_ddp_header(h, ulpdu);
    IWCM_ASSERT(written == header_len);
    Views payload;
    if (!gather(qp, e, e.done, chunk, payload)) {
        local_failure(qp, index, WcStatus::kLocProtErr);
        return false;
    }
    if (!send_fpdu(qp, header_len, payload)) return false;
    e.done += static_cast<std::uint32_t>(chunk);
    r.tx_active = TxActive::kSendQueue;
    if (!last) return true;
    pop(r.sq);
    r.tx_active = TxActive::kNone;
    if (send) ++r.tx_msn_send;
    if (auto mark = links_.ack_mark(r.link)) {
        // The link sends from the memory until the peer acknowledges it: the
        // request completes then (Engine::on_acked), as hardware that
        // retransmits from host memory does; until then it keeps its slot.
        e.ack_mark = *mark;
        push(r.ackq, index);
        return true;
    }
    // Taken by a copying link: the request is complete (siw completes here too).
    --r.send_count;
    complete_wr(qp, e, WcStatus::kSuccess, e.length);
    free_wr(index);
    return true;
}

void Engine::on_acked(QpHandle qp, std::uint64_t acked) {
    QpRecord* r = find_qp(qp);
    if (r == nullptr) return;
    const CheckScope check(*this, qp.index);
    while (!r->ackq.empty() && wrs_[r->ackq.head].ack_mark <= acked) {
        const std::uint32_t index = pop(r->ackq);
        IWCM_ASSERT(r->send_count > 0);
        --r->send_count;
        complete_wr(qp.index, wrs_[index], WcStatus::kSuccess, wrs_[index].length);
        free_wr(index);
    }
}

// A work request of the send queue that sends nothing, carried out at its turn: a local
// invalidation (siw_qp_sq_proc_local) or a window's bind. One that cannot be carried
// out fails (a local protection or a bind error) and ends the QP.
bool Engine::tx_local(std::uint32_t qp) {
    QpRecord& r = qps_[qp];
    const std::uint32_t index = r.sq.head;
    const WrEntry& e = wrs_[index];
    if (e.kind == WrKind::kLocalInvalidate) {
        if (mrs_.invalidate(e.rkey, r.pd, qp) != MrTable::Invalidation::kOk) {
            local_failure(qp, index, WcStatus::kLocProtErr);
            return false;
        }
    } else {
        IWCM_ASSERT(e.kind == WrKind::kBindMw && e.num_sge == 0);
        const WindowBind to{e.sge[0].lkey, e.sge[0].addr, e.sge[0].length, e.mw_access};
        if (mrs_.bind(e.mw, e.rkey, qp, r.pd, to) != MrTable::Bind::kOk) {
            local_failure(qp, index, WcStatus::kMwBindErr);
            return false;
        }
    }
    pop(r.sq);
    --r.send_count;
    complete_wr(qp, e, WcStatus::kSuccess, 0);
    free_wr(index);
    return true;
}

// One Read Request for the Read's next sink SGE (a Read of no SGE asks for nothing, into
// no sink); the source offsets follow on from one request to the next. Each takes an ORD
// slot; the Read moves to the ORQ once its last request went.
bool Engine::tx_read_request(std::uint32_t qp, WrEntry& e) {
    QpRecord& r = qps_[qp];
    const std::uint8_t k = e.parts_sent;
    const std::uint8_t parts = std::max<std::uint8_t>(e.num_sge, 1);
    IWCM_ASSERT(k < parts);
    std::uint64_t before = 0;
    for (std::uint8_t i = 0; i < k; ++i) before += e.sge[i].length;
    wire::DdpHeader h;
    h.tagged = false;
    h.last = true;
    h.opcode = static_cast<std::uint8_t>(wire::RdmapOpcode::kReadRequest);
    h.qn = wire::kQnReadRequest;
    h.msn = r.tx_msn_rreq;
    h.mo = 0;
    wire::ReadRequest rr;
    rr.sink_stag = e.num_sge > 0 ? e.sge[k].lkey : 0;
    rr.sink_to = e.num_sge > 0 ? e.sge[k].addr : 0;
    rr.size = e.num_sge > 0 ? e.sge[k].length : 0;
    rr.source_stag = e.rkey;
    rr.source_to = e.remote_addr + before;
    wire::MutBytes ulpdu = wire::MutBytes(tx_buf_).subspan(2);
    std::size_t n = wire::emit_ddp_header(h, ulpdu);
    n += wire::emit_read_request(rr, ulpdu.subspan(n));
    IWCM_ASSERT(n == kDdpUntaggedHeaderLen + wire::kReadRequestPayloadLen);
    if (!send_fpdu(qp, n)) return false;
    ++r.tx_msn_rreq;
    ++r.orq_count;
    if (++e.parts_sent < parts) return true;
    std::uint32_t index = pop(r.sq);
    push(r.orq, index);
    return true;
}

bool Engine::tx_read_response(std::uint32_t qp) {
    QpRecord& r = qps_[qp];
    std::uint32_t index = r.irq.head;
    WrEntry& e = wrs_[index];
    std::size_t room = wire::max_ulpdu_for_fpdu(r.max_fpdu) - kDdpTaggedHeaderLen;
    std::size_t chunk = std::min<std::size_t>(e.length - e.done, room);
    bool last = e.done + chunk == e.length;
    wire::DdpHeader h;
    h.tagged = true;
    h.last = last;
    h.opcode = static_cast<std::uint8_t>(wire::RdmapOpcode::kReadResponse);
    h.stag = e.rkey;
    h.to = e.remote_addr + e.done;
    wire::MutBytes ulpdu = wire::MutBytes(tx_buf_).subspan(2);
    std::size_t written = wire::emit_ddp_header(h, ulpdu);
    IWCM_ASSERT(written == kDdpTaggedHeaderLen);
    Views payload;
    if (!gather(qp, e, e.done, chunk, payload)) {
        local_failure(qp, index, WcStatus::kLocProtErr);
        return false;
    }
    if (!send_fpdu(qp, kDdpTaggedHeaderLen, payload)) return false;
    e.done += static_cast<std::uint32_t>(chunk);
    r.tx_active = TxActive::kReadResponse;
    if (!last) return true;
    pop(r.irq);
    --r.irq_count;
    r.tx_active = TxActive::kNone;
    free_wr(index);
    return true;
}

// A region named by a request went away (deregistered after the post): the
// request fails with `status`, the QP sends a local catastrophic TERMINATE.
void Engine::local_failure(std::uint32_t qp, std::uint32_t wr, WcStatus status) {
    QpRecord& r = qps_[qp];
    IWCM_ASSERT(wr == r.sq.head || wr == r.irq.head);
    WrQueue& q = wr == r.sq.head ? r.sq : r.irq;
    pop(q);
    if (&q == &r.sq) {
        --r.send_count;
    } else {
        --r.irq_count;
    }
    r.tx_active = TxActive::kNone;
    complete_wr(qp, wrs_[wr], status, 0);
    free_wr(wr);
    wire::TerminateRepr term;
    term.layer = wire::TermLayer::kRdmap;
    term.etype = wire::kRdmapEtypeLocalCatastrophic;
    term.code = 0;
    terminate(qp, term);
}

// The TERMINATE is bytes of the stream like any (TCP retransmits it); the
// event reports it once the link took it, or, when our side had closed
// already (the peer's FIN came first and ours followed at once), that it
// could not go.
bool Engine::tx_terminate(std::uint32_t qp) {
    QpRecord& r = qps_[qp];
    auto it = pending_terms_.find(qp);
    IWCM_ASSERT(it != pending_terms_.end() && r.term_pending);
    const bool open = links_.send_open(r.link);
    if (open && !links_.send_record(r.link, it->second.fpdu)) return false;
    const TermInfo term = it->second.term;
    const QpError error = it->second.error;
    pending_terms_.erase(it);
    r.term_pending = false;
    push_term_event(qp, open ? QpEventType::kTerminateSent : QpEventType::kTerminateUnsent, term,
                    error);
    // RFC 5040 section 5.3: the stream ends after the TERMINATE; our FIN
    // follows it in sequence, and the peer reads it after the TERMINATE.
    if (open) links_.close(r.link, false);
    return open;
}

}  // namespace iwcm::rdma
