// librdmacm's event channels, ids and events, and the runtime's events that
// become them (src/abi/abi.hpp "rdmacm.cpp").
//
// Read first: src/abi/rdmacm_state.hpp, rdma_get_cm_event(3), and the kernel's
// drivers/infiniband/core/cma.c (cma_iw_handler, cma_iw_listen_handler): the
// events and status values an iWARP device gives, which include/iwcm/events.hpp
// maps our core's events to.
//
// The runtime's events become these rdma_cm events (cma_iw_handler):
//   kConnectRequest      CONNECT_REQUEST on the listener's channel: a new id
//                        (verbs = default_context()), the peer's private data,
//                        initiator_depth = the peer's IRD, responder_resources
//                        = its ORD
//   kEstablished         the id's QP (if it has one) is attached first, then
//                        ESTABLISHED with the reply's private data (active)
//   kRejected            REJECTED, status -ECONNREFUSED (an MPA reject, with
//                        the peer's private data) or -ECONNRESET (a reset)
//   kUnreachable         UNREACHABLE, -ETIMEDOUT
//   kConnectError        CONNECT_ERROR with the core's status
//   kDisconnected, or    DISCONNECTED, status 0 (irdma and siw close with 0);
//   the QP's end         before ESTABLISHED it is CONNECT_ERROR
//   resolution           ADDR_RESOLVED, or ADDR_ERROR -ETIMEDOUT
// rdma_resolve_route reports ROUTE_RESOLVED at once (iWARP has no paths).
// A request the application has not answered ends silently, as iw_cm
// reports no close for it. TIMEWAIT_EXIT is IB's (cma_ib_handler): the kernel
// gives none for iWARP, nor do we; nor DEVICE_REMOVAL or ADDR_CHANGE.
//
// An event channel is an eventfd in semaphore mode: one token per queued
// event, so poll(2) on channel->fd says an event waits, and a read takes one.
// rdma_get_cm_event reads a token (blocking unless the application set
// O_NONBLOCK on the fd: then EAGAIN, as the kernel's rdma_cm file gives) and
// takes the oldest event under the lock. An event dropped from a queue
// (its id destroyed) leaves its token behind: the reader that takes it
// finds no event and reads again.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "abi/rdmacm_internal.hpp"
#include "abi/rdmacm_state.hpp"

#define IWCM_EXPORT extern "C" __attribute__((visibility("default")))

namespace iwcm::abi::cm {

Tables& tables() {
    static auto* t = new Tables;
    return *t;
}

std::mutex& ack_mutex() {
    static auto* m = new std::mutex;
    return *m;
}

std::condition_variable& acked() {
    static auto* cv = new std::condition_variable;
    return *cv;
}

Id* find_id(const rdma_cm_id* id) {
    auto& ids = tables().ids;
    auto it = ids.find(id);
    return it == ids.end() ? nullptr : it->second;
}

Channel* find_channel(const rdma_event_channel* ch) {
    auto& channels = tables().channels;
    auto it = channels.find(ch);
    return it == channels.end() ? nullptr : it->second;
}

Channel* make_channel(bool sync) {
    const int fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
    if (fd < 0) return nullptr;
    auto* ch = new Channel;
    ch->pub.fd = fd;
    ch->sync = sync;
    tables().channels.emplace(&ch->pub, ch);
    return ch;
}

namespace {

void wake(const Channel& ch) {
    const std::uint64_t one = 1;
    // The count cannot overflow (it is at most the events queued), so the
    // write only fails if the application closed the fd itself.
    [[maybe_unused]] const auto n = write(ch.pub.fd, &one, sizeof one);
}

void close_channel(Channel* ch) {
    Tables& t = tables();
    t.channels.erase(&ch->pub);
    t.destroyed[t.destroyed_next++ % t.destroyed.size()] = &ch->pub;
    ch->destroyed = true;
    if (ch->waiters > 0) return;  // the last waiter frees it (get_event)
    close(ch->pub.fd);
    delete ch;
}

}  // namespace

CmEvent* post(Id& id, rdma_cm_event_type type, int status, Id* owner) {
    Id& counted = owner != nullptr ? *owner : id;
    Channel* ch = counted.channel;
    if (ch == nullptr) return nullptr;  // its channel was destroyed: nobody listens
    auto* ev = new CmEvent;
    ev->pub.id = &id.pub;
    ev->pub.event = type;
    ev->pub.status = status;
    ev->owner = &counted;
    ch->queue.push_back(ev);
    wake(*ch);
    return ev;
}

void set_private_data(CmEvent& ev, std::span<const std::byte> data) {
    const std::size_t n = std::min(data.size(), ev.private_data.size());
    if (n == 0) return;
    std::memcpy(ev.private_data.data(), data.data(), n);
    ev.pub.param.conn.private_data = ev.private_data.data();
    ev.pub.param.conn.private_data_len = static_cast<std::uint8_t>(n);
}

void unregister(Id& id) {
    auto& t = tables();
    t.ids.erase(&id.pub);
    if (id.conn.valid()) t.by_conn.erase(key(id.conn));
    if (id.listener.valid()) t.by_listener.erase(key(id.listener));
    t.by_token.erase(id.token);
}

// As the kernel's iw_cm_destroy_id: a request not answered is rejected; a
// connection on its way is reset. An established one is closed gracefully
// here (iw_cm moves its QP to ERR, which irdma and siw turn into a TERMINATE
// or a reset): the peer hears DISCONNECTED either way, and a graceful close
// lets the last messages it was sent arrive. false: nothing to close.
bool close_connection(Session& s, Id& id) {
    switch (id.state) {
        case IdState::kRequest: (void)s.core().reject(s.now(), id.conn, {}); return true;
        case IdState::kEstablished:
            (void)s.core().disconnect(s.now(), id.conn, DisconnectMode::kGraceful);
            id.state = IdState::kDisconnecting;
            return true;
        case IdState::kConnecting:
        case IdState::kAccepting:
            (void)s.core().disconnect(s.now(), id.conn, DisconnectMode::kAbortive);
            return true;
        case IdState::kDisconnecting:  // closing already
        case IdState::kIdle:
        case IdState::kBound:
        case IdState::kAddrQuery:
        case IdState::kAddrResolved:
        case IdState::kRouteResolved:
        case IdState::kListen:
        case IdState::kClosed: return false;
    }
    return false;
}

void release_connection(Session& s, Id& id) {
    if (id.listener.valid()) {
        s.destroy_listen(id.listener);
        tables().by_listener.erase(key(id.listener));
        id.listener = {};
    }
    if (!id.conn.valid()) return;
    close_connection(s, id);
    if (id.pub.qp != nullptr && !id.qp_attached) qp_abandon(s, id.pub.qp);
    tables().by_conn.erase(key(id.conn));
    id.conn = {};
    id.state = IdState::kClosed;
}

namespace {

// An id made for a CONNECT_REQUEST that the application never received.
void discard_request_id(Session& s, Id* child) {
    release_connection(s, *child);
    unregister(*child);
    if (child->channel != nullptr && child->sync) close_channel(child->channel);
    delete child;
}

}  // namespace

void drop_events(Session& s, Id& id) {
    Channel* ch = id.channel;
    if (ch == nullptr) return;
    auto& q = ch->queue;
    for (auto it = q.begin(); it != q.end();) {
        CmEvent* ev = *it;
        if (ev->owner != &id && ev->pub.id != &id.pub) {
            ++it;
            continue;
        }
        if (ev->pub.event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->owner == &id) {
            if (Id* child = find_id(ev->pub.id)) discard_request_id(s, child);
        }
        delete ev;
        it = q.erase(it);
    }
}

void free_id(Id* id) {
    if (id->sync && id->channel != nullptr) {
        close(id->channel->pub.fd);
        delete id->channel;
    }
    delete id;
}

void wait_acked(Id& id) {
    std::unique_lock<std::mutex> lock(ack_mutex());
    acked().wait(lock, [&id] { return id.acks.acked >= id.acks.reported; });
}

namespace {

int ack_locked(const rdma_cm_event* pub) {
    auto& delivered = tables().delivered;
    auto it = delivered.find(pub);
    if (it == delivered.end()) return EINVAL;
    CmEvent* ev = it->second;
    delivered.erase(it);
    {
        std::lock_guard<std::mutex> g(ack_mutex());
        ++ev->owner->acks.acked;
    }
    acked().notify_all();
    delete ev;
    return 0;
}

// Under the lock: the oldest event of the channel, counted as reported.
CmEvent* take(Channel& ch) {
    if (ch.queue.empty()) return nullptr;
    CmEvent* ev = ch.queue.front();
    ch.queue.pop_front();
    tables().delivered.emplace(&ev->pub, ev);
    std::lock_guard<std::mutex> g(ack_mutex());
    ++ev->owner->acks.reported;
    return ev;
}

}  // namespace

// A token without an event (its id was destroyed) sends the reader back to
// read. So does a channel destroyed while the reader waited: no event comes
// to it any more, and the reader waits on, as a thread of librdmacm's does in
// its read of the rdma_cm file when another thread destroys the channel
// (rping's CM thread, whose main thread ends the process meanwhile). A call
// that comes just after the channel was destroyed (one of the last 16) waits
// the same way: rping's CM thread, between two events, can lose that race to
// its main thread's teardown, which takes the runtime's lock at every step
// (librdmacm would read freed memory there; the kernel's calls are quick
// enough that it never shows).
int get_event(rdma_event_channel* channel, rdma_cm_event** event) {
    Runtime* rt = runtime();
    if (rt == nullptr) return fail(ENODEV);
    bool gone = false;
    Channel* ch = rt->call([&](Session&) {
        Channel* c = find_channel(channel);
        if (c != nullptr) ++c->waiters;
        const auto& d = tables().destroyed;
        gone = c == nullptr && std::find(d.begin(), d.end(), channel) != d.end();
        return c;
    });
    if (gone) {
        for (;;) ::pause();  // until the process ends (a signal's handler returns here)
    }
    if (ch == nullptr) return fail(EINVAL);
    const int fd = ch->pub.fd;  // stays open while this thread waits on it
    for (;;) {
        std::uint64_t token = 0;
        const bool got = read(fd, &token, sizeof token) == sizeof token;
        const int err = errno;
        CmEvent* ev = nullptr;
        const bool leave = rt->call([&](Session&) {
            if (got && !ch->destroyed) ev = take(*ch);
            if (got && ev == nullptr) return false;
            if (--ch->waiters == 0 && ch->destroyed) {
                close(ch->pub.fd);
                delete ch;
            }
            return true;
        });
        if (!leave) continue;
        if (!got) return fail(err);  // EAGAIN (O_NONBLOCK), EINTR, ...
        *event = &ev->pub;
        return 0;
    }
}

int complete(Id& id) {
    if (!id.sync) return 0;
    rdma_cm_event* ev = nullptr;
    Runtime* rt = runtime();
    if (rt == nullptr) return fail(ENODEV);
    if (id.pub.event != nullptr) {
        rt->call([&](Session&) { return ack_locked(id.pub.event); });
        id.pub.event = nullptr;
    }
    if (get_event(id.pub.channel, &ev) != 0) return -1;
    id.pub.event = ev;
    if (ev->status == 0) return 0;
    // librdmacm: a rejection is ECONNREFUSED whatever its status.
    if (ev->event == RDMA_CM_EVENT_REJECTED) return fail(ECONNREFUSED);
    return fail(ev->status < 0 ? -ev->status : ev->status);
}

// ---- runtime events (under the lock, from abi.cpp's handler) ----

namespace {

std::uint8_t clamp_u8(std::uint16_t v) {
    return static_cast<std::uint8_t>(std::min<int>(v, 255));
}

void on_request(Session& s, const iwcm::Event& e) {
    auto& t = tables();
    auto it = t.by_listener.find(key(e.listener));
    Id* listener = it == t.by_listener.end() ? nullptr : it->second;
    if (listener == nullptr || listener->channel == nullptr) {
        (void)s.core().reject(s.now(), e.conn, {});
        return;
    }
    auto* child = new Id;
    if (listener->sync) {
        // librdmacm moves the new id of a synchronous listener to a
        // synchronous channel of its own (ucma_process_conn_req).
        child->channel = make_channel(true);
        child->sync = true;
        if (child->channel == nullptr) {
            delete child;
            (void)s.core().reject(s.now(), e.conn, {});
            return;
        }
    } else {
        child->channel = listener->channel;
    }
    child->pub.channel = &child->channel->pub;
    child->pub.context = listener->pub.context;
    child->pub.ps = listener->pub.ps;
    child->pub.qp_type = listener->pub.qp_type;
    child->state = IdState::kRequest;
    child->passive = true;
    child->conn = e.conn;
    child->local = e.local;
    child->remote = e.remote;
    child->token = t.next_token++;
    child->peer_ird = clamp_u8(e.mpa.ird);
    child->peer_ord = clamp_u8(e.mpa.ord);
    child->tos = listener->tos;
    set_device(*child);
    to_sockaddr(e.local, child->pub.route.addr.src_storage);
    to_sockaddr(e.remote, child->pub.route.addr.dst_storage);
    t.ids.emplace(&child->pub, child);
    t.by_conn.emplace(key(e.conn), child);
    t.by_token.emplace(child->token, child);
    CmEvent* ev = post(*child, RDMA_CM_EVENT_CONNECT_REQUEST, 0, listener);
    ev->pub.listen_id = &listener->pub;
    // cma_iw_listen_handler: the peer's IRD as our initiator depth, its ORD
    // as our responder resources (what the peer asks of us).
    ev->pub.param.conn.initiator_depth = child->peer_ird;
    ev->pub.param.conn.responder_resources = child->peer_ord;
    set_private_data(*ev, e.private_data);
}

void on_established(Session& s, Id& id, const iwcm::Event& e) {
    to_sockaddr(e.local, id.pub.route.addr.src_storage);
    to_sockaddr(e.remote, id.pub.route.addr.dst_storage);
    id.local = e.local;
    id.remote = e.remote;
    if (id.pub.qp != nullptr) {
        // The QP made before the connection takes it over now, before the
        // application hears ESTABLISHED (abi.hpp).
        const int err = qp_attach(s, id.pub.qp, e.conn);
        if (err == ENOTCONN) {
            // The connection ended right after it was made (the peer closed
            // at once): the QP is flushed, and the end already queued brings
            // DISCONNECTED after ESTABLISHED, as the kernel reports it.
        } else if (err != 0) {
            (void)s.core().disconnect(s.now(), e.conn, DisconnectMode::kAbortive);
            tables().by_conn.erase(key(id.conn));
            id.conn = {};
            id.state = IdState::kClosed;
            post(id, RDMA_CM_EVENT_CONNECT_ERROR, -err);
            return;
        } else {
            id.qp_attached = true;
        }
    }
    id.state = IdState::kEstablished;
    CmEvent* ev = post(id, RDMA_CM_EVENT_ESTABLISHED, 0);
    if (ev == nullptr) return;
    // cma_iw_handler: initiator_depth from the event's IRD, responder
    // resources from its ORD.
    ev->pub.param.conn.initiator_depth = clamp_u8(e.mpa.ird);
    ev->pub.param.conn.responder_resources = clamp_u8(e.mpa.ord);
    set_private_data(*ev, e.private_data);
}

// The connection of an id ended (a failure before ESTABLISHED or its end).
void on_ended(Session& s, Id& id, rdma_cm_event_type type, int status,
              std::span<const std::byte> private_data) {
    tables().by_conn.erase(key(id.conn));
    id.conn = {};
    const IdState was = id.state;
    id.state = IdState::kClosed;
    // A request the application has not answered ends silently, as in the
    // kernel (iw_cm reports no close for a connection it never accepted);
    // rdma_accept then fails.
    if (was == IdState::kRequest) {
        id.request_lost = true;
        return;
    }
    if (id.pub.qp != nullptr && !id.qp_attached) qp_abandon(s, id.pub.qp);
    if (type == RDMA_CM_EVENT_DISCONNECTED && was != IdState::kEstablished &&
        was != IdState::kDisconnecting) {
        // The connection ended before it was established.
        type = RDMA_CM_EVENT_CONNECT_ERROR;
        if (status == 0) status = -ECONNRESET;
    } else if (type == RDMA_CM_EVENT_DISCONNECTED) {
        status = 0;  // irdma and siw close with status 0 (IW_CM_EVENT_CLOSE)
    }
    CmEvent* ev = post(id, type, status);
    if (ev != nullptr && type == RDMA_CM_EVENT_REJECTED) set_private_data(*ev, private_data);
}

rdma_cm_event_type terminal_type(EventType type) {
    switch (type) {
        case EventType::kRejected: return RDMA_CM_EVENT_REJECTED;
        case EventType::kUnreachable: return RDMA_CM_EVENT_UNREACHABLE;
        case EventType::kConnectError: return RDMA_CM_EVENT_CONNECT_ERROR;
        case EventType::kDisconnected:
        case EventType::kConnectRequest:
        case EventType::kEstablished:
        case EventType::kAddressDown:
        case EventType::kAddressUp:
        case EventType::kReadable:
        case EventType::kWritable: break;
    }
    return RDMA_CM_EVENT_DISCONNECTED;
}

Id* by_conn(ConnHandle conn) {
    auto& m = tables().by_conn;
    auto it = m.find(key(conn));
    return it == m.end() ? nullptr : it->second;
}

}  // namespace

}  // namespace iwcm::abi::cm

namespace iwcm::abi {

using namespace cm;

void rdmacm_on_event(Session& s, const Event& e) {
    switch (e.type) {
        case EventType::kConnectRequest: on_request(s, e); return;
        case EventType::kEstablished:
            if (Id* id = by_conn(e.conn)) on_established(s, *id, e);
            return;
        case EventType::kRejected:
        case EventType::kUnreachable:
        case EventType::kConnectError:
        case EventType::kDisconnected:
            if (Id* id = by_conn(e.conn))
                on_ended(s, *id, terminal_type(e.type), e.status, e.private_data);
            return;
        case EventType::kAddressDown:
        case EventType::kAddressUp:
        case EventType::kReadable:
        case EventType::kWritable:
            // A listener serves again when its address returns; a stream's
            // bytes are the data path's. Nothing for rdma_cm.
            return;
    }
}

void rdmacm_on_qp_event(Session& s, const rdma::QpEvent& e) {
    // TERMINATE sent or received: the connection is closing, and its end
    // follows as kDisconnected (the kernel reports DISCONNECTED at the close).
    if (e.type != rdma::QpEventType::kDisconnected) return;
    if (Id* id = by_conn(e.conn)) on_ended(s, *id, RDMA_CM_EVENT_DISCONNECTED, e.status, {});
}

void rdmacm_on_resolved(Session& s, std::uint64_t token, std::optional<MacAddr> mac,
                        const std::string& error) {
    (void)s;
    (void)error;
    auto& t = tables();
    auto it = t.by_token.find(token);
    if (it == t.by_token.end()) return;  // the id is gone
    Id& id = *it->second;
    if (id.state != IdState::kAddrQuery) return;
    if (!mac) {
        // The kernel's address resolution ends with -ETIMEDOUT when no
        // neighbour answered in time (addr.c, process_one_req); the id is
        // bound again and may resolve anew.
        id.state = IdState::kBound;
        post(id, RDMA_CM_EVENT_ADDR_ERROR, -ETIMEDOUT);
        return;
    }
    id.remote_mac = *mac;
    id.state = IdState::kAddrResolved;
    set_device(id);
    post(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
}

std::size_t rdmacm_close_all(Session& s) {
    std::size_t asked = 0;
    for (auto& [pub, id] : tables().ids) {
        if (id->conn.valid() && close_connection(s, *id)) ++asked;
    }
    return asked;
}

}  // namespace iwcm::abi

// ---- the application's calls ----

using namespace iwcm;
using namespace iwcm::abi;
using namespace iwcm::abi::cm;

IWCM_EXPORT rdma_event_channel* rdma_create_event_channel() {
    Runtime* rt = runtime();
    if (rt == nullptr) {
        errno = ENODEV;
        return nullptr;
    }
    Channel* ch = rt->call([](Session&) { return make_channel(false); });
    return ch != nullptr ? &ch->pub : nullptr;
}

// librdmacm closes the fd and frees the channel whatever still uses it (the
// kernel then destroys the ids of the fd). Here the ids that used it stay
// valid for every call and hear no more events; the requests that waited
// in it are rejected.
IWCM_EXPORT void rdma_destroy_event_channel(rdma_event_channel* channel) {
    Runtime* rt = runtime();
    if (rt == nullptr || channel == nullptr) return;
    rt->call([&](Session& s) {
        Channel* ch = find_channel(channel);
        if (ch == nullptr || ch->sync) return;
        for (CmEvent* ev : ch->queue) {
            if (ev->pub.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
                if (Id* child = find_id(ev->pub.id)) discard_request_id(s, child);
            }
            delete ev;
        }
        ch->queue.clear();
        for (auto& [pub, id] : tables().ids) {
            if (id->channel == ch) id->channel = nullptr;
        }
        close_channel(ch);
    });
}

IWCM_EXPORT int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                               rdma_port_space ps) {
    if (id == nullptr) return fail(EINVAL);
    // A C caller may pass any number: read it as one, not as the enum (a
    // value outside it is no valid enum load).
    std::underlying_type_t<rdma_port_space> space = 0;
    std::memcpy(&space, &ps, sizeof space);
    // iWARP carries connected TCP port space only; UD port spaces and
    // native IB addressing have no meaning on it.
    if (space == RDMA_PS_UDP || space == RDMA_PS_IPOIB || space == RDMA_PS_IB) return fail(ENOSYS);
    if (space != RDMA_PS_TCP) return fail(EINVAL);
    Id* made = nullptr;
    const int rc = locked([&](Session&) {
        Channel* ch = nullptr;
        if (channel == nullptr) {
            ch = make_channel(true);
            if (ch == nullptr) return errno;
        } else {
            ch = find_channel(channel);
            if (ch == nullptr || ch->sync) return EINVAL;
        }
        made = new Id;
        made->channel = ch;
        made->sync = channel == nullptr;
        made->pub.channel = &ch->pub;
        made->pub.context = context;
        made->pub.ps = ps;
        made->pub.qp_type = IBV_QPT_RC;
        auto& t = tables();
        made->token = t.next_token++;
        t.ids.emplace(&made->pub, made);
        t.by_token.emplace(made->token, made);
        return 0;
    });
    if (rc == 0) *id = &made->pub;
    return rc;
}

IWCM_EXPORT int rdma_destroy_id(rdma_cm_id* pub) {
    Runtime* rt = runtime();
    if (rt == nullptr) return fail(ENODEV);
    Id* id = nullptr;
    const int err = rt->call([&](Session& s) {
        id = find_id(pub);
        if (id == nullptr) return EINVAL;
        release_connection(s, *id);
        drop_events(s, *id);
        unregister(*id);
        if (pub->event != nullptr) {
            (void)ack_locked(pub->event);
            pub->event = nullptr;
        }
        if (id->sync && id->channel != nullptr) tables().channels.erase(&id->channel->pub);
        return 0;
    });
    if (err != 0) return fail(err);
    // As librdmacm: the events of the id that the application holds must be
    // acknowledged before it goes (their id and listen_id stay valid).
    wait_acked(*id);
    free_id(id);
    return 0;
}

IWCM_EXPORT int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
    if (event == nullptr || channel == nullptr) return fail(EINVAL);
    return get_event(channel, event);
}

IWCM_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) {
    if (event == nullptr) return fail(EINVAL);
    return locked([&](Session&) { return ack_locked(event); });
}

IWCM_EXPORT int rdma_migrate_id(rdma_cm_id* pub, rdma_event_channel* channel) {
    Id* id = nullptr;
    const int rc = locked([&](Session&) {
        id = find_id(pub);
        if (id == nullptr || (id->sync && channel == nullptr)) return EINVAL;
        Channel* to = channel == nullptr ? make_channel(true) : find_channel(channel);
        if (to == nullptr) return channel == nullptr ? errno : EINVAL;
        if (to == id->channel) return 0;
        // The id's waiting events follow it (as the kernel's ucma_migrate_id).
        if (Channel* from = id->channel) {
            auto& q = from->queue;
            for (auto it = q.begin(); it != q.end();) {
                if ((*it)->owner != id) {
                    ++it;
                    continue;
                }
                to->queue.push_back(*it);
                wake(*to);
                it = q.erase(it);
            }
            if (id->sync) {
                if (pub->event != nullptr) (void)ack_locked(pub->event);
                pub->event = nullptr;
                close_channel(from);
            }
        }
        id->channel = to;
        id->sync = channel == nullptr;
        pub->channel = &to->pub;
        return 0;
    });
    if (rc != 0) return rc;
    // librdmacm waits until the events reported on the old channel are
    // acknowledged, so none is handled there after the call returns.
    wait_acked(*id);
    return 0;
}
