// The librdmacm half's objects: event channels, ids and events, and the
// tables that find them (src/abi/rdmacm*.cpp).
//
// Read first: src/abi/abi.hpp (locking), librdmacm's rdma_cm(7) and
// rdma_get_cm_event(3) (what an id and an event are to the application).
//
// Every object here is read and changed under the runtime's lock, except the
// counts of events reported and acknowledged (AckCounts), which
// rdma_destroy_id and rdma_migrate_id wait on outside it.
#pragma once

#include <rdma/rdma_cma.h>

#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "abi/abi.hpp"

namespace iwcm::abi::cm {

struct Channel;
struct Id;

// What an id is doing, after the kernel's rdma_cm states (cma.c, enum
// rdma_cm_state) that the calls check.
enum class IdState : std::uint8_t {
    kIdle,           // RDMA_CM_IDLE
    kBound,          // RDMA_CM_ADDR_BOUND
    kAddrQuery,      // RDMA_CM_ADDR_QUERY
    kAddrResolved,   // RDMA_CM_ADDR_RESOLV
    kRouteResolved,  // RDMA_CM_ROUTE_RESOLV
    kListen,         // RDMA_CM_LISTEN
    kConnecting,     // RDMA_CM_CONNECT, active: the MPA request is on its way
    kRequest,        // RDMA_CM_CONNECT, passive: CONNECT_REQUEST reported, not answered
    kAccepting,      // accepted, ESTABLISHED not yet reported
    kEstablished,    // RDMA_CM_CONNECT after ESTABLISHED
    kDisconnecting,  // rdma_disconnect asked, DISCONNECTED not yet reported
    kClosed,         // the connection ended (DISCONNECTED, REJECTED, ...) or was rejected
};

struct CmEvent {
    rdma_cm_event pub{};
    // The peer's private data that pub.param.conn.private_data points to
    // (rdma_conn_param's length is a uint8_t).
    std::array<std::byte, 255> private_data{};
    // The id whose count of reported events this one is in: the listener
    // for a CONNECT_REQUEST, else pub.id's.
    Id* owner = nullptr;
};

struct Channel {
    rdma_event_channel pub{};  // pub.fd: an eventfd in semaphore mode
    std::deque<CmEvent*> queue;
    bool sync = false;  // the private channel of one synchronous id
    // Threads inside rdma_get_cm_event on it. A channel destroyed while one
    // waits keeps its fd (and this object) until the last leaves, so that
    // no thread reads an fd number the process has since reused.
    std::uint32_t waiters = 0;
    bool destroyed = false;
};

// Counts of an id's events that rdma_get_cm_event returned and that
// rdma_ack_cm_event acknowledged, under AckCounts::mutex.
struct AckCounts {
    std::uint64_t reported = 0;
    std::uint64_t acked = 0;
};

struct Id {
    rdma_cm_id pub{};
    Channel* channel = nullptr;  // nullptr once the application destroyed it under us
    bool sync = false;           // created with a NULL channel: pub.channel is ours
    IdState state = IdState::kIdle;
    std::uint64_t token = 0;  // names the id in resolutions (Session::resolve)
    // Options (rdma_set_option).
    std::optional<std::uint8_t> tos;
    bool reuseaddr = false;
    bool afonly = false;
    // Bound local endpoint (its port 0: chosen at connect or listen).
    std::optional<Endpoint> local;
    Endpoint remote;
    MacAddr remote_mac;
    ConnHandle conn;
    ListenHandle listener;
    // The peer's IRD / ORD from its connect request (passive ids).
    std::uint8_t peer_ird = 0;
    std::uint8_t peer_ord = 0;
    bool passive = false;       // made for a CONNECT_REQUEST
    bool request_lost = false;  // its connect request ended before an answer
    bool qp_attached = false;
    // rdma_create_qp made the CQs and their channels (freed by rdma_destroy_qp).
    bool own_cqs = false;
    // rdma_create_ep for a passive endpoint: rdma_get_request's QP attributes.
    std::optional<ibv_qp_init_attr> request_qp_attr;
    // rdma_create_ep with ai_connect: private data rdma_connect puts first.
    std::vector<std::byte> connect_data;
    AckCounts acks;
};

// The tables; never destroyed (see abi.cpp "Process exit").
struct Tables {
    std::unordered_map<const rdma_event_channel*, Channel*> channels;
    std::unordered_map<const rdma_cm_id*, Id*> ids;
    std::unordered_map<const rdma_cm_event*, CmEvent*> delivered;
    std::unordered_map<std::uint64_t, Id*> by_conn;
    std::unordered_map<std::uint64_t, Id*> by_listener;
    std::unordered_map<std::uint64_t, Id*> by_token;
    std::uint64_t next_token = 1;
    // The channels destroyed last (rdma_get_cm_event on one waits: rdmacm.cpp get_event).
    std::array<const rdma_event_channel*, 16> destroyed{};
    std::size_t destroyed_next = 0;
};
Tables& tables();

// Guards every Id::acks; acknowledgements notify `acked`.
std::mutex& ack_mutex();
std::condition_variable& acked();

inline std::uint64_t key(ConnHandle h) {
    return (std::uint64_t{h.index} << 32) | h.generation;
}
inline std::uint64_t key(ListenHandle h) {
    return (std::uint64_t{h.index} << 32) | h.generation;
}

// Sets errno, returns -1 (librdmacm's convention).
inline int fail(int err) {
    errno = err;
    return -1;
}

// Runs f(Session&) under the lock; f returns 0 or a positive errno, which
// becomes -1 with errno set. ENODEV without a runtime.
template <class F>
int locked(F&& f) {
    Runtime* rt = runtime();
    if (rt == nullptr) return fail(ENODEV);
    const int err = rt->call([&](Session& s) { return f(s); });
    return err == 0 ? 0 : fail(err);
}

Id* find_id(const rdma_cm_id* id);
Channel* find_channel(const rdma_event_channel* ch);

// Under the lock. A channel with its eventfd; nullptr with errno set.
Channel* make_channel(bool sync);
// Queues an event of `type` for `id` (counted on `owner`, default the id).
CmEvent* post(Id& id, rdma_cm_event_type type, int status, Id* owner = nullptr);
// Copies the peer's private data into the event (at most 255 bytes).
void set_private_data(CmEvent& ev, std::span<const std::byte> data);
// Removes the id's waiting events from its channel; a CONNECT_REQUEST that
// names the id as its listener takes its new id with it (rejected).
void drop_events(Session& s, Id& id);
// Takes the id out of the tables (its connection and listener too).
void unregister(Id& id);
// Closes the id's connection for good (see rdmacm.cpp); false: nothing to close.
bool close_connection(Session& s, Id& id);
// The connection or listener of an id that goes away: rejected, reset,
// closed or stopped as the kernel's iw_cm does on rdma_destroy_id.
void release_connection(Session& s, Id& id);
// Frees an id after its events were acknowledged (and its private channel).
void free_id(Id* id);
// Waits until every event reported for the id is acknowledged (outside the lock).
void wait_acked(Id& id);

// The device every id with an address carries, its default PD (librdmacm
// allocates one PD per device for its ids) and its IRD / ORD limits, fetched
// once outside the lock (they call into the verbs half). false with errno set.
bool prepare_device();
// Fills what an id with an address carries (verbs, pd, port_num).
void set_device(Id& id);

// A sockaddr's endpoint; nullopt for a family other than AF_INET / AF_INET6.
std::optional<Endpoint> to_endpoint(const sockaddr* sa);
void to_sockaddr(const Endpoint& ep, sockaddr_storage& out);

// The synchronous completion of an id's call (librdmacm's ucma_complete):
// 0, or -1 with errno from the event's status.
int complete(Id& id);
// rdma_get_cm_event without the checks of its arguments.
int get_event(rdma_event_channel* channel, rdma_cm_event** event);

}  // namespace iwcm::abi::cm
