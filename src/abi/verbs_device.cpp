// libibverbs: the device, its contexts, queries, protection domains and
// memory regions.
//
// Read first: verbs_objects.hpp, src/abi/abi.hpp, and the libibverbs man
// pages of each call (ibv_get_device_list(3), ibv_open_device(3),
// ibv_query_device(3), ibv_query_port(3), ibv_query_gid(3), ibv_alloc_pd(3),
// ibv_reg_mr(3)). What an iWARP device reports follows Linux siw
// (drivers/infiniband/sw/siw/siw_verbs.c): the GID is the interface's MAC in
// the first six bytes, the port is ACTIVE on an Ethernet link layer with the
// interface's MTU.
//
// The device is one, named iwcm0, for the runtime's interface. Contexts are
// non-extended (abi_compat is not __VERBS_ABI_IS_EXTENDED): the inline helpers
// of <infiniband/verbs.h> then fall back to the plain calls where they can
// (ibv_query_port, ibv_query_device_ex without a comp_mask, ibv_create_qp_ex
// with only a PD) and fail with EOPNOTSUPP where they cannot.
#include <net/if.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <span>

#include "abi/verbs_objects.hpp"
#include "iwcm/assert.hpp"

// The header's macros route these names through inline helpers; the library
// defines the functions themselves.
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

namespace iwcm::abi::verbs {

// Ops of the context table, defined in verbs_cq.cpp and verbs_qp.cpp.
int op_poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int op_req_notify_cq(ibv_cq* cq, int solicited_only);
int op_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int op_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

namespace {

constexpr const char* kDeviceName = "iwcm0";

// ibv_alloc_mw(3): type 2 windows only, as the Device binds them through a QP's send
// queue (IBV_WR_BIND_MW, type 2B: the window serves that QP's peer). Type 1 windows
// (bound with ibv_bind_mw) are EOPNOTSUPP. The window's rkey has a random index; its
// key byte is the binder's (ibv_inc_rkey).
ibv_mw* op_alloc_mw(ibv_pd* pd, ibv_mw_type type_arg) {
    // A C caller may pass any number: read as one, never as the enum.
    unsigned type = 0;
    static_assert(sizeof type == sizeof type_arg);
    std::memcpy(&type, &type_arg, sizeof type);
    ibv_mw* out = nullptr;
    int err = locked([&](Session& s) {
        Registry& r = registry();
        Pd* p = r.pds.find(pd);
        if (p == nullptr) return EINVAL;
        if (type != IBV_MW_TYPE_2) return type == IBV_MW_TYPE_1 ? EOPNOTSUPP : EINVAL;
        auto w = s.device().alloc_mw(pd->handle);
        if (!w) return ENOMEM;
        auto mw = std::make_unique<Mw>();
        mw->pd = p;
        mw->handle = w->handle;
        mw->api.context = pd->context;
        mw->api.pd = pd;
        mw->api.rkey = w->rkey;
        mw->api.handle = w->handle.index;
        mw->api.type = IBV_MW_TYPE_2;
        Mw* raw = r.mws.add(std::move(mw));
        ++p->users;
        out = &raw->api;
        return 0;
    });
    if (err != 0) errno = err;
    return out;
}
// ibv_bind_mw(3) binds type 1 windows, which ibv_alloc_mw never makes here (the header's
// inline ibv_bind_mw refuses type 2 before it calls this).
int op_bind_mw(ibv_qp*, ibv_mw*, ibv_mw_bind*) {
    return EINVAL;
}
// A bound window is unbound first (its STag names nothing after this).
int op_dealloc_mw(ibv_mw* mw) {
    return locked([&](Session& s) {
        Registry& r = registry();
        Mw* w = r.mws.find(mw);
        if (w == nullptr) return EINVAL;
        auto done = s.device().dealloc_mw(w->handle);
        IWCM_ASSERT(done.has_value());
        --w->pd->users;
        r.mws.retire(w);
        return 0;
    });
}
// ibv_post_srq_recv: each receive's SGEs inside regions of the SRQ's PD, in order; the
// first refused one is *bad_wr.
int op_post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    ibv_recv_wr* bad = wr;
    int err = locked([&](Session& s) {
        Srq* q = registry().srqs.find(srq);
        if (q == nullptr) return EINVAL;
        for (ibv_recv_wr* w = wr; w != nullptr; w = w->next) {
            bad = w;
            if (w->num_sge < 0 || static_cast<std::uint32_t>(w->num_sge) > q->max_sge)
                return EINVAL;
            std::array<rdma::Sge, kMaxSge> sge{};
            if (int e = sges_of(*q->pd, w->sg_list, w->num_sge, true, sge); e != 0) return e;
            auto done = s.device().post_srq_recv(
                s.now(), q->handle,
                {w->wr_id, std::span(sge.data(), static_cast<std::size_t>(w->num_sge))});
            if (!done)
                return done.error() == rdma::VerbsError::kQueueFull ? ENOMEM
                                                                    : errno_of(done.error());
        }
        return 0;
    });
    if (err != 0 && bad_wr != nullptr) *bad_wr = bad;
    return err;
}

// The context's Device-independent part. No runtime lock needed: the
// context's queues are empty and it is in no table yet.
std::unique_ptr<Context> make_context(bool shared) {
    int fd = ::eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    if (fd < 0) return nullptr;
    auto c = std::make_unique<Context>();
    c->shared = shared;
    ibv_context& a = c->api;
    a.device = the_device();
    a.ops.poll_cq = op_poll_cq;
    a.ops.req_notify_cq = op_req_notify_cq;
    a.ops.post_send = op_post_send;
    a.ops.post_recv = op_post_recv;
    a.ops.alloc_mw = op_alloc_mw;
    a.ops.bind_mw = op_bind_mw;
    a.ops.dealloc_mw = op_dealloc_mw;
    a.ops.post_srq_recv = op_post_srq_recv;
    a.cmd_fd = -1;  // no kernel command channel
    a.async_fd = fd;
    a.num_comp_vectors = 1;
    ::pthread_mutex_init(&a.mutex, nullptr);
    a.abi_compat = nullptr;  // not a verbs_context (see the file comment)
    return c;
}

// The shared context; read by threads that never called default_context().
std::atomic<Context*> g_default{nullptr};
std::once_flag g_default_once;

// The node GUID: the interface's MAC as a modified EUI-64, as an Ethernet
// RDMA device derives it.
__be64 guid_of(const MacAddr& mac) {
    std::array<std::uint8_t, 8> b{static_cast<std::uint8_t>(mac.bytes[0] ^ 0x02),
                                  mac.bytes[1],
                                  mac.bytes[2],
                                  0xff,
                                  0xfe,
                                  mac.bytes[3],
                                  mac.bytes[4],
                                  mac.bytes[5]};
    __be64 v;
    std::memcpy(&v, b.data(), sizeof v);
    return v;
}

ibv_mtu mtu_enum(std::uint32_t mtu) {
    if (mtu >= 4096) return IBV_MTU_4096;
    if (mtu >= 2048) return IBV_MTU_2048;
    if (mtu >= 1024) return IBV_MTU_1024;
    if (mtu >= 512) return IBV_MTU_512;
    return IBV_MTU_256;
}

}  // namespace

// Never destroyed: the progress thread may deliver a completion while the
// process exits (src/abi/abi.cpp "Process exit").
Registry& registry() {
    static auto* r = new Registry;
    return *r;
}

ibv_device* the_device() {
    static ibv_device dev = [] {
        ibv_device d{};
        d.node_type = IBV_NODE_RNIC;
        d.transport_type = IBV_TRANSPORT_IWARP;
        std::snprintf(d.name, sizeof d.name, "%s", kDeviceName);
        std::snprintf(d.dev_name, sizeof d.dev_name, "%s", kDeviceName);
        return d;
    }();
    return &dev;
}

Context* find_context(const ibv_context* ctx) {
    if (ctx == nullptr) return nullptr;
    Context* shared = g_default.load(std::memory_order_acquire);
    if (shared != nullptr && ctx == &shared->api) return shared;
    return registry().contexts.find(ctx);
}

int errno_of(rdma::VerbsError e) {
    switch (e) {
        case rdma::VerbsError::kStaleHandle:
        case rdma::VerbsError::kInvalidHandle:
        case rdma::VerbsError::kInvalidArgument:
        case rdma::VerbsError::kTooManySge:
        case rdma::VerbsError::kLocalProtection: return EINVAL;
        case rdma::VerbsError::kWrongState: return ENOTCONN;
        case rdma::VerbsError::kQueueFull: return ENOMEM;
        case rdma::VerbsError::kCoreError: return EIO;
    }
    return EINVAL;
}

int sges_of(const Pd& pd, const ibv_sge* list, int num, bool sink,
            std::array<rdma::Sge, kMaxSge>& out) {
    const auto& by_lkey = registry().mr_by_lkey;
    for (int i = 0; i < num; ++i) {
        const ibv_sge& g = list[i];
        auto it = by_lkey.find(g.lkey);
        if (it == by_lkey.end() || it->second->pd != &pd) return EINVAL;
        const ibv_mr& mr = it->second->api;
        const auto base = reinterpret_cast<std::uintptr_t>(mr.addr);
        if (g.addr < base || g.addr - base > mr.length || g.length > mr.length - (g.addr - base)) {
            return EINVAL;
        }
        if (sink && (it->second->access & IBV_ACCESS_LOCAL_WRITE) == 0) return EINVAL;
        out[static_cast<std::size_t>(i)] = {g.addr, g.length, g.lkey};
    }
    return 0;
}

ibv_context* default_context() {
    if (runtime() == nullptr) return nullptr;
    std::call_once(g_default_once, [] {
        g_default.store(make_context(true).release(), std::memory_order_release);
    });
    Context* shared = g_default.load(std::memory_order_acquire);
    return shared == nullptr ? nullptr : &shared->api;
}

}  // namespace iwcm::abi::verbs

namespace iwcm::abi {
ibv_context* default_context() {
    return verbs::default_context();
}
}  // namespace iwcm::abi

using namespace iwcm;
using namespace iwcm::abi::verbs;

// ---------------------------------------------------------------- the device

IWCM_VERBS_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
    // As libibverbs: a list (possibly empty), NULL only when it cannot be made.
    const bool present = abi::runtime() != nullptr;
    auto** list = static_cast<ibv_device**>(std::calloc(2, sizeof(ibv_device*)));
    if (list == nullptr) {
        errno = ENOMEM;
        return nullptr;
    }
    if (present) list[0] = the_device();
    if (num_devices != nullptr) *num_devices = present ? 1 : 0;
    if (!present) errno = ENODEV;
    return list;
}

IWCM_VERBS_EXPORT void ibv_free_device_list(ibv_device** list) {
    std::free(list);
}

IWCM_VERBS_EXPORT const char* ibv_get_device_name(ibv_device* device) {
    if (device != the_device()) {
        errno = EINVAL;
        return nullptr;
    }
    return device->name;
}

IWCM_VERBS_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
    Runtime* rt = abi::runtime();
    if (device != the_device() || rt == nullptr) {
        errno = EINVAL;
        return 0;
    }
    return guid_of(rt->info().mac);
}

IWCM_VERBS_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
    if (device != the_device()) {
        errno = EINVAL;
        return nullptr;
    }
    auto c = make_context(false);
    if (c == nullptr) return nullptr;  // errno from eventfd
    Context* raw = c.get();
    int err = locked([&](Session&) {
        registry().contexts.add(std::move(c));
        return 0;
    });
    if (err != 0) {
        ::close(raw->api.async_fd);
        errno = err;
        return nullptr;
    }
    return &raw->api;
}

// libibverbs frees whatever the context still holds (the kernel does); this
// library refuses with EBUSY instead, so that no object outlives the context
// it points to. The shared context of rdma_cm ids is never closed.
IWCM_VERBS_EXPORT int ibv_close_device(ibv_context* context) {
    int err = locked([&](Session&) {
        Context* shared = g_default.load(std::memory_order_acquire);
        if (shared != nullptr && context == &shared->api) return EBUSY;
        Registry& r = registry();
        Context* c = r.contexts.find(context);
        if (c == nullptr) return EINVAL;
        if (c->objects > 0) return EBUSY;
        ::close(c->api.async_fd);
        c->api.async_fd = -1;
        r.contexts.retire(c);
        return 0;
    });
    if (err != 0) {
        errno = err;
        return -1;
    }
    return 0;
}

// ---------------------------------------------------------------- queries

IWCM_VERBS_EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
    Runtime* rt = abi::runtime();
    int err = locked([&](Session&) { return find_context(context) == nullptr ? EINVAL : 0; });
    if (err != 0 || attr == nullptr) return err != 0 ? err : EINVAL;
    *attr = ibv_device_attr{};
    std::snprintf(attr->fw_ver, sizeof attr->fw_ver, "iwarp-cm");
    attr->node_guid = attr->sys_image_guid = guid_of(rt->info().mac);
    attr->max_mr_size = UINT64_MAX;
    attr->page_size_cap = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    attr->max_qp = kMaxQp;
    attr->max_qp_wr = kMaxQpWr;
    attr->max_sge = kMaxSge;
    attr->max_sge_rd = kMaxSgeRead;
    attr->max_cq = kMaxCq;
    attr->max_cqe = kMaxCqe;
    attr->max_mr = kMaxMr;
    attr->max_mw = kMaxMr;  // windows and regions share the Device's STag table
    attr->device_cap_flags = IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    attr->max_pd = kMaxPd;
    attr->max_qp_rd_atom = kMaxReadDepth;
    attr->max_qp_init_rd_atom = kMaxReadDepth;
    attr->max_res_rd_atom = static_cast<int>(kMaxQp * kMaxReadDepth);
    attr->atomic_cap = IBV_ATOMIC_NONE;
    attr->max_srq = kMaxSrq;
    attr->max_srq_wr = kMaxQpWr;
    attr->max_srq_sge = kMaxSge;
    attr->max_pkeys = 1;
    attr->phys_port_cnt = 1;
    return 0;
}

// The header's inline ___ibv_query_port zeroes a whole ibv_port_attr and
// passes it here for a non-extended context; the fields written are those of
// libibverbs' compat struct (up to `flags`).
IWCM_VERBS_EXPORT int ibv_query_port(ibv_context* context, std::uint8_t port_num,
                                     _compat_ibv_port_attr* compat) {
    Runtime* rt = abi::runtime();
    int err = locked([&](Session&) { return find_context(context) == nullptr ? EINVAL : 0; });
    if (err != 0) return err;
    if (port_num != 1 || compat == nullptr) return EINVAL;
    ibv_port_attr a{};
    a.state = IBV_PORT_ACTIVE;
    a.max_mtu = a.active_mtu = mtu_enum(rt->info().mtu);
    a.gid_tbl_len = 1;
    a.port_cap_flags = IBV_PORT_CM_SUP;
    a.max_msg_sz = kMaxMessage;
    a.pkey_tbl_len = 1;
    a.max_vl_num = 1;
    a.active_width = 1;  // 1X
    a.active_speed = 1;  // SDR: a software device has no line rate to report
    a.phys_state = 5;    // LinkUp
    a.link_layer = IBV_LINK_LAYER_ETHERNET;
    std::memcpy(static_cast<void*>(compat), &a, offsetof(ibv_port_attr, port_cap_flags2));
    return 0;
}

IWCM_VERBS_EXPORT int ibv_query_gid(ibv_context* context, std::uint8_t port_num, int index,
                                    ibv_gid* gid) {
    Runtime* rt = abi::runtime();
    int err = locked([&](Session&) { return find_context(context) == nullptr ? EINVAL : 0; });
    if (err == 0 && (port_num != 1 || index != 0 || gid == nullptr)) err = EINVAL;
    if (err != 0) {
        errno = err;
        return -1;
    }
    *gid = ibv_gid{};
    std::memcpy(gid->raw, rt->info().mac.bytes.data(), 6);
    return 0;
}

IWCM_VERBS_EXPORT int _ibv_query_gid_ex(ibv_context* context, std::uint32_t port_num,
                                        std::uint32_t gid_index, ibv_gid_entry* entry,
                                        std::uint32_t flags, std::size_t entry_size) {
    Runtime* rt = abi::runtime();
    int err = locked([&](Session&) { return find_context(context) == nullptr ? EINVAL : 0; });
    if (err != 0) return err;
    if (flags != 0 || entry == nullptr || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
    if (port_num != 1 || gid_index != 0) return ENODATA;
    *entry = ibv_gid_entry{};
    std::memcpy(entry->gid.raw, rt->info().mac.bytes.data(), 6);
    entry->gid_index = 0;
    entry->port_num = 1;
    entry->gid_type = IBV_GID_TYPE_IB;
    entry->ndev_ifindex = ::if_nametoindex(rt->info().device.c_str());
    return 0;
}

IWCM_VERBS_EXPORT int ibv_query_pkey(ibv_context* context, std::uint8_t port_num, int index,
                                     __be16* pkey) {
    int err = locked([&](Session&) { return find_context(context) == nullptr ? EINVAL : 0; });
    if (err == 0 && (port_num != 1 || index != 0 || pkey == nullptr)) err = EINVAL;
    if (err != 0) {
        errno = err;
        return -1;
    }
    *pkey = 0xffff;  // the default P_Key, as siw reports it
    return 0;
}

// ---------------------------------------------------------------- protection domains

IWCM_VERBS_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
    ibv_pd* out = nullptr;
    int err = locked([&](Session&) {
        Context* c = find_context(context);
        if (c == nullptr) return EINVAL;
        Registry& r = registry();
        if (r.pds.size() >= kMaxPd) return ENOMEM;
        auto pd = std::make_unique<Pd>();
        static std::uint32_t next_handle = 1;
        pd->ctx = c;
        pd->api.context = &c->api;
        pd->api.handle = next_handle++;
        out = &r.pds.add(std::move(pd))->api;
        ++c->objects;
        return 0;
    });
    if (err != 0) errno = err;
    return out;
}

IWCM_VERBS_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
    return locked([&](Session&) {
        Pd* p = registry().pds.find(pd);
        if (p == nullptr) return EINVAL;
        if (p->users > 0) return EBUSY;
        --p->ctx->objects;
        registry().pds.retire(p);
        return 0;
    });
}

// ---------------------------------------------------------------- memory regions

namespace {

constexpr unsigned kAccessKnown = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                  IBV_ACCESS_MW_BIND | IBV_ACCESS_HUGETLB;

// The Device's access bits of an ibv access set; EINVAL for one it cannot
// honour. REMOTE_ATOMIC is accepted and has no effect (the device has no
// atomics); MW_BIND lets windows be bound to the region; the optional range
// (IBV_ACCESS_OPTIONAL_RANGE, e.g. RELAXED_ORDERING) is ignored, as
// libibverbs masks it where the kernel lacks it.
int device_access(unsigned access, std::uint32_t& out) {
    access &= ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
    if ((access & ~kAccessKnown) != 0) return EINVAL;  // ZERO_BASED, ON_DEMAND, ...
    // As the kernel's ib_check_mr_access: remote writes need local write.
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 &&
        (access & IBV_ACCESS_LOCAL_WRITE) == 0) {
        return EINVAL;
    }
    out = 0;
    if ((access & IBV_ACCESS_LOCAL_WRITE) != 0) out |= rdma::kAccessLocalWrite;
    if ((access & IBV_ACCESS_REMOTE_WRITE) != 0) out |= rdma::kAccessRemoteWrite;
    if ((access & IBV_ACCESS_REMOTE_READ) != 0) out |= rdma::kAccessRemoteRead;
    if ((access & IBV_ACCESS_MW_BIND) != 0) out |= rdma::kAccessMwBind;
    return 0;
}

// The Device's tagged offsets are the memory's addresses (verbs.hpp
// MemoryRegion): an iova other than addr is refused.
ibv_mr* register_mr(ibv_pd* pd, void* addr, std::size_t length, std::uint64_t iova,
                    unsigned access) {
    ibv_mr* out = nullptr;
    int err = locked([&](Session& s) {
        Registry& r = registry();
        Pd* p = r.pds.find(pd);
        if (p == nullptr) return EINVAL;
        if (addr == nullptr || length == 0 || iova != reinterpret_cast<std::uintptr_t>(addr)) {
            return EINVAL;
        }
        std::uint32_t dev_access = 0;
        if (int e = device_access(access, dev_access); e != 0) return e;
        // The Device's protection domain is the PD's handle (unique in the process).
        auto reg =
            s.device().reg_mr({static_cast<std::byte*>(addr), length}, dev_access, pd->handle);
        if (!reg) return reg.error() == rdma::VerbsError::kQueueFull ? ENOMEM : EINVAL;
        auto mr = std::make_unique<Mr>();
        static std::uint32_t next_handle = 1;
        mr->pd = p;
        mr->handle = reg->handle;
        mr->access = access;
        mr->api.context = pd->context;
        mr->api.pd = pd;
        mr->api.addr = addr;
        mr->api.length = length;
        mr->api.handle = next_handle++;
        mr->api.lkey = reg->lkey;
        mr->api.rkey = reg->rkey;
        Mr* raw = r.mrs.add(std::move(mr));
        r.mr_by_lkey[raw->api.lkey] = raw;
        ++p->users;
        out = &raw->api;
        return 0;
    });
    if (err != 0) errno = err;
    return out;
}

}  // namespace

IWCM_VERBS_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, std::size_t length, int access) {
    return register_mr(pd, addr, length, reinterpret_cast<std::uintptr_t>(addr),
                       static_cast<unsigned>(access));
}

IWCM_VERBS_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, std::size_t length,
                                          std::uint64_t iova, int access) {
    return register_mr(pd, addr, length, iova, static_cast<unsigned>(access));
}

IWCM_VERBS_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, std::size_t length,
                                           std::uint64_t iova, unsigned int access) {
    return register_mr(pd, addr, length, iova, access);
}

IWCM_VERBS_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
    return locked([&](Session& s) {
        Registry& r = registry();
        Mr* m = r.mrs.find(mr);
        if (m == nullptr) return EINVAL;
        auto done = s.device().dereg_mr(m->handle);
        // ibv_dereg_mr(3): EBUSY while memory windows are bound to it.
        if (!done) return done.error() == rdma::VerbsError::kWrongState ? EBUSY : EINVAL;
        r.mr_by_lkey.erase(m->api.lkey);
        --m->pd->users;
        r.mrs.retire(m);
        return 0;
    });
}

// ---------------------------------------------------------------- what iWARP lacks
// As libibverbs answers for a provider without the operation (EOPNOTSUPP).

IWCM_VERBS_EXPORT ibv_ah* ibv_create_ah(ibv_pd*, ibv_ah_attr*) {
    errno = EOPNOTSUPP;
    return nullptr;
}

IWCM_VERBS_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd*, ibv_wc*, ibv_grh*, std::uint8_t) {
    errno = EOPNOTSUPP;
    return nullptr;
}

IWCM_VERBS_EXPORT int ibv_destroy_ah(ibv_ah*) {
    return EOPNOTSUPP;
}

IWCM_VERBS_EXPORT int ibv_attach_mcast(ibv_qp*, const ibv_gid*, std::uint16_t) {
    return EOPNOTSUPP;
}

IWCM_VERBS_EXPORT int ibv_detach_mcast(ibv_qp*, const ibv_gid*, std::uint16_t) {
    return EOPNOTSUPP;
}

// ---------------------------------------------------------------- shared receive queues

IWCM_VERBS_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* init) {
    ibv_srq* out = nullptr;
    int err = locked([&](Session& s) {
        Registry& r = registry();
        Pd* p = r.pds.find(pd);
        if (p == nullptr || init == nullptr) return EINVAL;
        if (r.srqs.size() >= kMaxSrq) return ENOMEM;
        ibv_srq_attr& want = init->attr;
        if (want.max_wr < 1 || want.max_wr > kMaxQpWr || want.max_sge < 1 ||
            want.max_sge > kMaxSge || want.srq_limit > want.max_wr) {
            return EINVAL;
        }
        auto h = s.device().create_srq({want.max_wr, want.max_sge, pd->handle});
        if (!h) return errno_of(h.error());
        if (want.srq_limit > 0) (void)s.device().arm_srq_limit(*h, want.srq_limit);
        auto q = std::make_unique<Srq>();
        static std::uint32_t next_handle = 1;
        q->ctx = p->ctx;
        q->pd = p;
        q->handle = *h;
        q->max_wr = want.max_wr;
        q->max_sge = want.max_sge;
        ibv_srq& a = q->api;
        a.context = pd->context;
        a.srq_context = init->srq_context;
        a.pd = pd;
        a.handle = next_handle++;
        ::pthread_mutex_init(&a.mutex, nullptr);
        ::pthread_cond_init(&a.cond, nullptr);
        Srq* raw = r.srqs.add(std::move(q));
        r.srq_by_handle[key_of(*h)] = raw;
        ++p->users;
        out = &raw->api;
        return 0;
    });
    if (err != 0) errno = err;
    return out;
}

// IBV_SRQ_LIMIT arms the limit event; a resize (IBV_SRQ_MAX_WR) is refused.
IWCM_VERBS_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
    return locked([&](Session& s) {
        Srq* q = registry().srqs.find(srq);
        if (q == nullptr || attr == nullptr) return EINVAL;
        if ((mask & ~IBV_SRQ_LIMIT) != 0) return EINVAL;
        if ((mask & IBV_SRQ_LIMIT) == 0) return 0;
        if (attr->srq_limit > q->max_wr) return EINVAL;
        auto done = s.device().arm_srq_limit(q->handle, attr->srq_limit);
        return done ? 0 : errno_of(done.error());
    });
}

IWCM_VERBS_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
    return locked([&](Session& s) {
        Srq* q = registry().srqs.find(srq);
        if (q == nullptr || attr == nullptr) return EINVAL;
        auto info = s.device().query_srq(q->handle);
        if (!info) return errno_of(info.error());
        *attr = ibv_srq_attr{info->max_wr, info->max_sge, info->limit};
        return 0;
    });
}

IWCM_VERBS_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
    Srq* waiting = nullptr;
    int err = locked([&](Session&) {
        waiting = registry().srqs.find(srq);
        if (waiting == nullptr) return EINVAL;
        if (waiting->users > 0) return EBUSY;
        std::erase_if(waiting->ctx->async_events, [srq](const ibv_async_event& e) {
            return e.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && e.element.srq == srq;
        });
        return 0;
    });
    if (err != 0) return err;
    wait_acknowledged(srq->mutex, srq->cond, srq->events_completed, waiting->events_reported);
    return locked([&](Session& s) {
        Registry& r = registry();
        Srq* q = r.srqs.find(srq);
        if (q == nullptr) return EINVAL;
        if (q->users > 0) return EBUSY;
        auto done = s.device().destroy_srq(q->handle);
        IWCM_ASSERT(done.has_value());
        r.srq_by_handle.erase(key_of(q->handle));
        --q->pd->users;
        r.srqs.retire(q);
        return 0;
    });
}

IWCM_VERBS_EXPORT int ibv_resize_cq(ibv_cq*, int) {
    return EOPNOTSUPP;
}

// QPs of this library are never extended ones (libibverbs returns NULL for
// a QP not made by ibv_create_qp_ex with send_ops_flags).
IWCM_VERBS_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp*) {
    errno = EOPNOTSUPP;
    return nullptr;
}
