// The inside of iwcm::Core: tables, timers, queues, and the handlers.
//
// Read first: include/iwcm/core.hpp (the contract), docs/design.md ("Node
// states"), RFC 9293 section 3.10 (segment arrival), RFC 5961 (RST and
// SYN checks), RFC 5044 section 7.1 and RFC 6581 (MPA). The handlers live in
//   core.cpp  commands and the public surface,
//   tcp.cpp   segment arrival, per state, and segment output,
//   mpa.cpp   the MPA exchange over the TCP byte stream,
//   bytes.cpp the byte stream after a kStream hand-off (tcp::Stream).
//   timeouts.cpp  every timeout of a node, one switch on its kind,
//   check.cpp the invariants every handler leaves behind.
#pragma once

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "cm/conn_table.hpp"
#include "cm/event_queue.hpp"
#include "cm/listeners.hpp"
#include "cm/node.hpp"
#include "cm/node_timers.hpp"
#include "cm/rx_context.hpp"
#include "cm/tx_queue.hpp"
#include "invariants.hpp"  // whether check_node() runs
#include "iwcm/core.hpp"
#include "wire/frame.hpp"

namespace iwcm {

namespace cm {

// A segment as the handlers see it.
struct Segment {
    const wire::FrameRepr* frame;
    const wire::TcpRepr* tcp;
    wire::Bytes payload;
    std::uint16_t vlan;
    std::uint32_t slot_hash;  // the connection table's hash of its 4-tuple (conn_table.hpp)
    std::optional<std::uint64_t> flow;  // its flow hash, when the driver handed it
    // Sequence space the segment occupies (payload plus SYN and FIN).
    std::uint32_t seq_len() const {
        return static_cast<std::uint32_t>(payload.size()) +
               (tcp->has(wire::tcp_flags::kSyn) ? 1 : 0) +
               (tcp->has(wire::tcp_flags::kFin) ? 1 : 0);
    }
};

// A frame in parts with at least this much payload, its checksums computed, has its TCP
// checksum finished where its payload is placed (Core::Impl::finish_rx_sum): a stream
// verifies it while copying it into the receive buffer, one pass instead of two.
constexpr std::size_t kSummedPlaceMin = 2048;

}  // namespace cm

struct Core::Impl {
    explicit Impl(const CoreConfig& config);
    ~Impl();

    // ---- driving (core.cpp) ----
    // flow: the frame's flow hash when the driver hands it (Core::receive).
    void receive(Instant now, wire::Bytes frame, std::optional<std::uint64_t> flow);
    // A frame in two parts (Core::receive_parts).
    void receive_parts(Instant now, wire::Bytes headers, std::span<const wire::Bytes> payload,
                       std::optional<std::uint64_t> flow);
    void on_timer(Instant now);
    std::optional<Instant> next_deadline() const;
    // The next frame to send (nullptr: none), valid until the next call into the core.
    // poll_transmit() is it with its bytes, its payload filled in. (core.cpp only.)
    const cm::TxFrame* next_tx();
    std::optional<std::span<const std::byte>> poll_transmit();
    Transmit filled(const cm::TxFrame& t);
    // The next event without its private data (Core::poll_event points it at current_pdata).
    std::optional<Event> next_event();
    // Handles the frames queued to ourselves; inline, since almost every call finds none.
    void drain_loopback(Instant now) {
        if (!tx.loop_empty()) drain_loop_queue(now);
    }
    void drain_loop_queue(Instant now);

    // ---- commands (core.cpp) ----
    Result<ListenHandle> listen(const ListenParams& params);
    Result<void> destroy_listen(Instant now, ListenHandle handle);
    Result<ConnHandle> connect(Instant now, const ConnectParams& params);
    Result<void> accept(Instant now, ConnHandle conn, const AcceptParams& params);
    Result<void> reject(Instant now, ConnHandle conn, std::span<const std::byte> pdata);
    Result<void> disconnect(Instant now, ConnHandle conn, DisconnectMode mode);
    std::size_t teardown(Instant now, IpAddr addr);
    Result<HandoffContext> handoff(ConnHandle conn, const HandoffParams& params);
    Result<cm::Node*> app_node(ConnHandle conn) const;
    Result<cm::Node*> answerable(ConnHandle conn, std::size_t pdata_len) const;
    // slot_hash, flow: the connection table's hash and the flow hash of the 4-tuple with the
    // port picked.
    Result<std::uint16_t> pick_port(const IpAddr& local, const Endpoint& remote, std::uint16_t vlan,
                                    std::uint32_t& slot_hash, std::uint64_t& flow);

    // ---- segment arrival (tcp.cpp) ----
    // A frame, whole or as headers and payload pieces (Core::receive_parts), with its flow
    // hash when `hashed`. The hash comes as two scalars, not a std::optional: the optional was
    // built on the caller's stack with a byte store for its flag and passed in registers
    // loaded back from there, a load the store could not forward (a stall on every frame).
    void handle_frame(Instant now, wire::Bytes frame, std::uint64_t flow = 0, bool hashed = false,
                      std::span<const wire::Bytes> pieces = {});
    bool parse_parts(Instant now, wire::Bytes& frame, std::span<const wire::Bytes> pieces);
    // The TCP checksum parse_parts left to finish (RxContext::sum_pending): summed over the
    // payload, into a stream's receive buffer on the way when `node` has one that takes it whole.
    // False, the frame dropped as a bad checksum, when it does not hold.
    bool finish_rx_sum(Instant now, cm::Node* node, wire::Bytes frame);
    // One switch on the state; an arm per state (or per group of states that act alike).
    void on_segment(Instant now, const cm::NodeRef& node, const cm::Segment& seg);
    void on_syn_sent(Instant now, const cm::NodeRef& node, const cm::Segment& seg);
    void on_syn_rcvd(Instant now, const cm::NodeRef& node, const cm::Segment& seg);
    void on_text_segment(Instant now, const cm::NodeRef& node, const cm::Segment& seg);
    void on_external_segment(Instant now, const cm::NodeRef& node, const cm::Segment& seg);
    void on_fin_seen_segment(Instant now, const cm::NodeRef& node, const cm::Segment& seg);
    // What the synchronized states share. The small ones are inline (defined in tcp.cpp, used
    // only there), so that the arms cost no more than one function serving them all did.
    bool acceptable(const cm::Node& node, const cm::Segment& seg) const;
    inline bool synchronized_checks(Instant now, const cm::NodeRef& node, const cm::Segment& seg);
    void on_rst_or_syn(Instant now, const cm::NodeRef& node, const cm::Segment& seg,
                       bool in_window);
    void on_rst(Instant now, const cm::NodeRef& node, const cm::Segment& seg);
    bool on_ack(Instant now, const cm::NodeRef& node, const cm::Segment& seg);
    inline std::optional<wire::Bytes> new_text(Instant now, const cm::NodeRef& node,
                                               const cm::Segment& seg);
    inline std::optional<wire::Bytes> checked_text(Instant now, const cm::NodeRef& node,
                                                   const cm::Segment& seg);
    inline bool fin_in_order(const cm::Node& node, const cm::Segment& seg) const;
    inline void ack_text(cm::Node& node, const cm::Segment& seg, std::uint64_t sent_before);
    // Our FIN acknowledged, the peer's FIN in order: a switch on the state each (also for
    // a stream's FIN events).
    bool on_fin_acked(Instant now, const cm::NodeRef& node);
    void on_fin(Instant now, const cm::NodeRef& node);
    void on_peer_close(Instant now, const cm::NodeRef& node, EventType type, int status);
    void retry_v1(Instant now, const cm::NodeRef& node);
    bool retry_refused(Instant now, const cm::NodeRef& node);
    void on_listen_syn(Instant now, const cm::Segment& seg);
    cm::NodeRef make_passive_node(cm::Listener& l, const cm::Segment& seg, wire::SeqNumber irs);
    // The peer's window as a segment states it (scaled unless in a SYN), and the largest
    // it ever offered (RFC 5961 5.2's MAX.SND.WND).
    static void take_window(cm::Node& node, std::uint32_t wnd) {
        node.tcb.snd_wnd = wnd;
        node.tcb.max_snd_wnd = std::max(node.tcb.max_snd_wnd, wnd);
    }
    void send_cookie_syn_ack(Instant now, cm::Listener& l, const cm::Segment& seg);
    // An ACK for no node on a listener's port: a SYN cookie's return?
    bool on_listen_ack(Instant now, const cm::Segment& seg);
    void end_half_open(cm::Node& node);
    // A node in MPAREQ_WAIT after the segment that completed its handshake: counted among
    // its listener's silent ones, the oldest of them shed first when they are at the limit.
    void enter_silence(const cm::NodeRef& node);
    // Its MPA request came, or it ends (on_mpa_request, release_backlog). Inline: a node is
    // seldom silent (never one whose request came with the handshake's ACK).
    void end_silence(cm::Node& node) {
        if (node.silent) [[unlikely]]
            end_silence_of(node);
    }
    void end_silence_of(cm::Node& node);
    void shed_oldest_silent(cm::Listener& l);
    bool still_silent(ConnHandle h) const {
        const cm::Node* n = pool.find(h.index, h.generation);
        return n != nullptr && n->silent;
    }
    wire::FrameRepr reply_frame(const cm::Segment& seg) const;
    void reply_no_connection(const cm::Segment& seg);
    // RFC 5961 section 7: a challenge ACK, unless this second's budget is spent.
    void send_challenge_ack(Instant now, cm::Node& node);

    // ---- segment output (tcp.cpp) ----
    wire::FrameRepr segment_frame(const cm::Node& node, std::uint8_t flags,
                                  wire::SeqNumber seq) const;
    // The same segment as flat values, for an IPv4 node (the sending fast path).
    wire::SegmentV4 segment_v4(const cm::Node& node, std::uint8_t flags, wire::SeqNumber seq) const;
    void send_segment(cm::Node& node, std::uint8_t flags, wire::SeqNumber seq, wire::Bytes payload);
    void send_syn(cm::Node& node);
    void send_ack(cm::Node& node);
    void send_reset(cm::Node& node);
    // An ACK held until the next poll_transmit() unless a segment carries it first.
    void defer_ack(cm::Node& node);
    void flush_deferred_acks();
    // Queues bytes (and a FIN) after ours; push_data sends what the peer's window lets out.
    void send_data(Instant now, const cm::NodeRef& node, wire::Bytes data, bool fin);
    void push_data(Instant now, const cm::NodeRef& node);
    // The persist timer follows whether a probe is wanted (RFC 9293 3.8.6.1, as tcp::Stream).
    void update_persist(Instant now, const cm::NodeRef& node);
    void resend(cm::Node& node);
    void arm_send(Instant now, const cm::NodeRef& node);
    // Queues a frame for the wire, or for ourselves when both ends are local. flow: the flow
    // hash of its 4-tuple (the node's, or flow_of(seg) for an answer to a segment).
    void emit_frame(const wire::FrameRepr& repr, wire::Bytes payload, bool loopback,
                    std::uint64_t flow);
    // A stream's segment whose payload stays where it lies until the frame is taken (see
    // TxPayload): the node's stream memory, in one piece or several, not looped back.
    void emit_frame_left_out(cm::Node& node, const wire::FrameRepr& repr,
                             std::span<const wire::Bytes> payload);
    // The same with the payload in pieces, `payload_len` bytes in all.
    void emit_frame_pieces(const wire::FrameRepr& repr, std::span<const wire::Bytes> pieces,
                           std::size_t payload_len, bool loopback, std::uint64_t flow);
    // Room for one outgoing frame of `len` bytes (counted in frames_out) in the transmit
    // queue: for the wire, or for ourselves (loopback). trace_out() traces it once written.
    wire::MutBytes frame_room(std::size_t len, bool loopback, std::uint64_t flow);
    // The flow hash of a 4-tuple of ours, keyed by cfg.flow_key (inline for IPv4).
    std::uint64_t flow_of(const Endpoint& local, const Endpoint& remote) const {
        if (local.addr.is_v4()) return flow_hash_v4(local, remote, cfg.flow_key);
        return flow_hash(local, remote, cfg.flow_key);
    }
    // A segment's: the driver's, or the one an IPv4 lookup that found no node computed
    // (handle_frame); else computed here (IPv6, and the rare reset a node's state answers
    // with to a segment whose lookup found it).
    std::uint64_t flow_of(const cm::Segment& seg) const {
        if (seg.flow) return *seg.flow;
        return flow_of({seg.frame->ip.dst, seg.tcp->dst_port},
                       {seg.frame->ip.src, seg.tcp->src_port});
    }
    void trace_out(bool loopback);
    std::uint16_t our_mss(const IpAddr& addr) const;
    // The smaller of ours and the peer's (raised to the floor, or the RFC
    // default when the SYN had no MSS option).
    std::uint16_t effective_mss(const IpAddr& local, std::optional<std::uint16_t> peer) const;

    // ---- MPA (mpa.cpp) ----
    // In-order bytes before hand-off: one switch on the state says who reads them.
    void on_stream(Instant now, const cm::NodeRef& node);
    void start_mpa(Instant now, const cm::NodeRef& node);
    void on_mpa_request(Instant now, const cm::NodeRef& node);
    void on_mpa_reply(Instant now, const cm::NodeRef& node);
    void on_rtr(Instant now, const cm::NodeRef& node);
    void on_terminate(Instant now, const cm::NodeRef& node);
    // The reply to an accepted request, with `pdata`, sent at once.
    void accept_request(Instant now, const cm::NodeRef& node, std::span<const std::byte> pdata);
    void reject_request(Instant now, const cm::NodeRef& node, std::span<const std::byte> pdata);
    void send_terminate(Instant now, const cm::NodeRef& node, int which);
    // The in-order bytes the MPA handlers read: rx, or while on_text_segment lets them read a
    // segment in place (rx was empty), what is left of that segment's text.
    wire::Bytes stream_rx(const cm::Node& node) const {
        if (rx_ctx.reads_in_place(node)) return rx_ctx.in_place();
        return node.bufs ? wire::Bytes(node.bufs->rx) : wire::Bytes{};
    }
    // The handler is done with the first n of those bytes.
    void consume_rx(cm::Node& node, std::size_t n);
    MpaInfo negotiated(const cm::Node& node) const;
    static RtrStart rtr_start(const cm::Node& node);
    void record_ird_ord(cm::Node& node, std::uint16_t ird, std::uint16_t ord) const;
    void count_failure(const cm::Node& node);
    bool events_full() const { return events.size() >= cfg.max_events; }
    // The VLAN a local address lives on, or kNotLocal. Every frame asks it of its
    // destination: a plain integer, where an optional came back through the stack in two
    // narrow stores and one wide load (a store-forwarding stall on every frame).
    static constexpr std::uint32_t kNotLocal = UINT32_MAX;
    std::uint32_t local_vlan(const IpAddr& addr) const {
        // Two 64-bit compares per address (the unused bytes of a v4 address are zero).
        std::uint64_t lo, hi;
        std::memcpy(&lo, addr.raw().data(), 8);
        std::memcpy(&hi, addr.raw().data() + 8, 8);
        for (const LocalAddress& local : addresses) {
            const IpAddr& a = local.addr;
            std::uint64_t alo, ahi;
            std::memcpy(&alo, a.raw().data(), 8);
            std::memcpy(&ahi, a.raw().data() + 8, 8);
            if (alo == lo && ahi == hi && a.family() == addr.family()) return local.vlan;
        }
        return kNotLocal;
    }
    // The same as an optional, for the commands.
    std::optional<std::uint16_t> address_vlan(const IpAddr& addr) const {
        const std::uint32_t vlan = local_vlan(addr);
        if (vlan == kNotLocal) return std::nullopt;
        return static_cast<std::uint16_t>(vlan);
    }
    void push_listener_event(std::size_t listener, EventType type, int status);
    // kAddressDown / kAddressUp to every listener on this specific address.
    void notify_listeners(const IpAddr& addr, EventType type, int status);
    std::uint8_t pcp_of(const cm::Node& node) const { return cfg.dscp_to_pcp[node.tos >> 2]; }
    // CoreConfig::checksum_offload and checksum_partial as the frame writers take them.
    wire::Checksums checksums() const {
        if (cfg.checksum_offload) return wire::Checksums::kOffload;
        return cfg.checksum_partial ? wire::Checksums::kPartial : wire::Checksums::kFull;
    }
    // What the parser checks in the frame at hand: nothing in one the driver vouched for
    // (receive_vouched) or a frame of loopback with checksums left partial.
    wire::Checksums rx_checksums() const {
        return cfg.checksum_offload || rx_ctx.vouched() ? wire::Checksums::kOffload
                                                        : wire::Checksums::kFull;
    }

    // ---- the byte stream after hand-off (bytes.cpp) ----
    // `own`: this connection's settings (HandoffParams::stream); unset, the core's.
    void start_stream(const cm::NodeRef& node, const std::optional<StreamConfig>& own);
    void on_stream_segment(Instant now, const cm::NodeRef& node, const cm::Segment& seg);
    // Sends what the stream has to send, brings the node's sequence numbers
    // up to date, tells the application what changed, re-arms the timer.
    void flush_stream(Instant now, const cm::NodeRef& node);
    void notify_stream(cm::Node& node);
    // send_ack for a node with a stream: the stream's ACK.
    void send_stream_ack(cm::Node& node);
    // The node's stream, live: a folded one is made again first (unfold_stream).
    cm::NodeStream& live_stream(cm::Node& node) {
        if (node.stream->folded()) [[unlikely]]
            unfold_stream(node);
        return *node.stream;
    }
    [[gnu::cold]] void unfold_stream(cm::Node& node);
    // Folds the stream of an open connection if it is foldable, and arms the stream timer
    // for what the folded state still keeps (keepalive).
    void fold_stream(const cm::NodeRef& node);
    void arm_fin_wait2(Instant now, const cm::NodeRef& node);
    // A node whose stream the application may use: its handle is live, or
    // its terminal event is queued or was the last one polled.
    Result<cm::Node*> stream_node(ConnHandle conn) const;
    // send() (record false) and send_record() (true: all or nothing); `more`
    // leaves the bytes queued without a flush (send_record's MSG_MORE);
    // `by_ref` the parts held by reference (send_record).
    Result<std::size_t> send_bytes(Instant now, ConnHandle conn, std::span<const wire::Bytes> parts,
                                   bool record, bool more, std::uint32_t by_ref = 0);
    Result<cm::Node*> sending_node(ConnHandle conn) const;
    Result<void> consume_bytes(Instant now, ConnHandle conn, std::size_t n);
    // Before hand-off: what the connection may still buffer of the peer's bytes.
    std::uint32_t rx_space(const cm::Node& node) const;

    // ---- timeouts (timeouts.cpp) ----
    // One switch on the kind that fired; each arm is a named handler below.
    void on_node_timer(Instant now, cm::FiredTimer&& fired);
    void on_retransmit(Instant now, const cm::NodeRef& node);
    void on_retrans_exhausted(Instant now, const cm::NodeRef& node);
    void on_close_timer(Instant now, const cm::NodeRef& node);
    void on_mpa_request_timeout(Instant now, const cm::NodeRef& node);
    void on_mpa_reply_timeout(Instant now, const cm::NodeRef& node);
    void on_accept_timeout(Instant now, const cm::NodeRef& node);
    void on_rtr_timeout(Instant now, const cm::NodeRef& node);
    void on_fin_wait2_timeout(Instant now, const cm::NodeRef& node);
    void on_refused_timeout(Instant now, const cm::NodeRef& node);
    void on_persist_timeout(Instant now, const cm::NodeRef& node);
    // The data-phase TCP's timer (kStream: RTO, persist, keepalive, delayed ACK); defined by
    // the stream integration.
    void on_stream_timer(Instant now, const cm::NodeRef& node);
    // The timeout of the node's phase (kMpaRequest .. kRefused), `after` from now; replaces
    // the earlier one.
    void arm_phase_timer(Instant now, const cm::NodeRef& node, cm::NodeTimer kind, Duration after);
    void cancel_phase_timer(cm::Node& node);
    void arm_stream_timer(Instant now, const cm::NodeRef& node, Instant at);
    void cancel_stream_timer(cm::Node& node);

    // ---- invariants (check.cpp) ----
    // What every handler leaves true of a node (sequence order, table membership, buffer
    // bounds, timers); asserted in debug and sanitizer builds, nothing in release ones.
#if IWCM_CHECK_INVARIANTS
    void check_node(const cm::Node& node) const;
#else
    void check_node(const cm::Node&) const {}
#endif
    // check_node() on a handler's entry and again on its way out, whichever return it takes.
    // The caller's NodeRef keeps the node alive for the scope.
    class CheckScope {
    public:
        CheckScope(const Impl& impl, const cm::Node& node) : impl_(impl), node_(node) {
            impl_.check_node(node_);
        }
        ~CheckScope() { impl_.check_node(node_); }
        CheckScope(const CheckScope&) = delete;
        CheckScope& operator=(const CheckScope&) = delete;

    private:
        const Impl& impl_;
        const cm::Node& node_;
    };

    // ---- the sink's contract ----
    // A StreamSink runs inside receive() and must not call into the core
    // (include/iwcm/stream_sink.hpp): the frame's handling is half done, its scratch state
    // live. in_sink is true while one runs; every command of Core asserts it is false.
    bool in_sink = false;
    void enter_command() const {
        IWCM_ASSERT(!in_sink && "a StreamSink called into the core");
    }
    class SinkScope {
    public:
        explicit SinkScope(Impl& impl) : impl_(impl) {
            IWCM_ASSERT(!impl_.in_sink);
            impl_.in_sink = true;
        }
        ~SinkScope() { impl_.in_sink = false; }
        SinkScope(const SinkScope&) = delete;
        SinkScope& operator=(const SinkScope&) = delete;

    private:
        Impl& impl_;
    };

    // ---- lifetime and events (core.cpp) ----
    // Inline (forced: the link-time inliner kept it out of line at 16 call sites): every
    // handler changes a state, eight times per setup.
    [[gnu::always_inline]] void set_state(cm::Node& node, CmState to) {
        const CmState from = node.state;
        if (from == to) return;
        IWCM_ASSERT(kAllowedFrom[static_cast<std::size_t>(from)].contains(to));
        node.state = to;
        // A node that leaves the setup for a close (or CLOSED), not for ESTABLISHED, failed.
        if (cm::kSetupStates.contains(from) && !cm::kSetupStates.contains(to) &&
            to != CmState::kEstablished)
            count_failure(node);
        if (trace) trace_state(node, from, to);
    }
    // The transitions a node may make, by the state it leaves (core.cpp, allowed_from).
    static const std::array<CmStateSet, kCmStateCount> kAllowedFrom;
    void trace_state(const cm::Node& node, CmState from, CmState to);
    void release_backlog(cm::Node& node);
    // Ends a node: timers cancelled, out of the table. The node itself goes
    // when its last reference (a queued event, say) goes.
    void close_node(const cm::NodeRef& node);
    // Reset and close, with an event for the application if it owns the node.
    void abort_node(Instant now, const cm::NodeRef& node, EventType type, int status,
                    bool send_rst);
    void start_close(Instant now, const cm::NodeRef& node);
    void enter_time_wait(Instant now, const cm::NodeRef& node);
    void push_event(const cm::NodeRef& node, EventType type, int status,
                    std::span<const std::byte> pdata = {});
    // A terminal event for an application that owns the node; its handle
    // ends here (the queued event keeps the node until it is polled).
    void end_for_app(const cm::NodeRef& node, EventType type, int status,
                     std::span<const std::byte> pdata = {});
    bool is_local_addr(const IpAddr& addr) const {
        return local_vlan(addr) != kNotLocal;
    }
    void drop(Instant now, DropReason reason, const cm::Node* node, wire::Bytes frame);
    // Inline: without a trace hook (the common case) a frame costs one test.
    void trace_frame(TraceRecord::Kind kind, Instant now, const cm::Node* node, wire::Bytes frame) {
        if (trace) trace_frame_hooked(kind, now, node, frame);
    }
    void trace_frame_hooked(TraceRecord::Kind kind, Instant now, const cm::Node* node,
                            wire::Bytes frame);
    static void on_node_destroyed(void* self, cm::Node& node);

    CoreConfig cfg;
    Stats stats;
    cm::NodePool pool;
    cm::ConnTable table;
    cm::NodeTimers timers;
    std::vector<cm::NodeRef> app_refs;  // by node index: the application's handle
    cm::Listeners listeners;            // and the SYN-cookie keys (listeners.hpp)
    struct LocalAddress {
        IpAddr addr;
        std::uint16_t vlan = kNoVlan;  // the VLAN it lives on
    };
    std::vector<LocalAddress> addresses;

    // Frames out: to the wire, to ourselves, and the ACKs deferred to the next poll.
    cm::TxQueue tx;
    cm::StreamHome stream_home{tx};  // every NodeStream's
    bool in_loopback = false;
    // The frame being handled (rx_context.hpp).
    cm::RxContext rx_ctx;

    // Events not yet polled (event_queue.hpp).
    cm::EventQueue events;
    cm::NodeRef current_node;                  // the last polled event's node
    std::span<const std::byte> current_pdata;  // and its private data, in `events`

    TraceHook trace;
    Instant now_{};  // the instant of the call in progress (for traces)
    std::uint16_t next_port = 49152;
    // Challenge ACKs: the second being counted and what is left of its budget.
    std::int64_t challenge_second = -1;
    std::uint32_t challenge_budget = 0;
    std::vector<std::byte> scratch;  // frame building
};

}  // namespace iwcm
