// The engine's tables and verbs: completion queues, queue pairs, posting,
// flushing. Read first: engine.hpp; then engine_tx.cpp and engine_rx.cpp.
#include "rdma/engine.hpp"

#include <algorithm>
#include <cerrno>

#include "iwcm/assert.hpp"
#include "random.hpp"

namespace iwcm::rdma {

namespace {
constexpr std::uint32_t kMaxQueueDepth = 1u << 16;
constexpr std::uint32_t kMaxMessage = 1u << 31;  // as ibv's max_msg_sz of siw

// The configured secret of the STags, or one from the kernel's generator.
std::array<std::uint8_t, 16> key_secret(const DeviceConfig& config) {
    if (config.key_secret) return *config.key_secret;
    std::array<std::uint8_t, 16> k{};
    fill_random(std::as_writable_bytes(std::span(k)));
    return k;
}
}  // namespace

Engine::Engine(Links& links, const DeviceConfig& config)
    : links_(links), config_(config), mrs_(config.max_mrs, key_secret(config)) {}

Engine::~Engine() = default;

// ---------------------------------------------------------------- slabs

std::uint32_t Engine::alloc_wr() {
    std::uint32_t index = wr_free_;
    if (index != kNil) {
        wr_free_ = wrs_[index].next;
    } else {
        index = static_cast<std::uint32_t>(wrs_.size());
        wrs_.emplace_back();
    }
    IWCM_ASSERT(index < wrs_.size());  // the free list holds slab indices only
    wrs_[index] = WrEntry{};
    return index;
}

void Engine::free_wr(std::uint32_t index) {
    IWCM_ASSERT(index < wrs_.size());
    wrs_[index].next = wr_free_;
    wr_free_ = index;
}

void Engine::push(WrQueue& q, std::uint32_t index) {
    IWCM_ASSERT(index < wrs_.size());
    wrs_[index].next = kNil;
    if (q.tail == kNil) {
        q.head = index;
    } else {
        wrs_[q.tail].next = index;
    }
    q.tail = index;
}

std::uint32_t Engine::pop(WrQueue& q) {
    std::uint32_t index = q.head;
    IWCM_ASSERT(index != kNil);
    q.head = wrs_[index].next;
    if (q.head == kNil) q.tail = kNil;
    return index;
}

#if IWCM_CHECK_INVARIANTS
std::uint32_t Engine::queue_length(const WrQueue& q) const {
    IWCM_ASSERT((q.head == kNil) == (q.tail == kNil));
    std::uint32_t n = 0;
    std::uint32_t last = kNil;
    for (std::uint32_t i = q.head; i != kNil; i = wrs_[i].next) {
        IWCM_ASSERT(i < wrs_.size() && n < wrs_.size());  // in the slab, and no cycle
        last = i;
        ++n;
    }
    IWCM_ASSERT(last == q.tail);
    return n;
}

void Engine::check_qp(std::uint32_t qp) const {
    if (qp >= qps_.size() || !qps_[qp].live) return;
    const QpRecord& r = qps_[qp];
    // The send queue's requests are in exactly one of ackq, sq and orq until they complete.
    IWCM_ASSERT(r.send_count == queue_length(r.ackq) + queue_length(r.sq) + queue_length(r.orq));
    IWCM_ASSERT(r.send_count <= r.max_send_wr);
    // Receives the QP holds: its own, or one taken from its SRQ for the Send under way.
    IWCM_ASSERT(r.recv_count == queue_length(r.rq));
    IWCM_ASSERT(r.srq != kNil || r.recv_count <= r.max_recv_wr);
    // Inbound Reads to answer, within the IRD negotiated; Reads of ours in flight, within
    // the ORD (our READ RTR's response, when due, holds a slot as well).
    IWCM_ASSERT(r.irq_count == queue_length(r.irq) && r.irq_count <= r.ird);
    IWCM_ASSERT(r.orq_count <= r.ord + (r.rtr_read_due ? 1U : 0U));
    IWCM_ASSERT(r.orq.empty() || r.orq_count > 0);
    // Completions in post order: none is given before it was posted.
    IWCM_ASSERT(r.reported <= r.posted);
    // The MSNs start at 1 (RFC 5040 4.5) and only grow.
    IWCM_ASSERT(r.tx_msn_send >= 1 && r.tx_msn_rreq >= 1 && r.rx_msn_send >= 1 &&
                r.rx_msn_rreq >= 1);
    IWCM_ASSERT(!r.term_pending || pending_terms_.contains(qp));
}
#endif

QpRecord* Engine::find_qp(QpHandle qp) {
    if (qp.index >= qps_.size()) return nullptr;
    QpRecord& r = qps_[qp.index];
    return r.live && r.generation == qp.generation ? &r : nullptr;
}

const QpRecord* Engine::find_qp(QpHandle qp) const {
    return const_cast<Engine*>(this)->find_qp(qp);
}

VResult<QpRecord*> Engine::checked_qp(QpHandle qp) {
    if (qp.index == UINT32_MAX || qp.index >= qps_.size()) return fail(VerbsError::kInvalidHandle);
    QpRecord* r = find_qp(qp);
    if (r == nullptr) return fail(VerbsError::kStaleHandle);
    return r;
}

Engine::Cq* Engine::find_cq(CqHandle cq) {
    if (cq.index >= cqs_.size()) return nullptr;
    Cq& c = cqs_[cq.index];
    return c.live && c.generation == cq.generation ? &c : nullptr;
}

std::size_t Engine::live_qps() const {
    return static_cast<std::size_t>(
        std::count_if(qps_.begin(), qps_.end(), [](const QpRecord& r) { return r.live; }));
}

// ---------------------------------------------------------------- memory

VResult<MemoryRegion> Engine::reg_mr(std::span<std::byte> memory, std::uint32_t access,
                                     std::uint32_t pd) {
    return mrs_.reg(memory, access, pd);
}

// A link may still send from the region (bytes not yet acknowledged, held
// by reference): every link that may hold such bytes copies them first, so
// a retransmission after this reads its own copy. O(queue pairs), as a
// deregistration is rare.
VResult<void> Engine::dereg_mr(MrHandle mr) {
    for (QpRecord& r : qps_) {
        IWCM_ASSERT(r.live || !r.refs_out);  // destroy_qp let the link own its bytes
        if (r.live && r.refs_out) {
            links_.own_refs(r.link);
            r.refs_out = false;
        }
    }
    return mrs_.dereg(mr);
}

// ---------------------------------------------------------------- completion queues

VResult<CqHandle> Engine::create_cq(std::uint32_t capacity) {
    if (capacity == 0 || capacity > (1u << 22)) return fail(VerbsError::kInvalidArgument);
    std::uint32_t index = 0;
    while (index < cqs_.size() && cqs_[index].live) ++index;
    if (index == cqs_.size()) cqs_.emplace_back();
    Cq& c = cqs_[index];
    IWCM_ASSERT(!c.live && c.users == 0);  // no QP still names a CQ destroyed before
    c.ring.assign(capacity, WorkCompletion{});
    c.head = c.count = 0;
    c.users = 0;
    c.overflows = 0;
    c.failed = false;
    c.live = true;
    return CqHandle{index, c.generation};
}

VResult<void> Engine::destroy_cq(CqHandle cq) {
    if (cq.index >= cqs_.size()) return fail(VerbsError::kInvalidHandle);
    Cq* c = find_cq(cq);
    if (c == nullptr) return fail(VerbsError::kStaleHandle);
    if (c->users > 0) return fail(VerbsError::kWrongState);
    // A CQ fails only while a QP uses it, and that QP's call settles it before returning.
    IWCM_ASSERT(std::find(cqs_failed_.begin(), cqs_failed_.end(), cq.index) == cqs_failed_.end());
    c->live = false;
    c->ring = {};
    ++c->generation;
    return {};
}

std::uint64_t Engine::cq_overflows(CqHandle cq) const {
    const Cq* c = const_cast<Engine*>(this)->find_cq(cq);
    return c == nullptr ? 0 : c->overflows;
}

bool Engine::cq_failed(CqHandle cq) const {
    const Cq* c = const_cast<Engine*>(this)->find_cq(cq);
    return c != nullptr && c->failed;
}

// A completion that finds its queue full is an error of the CQ, never a silent loss (an
// application that sized its queue below its outstanding work; siw raises
// IB_EVENT_CQ_ERR): the CQ fails and takes nothing more. The application hears kCqError
// at once, ahead of any event of a QP on the CQ that this call or a later one reports
// (the QP whose flush overflowed it may be ending right now); its QPs end at the end of
// the call (settle_cq_failures), whose own state this one may be in the middle of.
void Engine::complete(std::uint32_t cq, const WorkCompletion& wc) {
    IWCM_ASSERT(cq < cqs_.size() && cqs_[cq].live);
    Cq& c = cqs_[cq];
    if (c.failed || c.count == c.ring.size()) {
        ++c.overflows;
        if (!c.failed) {
            cqs_failed_.push_back(cq);
            QpEvent e;
            e.type = QpEventType::kCqError;
            e.cq = {cq, c.generation};
            e.status = -EOVERFLOW;
            events_.push_back(e);
        }
        c.failed = true;
        return;
    }
    c.ring[(c.head + c.count) % c.ring.size()] = wc;
    ++c.count;
    if (completion_hook_) completion_hook_(CqHandle{cq, c.generation}, wc.solicited);
}

void Engine::complete_wr(std::uint32_t qp, const WrEntry& e, WcStatus status,
                         std::uint32_t byte_len) {
    const QpRecord& r = qps_[qp];
    IWCM_ASSERT(r.live);  // its CQs are in use (destroy_qp flushes before it frees them)
    WorkCompletion wc;
    wc.wr_id = e.wr_id;
    wc.status = status;
    wc.byte_len = byte_len;
    wc.qp = {qp, r.generation};
    switch (e.kind) {
        case WrKind::kSend: wc.opcode = WcOpcode::kSend; break;
        case WrKind::kWrite: wc.opcode = WcOpcode::kRdmaWrite; break;
        case WrKind::kRead: wc.opcode = WcOpcode::kRdmaRead; break;
        case WrKind::kRecv: wc.opcode = WcOpcode::kRecv; break;
        case WrKind::kReadResponse: return;  // the peer's work, no completion here
        case WrKind::kLocalInvalidate: wc.opcode = WcOpcode::kLocalInvalidate; break;
        case WrKind::kBindMw: wc.opcode = WcOpcode::kBindMw; break;
    }
    if (e.kind == WrKind::kRecv) {
        complete(r.recv_cq, wc);
        return;
    }
    // Errors always complete; successes of send work as signaled.
    const bool report = status != WcStatus::kSuccess || e.signaled || r.sq_sig_all;
    complete_in_order(qp, e.seq, report, wc);
}

// A request ends out of order when a Read before it still waits for its response (a
// Write or Send completes at the peer's ACK, a local invalidation or a bind at its turn)
// or when a flush takes the queues one after another: it is held, and given once every
// request before it was. held_ is short (only what overtook a Read), so it is searched.
void Engine::complete_in_order(std::uint32_t qp, std::uint32_t seq, bool report,
                               const WorkCompletion& wc) {
    QpRecord& r = qps_[qp];
    IWCM_ASSERT(seq - r.reported < r.posted - r.reported);  // posted, not yet given
    if (seq != r.reported) {
        held_.push_back({qp, seq, report, wc});
        return;
    }
    if (report) complete(r.send_cq, wc);
    ++r.reported;
    for (std::size_t i = 0; i < held_.size();) {
        if (held_[i].qp != qp || held_[i].seq != r.reported) {
            ++i;
            continue;
        }
        const Held h = held_[i];
        held_[i] = held_.back();
        held_.pop_back();
        if (h.report) complete(r.send_cq, h.wc);
        ++r.reported;
        i = 0;  // the next one may lie anywhere
    }
}

std::size_t Engine::poll_cq(CqHandle cq, std::span<WorkCompletion> out) {
    Cq* c = find_cq(cq);
    if (c == nullptr) return 0;
    IWCM_ASSERT(c->count <= c->ring.size() && c->head < c->ring.size());
    std::size_t n = std::min(out.size(), c->count);
    for (std::size_t i = 0; i < n; ++i) {
        out[i] = c->ring[c->head];
        c->head = (c->head + 1) % c->ring.size();
    }
    c->count -= n;
    return n;
}

std::optional<QpEvent> Engine::poll_qp_event() {
    settle_cq_failures();  // a CQ that failed in the core's StreamSink
    if (events_.empty()) return std::nullopt;
    QpEvent e = events_.front();
    events_.pop_front();
    return e;
}

// ---------------------------------------------------------------- queue pairs

VResult<QpHandle> Engine::create_qp(const QpParams& p) {
    const QpAttr& a = p.attr;
    Cq* scq = find_cq(a.send_cq);
    Cq* rcq = find_cq(a.recv_cq);
    if (scq == nullptr || rcq == nullptr) return fail(VerbsError::kStaleHandle);
    const Srq* srq = a.srq.valid() ? find_srq(a.srq) : nullptr;
    if (a.srq.valid() && srq == nullptr) return fail(VerbsError::kStaleHandle);
    if (srq != nullptr && srq->pd != a.pd) return fail(VerbsError::kInvalidArgument);
    if (a.max_send_wr == 0 || a.max_recv_wr == 0 || a.max_send_wr > kMaxQueueDepth ||
        a.max_recv_wr > kMaxQueueDepth || a.max_sge == 0 || a.max_sge > kMaxSge ||
        p.max_fpdu < 64) {
        return fail(VerbsError::kInvalidArgument);
    }
    std::uint32_t index = qp_free_;
    if (index != kNil) {
        qp_free_ = qps_[index].sq.head;  // the free list runs through sq.head
    } else {
        if (qps_.size() >= config_.max_qps) return fail(VerbsError::kQueueFull);
        index = static_cast<std::uint32_t>(qps_.size());
        qps_.emplace_back();
    }
    QpRecord& r = qps_[index];
    std::uint32_t generation = r.generation;
    r = QpRecord{};
    r.generation = generation;
    r.link = p.link;
    r.conn = p.conn;
    r.send_cq = a.send_cq.index;
    r.recv_cq = a.recv_cq.index;
    r.srq = srq != nullptr ? a.srq.index : kNil;
    if (srq != nullptr) ++srqs_[a.srq.index].users;
    r.pd = a.pd;
    r.max_fpdu = static_cast<std::uint32_t>(std::min<std::size_t>(p.max_fpdu, kMaxFpdu));
    r.max_send_wr = a.max_send_wr;
    r.max_recv_wr = a.max_recv_wr;
    r.max_sge = static_cast<std::uint8_t>(a.max_sge);
    r.sq_sig_all = a.sq_sig_all;
    r.crc = p.crc;
    r.ird = std::min(p.ird, kMaxReadDepth);
    r.ord = std::min(p.ord, kMaxReadDepth);
    // After a peer-to-peer RTR (RFC 6581 section 6): the queues it used go on at MSN 2,
    // and our READ RTR holds an ORD slot until its response comes.
    r.tx_msn_send = p.rtr.tx_msn_send;
    r.rx_msn_send = p.rtr.rx_msn_send;
    r.tx_msn_rreq = p.rtr.tx_msn_rreq;
    r.rx_msn_rreq = p.rtr.rx_msn_rreq;
    r.rtr_read_due = p.rtr.read_response_due;
    r.orq_count = r.rtr_read_due ? 1 : 0;
    IWCM_ASSERT(r.tx_msn_send >= 1 && r.rx_msn_send >= 1 && r.tx_msn_rreq >= 1);
    r.live = true;
    r.link_up = true;
    ++scq->users;
    ++rcq->users;
    if (tx_buf_.empty()) {
        tx_buf_.resize(kMaxFpdu);
        rx_buf_.resize(kMaxFpdu);
    }
    return QpHandle{index, generation};
}

VResult<void> Engine::destroy_qp(QpHandle qp) {
    const SettleOnExit settle{*this};
    auto found = checked_qp(qp);
    if (!found) return fail(found.error());
    QpRecord& r = **found;
    flush_all(qp.index);
    mrs_.unbind_qp(qp.index);  // its windows serve no stream any more
    // The link may go on sending (a graceful close) after the memory is gone.
    if (r.refs_out) links_.own_refs(r.link);
    r.refs_out = false;
    // Closed once: a closing QP whose TERMINATE is not pending has closed its
    // link already (after its TERMINATE went, or could not go with our FIN
    // queued; or at once after the peer's), and a second close must not cut
    // that short.
    const bool closed = r.state == QpState::kClosing && !r.term_pending;
    if (r.link_up && !closed) links_.close(r.link, false);
    r.link_up = false;
    pending_terms_.erase(qp.index);
    IWCM_ASSERT(cqs_[r.send_cq].users > 0 && cqs_[r.recv_cq].users > 0);
    IWCM_ASSERT(r.srq == kNil || srqs_[r.srq].users > 0);
    --cqs_[r.send_cq].users;
    --cqs_[r.recv_cq].users;
    if (r.srq != kNil) --srqs_[r.srq].users;
    r.live = false;
    ++r.generation;
    r.sq.head = qp_free_;
    qp_free_ = qp.index;
    return {};
}

VResult<QpInfo> Engine::query_qp(QpHandle qp) const {
    const QpRecord* r = find_qp(qp);
    if (r == nullptr) {
        return fail(qp.index < qps_.size() ? VerbsError::kStaleHandle : VerbsError::kInvalidHandle);
    }
    IWCM_ASSERT(r->send_count <= r->max_send_wr);  // post_send bounds it
    QpInfo i;
    i.state = r->state;
    i.conn = r->conn;
    i.crc = r->crc;
    i.ird = r->ird;
    i.ord = r->ord;
    i.max_fpdu = r->max_fpdu;
    i.send_queued = r->send_count;
    i.recv_posted = r->recv_count;
    i.reads_outstanding = r->orq_count;
    return i;
}

// Every SGE inside its region with the access asked; total is their sum.
VResult<void> Engine::check_sges(std::uint32_t pd, std::span<const Sge> sges, std::uint32_t access,
                                 std::uint32_t& total) const {
    IWCM_ASSERT(sges.size() <= kMaxSge);  // the callers bound it by max_sge
    std::uint64_t sum = 0;
    for (const Sge& s : sges) {
        if (mrs_.check(s.lkey, s.addr, s.length, access, pd, kLocalUse, nullptr) != MemCheck::kOk) {
            return fail(VerbsError::kLocalProtection);
        }
        sum += s.length;
    }
    if (sum > kMaxMessage) return fail(VerbsError::kInvalidArgument);
    total = static_cast<std::uint32_t>(sum);
    return {};
}

VResult<void> Engine::post_send(QpHandle qp, const SendWr& wr) {
    const SettleOnExit settle{*this};
    const CheckScope check(*this, qp.index);
    auto found = checked_qp(qp);
    if (!found) return fail(found.error());
    QpRecord& r = **found;
    if (r.state != QpState::kRts) return fail(VerbsError::kWrongState);
    bool read = wr.opcode == WrOpcode::kRdmaRead;
    const bool local_inv = wr.opcode == WrOpcode::kLocalInvalidate;
    const bool bind = wr.opcode == WrOpcode::kBindMw;
    if (wr.sg_list.size() > r.max_sge || ((local_inv || bind) && !wr.sg_list.empty())) {
        return fail(VerbsError::kTooManySge);
    }
    if (bind && (wr.bind.access & ~(kAccessRemoteRead | kAccessRemoteWrite)) != 0)
        return fail(VerbsError::kInvalidArgument);
    if (read && r.ord == 0) return fail(VerbsError::kInvalidArgument);
    if (r.send_count >= r.max_send_wr) return fail(VerbsError::kQueueFull);
    std::uint32_t total = 0;
    auto ok = check_sges(r.pd, wr.sg_list, read ? std::uint32_t{kAccessLocalWrite} : 0u, total);
    if (!ok) return fail(ok.error());
    std::uint32_t index = alloc_wr();
    WrEntry& e = wrs_[index];
    e.wr_id = wr.wr_id;
    e.kind = read        ? WrKind::kRead
             : local_inv ? WrKind::kLocalInvalidate
             : bind      ? WrKind::kBindMw
                         : (wr.opcode == WrOpcode::kRdmaWrite ? WrKind::kWrite : WrKind::kSend);
    e.invalidate = wr.opcode == WrOpcode::kSendWithInvalidate;
    e.fence = wr.fence;
    e.remote_addr = wr.remote_addr;
    e.rkey = e.invalidate || local_inv ? wr.invalidate_rkey : wr.rkey;
    e.length = total;
    e.signaled = wr.signaled;
    e.solicited = wr.solicited;
    IWCM_ASSERT(wr.sg_list.size() <= kMaxSge);  // r.max_sge is at most kMaxSge
    e.num_sge = static_cast<std::uint8_t>(wr.sg_list.size());
    std::copy(wr.sg_list.begin(), wr.sg_list.end(), e.sge);
    if (bind) {
        e.mw = wr.bind.mw;
        e.mw_access = static_cast<std::uint8_t>(wr.bind.access);
        e.sge[0] = Sge{wr.bind.addr, wr.bind.length, wr.bind.lkey};
    }
    e.seq = r.posted++;
    push(r.sq, index);
    ++r.send_count;
    IWCM_ASSERT(r.send_count <= r.max_send_wr);
    tx_progress(qp.index);
    return {};
}

VResult<void> Engine::post_recv(QpHandle qp, const RecvWr& wr) {
    const SettleOnExit settle{*this};
    const CheckScope check(*this, qp.index);
    auto found = checked_qp(qp);
    if (!found) return fail(found.error());
    QpRecord& r = **found;
    if (r.srq != kNil) return fail(VerbsError::kInvalidArgument);  // its receives are the SRQ's
    if (r.state != QpState::kRts) return fail(VerbsError::kWrongState);
    if (wr.sg_list.size() > r.max_sge) return fail(VerbsError::kTooManySge);
    if (r.recv_count >= r.max_recv_wr) return fail(VerbsError::kQueueFull);
    auto queued = queue_recv(r.pd, wr, r.rq);
    if (queued) ++r.recv_count;
    IWCM_ASSERT(r.recv_count <= r.max_recv_wr);
    return queued;
}

// A receive's SGEs checked against `pd` (local write), then its entry at the end of `q`.
VResult<void> Engine::queue_recv(std::uint32_t pd, const RecvWr& wr, WrQueue& q) {
    std::uint32_t total = 0;
    auto ok = check_sges(pd, wr.sg_list, kAccessLocalWrite, total);
    if (!ok) return fail(ok.error());
    std::uint32_t index = alloc_wr();
    WrEntry& e = wrs_[index];
    e.wr_id = wr.wr_id;
    e.kind = WrKind::kRecv;
    e.length = total;
    IWCM_ASSERT(wr.sg_list.size() <= kMaxSge);  // post_recv and post_srq_recv bound it
    e.num_sge = static_cast<std::uint8_t>(wr.sg_list.size());
    std::copy(wr.sg_list.begin(), wr.sg_list.end(), e.sge);
    push(q, index);
    return {};
}

// ---------------------------------------------------------------- shared receive queues

VResult<SrqHandle> Engine::create_srq(const SrqAttr& a) {
    if (a.max_wr == 0 || a.max_wr > kMaxQueueDepth || a.max_sge == 0 || a.max_sge > kMaxSge)
        return fail(VerbsError::kInvalidArgument);
    std::uint32_t index = 0;
    while (index < srqs_.size() && srqs_[index].live) ++index;
    if (index == srqs_.size()) srqs_.emplace_back();
    Srq& s = srqs_[index];
    IWCM_ASSERT(!s.live && s.users == 0);  // no QP still names an SRQ destroyed before
    const std::uint32_t generation = s.generation;
    s = Srq{};
    s.generation = generation;
    s.max_wr = a.max_wr;
    s.max_sge = static_cast<std::uint8_t>(a.max_sge);
    s.pd = a.pd;
    s.live = true;
    return SrqHandle{index, generation};
}

const Engine::Srq* Engine::find_srq(SrqHandle srq) const {
    if (srq.index >= srqs_.size()) return nullptr;
    const Srq& s = srqs_[srq.index];
    return s.live && s.generation == srq.generation ? &s : nullptr;
}

VResult<void> Engine::destroy_srq(SrqHandle srq) {
    if (!srq.valid()) return fail(VerbsError::kInvalidHandle);
    if (find_srq(srq) == nullptr) return fail(VerbsError::kStaleHandle);
    Srq& s = srqs_[srq.index];
    if (s.users > 0) return fail(VerbsError::kWrongState);
    // Its receives go without completions, as ibv_destroy_srq's do.
    std::uint32_t freed = 0;
    for (; !s.rq.empty(); ++freed) free_wr(pop(s.rq));
    IWCM_ASSERT(freed == s.count);  // post_srq_recv and take_srq_recv kept the count
    s.live = false;
    ++s.generation;
    return {};
}

VResult<void> Engine::post_srq_recv(SrqHandle srq, const RecvWr& wr) {
    if (find_srq(srq) == nullptr)
        return fail(srq.valid() ? VerbsError::kStaleHandle : VerbsError::kInvalidHandle);
    Srq& s = srqs_[srq.index];
    if (wr.sg_list.size() > s.max_sge) return fail(VerbsError::kTooManySge);
    if (s.count >= s.max_wr) return fail(VerbsError::kQueueFull);
    auto queued = queue_recv(s.pd, wr, s.rq);
    if (queued) ++s.count;
    IWCM_ASSERT(s.count <= s.max_wr);
    return queued;
}

VResult<void> Engine::arm_srq_limit(SrqHandle srq, std::uint32_t limit) {
    if (find_srq(srq) == nullptr) return fail(VerbsError::kStaleHandle);
    Srq& s = srqs_[srq.index];
    if (limit > s.max_wr) return fail(VerbsError::kInvalidArgument);
    s.limit = limit;
    return {};
}

VResult<SrqInfo> Engine::query_srq(SrqHandle srq) const {
    const Srq* s = find_srq(srq);
    if (s == nullptr) return fail(VerbsError::kStaleHandle);
    return SrqInfo{s->max_wr, s->max_sge, s->count, s->limit};
}

void Engine::take_srq_recv(std::uint32_t qp) {
    QpRecord& r = qps_[qp];
    if (r.srq == kNil || !r.rq.empty() || r.rx_in_send) return;
    Srq& s = srqs_[r.srq];
    if (s.rq.empty()) return;
    push(r.rq, pop(s.rq));
    --s.count;
    ++r.recv_count;
    if (s.limit != 0 && s.count < s.limit) {
        // IBV_EVENT_SRQ_LIMIT_REACHED: once, then disarmed (ibv_modify_srq(3)).
        s.limit = 0;
        QpEvent e;
        e.type = QpEventType::kSrqLimit;
        e.srq = {r.srq, s.generation};
        events_.push_back(e);
    }
    IWCM_ASSERT(!r.rq.empty());
}

// ---------------------------------------------------------------- ends

// Every outstanding work request completes with kWrFlushErr (reads that
// were sent first, then the send queue in order, then receives); inbound
// reads not yet answered are dropped.
void Engine::flush_all(std::uint32_t qp) {
    QpRecord& r = qps_[qp];
    for (WrQueue* q : {&r.ackq, &r.orq, &r.sq, &r.rq, &r.irq}) {
        while (!q->empty()) {
            std::uint32_t index = pop(*q);
            complete_wr(qp, wrs_[index], WcStatus::kWrFlushErr, 0);
            free_wr(index);
        }
    }
    IWCM_ASSERT(r.reported == r.posted);  // every send-queue request ended, none held
    r.send_count = r.recv_count = 0;
    r.orq_count = r.irq_count = 0;
    r.rtr_read_due = false;  // no work request of the application's: nothing completes
    r.tx_active = TxActive::kNone;
    r.rx_in_send = r.rx_in_rresp = false;
}

// The CQs that failed since the last call (their kCqError is queued already): every QP
// still running on one ends with a TERMINATE (RDMAP, local catastrophic error) that
// leaves now; their flushed work finds the failed CQ and is counted in its overflows.
// Called on the way out of every call that may reach the links.
void Engine::settle_cq_failures() {
    while (!cqs_failed_.empty()) {
        const std::uint32_t cq = cqs_failed_.back();
        cqs_failed_.pop_back();
        IWCM_ASSERT(cqs_[cq].failed);
        for (std::uint32_t qp = 0; qp < qps_.size(); ++qp) {
            const QpRecord& r = qps_[qp];
            if (!r.live || r.state != QpState::kRts || (r.send_cq != cq && r.recv_cq != cq)) {
                continue;
            }
            wire::TerminateRepr term;
            term.layer = wire::TermLayer::kRdmap;
            term.etype = wire::kRdmapEtypeLocalCatastrophic;
            term.code = 0;
            (void)terminate(qp, term);
            tx_progress(qp);
            IWCM_ASSERT(qps_[qp].state != QpState::kRts);
        }
    }
}

// After a TERMINATE (sent or received): no new work, the rest flushed; the
// link closes once our TERMINATE (if any) was taken.
void Engine::enter_closing(std::uint32_t qp) {
    QpRecord& r = qps_[qp];
    IWCM_ASSERT(r.live);
    if (r.state == QpState::kRts) r.state = QpState::kClosing;
    flush_all(qp);
}

void Engine::on_link_down(QpHandle qp, int status) {
    const SettleOnExit settle{*this};
    QpRecord* r = find_qp(qp);
    if (r == nullptr || !r->link_up) return;
    // The stream ended inside an FPDU (bytes left that are no whole one): the
    // peer's last message was cut, which is an error even after a clean FIN.
    // No TERMINATE can follow (our FIN went out with the peer's); the end is
    // reported as a protocol error.
    if (status == 0 && r->state == QpState::kRts && (r->rx_held || links_.readable(r->link) > 0))
        status = -EPROTO;
    r->link_up = false;
    if (r->term_pending) {
        // Built, never taken: the link could not send it before its end.
        auto it = pending_terms_.find(qp.index);
        IWCM_ASSERT(it != pending_terms_.end());
        push_term_event(qp.index, QpEventType::kTerminateUnsent, it->second.term, it->second.error);
    }
    r->term_pending = false;
    pending_terms_.erase(qp.index);
    flush_all(qp.index);
    if (r->refs_out) links_.own_refs(r->link);  // its stream may still send (a half-close)
    r->refs_out = false;
    r->state = QpState::kError;
    QpEvent e;
    e.type = QpEventType::kDisconnected;
    e.qp = qp;
    e.conn = r->conn;
    e.status = status;
    // A close, graceful or our own abortive one, is no error of the QP, and neither is the
    // peer's reset (QpError); anything else lost the connection.
    e.error = status == 0 || status == -ECONNRESET ? QpError::kNone : QpError::kFatal;
    events_.push_back(e);
}

}  // namespace iwcm::rdma
