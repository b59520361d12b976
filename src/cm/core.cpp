// iwcm::Core: the public surface, the commands, lifetimes and events.
//
// Read first: src/cm/core_impl.hpp. Commands check their handle and the
// node's state and return an ApiError naming what is wrong; they never
// assert on what the application passes.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "cm/core_impl.hpp"
#include "cm/isn.hpp"
#include "iwcm/shard.hpp"
#include "wire/copy.hpp"
#include "wire/mpa.hpp"
#include "wire/pieces.hpp"

namespace iwcm {

using cm::Node;
using cm::NodeRef;

namespace {

cm::NodeTimersConfig timer_config(const CoreConfig& c) {
    // The wheel divides by the granularity; the retransmission waits double up to the cap.
    IWCM_ASSERT(c.timer_granularity > Duration::zero());
    IWCM_ASSERT(c.retransmit.cap >= c.retransmit.initial);
    cm::NodeTimersConfig t;
    t.retrans.max_retrans = c.retransmit.max_retrans;
    t.retrans.initial = c.retransmit.initial;
    t.retrans.cap = c.retransmit.cap;
    t.close_delay = c.close_delay;
    t.granularity = c.timer_granularity;
    return t;
}

// The connection table's secret (conn_table.hpp, hash_key): two words under isn_secret, so
// that the one secret the configuration holds keys both and neither reveals the other.
cm::ConnHashKey table_key(const CoreConfig& c) {
    const std::uint8_t k0[] = {'c', 'o', 'n', 'n', ' ', 't', 'a', 'b', 'l', 'e', ' ', '0'};
    const std::uint8_t k1[] = {'c', 'o', 'n', 'n', ' ', 't', 'a', 'b', 'l', 'e', ' ', '1'};
    return {cm::siphash24(c.isn_secret, k0), cm::siphash24(c.isn_secret, k1), c.flow_key};
}

}  // namespace

Core::Impl::Impl(const CoreConfig& config)
    : cfg(config),
      pool(&Impl::on_node_destroyed, this),
      table(table_key(config)),
      timers(timer_config(config)),
      listeners(config.syn_cookie_secret, config.isn_secret) {
    scratch.resize(2048);
}

Core::Impl::~Impl() {
    // Drop every reference in an order that lets nodes go without touching
    // the (already dying) timer service: events, handles, timers, table.
    // Frames never taken need no payload.
    tx.forget_loans();
    current_node.reset();
    events.clear();
    app_refs.clear();
    std::vector<NodeRef> all;
    table.for_each([&](Node& n) { all.emplace_back(&n); });
    for (auto& n : all) timers.cancel_all(*n);
    all.clear();
    table = cm::ConnTable();
    IWCM_ASSERT(events.empty() && !current_node);
}

// (The node's stream, if it has one, settles its loans as it goes.)
void Core::Impl::on_node_destroyed(void* self, Node&) {
    auto* impl = static_cast<Impl*>(self);
    ++impl->stats.nodes_destroyed;
}

// ---------------------------------------------------------------- driving

void Core::Impl::receive(Instant now, wire::Bytes frame, std::optional<std::uint64_t> flow) {
    now_ = now;
    rx_ctx.check_between_frames();
    handle_frame(now, frame, flow.value_or(0), flow.has_value());
    drain_loopback(now);
}

void Core::Impl::receive_parts(Instant now, wire::Bytes headers,
                               std::span<const wire::Bytes> payload,
                               std::optional<std::uint64_t> flow) {
    now_ = now;
    rx_ctx.check_between_frames();
    {
        const cm::RxContext::PartsScope parts(rx_ctx);
        handle_frame(now, headers, flow.value_or(0), flow.has_value(), payload);
    }
    IWCM_ASSERT(!rx_ctx.in_frame());  // the frame's parts are the caller's again
    drain_loopback(now);
}

void Core::Impl::drain_loop_queue(Instant now) {
    if (in_loopback) return;
    IWCM_ASSERT(!rx_ctx.in_frame());  // loopback frames wait for the frame in hand
    in_loopback = true;
    while (!tx.loop_empty()) {
        std::vector<std::vector<std::byte>> batch = tx.take_loopback();
        // Our own frames: a checksum left partial stays so (as on Linux's loopback).
        const cm::RxContext::VouchedScope vouched(rx_ctx, cfg.checksum_partial);
        for (auto& f : batch) handle_frame(now, f);
    }
    in_loopback = false;
}

void Core::Impl::on_timer(Instant now) {
    now_ = now;
    rx_ctx.check_between_frames();
    timers.on_timer(now, [&](cm::FiredTimer&& fired) { on_node_timer(now, std::move(fired)); });
    drain_loopback(now);
}

std::optional<Instant> Core::Impl::next_deadline() const {
    return timers.next_deadline();
}

// Inline into its two callers below (Impl::poll_transmit and Core::poll_transmit_hashed):
// a call between them cost more than the work on every frame.
[[gnu::always_inline]] inline const cm::TxFrame* Core::Impl::next_tx() {
    if (tx.acks_deferred() && tx.all_taken()) {
        tx.start_over();
        flush_deferred_acks();
        drain_loopback(now_);
    }
    if (tx.all_taken()) {
        tx.start_over();
        return nullptr;
    }
    return &tx.take();
}

std::optional<std::span<const std::byte>> Core::Impl::poll_transmit() {
    const cm::TxFrame* t = next_tx();
    if (t == nullptr) return std::nullopt;
    if (t->len & cm::TxFrame::kLeftOut) [[unlikely]]
        return filled(*t).frame;
    return tx.bytes(*t);
}

// The frame just taken with its payload copied in, if it is still left out. Out of line
// and reached by a tail call: the callers' common path stays without a call.
[[gnu::noinline]] Transmit Core::Impl::filled(const cm::TxFrame& t) {
    if (cm::TxPayload* p = tx.taken_payload(t)) tx.fill(*p);
    return {tx.bytes(t), t.flow};
}

std::optional<Event> Core::Impl::next_event() {
    // The previous event's node reference (and with it, for a terminal
    // event, the application's handle) goes now.
    current_node.reset();
    cm::QueuedEvent* popped = events.pop();
    if (popped == nullptr)
        return std::nullopt;  // not a named std::optional: its default constructor zeroes it all
    cm::QueuedEvent& q = *popped;
    current_node = std::move(q.node);
    // A view where push_event put the bytes: they move only when a later call queues an
    // event, and the view is the application's only until its next call.
    current_pdata = events.pdata_of(q);
    // The application has been told of what is readable now: more bytes
    // tell it again, read or not (a data path waits for a whole FPDU
    // without consuming a part of it).
    if (q.event.type == EventType::kReadable && current_node && current_node->stream) {
        cm::NodeStream& ns = *current_node->stream;
        ns.readable_queued = false;
        ns.readable_told = static_cast<std::uint32_t>(ns.readable_bytes());
    }
    return q.event;  // copied from the slot as it lies; Core::poll_event sets the view
}

// ---------------------------------------------------------------- lifetime

namespace {

// The transitions a node may make. UNKNOWN, LISTENING and ACCEPTING are the
// driver's names for a listener object and for a moment between accept and
// the reply; here listeners are not nodes and accept sends the reply at once,
// so no node enters them. ESTABLISHED is entered only when the MPA exchange is
// done; the responder's wait for the request before it is MPAREQ_WAIT, and the
// initiator goes from SYN_SENT straight to MPAREQ_SENT.
constexpr CmStateSet allowed_from(CmState from) {
    using S = CmState;
    IWCM_ASSERT(static_cast<int>(from) < kCmStateCount);
    constexpr CmStateSet kEnd = S::kClosed;
    constexpr CmStateSet kClose = S::kFinWait1 | S::kCloseWait | S::kClosed;
    switch (from) {
        case S::kInited: return S::kSynSent | S::kSynRcvd;
        case S::kSynSent: return S::kMpaReqSent | kEnd;
        case S::kSynRcvd: return S::kMpaReqWait | S::kListenerDestroyed | kEnd;
        case S::kMpaReqWait: return kClose | S::kMpaReqRcvd | S::kListenerDestroyed;
        case S::kEstablished: return kClose | S::kOffloaded;
        case S::kMpaReqSent: return kClose | S::kSynSent | S::kEstablished | S::kMpaRejRcvd;
        case S::kMpaReqRcvd:
            return kClose | S::kOneSideEstablished | S::kEstablished | S::kListenerDestroyed;
        case S::kOneSideEstablished: return kClose | S::kEstablished;
        case S::kMpaRejRcvd: return kClose;
        case S::kOffloaded: return kClose;
        case S::kFinWait1: return S::kFinWait2 | S::kClosing | kEnd;
        case S::kFinWait2: return S::kTimeWait | kEnd;
        case S::kCloseWait: return S::kLastAck | kEnd;
        case S::kLastAck: return kEnd;
        case S::kClosing: return S::kTimeWait | kEnd;
        case S::kTimeWait: return kEnd;
        case S::kListenerDestroyed: return kEnd;
        case S::kUnknown:
        case S::kListening:
        case S::kAccepting:
        case S::kClosed: break;
    }
    return {};
}

}  // namespace

// allowed_from for every state, worked out at compile time: set_state's check is one load.
const std::array<CmStateSet, kCmStateCount> Core::Impl::kAllowedFrom = [] {
    std::array<CmStateSet, kCmStateCount> table{};
    for (int i = 0; i < kCmStateCount; ++i) {
        table[i] = allowed_from(static_cast<CmState>(i));
        // set_state ignores a change to the same state: no state lists itself.
        IWCM_ASSERT(!table[i].contains(static_cast<CmState>(i)));
    }
    return table;
}();

// Out of line and cold, as trace_frame_hooked: set_state is inlined at every change of state,
// and a copy of this at each would spend the link-time inliner's budget for the unit.
[[gnu::noinline, gnu::cold]] void Core::Impl::trace_state(const Node& node, CmState from,
                                                          CmState to) {
    IWCM_ASSERT(trace && from != to && node.state == to);
    TraceRecord r;
    r.kind = TraceRecord::Kind::kState;
    r.now = now_;
    r.conn = node.handle();
    r.from = from;
    r.to = to;
    trace(r);
}

void Core::Impl::release_backlog(Node& node) {
    end_half_open(node);
    end_silence(node);
    if (!node.counted_in_backlog) return;
    node.counted_in_backlog = false;
    listeners.end_pending(node.listener);
}

void Core::Impl::close_node(const NodeRef& node) {
    IWCM_ASSERT(node);
    release_backlog(*node);
    timers.cancel_all(*node);
    node->release_buffers();
    // Nothing waits to be sent any more: not the bytes a shut window held back, nor the
    // FIN queued behind them, nor a probe's octet (an abort after a graceful close).
    node->fin_queued = node->probe_out = false;
    const bool was_connected = cm::connected(node->state);
    set_state(*node, CmState::kClosed);
    // Every close tells an application that still owns the node.
    if (node->app_owned) {
        end_for_app(node, was_connected ? EventType::kDisconnected : EventType::kConnectError,
                    -ECONNABORTED);
    }
    NodeRef gone = table.erase(cm::key_of(*node));
}

// The one place failures are counted (set_state calls it): a node that leaves the
// setup states for a close, or for CLOSED, without being established is one failure
// of its side, whatever ended it (reset, timeout, TERMINATE, bad MPA, listener or
// address gone, cancel). An application's own reject() is an answer, not a failure
// (it counts in `rejects`).
void Core::Impl::count_failure(const Node& node) {
    if (node.initiator)
        ++stats.connect_errors;
    else if (!node.app_rejected)
        ++stats.passive_errors;
}

void Core::Impl::end_for_app(const NodeRef& node, EventType type, int status,
                             std::span<const std::byte> pdata) {
    if (!node->app_owned) return;
    // Once told, the application may free what it gave send_ref.
    if (node->stream) node->stream->settle();
    push_event(node, type, status, pdata);
    node->app_owned = false;
    app_refs[node->index].reset();
}

void Core::Impl::abort_node(Instant now, const NodeRef& node, EventType type, int status,
                            bool send_rst) {
    (void)now;
    if (send_rst) send_reset(*node);
    end_for_app(node, type, status);
    close_node(node);
}

void Core::Impl::push_event(const NodeRef& node, EventType type, int status,
                            std::span<const std::byte> pdata) {
    IWCM_ASSERT(node->app_owned);
    // No limit here: a connection the application knows always gets its
    // events (at most an established and a terminal one). max_events gates new
    // connections instead (events_full()), so an application that stops
    // polling holds the queue to max_events plus two per connection it owns.
    // Every field set: the slot holds whatever its last event left.
    cm::QueuedEvent& q = events.push(pdata);
    q.event.type = type;
    q.event.conn = node->handle();
    q.event.listener = node->listener;
    q.event.status = status;
    q.event.local = node->local;
    q.event.remote = node->remote;
    q.event.vlan = node->vlan;
    q.event.state = node->state;
    q.event.mpa = negotiated(*node);
    if (type == EventType::kConnectRequest) {
        // A request carries what the peer offered.
        q.event.mpa.ird = node->peer_ird;
        q.event.mpa.ord = node->peer_ord;
        q.event.mpa.rtr = RtrType::kNone;
    }
    q.event.private_data = {};  // poll_event points it at the arena's copy
    q.node = node;
}

void Core::Impl::drop(Instant now, DropReason reason, const Node* node, wire::Bytes frame) {
    IWCM_ASSERT(static_cast<std::size_t>(reason) < stats.dropped.size());
    ++stats.dropped[static_cast<std::size_t>(reason)];
    if (trace) {
        TraceRecord r;
        r.kind = TraceRecord::Kind::kDrop;
        r.now = now;
        r.drop = reason;
        if (node) r.conn = node->handle();
        r.frame = frame;
        trace(r);
    }
}

[[gnu::noinline, gnu::cold]] void Core::Impl::trace_frame_hooked(TraceRecord::Kind kind,
                                                                 Instant now, const Node* node,
                                                                 wire::Bytes frame) {
    IWCM_ASSERT(trace);
    TraceRecord r;
    r.kind = kind;
    r.now = now;
    if (node) r.conn = node->handle();
    r.frame = frame;
    trace(r);
}

// ---------------------------------------------------------------- commands

namespace {

// The private data an application may send at a revision: at revision 2 the
// IRD/ORD word counts in the MPA length.
std::size_t pdata_limit(std::uint8_t revision) {
    return wire::kMpaMaxPrivateData - (revision == 2 ? wire::kMpaV2ParamsLen : 0);
}

}  // namespace

Result<Node*> Core::Impl::app_node(ConnHandle conn) const {
    if (!conn.valid() || conn.index >= pool.capacity()) return fail(ApiError::kInvalidHandle);
    Node* n = pool.find(conn.index, conn.generation);
    if (n == nullptr || !n->app_owned) return fail(ApiError::kStaleHandle);
    return n;
}

Result<ListenHandle> Core::Impl::listen(const ListenParams& p) {
    if (p.local.port == 0) return fail(ApiError::kInvalidArgument);
    if (p.vlan != kNoVlan && p.vlan > wire::kVlanIdMax) return fail(ApiError::kInvalidArgument);
    if (!p.local.addr.is_unspecified()) {
        auto vlan = address_vlan(p.local.addr);
        if (!vlan) return fail(ApiError::kAddressNotLocal);
        // A specific address serves only where it lives (irdma_find_listener).
        if (p.vlan != kNoVlan && p.vlan != *vlan) return fail(ApiError::kInvalidArgument);
    }
    if (listeners.serves(p.local, p.vlan)) return fail(ApiError::kAddressInUse);
    const std::uint32_t backlog = p.backlog == 0 ? cfg.default_backlog : p.backlog;
    const std::uint32_t silent_limit =
        std::max<std::uint32_t>(1, cfg.silent_limit == 0 ? backlog : cfg.silent_limit);
    const ListenHandle h =
        listeners.add(now_, p.local, p.vlan, p.tos.value_or(cfg.tos), backlog, silent_limit);
    IWCM_ASSERT(listeners.find(h) != nullptr);  // its handle names it now
    ++stats.listeners_created;
    return h;
}

Result<void> Core::Impl::destroy_listen(Instant now, ListenHandle h) {
    now_ = now;
    if (listeners.find(h) == nullptr)
        return fail(listeners.has_slot(h) ? ApiError::kStaleHandle : ApiError::kInvalidHandle);
    // Connections the application has not accepted die with the listener
    // (irdma_cm_del_listen -> irdma_reset_list_prep): they get a reset.
    std::vector<NodeRef> doomed;
    table.for_each([&](Node& n) {
        if (n.listener == h && n.counted_in_backlog) doomed.emplace_back(&n);
    });
    for (auto& n : doomed) {
        set_state(*n, CmState::kListenerDestroyed);
        abort_node(now, n, EventType::kConnectError, -ECONNABORTED, true);
    }
    std::optional<Instant> grace_until;
    if (cfg.listener_grace > Duration::zero()) grace_until = now + cfg.listener_grace;
    listeners.remove(h, grace_until);
    IWCM_ASSERT(listeners.find(h) == nullptr);  // its handle is stale now
    ++stats.listeners_destroyed;
    drain_loopback(now);
    return {};
}

// A candidate's flow hash (include/iwcm/shard.hpp) decides its shard and, for IPv4, its
// slot in the table (conn_table.hpp, hash_flow); the node keeps the picked one's for its
// frames (Node::flow). It is computed once per candidate, inline for IPv4, where only the
// port word changes from one candidate to the next.
Result<std::uint16_t> Core::Impl::pick_port(const IpAddr& local, const Endpoint& remote,
                                            std::uint16_t vlan, std::uint32_t& slot_hash,
                                            std::uint64_t& flow) {
    IWCM_ASSERT(cfg.shard_count >= 1 && cfg.shard_index < cfg.shard_count);
    const bool v4 = !local.is_v6();
    const std::uint32_t addr_xor = v4 ? flow::addr_xor_v4(local, remote.addr) : 0;
    const bool sharded = cfg.shard_count > 1;
    for (int tries = 0; tries < 16384; ++tries) {
        std::uint16_t port = next_port;
        next_port = next_port == 65535 ? 49152 : static_cast<std::uint16_t>(next_port + 1);
        if (v4)
            flow = flow::hash_v4(addr_xor, flow::port_word(flow::wire_ports(port, remote.port)),
                                 cfg.flow_key);
        else
            flow = flow_hash({local, port}, remote, cfg.flow_key);
        if (sharded && shard_of(flow, cfg.shard_count) != cfg.shard_index) continue;
        if (cfg.port_filter && !cfg.port_filter({local, port}, remote)) continue;
        const cm::ConnKey key{{local, port}, remote, vlan};
        slot_hash = cm::hash_key(table.secret(), key, flow);
        if (table.find(key, slot_hash) == nullptr &&
            listeners.match({local, port}, vlan) == nullptr)
            return port;
    }
    return fail(ApiError::kNoPorts);
}

Result<ConnHandle> Core::Impl::connect(Instant now, const ConnectParams& p) {
    now_ = now;
    if (p.remote.port == 0) return fail(ApiError::kInvalidArgument);
    if (p.local.addr.family() != p.remote.addr.family()) return fail(ApiError::kFamilyMismatch);
    const auto local_vlan = address_vlan(p.local.addr);
    if (!local_vlan) return fail(ApiError::kAddressNotLocal);
    // The connection lives on its local address's VLAN.
    if (p.vlan != kNoVlan && p.vlan != *local_vlan) return fail(ApiError::kInvalidArgument);
    const std::uint16_t vlan = *local_vlan;
    std::uint8_t rev = p.mpa_revision == 0 ? cfg.mpa.revision : p.mpa_revision;
    if (rev != 1 && rev != 2) return fail(ApiError::kInvalidArgument);
    if (p.private_data.size() > pdata_limit(rev)) return fail(ApiError::kPrivateDataTooLong);
    if (p.ird > wire::kIrdOrdMax || p.ord > wire::kIrdOrdMax)
        return fail(ApiError::kInvalidArgument);
    if (table.size() >= cfg.max_connections) return fail(ApiError::kTooManyConnections);
    if (events_full()) return fail(ApiError::kEventQueueFull);
    Endpoint local = p.local;
    std::uint32_t slot_hash = 0;
    std::uint64_t flow = 0;
    if (local.port == 0) {
        auto port = pick_port(local.addr, p.remote, vlan, slot_hash, flow);
        if (!port) return fail(port.error());
        local.port = *port;
    } else {
        const cm::ConnKey key{local, p.remote, vlan};
        flow = flow_of(local, p.remote);
        slot_hash = cm::hash_key(table.secret(), key, flow);
        if (table.find(key, slot_hash) != nullptr) return fail(ApiError::kAddressInUse);
    }
    NodeRef node = pool.create();
    ++stats.nodes_created;
    if (app_refs.size() < pool.capacity()) app_refs.resize(pool.capacity());
    node->initiator = true;
    node->local = local;
    node->remote = p.remote;
    node->flow = flow;
    node->remote_mac = p.remote_mac;
    node->vlan = vlan;
    node->tos = p.tos.value_or(cfg.tos);
    node->loopback = is_local_addr(p.remote.addr);
    if (node->loopback) {
        node->remote_mac = cfg.mac;
        ++stats.loopback_connections;
    }
    IWCM_ASSERT(local.port != 0 && (rev == 1 || rev == 2));
    node->mpa_rev = rev;
    record_ird_ord(*node, p.ird, p.ord);
    // An initiator that waits before its first data asks for no RTR: the RTR would be the
    // FPDU right behind the reply that such a responder misses (MpaConfig::initiator_send_wait).
    node->peer_to_peer =
        rev == 2 && cfg.mpa.peer_to_peer && cfg.mpa.initiator_send_wait == Duration::zero();
    node->rtr_offered = node->peer_to_peer ? cfg.mpa.rtr_types : 0;
    // A READ RTR is a read we issue: not offered without ORD to issue it.
    if (cfg.mpa.max_ord == 0) node->rtr_offered &= static_cast<std::uint8_t>(~rtr::kRead);
    IWCM_ASSERT(node->peer_to_peer || node->rtr_offered == 0);
    node->crc = cfg.mpa.crc;
    node->buffers().pdata.assign(p.private_data.begin(), p.private_data.end());
    node->start_send_at(
        wire::SeqNumber(cm::initial_sequence(cfg.isn_secret, local, p.remote, now)));
    node->app_owned = true;
    app_refs[node->index] = node;
    table.insert(node, slot_hash);
    set_state(*node, CmState::kSynSent);
    send_syn(*node);
    arm_send(now, node);
    ConnHandle h = node->handle();
    drain_loopback(now);
    check_node(*node);
    return h;
}

// A connect request the application may still answer (accept or reject).
Result<Node*> Core::Impl::answerable(ConnHandle conn, std::size_t pdata_len) const {
    auto n = app_node(conn);
    if (!n) return n;
    if ((*n)->state != CmState::kMpaReqRcvd) return fail(ApiError::kWrongState);
    if (pdata_len > pdata_limit((*n)->mpa_rev)) return fail(ApiError::kPrivateDataTooLong);
    return n;
}

Result<void> Core::Impl::accept(Instant now, ConnHandle conn, const AcceptParams& p) {
    now_ = now;
    auto n = answerable(conn, p.private_data.size());
    if (!n) return fail(n.error());
    Node& node = **n;
    if (p.ird > wire::kIrdOrdMax || p.ord > wire::kIrdOrdMax)
        return fail(ApiError::kInvalidArgument);
    record_ird_ord(node, p.ird, p.ord);
    ++stats.accepts;
    release_backlog(node);
    NodeRef ref(&node);
    const CheckScope check(*this, node);
    // The reply is built at once: its private data goes from the caller's bytes.
    accept_request(now, ref, p.private_data);
    drain_loopback(now);
    return {};
}

Result<void> Core::Impl::reject(Instant now, ConnHandle conn, std::span<const std::byte> pdata) {
    now_ = now;
    auto n = answerable(conn, pdata.size());
    if (!n) return fail(n.error());
    Node& node = **n;
    ++stats.rejects;
    IWCM_ASSERT(node.state == CmState::kMpaReqRcvd && node.app_owned && !node.initiator);
    node.app_rejected = true;
    release_backlog(node);
    NodeRef ref(&node);
    const CheckScope check(*this, node);
    reject_request(now, ref, pdata);
    drain_loopback(now);
    return {};
}

Result<void> Core::Impl::disconnect(Instant now, ConnHandle conn, DisconnectMode mode) {
    now_ = now;
    auto n = app_node(conn);
    if (!n) return fail(n.error());
    NodeRef node(*n);
    const CheckScope check(*this, *node);
    constexpr CmStateSet kFinable = CmState::kEstablished | CmState::kOffloaded |
                                    CmState::kMpaReqSent | CmState::kMpaReqRcvd |
                                    CmState::kOneSideEstablished | CmState::kAccepting;
    // Our FIN is queued or sent already: a second graceful close has nothing
    // to add (a data path that closes after its TERMINATE and again when its
    // queue pair goes, say). Only an abortive close cuts a closing node short.
    constexpr CmStateSet kFinQueued = CmState::kFinWait1 | CmState::kFinWait2 | CmState::kClosing |
                                      CmState::kLastAck | CmState::kTimeWait;
    if (mode == DisconnectMode::kGraceful && kFinQueued.contains(node->state)) return {};
    // An application's node is never CLOSED: its handle ends with the terminal event.
    IWCM_ASSERT(node->app_owned && node->state != CmState::kClosed);
    if (mode == DisconnectMode::kAbortive || !kFinable.contains(node->state)) {
        // SYN_SENT and SYN_RCVD have nothing to close gracefully.
        bool synchronized = node->state != CmState::kSynSent;
        const bool was_connected = cm::connected(node->state);
        EventType type = was_connected ? EventType::kDisconnected : EventType::kConnectError;
        abort_node(now, node, type, was_connected ? 0 : -ECANCELED, synchronized);
    } else {
        if (!cm::connected(node->state)) end_for_app(node, EventType::kConnectError, -ECANCELED);
        start_close(now, node);
    }
    drain_loopback(now);
    return {};
}

std::size_t Core::Impl::teardown(Instant now, IpAddr addr) {
    now_ = now;
    std::vector<NodeRef> doomed;
    table.for_each([&](Node& n) {
        if (n.local.addr == addr) doomed.emplace_back(&n);
    });
    for (auto& n : doomed) {
        IWCM_ASSERT(n->state != CmState::kClosed);  // the table holds no CLOSED node
        if (n->state == CmState::kTimeWait) {
            close_node(n);
            continue;
        }
        const bool was_connected = cm::connected(n->state);
        EventType type = was_connected ? EventType::kDisconnected : EventType::kConnectError;
        abort_node(now, n, type, was_connected ? -ECONNABORTED : -ENETDOWN,
                   n->state != CmState::kSynSent);
    }
    drain_loopback(now);
    return doomed.size();
}

Result<HandoffContext> Core::Impl::handoff(ConnHandle conn, const HandoffParams& params) {
    auto n = app_node(conn);
    if (!n) return fail(n.error());
    Node& node = **n;
    if (cm::phase_of(node.state) != cm::Phase::kConnected) return fail(ApiError::kWrongState);
    HandoffContext c;
    c.local = node.local;
    c.remote = node.remote;
    c.local_mac = cfg.mac;
    c.remote_mac = node.remote_mac;
    c.vlan = node.vlan;
    c.ttl = cfg.ttl;
    c.tos = node.tos;
    c.pcp = node.vlan != kNoVlan ? pcp_of(node) : 0;
    c.snd_nxt = node.tcb.snd_max.value();
    c.snd_una = node.tcb.snd_una.value();
    c.rcv_nxt = node.tcb.rcv_nxt.value();
    c.snd_wnd = node.tcb.snd_wnd;
    c.rcv_wnd = cfg.rcv_wnd;
    c.snd_wscale = node.tcb.snd_wscale;
    c.rcv_wscale = node.tcb.rcv_wscale;
    c.mss = node.tcb.mss;
    c.mpa = negotiated(node);
    c.rtr_start = rtr_start(node);
    c.initiator = node.initiator;
    IWCM_ASSERT(node.tcb.snd_una <= node.tcb.snd_max);
    if (node.state == CmState::kEstablished) {
        IWCM_ASSERT(!node.stream);  // a stream comes only with this hand-off
        NodeRef ref(&node);
        set_state(node, CmState::kOffloaded);
        if (params.mode == HandoffMode::kStream) {
            // The core keeps TCP: what the peer sent after its MPA frames
            // becomes readable, what we sent unacknowledged the stream's.
            start_stream(ref, params.stream);
            drain_loopback(now_);
            return c;
        }
        // The data path owns the connection from here: no retransmission, no probe. Our
        // bytes the peer's window held back (an MPA frame) are the data path's to send
        // first: they end at the context's snd_nxt.
        timers.ack_send(ref);
        timers.cancel_persist(node);
        const auto sent = static_cast<std::size_t>(node.tcb.snd_max - node.tcb.snd_una);
        if (node.bufs && node.bufs->tx.size() > sent) {
            const std::vector<std::byte>& tx = node.bufs->tx;
            c.pending_tx = std::span<const std::byte>(tx).subspan(sent);
            node.tcb.snd_max = node.tcb.snd_una + static_cast<std::uint32_t>(tx.size());
            node.probe_out = false;
            c.snd_nxt = node.tcb.snd_max.value();
        }
        // Every byte of ours is now sent, for the data path, or by it (pending_tx).
        IWCM_ASSERT(!node.bufs || node.bufs->tx.size() <= static_cast<std::size_t>(
                                                              node.tcb.snd_max - node.tcb.snd_una));
    }
    if (node.bufs && !node.stream) c.pending_rx = node.bufs->rx;
    return c;
}

// A listener's own event: it holds no node, and the listener handle may be
// stale by the time the application polls it.
void Core::Impl::push_listener_event(std::size_t index, EventType type, int status) {
    IWCM_ASSERT(index < listeners.size() && listeners[index].in_use);
    const cm::Listener& l = listeners[index];
    // Rare: the slot is reset whole, then the listener's fields set.
    cm::QueuedEvent& q = events.push({});
    q.event = {};
    q.node.reset();
    q.event.type = type;
    q.event.listener = {static_cast<std::uint32_t>(index), l.generation};
    q.event.status = status;
    q.event.local = l.local;
    q.event.vlan = l.vlan;
}

void Core::Impl::notify_listeners(const IpAddr& addr, EventType type, int status) {
    for (std::size_t i = 0; i < listeners.size(); ++i)
        if (listeners[i].in_use && listeners[i].local.addr == addr)
            push_listener_event(i, type, status);
}

// ---------------------------------------------------------------- Core

Core::Core(const CoreConfig& config) : impl_(std::make_unique<Impl>(config)) {}
Core::~Core() = default;

void Core::receive(Instant now, std::span<const std::byte> frame,
                   std::optional<std::uint64_t> flow_hash) {
    impl_->enter_command();
    impl_->receive(now, frame, flow_hash);
}
void Core::receive_parts(Instant now, std::span<const std::byte> headers,
                         std::span<const std::span<const std::byte>> payload,
                         std::optional<std::uint64_t> flow_hash) {
    impl_->enter_command();
    impl_->receive_parts(now, headers, payload, flow_hash);
}
void Core::receive_vouched(Instant now, std::span<const std::byte> frame) {
    impl_->enter_command();
    const cm::RxContext::VouchedScope vouched(impl_->rx_ctx, true);
    impl_->receive(now, frame, std::nullopt);
}
void Core::on_timer(Instant now) {
    impl_->enter_command();
    impl_->on_timer(now);
}
std::optional<Instant> Core::next_deadline() const {
    impl_->enter_command();
    return impl_->next_deadline();
}
std::optional<std::span<const std::byte>> Core::poll_transmit() {
    impl_->enter_command();
    return impl_->poll_transmit();
}
std::optional<Transmit> Core::poll_transmit_hashed() {
    impl_->enter_command();
    const cm::TxFrame* t = impl_->next_tx();
    if (t == nullptr) return std::nullopt;
    if (t->len & cm::TxFrame::kLeftOut) [[unlikely]]
        return impl_->filled(*t);
    return Transmit{impl_->tx.bytes(*t), t->flow};
}
std::optional<TransmitParts> Core::poll_transmit_parts() {
    impl_->enter_command();
    const cm::TxFrame* t = impl_->next_tx();
    if (t == nullptr) return std::nullopt;
    const std::span<const std::byte> frame = impl_->tx.bytes(*t);
    if (cm::TxPayload* p = impl_->tx.taken_payload(*t)) {
        // The payload left out is the frame's tail: the headers before it are sent as they lie.
        IWCM_ASSERT(p->at + p->len == frame.size());
        if (p->count > 1 && p->len < cm::kGatherMin) {
            // Short and in several pieces (one FPDU's header, payload and CRC): copying
            // them into the frame costs less than gathering them, here and at the
            // receiver (measured: RDMA Write at one MSS per segment ran 10 % slower in
            // pieces; docs/perf.md "Frames in parts").
            impl_->tx.fill(*p);
            return TransmitParts{frame, {}, t->flow, p->segment_size};
        }
        // Read where it lies: no copy, and the frame's room for it stays unwritten.
        return TransmitParts{frame.first(p->at), impl_->tx.hand_over(*p), t->flow, p->segment_size};
    }
    return TransmitParts{frame, {}, t->flow};
}
// The event is copied from its queue slot straight into the caller's optional, then its
// private data's view is written there. Built otherwise (the view set on a copy, then the copy
// moved into the optional), the compiler read the view's two 8-byte stores back in one 16-byte
// load, and the optional's flag byte back in an 8-byte one: loads that the stores cannot
// forward, stalls on every event. Out of line for the same reason: inlined into a caller (a
// link-time optimised build), the optional was copied once more through the stack.
[[gnu::noinline]] std::optional<Event> Core::poll_event() {
    impl_->enter_command();
    std::optional<Event> ev = impl_->next_event();
    if (ev) ev->private_data = impl_->current_pdata;
    return ev;
}

Result<void> Core::add_address(IpAddr addr, std::uint16_t vlan) {
    impl_->enter_command();
    if (addr.is_unspecified()) return fail(ApiError::kInvalidArgument);
    if (vlan != kNoVlan && vlan > wire::kVlanIdMax) return fail(ApiError::kInvalidArgument);
    if (impl_->is_local_addr(addr)) return fail(ApiError::kAddressInUse);
    impl_->addresses.push_back({addr, vlan});
    IWCM_ASSERT(impl_->local_vlan(addr) == vlan);
    // The address's listeners serve again (irdma_if_notify, NETDEV_UP).
    impl_->notify_listeners(addr, EventType::kAddressUp, 0);
    return {};
}

Result<std::size_t> Core::remove_address(Instant now, IpAddr addr) {
    impl_->enter_command();
    if (!impl_->is_local_addr(addr)) return fail(ApiError::kAddressNotLocal);
    std::size_t n = impl_->teardown(now, addr);
    const std::size_t erased = std::erase_if(
        impl_->addresses, [&](const Core::Impl::LocalAddress& a) { return a.addr == addr; });
    IWCM_ASSERT(erased == 1);
    // Its listeners stay and are told (irdma_if_notify, NETDEV_DOWN tears
    // down connections, not listeners); a frame to the address finds none.
    impl_->notify_listeners(addr, EventType::kAddressDown, -ENETDOWN);
    return n;
}

bool Core::is_local(IpAddr addr) const {
    impl_->enter_command();
    return impl_->is_local_addr(addr);
}
Result<ListenHandle> Core::listen(const ListenParams& p) {
    impl_->enter_command();
    return impl_->listen(p);
}
Result<void> Core::destroy_listen(Instant now, ListenHandle l) {
    impl_->enter_command();
    return impl_->destroy_listen(now, l);
}
Result<ConnHandle> Core::connect(Instant now, const ConnectParams& p) {
    impl_->enter_command();
    return impl_->connect(now, p);
}
Result<void> Core::accept(Instant now, ConnHandle c, const AcceptParams& p) {
    impl_->enter_command();
    return impl_->accept(now, c, p);
}
Result<void> Core::reject(Instant now, ConnHandle c, std::span<const std::byte> pd) {
    impl_->enter_command();
    return impl_->reject(now, c, pd);
}
Result<void> Core::disconnect(Instant now, ConnHandle c, DisconnectMode m) {
    impl_->enter_command();
    return impl_->disconnect(now, c, m);
}
std::size_t Core::teardown_connections(Instant now, IpAddr addr) {
    impl_->enter_command();
    return impl_->teardown(now, addr);
}
Result<HandoffContext> Core::handoff(ConnHandle c, const HandoffParams& p) {
    impl_->enter_command();
    return impl_->handoff(c, p);
}
Result<CmState> Core::state(ConnHandle c) const {
    impl_->enter_command();
    auto n = impl_->app_node(c);
    if (!n) return fail(n.error());
    return (*n)->state;
}
void Core::reserve(std::size_t connections) {
    impl_->enter_command();
    impl_->pool.reserve(connections);
    impl_->table.reserve(connections);
    // One wheel entry per node, whatever it has armed.
    impl_->timers.reserve(connections);
    impl_->app_refs.resize(std::max(impl_->app_refs.size(), impl_->pool.capacity()));
}

const Stats& Core::stats() const {
    impl_->enter_command();
    return impl_->stats;
}
const CoreConfig& Core::config() const {
    impl_->enter_command();
    return impl_->cfg;
}
void Core::set_trace(TraceHook hook) {
    impl_->enter_command();
    impl_->trace = std::move(hook);
}
std::size_t Core::live_nodes() const {
    impl_->enter_command();
    return impl_->pool.live();
}
std::size_t Core::open_nodes() const {
    impl_->enter_command();
    std::size_t n = 0;
    impl_->table.for_each([&](const Node& node) { n += node.state != CmState::kTimeWait; });
    IWCM_ASSERT(n <= impl_->pool.live());
    return n;
}
std::size_t Core::open_nodes_on(const Endpoint& local) const {
    impl_->enter_command();
    std::size_t n = 0;
    impl_->table.for_each([&](const Node& node) {
        n += node.state != CmState::kTimeWait && node.local.port == local.port &&
             (local.addr.is_unspecified() || node.local.addr == local.addr);
    });
    IWCM_ASSERT(n <= impl_->pool.live());
    return n;
}
std::size_t Core::pending_timers() const {
    impl_->enter_command();
    return impl_->timers.pending();
}
std::size_t Core::queued_events() const {
    impl_->enter_command();
    return impl_->events.size();
}

}  // namespace iwcm
