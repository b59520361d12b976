// librdmacm's QPs and endpoints of ids: rdma_create_qp(_ex), rdma_destroy_qp,
// rdma_create_ep, rdma_destroy_ep, rdma_get_request.
//
// Read first: src/abi/rdmacm_state.hpp, src/abi/abi.hpp (a QP made before its
// connection is attached when the connection is established), rdma_create_qp(3),
// rdma_create_ep(3). The QPs, CQs and completion channels are the verbs
// half's: they are made and destroyed through its exported libibverbs calls,
// outside the runtime's lock (each takes it itself).
#include <algorithm>
#include <cstring>

#include "abi/rdmacm_state.hpp"

#define IWCM_EXPORT extern "C" __attribute__((visibility("default")))

using namespace iwcm;
using namespace iwcm::abi;
using namespace iwcm::abi::cm;

namespace {

// What a QP of an id is made with, read under the lock.
struct IdView {
    ibv_context* verbs = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* send_cq = nullptr;
    ibv_cq* recv_cq = nullptr;
};

int view_of(rdma_cm_id* pub, IdView& out) {
    return locked([&](Session&) {
        Id* id = find_id(pub);
        if (id == nullptr || id->pub.qp != nullptr) return EINVAL;
        out = {id->pub.verbs, id->pub.pd, id->pub.send_cq, id->pub.recv_cq};
        return 0;
    });
}

void destroy_cqs(ibv_cq* send_cq, ibv_comp_channel* send_ch, ibv_cq* recv_cq,
                 ibv_comp_channel* recv_ch) {
    if (recv_cq != nullptr) ibv_destroy_cq(recv_cq);
    if (send_cq != nullptr && send_cq != recv_cq) ibv_destroy_cq(send_cq);
    if (recv_ch != nullptr) ibv_destroy_comp_channel(recv_ch);
    if (send_ch != nullptr && send_ch != recv_ch) ibv_destroy_comp_channel(send_ch);
}

// librdmacm's ucma_create_cqs: a CQ of the queue's depth, each with its own
// completion channel, for the queues the caller gave no CQ.
struct MadeCqs {
    ibv_cq* send_cq = nullptr;
    ibv_comp_channel* send_ch = nullptr;
    ibv_cq* recv_cq = nullptr;
    ibv_comp_channel* recv_ch = nullptr;
    void undo() { destroy_cqs(send_cq, send_ch, recv_cq, recv_ch); }
};

bool make_cq(rdma_cm_id* pub, ibv_context* verbs, std::uint32_t depth, ibv_cq*& cq,
             ibv_comp_channel*& ch) {
    ch = ibv_create_comp_channel(verbs);
    if (ch == nullptr) return false;
    cq = ibv_create_cq(verbs, static_cast<int>(std::max<std::uint32_t>(depth, 1)), pub, ch, 0);
    return cq != nullptr;
}

// Under the lock: the id takes the QP; an id whose connection is already
// established (accepted before its QP was made) attaches it at once.
int adopt_qp(Session& s, rdma_cm_id* pub, ibv_qp* qp, const MadeCqs& made) {
    Id* id = find_id(pub);
    if (id == nullptr || id->pub.qp != nullptr) return EINVAL;
    if (id->state == IdState::kEstablished && id->conn.valid()) {
        if (const int err = qp_attach(s, qp, id->conn); err != 0) return err;
        id->qp_attached = true;
    }
    id->pub.qp = qp;
    id->pub.pd = qp->pd;
    if (made.send_cq != nullptr || made.recv_cq != nullptr) {
        id->own_cqs = true;
        if (made.send_cq != nullptr) {
            id->pub.send_cq = made.send_cq;
            id->pub.send_cq_channel = made.send_ch;
        }
        if (made.recv_cq != nullptr) {
            id->pub.recv_cq = made.recv_cq;
            id->pub.recv_cq_channel = made.recv_ch;
        }
    }
    return 0;
}

// The QP starts in INIT with what rdma_init_qp_attr gives (librdmacm's
// ucma_init_conn_qp).
int init_qp(rdma_cm_id* pub, ibv_qp* qp) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    int mask = 0;
    if (rdma_init_qp_attr(pub, &attr, &mask) != 0) return errno;
    return ibv_modify_qp(qp, &attr, mask);
}

int create_qp(rdma_cm_id* pub, ibv_pd* pd, ibv_qp_init_attr& attr) {
    IdView v;
    if (const int rc = view_of(pub, v); rc != 0) return rc;
    if (pd == nullptr) pd = v.pd;
    if (pd == nullptr || v.verbs == nullptr || pd->context != v.verbs) return fail(EINVAL);
    if ((v.recv_cq != nullptr && attr.recv_cq != nullptr && v.recv_cq != attr.recv_cq) ||
        (v.send_cq != nullptr && attr.send_cq != nullptr && v.send_cq != attr.send_cq))
        return fail(EINVAL);
    MadeCqs made;
    const bool need_send = attr.send_cq == nullptr && v.send_cq == nullptr;
    const bool need_recv = attr.recv_cq == nullptr && v.recv_cq == nullptr;
    if ((need_recv && !make_cq(pub, v.verbs, attr.cap.max_recv_wr, made.recv_cq, made.recv_ch)) ||
        (need_send && !make_cq(pub, v.verbs, attr.cap.max_send_wr, made.send_cq, made.send_ch))) {
        const int err = errno;
        made.undo();
        return fail(err);
    }
    if (attr.send_cq == nullptr) attr.send_cq = need_send ? made.send_cq : v.send_cq;
    if (attr.recv_cq == nullptr) attr.recv_cq = need_recv ? made.recv_cq : v.recv_cq;
    ibv_qp* qp = ibv_create_qp(pd, &attr);
    int err = qp == nullptr ? errno : init_qp(pub, qp);
    if (err == 0)
        err = abi::runtime()->call([&](Session& s) { return adopt_qp(s, pub, qp, made); });
    if (err != 0) {
        if (qp != nullptr) ibv_destroy_qp(qp);
        made.undo();
        return fail(err);
    }
    return 0;
}

}  // namespace

IWCM_EXPORT int rdma_create_qp(rdma_cm_id* pub, ibv_pd* pd, ibv_qp_init_attr* attr) {
    if (attr == nullptr) return fail(EINVAL);
    return create_qp(pub, pd, *attr);
}

// The extended attributes our QPs have are the plain ones and the PD; any
// other (XRC domains, creation flags, send ops for ibv_wr_*) is EINVAL.
IWCM_EXPORT int rdma_create_qp_ex(rdma_cm_id* pub, ibv_qp_init_attr_ex* ex) {
    if (ex == nullptr || (ex->comp_mask & ~std::uint32_t{IBV_QP_INIT_ATTR_PD}) != 0)
        return fail(EINVAL);
    ibv_qp_init_attr attr{};
    attr.qp_context = ex->qp_context;
    attr.send_cq = ex->send_cq;
    attr.recv_cq = ex->recv_cq;
    attr.srq = ex->srq;
    attr.cap = ex->cap;
    attr.qp_type = ex->qp_type;
    attr.sq_sig_all = ex->sq_sig_all;
    ibv_pd* pd = (ex->comp_mask & IBV_QP_INIT_ATTR_PD) != 0 ? ex->pd : nullptr;
    const int rc = create_qp(pub, pd, attr);
    if (rc == 0) {
        ex->send_cq = attr.send_cq;
        ex->recv_cq = attr.recv_cq;
        ex->cap = attr.cap;
        ex->pd = pub->pd;
        ex->comp_mask |= IBV_QP_INIT_ATTR_PD;
    }
    return rc;
}

IWCM_EXPORT void rdma_destroy_qp(rdma_cm_id* pub) {
    ibv_qp* qp = nullptr;
    MadeCqs own;
    const int rc = locked([&](Session&) {
        Id* id = find_id(pub);
        if (id == nullptr || id->pub.qp == nullptr) return EINVAL;
        qp = id->pub.qp;
        id->pub.qp = nullptr;
        id->qp_attached = false;
        if (id->own_cqs) {
            own = {id->pub.send_cq, id->pub.send_cq_channel, id->pub.recv_cq,
                   id->pub.recv_cq_channel};
            id->pub.send_cq = id->pub.recv_cq = nullptr;
            id->pub.send_cq_channel = id->pub.recv_cq_channel = nullptr;
            id->own_cqs = false;
        }
        return 0;
    });
    if (rc != 0) return;
    ibv_destroy_qp(qp);
    own.undo();
}

IWCM_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** out) {
    if (out == nullptr) return fail(EINVAL);
    std::optional<ibv_qp_init_attr> qp_attr;
    rdma_cm_event* held = nullptr;
    const int rc = locked([&](Session&) {
        Id* l = find_id(listen);
        if (l == nullptr || !l->sync) return EINVAL;
        qp_attr = l->request_qp_attr;
        held = listen->event;
        listen->event = nullptr;
        return 0;
    });
    if (rc != 0) return rc;
    if (held != nullptr) rdma_ack_cm_event(held);
    rdma_cm_event* ev = nullptr;
    if (get_event(listen->channel, &ev) != 0) return -1;
    int err = 0;
    if (ev->status != 0) {
        err = ev->status < 0 ? -ev->status : ev->status;
    } else if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
        err = EINVAL;
    } else if (qp_attr && rdma_create_qp(ev->id, listen->pd, &*qp_attr) != 0) {
        err = errno;
    }
    if (err != 0) {
        listen->event = ev;  // acknowledged by the next call, as librdmacm
        return fail(err);
    }
    *out = ev->id;
    ev->id->event = ev;
    return 0;
}

namespace {

int passive_ep(rdma_cm_id* id, const rdma_addrinfo* res, ibv_pd* pd,
               const ibv_qp_init_attr* qp_attr) {
    if (rdma_bind_addr(id, res->ai_src_addr) != 0) return -1;
    return locked([&](Session&) {
        Id* priv = find_id(id);
        if (priv == nullptr) return EINVAL;
        if (pd != nullptr) priv->pub.pd = pd;
        if (qp_attr != nullptr) {
            priv->request_qp_attr = *qp_attr;
            priv->request_qp_attr->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
        }
        return 0;
    });
}

int active_ep(rdma_cm_id* id, const rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_attr) {
    constexpr int kTimeoutMs = 2000;  // librdmacm's rdma_create_ep
    if (rdma_resolve_addr(id, res->ai_src_addr, res->ai_dst_addr, kTimeoutMs) != 0) return -1;
    if (rdma_resolve_route(id, kTimeoutMs) != 0) return -1;
    if (qp_attr != nullptr) {
        qp_attr->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
        if (rdma_create_qp(id, pd, qp_attr) != 0) return -1;
    }
    if (res->ai_connect_len == 0 || res->ai_connect == nullptr) return 0;
    return locked([&](Session&) {
        Id* priv = find_id(id);
        if (priv == nullptr) return EINVAL;
        const auto* p = static_cast<const std::byte*>(res->ai_connect);
        priv->connect_data.assign(p, p + res->ai_connect_len);
        return 0;
    });
}

}  // namespace

IWCM_EXPORT int rdma_create_ep(rdma_cm_id** out, rdma_addrinfo* res, ibv_pd* pd,
                               ibv_qp_init_attr* qp_attr) {
    if (out == nullptr || res == nullptr) return fail(EINVAL);
    rdma_cm_id* id = nullptr;
    const auto ps = static_cast<rdma_port_space>(res->ai_port_space);
    if (rdma_create_id(nullptr, &id, nullptr, ps) != 0) return -1;
    const int rc = (res->ai_flags & RAI_PASSIVE) != 0 ? passive_ep(id, res, pd, qp_attr)
                                                      : active_ep(id, res, pd, qp_attr);
    if (rc != 0) {
        const int err = errno;
        rdma_destroy_ep(id);
        return fail(err);
    }
    *out = id;
    return 0;
}

IWCM_EXPORT void rdma_destroy_ep(rdma_cm_id* id) {
    if (id == nullptr) return;
    if (id->qp != nullptr) rdma_destroy_qp(id);
    rdma_destroy_id(id);
}
