// The RDMAP/DDP/MPA protocol engine of a Device: memory regions, completion
// queues and queue pairs over any byte link (link.hpp).
//
// Read first: include/iwcm/verbs.hpp (the application's view), RFC 5040
// sections 4-5 and 7, RFC 5041 sections 4-7, RFC 5044 section 6, and
// docs/design.md "Data path". The choices of TERMINATE layer, error type and
// code per error are Linux siw's (drivers/infiniband/sw/siw/siw_qp_rx.c,
// siw_qp.c siw_send_terminate), so that a siw peer reads what it would send.
//
// Shape, for memory: a queue pair is a small fixed record (QpState, see
// kQpStateBytes); its work requests live in one device-wide slab of WrEntry
// and are chained into intrusive queues by index; the receive reassembly and
// transmit buffers are the Engine's, shared by every queue pair. The byte
// link buffers an FPDU until it is whole, so a queue pair keeps no partial
// FPDU except one held byte (an FPDU whose length field straddles the ring).
//
// The engine reads no clock and calls nothing back: completions go to the
// completion queues, queue-pair ends to poll_qp_event().
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "invariants.hpp"
#include "iwcm/verbs.hpp"
#include "rdma/link.hpp"
#include "rdma/mr_table.hpp"
#include "wire/ddp.hpp"
#include "wire/fpdu.hpp"
#include "wire/pieces.hpp"

namespace iwcm::rdma {

constexpr std::uint32_t kNil = UINT32_MAX;
constexpr std::size_t kMaxSge = 6;  // as siw (SIW_MAX_SGE)
// Largest FPDU we build (a 16-bit ULPDU length, pad and CRC).
constexpr std::size_t kMaxFpdu = 2 + 65535 + 3 + 4;
// IRD/ORD above this are capped (0x3FFF, "no value", among them).
constexpr std::uint16_t kMaxReadDepth = 128;

struct QpParams {
    LinkId link;
    ConnHandle conn;  // reported in QpEvent
    QpAttr attr;
    bool crc = false;
    std::uint16_t ird = 1;
    std::uint16_t ord = 1;
    std::uint32_t max_fpdu = 1448;
    RtrStart rtr;  // the hand-off's: first MSNs, our READ RTR's response still due
};

// A queue of WrEntry indices chained through WrEntry::next.
struct WrQueue {
    std::uint32_t head = kNil;
    std::uint32_t tail = kNil;
    bool empty() const { return head == kNil; }
};

enum class WrKind : std::uint8_t {
    kSend,
    kWrite,
    kRead,
    kRecv,
    kReadResponse,
    kLocalInvalidate,
    kBindMw,
};

// One work request (or one inbound Read Request to answer). For
// kReadResponse: sge[0] is the source (STag in lkey, TO in addr, size in
// length), rkey / remote_addr the requester's sink. For kBindMw: sge[0] is the
// range (num_sge 0: no bytes to send), rkey the window's new STag, mw and
// mw_access the window and its rights.
struct WrEntry {
    std::uint64_t wr_id = 0;
    std::uint64_t remote_addr = 0;
    std::uint32_t rkey = 0;
    std::uint32_t length = 0;  // bytes of the message
    std::uint32_t done = 0;    // bytes sent or placed so far
    std::uint32_t next = kNil;
    std::uint32_t seq = 0;  // send queue: its place in post order (QpRecord::posted)
    WrKind kind = WrKind::kSend;
    std::uint8_t num_sge = 0;
    bool signaled = true;
    bool solicited = false;
    bool invalidate = false;  // kSend: a Send with Invalidate of the peer's STag `rkey`
    bool fence = false;       // send queue: waits for every earlier Read to complete
    // kRead: a Read Request goes for each sink SGE (RFC 5040's request names one sink);
    // how many went, and how many were answered whole.
    std::uint8_t parts_sent = 0;
    std::uint8_t parts_done = 0;
    std::uint8_t mw_access = 0;
    MwHandle mw;
    Sge sge[kMaxSge]{};
    // In QpRecord::ackq: the link's ack_mark once the message's last FPDU
    // was taken; complete when Engine::on_acked reaches it.
    std::uint64_t ack_mark = 0;
};

// Which message the transmit side is in the middle of: one message goes out
// whole before the next starts (siw refuses DDP segments of two messages of
// the same kind interleaved).
enum class TxActive : std::uint8_t { kNone, kSendQueue, kReadResponse };

struct QpRecord {
    LinkId link;
    ConnHandle conn;
    std::uint32_t generation = 0;
    std::uint32_t send_cq = kNil;
    std::uint32_t recv_cq = kNil;
    std::uint32_t srq = kNil;  // its shared receive queue, if made with one
    std::uint32_t pd = 0;
    std::uint32_t max_fpdu = 0;
    std::uint32_t tx_msn_send = 1;  // next MSN of queue 0 (Send)
    std::uint32_t tx_msn_rreq = 1;  // next MSN of queue 1 (Read Request)
    std::uint32_t rx_msn_send = 1;  // expected MSN of queue 0
    std::uint32_t rx_msn_rreq = 1;  // expected MSN of queue 1
    WrQueue ackq;                   // sends and writes sent whole, awaiting the peer's ACK
    WrQueue sq;                     // posted sends, writes, reads not yet (fully) sent
    WrQueue orq;                    // reads sent, awaiting their Read Responses
    WrQueue irq;                    // inbound reads to answer
    WrQueue rq;                     // posted receives
    std::uint32_t send_count = 0;   // entries in ackq, sq and orq
    // Send-queue completions in post order (ibv_poll_cq(3): an RC send queue completes
    // in order): `posted` numbers the requests, `reported` is the first one whose
    // completion has not been given; one that ends earlier waits in Engine::held_.
    std::uint32_t posted = 0;
    std::uint32_t reported = 0;
    std::uint32_t recv_count = 0;
    std::uint32_t max_send_wr = 0;
    std::uint32_t max_recv_wr = 0;
    std::uint16_t orq_count = 0;
    std::uint16_t irq_count = 0;
    std::uint16_t ird = 0;
    std::uint16_t ord = 0;
    std::uint8_t max_sge = 0;
    QpState state = QpState::kRts;
    TxActive tx_active = TxActive::kNone;
    bool live = false;
    bool crc = false;
    bool sq_sig_all = false;
    bool link_up = false;
    bool rx_in_send = false;   // a Send's first segment was placed, its L not yet
    bool rx_in_rresp = false;  // the same for a Read Response
    // Our READ RTR's zero-length Read Response has not come: it holds one ORD slot
    // (counted in orq_count, with no entry in orq) and comes before any other response.
    bool rtr_read_due = false;
    std::uint8_t rx_send_op = 0;  // the opcode of the Send in progress (rx_in_send)
    bool rx_held = false;         // rx_held_byte is an FPDU's first byte, consumed
    std::byte rx_held_byte{};
    bool term_pending = false;  // a TERMINATE waits in Engine::pending_terms_
    bool refs_out = false;      // the link may hold bytes of registered memory by reference
};

// What an idle queue pair costs: its record (the Device adds one 4-byte
// entry of its connection map).
constexpr std::size_t kQpStateBytes = sizeof(QpRecord);
static_assert(kQpStateBytes <= 160, "a queue pair with nothing outstanding stays small");

class Engine {
public:
    Engine(Links& links, const DeviceConfig& config);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    VResult<MemoryRegion> reg_mr(std::span<std::byte> memory, std::uint32_t access,
                                 std::uint32_t pd = 0);
    VResult<void> dereg_mr(MrHandle mr);
    VResult<MemoryWindow> alloc_mw(std::uint32_t pd) { return mrs_.alloc_mw(pd); }
    VResult<void> dealloc_mw(MwHandle mw) { return mrs_.dealloc_mw(mw); }
    VResult<CqHandle> create_cq(std::uint32_t capacity);
    VResult<void> destroy_cq(CqHandle cq);
    VResult<QpHandle> create_qp(const QpParams& params);
    // Flushes the QP's work, closes its link gracefully if it is up, frees it.
    VResult<void> destroy_qp(QpHandle qp);
    VResult<QpInfo> query_qp(QpHandle qp) const;
    VResult<void> post_send(QpHandle qp, const SendWr& wr);
    VResult<void> post_recv(QpHandle qp, const RecvWr& wr);
    std::size_t poll_cq(CqHandle cq, std::span<WorkCompletion> out);
    std::optional<QpEvent> poll_qp_event();

    // The link has bytes to read / room to write / ended (status as
    // Event::status). Each is harmless when there is nothing to do.
    void on_readable(QpHandle qp);
    void on_writable(QpHandle qp);
    void on_link_down(QpHandle qp, int status);
    // Our READ RTR's answer, when it is the first whole FPDU already waiting in the link
    // (it came before the queue pair was made): read now, alone, so that a Read posted
    // before the first receive need not wait for it (the Device holds every other byte
    // of the hand-off back until then).
    void take_early_rtr_response(QpHandle qp);
    // The link's bytes acknowledged so far (a link with an ack_mark): the
    // Sends and Writes whose bytes all are complete now, in order.
    void on_acked(QpHandle qp, std::uint64_t acked);
    // Bytes of the link arriving in order while none wait unread (the core's
    // StreamSink): the whole RDMA Write, Send and Read Response FPDUs at
    // their start are checked and placed from where they are, straight into
    // their memory (a message's last one completes it). Returns
    // how many bytes it took; it stops at anything else (another message, a
    // partial FPDU, an error), which the link buffers for on_readable. It
    // calls nothing on the link.
    std::size_t on_in_order(QpHandle qp, wire::Bytes bytes);
    // The same for bytes in pieces (a frame handed over in parts): an FPDU that lies in
    // one piece as above; one that spans pieces (its header, registered memory, its CRC,
    // as a sender holding the payload by reference sends it) is read from the pieces, its
    // CRC summed over them and its payload copied from them into memory (one copy).
    std::size_t on_in_order_parts(QpHandle qp, std::span<const wire::Bytes> pieces);
    // Message bytes placed into memory, and how many of them came straight
    // from the link's segment (on_in_order) rather than its buffer.
    std::uint64_t placed_bytes() const { return placed_bytes_; }
    std::uint64_t placed_direct() const { return placed_direct_; }
    // FPDU bytes copied into the reassembly buffer to be read in one piece.
    std::uint64_t joined_bytes() const { return joined_bytes_; }
    // FPDU framing (length field, DDP/RDMAP header, pad, CRC) queued around payloads sent
    // from registered memory (send_fpdu): what the link copies besides message bytes.
    std::uint64_t framing_sent() const { return framing_sent_; }
    // Whether the bytes on_in_order took last ended an RDMA Write or a Send
    // (its sender completes it at our ACK, so the ACK should not wait);
    // reading it clears it.
    bool take_message_end() { return std::exchange(message_end_, false); }

    std::size_t live_qps() const;
    std::size_t wr_slab_size() const { return wrs_.size(); }
    // Completions a full or failed CQ could not take (QpEventType::kCqError).
    std::uint64_t cq_overflows(CqHandle cq) const;
    bool cq_failed(CqHandle cq) const;
    VResult<SrqHandle> create_srq(const SrqAttr& attr);
    VResult<void> destroy_srq(SrqHandle srq);
    VResult<void> post_srq_recv(SrqHandle srq, const RecvWr& wr);
    VResult<void> arm_srq_limit(SrqHandle srq, std::uint32_t limit);
    VResult<SrqInfo> query_srq(SrqHandle srq) const;
    // Device::set_completion_hook: told of each completion a CQ takes.
    void set_completion_hook(std::function<void(CqHandle, bool)> hook) {
        completion_hook_ = std::move(hook);
    }

private:
    struct Cq {
        std::vector<WorkCompletion> ring;
        std::size_t head = 0;
        std::size_t count = 0;
        std::uint32_t generation = 0;
        std::uint32_t users = 0;
        std::uint64_t overflows = 0;
        bool failed = false;  // overflowed: takes nothing more (kCqError)
        bool live = false;
    };
    struct Srq {
        WrQueue rq;
        std::uint32_t count = 0;
        std::uint32_t max_wr = 0;
        std::uint32_t limit = 0;  // armed when not 0
        std::uint32_t users = 0;  // QPs made with it
        std::uint32_t pd = 0;
        std::uint32_t generation = 0;
        std::uint8_t max_sge = 0;
        bool live = false;
    };
    const Srq* find_srq(SrqHandle srq) const;
    // A QP on an SRQ with no receive of its own takes the SRQ's oldest for the Send that
    // begins (it stays the QP's until the Send's last segment, or its flush).
    void take_srq_recv(std::uint32_t qp);
    VResult<void> queue_recv(std::uint32_t pd, const RecvWr& wr, WrQueue& q);
    // The outcome of one inbound FPDU.
    struct RxVerdict {
        bool terminate = false;  // a TERMINATE was built into term_buf_
        bool peer_terminated = false;
        bool reset = false;  // a TERMINATE that breaks RFC 5040's rules: the link is reset
        TermInfo term;
    };

    // ---- slabs and queues (engine.cpp) ----
    std::uint32_t alloc_wr();
    void free_wr(std::uint32_t index);
    void push(WrQueue& q, std::uint32_t index);
    std::uint32_t pop(WrQueue& q);
    QpRecord* find_qp(QpHandle qp);
    const QpRecord* find_qp(QpHandle qp) const;
    VResult<QpRecord*> checked_qp(QpHandle qp);
    Cq* find_cq(CqHandle cq);
    void complete(std::uint32_t cq, const WorkCompletion& wc);
    void complete_wr(std::uint32_t qp, const WrEntry& e, WcStatus status, std::uint32_t byte_len);
    // A send-queue request `seq` ended (`report`: with a completion to give, `wc`): given
    // now if every request before it was, held until then otherwise.
    void complete_in_order(std::uint32_t qp, std::uint32_t seq, bool report,
                           const WorkCompletion& wc);
    void flush_all(std::uint32_t qp);
    void settle_cq_failures();
    // On the way out of a call that may reach the links: settle_cq_failures().
    struct SettleOnExit {
        Engine& engine;
        ~SettleOnExit() { engine.settle_cq_failures(); }
    };
    // What every call leaves true of a queue pair (its queues chained end to end, the counts
    // beside them equal to what they count and within their bounds), asserted in debug and
    // sanitizer builds (IWCM_CHECK_INVARIANTS); nothing in release ones. A QP no longer live
    // has nothing to check (nor an index past the table: a stale or invalid handle's).
#if IWCM_CHECK_INVARIANTS
    void check_qp(std::uint32_t qp) const;
#else
    void check_qp(std::uint32_t) const {}
#endif
    // check_qp() of `qp` as a call starts and again on its way out, whichever return it takes.
    class CheckScope {
    public:
        CheckScope(const Engine& engine, std::uint32_t qp) : engine_(engine), qp_(qp) {
            engine_.check_qp(qp_);
        }
        ~CheckScope() { engine_.check_qp(qp_); }
        CheckScope(const CheckScope&) = delete;
        CheckScope& operator=(const CheckScope&) = delete;

    private:
        const Engine& engine_;
        std::uint32_t qp_;
    };
#if IWCM_CHECK_INVARIANTS
    // The entries of `q`, walked from its head (its chain asserted whole): check_qp's.
    std::uint32_t queue_length(const WrQueue& q) const;
#endif
    void enter_closing(std::uint32_t qp);
    VResult<void> check_sges(std::uint32_t pd, std::span<const Sge> sges, std::uint32_t access,
                             std::uint32_t& total) const;

    // ---- transmit (engine_tx.cpp) ----
    void tx_progress(std::uint32_t qp);
    bool tx_send_queue(std::uint32_t qp);
    bool tx_read_response(std::uint32_t qp);
    bool tx_read_request(std::uint32_t qp, WrEntry& e);
    bool tx_local(std::uint32_t qp);
    bool tx_terminate(std::uint32_t qp);
    // Where the message's bytes [offset, offset + len) lie in registered
    // memory: one view per SGE touched (at most kMaxSge).
    struct Views {
        wire::Bytes part[kMaxSge];
        std::size_t count = 0;
    };
    bool gather(std::uint32_t qp, const WrEntry& e, std::size_t offset, std::size_t len,
                Views& out) const;
    bool send_fpdu(std::uint32_t qp, std::size_t ulpdu_len);
    bool send_fpdu(std::uint32_t qp, std::size_t header_len, const Views& payload);
    void local_failure(std::uint32_t qp, std::uint32_t wr, WcStatus status);

    // ---- receive (engine_rx.cpp) ----
    void rx_drain(std::uint32_t qp);
    std::optional<wire::Bytes> rx_next_fpdu(std::uint32_t qp, std::size_t& done);
    std::optional<wire::Bytes> rx_in_place(std::uint32_t qp, std::size_t& done);
    void rx_consume(std::uint32_t qp, std::size_t& done);
    RxVerdict rx_fpdu(std::uint32_t qp, wire::Bytes fpdu);
    RxVerdict rx_segment(std::uint32_t qp, const wire::DdpSegment& seg, std::size_t ulpdu_len);
    // rx_send and rx_read_response place `payload`: seg.payload, or the same bytes in pieces.
    RxVerdict rx_send(std::uint32_t qp, const wire::DdpSegment& seg, std::size_t ulpdu_len,
                      const wire::Pieces& payload);
    RxVerdict rx_write(std::uint32_t qp, const wire::DdpSegment& seg, std::size_t ulpdu_len);
    RxVerdict rx_read_request(std::uint32_t qp, const wire::DdpSegment& seg, std::size_t ulpdu_len);
    RxVerdict rx_read_response(std::uint32_t qp, const wire::DdpSegment& seg, std::size_t ulpdu_len,
                               const wire::Pieces& payload);
    RxVerdict rx_terminate(std::uint32_t qp, const wire::DdpSegment& seg);
    RxVerdict rx_rtr_read_response(std::uint32_t qp, const wire::DdpSegment& seg,
                                   std::size_t ulpdu_len, std::size_t payload_len);
    bool place(std::uint32_t pd, const WrEntry& e, std::size_t offset, const wire::Pieces& data,
               bool dry = false);
    bool place_direct(std::uint32_t qp, wire::Bytes fpdu);
    bool place_split(std::uint32_t qp, const wire::Pieces& fpdu);
    bool place_segment(std::uint32_t qp, const wire::DdpSegment& seg, std::size_t ulpdu_len,
                       const wire::Pieces& payload);
    bool send_placeable(std::uint32_t qp, const wire::DdpHeader& h, const wire::Pieces& payload);
    // The Read whose Read Response comes next: the oldest one sent whole (orq), else the
    // one at the send queue's head with parts sent and not answered; kNil when none.
    std::uint32_t read_in_flight(const QpRecord& r) const;
    // Where the next Read Response of the Read `e` goes: its part's sink STag, the tagged
    // offset of its next byte, and how many bytes the part still takes.
    struct ReadSink {
        std::uint32_t stag = 0;
        std::uint64_t to = 0;
        std::uint32_t left = 0;
    };
    static ReadSink read_sink(const WrEntry& e);
    // The Read `index` failed or ended: out of its queue, its ORD slots freed.
    void drop_read(std::uint32_t qp, std::uint32_t index);
    bool read_response_placeable(const QpRecord& r, const wire::DdpHeader& h, std::size_t n) const;
    // `error`: kAccess when a check of our memory refused the peer's request (QpError).
    RxVerdict terminate(std::uint32_t qp, const wire::TerminateRepr& term,
                        QpError error = QpError::kFatal);
    RxVerdict terminate_mpa(std::uint32_t qp, wire::TermError error);
    RxVerdict terminate_pending(std::uint32_t qp, const TermInfo& term, QpError error);
    void push_term_event(std::uint32_t qp, QpEventType type, const TermInfo& term, QpError error);
    void after_rx(std::uint32_t qp, const RxVerdict& verdict);

    Links& links_;
    DeviceConfig config_;
    MrTable mrs_;
    std::vector<Cq> cqs_;
    std::vector<Srq> srqs_;
    std::function<void(CqHandle, bool)> completion_hook_;
    std::vector<QpRecord> qps_;
    std::uint32_t qp_free_ = kNil;
    std::vector<WrEntry> wrs_;
    std::uint32_t wr_free_ = kNil;
    std::deque<QpEvent> events_;
    // Send-queue completions that ended before an earlier request of their QP (a Write
    // acknowledged while a Read before it waits for its response): complete_in_order.
    struct Held {
        std::uint32_t qp = 0;
        std::uint32_t seq = 0;
        bool report = false;
        WorkCompletion wc;
    };
    std::vector<Held> held_;
    // CQs that overflowed inside a call that may not reach the links (the core's
    // StreamSink): their QPs end at the next call that may (settle_cq_failures).
    std::vector<std::uint32_t> cqs_failed_;
    // TERMINATE FPDUs not yet taken by their link, by QP index, with what
    // the event reports once the link takes it (or cannot).
    struct PendingTerm {
        std::vector<std::byte> fpdu;
        TermInfo term;
        QpError error = QpError::kFatal;
    };
    std::unordered_map<std::uint32_t, PendingTerm> pending_terms_;
    // Shared by every QP: one FPDU being built, one being reassembled.
    std::vector<std::byte> tx_buf_;
    std::vector<std::byte> rx_buf_;
    std::vector<std::byte> term_buf_;
    std::uint64_t placed_bytes_ = 0;
    std::uint64_t placed_direct_ = 0;
    std::uint64_t framing_sent_ = 0;
    std::uint64_t joined_bytes_ = 0;
    bool message_end_ = false;  // take_message_end()
};

}  // namespace iwcm::rdma
