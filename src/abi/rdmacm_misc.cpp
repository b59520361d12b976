// librdmacm's calls that need no id state: rdma_getaddrinfo / rdma_freeaddrinfo,
// rdma_event_str, the ports of an id, the device list, and the calls that
// have no meaning on iWARP (multicast, SRQs, ECE).
//
// Read first: rdma_getaddrinfo(3) and librdmacm's addrinfo.c (how its hints
// become getaddrinfo(3)'s and its answer an rdma_addrinfo); rdma_join_multicast(3).
#include <netdb.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "abi/rdmacm_state.hpp"

#define IWCM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// rdma_addrinfo's hints as getaddrinfo(3)'s (librdmacm's ucma_convert_to_ai).
addrinfo to_hints(const rdma_addrinfo& rai) {
    addrinfo ai{};
    if ((rai.ai_flags & RAI_PASSIVE) != 0) ai.ai_flags |= AI_PASSIVE;
    if ((rai.ai_flags & RAI_NUMERICHOST) != 0) ai.ai_flags |= AI_NUMERICHOST;
    ai.ai_family = rai.ai_family;
    if (rai.ai_qp_type == IBV_QPT_RC || rai.ai_qp_type == IBV_QPT_UC) ai.ai_socktype = SOCK_STREAM;
    if (rai.ai_qp_type == IBV_QPT_UD) ai.ai_socktype = SOCK_DGRAM;
    if (rai.ai_port_space == RDMA_PS_TCP) ai.ai_protocol = IPPROTO_TCP;
    if (rai.ai_port_space == RDMA_PS_UDP || rai.ai_port_space == RDMA_PS_IPOIB)
        ai.ai_protocol = IPPROTO_UDP;
    return ai;
}

bool copy_addr(sockaddr*& to, socklen_t& to_len, const sockaddr* from, socklen_t len) {
    to = static_cast<sockaddr*>(std::malloc(len));
    if (to == nullptr) return false;
    std::memcpy(to, from, len);
    to_len = len;
    return true;
}

// The first answer of getaddrinfo(3) as the source (passive) or the
// destination of an rdma_addrinfo (librdmacm's ucma_convert_to_rai).
int fill(rdma_addrinfo& rai, const rdma_addrinfo& hints, const addrinfo& ai) {
    if (hints.ai_qp_type != 0) {
        rai.ai_qp_type = hints.ai_qp_type;
    } else if (ai.ai_socktype == SOCK_STREAM) {
        rai.ai_qp_type = IBV_QPT_RC;
    } else if (ai.ai_socktype == SOCK_DGRAM) {
        rai.ai_qp_type = IBV_QPT_UD;
    }
    if (hints.ai_port_space != 0) {
        rai.ai_port_space = hints.ai_port_space;
    } else if (ai.ai_protocol == IPPROTO_TCP) {
        rai.ai_port_space = RDMA_PS_TCP;
    } else if (ai.ai_protocol == IPPROTO_UDP) {
        rai.ai_port_space = RDMA_PS_UDP;
    }
    rai.ai_family = ai.ai_family;
    char* canon = ai.ai_canonname != nullptr ? strdup(ai.ai_canonname) : nullptr;
    if ((ai.ai_flags & AI_PASSIVE) != 0) {
        rai.ai_flags = RAI_PASSIVE;
        rai.ai_src_canonname = canon;
        return copy_addr(rai.ai_src_addr, rai.ai_src_len, ai.ai_addr, ai.ai_addrlen) ? 0 : ENOMEM;
    }
    rai.ai_dst_canonname = canon;
    return copy_addr(rai.ai_dst_addr, rai.ai_dst_len, ai.ai_addr, ai.ai_addrlen) ? 0 : ENOMEM;
}

}  // namespace

// As librdmacm: the first address getaddrinfo(3) finds (numeric or a name
// of /etc/hosts or DNS; a service name or number for the port), as the
// source with RAI_PASSIVE, else as the destination with the hints' source.
// A failure of getaddrinfo(3) is -1 with errno set to its EAI_* code (what
// librdmacm returns); the runtime is not needed.
IWCM_EXPORT int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                                 rdma_addrinfo** res) {
    if (res == nullptr || (node == nullptr && service == nullptr && hints == nullptr)) {
        errno = EINVAL;
        return -1;
    }
    static const rdma_addrinfo kNoHints{};
    const rdma_addrinfo& h = hints != nullptr ? *hints : kNoHints;
    auto* rai = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
    if (rai == nullptr) {
        errno = ENOMEM;
        return -1;
    }
    int err = 0;
    if (node != nullptr || service != nullptr) {
        const addrinfo ai_hints = to_hints(h);
        addrinfo* ai = nullptr;
        err = getaddrinfo(node, service, hints != nullptr ? &ai_hints : nullptr, &ai);
        if (err == 0) {
            err = fill(*rai, h, *ai);
            freeaddrinfo(ai);
        }
    } else {
        rai->ai_flags = h.ai_flags;
        rai->ai_family = h.ai_family;
        rai->ai_qp_type = h.ai_qp_type;
        rai->ai_port_space = h.ai_port_space;
        if (h.ai_dst_len != 0 &&
            !copy_addr(rai->ai_dst_addr, rai->ai_dst_len, h.ai_dst_addr, h.ai_dst_len))
            err = ENOMEM;
    }
    if (err == 0 && rai->ai_src_len == 0 && h.ai_src_len != 0 &&
        !copy_addr(rai->ai_src_addr, rai->ai_src_len, h.ai_src_addr, h.ai_src_len))
        err = ENOMEM;
    if (err != 0) {
        rdma_freeaddrinfo(rai);
        errno = err;
        return -1;
    }
    *res = rai;
    return 0;
}

IWCM_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
    while (res != nullptr) {
        rdma_addrinfo* next = res->ai_next;
        std::free(res->ai_connect);
        std::free(res->ai_route);
        std::free(res->ai_src_canonname);
        std::free(res->ai_dst_canonname);
        std::free(res->ai_src_addr);
        std::free(res->ai_dst_addr);
        std::free(res);
        res = next;
    }
}

IWCM_EXPORT const char* rdma_event_str(rdma_cm_event_type event) {
    switch (event) {
        case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
        case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
        case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
        case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
        case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
        case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
        case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
        case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
        case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
        case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
        case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
        case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
        case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
        case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
        case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
        case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
    }
    return "UNKNOWN EVENT";
}

namespace {

__be16 port_of(const sockaddr& sa) {
    if (sa.sa_family == AF_INET) return reinterpret_cast<const sockaddr_in&>(sa).sin_port;
    if (sa.sa_family == AF_INET6) return reinterpret_cast<const sockaddr_in6&>(sa).sin6_port;
    return 0;
}

}  // namespace

IWCM_EXPORT __be16 rdma_get_src_port(rdma_cm_id* id) {
    return port_of(id->route.addr.src_addr);
}

IWCM_EXPORT __be16 rdma_get_dst_port(rdma_cm_id* id) {
    return port_of(id->route.addr.dst_addr);
}

// The runtime's one device (NULL-terminated), or NULL with errno set.
IWCM_EXPORT ibv_context** rdma_get_devices(int* num_devices) {
    if (num_devices != nullptr) *num_devices = 0;
    if (!iwcm::abi::cm::prepare_device()) return nullptr;
    auto** list = static_cast<ibv_context**>(std::calloc(2, sizeof(ibv_context*)));
    if (list == nullptr) return nullptr;
    list[0] = iwcm::abi::default_context();
    if (num_devices != nullptr) *num_devices = 1;
    return list;
}

IWCM_EXPORT void rdma_free_devices(ibv_context** list) {
    std::free(list);
}

// Multicast is for unreliable datagram port spaces, which iWARP has not
// (the kernel answers ENOSYS on a device without multicast); SRQs are not
// offered by the verbs half; ECE is an IB CM extension (EOPNOTSUPP, as
// librdmacm answers on a kernel without it).
IWCM_EXPORT int rdma_join_multicast(rdma_cm_id*, sockaddr*, void*) {
    errno = ENOSYS;
    return -1;
}
IWCM_EXPORT int rdma_join_multicast_ex(rdma_cm_id*, rdma_cm_join_mc_attr_ex*, void*) {
    errno = ENOSYS;
    return -1;
}
IWCM_EXPORT int rdma_leave_multicast(rdma_cm_id*, sockaddr*) {
    errno = ENOSYS;
    return -1;
}
IWCM_EXPORT int rdma_create_srq(rdma_cm_id*, ibv_pd*, ibv_srq_init_attr*) {
    errno = ENOSYS;
    return -1;
}
IWCM_EXPORT int rdma_create_srq_ex(rdma_cm_id*, ibv_srq_init_attr_ex*) {
    errno = ENOSYS;
    return -1;
}
IWCM_EXPORT void rdma_destroy_srq(rdma_cm_id*) {}
IWCM_EXPORT int rdma_set_local_ece(rdma_cm_id*, ibv_ece*) {
    errno = EOPNOTSUPP;
    return -1;
}
IWCM_EXPORT int rdma_get_remote_ece(rdma_cm_id*, ibv_ece*) {
    errno = EOPNOTSUPP;
    return -1;
}
IWCM_EXPORT int rdma_reject_ece(rdma_cm_id* id, const void* private_data, std::uint8_t len) {
    return rdma_reject(id, private_data, len);
}
