// librdmacm's address and connection calls: bind, resolve, listen, connect,
// accept, reject, disconnect, options, and the QPs and endpoints of ids.
//
// Read first: src/abi/rdmacm_state.hpp; librdmacm's cma.c (what each call
// checks before it asks the kernel) and the kernel's cma.c / iwcm.c (the
// states in which each call is allowed for an iWARP device), whose errno
// values these calls return.
#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "abi/rdmacm_state.hpp"

#define IWCM_EXPORT extern "C" __attribute__((visibility("default")))

namespace iwcm::abi::cm {

namespace {

struct DeviceCache {
    std::mutex mutex;
    std::atomic<ibv_context*> verbs{nullptr};
    std::atomic<ibv_pd*> pd{nullptr};
    std::atomic<int> max_ird{0};  // ibv_device_attr::max_qp_rd_atom
    std::atomic<int> max_ord{0};  // ibv_device_attr::max_qp_init_rd_atom
};

DeviceCache& device() {
    static auto* d = new DeviceCache;  // never destroyed (abi.cpp "Process exit")
    return *d;
}

}  // namespace

bool prepare_device() {
    DeviceCache& d = device();
    if (d.pd.load(std::memory_order_acquire) != nullptr) return true;
    std::lock_guard<std::mutex> g(d.mutex);
    if (d.pd.load(std::memory_order_acquire) != nullptr) return true;
    ibv_context* verbs = default_context();
    if (verbs == nullptr) {
        errno = ENODEV;
        return false;
    }
    ibv_device_attr attr{};
    if (ibv_query_device(verbs, &attr) == 0) {
        d.max_ird.store(attr.max_qp_rd_atom);
        d.max_ord.store(attr.max_qp_init_rd_atom);
    }
    ibv_pd* pd = ibv_alloc_pd(verbs);
    if (pd == nullptr) return false;
    d.verbs.store(verbs, std::memory_order_release);
    d.pd.store(pd, std::memory_order_release);
    return true;
}

void set_device(Id& id) {
    DeviceCache& d = device();
    id.pub.verbs = d.verbs.load(std::memory_order_acquire);
    if (id.pub.pd == nullptr) id.pub.pd = d.pd.load(std::memory_order_acquire);
    id.pub.port_num = 1;
}

std::optional<Endpoint> to_endpoint(const sockaddr* sa) {
    if (sa == nullptr) return std::nullopt;
    if (sa->sa_family == AF_INET) {
        sockaddr_in in{};
        std::memcpy(&in, sa, sizeof in);
        Ipv4Addr a{};
        std::memcpy(a.bytes.data(), &in.sin_addr, 4);
        return Endpoint{a, ntohs(in.sin_port)};
    }
    if (sa->sa_family == AF_INET6) {
        sockaddr_in6 in6{};
        std::memcpy(&in6, sa, sizeof in6);
        Ipv6Addr a{};
        std::memcpy(a.bytes.data(), &in6.sin6_addr, 16);
        if (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr)) {
            // ::ffff:a.b.c.d is the IPv4 address (as the kernel's cma takes
            // it). getaddrinfo(3) gives these for IPv4 names when the host has
            // no IPv4 address of its own (AI_ADDRCONFIG with AI_V4MAPPED, its
            // default): the case of a namespace whose addresses are ours.
            Ipv4Addr v4{};
            std::memcpy(v4.bytes.data(), a.bytes.data() + 12, 4);
            return Endpoint{v4, ntohs(in6.sin6_port)};
        }
        return Endpoint{a, ntohs(in6.sin6_port)};
    }
    return std::nullopt;
}

void to_sockaddr(const Endpoint& ep, sockaddr_storage& out) {
    std::memset(&out, 0, sizeof out);
    if (ep.addr.is_v4()) {
        sockaddr_in in{};
        in.sin_family = AF_INET;
        in.sin_port = htons(ep.port);
        std::memcpy(&in.sin_addr, ep.addr.raw().data(), 4);
        std::memcpy(&out, &in, sizeof in);
    } else {
        sockaddr_in6 in6{};
        in6.sin6_family = AF_INET6;
        in6.sin6_port = htons(ep.port);
        std::memcpy(&in6.sin6_addr, ep.addr.raw().data(), 16);
        std::memcpy(&out, &in6, sizeof in6);
    }
}

namespace {

constexpr std::uint16_t kEphemeralFirst = 49152;
constexpr int kListenPortTries = 64;
constexpr int kResolveTimeoutMs = 2000;  // rdma_create_ep's, as librdmacm's

IpAddr unspecified_like(const IpAddr& a) {
    return a.is_v4() ? IpAddr{Ipv4Addr{}} : IpAddr{Ipv6Addr{}};
}

// Another id holds the port (kernel: cma_check_port). Ids made for connect
// requests share their listener's port and hold none.
bool port_taken(const Id& self, std::uint16_t port) {
    for (const auto& [pub, other] : tables().ids) {
        if (other == &self || other->passive || !other->local || other->local->port != port)
            continue;
        if (other->state == IdState::kClosed) continue;
        const bool shared = self.reuseaddr && other->reuseaddr && other->state != IdState::kListen;
        if (!shared) return true;
    }
    return false;
}

// rdma_bind_addr under the lock. Our runtime has one address: a wildcard
// binds to it (of our family, whatever the wildcard's), any other address
// is not ours.
int bind_locked(Session& s, Id& id, Endpoint ep) {
    if (id.state != IdState::kIdle) return EINVAL;
    const bool wildcard = ep.addr.is_unspecified();
    if (wildcard) {
        ep.addr = unspecified_like(s.info().addr);
    } else if (ep.addr != s.info().addr) {
        return EADDRNOTAVAIL;
    }
    if (ep.port != 0 && port_taken(id, ep.port)) return EADDRINUSE;
    id.local = ep;
    id.state = IdState::kBound;
    to_sockaddr(ep, id.pub.route.addr.src_storage);
    // As the kernel: a wildcard binds no device; a local address binds its own.
    if (!wildcard) set_device(id);
    return 0;
}

// 0xFF asks for the device's most (librdmacm); more than the device allows
// is EINVAL (ucma_valid_param).
int device_max(bool ird, Session& s) {
    const int v = ird ? device().max_ird.load() : device().max_ord.load();
    if (v > 0) return std::min(v, 255);
    const auto& c = s.core().config();
    return std::min<int>(ird ? c.mpa.max_ird : c.mpa.max_ord, 255);
}

int check_param(Session& s, const Id& id, const rdma_conn_param* p) {
    if (p == nullptr) return id.pub.qp == nullptr ? EINVAL : 0;
    if (p->responder_resources != RDMA_MAX_RESP_RES && p->responder_resources > device_max(true, s))
        return EINVAL;
    if (p->initiator_depth != RDMA_MAX_INIT_DEPTH && p->initiator_depth > device_max(false, s))
        return EINVAL;
    return 0;
}

int errno_of(ApiError e) {
    switch (e) {
        case ApiError::kStaleHandle: return ECONNRESET;
        case ApiError::kAddressNotLocal: return EADDRNOTAVAIL;
        case ApiError::kAddressInUse: return EADDRINUSE;
        case ApiError::kTooManyConnections:
        case ApiError::kEventQueueFull: return ENOMEM;
        case ApiError::kNoPorts: return EADDRNOTAVAIL;
        case ApiError::kInvalidHandle:
        case ApiError::kWrongState:
        case ApiError::kPrivateDataTooLong:
        case ApiError::kInvalidArgument:
        case ApiError::kFamilyMismatch: return EINVAL;
    }
    return EINVAL;
}

std::span<const std::byte> bytes_of(const void* p, std::size_t n) {
    if (p == nullptr || n == 0) return {};
    return {static_cast<const std::byte*>(p), n};
}

bool event_waits(const Id& id) {
    return id.channel != nullptr && !id.channel->queue.empty();
}

}  // namespace

}  // namespace iwcm::abi::cm

using namespace iwcm;
using namespace iwcm::abi;
using namespace iwcm::abi::cm;

IWCM_EXPORT int rdma_bind_addr(rdma_cm_id* pub, sockaddr* addr) {
    const auto ep = to_endpoint(addr);
    if (!ep) return fail(EINVAL);
    if (!prepare_device()) return -1;
    return locked([&](Session& s) {
        Id* id = find_id(pub);
        return id == nullptr ? EINVAL : bind_locked(s, *id, *ep);
    });
}

IWCM_EXPORT int rdma_resolve_addr(rdma_cm_id* pub, sockaddr* src, sockaddr* dst, int timeout_ms) {
    const auto to = to_endpoint(dst);
    if (!to) return fail(EINVAL);
    std::optional<Endpoint> from;
    if (src != nullptr && !(from = to_endpoint(src))) return fail(EINVAL);
    if (!prepare_device()) return -1;
    Id* id = nullptr;
    const int rc = locked([&](Session& s) {
        id = find_id(pub);
        if (id == nullptr) return EINVAL;
        if (id->state == IdState::kIdle) {
            const Endpoint any{unspecified_like(to->addr), 0};
            if (const int err = bind_locked(s, *id, from.value_or(any)); err != 0) return err;
        }
        if (id->state != IdState::kBound) return EINVAL;
        if (to->addr.family() != s.info().addr.family()) {
            // Bound to our address: cma.c's family check. Else no route to
            // a family we do not have, as the kernel's routing answers.
            return id->pub.verbs != nullptr ? EINVAL : ENETUNREACH;
        }
        // The source is our address (a wildcard bind takes it now).
        id->local->addr = s.info().addr;
        id->remote = *to;
        to_sockaddr(*id->local, id->pub.route.addr.src_storage);
        to_sockaddr(*to, id->pub.route.addr.dst_storage);
        // The kernel resolves its own address through loopback; the runtime
        // carries no connection to its own address (its frames would leave
        // on the interface), so the call says so at once.
        if (to->addr == s.info().addr) return EOPNOTSUPP;
        id->state = IdState::kAddrQuery;
        const auto ms = std::chrono::milliseconds(std::max(timeout_ms, 0));
        if (auto r = s.resolve(to->addr, id->token, ms); !r) {
            // No route (off our subnet and no gateway): the kernel's
            // rdma_resolve_ip fails at once, and the id is bound again.
            id->state = IdState::kBound;
            return ENETUNREACH;
        }
        return 0;
    });
    if (rc != 0) return rc;
    return complete(*id);
}

// iWARP has no path records: the route is the address (the kernel's
// cma_resolve_iw_route reports ROUTE_RESOLVED at once).
IWCM_EXPORT int rdma_resolve_route(rdma_cm_id* pub, int timeout_ms) {
    (void)timeout_ms;
    Id* id = nullptr;
    const int rc = locked([&](Session&) {
        id = find_id(pub);
        if (id == nullptr || id->state != IdState::kAddrResolved) return EINVAL;
        id->state = IdState::kRouteResolved;
        post(*id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
        return 0;
    });
    if (rc != 0) return rc;
    return complete(*id);
}

namespace {

int listen_locked(Session& s, Id& id, int backlog) {
    if (id.state == IdState::kListen) return 0;
    if (id.state == IdState::kIdle) {
        if (const int err = bind_locked(s, id, Endpoint{unspecified_like(s.info().addr), 0}))
            return err;
    }
    if (id.state != IdState::kBound) return EINVAL;
    ListenParams lp;
    lp.local = *id.local;
    // The kernel caps the backlog at net.rdma_ucm.max_backlog and takes
    // the most for a backlog <= 0; the core does the same with its own.
    lp.backlog = backlog > 0 ? static_cast<std::uint32_t>(backlog) : 0;
    lp.tos = id.tos;
    std::uint16_t next = kEphemeralFirst;
    for (int tries = 0;; ++tries) {
        if (id.local->port == 0) {
            // A listener of port 0 takes a free port, as the kernel's
            // cma_alloc_any_port.
            while (port_taken(id, next)) ++next;
            lp.local.port = next++;
        }
        auto r = s.listen(lp);
        if (r) {
            id.listener = *r;
            break;
        }
        if (id.local->port != 0 || tries == kListenPortTries) return EADDRINUSE;
    }
    id.local->port = lp.local.port;
    to_sockaddr(*id.local, id.pub.route.addr.src_storage);
    tables().by_listener.emplace(key(id.listener), &id);
    id.state = IdState::kListen;
    return 0;
}

}  // namespace

IWCM_EXPORT int rdma_listen(rdma_cm_id* pub, int backlog) {
    // The new ids of connect requests carry the device: fetch it now.
    if (!prepare_device()) return -1;
    return locked([&](Session& s) {
        Id* id = find_id(pub);
        return id == nullptr ? EINVAL : listen_locked(s, *id, backlog);
    });
}

IWCM_EXPORT int rdma_connect(rdma_cm_id* pub, rdma_conn_param* param) {
    Id* id = nullptr;
    const int rc = locked([&](Session& s) {
        id = find_id(pub);
        if (id == nullptr) return EINVAL;
        if (const int err = check_param(s, *id, param); err != 0) return err;
        if (id->state != IdState::kRouteResolved) return EINVAL;
        ConnectParams cp;
        cp.local = *id->local;
        cp.remote = id->remote;
        cp.remote_mac = id->remote_mac;
        cp.tos = id->tos;
        const bool dflt_ord = param == nullptr || param->initiator_depth == RDMA_MAX_INIT_DEPTH;
        const bool dflt_ird = param == nullptr || param->responder_resources == RDMA_MAX_RESP_RES;
        cp.ord =
            static_cast<std::uint16_t>(dflt_ord ? device_max(false, s) : param->initiator_depth);
        cp.ird =
            static_cast<std::uint16_t>(dflt_ird ? device_max(true, s) : param->responder_resources);
        // rdma_create_ep's ai_connect goes first, then the call's own.
        std::vector<std::byte> pdata = id->connect_data;
        if (param != nullptr) {
            const auto extra = bytes_of(param->private_data, param->private_data_len);
            pdata.insert(pdata.end(), extra.begin(), extra.end());
        }
        cp.private_data = pdata;
        auto r = s.connect(cp);
        if (!r) return EINVAL;
        id->connect_data.clear();
        id->conn = *r;
        tables().by_conn.emplace(key(id->conn), id);
        id->state = IdState::kConnecting;
        return 0;
    });
    if (rc != 0) return rc;
    return complete(*id);
}

IWCM_EXPORT int rdma_accept(rdma_cm_id* pub, rdma_conn_param* param) {
    Id* id = nullptr;
    const int rc = locked([&](Session& s) {
        id = find_id(pub);
        if (id == nullptr) return EINVAL;
        if (const int err = check_param(s, *id, param); err != 0) return err;
        if (id->state != IdState::kRequest) return id->request_lost ? ECONNRESET : EINVAL;
        // librdmacm answers 0xFF with what the peer asked, within the device.
        AcceptParams ap;
        const bool dflt_ord = param == nullptr || param->initiator_depth == RDMA_MAX_INIT_DEPTH;
        const bool dflt_ird = param == nullptr || param->responder_resources == RDMA_MAX_RESP_RES;
        ap.ord = static_cast<std::uint16_t>(
            dflt_ord ? std::min<int>(id->peer_ird, device_max(false, s)) : param->initiator_depth);
        ap.ird =
            static_cast<std::uint16_t>(dflt_ird ? std::min<int>(id->peer_ord, device_max(true, s))
                                                : param->responder_resources);
        if (param != nullptr)
            ap.private_data = bytes_of(param->private_data, param->private_data_len);
        if (auto r = s.core().accept(s.now(), id->conn, ap); !r) return errno_of(r.error());
        id->state = IdState::kAccepting;
        return 0;
    });
    if (rc != 0) return rc;
    return complete(*id);
}

IWCM_EXPORT int rdma_reject(rdma_cm_id* pub, const void* private_data, std::uint8_t len) {
    return locked([&](Session& s) {
        Id* id = find_id(pub);
        if (id == nullptr) return EINVAL;
        if (id->request_lost) return 0;  // nothing left to refuse
        if (id->state != IdState::kRequest) return EINVAL;
        if (auto r = s.core().reject(s.now(), id->conn, bytes_of(private_data, len)); !r)
            return errno_of(r.error());
        tables().by_conn.erase(key(id->conn));
        id->conn = {};
        id->state = IdState::kClosed;
        return 0;
    });
}

IWCM_EXPORT int rdma_disconnect(rdma_cm_id* pub) {
    Id* id = nullptr;
    bool wait = false;
    const int rc = locked([&](Session& s) {
        id = find_id(pub);
        if (id == nullptr || id->pub.verbs == nullptr) return EINVAL;
        // iw_cm_disconnect: an established connection closes gracefully; one
        // that is closing or closed, or a request not answered, is left as
        // it is (0); anything else is EINVAL.
        switch (id->state) {
            case IdState::kEstablished:
                if (auto r = s.core().disconnect(s.now(), id->conn, DisconnectMode::kGraceful); !r)
                    return errno_of(r.error());
                id->state = IdState::kDisconnecting;
                wait = true;
                return 0;
            case IdState::kConnecting:
            case IdState::kAccepting:
                (void)s.core().disconnect(s.now(), id->conn, DisconnectMode::kAbortive);
                wait = true;
                return 0;
            case IdState::kDisconnecting: wait = true; return 0;
            case IdState::kClosed:
            case IdState::kRequest: wait = event_waits(*id); return 0;
            case IdState::kIdle:
            case IdState::kBound:
            case IdState::kAddrQuery:
            case IdState::kAddrResolved:
            case IdState::kRouteResolved:
            case IdState::kListen: break;
        }
        return EINVAL;
    });
    if (rc != 0) return rc;
    // A synchronous id waits for its DISCONNECTED (librdmacm's ucma_complete),
    // unless none can come.
    return wait ? complete(*id) : 0;
}

IWCM_EXPORT int rdma_establish(rdma_cm_id* pub) {
    // For iWARP the MPA exchange establishes the connection: nothing is sent
    // (an IB connection's RTU). librdmacm refuses an id with a QP.
    return locked([&](Session&) {
        Id* id = find_id(pub);
        return id == nullptr || id->pub.qp != nullptr ? EINVAL : 0;
    });
}

IWCM_EXPORT int rdma_notify(rdma_cm_id* pub, ibv_event_type event) {
    (void)event;  // the kernel's rdma_notify does nothing for iWARP
    return locked([&](Session&) { return find_id(pub) == nullptr ? EINVAL : 0; });
}

// The kernel's iw_cm_init_qp_attr, with cma.c's port: INIT and RTR take the
// state and the access flags (remote read and write once the id connects or
// listens, none before), RTS nothing but the port.
IWCM_EXPORT int rdma_init_qp_attr(rdma_cm_id* pub, ibv_qp_attr* attr, int* mask) {
    if (attr == nullptr || mask == nullptr) return fail(EINVAL);
    return locked([&](Session&) {
        Id* id = find_id(pub);
        if (id == nullptr || id->pub.verbs == nullptr) return EINVAL;
        const bool cm = id->state >= IdState::kListen;
        switch (attr->qp_state) {
            case IBV_QPS_INIT:
            case IBV_QPS_RTR:
                attr->qp_access_flags = cm ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ : 0;
                *mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT;
                break;
            case IBV_QPS_RTS: *mask = IBV_QP_PORT; break;
            case IBV_QPS_RESET:
            case IBV_QPS_SQD:
            case IBV_QPS_SQE:
            case IBV_QPS_ERR:
            case IBV_QPS_UNKNOWN: return EINVAL;
        }
        attr->port_num = id->pub.port_num;
        return 0;
    });
}

// RDMA_OPTION_ID_TOS, _REUSEADDR and _AFONLY apply to iWARP as to any IP
// connection, in the states the kernel allows them. RDMA_OPTION_ID_ACK_TIMEOUT
// is taken and has no effect (the kernel keeps it for IB's CM; iWARP's
// retransmission is TCP's). RDMA_OPTION_IB_PATH is EINVAL (no IB paths on
// iWARP, as the kernel answers); an unknown level or option is ENOSYS.
IWCM_EXPORT int rdma_set_option(rdma_cm_id* pub, int level, int optname, void* optval,
                                std::size_t optlen) {
    if (optval == nullptr) return fail(EINVAL);
    return locked([&](Session&) {
        Id* id = find_id(pub);
        if (id == nullptr) return EINVAL;
        if (level == RDMA_OPTION_IB) return optname == RDMA_OPTION_IB_PATH ? EINVAL : ENOSYS;
        if (level != RDMA_OPTION_ID) return ENOSYS;
        int flag = 0;
        switch (optname) {
            case RDMA_OPTION_ID_TOS:
                if (optlen != sizeof(std::uint8_t)) return EINVAL;
                id->tos = *static_cast<const std::uint8_t*>(optval);
                return 0;
            case RDMA_OPTION_ID_ACK_TIMEOUT: return optlen == sizeof(std::uint8_t) ? 0 : EINVAL;
            case RDMA_OPTION_ID_REUSEADDR:
                if (optlen != sizeof(int)) return EINVAL;
                std::memcpy(&flag, optval, sizeof flag);
                if (id->state != IdState::kIdle && (flag == 0 || id->state == IdState::kListen))
                    return EINVAL;
                id->reuseaddr = flag != 0;
                return 0;
            case RDMA_OPTION_ID_AFONLY:
                if (optlen != sizeof(int)) return EINVAL;
                if (id->state != IdState::kIdle && id->state != IdState::kBound) return EINVAL;
                std::memcpy(&flag, optval, sizeof flag);
                id->afonly = flag != 0;
                return 0;
            default: return ENOSYS;
        }
    });
}
