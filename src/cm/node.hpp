// Connection nodes and their lifetime.
//
// Read first: docs/design.md "Timers" (protection) and "Code style"
// ("Lifetimes"). The irdma driver keeps a node alive with a manual reference
// count bumped and dropped around every call (irdma_rem_ref_cm_node). Here a
// node lives exactly as long as a NodeRef names it: the connection table, an
// armed timer entry, a queued event and the application's handle each hold
// one, and nothing else touches the count. When the last NodeRef goes, the
// pool destroys the node and bumps its slot's generation, so that every
// handle naming the old node is stale from then on.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cm/tx_queue.hpp"
#include "iwcm/address.hpp"
#include "iwcm/assert.hpp"
#include "iwcm/core.hpp"
#include "iwcm/state.hpp"
#include "tcp/stream.hpp"
#include "timer/wheel.hpp"
#include "wire/tcp.hpp"

namespace iwcm::cm {

class NodePool;

// Every timeout a node can have (node_timers.hpp arms them; Core::Impl::on_node_timer says
// what each one does). A node holds at most one armed timer of each kind: kSend in send_tick,
// kStream in its stream's timer_tick, and the one of kClose .. kRefused that fits its phase in
// phase_tick, since a node waits for one thing at a time (a request, a reply, the
// application's answer, the RTR, the peer's FIN, the end of TIME_WAIT, a listener).
enum class NodeTimer : std::uint8_t {
    kSend,        // the driver's send entry: retransmit, or give up (irdma_schedule_cm_timer)
    kClose,       // the driver's close entry: TIME_WAIT is over (HZ / 10)
    kMpaRequest,  // responder: the initiator's MPA request did not come
    kMpaReply,    // initiator: the responder's MPA reply did not come
    kAccept,      // the application did not answer a connect request
    kRtr,         // responder, peer-to-peer: the initiator's RTR did not come
    kFinWait2,    // FIN_WAIT2: the peer's FIN did not come
    kRefused,  // SYN_SENT: our SYN was refused; send it again (CoreConfig::connect_refused_grace)
    kStream,   // the data-phase TCP's timer (RTO, persist, keepalive, delayed ACK)
    // Before the hand-off: the peer's window is shut with our bytes waiting and none in
    // flight; a zero-window probe is due (RFC 9293 3.8.6.1). It takes the send slot, which
    // is free then (nothing in flight to retransmit).
    kPersist,
};

// What a state means for the connection as a whole: the one exhaustive switch the
// handlers ask instead of keeping flags beside the state (docs/design.md "Node states").
enum class Phase : std::uint8_t {
    kSetup,      // TCP handshake or MPA exchange under way: an end now is a failed setup
    kConnected,  // MPA done (ESTABLISHED, OFFLOADED): an end now is a disconnect
    kClosing,    // FIN exchange under way; an application still owning the node was connected
    kClosed,     // ended, or never used
};

constexpr Phase phase_of(CmState state) {
    switch (state) {
        case CmState::kInited:
        case CmState::kSynSent:
        case CmState::kSynRcvd:
        case CmState::kMpaReqWait:
        case CmState::kMpaReqSent:
        case CmState::kMpaReqRcvd:
        case CmState::kAccepting:
        case CmState::kOneSideEstablished:
        case CmState::kMpaRejRcvd:
        case CmState::kListenerDestroyed: return Phase::kSetup;
        case CmState::kEstablished:
        case CmState::kOffloaded: return Phase::kConnected;
        case CmState::kFinWait1:
        case CmState::kFinWait2:
        case CmState::kClosing:
        case CmState::kTimeWait:
        case CmState::kCloseWait:
        case CmState::kLastAck: return Phase::kClosing;
        case CmState::kUnknown:
        case CmState::kListening:
        case CmState::kClosed: return Phase::kClosed;
    }
    return Phase::kClosed;
}

// The states of a phase, as a bit set the handlers test in one instruction or two.
constexpr CmStateSet states_of(Phase phase) {
    CmStateSet set;
    for (int i = 0; i < kCmStateCount; ++i)
        if (phase_of(static_cast<CmState>(i)) == phase) set = set | static_cast<CmState>(i);
    return set;
}
inline constexpr CmStateSet kSetupStates = states_of(Phase::kSetup);
inline constexpr CmStateSet kConnectedStates =
    states_of(Phase::kConnected) | states_of(Phase::kClosing);

// Was the MPA exchange done? Before it an application's connection ended by anything is a
// failed setup (kConnectError, kRejected, kUnreachable); after it, a kDisconnected. A closing
// node counts as connected: a failed setup ends the application's handle when its close
// starts, so an application that still owns a closing node was connected.
constexpr bool connected(CmState state) {
    return kConnectedStates.contains(state);
}

// A timer slot's value when nothing is armed in it (slots hold wheel ticks).
inline constexpr std::uint64_t kTimerUnarmed = UINT64_MAX;

// Heap parts of a node that exist only while a connection is being set up:
// unacknowledged bytes, the MPA reassembly buffer, private data. An idle
// established (or offloaded) node has none of them.
struct NodeBuffers {
    // Bytes from snd_una on, not yet acknowledged: those before snd_nxt were sent, the rest
    // wait for the peer's window.
    std::vector<std::byte> tx;
    std::vector<std::byte> rx;     // stream bytes received in order, not yet consumed
    std::vector<std::byte> pdata;  // our private data (request or reply)
    // The persist timer's state while bytes wait behind a zero window (as tcp::Stream's):
    // its doublings, and the probes sent without an acceptable ACK since.
    std::uint8_t persist_backoff = 0;
    std::uint8_t probes_out = 0;
};

// Blocks for live tcp::Streams (NodeStream), kept when freed for the next one, at most
// kKept. A stream is freed as it folds and made again as it unfolds, perhaps often in a
// connection's life: a block given back to malloc would be split for smaller ones (a
// NodeStream), its rest unused while the connection stays idle. Under AddressSanitizer none
// is kept, so that a use after free is still caught.
class StreamBlocks {
public:
    StreamBlocks() = default;
    StreamBlocks(const StreamBlocks&) = delete;
    StreamBlocks& operator=(const StreamBlocks&) = delete;
    ~StreamBlocks();

    void* take();            // room for one tcp::Stream
    void give(void* block);  // a block take() gave, its stream destroyed

private:
    std::vector<void*> kept_;
};

// What a core lends each of its streams: the transmit queue their frames read them from, and
// the blocks they live in.
struct StreamHome {
    explicit StreamHome(TxQueue& queue) : tx(queue) {}
    TxQueue& tx;
    StreamBlocks blocks;
};

// A handed-off connection's byte stream and what the core keeps beside it. The stream moves
// the node's sequence variables (Node::tcb), which the node moved until the hand-off: one
// copy of them for the connection's whole life.
//
// The stream lends its memory to queued frames (tx_queue.hpp). Every call that may move or
// free that memory goes through here and settles the frames that read it first; the stream
// itself is reached for anything else only as const (tcp()) or through calls that move no
// lent memory. The last loans are settled when the stream goes.
//
// An idle stream is folded (fold(), docs/design.md "Byte stream"): the tcp::Stream goes and
// its lasting state (tcp::FoldedStream, beside the node's Tcb) stays here, so that an idle
// connection holds a third of a live stream's memory. unfold() makes the same stream again; the
// core does so before anything that needs it live (a segment, a send, a close, keepalive's
// deadline).
class NodeStream {
public:
    // With the core's settings (CoreConfig::stream), which outlive every node.
    NodeStream(const tcp::StreamConfig& shared, const tcp::StreamInit& init, Instant now,
               tcp::Tcb& tcb, StreamHome& home)
        : config_(&shared), home_(home) {
        make_live(init, now, &tcb);
    }
    // (The stream keeps its settings by reference: a temporary would not outlive it.)
    NodeStream(tcp::StreamConfig&&, const tcp::StreamInit&, Instant, tcp::Tcb&,
               StreamHome&) = delete;
    // With settings of this connection's own (HandoffParams::stream), kept here (config_
    // owns them then: owns_config_).
    NodeStream(std::unique_ptr<const tcp::StreamConfig> own, const tcp::StreamInit& init,
               Instant now, tcp::Tcb& tcb, StreamHome& home)
        : owns_config_(true), config_(&held(own)), home_(home) {
        own.release();
        try {
            make_live(init, now, &tcb);
        } catch (...) {
            delete config_;
            throw;
        }
        IWCM_ASSERT(!folded() && owns_config_);
    }
    NodeStream(const NodeStream&) = delete;
    NodeStream& operator=(const NodeStream&) = delete;
    ~NodeStream() {
        settle();
        if (tcp_ != nullptr) drop_live();
        if (owns_config_) delete config_;
    }

    // The live stream (not folded()). No null test, on the data path's every call: a folded
    // one's null pointer faults at once, as a NodeRef's does (docs/perf.md "Asserts").
    const tcp::Stream& tcp() const { return *tcp_; }
    const tcp::StreamConfig& config() const { return *config_; }

    // ---- folding ----
    bool folded() const { return tcp_ == nullptr; }
    // Live, idle, and nothing of the core's waits on it: no frame reads its memory, no
    // kReadable is queued, no kWritable wanted.
    bool foldable() const {
        return tcp_ != nullptr && lent_.frames == 0 && !readable_queued && writable_need == 0 &&
               tcp_->foldable();
    }
    void fold() {
        IWCM_ASSERT(foldable());
        folded_ = tcp_->fold();
        drop_live();
    }
    // On the node's Tcb, which it folded on.
    void unfold(tcp::Tcb& tcb) {
        IWCM_ASSERT(folded());
        make_live(folded_, tcb);
        IWCM_ASSERT(tcp_->foldable());
    }
    // What a folded stream keeps (folded() only).
    const tcp::FoldedStream& folded_state() const {
        IWCM_ASSERT(folded());
        return folded_;
    }
    // Queries that hold in either state.
    std::size_t readable_bytes() const { return tcp_ ? tcp_->readable_bytes() : 0; }
    // The window we advertise (a folded stream's as it would be, made again on the stack on
    // a copy of the node's `tcb`).
    std::uint32_t rcv_wnd(const tcp::Tcb& tcb) const {
        return tcp_ ? tcp_->rcv_wnd() : folded_rcv_wnd(tcb);
    }

    // ---- calls that may move or free lent memory ----
    // A segment: the bytes its ACK acknowledges may be freed (the buffer too, once all
    // are), and the caller's given by reference with them.
    tcp::Arrival on_segment(Instant now, const tcp::SegmentIn& seg, tcp::SinkRef sink) {
        if ((seg.flags & wire::tcp_flags::kAck) && lent_.frames != 0)
            home_.tx.settle(lent_, &seg.ack);
        return live().on_segment(now, seg, sink);
    }
    std::size_t write(std::span<const std::byte> data) {
        if (live().write_moves_bytes(data.size())) settle();
        return live().write(data);
    }
    // Bytes held by reference copy nothing into the buffer, so they move nothing.
    std::size_t write_ref(std::span<const std::byte> data) { return live().write_ref(data); }
    // `copied`: how many of the parts' bytes go into the buffer (those not by reference).
    bool write_record(std::span<const std::span<const std::byte>> parts, std::uint32_t by_ref,
                      std::size_t copied) {
        if (live().write_moves_bytes(copied)) settle();
        return live().write_record(parts, by_ref);
    }
    // Copies every byte held by reference into the stream's buffer: the application may free
    // them once this returns.
    std::size_t own_refs() {
        settle();
        const std::size_t n = live().own_refs();
        copied_in += n;
        return n;
    }
    // Fills every frame that still reads this stream's memory: before the application,
    // told of the connection's end, may free what it lent by reference.
    void settle() {
        if (lent_.frames != 0) home_.tx.settle(lent_);
    }

    // ---- calls that move no lent memory ----
    std::optional<tcp::SegmentOut> poll_segment(Instant now) { return live().poll_segment(now); }
    tcp::Stream::Timeout on_timer(Instant now) { return live().on_timer(now); }
    void force_ack() { live().force_ack(); }
    void close() { live().close(); }
    // The receive side: lent memory is the send side's only.
    void consume(std::size_t n) { live().consume(n); }
    std::optional<std::uint64_t> place_summed(wire::SeqNumber seq,
                                              std::span<const wire::Bytes> text, std::size_t len,
                                              std::uint64_t sum) {
        return live().place_summed(seq, text, len, sum);
    }
    void forget_summed() { live().forget_summed(); }

    // Queues a frame of this stream's segment whose payload stays in its memory until the
    // frame is taken (TxQueue::leave_out): `room`'s frame, just queued.
    void lend(std::uint32_t at, std::span<const wire::Bytes> payload, std::uint32_t len,
              wire::SeqNumber seq) {
        const std::uint16_t mss = live().mss();
        home_.tx.leave_out(lent_, at, payload, len, len > mss ? mss : std::uint16_t{0}, seq);
    }
    // Bytes copied into frames: by the queue from lent memory, and `n` more the caller
    // copied as it queued them.
    void count_copied_to_frames(std::uint64_t n) { lent_.copied += n; }
    std::uint64_t copied_to_frames() const { return lent_.copied; }
    std::uint32_t frames_lent() const { return lent_.frames; }

    // Readable bytes the application was told of by the last kReadable it
    // polled (0 after a read): only more than these queue another. (At most
    // StreamConfig::recv_buffer, a 32-bit count.)
    std::uint32_t readable_told = 0;
    // send() was short or send_record() refused: kWritable once send_space()
    // reaches this (0: not wanted).
    std::uint32_t writable_need = 0;
    bool readable_queued = false;  // a kReadable waits in the event queue

private:
    // config_ is this connection's own, freed with it. (Here, in padding, not below: a
    // unique_ptr beside config_ cost an idle connection 16 bytes of malloc's rounding.)
    bool owns_config_ = false;

public:
    // Where the node's stream timer is armed while it is (flush_stream): a
    // later deadline leaves it there, and an early expiry re-arms.
    Instant timer_at{};
    // The kStream slot (node_timers.hpp): its deadline in wheel ticks, or kTimerUnarmed.
    std::uint64_t timer_tick = kTimerUnarmed;
    // Offered the in-order bytes before the stream buffers them (Core::set_stream_sink).
    StreamSink* sink = nullptr;
    // Bytes copied, and taken by the sink without the last copy (StreamInfo).
    std::uint64_t copied_in = 0;
    std::uint64_t copied_received = 0;
    std::uint64_t sunk = 0;

private:
    static const tcp::StreamConfig& held(const std::unique_ptr<const tcp::StreamConfig>& own) {
        IWCM_ASSERT(own != nullptr);
        return *own;
    }

    tcp::Stream& live() { return *tcp_; }  // as tcp()
    // Out of line: the stream on the stack would cost every live call a frame.
    [[gnu::cold, gnu::noinline]] std::uint32_t folded_rcv_wnd(const tcp::Tcb& tcb) const;

    // The live stream, in a block of home_.blocks: tcp::Stream(config, args...).
    template <class... Args>
    void make_live(Args&&... args) {
        IWCM_ASSERT(tcp_ == nullptr);
        void* block = home_.blocks.take();
        try {
            tcp_ = ::new (block) tcp::Stream(*config_, std::forward<Args>(args)...);
        } catch (...) {
            home_.blocks.give(block);
            throw;
        }
    }
    void drop_live() {
        IWCM_ASSERT(tcp_ != nullptr);
        std::destroy_at(tcp_);
        home_.blocks.give(tcp_);
        tcp_ = nullptr;
    }

    // The core's settings, or this connection's own (owns_config_). tcp_ reads them as long
    // as it lives.
    const tcp::StreamConfig* config_;
    tcp::Stream* tcp_ = nullptr;  // in a block of home_.blocks; null while folded
    StreamHome& home_;
    Lent lent_;
    tcp::FoldedStream folded_;  // while folded
};

struct Node {
    // ---- lifetime (touched only by NodeRef and NodePool) ----
    std::uint32_t refs = 0;
    std::uint32_t index = 0;
    std::uint32_t generation = 1;
    // (Identity fields, in what would be padding before the pointer.)
    CmState state = CmState::kUnknown;
    // Which timeout phase_tick (below) holds.
    NodeTimer phase_kind = NodeTimer::kClose;
    std::uint16_t vlan = kNoVlan;
    NodePool* pool = nullptr;

    // ---- identity ----
    // The flow hash of the 4-tuple (CoreConfig::flow_key), handed with every frame the node
    // sends (Core::poll_transmit_hashed): a driver steers by it without reading headers.
    std::uint64_t flow = 0;
    bool initiator = false;
    bool loopback = false;
    bool fin_sent = false;  // our FIN is in the sequence space (snd_nxt counts it)
    bool fin_acked = false;
    bool ack_deferred = false;  // an ACK waits for the next poll_transmit()
    // Flags read once or twice in a connection's life share one byte, so that the flow hash
    // fits in the node's 176 bytes.
    bool app_owned : 1 = false;  // the application holds a handle (or will, once told)
    bool counted_in_backlog : 1 = false;
    bool v1_retry : 1 = false;   // this attempt is the revision-1 retry of a revision-2 one
    bool wscale_ok : 1 = false;  // both SYNs carried the window-scale option (RFC 7323)
    // The timer service holds one reference (counted in refs) while the node has a wheel
    // entry (timer_entry below).
    bool timers_hold : 1 = false;
    bool persist_armed : 1 = false;  // the send slot holds kPersist, not kSend
    bool fin_queued : 1 = false;     // our FIN waits behind bytes the peer's window holds
    // A zero-window probe's octet at snd_nxt is out: the peer may acknowledge snd_nxt + 1.
    bool probe_out : 1 = false;
    Endpoint local;
    Endpoint remote;
    MacAddr remote_mac;
    ListenHandle listener;

    // ---- TCP (RFC 9293 names) ----
    // (IRS is rcv_nxt - 1 until the handshake ends, and not needed after.)
    wire::SeqNumber iss;
    // The sequence variables: the node's handlers move them until a kStream hand-off, the
    // stream after it. tcb.snd_max is the next new byte the node sends (a zero-window
    // probe's octet does not move it: probe_out).
    tcp::Tcb tcb;
    // A new initial send sequence number: our SYN takes it, is sent and not acknowledged yet.
    void start_send_at(wire::SeqNumber isn) {
        iss = isn;
        tcb.snd_una = isn;
        tcb.snd_max = isn + 1;
    }

    // ---- timers (node_timers.hpp) ----
    // The node's one wheel entry, due at or before its earliest deadline (invalid: none).
    timer::TimerId timer_entry;
    // Deadlines in wheel ticks, kTimerUnarmed when not armed (kStream's is in the stream).
    std::uint64_t send_tick = kTimerUnarmed;   // kSend
    std::uint64_t phase_tick = kTimerUnarmed;  // phase_kind: kClose, kMpaRequest .. kRefused

    // ---- MPA ----
    std::uint8_t mpa_rev = 0;
    bool crc = false;
    bool peer_to_peer = false;
    std::uint8_t rtr_offered = 0;  // initiator: what we offered; responder: what the peer offered
    RtrType rtr = RtrType::kNone;
    std::uint8_t tos = 0;  // IP TOS of our frames (the VLAN priority follows it)
    // Kept here, in what would be padding, so the node stays at 176 bytes.
    bool app_rejected : 1 = false;   // the application answered the request with reject()
    bool half_open : 1 = false;      // counted in the listener's half_open (passive, SYN_RCVD)
    bool peer_enhanced : 1 = false;  // the peer's request carried the IRD/ORD word (0x10 flag)
    // Counted in the listener's silent ones: past the handshake, its MPA request not yet in
    // (MPAREQ_WAIT; Core::Impl::enter_silence).
    bool silent : 1 = false;
    // SYNs of this connect() refused by a reset and sent again (Core::Impl::retry_refused).
    std::uint8_t refused_retries : 3 = 0;
    // The send entry's retransmissions so far (node_timers.hpp), while kSend is armed.
    std::uint8_t send_attempt = 0;
    std::uint16_t ird = 0;  // ours (after negotiation)
    std::uint16_t ord = 0;
    std::uint16_t peer_ird = 0;
    std::uint16_t peer_ord = 0;

    std::unique_ptr<NodeBuffers> bufs;
    // The byte stream after a HandoffMode::kStream hand-off (null before and
    // for kExternal). It lives as long as the node, so that bytes received
    // before the end stay readable until the terminal event is polled.
    std::unique_ptr<NodeStream> stream;

    // Buffers come from and go back to the pool's spares, so that setting up
    // a connection allocates nothing once the core has warmed up.
    NodeBuffers& buffers();
    void release_buffers();
    // A connection past its MPA exchange with nothing unacknowledged and nothing waiting
    // for the data path keeps no buffers (the idle-memory figure). During setup the buffers
    // stay: they hold our private data (resent by the revision-1 retry).
    void release_buffers_if_idle() {
        if (!kSetupStates.contains(state) && bufs && bufs->tx.empty() && bufs->rx.empty())
            release_buffers();
    }
    ConnHandle handle() const { return {index, generation}; }
};
// An idle established connection costs at most 256 bytes in all (the bench's figure); the
// node is most of it, and it has no headroom left: the stream pointer fills its last 8
// bytes, the flow hash the padding after `generation` and what four flags give up by
// sharing a byte. A new field must replace one.
static_assert(sizeof(Node) <= 176);
// A null NodeRef faults at any field (NodeRef::operator->).
static_assert(sizeof(Node) < 4096);

// An owning reference to a node (intrusive, single-threaded).
class NodeRef {
public:
    NodeRef() = default;
    explicit NodeRef(Node* node) : node_(node) { acquire(); }
    NodeRef(const NodeRef& other) : node_(other.node_) { acquire(); }
    NodeRef(NodeRef&& other) noexcept : node_(other.node_) { other.node_ = nullptr; }
    NodeRef& operator=(const NodeRef& other) {
        NodeRef copy(other);
        swap(copy);
        return *this;
    }
    NodeRef& operator=(NodeRef&& other) noexcept {
        NodeRef moved(std::move(other));
        swap(moved);
        return *this;
    }
    ~NodeRef() { release(); }

    void reset() {
        NodeRef empty;
        swap(empty);
    }
    void swap(NodeRef& other) noexcept { std::swap(node_, other.node_); }
    Node* get() const { return node_; }
    // No IWCM_ASSERT(node_ != nullptr) here: a null reference faults at its first field
    // (every offset in a Node lies in the unmapped first page), which is the same stop for
    // free, where the test would cost 245 instructions a setup (a quarter of all the asserts').
    Node* operator->() const { return node_; }
    Node& operator*() const { return *node_; }
    explicit operator bool() const { return node_ != nullptr; }
    friend bool operator==(const NodeRef& a, const NodeRef& b) { return a.node_ == b.node_; }

private:
    void acquire() {
        if (node_ != nullptr) ++node_->refs;
    }
    void release();

    Node* node_ = nullptr;
};

// Nodes in chunks with stable addresses; a free list of slot indices.
class NodePool {
public:
    // Called just before a node's slot is recycled (stats, trace).
    using OnDestroy = void (*)(void* context, Node& node);

    NodePool(OnDestroy on_destroy, void* context) : on_destroy_(on_destroy), context_(context) {}
    NodePool(const NodePool&) = delete;
    NodePool& operator=(const NodePool&) = delete;

    NodeRef create();
    void reserve(std::size_t nodes);
    std::unique_ptr<NodeBuffers> take_buffers();
    void give_buffers(std::unique_ptr<NodeBuffers> b);
    // The node in slot `index` if its generation matches, else nullptr.
    Node* find(std::uint32_t index, std::uint32_t generation) const;
    std::size_t live() const { return live_; }
    std::size_t capacity() const { return chunks_.size() * kChunk; }
    void destroy(Node* node);

private:
    static constexpr std::uint32_t kChunkBits = 12;
    static constexpr std::uint32_t kChunk = 1u << kChunkBits;
    void add_chunk();
    Node& at(std::uint32_t index) const {
        return chunks_[index >> kChunkBits][index & (kChunk - 1)];
    }

    std::vector<std::unique_ptr<Node[]>> chunks_;
    std::vector<std::uint32_t> free_;
    std::vector<std::unique_ptr<NodeBuffers>> spare_buffers_;
    std::size_t live_ = 0;
    OnDestroy on_destroy_;
    void* context_;
};

inline NodeBuffers& Node::buffers() {
    if (!bufs) bufs = pool->take_buffers();
    return *bufs;
}

inline void Node::release_buffers() {
    if (bufs) pool->give_buffers(std::move(bufs));
    probe_out = false;  // a probe's octet is one of tx's
}

inline void NodeRef::release() {
    if (node_ != nullptr) {
        IWCM_ASSERT(node_->refs > 0);
        if (--node_->refs == 0) node_->pool->destroy(node_);
        node_ = nullptr;
    }
}

}  // namespace iwcm::cm
