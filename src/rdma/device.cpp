// iwcm::rdma::Device: the Engine over a Core's byte streams.
//
// Read first: include/iwcm/verbs.hpp, engine.hpp, link.hpp. CoreLinks is
// the byte link of every queue pair of the device: LinkId is the
// connection's handle. Each FPDU is one record of the stream
// (Core::send_record: all or nothing, one TCP segment each), its payload
// held by reference in the application's registered memory until the peer
// acknowledges it: a Send or Write completes at that ACK (on_acked).
#include <optional>
#include <vector>

#include "iwcm/assert.hpp"
#include "iwcm/verbs.hpp"
#include "rdma/engine.hpp"

namespace iwcm::rdma {

namespace {

LinkId link_of(ConnHandle c) {
    return {std::uint64_t{c.index} << 32 | c.generation};
}

ConnHandle conn_of(LinkId l) {
    return {static_cast<std::uint32_t>(l.value >> 32), static_cast<std::uint32_t>(l.value)};
}

class CoreLinks final : public Links {
public:
    explicit CoreLinks(Core& core) : core_(core) {}

    Instant now{};

    std::size_t send_space(LinkId l) override {
        auto i = core_.stream_info(conn_of(l));
        return i ? i->send_space : 0;
    }

    // One FPDU is one record: the stream sends it as one segment (it is at
    // most the MSS) and never merges it with another. A refusal arms the
    // kWritable that on_event turns into Engine::on_writable.
    bool send_record(LinkId l, wire::Bytes record) override {
        auto taken = core_.send_record(now, conn_of(l), record);
        return taken && *taken;  // an error: the stream is closing; its end follows
    }

    // Gathered by the stream: the payload is copied once, from the
    // application's memory into the send buffer. Held back until flush(), so
    // that the FPDUs of one round may share a segment under segment offload.
    bool send_record_parts(LinkId l, std::span<const wire::Bytes> parts) override {
        auto taken = core_.send_record(now, conn_of(l), parts, true);
        return taken && *taken;
    }

    // The payload stays in registered memory: the stream holds it by
    // reference and copies it only into the frames (docs/perf.md "Copies").
    bool send_record_ref(LinkId l, std::span<const wire::Bytes> parts,
                         std::uint32_t by_ref) override {
        auto taken = core_.send_record(now, conn_of(l), parts, true, by_ref);
        return taken && *taken;
    }

    // The stream's bytes written so far: acknowledged once StreamInfo::acked
    // (StreamSink::on_acked) reaches it.
    std::optional<std::uint64_t> ack_mark(LinkId l) override {
        auto i = core_.stream_info(conn_of(l));
        return i ? std::optional<std::uint64_t>(i->written) : std::nullopt;
    }

    void own_refs(LinkId l) override { (void)core_.own_send_bytes(conn_of(l)); }

    void flush(LinkId l) override { (void)core_.flush(now, conn_of(l)); }

    std::size_t readable(LinkId l) override {
        auto i = core_.stream_info(conn_of(l));
        return i ? i->readable : 0;
    }

    wire::Bytes peek(LinkId l) override {
        auto v = core_.peek(conn_of(l));
        return v ? *v : wire::Bytes{};
    }

    void consume(LinkId l, std::size_t n) override {
        auto ok = core_.consume(now, conn_of(l), n);
        IWCM_ASSERT(ok.has_value());
    }

    void close(LinkId l, bool abortive) override {
        (void)core_.disconnect(now, conn_of(l),
                               abortive ? DisconnectMode::kAbortive : DisconnectMode::kGraceful);
    }

    // Only an offloaded connection sends: in every later state our FIN is queued.
    bool send_open(LinkId l) override {
        auto st = core_.state(conn_of(l));
        return st && *st == CmState::kOffloaded;
    }

private:
    Core& core_;
};

// Which QP a connection (by its index) carries.
struct ConnSlot {
    QpHandle qp;
    std::uint32_t conn_generation = 0;
    bool used = false;
    // The QP is gone: the connection's byte stream events are swallowed, its
    // terminal event goes to the application.
    bool destroyed = false;
    bool unread = false;  // bytes of the hand-off not read yet (until the first post_recv)
};

}  // namespace

// The device is the sink of its connections' streams (Core::set_stream_sink):
// RDMA Writes arriving in order are placed from the segment, skipping the
// stream's receive buffer (Engine::on_in_order).
struct Device::Impl final : StreamSink {
    Impl(Core& c, const DeviceConfig& config) : core(c), links(c), engine(links, config) {}
    ~Impl() override {
        IWCM_ASSERT(batch == QpHandle{});  // a RecvBatch ends before its device
        for (std::uint32_t i = 0; i < slots.size(); ++i) {
            if (!slots[i].used) continue;
            const ConnHandle conn{i, slots[i].conn_generation};
            // The registrations end with the device, and the memory may be
            // gone already (freed before the device): a stream that still
            // sends from it is reset, never read again.
            auto info = core.stream_info(conn);
            if (info && info->by_reference > 0) {
                (void)core.disconnect(links.now, conn, DisconnectMode::kAbortive);
            }
            (void)core.set_stream_sink(conn, nullptr);
        }
    }

    std::size_t on_in_order(ConnHandle conn, std::span<const std::byte> bytes) override {
        ConnSlot* s = slot(conn);
        return s == nullptr || s->destroyed ? 0 : engine.on_in_order(s->qp, bytes);
    }

    std::size_t on_in_order_parts(ConnHandle conn,
                                  std::span<const std::span<const std::byte>> pieces) override {
        ConnSlot* s = slot(conn);
        return s == nullptr || s->destroyed ? 0 : engine.on_in_order_parts(s->qp, pieces);
    }

    bool ack_now(ConnHandle) override { return engine.take_message_end(); }

    void on_acked(ConnHandle conn, std::uint64_t acked) override {
        ConnSlot* s = slot(conn);
        if (s != nullptr && !s->destroyed) engine.on_acked(s->qp, acked);
    }

    ConnSlot* slot(ConnHandle conn) {
        if (!conn.valid() || conn.index >= slots.size()) return nullptr;
        ConnSlot& s = slots[conn.index];
        return s.used && s.conn_generation == conn.generation ? &s : nullptr;
    }

    Core& core;
    CoreLinks links;
    Engine engine;
    QpHandle batch;  // the QP of the RecvBatch that lives, if one does

    // What arrived before the QP's first receive, once it has one.
    void read_unread(QpHandle qp) {
        IWCM_ASSERT(!(batch == qp));  // a batch reads once, as it ends
        auto info = engine.query_qp(qp);
        ConnSlot* s = info ? slot(info->conn) : nullptr;
        if (s != nullptr && s->unread && info->recv_posted > 0) {
            s->unread = false;
            engine.on_readable(qp);
        }
    }
    std::vector<ConnSlot> slots;
};

Device::Device(Core& core, const DeviceConfig& config)
    : impl_(std::make_unique<Impl>(core, config)) {}

Device::~Device() = default;

VResult<MemoryRegion> Device::reg_mr(std::span<std::byte> memory, std::uint32_t access,
                                     std::uint32_t pd) {
    return impl_->engine.reg_mr(memory, access, pd);
}

VResult<void> Device::dereg_mr(MrHandle mr) {
    return impl_->engine.dereg_mr(mr);
}

VResult<MemoryWindow> Device::alloc_mw(std::uint32_t pd) {
    return impl_->engine.alloc_mw(pd);
}

VResult<void> Device::dealloc_mw(MwHandle mw) {
    return impl_->engine.dealloc_mw(mw);
}

VResult<CqHandle> Device::create_cq(std::uint32_t capacity) {
    return impl_->engine.create_cq(capacity);
}

VResult<void> Device::destroy_cq(CqHandle cq) {
    return impl_->engine.destroy_cq(cq);
}

VResult<QpHandle> Device::create_qp(Instant now, ConnHandle conn, const QpAttr& attr) {
    Impl& d = *impl_;
    if (!conn.valid()) return fail(VerbsError::kInvalidHandle);
    if (d.slot(conn) != nullptr) return fail(VerbsError::kWrongState);
    // A whole FPDU must fit the receive buffer (the engine reads an FPDU
    // only once all of it is there), or a peer's largest one would wait
    // forever for a window that cannot open.
    if (d.core.config().stream.recv_buffer < kMaxFpdu) return fail(VerbsError::kInvalidArgument);
    auto ctx = d.core.handoff(conn, HandoffParams{HandoffMode::kStream, std::nullopt});
    if (!ctx) {
        return fail(ctx.error() == ApiError::kStaleHandle ? VerbsError::kStaleHandle
                                                          : VerbsError::kWrongState);
    }
    // One FPDU per segment: the largest is the stream's MSS.
    auto info = d.core.stream_info(conn);
    if (!info) return fail(VerbsError::kWrongState);
    QpParams p;
    p.link = link_of(conn);
    p.conn = conn;
    p.attr = attr;
    p.crc = ctx->mpa.crc;
    p.ird = ctx->mpa.ird;
    p.ord = ctx->mpa.ord;
    p.rtr = ctx->rtr_start;
    p.max_fpdu = info->mss;
    auto qp = d.engine.create_qp(p);
    if (!qp) return fail(qp.error());
    if (conn.index >= d.slots.size()) d.slots.resize(conn.index + 1);
    d.slots[conn.index] = ConnSlot{*qp, conn.generation, true, false};
    d.links.now = now;
    // Bytes that came with or right after the hand-off (a Send right behind
    // the RTR, say) wait for the first post_recv: read now, they would find
    // no receive posted and end the QP with a TERMINATE.
    // A QP on a shared receive queue has its receives already: nothing waits for one.
    d.slots[conn.index].unread = !attr.srq.valid();
    auto sunk = d.core.set_stream_sink(conn, &d);
    IWCM_ASSERT(sunk.has_value());
    // Only our READ RTR's answer, if it is there, is read at once: it frees an ORD slot.
    d.engine.take_early_rtr_response(*qp);
    if (attr.srq.valid()) d.engine.on_readable(*qp);
    return qp;
}

VResult<void> Device::destroy_qp(Instant now, QpHandle qp) {
    Impl& d = *impl_;
    auto info = d.engine.query_qp(qp);
    if (!info) return fail(info.error());
    d.links.now = now;
    auto done = d.engine.destroy_qp(qp);
    if (!done) return done;
    if (ConnSlot* s = d.slot(info->conn)) {
        IWCM_ASSERT(s->qp == qp && !s->destroyed);  // the slot named the live QP
        // The connection closes gracefully; its stream's last events are ours.
        if (info->state == QpState::kError) {
            (void)d.core.set_stream_sink(info->conn, nullptr);
            *s = ConnSlot{};
        } else {
            s->destroyed = true;
        }
    }
    return {};
}

VResult<QpInfo> Device::query_qp(QpHandle qp) const {
    return impl_->engine.query_qp(qp);
}

VResult<void> Device::post_send(Instant now, QpHandle qp, const SendWr& wr) {
    impl_->links.now = now;
    return impl_->engine.post_send(qp, wr);
}

VResult<void> Device::post_recv(Instant now, QpHandle qp, const RecvWr& wr) {
    Impl& d = *impl_;
    d.links.now = now;
    auto r = d.engine.post_recv(qp, wr);
    if (!r) return r;
    if (!(d.batch == qp)) d.read_unread(qp);
    return r;
}

Device::RecvBatch::RecvBatch(Device& device, Instant now, QpHandle qp)
    : device_(device), now_(now), qp_(qp) {
    IWCM_ASSERT(device_.impl_->batch == QpHandle{});  // one batch at a time
    device_.impl_->batch = qp;
}

Device::RecvBatch::~RecvBatch() {
    Impl& d = *device_.impl_;
    IWCM_ASSERT(d.batch == qp_);
    d.batch = QpHandle{};
    d.links.now = now_;
    d.read_unread(qp_);
}

std::size_t Device::poll_cq(CqHandle cq, std::span<WorkCompletion> out) {
    return impl_->engine.poll_cq(cq, out);
}

VResult<SrqHandle> Device::create_srq(const SrqAttr& attr) {
    return impl_->engine.create_srq(attr);
}

VResult<void> Device::destroy_srq(SrqHandle srq) {
    return impl_->engine.destroy_srq(srq);
}

VResult<void> Device::post_srq_recv(Instant now, SrqHandle srq, const RecvWr& wr) {
    impl_->links.now = now;
    return impl_->engine.post_srq_recv(srq, wr);
}

VResult<void> Device::arm_srq_limit(SrqHandle srq, std::uint32_t limit) {
    return impl_->engine.arm_srq_limit(srq, limit);
}

VResult<SrqInfo> Device::query_srq(SrqHandle srq) const {
    return impl_->engine.query_srq(srq);
}

bool Device::cq_failed(CqHandle cq) const {
    return impl_->engine.cq_failed(cq);
}

bool Device::on_event(Instant now, const Event& event) {
    Impl& d = *impl_;
    ConnSlot* s = d.slot(event.conn);
    if (s == nullptr) return false;
    d.links.now = now;
    if (s->destroyed) {
        if (!event.terminal()) return true;
        (void)d.core.set_stream_sink(event.conn, nullptr);
        *s = ConnSlot{};
        // No QP is told of the end: the application is (rdma_cm reports
        // DISCONNECTED to an id whose QP was destroyed while it closed, as
        // cmtime's rdma_disconnect then rdma_destroy_qp waits for).
        return false;
    }
    QpHandle qp = s->qp;
    // A slot not marked destroyed names a live QP (destroy_qp marks or clears it).
    IWCM_ASSERT(d.engine.query_qp(qp));
    if (event.type == EventType::kReadable) {
        s->unread = false;
        d.engine.on_readable(qp);
        return true;
    }
    if (event.type == EventType::kWritable) {
        d.engine.on_writable(qp);
        return true;
    }
    if (!event.terminal()) return false;
    // Bytes that arrived before the end are still readable now.
    d.engine.on_readable(qp);
    d.engine.on_link_down(qp, event.status);
    (void)d.core.set_stream_sink(event.conn, nullptr);
    *s = ConnSlot{};
    return true;
}

Device::Placement Device::placement() const {
    return {impl_->engine.placed_bytes(), impl_->engine.placed_direct(),
            impl_->engine.joined_bytes()};
}

std::uint64_t Device::framing_sent() const {
    return impl_->engine.framing_sent();
}

std::optional<QpEvent> Device::poll_qp_event() {
    return impl_->engine.poll_qp_event();
}

void Device::set_completion_hook(std::function<void(CqHandle, bool solicited)> hook) {
    impl_->engine.set_completion_hook(std::move(hook));
}

}  // namespace iwcm::rdma
