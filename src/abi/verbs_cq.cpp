// libibverbs: completion channels, completion queues, completion
// notification and asynchronous events.
//
// Read first: verbs_objects.hpp, ibv_create_comp_channel(3),
// ibv_create_cq(3), ibv_poll_cq(3), ibv_req_notify_cq(3),
// ibv_get_cq_event(3), ibv_get_async_event(3).
//
// Notification. ibv_req_notify_cq arms a CQ for one notification: the next
// completion that enters it (with solicited_only, the next receive of a Send
// with Solicited Event, or any completion in error) queues the CQ on its
// channel and makes the channel's eventfd readable; the CQ is then disarmed
// until armed again. Completions reach this file through the Device's
// completion hook (verbs_on_completion) or, for work that never reached the
// Device, push_local_completion.
//
// Blocking. ibv_get_cq_event and ibv_get_async_event read their eventfd
// (EFD_SEMAPHORE: one read, one event; O_NONBLOCK on the fd gives EAGAIN)
// outside the runtime's lock and take the queued item under it. A read whose
// item was withdrawn meanwhile (its CQ or QP destroyed) reads again.
//
// Polling. Programs poll in a tight loop (perftest does between every
// message); taking the runtime's lock for each empty poll would keep the
// progress thread from the lock it needs to receive the very frames that
// complete the work. Each CQ carries a flag set as a completion enters it: a
// poll of a CQ without one looks it up shared, without the runtime's lock.
// Over AF_XDP, whose frames are read from a ring without a system call, the
// empty poll then reads the frames waiting itself when the lock is free
// (Runtime::poll_inline): a poller keeps its CPU busy anyway, and the
// progress thread need not be woken and scheduled for each frame.
//
// Acknowledgement, as libibverbs: ibv_destroy_cq waits until every event
// ibv_get_cq_event returned for the CQ is acknowledged, and ibv_destroy_qp
// (verbs_qp.cpp) the same for async events; destroying with events not
// acknowledged is the application's bug and blocks it.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <mutex>
#include <shared_mutex>

#include "abi/verbs_objects.hpp"
#include "iwcm/assert.hpp"

namespace iwcm::abi::verbs {

namespace {

void signal_fd(int fd) {
    const std::uint64_t one = 1;
    ssize_t n = ::write(fd, &one, sizeof one);
    IWCM_ASSERT(n == sizeof one);
}

// One notification per arm (see the file comment).
void notify(Cq& cq, bool solicited) {
    if (cq.armed == Arm::kNone || (cq.armed == Arm::kSolicited && !solicited)) return;
    cq.armed = Arm::kNone;
    if (cq.channel == nullptr) return;
    cq.channel->events.push_back(&cq);
    signal_fd(cq.channel->api.fd);
}

ibv_wc_status status_of(rdma::WcStatus s) {
    switch (s) {
        case rdma::WcStatus::kSuccess: return IBV_WC_SUCCESS;
        case rdma::WcStatus::kLocLenErr: return IBV_WC_LOC_LEN_ERR;
        case rdma::WcStatus::kLocQpOpErr: return IBV_WC_LOC_QP_OP_ERR;
        case rdma::WcStatus::kLocProtErr: return IBV_WC_LOC_PROT_ERR;
        case rdma::WcStatus::kMwBindErr: return IBV_WC_MW_BIND_ERR;
        case rdma::WcStatus::kWrFlushErr: return IBV_WC_WR_FLUSH_ERR;
        case rdma::WcStatus::kRemAccessErr: return IBV_WC_REM_ACCESS_ERR;
        case rdma::WcStatus::kRemOpErr: return IBV_WC_REM_OP_ERR;
        case rdma::WcStatus::kRemInvReqErr: return IBV_WC_REM_INV_REQ_ERR;
        case rdma::WcStatus::kFatalErr: return IBV_WC_FATAL_ERR;
        case rdma::WcStatus::kGeneralErr: return IBV_WC_GENERAL_ERR;
    }
    return IBV_WC_GENERAL_ERR;
}

ibv_wc_opcode opcode_of(rdma::WcOpcode o) {
    switch (o) {
        case rdma::WcOpcode::kSend: return IBV_WC_SEND;
        case rdma::WcOpcode::kRdmaWrite: return IBV_WC_RDMA_WRITE;
        case rdma::WcOpcode::kRdmaRead: return IBV_WC_RDMA_READ;
        case rdma::WcOpcode::kRecv: return IBV_WC_RECV;
        case rdma::WcOpcode::kLocalInvalidate: return IBV_WC_LOCAL_INV;
        case rdma::WcOpcode::kBindMw: return IBV_WC_BIND_MW;
    }
    return IBV_WC_SEND;
}

// An iWARP completion carries no immediate data, no source QP, no P_Key:
// those fields are zero. A receive of a Send with Invalidate has IBV_WC_WITH_INV and
// the invalidated key (which shares the immediate data's field).
ibv_wc wc_of(const rdma::WorkCompletion& c) {
    ibv_wc w{};
    w.wr_id = c.wr_id;
    w.status = status_of(c.status);
    w.opcode = opcode_of(c.opcode);
    w.byte_len = c.byte_len;
    if (c.with_invalidate) {
        w.wc_flags |= IBV_WC_WITH_INV;
        w.invalidated_rkey = c.invalidated_rkey;
    }
    const auto& nums = registry().qp_num_by_handle;
    auto it = nums.find(key_of(c.qp));
    w.qp_num = it == nums.end() ? 0 : it->second.qp_num;
    return w;
}

// Takes up to `room` completions of the Device's CQ into wc.
int poll_device(Session& s, Cq& cq, ibv_wc* wc, int room) {
    std::array<rdma::WorkCompletion, 32> batch;
    int got = 0;
    while (got < room) {
        const auto want = static_cast<std::size_t>(std::min<int>(room - got, batch.size()));
        std::size_t n = s.device().poll_cq(cq.handle, std::span(batch.data(), want));
        for (std::size_t i = 0; i < n; ++i) wc[got++] = wc_of(batch[i]);
        if (n < want) break;
    }
    return got;
}

// Reads one count of a semaphore eventfd; 0 or an errno value.
int wait_fd(int fd) {
    std::uint64_t v = 0;
    for (;;) {
        if (::read(fd, &v, sizeof v) == sizeof v) return 0;
        if (errno != EINTR) return errno;
    }
}

}  // namespace

void push_local_completion(Cq& cq, const ibv_wc& wc) {
    cq.local.push_back(wc);
    cq.ready.store(true, std::memory_order_release);
    // A completion in error wakes a solicited-only arm too (IB spec 11.4.2.2).
    notify(cq, wc.status != IBV_WC_SUCCESS);
}

void wait_acknowledged(pthread_mutex_t& mutex, pthread_cond_t& cond, const std::uint32_t& completed,
                       const std::uint32_t& reported) {
    ::pthread_mutex_lock(&mutex);
    while (completed < reported) ::pthread_cond_wait(&cond, &mutex);
    ::pthread_mutex_unlock(&mutex);
}

// The Device's CQ overflowed: IBV_EVENT_CQ_ERR on its context, as siw raises
// IB_EVENT_CQ_ERR. Its QPs' ends follow as their own events.
void verbs_on_cq_error(rdma::CqHandle cq) {
    auto& by_handle = registry().cq_by_handle;
    auto it = by_handle.find(key_of(cq));
    if (it == by_handle.end()) return;
    Cq& c = *it->second;
    c.failed = true;
    c.ready.store(true, std::memory_order_release);
    ibv_async_event e{};
    e.element.cq = &c.api;
    e.event_type = IBV_EVENT_CQ_ERR;
    c.ctx->async_events.push_back(e);
    signal_fd(c.ctx->api.async_fd);
    notify(c, true);  // a thread asleep on the channel wakes to find the error
}

// The Device's SRQ fell below its armed limit: IBV_EVENT_SRQ_LIMIT_REACHED on its context.
void verbs_on_srq_limit(rdma::SrqHandle srq) {
    auto& by_handle = registry().srq_by_handle;
    auto it = by_handle.find(key_of(srq));
    if (it == by_handle.end()) return;
    Srq& q = *it->second;
    ibv_async_event e{};
    e.element.srq = &q.api;
    e.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
    q.ctx->async_events.push_back(e);
    signal_fd(q.ctx->api.async_fd);
}

void raise_async_event(Qp& qp, ibv_event_type type) {
    ibv_async_event e{};
    e.element.qp = &qp.api;
    e.event_type = type;
    qp.ctx->async_events.push_back(e);
    signal_fd(qp.ctx->api.async_fd);
}

// Whether the CQ is known to hold nothing (a poll of it returns 0 unlocked).
bool known_empty(ibv_cq* cq, int num_entries) {
    Registry& r = registry();
    std::shared_lock table(r.cqs_mutex);
    Cq* c = r.cqs.find(cq);
    return c != nullptr && num_entries >= 0 && !c->ready.load(std::memory_order_acquire);
}

int op_poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
    if (known_empty(cq, num_entries)) {
        // The poller makes progress itself (Runtime::poll_inline: AF_XDP only, when the
        // lock is free), then looks again; thread cancellation is held off, as in locked().
        Runtime* rt = runtime();
        if (rt == nullptr) return 0;
        int old_state = 0;
        ::pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old_state);
        const bool read = rt->poll_inline();
        ::pthread_setcancelstate(old_state, nullptr);
        if (!read || known_empty(cq, num_entries)) return 0;
    }
    int got = 0;
    int err = locked([&](Session& s) {
        Cq* c = registry().cqs.find(cq);
        if (c == nullptr || num_entries < 0 || (num_entries > 0 && wc == nullptr)) return EINVAL;
        while (got < num_entries && !c->local.empty()) {
            wc[got++] = c->local.front();
            c->local.pop_front();
        }
        got += poll_device(s, *c, wc + got, num_entries - got);
        // Emptied: the next poll may read `ready` alone; a failed CQ's poll always locks.
        if (got < num_entries && !c->failed) c->ready.store(false, std::memory_order_relaxed);
        return got == 0 && num_entries > 0 && c->failed ? EIO : 0;
    });
    return err != 0 ? -err : got;
}

int op_req_notify_cq(ibv_cq* cq, int solicited_only) {
    return locked([&](Session&) {
        Cq* c = registry().cqs.find(cq);
        if (c == nullptr) return EINVAL;
        if (solicited_only == 0) {
            c->armed = Arm::kAny;
        } else if (c->armed == Arm::kNone) {
            c->armed = Arm::kSolicited;
        }
        return 0;
    });
}

}  // namespace iwcm::abi::verbs

namespace iwcm::abi {

void verbs_on_completion(Session&, rdma::CqHandle cq, bool solicited) {
    auto& by_handle = verbs::registry().cq_by_handle;
    auto it = by_handle.find(verbs::key_of(cq));
    if (it == by_handle.end()) return;
    it->second->ready.store(true, std::memory_order_release);
    verbs::notify(*it->second, solicited);
}

}  // namespace iwcm::abi

using namespace iwcm;
using namespace iwcm::abi::verbs;

// ---------------------------------------------------------------- completion channels

IWCM_VERBS_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
    int fd = ::eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    if (fd < 0) return nullptr;
    ibv_comp_channel* out = nullptr;
    int err = locked([&](Session&) {
        Context* c = find_context(context);
        if (c == nullptr) return EINVAL;
        auto ch = std::make_unique<Channel>();
        ch->ctx = c;
        ch->api.context = context;
        ch->api.fd = fd;
        out = &registry().channels.add(std::move(ch))->api;
        ++c->objects;
        return 0;
    });
    if (err != 0) {
        ::close(fd);
        errno = err;
    }
    return out;
}

IWCM_VERBS_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
    return locked([&](Session&) {
        Channel* ch = registry().channels.find(channel);
        if (ch == nullptr) return EINVAL;
        if (ch->users > 0) return EBUSY;
        --ch->ctx->objects;
        ::close(ch->api.fd);
        ch->api.fd = -1;
        registry().channels.retire(ch);
        return 0;
    });
}

// ---------------------------------------------------------------- completion queues

IWCM_VERBS_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                                        ibv_comp_channel* channel, int comp_vector) {
    ibv_cq* out = nullptr;
    int err = locked([&](Session& s) {
        Registry& r = registry();
        Context* c = find_context(context);
        if (c == nullptr) return EINVAL;
        Channel* ch = channel == nullptr ? nullptr : r.channels.find(channel);
        if (channel != nullptr && (ch == nullptr || ch->ctx != c)) return EINVAL;
        if (cqe < 1 || static_cast<std::uint32_t>(cqe) > kMaxCqe) return EINVAL;
        if (comp_vector != 0) return EINVAL;  // one completion vector
        if (r.cqs.size() >= kMaxCq) return ENOMEM;
        auto handle = s.device().create_cq(static_cast<std::uint32_t>(cqe));
        if (!handle) return errno_of(handle.error());
        auto cq = std::make_unique<Cq>();
        static std::uint32_t next_handle = 1;
        cq->ctx = c;
        cq->channel = ch;
        cq->handle = *handle;
        ibv_cq& a = cq->api;
        a.context = context;
        a.channel = channel;
        a.cq_context = cq_context;
        a.handle = next_handle++;
        a.cqe = cqe;
        ::pthread_mutex_init(&a.mutex, nullptr);
        ::pthread_cond_init(&a.cond, nullptr);
        Cq* raw = nullptr;
        {
            std::unique_lock table(r.cqs_mutex);
            raw = r.cqs.add(std::move(cq));
        }
        r.cq_by_handle[key_of(*handle)] = raw;
        if (ch != nullptr) ++ch->users;
        ++c->objects;
        out = &raw->api;
        return 0;
    });
    if (err != 0) errno = err;
    return out;
}

IWCM_VERBS_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
    // Its notifications not yet read are withdrawn; those read are waited
    // for (the file comment).
    Cq* waiting = nullptr;
    int err = locked([&](Session&) {
        waiting = registry().cqs.find(cq);
        if (waiting == nullptr) return EINVAL;
        if (waiting->users > 0) return EBUSY;
        if (waiting->channel != nullptr) std::erase(waiting->channel->events, waiting);
        std::erase_if(waiting->ctx->async_events, [cq](const ibv_async_event& e) {
            return e.event_type == IBV_EVENT_CQ_ERR && e.element.cq == cq;
        });
        return 0;
    });
    if (err != 0) return err;
    wait_acknowledged(cq->mutex, cq->cond, cq->comp_events_completed, waiting->events_reported);
    wait_acknowledged(cq->mutex, cq->cond, cq->async_events_completed, waiting->async_reported);
    return locked([&](Session& s) {
        Registry& r = registry();
        Cq* c = r.cqs.find(cq);
        if (c == nullptr) return EINVAL;
        if (c->users > 0) return EBUSY;  // a QP came meanwhile
        auto done = s.device().destroy_cq(c->handle);
        IWCM_ASSERT(done.has_value());
        r.cq_by_handle.erase(key_of(c->handle));
        for (auto it = r.qp_num_by_handle.begin(); it != r.qp_num_by_handle.end();) {
            QpNum& q = it->second;
            if (q.send_cq == c) q.send_cq = nullptr;
            if (q.recv_cq == c) q.recv_cq = nullptr;
            it = q.send_cq == nullptr && q.recv_cq == nullptr ? r.qp_num_by_handle.erase(it)
                                                              : std::next(it);
        }
        if (c->channel != nullptr) {
            std::erase(c->channel->events, c);
            --c->channel->users;
        }
        --c->ctx->objects;
        std::unique_lock table(r.cqs_mutex);
        r.cqs.retire(c);
        return 0;
    });
}

IWCM_VERBS_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
    int fd = -1;
    int err = locked([&](Session&) {
        Channel* ch = registry().channels.find(channel);
        if (ch == nullptr || cq == nullptr || cq_context == nullptr) return EINVAL;
        fd = ch->api.fd;
        return 0;
    });
    while (err == 0) {
        if (err = wait_fd(fd); err != 0) break;
        Cq* got = nullptr;
        err = locked([&](Session&) {
            Channel* ch = registry().channels.find(channel);
            if (ch == nullptr) return EINVAL;
            if (ch->events.empty()) return 0;
            got = ch->events.front();
            ch->events.pop_front();
            ::pthread_mutex_lock(&got->api.mutex);
            ++got->events_reported;
            ::pthread_mutex_unlock(&got->api.mutex);
            *cq = &got->api;
            *cq_context = got->api.cq_context;
            return 0;
        });
        if (got != nullptr) return 0;
    }
    errno = err;
    return -1;
}

IWCM_VERBS_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
    int err = locked([&](Session&) { return registry().cqs.find(cq) == nullptr ? EINVAL : 0; });
    if (err != 0) return;
    ::pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    ::pthread_cond_broadcast(&cq->cond);
    ::pthread_mutex_unlock(&cq->mutex);
}

// ---------------------------------------------------------------- async events

IWCM_VERBS_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
    int fd = -1;
    int err = locked([&](Session&) {
        Context* c = find_context(context);
        if (c == nullptr || event == nullptr) return EINVAL;
        fd = c->api.async_fd;
        return 0;
    });
    while (err == 0) {
        if (err = wait_fd(fd); err != 0) break;
        bool got = false;
        err = locked([&](Session&) {
            Context* c = find_context(context);
            if (c == nullptr) return EINVAL;
            if (c->async_events.empty()) return 0;
            *event = c->async_events.front();
            c->async_events.pop_front();
            got = true;
            if (event->event_type == IBV_EVENT_CQ_ERR) {
                if (Cq* cq = registry().cqs.find(event->element.cq)) {
                    ::pthread_mutex_lock(&cq->api.mutex);
                    ++cq->async_reported;
                    ::pthread_mutex_unlock(&cq->api.mutex);
                }
            } else if (event->event_type == IBV_EVENT_SRQ_LIMIT_REACHED) {
                if (Srq* q = registry().srqs.find(event->element.srq)) {
                    ::pthread_mutex_lock(&q->api.mutex);
                    ++q->events_reported;
                    ::pthread_mutex_unlock(&q->api.mutex);
                }
            } else if (Qp* q = registry().qps.find(event->element.qp)) {
                ::pthread_mutex_lock(&q->api.mutex);
                ++q->events_reported;
                ::pthread_mutex_unlock(&q->api.mutex);
            }
            return 0;
        });
        if (got) return 0;
    }
    errno = err;
    return -1;
}

namespace {

// One acknowledged event of `obj`, if this library still issues it: its counter up under
// its mutex, and its destroy call (wait_acknowledged) woken.
template <class Api, class Obj>
void count_ack(const Table<Api, Obj> Registry::*table, Api* obj, std::uint32_t Api::*counter) {
    int err =
        locked([&](Session&) { return (registry().*table).find(obj) == nullptr ? EINVAL : 0; });
    if (err != 0) return;
    ::pthread_mutex_lock(&obj->mutex);
    ++(obj->*counter);
    ::pthread_cond_broadcast(&obj->cond);
    ::pthread_mutex_unlock(&obj->mutex);
}

}  // namespace

// QP events (QP_FATAL, QP_ACCESS_ERR, QP_LAST_WQE_REACHED), CQ_ERR and SRQ_LIMIT_REACHED
// are raised; others are acknowledged as nothing.
IWCM_VERBS_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
    if (event == nullptr) return;
    const ibv_event_type t = event->event_type;
    if (t == IBV_EVENT_SRQ_LIMIT_REACHED) {
        count_ack(&Registry::srqs, event->element.srq, &ibv_srq::events_completed);
        return;
    }
    if (t == IBV_EVENT_CQ_ERR) {
        count_ack(&Registry::cqs, event->element.cq, &ibv_cq::async_events_completed);
        return;
    }
    const bool qp_event = t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR ||
                          t == IBV_EVENT_QP_ACCESS_ERR || t == IBV_EVENT_COMM_EST ||
                          t == IBV_EVENT_SQ_DRAINED || t == IBV_EVENT_PATH_MIG ||
                          t == IBV_EVENT_PATH_MIG_ERR || t == IBV_EVENT_QP_LAST_WQE_REACHED;
    if (qp_event) count_ack(&Registry::qps, event->element.qp, &ibv_qp::events_completed);
}
