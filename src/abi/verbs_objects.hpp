// The libibverbs half's objects: what stands behind each ibv_* pointer it
// hands out, and the registry that tells an issued pointer from a stale or
// foreign one.
//
// Read first: src/abi/abi.hpp (locking), include/iwcm/verbs.hpp (the Device
// these objects drive), <infiniband/verbs.h> (the structs the application
// sees: each object below holds one as its `api` member and the registry maps
// that member's address back to the object).
//
// Everything here is read and changed only under the runtime's lock, except
// the fields the comments name (the ibv_cq / ibv_qp event counters, guarded by
// the struct's own mutex as libibverbs guards them).
#pragma once

#include <infiniband/verbs.h>
#include <pthread.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "abi/abi.hpp"

#define IWCM_VERBS_EXPORT extern "C" __attribute__((visibility("default")))

namespace iwcm::abi::verbs {

// The limits the device reports (ibv_query_device) and enforces. Those of the
// Device's engine are restated here because they are its contract
// (src/rdma/engine.cpp, mr_table.cpp, include/iwcm/verbs.hpp DeviceConfig).
constexpr std::uint32_t kMaxQpWr = 1u << 16;    // max_send_wr / max_recv_wr of a QP
constexpr std::uint32_t kMaxSrq = 1024;         // shared receive queues of the device
constexpr std::uint32_t kMaxSge = 6;            // SGEs of a work request (rdma::kMaxSge)
constexpr std::uint32_t kMaxSgeRead = kMaxSge;  // an RDMA Read's sinks (a Read Request each)
constexpr std::uint32_t kMaxCqe = 1u << 22;     // entries of a CQ
constexpr std::uint32_t kMaxMessage = 1u << 31;
constexpr std::uint32_t kMaxReadDepth = 128;  // IRD / ORD of a QP
constexpr std::uint32_t kMaxMr = 4096;        // DeviceConfig::max_mrs
constexpr std::uint32_t kMaxQp = 65536;       // DeviceConfig::max_qps
// Limits of this library's own tables.
constexpr std::uint32_t kMaxPd = 65536;
constexpr std::uint32_t kMaxCq = 65536;
// Inline data is copied at post time into a per-QP ring of max_send_wr slots
// of this size, registered with the Device (verbs_qp.cpp "Inline data").
constexpr std::uint32_t kMaxInline = 256;

struct Context;
struct Cq;

struct Pd {
    ibv_pd api{};
    Context* ctx = nullptr;
    std::uint32_t users = 0;  // MRs, MWs, QPs and SRQs made on it
};

struct Mr {
    ibv_mr api{};
    Pd* pd = nullptr;
    rdma::MrHandle handle;
    std::uint32_t access = 0;  // ibv_access_flags
};

// A memory window (type 2 only: bound through the send queue, IBV_WR_BIND_MW).
struct Mw {
    ibv_mw api{};
    Pd* pd = nullptr;
    rdma::MwHandle handle;
};

struct Channel {
    ibv_comp_channel api{};
    Context* ctx = nullptr;
    std::deque<Cq*> events;   // notifications not yet taken by ibv_get_cq_event
    std::uint32_t users = 0;  // CQs on it
};

enum class Arm : std::uint8_t { kNone, kSolicited, kAny };

struct Cq {
    ibv_cq api{};
    Context* ctx = nullptr;
    Channel* channel = nullptr;
    rdma::CqHandle handle;
    Arm armed = Arm::kNone;
    // Completions this library makes itself (flushes of work that never
    // reached the Device): polled before the Device's.
    std::deque<ibv_wc> local;
    std::uint32_t users = 0;  // QPs using it as send or receive CQ
    // Events ibv_get_cq_event returned (under api.mutex, beside
    // api.comp_events_completed, which ibv_ack_cq_events counts).
    std::uint32_t events_reported = 0;
    // Set under the runtime's lock as a completion enters the CQ, cleared by
    // a poll that emptied it: ibv_poll_cq of an empty CQ reads this alone and
    // leaves the lock to the progress thread (verbs_cq.cpp "Polling").
    std::atomic<bool> ready{false};
    // The Device's CQ overflowed (IBV_EVENT_CQ_ERR raised): once what it holds is taken,
    // ibv_poll_cq fails with -EIO. `ready` stays set, so that a poll takes the lock.
    bool failed = false;
    // Its IBV_EVENT_CQ_ERR once ibv_get_async_event returned it (under api.mutex, beside
    // api.async_events_completed, which ibv_ack_async_event counts).
    std::uint32_t async_reported = 0;
};

// A shared receive queue: the Device's, on a PD.
struct Srq {
    ibv_srq api{};
    Context* ctx = nullptr;
    Pd* pd = nullptr;
    rdma::SrqHandle handle;
    std::uint32_t max_wr = 0;
    std::uint32_t max_sge = 0;
    std::uint32_t users = 0;  // QPs made with it
    // Its IBV_EVENT_SRQ_LIMIT_REACHED events ibv_get_async_event returned (under
    // api.mutex, beside api.events_completed).
    std::uint32_t events_reported = 0;
};

struct PendingRecv {
    std::uint64_t wr_id = 0;
    std::array<rdma::Sge, kMaxSge> sge{};
    std::uint8_t num_sge = 0;
};

struct Qp {
    ibv_qp api{};
    Context* ctx = nullptr;
    Pd* pd = nullptr;
    Cq* send_cq = nullptr;
    Cq* recv_cq = nullptr;
    Srq* srq = nullptr;  // its receives come from this shared queue
    ibv_qp_cap cap{};
    bool sq_sig_all = false;
    int access_flags = 0;
    std::uint8_t max_rd_atomic = 0;        // as modify_qp set it (ORD)
    std::uint8_t max_dest_rd_atomic = 0;   // (IRD)
    std::optional<rdma::QpHandle> handle;  // attached to a connection
    std::deque<PendingRecv> waiting;       // receives posted before the connection
    // Inline data ring (attached QPs with cap.max_inline_data > 0).
    std::vector<std::byte> inline_buf;
    std::optional<rdma::MemoryRegion> inline_mr;
    std::uint64_t inline_seq = 0;
    // Async events ibv_get_async_event returned for this QP (under
    // api.mutex, beside api.events_completed).
    std::uint32_t events_reported = 0;
    // The Device QP's end was heard (its error event, if any, raised: one per QP).
    bool ended = false;
    // IBV_EVENT_QP_LAST_WQE_REACHED raised (a QP on an SRQ, once in ERR).
    bool last_wqe_reached = false;
};

struct Context {
    ibv_context api{};
    bool shared = false;  // default_context(): never closed
    std::deque<ibv_async_event> async_events;
    std::uint32_t objects = 0;  // PDs, CQs, channels made on it
};

// Issued objects by the address of their api member.
template <class Api, class Obj>
class Table {
public:
    Obj* find(const Api* p) const {
        auto it = map_.find(p);
        return it == map_.end() ? nullptr : it->second.get();
    }
    Obj* add(std::unique_ptr<Obj> o) {
        Obj* raw = o.get();
        map_.emplace(&raw->api, std::move(o));
        return raw;
    }
    // Takes o out of the table. Its memory stays, in a bounded quarantine of
    // the last kRetired objects: the header's inline calls (ibv_poll_cq,
    // ibv_post_send, ...) read api.context->ops of the pointer they are given,
    // and a stale pointer must reach this library's check, not freed memory.
    Obj* retire(Obj* o) {
        auto it = map_.find(&o->api);
        if (it == map_.end()) return nullptr;
        retired_.push_back(std::move(it->second));
        map_.erase(it);
        if (retired_.size() > kRetired) retired_.pop_front();
        return o;
    }
    std::size_t size() const { return map_.size(); }
    template <class F>
    void for_each(F&& f) const {
        for (const auto& [api, obj] : map_) f(*obj);
    }

private:
    static constexpr std::size_t kRetired = 4096;
    std::unordered_map<const Api*, std::unique_ptr<Obj>> map_;
    std::deque<std::unique_ptr<Obj>> retired_;
};

constexpr std::uint64_t key_of(rdma::QpHandle h) {
    return std::uint64_t{h.index} << 32 | h.generation;
}
constexpr std::uint64_t key_of(rdma::CqHandle h) {
    return std::uint64_t{h.index} << 32 | h.generation;
}
constexpr std::uint64_t key_of(rdma::SrqHandle h) {
    return std::uint64_t{h.index} << 32 | h.generation;
}

struct QpNum {
    std::uint32_t qp_num = 0;
    Cq* send_cq = nullptr;
    Cq* recv_cq = nullptr;
};

struct Registry {
    Table<ibv_context, Context> contexts;
    Table<ibv_pd, Pd> pds;
    Table<ibv_mr, Mr> mrs;
    Table<ibv_mw, Mw> mws;
    Table<ibv_comp_channel, Channel> channels;
    Table<ibv_cq, Cq> cqs;
    // Held shared by ibv_poll_cq's look-up outside the runtime's lock; held
    // exclusively (with the runtime's lock) while cqs changes.
    std::shared_mutex cqs_mutex;
    Table<ibv_qp, Qp> qps;
    Table<ibv_srq, Srq> srqs;
    std::unordered_map<std::uint64_t, Srq*> srq_by_handle;
    std::unordered_map<std::uint32_t, Mr*> mr_by_lkey;
    std::unordered_map<std::uint64_t, Cq*> cq_by_handle;
    std::unordered_map<std::uint64_t, Qp*> qp_by_handle;
    // qp_num of every Device QP whose completions may still be polled (kept
    // after the QP is destroyed, until its CQs are).
    std::unordered_map<std::uint64_t, QpNum> qp_num_by_handle;
    std::uint32_t next_qp_num = 1;
};

// Under the runtime's lock.
Registry& registry();

// The one device and the shared context (verbs_device.cpp).
ibv_device* the_device();
Context* find_context(const ibv_context* ctx);

// Completions this library makes (verbs_cq.cpp): queued on cq, with the
// notification a Device completion would raise.
void push_local_completion(Cq& cq, const ibv_wc& wc);
// A QP's async event to its context's async_fd (verbs_cq.cpp).
void raise_async_event(Qp& qp, ibv_event_type type);
// The Device's CQ `cq` overflowed: IBV_EVENT_CQ_ERR, and its polls fail once empty.
void verbs_on_cq_error(rdma::CqHandle cq);
// The Device's SRQ `srq` fell below its armed limit: IBV_EVENT_SRQ_LIMIT_REACHED.
void verbs_on_srq_limit(rdma::SrqHandle srq);

// Blocks until `completed` (an ibv_cq / ibv_qp event counter that the ack
// calls raise under `mutex`) reaches `reported`. Without the runtime's lock.
void wait_acknowledged(pthread_mutex_t& mutex, pthread_cond_t& cond, const std::uint32_t& completed,
                       const std::uint32_t& reported);

// errno value of a Device error.
int errno_of(rdma::VerbsError e);
// The SGEs of a work request in the Device's form, each inside a region of `pd` with the
// access asked (IBV_ACCESS_LOCAL_WRITE for a sink); EINVAL otherwise (verbs_qp.cpp).
int sges_of(const Pd& pd, const ibv_sge* list, int num, bool sink,
            std::array<rdma::Sge, kMaxSge>& out);

// Runs f(Session&) -> int (0 or an errno value) under the runtime's lock; errno
// is set after the lock is released (the runtime's sends would clobber it).
// ENODEV without a runtime. Thread cancellation is held off meanwhile: the
// runtime writes frames (write(2) is a cancellation point) with its lock held,
// and programs such as rping cancel the threads that call into verbs.
template <class F>
int locked(F&& f) {
    Runtime* rt = runtime();
    if (rt == nullptr) return ENODEV;
    int old_state = 0;
    ::pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old_state);
    int err = rt->call([&](Session& s) -> int { return f(s); });
    ::pthread_setcancelstate(old_state, nullptr);
    return err;
}

}  // namespace iwcm::abi::verbs
