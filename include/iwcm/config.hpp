// Configuration of one iwcm::Core. Every default is the irdma driver's value
// unless said otherwise; every value is a policy the user may change.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "iwcm/address.hpp"
#include "iwcm/time.hpp"

namespace iwcm {

// PCP = DSCP / 8: the class-selector rule (see CoreConfig::dscp_to_pcp).
constexpr std::array<std::uint8_t, 64> default_dscp_to_pcp() {
    std::array<std::uint8_t, 64> map{};
    for (std::size_t dscp = 0; dscp < map.size(); ++dscp)
        map[dscp] = static_cast<std::uint8_t>(dscp / 8);
    return map;
}

struct RetransmitConfig {
    // 8 retransmissions, the first 1 s after the send, each wait doubling,
    // capped at 12 s (irdma: IRDMA_DEFAULT_RETRANS, IRDMA_RETRY_TIMEOUT,
    // IRDMA_MAX_TIMEOUT).
    std::uint8_t max_retrans = 8;
    Duration initial = std::chrono::seconds(1);
    Duration cap = std::chrono::seconds(12);
};

// RTR (ready-to-receive) message types of RFC 6581, as a bit set.
namespace rtr {
constexpr std::uint8_t kSend = 0x1;   // zero-length SEND
constexpr std::uint8_t kWrite = 0x2;  // zero-length RDMA WRITE
constexpr std::uint8_t kRead = 0x4;   // zero-length RDMA READ
constexpr std::uint8_t kAll = 0x7;
}  // namespace rtr

struct MpaConfig {
    // The highest revision spoken (1 or 2): an initiator sends it; a responder
    // answers at the lower of the request's revision and this one.
    std::uint8_t revision = 2;
    // Ask for CRC32c on FPDUs. RFC 5044 section 7.1: CRC is used if either side asks.
    bool crc = false;
    // Revision 2: the peer-to-peer bit (A). With it the initiator sends an RTR
    // and the responder reports ESTABLISHED only when the RTR arrives.
    bool peer_to_peer = true;
    // RTR types offered (initiator) or accepted (responder): a set of rtr::k*.
    std::uint8_t rtr_types = rtr::kAll;
    // The most IRD / ORD this side can honour (irdma's max_hw_ird / max_hw_ord).
    // The IRD/ORD given to connect() and accept() is clamped to them (0x3FFF,
    // "no value", passes), and relaxed negotiation raises our IRD toward the
    // peer's ORD up to max_ird. A READ RTR needs one read each way: a responder
    // that picks it says IRD >= 1, an initiator that gets it uses ORD >= 1; with
    // max_ird 0 a responder never picks it, with max_ord 0 an initiator never
    // offers it.
    std::uint16_t max_ird = 128;
    std::uint16_t max_ord = 128;
    // Fail the negotiation instead of adjusting IRD/ORD (RFC 6581 section 7).
    bool strict_ird_ord = false;
    // A revision-2 initiator whose request is answered by a reset retries once
    // at revision 1 on a new TCP connection (irdma and cxgb4 do this).
    bool fallback_to_v1 = true;
    // How long an initiator waits for the reply once its request is sent,
    // and a responder for the request once TCP is up (irdma: MPA_V2 timers;
    // siw uses 10 s initiator / 5 s responder). A responder waiting for the
    // application's accept is bounded by accept_timeout.
    Duration request_timeout = std::chrono::seconds(10);
    Duration reply_timeout = std::chrono::seconds(10);
    Duration accept_timeout = std::chrono::seconds(30);
    // With the peer-to-peer bit: how long the responder waits for the RTR.
    Duration rtr_timeout = std::chrono::seconds(10);
    // Without it (revision 1, or 2 without the A bit) RFC 5044 section 7.1 has the
    // responder "receive and validate at least one FPDU before sending any". A program
    // whose server speaks first (ucmatose) would then wait for ever, so a stream handed
    // off at the responder holds its first data until the initiator's first byte arrives
    // or this long after ESTABLISHED, whichever comes first. siw's initiator is why: it
    // reads its MPA reply with room for 4 bytes more and ends the connection ("extra
    // data") when an FPDU was already behind the reply. 0: send at once.
    Duration responder_send_wait = std::chrono::milliseconds(100);
    // The initiator's first data waits this long after
    // ESTABLISHED, or until the responder's first byte arrives. Linux siw as the
    // responder sends its reply and only then hooks the socket to its receive path; an
    // FPDU that arrives in between sits unread until more data comes, and a program
    // whose first Send waits for an answer (perftest's exchange) hangs. An RTR would be
    // such an FPDU too, so an initiator that waits offers no peer-to-peer mode (no A bit,
    // no RTR). 0 (the default): at once, as every responder that reads its socket before
    // it replies allows.
    Duration initiator_send_wait = Duration::zero();
};

// The byte stream of a connection handed off with HandoffMode::kStream (the
// core keeps TCP; see docs/design.md "Byte stream").
struct StreamConfig {
    // The most bytes the application may queue: unsent plus unacknowledged.
    std::uint32_t send_buffer = 256 * 1024;
    // The most bytes held for the reader, in order and out of order; the
    // window advertised is what is free of it.
    std::uint32_t recv_buffer = 256 * 1024;
    // RFC 6298: the first RTO, its floor and its ceiling. RFC 6298 section
    // 2.4 asks for a 1 s floor; like Linux we use 200 ms (a LAN's RTT is
    // microseconds). 2.5 allows a ceiling of at least 60 s.
    Duration rto_initial = std::chrono::seconds(1);
    Duration rto_min = std::chrono::milliseconds(200);
    Duration rto_max = std::chrono::seconds(60);
    // Consecutive expiries of the RTO (or unanswered zero-window probes)
    // before the connection is given up (Linux's tcp_retries2).
    std::uint8_t max_retransmits = 15;
    // Segmentation offload (segment_offload, below) for a link that cuts a long
    // segment every MSS bytes (Linux's GSO, a NIC's TSO): a long segment joins
    // only pieces of exactly one MSS but its last, so that every record (MPA
    // FPDU) still starts a segment of the wire. Plain bytes are MSS-sized
    // pieces anyway; records (each at most an MSS, or a longer one's MSS-sized
    // pieces) are joined while each is a whole MSS, and the first shorter one
    // ends the segment.
    bool offload_mss_pieces = false;
    // Segmentation offload, as Linux's TSO/GSO and GRO do on loopback: the
    // most payload one segment of new data may carry when the link takes
    // segments longer than the MSS (0: off, every segment is at most an MSS).
    // For a link between two cores in memory (both ends this library, frames
    // up to 64 KiB), and for a link that cuts long segments at the MSS itself
    // (a TAP with its virtio-net header, as a NIC's TSO; with
    // offload_mss_pieces, TransmitParts::segment_size); any other wire needs
    // 0. A longer segment is what MSS-sized segments would carry, joined: a
    // multiple of the MSS of plain bytes, or whole records (a record longer
    // than the MSS as its MSS-sized pieces); the receiver takes it as the run
    // of segments it stands for (as GRO does). Retransmissions stay at the
    // MSS. Rounded down to a multiple of the MSS, at most 65000; below two
    // MSS it is off.
    std::uint16_t segment_offload = 0;
    // RFC 6928: the initial congestion window in segments.
    std::uint32_t initial_window_segments = 10;
    // Delayed ACK (RFC 9293 section 3.8.6.3): every second full-sized
    // segment is acknowledged at once, others within this delay. 0: at once.
    Duration ack_delay = std::chrono::milliseconds(40);
    // Keepalive (RFC 9293 section 3.8.4), off by default: after `idle`
    // without a segment from the peer, a probe every `interval`; `probes`
    // unanswered ones give the connection up.
    // TIME_WAIT of a stream: 2 * rto_max, so that it outlasts a lost
    // retransmission of the peer's FIN at the longest RTO (a retransmitted
    // FIN restarts it, RFC 9293); otherwise a lost last ACK turns the peer's
    // clean close into a reset. (A connection never handed off as a stream
    // keeps the driver's close_delay.)
    Duration time_wait = std::chrono::seconds(120);
    bool keepalive = false;
    Duration keepalive_idle = std::chrono::seconds(7200);
    Duration keepalive_interval = std::chrono::seconds(75);
    std::uint8_t keepalive_probes = 9;
};

struct CoreConfig {
    MacAddr mac{{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}};
    std::uint16_t mtu = 1500;
    // Receive window 64240 scaled by 2 (irdma: IRDMA_CM_DEFAULT_RCV_WND_SCALED,
    // IRDMA_CM_DEFAULT_RCV_WND_SCALE).
    std::uint32_t rcv_wnd = 64240;
    std::uint8_t rcv_wscale = 2;
    std::uint8_t ttl = 64;
    // IP TOS of connections that name none (ConnectParams / ListenParams::tos).
    std::uint8_t tos = 0;
    // 802.1Q priority (PCP) of a tagged connection's frames, by the DSCP of its
    // TOS (tos >> 2), as irdma derives the user priority from the TOS. The
    // default is the class-selector rule many switches use: PCP = DSCP / 8
    // (CS0..CS7 -> 0..7; EF 46 -> 5; AF41 34 -> 4). Untagged frames carry none.
    std::array<std::uint8_t, 64> dscp_to_pcp = default_dscp_to_pcp();
    RetransmitConfig retransmit;
    // TIME_WAIT and delayed close (irdma: a CLOSE entry is due HZ / 10 later, 100 ms).
    Duration close_delay = std::chrono::milliseconds(100);
    Duration timer_granularity = std::chrono::milliseconds(1);
    // A listener's backlog (ListenParams::backlog, 0: this) bounds what listen(2)'s does:
    // connect requests the application has not answered (kConnectRequest polled or not,
    // accept() or reject() not yet called), and beside them half-open connections. Over it
    // a SYN gets a cookie (syn_cookies); with as many requests unanswered, none.
    std::uint32_t default_backlog = 256;
    // Silent connections of one listener at most: TCP up, no whole MPA request yet
    // (MPAREQ_WAIT). They do not count in the backlog, so that a peer holding connections
    // open without speaking keeps no SYN from being answered; at this limit a new one sheds
    // the one silent longest with a reset (Stats::silent_shed). Every client sends its
    // request within a round trip of the handshake (ours with the handshake's ACK), so only
    // connections that outlive this many newer ones are shed; the rest are bounded as ever
    // by mpa.request_timeout. 0: the listener's backlog.
    std::uint32_t silent_limit = 0;
    // After destroy_listen, SYNs to the listener's endpoint go unanswered for this long
    // (DropReason::kListenerGrace: the peer retransmits) instead of being reset, unless a
    // listener takes the endpoint again. A program that closes one listener and opens the
    // next on the same port (perftest's -R: one connection to exchange parameters, then
    // one for the test) then keeps a client that was quicker than its second listen. 0:
    // reset at once, as RFC 9293 and the kernel do. The runtime sets it (RuntimeConfig).
    Duration listener_grace = Duration::zero();
    // The client's side of the same race: a connect() whose SYN is answered by a reset
    // sends it again 10 ms later, then 20, 40 ms ... (at most 7 times) while the waits add
    // up to no more than this, and reports kRejected (-ECONNREFUSED) only after the last.
    // A Linux soft-iWARP (siw) server, whose kernel resets a SYN that comes before the
    // program's next rdma_listen, then keeps a client as quick as ours. 0: the reset ends
    // the connect at once, as RFC 9293 and the kernel do. The runtime sets it with
    // `--settle` (RuntimeConfig::settle_ms).
    Duration connect_refused_grace = Duration::zero();
    std::uint32_t max_connections = 1u << 22;
    // Events waiting to be polled before new connections are refused: a SYN
    // to a listener is dropped (DropReason::kEventQueueFull) and connect()
    // fails with ApiError::kEventQueueFull. Connections already known to the
    // application still get their events past this limit (two at most each).
    std::size_t max_events = 1u << 20;
    // RFC 6528 initial sequence numbers: the key of the keyed hash.
    std::array<std::uint8_t, 16> isn_secret{};
    // The smallest MSS a peer may make us use. A SYN announcing less is
    // raised to it; without the option the peer is assumed to take 536
    // (IPv4) or 1220 (IPv6), RFC 9293 section 3.7.1. The effective MSS (the
    // most we put in a segment, and HandoffContext::mss) is the smaller of
    // ours (mtu - 40 or - 60) and the peer's after this floor. 536 (not
    // Linux's TCP_MIN_MSS of 88): every IPv4 host must take a 576-byte
    // datagram (RFC 1122 section 3.3.2), and a tiny MSS only multiplies the
    // segments a data path has to send. Values below 88 act as 88.
    std::uint16_t min_peer_mss = 536;
    // SYN cookies (RFC 4987 section 3.6): a SYN for a listener whose backlog
    // is full is answered statelessly; the node is made when the ACK returns
    // a valid cookie. Off: such SYNs are dropped, as the irdma driver does.
    bool syn_cookies = true;
    // The cookie's key rotates every period; a cookie is taken during the
    // period that made it and the next one (between 1 and 2 periods). Each
    // period's key is SipHash-2-4 under this secret of isn_secret and the
    // period's number, so either secret being random makes cookies unforgeable.
    std::array<std::uint8_t, 16> syn_cookie_secret{};
    Duration syn_cookie_period = std::chrono::seconds(64);
    // RFC 5961 section 7: challenge ACKs (for an in-window RST not at
    // rcv_nxt, or a SYN in a synchronised state) at most this many per second
    // per core; the excess is not sent and is counted. The budget of each
    // second is drawn between half the limit and the limit (keyed by
    // isn_secret) so that it cannot serve as the side channel of
    // CVE-2016-5696. Linux's tcp_challenge_ack_limit was 1000; 0: no limit.
    std::uint32_t challenge_ack_limit = 1000;
    // Checksum offload, as Linux's loopback device does (CHECKSUM_PARTIAL on
    // transmit, no verification on receive): the IPv4 header checksum and the
    // TCP checksum are written as zero and not verified on arrival; every
    // other field and check is as without it. Only for a link between two
    // cores of this library in memory, which cannot corrupt a frame: every
    // host on a real wire (TAP, AF_XDP) refuses it, and so does the simulator
    // on a link that corrupts frames. (Linux computes the IPv4 header checksum
    // even on loopback; this skips it too, both ends being ours.)
    bool checksum_offload = false;
    // The link finishes the TCP checksum, as a NIC with checksum offload does (Linux's
    // CHECKSUM_PARTIAL; a TAP device with the virtio-net header, VIRTIO_NET_HDR_F_NEEDS_CSUM):
    // a TCP frame leaves with the IPv4 header checksum written and only the pseudo-header's
    // sum in the TCP checksum field (wire::Checksums::kPartial), and its driver tells the link
    // so (TransmitParts). On arrival every checksum is verified, except in a frame the driver
    // hands with Core::receive_vouched (the link vouches for it). Only for a driver whose
    // device finishes checksums (FrameDevice::offloads); false: every checksum is computed.
    bool checksum_partial = false;
    MpaConfig mpa;
    // Sharding (include/iwcm/shard.hpp): the core of shard `shard_index` of
    // `shard_count` takes an ephemeral port only if the flow hash of the
    // 4-tuple it makes (keyed by flow_key) belongs to its shard, so that the
    // frames of its connections are steered back to it. A driver that hands
    // receive() each frame's flow hash computes it with flow_key too.
    std::uint32_t shard_index = 0;
    std::uint32_t shard_count = 1;
    std::uint64_t flow_key = 0;
    // When set, connect() also takes an ephemeral port only if the filter
    // accepts the 4-tuple it makes. Unset (and one shard): every free port
    // of 49152..65535 is taken in turn.
    std::function<bool(const Endpoint& local, const Endpoint& remote)> port_filter;
    // Byte streams after hand-off (per connection: HandoffParams). Before
    // the hand-off a connection buffers at most rcv_wnd bytes the peer sent
    // after its MPA frames: the window it advertises shrinks as they wait.
    StreamConfig stream;
    // An open stream gone idle (nothing queued, in flight, unread or owed; no FIN) is folded
    // at its timer's next expiry, this long after it went idle at the latest (sooner when an
    // RTO or delayed-ACK deadline armed before is still due): its buffers, queues and timers
    // go and about a third of its memory stays, until a segment, a call or its keepalive
    // makes it again, unchanged (docs/design.md "Byte stream"). Duration::max(): never.
    Duration stream_fold_after = std::chrono::seconds(1);
};

}  // namespace iwcm
