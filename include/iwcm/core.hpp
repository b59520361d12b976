// iwcm::Core: one iWARP connection manager, sans-I/O.
//
// Read first: docs/design.md ("Sans-I/O surface"), then the quinn-proto style this
// follows: the core reads no clock and touches no socket. It is driven by
//   receive(now, frame)   an Ethernet frame that arrived,
//   on_timer(now)         time has reached next_deadline(),
//   commands              listen, connect, accept, reject, disconnect, ...
// and it answers through
//   poll_transmit()       Ethernet frames to put on the wire, in order,
//   poll_event()          events for the application, in order,
//   next_deadline()       when on_timer() wants to be called next.
// Nothing is ever called back from inside a handler except the trace hook,
// which only observes, and a stream's sink (set_stream_sink); neither may
// call into the core.
//
// One core owns its connections and is not thread-safe; scale by running one
// core per thread and steering frames by 4-tuple.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>

#include "iwcm/address.hpp"
#include "iwcm/config.hpp"
#include "iwcm/errors.hpp"
#include "iwcm/events.hpp"
#include "iwcm/result.hpp"
#include "iwcm/stats.hpp"
#include "iwcm/stream_sink.hpp"
#include "iwcm/time.hpp"

namespace iwcm {

template <class T>
using Result = Expected<T, ApiError>;

struct ListenParams {
    // An unspecified address (0.0.0.0 or ::) listens on every local address
    // of that family.
    Endpoint local;
    // As listen(2)'s: connect requests the application has not answered, with half-open
    // connections beside them; silent ones (TCP up, no MPA request) are bounded apart
    // (CoreConfig::silent_limit). 0: CoreConfig::default_backlog.
    std::uint32_t backlog = 0;
    // kNoVlan: as irdma_find_listener, a specific address's listener serves
    // that address's VLAN and a wildcard one every local address, each on its
    // own VLAN. Another id narrows the listener to that VLAN (for a specific
    // address it must be the address's VLAN).
    std::uint16_t vlan = kNoVlan;
    // IP TOS (DSCP << 2 | ECN) of the listener's connections; unset:
    // CoreConfig::tos. A passive connection uses the larger of this and the
    // TOS of the SYN that opened it (irdma_make_cm_node).
    std::optional<std::uint8_t> tos{};
};

struct ConnectParams {
    Endpoint local;  // port 0: an ephemeral port is chosen
    Endpoint remote;
    MacAddr remote_mac;            // resolved by the I/O layer (ARP / ND) beforehand
    std::uint16_t vlan = kNoVlan;  // kNoVlan: the local address's VLAN; else it must be that one
    std::optional<std::uint8_t> tos{};  // IP TOS of the connection; unset: CoreConfig::tos
    std::span<const std::byte> private_data;
    std::uint16_t ird = 1;          // responder resources
    std::uint16_t ord = 1;          // initiator depth
    std::uint8_t mpa_revision = 0;  // 0: CoreConfig::mpa.revision
};

struct AcceptParams {
    std::span<const std::byte> private_data;
    std::uint16_t ird = 1;
    std::uint16_t ord = 1;
};

enum class DisconnectMode : std::uint8_t { kGraceful, kAbortive };

// Who carries the bytes of a connection after handoff().
enum class HandoffMode : std::uint8_t {
    // The core keeps TCP for the connection's whole life: send() / recv()
    // carry a byte stream (retransmission, congestion and flow control,
    // reassembly), and FIN, RST and close happen at the stream's sequence
    // numbers. This is what a userspace data path (src/rdma) runs on.
    kStream,
    // The data path takes TCP over from the context, as the irdma hardware
    // does: the core stops retransmitting, drops payload
    // (DropReason::kDataAfterHandoff), and still answers FIN and RST at the
    // sequence numbers of the hand-off.
    kExternal,
};

struct HandoffParams {
    HandoffMode mode = HandoffMode::kStream;
    // kStream: this connection's stream settings; unset: CoreConfig::stream.
    std::optional<StreamConfig> stream{};
};

// A connection's byte stream as seen from the application.
struct StreamInfo {
    std::size_t send_space = 0;  // what send() would take now
    std::size_t queued = 0;      // unsent plus unacknowledged bytes
    std::size_t readable = 0;    // in-order bytes recv() would return
    // The most payload one segment carries (the peer's MSS, bounded by our
    // MTU): send_record() cuts records longer than this.
    std::uint16_t mss = 0;
    std::uint32_t snd_una = 0;
    std::uint32_t snd_nxt = 0;
    std::uint32_t rcv_nxt = 0;
    std::uint32_t snd_wnd = 0;  // the peer's window, bytes
    std::uint32_t rcv_wnd = 0;  // ours, bytes
    std::uint32_t cwnd = 0;
    std::uint32_t ssthresh = 0;
    Duration srtt{};  // 0 before the first sample
    Duration rto{};
    std::uint64_t retransmitted_segments = 0;
    bool fin_received = false;  // the peer sends nothing more
    // Bytes copied (docs/perf.md "Copies"): into the send buffer, from it
    // into frames (retransmissions too), into the receive buffer; and the
    // bytes a sink took in order without the last copy (set_stream_sink).
    std::uint64_t copied_in = 0;
    std::uint64_t copied_to_frames = 0;
    std::uint64_t copied_received = 0;
    std::uint64_t sunk = 0;
    // Data bytes queued on the stream since the hand-off (its unacknowledged
    // bytes included), and how many of them the peer acknowledged.
    std::uint64_t written = 0;
    std::uint64_t acked = 0;
    std::uint32_t by_reference = 0;  // unacknowledged bytes sent from the caller's memory
};

// Where the data path starts after a peer-to-peer RTR (RFC 6581 section 6). The
// RTR is the first message of its queue (RFC 5041 section 5): a SEND RTR takes MSN 1
// of queue 0, a READ RTR MSN 1 of queue 1 (a WRITE RTR is tagged and takes none), so
// the data path sends or expects MSN 2 there next. The peer's READ RTR was answered
// by the CM with a zero-length Read Response as it read it; our own READ RTR's
// response may still be on its way (the CM leaves every FPDU but a TERMINATE to the
// data path): the data path takes it without a completion and counts it against
// its ORD until it comes.
struct RtrStart {
    std::uint32_t tx_msn_send = 1;   // the MSN of our first Send
    std::uint32_t rx_msn_send = 1;   // the MSN of the peer's first Send
    std::uint32_t tx_msn_rreq = 1;   // the MSN of our first Read Request
    std::uint32_t rx_msn_rreq = 1;   // the MSN of the peer's first Read Request
    bool read_response_due = false;  // our READ RTR's Read Response has not been read
};

// What the data path needs to take an established connection over, as the
// irdma driver fills the hardware queue pair's TCP context.
struct HandoffContext {
    Endpoint local;
    Endpoint remote;
    MacAddr local_mac;
    MacAddr remote_mac;
    std::uint16_t vlan = kNoVlan;
    std::uint8_t ttl = 0;
    std::uint8_t tos = 0;
    std::uint8_t pcp = 0;  // 802.1Q priority the frames carry (with a VLAN)
    std::uint32_t snd_nxt = 0;
    std::uint32_t snd_una = 0;
    std::uint32_t rcv_nxt = 0;
    std::uint32_t snd_wnd = 0;    // peer's window, unscaled bytes
    std::uint32_t rcv_wnd = 0;    // our window, bytes
    std::uint8_t snd_wscale = 0;  // peer's shift
    std::uint8_t rcv_wscale = 0;  // our shift
    std::uint16_t mss = 0;        // peer's MSS (what we may send)
    MpaInfo mpa;                  // negotiated
    RtrStart rtr_start;           // the RTR's marks on the untagged queues
    bool initiator = false;
    // Bytes the peer sent after its MPA frame (or RTR) that the core received
    // but that belong to the data path. Valid until the next core call.
    std::span<const std::byte> pending_rx;
    // kExternal: bytes of ours (an MPA frame, an RTR) that the peer's window has
    // not let out yet, [snd_nxt - size, snd_nxt): the data path sends them before
    // its own. Set by the call that hands off; valid until the next core call.
    std::span<const std::byte> pending_tx;
};

// A frame to send and the flow hash of its TCP 4-tuple (Core::poll_transmit_hashed).
struct Transmit {
    std::span<const std::byte> frame;
    std::uint64_t flow_hash = 0;
};

// A frame in parts (Core::poll_transmit_parts): the frame is `headers` followed by the
// `payload` pieces in order (none, or the whole TCP payload).
struct TransmitParts {
    std::span<const std::byte> headers;
    std::span<const std::span<const std::byte>> payload;
    std::uint64_t flow_hash = 0;
    // A stream's segment longer than its MSS (StreamConfig::segment_offload): the MSS, at
    // which a link that segments (TSO, GSO) cuts its payload; 0 for every other frame.
    std::uint16_t segment_size = 0;
    std::size_t payload_size() const {
        std::size_t n = 0;
        for (auto piece : payload) n += piece.size();
        return n;
    }
    std::size_t size() const { return headers.size() + payload_size(); }
};

struct TraceRecord {
    enum class Kind : std::uint8_t { kState, kFrameIn, kFrameOut, kDrop };
    Kind kind = Kind::kState;
    Instant now{};
    ConnHandle conn;
    CmState from = CmState::kUnknown;
    CmState to = CmState::kUnknown;
    DropReason drop = DropReason::kMalformed;
    std::span<const std::byte> frame;
};
using TraceHook = std::function<void(const TraceRecord&)>;

class Core {
public:
    explicit Core(const CoreConfig& config = {});
    ~Core();
    Core(const Core&) = delete;
    Core& operator=(const Core&) = delete;

    // ---- driving ----
    // flow_hash: the frame's flow hash keyed by CoreConfig::flow_key
    // (frame_flow_hash, include/iwcm/shard.hpp), when the driver has it: from
    // steering the frame (a NIC hands its RSS hash so) or from the sending
    // core (Transmit::flow_hash). The connection lookup reuses it. It must be
    // that hash, or the frame may miss its connection.
    void receive(Instant now, std::span<const std::byte> frame,
                 std::optional<std::uint64_t> flow_hash = std::nullopt);
    // receive() for a frame in parts, `headers` followed by the `payload` pieces (as
    // poll_transmit_parts() gives them): the common IPv4 frame is read in place, its payload
    // where it lies (a stream copies it from there, or its sink takes it: a queue pair
    // places Writes, Sends and Read Responses from the pieces); anything else is joined first.
    // Everything must stay valid and unchanged for the call.
    void receive_parts(Instant now, std::span<const std::byte> headers,
                       std::span<const std::span<const std::byte>> payload,
                       std::optional<std::uint64_t> flow_hash = std::nullopt);
    // receive() for a frame whose checksums the link vouches for, so they are not verified:
    // a TAP's frame with VIRTIO_NET_HDR_F_NEEDS_CSUM (the kernel left its TCP checksum
    // unfinished, as it does for its own stack with CHECKSUM_PARTIAL) or DATA_VALID.
    void receive_vouched(Instant now, std::span<const std::byte> frame);
    void on_timer(Instant now);
    // At or before the earliest armed deadline: a node's timers share one wheel entry that
    // only moves earlier, so a wake-up may find nothing due (on_timer() then does nothing).
    // nullopt when nothing is armed.
    std::optional<Instant> next_deadline() const;
    // The next frame to send; the view is valid until the next call of any
    // Core member. std::nullopt when nothing is queued.
    std::optional<std::span<const std::byte>> poll_transmit();
    // The same with the frame's flow hash, keyed by CoreConfig::flow_key. The
    // core knows it without reading the frame (every frame it sends is a TCP
    // segment of a tuple it holds or answers), so a driver steers the frame
    // and hands it to the receiving core without reading its headers, as
    // Linux's loopback carries skb->hash from sender to receiver.
    std::optional<Transmit> poll_transmit_hashed();
    // The same in parts, for a driver that gathers (a writev, a NIC's DMA, a link in
    // memory handing frames to another core): a stream's segment comes as its headers
    // and its payload viewed where it lies, in one piece or several (the send buffer, the
    // caller's bytes given to send_ref, a queue pair's registered memory between an
    // FPDU's header and CRC), not copied; every other frame comes whole in `headers`.
    // Every view is valid until the next call of any member of this core. poll_transmit()
    // and poll_transmit_hashed() copy such a payload into the frame instead, and give no
    // TransmitParts::segment_size: a driver on a link that segments takes frames in parts.
    std::optional<TransmitParts> poll_transmit_parts();
    // The next event; its private-data view is valid until the next call.
    std::optional<Event> poll_event();

    // ---- addresses (local-address up / down) ----
    // An address lives on one VLAN (kNoVlan: untagged): frames to it on any
    // other VLAN are not for us. Its listeners (if it was removed before)
    // serve again, and each hears kAddressUp.
    Result<void> add_address(IpAddr addr, std::uint16_t vlan = kNoVlan);
    // Address down: every connection of the address is reset (the peer gets
    // an RST, the application kDisconnected or a connect failure). Its
    // listeners stay (irdma_if_notify): each hears kAddressDown and serves
    // again once the address is added back. Returns how many connections were
    // torn down.
    Result<std::size_t> remove_address(Instant now, IpAddr addr);
    bool is_local(IpAddr addr) const;

    // ---- commands ----
    Result<ListenHandle> listen(const ListenParams& params);
    // Resets the listener's connections that the application has not accepted.
    Result<void> destroy_listen(Instant now, ListenHandle listener);
    Result<ConnHandle> connect(Instant now, const ConnectParams& params);
    Result<void> accept(Instant now, ConnHandle conn, const AcceptParams& params);
    Result<void> reject(Instant now, ConnHandle conn, std::span<const std::byte> private_data);
    Result<void> disconnect(Instant now, ConnHandle conn, DisconnectMode mode);
    // Tears down every connection of a local address (irdma_cm_teardown_connections).
    std::size_t teardown_connections(Instant now, IpAddr addr);
    // The TCP and MPA context of an established connection. The first call
    // moves it to OFFLOADED, with the mode the parameters name (see
    // HandoffMode); later calls return the context again. In kStream mode
    // the bytes the peer sent after its MPA frames are readable through
    // recv() (pending_rx is empty) and bytes we sent and the peer has not
    // acknowledged yet (an RTR) are the stream's to retransmit, those its
    // window held back the stream's to send.
    Result<HandoffContext> handoff(ConnHandle conn, const HandoffParams& params = {});

    // ---- byte stream (after handoff() in HandoffMode::kStream) ----
    // Queues bytes to send; returns how many were taken (bounded by the send
    // buffer; 0 when it is full). A short count arms one kWritable event for
    // when space frees. kWrongState before the hand-off, after a kExternal
    // one, or once disconnect() closed the sending side.
    Result<std::size_t> send(Instant now, ConnHandle conn, std::span<const std::byte> bytes);
    // send() without the copy into the send buffer (as MSG_ZEROCOPY): the
    // bytes taken are held by reference and every segment, retransmissions
    // too, is written from them. The caller keeps them valid and unchanged
    // until StreamInfo::acked reaches StreamInfo::written as it was right
    // after the call, or until own_send_bytes() (before freeing them early,
    // say), or until the connection's terminal event (the handle goes stale:
    // the core copies what it still has to send, or a reset drops it).
    Result<std::size_t> send_ref(Instant now, ConnHandle conn, std::span<const std::byte> bytes);
    // Queues `record` whole as one record, or nothing: true if taken, false
    // when the send buffer has less room than the record (which arms one
    // kWritable for when that much is free). No TCP segment carries bytes of
    // two records, and a record of at most StreamInfo::mss bytes goes out,
    // and is retransmitted, as exactly one segment (RFC 5044 section 6: one
    // MPA FPDU per segment); a longer one goes in MSS-sized pieces. A
    // zero-window probe may still carry one byte of a record alone.
    // kWrongState as for send(); kInvalidArgument for an empty record or one
    // larger than StreamConfig::send_buffer (it could never be taken).
    Result<bool> send_record(Instant now, ConnHandle conn, std::span<const std::byte> record);
    // The same record given in pieces, gathered into the send buffer with one
    // copy (an FPDU's header, the application's registered memory, its CRC).
    // With `more` (as MSG_MORE) more records follow at once: this one waits
    // in the send buffer, cut into no segment yet, until flush(), a record
    // without `more`, or anything else that makes the stream send (an ACK
    // arriving, a consume); with StreamConfig::segment_offload the records
    // queued together may then leave as one segment.
    // The parts whose bit is set in `by_ref` (part i: bit i) are not copied:
    // the stream sends and resends them from where they are (registered
    // memory), so the caller keeps those bytes valid and unchanged until
    // StreamInfo::acked (or StreamSink::on_acked) passes this record's end,
    // StreamInfo::written as it was right after the call, or until
    // own_send_bytes().
    Result<bool> send_record(Instant now, ConnHandle conn,
                             std::span<const std::span<const std::byte>> parts, bool more = false,
                             std::uint32_t by_ref = 0);
    // Copies the bytes a stream holds by reference (send_record's by_ref)
    // into its send buffer, before the memory they lie in goes away; returns
    // how many it copied. kStaleHandle once the stream is gone (it then
    // holds nothing).
    Result<std::size_t> own_send_bytes(ConnHandle conn);
    // Sends what the stream may send now (the records queued with `more`).
    Result<void> flush(Instant now, ConnHandle conn);
    // The oldest received bytes, in order, without a copy (a prefix of them
    // when the buffer wraps). The view is valid until the next call of any
    // Core member. consume() frees them and may open the window we advertise.
    Result<std::span<const std::byte>> peek(ConnHandle conn) const;
    Result<void> consume(Instant now, ConnHandle conn, std::size_t n);
    // Offers the connection's bytes to `sink` as they arrive in order, while
    // nothing is unread or held out of order (iwcm::StreamSink: what it takes
    // is read at once); nullptr stops it. The sink must outlive the setting.
    Result<void> set_stream_sink(ConnHandle conn, StreamSink* sink);
    // peek + copy + consume; returns the bytes copied (0: nothing readable).
    Result<std::size_t> recv(Instant now, ConnHandle conn, std::span<std::byte> out);
    Result<StreamInfo> stream_info(ConnHandle conn) const;
    Result<CmState> state(ConnHandle conn) const;

    // Sizes the node pool, connection table and timer slabs for `connections`
    // nodes up front, so that setting them up later allocates nothing.
    void reserve(std::size_t connections);

    // ---- observation ----
    const Stats& stats() const;
    const CoreConfig& config() const;
    void set_trace(TraceHook hook);
    std::size_t live_nodes() const;  // nodes not yet destroyed
    // Live nodes other than those in TIME_WAIT: connections whose end still
    // waits on the peer (a FIN to be acknowledged, the peer's FIN, a
    // handshake). A program that exits waits for this to reach 0, not
    // live_nodes() (a stream's TIME_WAIT lasts StreamConfig::time_wait). O(nodes).
    std::size_t open_nodes() const;
    // open_nodes() whose local endpoint is `local` (an unspecified address:
    // any of ours on that port): the connections a listener accepted, which
    // outlive it. O(nodes).
    std::size_t open_nodes_on(const Endpoint& local) const;
    std::size_t pending_timers() const;  // timers armed, all kinds
    std::size_t queued_events() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace iwcm
