// iwcm::rdma: the data path's application interface, shaped after libibverbs.
//
// Read first: docs/design.md "Data path", RFC 5040 (RDMAP) sections 4-5, RFC 5041
// (DDP) sections 3-5, RFC 5044 (MPA) section 6. A libibverbs user will know the
// parts: memory regions registered from the application's memory (one STag
// serves as lkey and rkey, its tagged offset is the memory's address, as siw
// does), queue pairs, completion queues, work requests and work completions
// with statuses named after ibv_wc_status.
//
// Like the Core, a Device is sans-I/O: it reads no clock and owns no socket.
// It carries each queue pair's RDMA messages as MPA FPDUs over its
// connection's byte stream (Core::handoff in HandoffMode::kStream), so it is
// driven by the same loop that drives the Core:
//   - every Event that Core::poll_event() returns goes to Device::on_event()
//     first; it returns true when the event was the data path's (the bytes of
//     a queue pair's connection) and the application must not act on it;
//   - post_send / post_recv queue work, poll_cq returns completions,
//     poll_qp_event reports a queue pair's end (disconnect or TERMINATE).
// A Device and its Core belong to one thread. Memory that is registered or
// named by a posted work request must stay valid until it is deregistered or
// the work request completes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "iwcm/core.hpp"

namespace iwcm::rdma {

enum class VerbsError : std::uint8_t {
    kStaleHandle,      // the handle names a memory region, queue or QP that is gone
    kInvalidHandle,    // never issued by this device
    kInvalidArgument,  // a parameter out of range (empty region, zero capacity, ...)
    kWrongState,       // the QP is not in RTS (it ended), or the connection cannot be bound
    kQueueFull,        // max_send_wr / max_recv_wr work requests are outstanding
    kTooManySge,       // more than max_sge scatter/gather entries
    kLocalProtection,  // an SGE outside its memory region, or an lkey without the access needed
    kCoreError,        // the Core refused a call made for the QP (see the Core's ApiError)
};
std::string_view to_string(VerbsError error) noexcept;

template <class T>
using VResult = Expected<T, VerbsError>;

// ibv_access_flags. Local read is always allowed.
enum Access : std::uint32_t {
    kAccessLocalWrite = 1u << 0,
    kAccessRemoteWrite = 1u << 1,
    kAccessRemoteRead = 1u << 2,
    kAccessMwBind = 1u << 3,  // IBV_ACCESS_MW_BIND: memory windows may be bound to it
};

struct MrHandle {
    std::uint32_t index = UINT32_MAX;
    std::uint32_t generation = 0;
    friend constexpr bool operator==(MrHandle, MrHandle) = default;
};
// A memory window (ibv_alloc_mw, type 2B).
struct MwHandle {
    std::uint32_t index = UINT32_MAX;
    std::uint32_t generation = 0;
    friend constexpr bool operator==(MwHandle, MwHandle) = default;
};
struct CqHandle {
    std::uint32_t index = UINT32_MAX;
    std::uint32_t generation = 0;
    friend constexpr bool operator==(CqHandle, CqHandle) = default;
};
// A shared receive queue (ibv_create_srq): receives that any QP made with it takes.
struct SrqHandle {
    std::uint32_t index = UINT32_MAX;
    std::uint32_t generation = 0;
    bool valid() const { return index != UINT32_MAX; }
    friend constexpr bool operator==(SrqHandle, SrqHandle) = default;
};

struct SrqAttr {
    std::uint32_t max_wr = 64;  // receives posted and not yet taken by a QP, at most
    std::uint32_t max_sge = 4;  // SGEs of a receive, at most 6
    std::uint32_t pd = 0;       // its receives' regions and its QPs' domain
};

struct SrqInfo {
    std::uint32_t max_wr = 0;
    std::uint32_t max_sge = 0;
    std::uint32_t posted = 0;  // receives waiting for a QP
    std::uint32_t limit = 0;   // armed limit (0: not armed)
};
struct QpHandle {
    std::uint32_t index = UINT32_MAX;
    std::uint32_t generation = 0;
    friend constexpr bool operator==(QpHandle, QpHandle) = default;
};

// What reg_mr returns: the STag is both the lkey and the rkey; the region's
// tagged offsets run from `addr` (the memory's address) for `length` bytes.
// The STag's index and key are drawn at random (src/rdma/mr_table.hpp): a
// peer learns an STag only when it is given one. It serves only queue pairs
// of the region's protection domain `pd`.
struct MemoryRegion {
    MrHandle handle;
    std::uint32_t lkey = 0;
    std::uint32_t rkey = 0;
    std::uint64_t addr = 0;
    std::size_t length = 0;
    std::uint32_t access = 0;
    std::uint32_t pd = 0;
};

// What alloc_mw returns: a type 2B window of domain `pd`, invalid until a kBindMw work
// request binds it under an STag with the index part of `rkey` (the key byte is the
// binder's choice, ibv_inc_rkey's). Bound, it gives the peer of the binding QP (and
// no one else) remote access to a range of a region, until it is invalidated
// (kLocalInvalidate, or the peer's Send with Invalidate) and may be bound again.
struct MemoryWindow {
    MwHandle handle;
    std::uint32_t rkey = 0;
    std::uint32_t pd = 0;
};

// A scatter/gather entry (ibv_sge): `length` bytes at address `addr` inside
// the memory region whose lkey is `lkey`.
struct Sge {
    std::uint64_t addr = 0;
    std::uint32_t length = 0;
    std::uint32_t lkey = 0;
};

enum class WrOpcode : std::uint8_t {
    kSend,       // IBV_WR_SEND
    kRdmaWrite,  // IBV_WR_RDMA_WRITE
    // IBV_WR_RDMA_READ into its SGEs in order. A Read Request names one sink, so a Read
    // of several SGEs asks with one request per SGE (each an ORD slot; the source offset
    // follows on) and completes when the last is answered.
    kRdmaRead,
    // IBV_WR_SEND_WITH_INV: a Send that invalidates the peer's STag `invalidate_rkey`
    // (RFC 5040 section 6.10) before its receive completes there.
    kSendWithInvalidate,
    // IBV_WR_LOCAL_INV: our own STag `invalidate_rkey` (a region of the QP's PD, or a
    // window bound on this QP) names its memory no more, in send-queue order; no SGEs,
    // nothing on the wire.
    kLocalInvalidate,
    // IBV_WR_BIND_MW: binds the window `bind.mw` under the STag `rkey` to `bind`'s range,
    // in send-queue order; no SGEs, nothing on the wire. A failure completes with
    // kMwBindErr and ends the QP.
    kBindMw,
};

// The range a kBindMw work request binds a window to (ibv_mw_bind_info): `length`
// bytes from tagged offset `addr` of the region whose lkey is `lkey` (registered with
// kAccessMwBind), with the remote rights `access` (kAccessRemoteRead,
// kAccessRemoteWrite; remote write needs the region's local write).
struct MwBind {
    MwHandle mw;
    std::uint32_t lkey = 0;
    std::uint64_t addr = 0;
    std::uint32_t length = 0;
    std::uint32_t access = 0;
};

struct SendWr {
    std::uint64_t wr_id = 0;
    WrOpcode opcode = WrOpcode::kSend;
    std::span<const Sge> sg_list;       // copied by post_send
    bool signaled = true;               // IBV_SEND_SIGNALED (ignored with QpAttr::sq_sig_all)
    bool solicited = false;             // IBV_SEND_SOLICITED: Send with Solicited Event
    bool fence = false;                 // IBV_SEND_FENCE: waits until every earlier Read is done
    std::uint64_t remote_addr = 0;      // WRITE / READ: the peer's tagged offset
    std::uint32_t rkey = 0;             // WRITE / READ: the peer's STag
    std::uint32_t invalidate_rkey = 0;  // kSendWithInvalidate: the peer's STag to invalidate;
                                        // kLocalInvalidate: ours
    MwBind bind;                        // kBindMw: the window and its range (STag in rkey)
};

struct RecvWr {
    std::uint64_t wr_id = 0;
    std::span<const Sge> sg_list;  // copied by post_recv
};

// ibv_wc_status, the ones an iWARP QP reports.
enum class WcStatus : std::uint8_t {
    kSuccess,       // IBV_WC_SUCCESS
    kLocLenErr,     // IBV_WC_LOC_LEN_ERR: a received message longer than the posted buffer
    kLocQpOpErr,    // IBV_WC_LOC_QP_OP_ERR
    kLocProtErr,    // IBV_WC_LOC_PROT_ERR: an SGE the region does not allow
    kWrFlushErr,    // IBV_WC_WR_FLUSH_ERR: the QP ended before the request ran
    kRemAccessErr,  // IBV_WC_REM_ACCESS_ERR: the peer refused our STag, bounds or rights
    kRemOpErr,      // IBV_WC_REM_OP_ERR: the peer could not carry the operation out
    kRemInvReqErr,  // IBV_WC_REM_INV_REQ_ERR: the peer found our request invalid
    kMwBindErr,     // IBV_WC_MW_BIND_ERR: a window could not be bound as asked
    kFatalErr,      // IBV_WC_FATAL_ERR
    kGeneralErr,    // IBV_WC_GENERAL_ERR
};
std::string_view to_string(WcStatus status) noexcept;

enum class WcOpcode : std::uint8_t {
    kSend,             // IBV_WC_SEND
    kRdmaWrite,        // IBV_WC_RDMA_WRITE
    kRdmaRead,         // IBV_WC_RDMA_READ
    kRecv,             // IBV_WC_RECV
    kLocalInvalidate,  // IBV_WC_LOCAL_INV
    kBindMw,           // IBV_WC_BIND_MW
};
std::string_view to_string(WcOpcode opcode) noexcept;

struct WorkCompletion {
    std::uint64_t wr_id = 0;
    WcStatus status = WcStatus::kSuccess;
    WcOpcode opcode = WcOpcode::kSend;
    std::uint32_t byte_len = 0;  // kRecv: bytes received; kRdmaRead: bytes read
    QpHandle qp;
    bool solicited = false;  // kRecv: the Send asked for a solicited event
    // kRecv of a Send with Invalidate (IBV_WC_WITH_INV): the STag of ours it invalidated.
    bool with_invalidate = false;
    std::uint32_t invalidated_rkey = 0;
};

struct QpAttr {
    CqHandle send_cq;
    CqHandle recv_cq;
    std::uint32_t max_send_wr = 64;
    std::uint32_t max_recv_wr = 64;
    std::uint32_t max_sge = 4;  // SGEs of a work request, at most 6 (siw's SIW_MAX_SGE)
    // Receives from this shared receive queue instead of the QP's own (post_recv to the
    // QP is then refused); a Send takes the SRQ's oldest receive when it begins.
    SrqHandle srq{};
    bool sq_sig_all = false;  // every send work request completes with a WC
    // The protection domain: the QP's SGEs and the STags its peer names must
    // be of regions registered with the same number.
    std::uint32_t pd = 0;
};

// A TERMINATE message's Terminate Control fields (RFC 5040 section 4.8):
// layer 0 RDMAP, 1 DDP, 2 LLP (MPA); error type and code per layer.
// A received one also carries its raw control word: Linux siw writes the
// word from little-endian bitfields (the layer in the low nibble of the
// first byte, M/D/R in the low bits of the third), and where the word shows
// it (M/D/R bits low, or only the low nibble naming a layer) the fields are
// read siw's way and siw_order is set. Ambiguous words are read the RFC's way.
struct TermInfo {
    std::uint8_t layer = 0;
    std::uint8_t etype = 0;
    std::uint8_t code = 0;
    bool siw_order = false;
    std::uint32_t control = 0;  // received: the first 4 bytes after the DDP header
};
std::string describe(const TermInfo& term);

enum class QpEventType : std::uint8_t {
    // The connection ended (status as Event::status, or -EPROTO when the
    // stream ended inside an FPDU: the peer's last message was cut); WRs flushed.
    kDisconnected,
    kTerminateReceived,  // the peer sent a TERMINATE (term); the connection is closing
    kTerminateSent,      // the stream took ours (term says why); the connection is closing
    // We found an error (term) but our direction of the stream was closed
    // already (the peer's FIN had come and ours followed it): no TERMINATE
    // went out. The connection is closing.
    kTerminateUnsent,
    // A completion found the CQ `cq` full (status -EOVERFLOW; no qp or conn). It is a
    // CQ error, as siw raises IB_EVENT_CQ_ERR, never a silent loss: the CQ takes no
    // completion after it (poll_cq still returns those it holds, then cq_failed() is
    // true), and every QP on it ends with a TERMINATE (RDMAP, local catastrophic error)
    // and flushes its work. It is reported as the CQ fails: before the events of the QPs
    // it ends, and of a QP whose flush overflowed it.
    kCqError,
    // The SRQ `srq` holds fewer receives than the limit armed with arm_srq_limit (no qp
    // or conn; IBV_EVENT_SRQ_LIMIT_REACHED). The limit is disarmed.
    kSrqLimit,
};
std::string_view to_string(QpEventType type) noexcept;

// What a QP's end is to the application: the affiliated asynchronous error the verbs
// raise for it (src/abi raises IBV_EVENT_QP_FATAL or IBV_EVENT_QP_ACCESS_ERR). Decided
// where the end is met, as Linux siw and irdma decide (docs/design.md "The libibverbs
// ABI" has the table):
//   kAccess: our TERMINATE because a check of our memory refused the peer's request
//     (its STag, bounds, rights or domain: a Write's sink, a Read Request's source, a
//     Send with Invalidate's STag, or our own receive or Read sink region);
//   kFatal: any other TERMINATE of ours (the peer's request was invalid, an MPA or CRC
//     error, a local catastrophic error), the peer's TERMINATE, a stream cut inside an
//     FPDU, and a connection lost to a retransmission or keepalive timeout or to its
//     address going;
//   kNone: a graceful close, the application's own abortive close, the peer's reset.
// siw and irdma raise QP_FATAL, not QP_REQ_ERR, for an invalid request (siw's
// siw_send_check_ntoh and siw_write_check_ntoh, irdma's DDP and RDMAP AEs, which take
// IRDMA_QP_EVENT_CATASTROPHIC), and no QP event at all for a reset (siw_qp_llp_close,
// irdma_cm_disconn_true): the reset reaches the application as the connection's end.
enum class QpError : std::uint8_t { kNone, kFatal, kAccess };
std::string_view to_string(QpError error) noexcept;

struct QpEvent {
    QpEventType type = QpEventType::kDisconnected;
    QpHandle qp;
    ConnHandle conn;
    CqHandle cq;    // kCqError only
    SrqHandle srq;  // kSrqLimit only
    int status = 0;
    TermInfo term;
    QpError error = QpError::kNone;  // kDisconnected and the TERMINATE events
};

enum class QpState : std::uint8_t {
    kRts,      // messages flow
    kClosing,  // disconnect asked or TERMINATE exchanged; no new work
    kError,    // the connection is gone; every request was flushed
};

struct QpInfo {
    QpState state = QpState::kRts;
    ConnHandle conn;
    bool crc = false;
    std::uint16_t ird = 0;       // Read Requests we serve at once (negotiated)
    std::uint16_t ord = 0;       // Read Requests we may have outstanding (negotiated)
    std::uint32_t max_fpdu = 0;  // the largest FPDU we send (from the stream's MSS)
    std::uint32_t send_queued = 0;
    std::uint32_t recv_posted = 0;
    std::uint32_t reads_outstanding = 0;
};

struct DeviceConfig {
    std::uint32_t max_mrs = 4096;
    std::uint32_t max_qps = 65536;
    // The secret behind the STags' random parts. Unset, the device draws it
    // from getrandom(2); a simulation sets it for runs that repeat.
    std::optional<std::array<std::uint8_t, 16>> key_secret;
};

class Device {
public:
    // The core must outlive the device: the device is the sink of its queue
    // pairs' streams (Core::set_stream_sink) until it is destroyed.
    explicit Device(Core& core, const DeviceConfig& config = {});
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    // ---- memory ----
    // Registers application memory; access is a set of Access bits, pd the
    // protection domain (any number: regions and QPs of the same number go
    // together; a program with one domain leaves it 0). The memory must
    // outlive the registration.
    VResult<MemoryRegion> reg_mr(std::span<std::byte> memory, std::uint32_t access,
                                 std::uint32_t pd = 0);
    // The streams send Sends, Writes and Read Responses from the registered
    // memory itself until the peer acknowledges them; deregistering first
    // copies what they still hold of any region into their own buffers, so
    // the memory may go at once (docs/perf.md "Copies").
    // kWrongState while windows are bound to the region.
    VResult<void> dereg_mr(MrHandle mr);
    // Memory windows of domain `pd` (type 2B): bound and invalidated through a QP's
    // send queue (WrOpcode::kBindMw, kLocalInvalidate). Deallocating one that is bound
    // unbinds it.
    VResult<MemoryWindow> alloc_mw(std::uint32_t pd = 0);
    VResult<void> dealloc_mw(MwHandle mw);

    // ---- queues ----
    VResult<CqHandle> create_cq(std::uint32_t capacity);
    VResult<void> destroy_cq(CqHandle cq);  // kWrongState while a QP uses it
    // Shared receive queues: create, destroy (kWrongState while a QP uses it), post a
    // receive, arm the limit event (0 disarms; kSrqLimit once fewer than `limit`
    // receives are left), query.
    VResult<SrqHandle> create_srq(const SrqAttr& attr);
    VResult<void> destroy_srq(SrqHandle srq);
    VResult<void> post_srq_recv(Instant now, SrqHandle srq, const RecvWr& wr);
    VResult<void> arm_srq_limit(SrqHandle srq, std::uint32_t limit);
    VResult<SrqInfo> query_srq(SrqHandle srq) const;
    // Binds an established connection (after kEstablished) to a new QP: the
    // connection is handed off in HandoffMode::kStream, the negotiated CRC
    // and IRD/ORD come from its MPA exchange. kInvalidArgument when
    // CoreConfig::stream.recv_buffer cannot hold the largest FPDU (65 544
    // bytes). Bytes that arrived before the QP wait for the first post_recv.
    VResult<QpHandle> create_qp(Instant now, ConnHandle conn, const QpAttr& attr);
    // Flushes the QP's outstanding work, disconnects its connection
    // gracefully if it is still up, and frees the QP.
    VResult<void> destroy_qp(Instant now, QpHandle qp);
    VResult<QpInfo> query_qp(QpHandle qp) const;

    // ---- work ----
    VResult<void> post_send(Instant now, QpHandle qp, const SendWr& wr);
    // `now`: a receive may let bytes that waited for it be read (and the
    // window they held open again).
    VResult<void> post_recv(Instant now, QpHandle qp, const RecvWr& wr);
    // While one lives, receives posted to `qp` do not read the bytes that waited for the
    // first receive; its end reads them, once every receive of the batch is there. A list
    // of receives (ibv_post_recv's, or those a QP took before its connection) is posted in
    // one, or a message waiting for the second receive would find only the first.
    class RecvBatch {
    public:
        RecvBatch(Device& device, Instant now, QpHandle qp);
        ~RecvBatch();
        RecvBatch(const RecvBatch&) = delete;
        RecvBatch& operator=(const RecvBatch&) = delete;

    private:
        Device& device_;
        Instant now_;
        QpHandle qp_;
    };
    // Moves up to out.size() completions out; returns how many.
    std::size_t poll_cq(CqHandle cq, std::span<WorkCompletion> out);
    // The CQ overflowed (QpEventType::kCqError): it takes no completion any more.
    bool cq_failed(CqHandle cq) const;

    // ---- driving ----
    // Give every event of the Core here first; true: it was a QP's and is
    // handled (kReadable, kWritable and the terminal event of a QP's
    // connection, which becomes a QpEvent). The terminal event of a
    // connection whose QP was destroyed while it closed is the application's
    // (false), since no QP is left to report it.
    bool on_event(Instant now, const Event& event);
    std::optional<QpEvent> poll_qp_event();
    // Called as each work completion enters a CQ (solicited: a receive of a
    // Send with Solicited Event), from inside the call that produced it. It
    // must not call into the device or the core. For ibv_req_notify_cq.
    void set_completion_hook(std::function<void(CqHandle, bool solicited)> hook);

    // Message bytes placed into memory (Sends, RDMA Writes, Read Responses),
    // and how many of them straight from the arriving segment, without the
    // stream's receive buffer (docs/perf.md "Copies").
    struct Placement {
        std::uint64_t placed = 0;
        std::uint64_t direct = 0;
        // Bytes copied to join an FPDU before reading it: one that spans the end of the
        // stream's receive buffer (FPDUs across pieces of a frame are read in place).
        std::uint64_t joined = 0;
    };
    Placement placement() const;
    // Bytes of FPDU framing (length fields, DDP and RDMAP headers, pads, CRCs) this device
    // queued around message bytes sent from registered memory: the part of its streams'
    // copies that is not message bytes (docs/perf.md "Copies").
    std::uint64_t framing_sent() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace iwcm::rdma
