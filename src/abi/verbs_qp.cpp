// libibverbs: queue pairs, their states and their work requests.
//
// Read first: verbs_objects.hpp, src/abi/abi.hpp (qp_attach, qp_abandon),
// ibv_create_qp(3), ibv_modify_qp(3), ibv_post_send(3), ibv_post_recv(3), and
// for the iWARP states the RDMAC verbs (RESET/INIT/RTR are "Idle", SQD is
// "Closing": a graceful close, ERR an abortive one) as Linux siw maps them
// (siw_verbs.c ib_qp_state_to_siw_qp_state, siw_qp.c).
//
// Shell and attached QP. An ibv_qp exists before its connection: until rdma_cm
// calls qp_attach it is a shell that holds the receives posted to it; a send
// is refused with ENOTCONN (siw_post_send before RTS). qp_attach makes the
// Device QP on the connection, posts the waiting receives in order and moves
// the QP to RTS. Work posted to a QP in ERR completes at once with
// IBV_WC_WR_FLUSH_ERR (siw_sq_flush_wr, siw_rq_flush_wr).
//
// Protection domains. An SGE's lkey must name a memory region of the QP's own
// PD (EINVAL at post otherwise, before the Device sees it). The Device's STags
// carry no PD, so a peer's RDMA Write or Read is not checked against the QP's
// PD: an rkey of another PD's region is honoured.
//
// Inline data (IBV_SEND_INLINE). The Device sends from registered memory only,
// so the data is copied at post time into the QP's inline ring: max_send_wr
// slots of max_inline_data bytes, registered once at attach. Inline sends and
// writes take slots in turn. The Device completes Sends and Writes in the
// order they were posted, and at most max_send_wr are outstanding, so when a
// post takes slot k again every earlier user of slot k has completed (it is
// older than the max_send_wr - 1 that may still be outstanding).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <type_traits>

#include "abi/verbs_objects.hpp"
#include "iwcm/assert.hpp"

namespace iwcm::abi::verbs {

namespace {

bool is_error_state(const Qp& q) {
    return q.api.state == IBV_QPS_ERR;
}

// The state an application sees: the stored one, or what the Device's QP
// has become (its connection closing or gone).
ibv_qp_state current_state(Session& s, const Qp& q) {
    if (!q.handle) return q.api.state;
    auto info = s.device().query_qp(*q.handle);
    if (!info || info->state == rdma::QpState::kError) return IBV_QPS_ERR;
    if (info->state == rdma::QpState::kClosing && q.api.state == IBV_QPS_RTS) return IBV_QPS_SQD;
    return q.api.state;
}

ibv_wc flushed(const Qp& q, std::uint64_t wr_id, ibv_wc_opcode opcode) {
    ibv_wc wc{};
    wc.wr_id = wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = opcode;
    wc.qp_num = q.api.qp_num;
    return wc;
}

void flush_waiting(Qp& q) {
    for (const PendingRecv& p : q.waiting) {
        push_local_completion(*q.recv_cq, flushed(q, p.wr_id, IBV_WC_RECV));
    }
    q.waiting.clear();
}

int check_sges(const Qp& q, const ibv_sge* list, int num, bool sink,
               std::array<rdma::Sge, kMaxSge>& out) {
    return sges_of(*q.pd, list, num, sink, out);
}

void release_inline(Session& s, Qp& q) {
    if (q.inline_mr) {
        auto done = s.device().dereg_mr(q.inline_mr->handle);
        IWCM_ASSERT(done.has_value());
    }
    q.inline_mr.reset();
    q.inline_buf = {};
    q.inline_seq = 0;
}

// The Device QP goes (its outstanding work flushed into the CQs); the QP is
// a shell again.
void detach(Session& s, Qp& q) {
    if (!q.handle) return;
    auto done = s.device().destroy_qp(s.now(), *q.handle);
    IWCM_ASSERT(done.has_value());
    registry().qp_by_handle.erase(key_of(*q.handle));
    q.handle.reset();
    release_inline(s, q);
}

// ---------------------------------------------------------------- state changes

// A QP on an SRQ in ERR takes none of its receives any more: IBV_EVENT_QP_LAST_WQE_REACHED,
// once, after the QP's own work was flushed and its error event raised (ibv_create_srq(3):
// a program moves such a QP to ERR and waits for this event before destroying it).
void last_wqe_reached(Qp& q) {
    if (q.srq == nullptr || q.last_wqe_reached) return;
    q.last_wqe_reached = true;
    raise_async_event(q, IBV_EVENT_QP_LAST_WQE_REACHED);
}

// To ERR: an attached QP's connection is reset (the RDMAC verbs' abortive
// close from RTS); the Device flushes its work when the connection's end
// is drained, before the runtime call that made it returns, and the end
// raises what it raises (verbs_on_qp_event). A shell's receives are flushed
// here; a shell on an SRQ has taken its last receive.
void to_error(Session& s, Qp& q) {
    if (q.handle) {
        auto info = s.device().query_qp(*q.handle);
        if (info && info->state != rdma::QpState::kError) {
            (void)s.core().disconnect(s.now(), info->conn, DisconnectMode::kAbortive);
        }
    }
    flush_waiting(q);
    q.api.state = IBV_QPS_ERR;
    if (!q.handle) last_wqe_reached(q);
}

int transition(Session& s, Qp& q, ibv_qp_state to) {
    const ibv_qp_state from = current_state(s, q);
    // On a connected QP the connection owns the state: INIT, RTR and RTS, which
    // an InfiniBand-minded program may ask for after rdma_init_qp_attr, change
    // nothing (siw's modify from RTS ignores them too).
    if (from == IBV_QPS_RTS && (to == IBV_QPS_INIT || to == IBV_QPS_RTR || to == IBV_QPS_RTS)) {
        return 0;
    }
    switch (to) {
        case IBV_QPS_RESET:
            detach(s, q);
            q.waiting.clear();  // a reset discards, it does not complete
            break;
        case IBV_QPS_INIT:
            if (from != IBV_QPS_RESET && from != IBV_QPS_INIT) return EINVAL;
            break;
        case IBV_QPS_RTR:
            if (from != IBV_QPS_INIT && from != IBV_QPS_RTR) return EINVAL;
            break;
        case IBV_QPS_RTS:
            // Only the connection brings a QP to RTS (qp_attach); siw refuses
            // RTS without one with EINVAL.
            if (from != IBV_QPS_RTS) return EINVAL;
            break;
        case IBV_QPS_SQD:
            // iWARP's Closing: the connection closes gracefully.
            if (from == IBV_QPS_SQD) break;
            if (from != IBV_QPS_RTS || !q.handle) return EINVAL;
            if (auto info = s.device().query_qp(*q.handle)) {
                (void)s.core().disconnect(s.now(), info->conn, DisconnectMode::kGraceful);
            }
            break;
        case IBV_QPS_ERR: to_error(s, q); break;
        case IBV_QPS_SQE:      // entered by the device alone
        case IBV_QPS_UNKNOWN:  // no state
        default: return EINVAL;
    }
    q.api.state = to;
    return 0;
}

// ---------------------------------------------------------------- posting

int post_recv_one(Session& s, Qp& q, const ibv_recv_wr& w) {
    if (q.srq != nullptr) return EINVAL;  // its receives are the SRQ's (ibv_post_srq_recv)
    if (w.num_sge < 0 || static_cast<std::uint32_t>(w.num_sge) > q.cap.max_recv_sge) {
        return EINVAL;
    }
    PendingRecv p;
    p.wr_id = w.wr_id;
    p.num_sge = static_cast<std::uint8_t>(w.num_sge);
    if (int e = check_sges(q, w.sg_list, w.num_sge, true, p.sge); e != 0) return e;
    if (is_error_state(q)) {
        push_local_completion(*q.recv_cq, flushed(q, w.wr_id, IBV_WC_RECV));
        return 0;
    }
    if (!q.handle) {
        if (q.waiting.size() >= q.cap.max_recv_wr) return ENOMEM;
        q.waiting.push_back(p);
        return 0;
    }
    rdma::RecvWr rw{w.wr_id, std::span(p.sge.data(), p.num_sge)};
    auto done = s.device().post_recv(s.now(), *q.handle, rw);
    if (done) return 0;
    if (done.error() == rdma::VerbsError::kWrongState && current_state(s, q) == IBV_QPS_ERR) {
        push_local_completion(*q.recv_cq, flushed(q, w.wr_id, IBV_WC_RECV));
        return 0;
    }
    return errno_of(done.error());
}

struct SendPlan {
    rdma::WrOpcode opcode = rdma::WrOpcode::kSend;
    ibv_wc_opcode wc_opcode = IBV_WC_SEND;
};

// The ibv opcodes the Device carries: Send, Send with Invalidate, RDMA Write, RDMA Read,
// local invalidation, the bind of a type 2 window. Immediate data (which iWARP has not)
// and atomics have no Device operation.
int plan_of(const ibv_send_wr& w, SendPlan& plan) {
    switch (w.opcode) {
        case IBV_WR_SEND: plan = {rdma::WrOpcode::kSend, IBV_WC_SEND}; return 0;
        case IBV_WR_SEND_WITH_INV:
            plan = {rdma::WrOpcode::kSendWithInvalidate, IBV_WC_SEND};
            return 0;
        case IBV_WR_LOCAL_INV:
            plan = {rdma::WrOpcode::kLocalInvalidate, IBV_WC_LOCAL_INV};
            return 0;
        case IBV_WR_RDMA_WRITE: plan = {rdma::WrOpcode::kRdmaWrite, IBV_WC_RDMA_WRITE}; return 0;
        case IBV_WR_RDMA_READ: plan = {rdma::WrOpcode::kRdmaRead, IBV_WC_RDMA_READ}; return 0;
        case IBV_WR_BIND_MW: plan = {rdma::WrOpcode::kBindMw, IBV_WC_BIND_MW}; return 0;
        case IBV_WR_SEND_WITH_IMM:
        case IBV_WR_RDMA_WRITE_WITH_IMM:
        case IBV_WR_ATOMIC_CMP_AND_SWP:
        case IBV_WR_ATOMIC_FETCH_AND_ADD:
        case IBV_WR_ATOMIC_WRITE:
        case IBV_WR_TSO:
        case IBV_WR_DRIVER1:
        default: return EINVAL;
    }
}

// Copies an inline request's data into the QP's next inline slot.
int stage_inline(Qp& q, const ibv_send_wr& w, rdma::Sge& out) {
    std::uint64_t total = 0;
    for (int i = 0; i < w.num_sge; ++i) total += w.sg_list[i].length;
    if (total > q.cap.max_inline_data || !q.inline_mr) return EINVAL;
    const std::size_t slots = q.inline_buf.size() / q.cap.max_inline_data;
    std::byte* slot = q.inline_buf.data() + (q.inline_seq % slots) * q.cap.max_inline_data;
    std::size_t at = 0;
    for (int i = 0; i < w.num_sge; ++i) {
        const ibv_sge& g = w.sg_list[i];
        std::memcpy(slot + at, reinterpret_cast<const void*>(g.addr), g.length);
        at += g.length;
    }
    out = {reinterpret_cast<std::uintptr_t>(slot), static_cast<std::uint32_t>(total),
           q.inline_mr->lkey};
    return 0;
}

// IBV_WR_BIND_MW's window and range in the Device's form: a type 2 window and a region of
// this library, a range the Device can name (32-bit length), remote read and write only
// (no atomics, no zero-based offsets). Whether the bind is allowed (domains, the
// region's MW_BIND right, bounds) is the Device's to find, at the request's turn, as a
// completion with IBV_WC_MW_BIND_ERR.
int bind_of(const ibv_send_wr& w, rdma::MwBind& out) {
    const Registry& r = registry();
    const Mw* mw = r.mws.find(w.bind_mw.mw);
    const ibv_mw_bind_info& info = w.bind_mw.bind_info;
    const Mr* mr = r.mrs.find(info.mr);
    if (mw == nullptr || mr == nullptr || info.length > UINT32_MAX) return EINVAL;
    constexpr unsigned kRemote = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    if ((info.mw_access_flags & ~kRemote) != 0) return EINVAL;
    out.mw = mw->handle;
    out.lkey = mr->api.lkey;
    out.addr = info.addr;
    out.length = static_cast<std::uint32_t>(info.length);
    out.access = 0;
    if ((info.mw_access_flags & IBV_ACCESS_REMOTE_READ) != 0) out.access |= rdma::kAccessRemoteRead;
    if ((info.mw_access_flags & IBV_ACCESS_REMOTE_WRITE) != 0)
        out.access |= rdma::kAccessRemoteWrite;
    return 0;
}

constexpr unsigned kSendFlagsKnown =
    IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE | IBV_SEND_FENCE;

int post_send_one(Session& s, Qp& q, const ibv_send_wr& w) {
    SendPlan plan;
    if (int e = plan_of(w, plan); e != 0) return e;
    // IBV_SEND_IP_CSUM: the Device has no such offload.
    if ((w.send_flags & ~kSendFlagsKnown) != 0) return EINVAL;
    const bool read = plan.opcode == rdma::WrOpcode::kRdmaRead;
    const bool bind = plan.opcode == rdma::WrOpcode::kBindMw;
    const bool inl = (w.send_flags & IBV_SEND_INLINE) != 0;
    if (w.num_sge < 0 || static_cast<std::uint32_t>(w.num_sge) > q.cap.max_send_sge ||
        (read && w.num_sge > static_cast<int>(kMaxSgeRead)) || ((read || bind) && inl)) {
        return EINVAL;
    }
    rdma::MwBind mw_bind;
    if (bind) {
        if (int e = bind_of(w, mw_bind); e != 0) return e;
    }
    std::array<rdma::Sge, kMaxSge> sge{};
    if (bind) {
        // A bind's sg_list is not read (libibverbs: the window and range say it all).
    } else if (!inl) {
        if (int e = check_sges(q, w.sg_list, w.num_sge, read, sge); e != 0) return e;
    } else if (w.num_sge > 0 && q.cap.max_inline_data == 0) {
        return EINVAL;
    }
    if (is_error_state(q)) {
        push_local_completion(*q.send_cq, flushed(q, w.wr_id, plan.wc_opcode));
        return 0;
    }
    if (!q.handle || q.api.state != IBV_QPS_RTS) return ENOTCONN;
    std::size_t num = bind ? 0 : static_cast<std::size_t>(w.num_sge);
    if (inl && num > 0) {
        if (int e = stage_inline(q, w, sge[0]); e != 0) return e;
        num = sge[0].length > 0 ? 1 : 0;
    }
    rdma::SendWr sw;
    sw.wr_id = w.wr_id;
    sw.opcode = plan.opcode;
    sw.sg_list = std::span(sge.data(), num);
    sw.signaled = (w.send_flags & IBV_SEND_SIGNALED) != 0;
    sw.fence = (w.send_flags & IBV_SEND_FENCE) != 0;
    const bool send =
        plan.opcode == rdma::WrOpcode::kSend || plan.opcode == rdma::WrOpcode::kSendWithInvalidate;
    sw.solicited = send && (w.send_flags & IBV_SEND_SOLICITED) != 0;
    if (plan.opcode == rdma::WrOpcode::kSendWithInvalidate ||
        plan.opcode == rdma::WrOpcode::kLocalInvalidate) {
        sw.invalidate_rkey = w.invalidate_rkey;
    } else if (bind) {
        sw.rkey = w.bind_mw.rkey;
        sw.bind = mw_bind;
    } else {
        sw.remote_addr = w.wr.rdma.remote_addr;
        sw.rkey = w.wr.rdma.rkey;
    }
    auto done = s.device().post_send(s.now(), *q.handle, sw);
    if (done) {
        if (inl && num > 0) ++q.inline_seq;
        // The window's rkey is the bind's from now on, so that ibv_inc_rkey(mw->rkey)
        // steps from it for the next bind.
        if (bind) w.bind_mw.mw->rkey = w.bind_mw.rkey;
        return 0;
    }
    if (done.error() == rdma::VerbsError::kWrongState) {
        if (current_state(s, q) != IBV_QPS_ERR) return ENOTCONN;
        push_local_completion(*q.send_cq, flushed(q, w.wr_id, plan.wc_opcode));
        return 0;
    }
    return errno_of(done.error());
}

}  // namespace

namespace {

// Posts a list under one lock; the first refused request is *bad_wr.
template <class Wr, class F>
int post_list(ibv_qp* qp, Wr* wr, Wr** bad_wr, F&& post_one) {
    Wr* bad = wr;
    int err = locked([&](Session& s) {
        Qp* q = registry().qps.find(qp);
        if (q == nullptr) return EINVAL;
        // A list of receives is posted whole before bytes that waited for a receive are
        // read (rdma::Device::RecvBatch).
        std::optional<rdma::Device::RecvBatch> batch;
        if (std::is_same_v<Wr, ibv_recv_wr> && q->handle)
            batch.emplace(s.device(), s.now(), *q->handle);
        for (Wr* w = wr; w != nullptr; w = w->next) {
            bad = w;
            if (int e = post_one(s, *q, *w); e != 0) return e;
        }
        return 0;
    });
    if (err != 0 && bad_wr != nullptr) *bad_wr = bad;
    return err;
}

}  // namespace

int op_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
    return post_list(qp, wr, bad_wr, post_send_one);
}

int op_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    return post_list(qp, wr, bad_wr, post_recv_one);
}

}  // namespace iwcm::abi::verbs

// ---------------------------------------------------------------- the rdma_cm half's calls

namespace iwcm::abi {

using namespace verbs;

int qp_attach(Session& s, ibv_qp* qp, ConnHandle conn) {
    Registry& r = registry();
    Qp* q = r.qps.find(qp);
    if (q == nullptr) return EINVAL;
    if (q->handle) return EBUSY;
    if (is_error_state(*q)) return EINVAL;
    rdma::QpAttr a;
    a.send_cq = q->send_cq->handle;
    a.recv_cq = q->recv_cq->handle;
    a.max_send_wr = std::max(1u, q->cap.max_send_wr);
    a.max_recv_wr = std::max(1u, q->cap.max_recv_wr);
    a.max_sge = std::max({1u, q->cap.max_send_sge, q->cap.max_recv_sge});
    a.sq_sig_all = q->sq_sig_all;
    a.pd = q->pd->api.handle;  // the STags its peer names must be of this PD's regions
    if (q->srq != nullptr) a.srq = q->srq->handle;
    auto h = s.device().create_qp(s.now(), conn, a);
    if (!h && h.error() == rdma::VerbsError::kStaleHandle) {
        // The connection ended before it could be bound (its end event is
        // queued behind the one that established it): the QP goes to ERR
        // and its waiting receives flush, as a QP whose connection ended.
        to_error(s, *q);
        return ENOTCONN;
    }
    if (!h) return errno_of(h.error());
    q->handle = *h;
    r.qp_by_handle[key_of(*h)] = q;
    r.qp_num_by_handle[key_of(*h)] = QpNum{q->api.qp_num, q->send_cq, q->recv_cq};
    if (q->cap.max_inline_data > 0) {
        q->inline_buf.resize(std::size_t{a.max_send_wr} * q->cap.max_inline_data);
        auto mr = s.device().reg_mr(q->inline_buf, 0, q->pd->api.handle);
        if (!mr) {
            detach(s, *q);
            return ENOMEM;
        }
        q->inline_mr = *mr;
    }
    q->api.state = IBV_QPS_RTS;
    // The receives that waited, in order, all posted before bytes that waited for them
    // are read. One whose region went meanwhile completes with a protection error instead.
    std::deque<PendingRecv> waiting;
    waiting.swap(q->waiting);
    const rdma::Device::RecvBatch batch(s.device(), s.now(), *h);
    for (const PendingRecv& p : waiting) {
        rdma::RecvWr rw{p.wr_id, std::span(p.sge.data(), p.num_sge)};
        if (s.device().post_recv(s.now(), *h, rw)) continue;
        ibv_wc wc{};
        wc.wr_id = p.wr_id;
        wc.status = IBV_WC_LOC_PROT_ERR;
        wc.opcode = IBV_WC_RECV;
        wc.qp_num = q->api.qp_num;
        push_local_completion(*q->recv_cq, wc);
    }
    return 0;
}

void qp_abandon(Session& s, ibv_qp* qp) {
    Qp* q = registry().qps.find(qp);
    if (q != nullptr) (void)transition(s, *q, IBV_QPS_ERR);
}

std::optional<rdma::QpHandle> qp_handle(ibv_qp* qp) {
    Qp* q = registry().qps.find(qp);
    return q == nullptr ? std::nullopt : q->handle;
}

namespace {

// The affiliated asynchronous event of a QP's end (rdma::QpError says which ends are
// errors, and why as siw and irdma).
std::optional<ibv_event_type> async_event_of(rdma::QpError error) {
    switch (error) {
        case rdma::QpError::kNone: return std::nullopt;
        case rdma::QpError::kFatal: return IBV_EVENT_QP_FATAL;
        case rdma::QpError::kAccess: return IBV_EVENT_QP_ACCESS_ERR;
    }
    return IBV_EVENT_QP_FATAL;
}

}  // namespace

// The Device's QP ended: the QP is in ERR, its work already flushed into its CQs by the
// Device, so a program that reads the event and then polls finds every flush. The first
// of the QP's end events (a TERMINATE comes before the connection's end) raises the
// QP's one error event, if its end is an error (rdma::QpError): IBV_EVENT_QP_FATAL or
// IBV_EVENT_QP_ACCESS_ERR. IBV_EVENT_QP_LAST_WQE_REACHED follows for a QP on an SRQ.
// An IBV_EVENT_CQ_ERR comes first: the Device reports a CQ's failure before the ends of
// the QPs it brings.
void verbs_on_qp_event(Session&, const rdma::QpEvent& e) {
    if (e.type == rdma::QpEventType::kCqError) {
        verbs_on_cq_error(e.cq);
        return;
    }
    if (e.type == rdma::QpEventType::kSrqLimit) {
        verbs_on_srq_limit(e.srq);
        return;
    }
    auto& by_handle = registry().qp_by_handle;
    auto it = by_handle.find(key_of(e.qp));
    if (it == by_handle.end()) return;
    Qp& q = *it->second;
    q.api.state = IBV_QPS_ERR;
    if (!q.ended) {
        q.ended = true;
        if (auto type = async_event_of(e.error)) raise_async_event(q, *type);
    }
    last_wqe_reached(q);
}

}  // namespace iwcm::abi

using namespace iwcm;
using namespace iwcm::abi::verbs;

// ---------------------------------------------------------------- create, modify, query, destroy

namespace {

int check_caps(const ibv_qp_cap& c) {
    if (c.max_send_wr > kMaxQpWr || c.max_recv_wr > kMaxQpWr) return EINVAL;
    if (c.max_send_sge > kMaxSge || c.max_recv_sge > kMaxSge) return EINVAL;
    if (c.max_inline_data > kMaxInline) return EINVAL;
    return 0;
}

}  // namespace

IWCM_VERBS_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
    ibv_qp* out = nullptr;
    int err = locked([&](Session&) {
        Registry& r = registry();
        Pd* p = r.pds.find(pd);
        if (p == nullptr || attr == nullptr) return EINVAL;
        if (attr->qp_type != IBV_QPT_RC) return EOPNOTSUPP;  // as siw: RC only
        Srq* srq = attr->srq == nullptr ? nullptr : r.srqs.find(attr->srq);
        if (attr->srq != nullptr && (srq == nullptr || srq->pd != p)) return EINVAL;
        Cq* scq = r.cqs.find(attr->send_cq);
        Cq* rcq = r.cqs.find(attr->recv_cq);
        if (scq == nullptr || rcq == nullptr || scq->ctx != p->ctx || rcq->ctx != p->ctx) {
            return EINVAL;
        }
        if (int e = check_caps(attr->cap); e != 0) return e;
        if (r.qps.size() >= kMaxQp) return ENOMEM;
        auto q = std::make_unique<Qp>();
        static std::uint32_t next_handle = 1;
        q->ctx = p->ctx;
        q->pd = p;
        q->send_cq = scq;
        q->recv_cq = rcq;
        q->srq = srq;
        q->cap = attr->cap;
        q->sq_sig_all = attr->sq_sig_all != 0;
        ibv_qp& a = q->api;
        a.context = pd->context;
        a.qp_context = attr->qp_context;
        a.pd = pd;
        a.send_cq = attr->send_cq;
        a.recv_cq = attr->recv_cq;
        a.srq = attr->srq;
        a.handle = next_handle++;
        a.qp_num = r.next_qp_num++;
        a.state = IBV_QPS_RESET;
        a.qp_type = IBV_QPT_RC;
        ::pthread_mutex_init(&a.mutex, nullptr);
        ::pthread_cond_init(&a.cond, nullptr);
        ++p->users;
        ++scq->users;
        ++rcq->users;
        if (srq != nullptr) ++srq->users;
        out = &r.qps.add(std::move(q))->api;
        return 0;
    });
    if (err != 0) errno = err;
    return out;
}

IWCM_VERBS_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
    return locked([&](Session& s) {
        Qp* q = registry().qps.find(qp);
        if (q == nullptr || attr == nullptr) return EINVAL;
        const auto mask = static_cast<unsigned>(attr_mask);
        if ((mask & IBV_QP_CUR_STATE) != 0 && attr->cur_qp_state != current_state(s, *q)) {
            return EINVAL;
        }
        if ((mask & IBV_QP_PORT) != 0 && attr->port_num != 1) return EINVAL;
        if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) != 0 && attr->max_rd_atomic > kMaxReadDepth) {
            return EINVAL;
        }
        if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) != 0 && attr->max_dest_rd_atomic > kMaxReadDepth) {
            return EINVAL;
        }
        if ((mask & IBV_QP_STATE) != 0) {
            if (int e = transition(s, *q, attr->qp_state); e != 0) return e;
        }
        // The rest of an InfiniBand QP's attributes (address vector, PSNs,
        // timeouts, P_Key index) mean nothing on iWARP and are ignored, as
        // the iWARP rdma_cm path passes some of them.
        if ((mask & IBV_QP_ACCESS_FLAGS) != 0) q->access_flags = attr->qp_access_flags;
        if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) != 0) q->max_rd_atomic = attr->max_rd_atomic;
        if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) != 0) {
            q->max_dest_rd_atomic = attr->max_dest_rd_atomic;
        }
        return 0;
    });
}

IWCM_VERBS_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int /*attr_mask*/,
                                   ibv_qp_init_attr* init_attr) {
    Runtime* rt = abi::runtime();
    return locked([&](Session& s) {
        Qp* q = registry().qps.find(qp);
        if (q == nullptr || attr == nullptr || init_attr == nullptr) return EINVAL;
        *attr = ibv_qp_attr{};
        attr->qp_state = attr->cur_qp_state = current_state(s, *q);
        const std::uint32_t mtu = rt->info().mtu;
        attr->path_mtu = mtu >= 4096   ? IBV_MTU_4096
                         : mtu >= 2048 ? IBV_MTU_2048
                         : mtu >= 1024 ? IBV_MTU_1024
                         : mtu >= 512  ? IBV_MTU_512
                                       : IBV_MTU_256;
        attr->qp_access_flags = q->access_flags;
        attr->cap = q->cap;
        attr->max_rd_atomic = q->max_rd_atomic;
        attr->max_dest_rd_atomic = q->max_dest_rd_atomic;
        if (q->handle) {
            if (auto info = s.device().query_qp(*q->handle)) {
                attr->max_rd_atomic = static_cast<std::uint8_t>(info->ord);
                attr->max_dest_rd_atomic = static_cast<std::uint8_t>(info->ird);
            }
        }
        attr->port_num = 1;
        *init_attr = ibv_qp_init_attr{};
        init_attr->qp_context = q->api.qp_context;
        init_attr->send_cq = q->api.send_cq;
        init_attr->recv_cq = q->api.recv_cq;
        init_attr->cap = q->cap;
        init_attr->qp_type = IBV_QPT_RC;
        init_attr->sq_sig_all = q->sq_sig_all ? 1 : 0;
        return 0;
    });
}

// Waits, as libibverbs, until the async events returned for the QP are
// acknowledged; those not yet returned are withdrawn.
IWCM_VERBS_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
    Qp* waiting = nullptr;
    int err = locked([&](Session&) {
        waiting = registry().qps.find(qp);
        if (waiting == nullptr) return EINVAL;
        std::erase_if(waiting->ctx->async_events,
                      [&](const ibv_async_event& e) { return e.element.qp == qp; });
        return 0;
    });
    if (err != 0) return err;
    wait_acknowledged(qp->mutex, qp->cond, qp->events_completed, waiting->events_reported);
    return locked([&](Session& s) {
        Registry& r = registry();
        Qp* q = r.qps.find(qp);
        if (q == nullptr) return EINVAL;
        detach(s, *q);
        --q->pd->users;
        --q->send_cq->users;
        --q->recv_cq->users;
        if (q->srq != nullptr) --q->srq->users;
        r.qps.retire(q);
        return 0;
    });
}
