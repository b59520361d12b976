// The data path end to end on the simulated network: two cores, a Device
// each, and iwarp-cm's own rping logic (tools/rping.hpp, the state machine
// behind `iwarp-cm rping`) driven by the seeded simulator instead of a TAP.
//
// Read first: tools/rping.hpp (one iteration: the client's Send with its
// start buffer, the server's RDMA Read of it, a Send, the client's Send with
// its sink buffer, the server's RDMA Write into it, a Send), src/io/sim/sim.hpp
// (the network and its faults), include/iwcm/verbs.hpp.
//
// RdmaSim.RpingUnderFaults, per seed: CRC on or off, a message size from 26
// bytes to 64 KiB (several FPDUs per message), 5 to 24 iterations, loss of
// 1-5 %, duplication, reordering and jitter from the first SYN, corruption
// from the moment both QPs exist (SeedFaults, rdma_sim.hpp). Odd seeds move every frame in parts
// (io::PartsShuttle: payloads read where they lie, cut at uneven offsets on arrival), so
// RDMA Writes are placed from pieces (Engine::on_in_order_parts).
// Checked: both sides finish every iteration with rping's -V checks (the
// server compares what its RDMA Read fetched with rping's pattern, the
// client compares its sink, which the server's RDMA Write filled, with its
// start buffer), every work completion before the end is kSuccess (rping
// fails on any other; the only flush is the server's one posted receive when
// the client closes), the server's QP reports one QpEvent, kDisconnected
// with status 0, the client's none (it frees its QP, which closes
// gracefully), and once the network drains both cores have no node, timer or
// event left. IWCM_RDMA_SIM_SEEDS=n changes the number of seeds (default
// 200, about a second), IWCM_RDMA_SIM_SEED=s runs one (IWCM_RDMA_SIM_TRACE=1
// prints every frame, IWCM_RDMA_SIM_LOG=1 a line per seed).
//
// The simulator's corruption flips bits of one byte of a frame, which TCP's
// checksum always catches when it lands in the TCP segment (a change of one
// byte moves the ones' complement sum by a non-zero amount below 0xFFFF), so
// under it MPA's CRC never sees a bad FPDU. RdmaSim.CorruptFpduWithGoodTcpChecksum makes that case
// on purpose: it flips a byte inside an FPDU of an RDMA Write and repairs the TCP checksum. With
// CRC the receiver places nothing of that FPDU and answers with a TERMINATE (MPA, CRC error);
// without CRC the bad byte lands in memory (which is what CRC is for).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "cm/harness.hpp"
#include "io/sim/rng.hpp"
#include "io/sim/sim.hpp"
#include "iwcm/verbs.hpp"
#include "sim/rdma_sim.hpp"
#include "sim/seeds.hpp"
#include "tools/rping.hpp"
#include "wire/frame.hpp"
#include "wire/tcp.hpp"

namespace iwcm::test {
namespace {

// One host: a Core, its Device, and the application around them.
struct Node {
    Node(const CoreConfig& config, const tools::RpingConfig& rc)
        : core(config), dev(core), rping(dev, rc), server(rc.server) {}

    Core core;
    rdma::Device dev;
    tools::Rping rping;
    bool server = false;
    ConnHandle conn;
    std::optional<rdma::QpHandle> qp;
    bool stopped = false;
    bool disconnected = false;  // the QP reported its connection's end
    std::vector<rdma::QpEvent> qp_events;
    std::string failure;

    void fail(const std::string& what) {
        if (failure.empty()) failure = std::string(server ? "server: " : "client: ") + what;
    }

    void on_event(Instant now, const Event& e) {
        if (dev.on_event(now, e)) return;
        if (e.type == EventType::kConnectRequest) {
            if (!core.accept(now, e.conn, AcceptParams{{}, 1, 1})) fail("accept failed");
            return;
        }
        if (e.type == EventType::kEstablished) {
            conn = e.conn;
            if (!rping.start(now, e.conn)) fail("rping start: " + rping.reason());
            qp = rping.qp();
            return;
        }
        // Once rping.stop() destroyed the QP, its connection's end is the
        // application's (rdma::Device::on_event).
        if (stopped && e.terminal() && e.conn == conn) return;
        fail(std::string("unexpected event ") + std::string(to_string(e.type)) + " " +
             std::to_string(e.status));
    }

    // Runs after every frame and timer of this host.
    void run(Instant now) {
        while (auto e = core.poll_event()) on_event(now, *e);
        while (auto q = dev.poll_qp_event()) {
            qp_events.push_back(*q);
            if (q->type == rdma::QpEventType::kDisconnected) disconnected = true;
            rping.on_qp_event(*q);
        }
        rping.poll(now);
        if (rping.phase() == tools::Rping::Phase::kFailed) fail(rping.reason());
        // The client closes after its last iteration, the server once the
        // client has closed (as `iwarp-cm rping` does).
        const bool done = rping.phase() == tools::Rping::Phase::kDone;
        if (!stopped && done && (!server || disconnected)) {
            stopped = true;
            rping.stop(now);
        }
    }
};

struct Outcome {
    bool ok = false;
    std::string why;
};

std::uint32_t draw_size(io::Rng& r) {
    switch (r.below(4)) {
        case 0: return static_cast<std::uint32_t>(tools::kRpingMinSize + r.below(200));
        case 1: return static_cast<std::uint32_t>(1000 + r.below(4000));
        case 2: return static_cast<std::uint32_t>(4000 + r.below(60000));
        default: return tools::kRpingMaxSize;
    }
}

Outcome run_seed(std::uint64_t seed) {
    io::Rng draw(seed);
    const bool crc = seed % 2 == 0;
    const std::uint32_t size = draw_size(draw);
    const std::uint64_t count = 5 + draw.below(20);
    CoreConfig ca = config_for(kMacA, 1);
    CoreConfig cb = config_for(kMacB, 2);
    ca.mpa.crc = crc;
    tools::RpingConfig rc;
    rc.size = size;
    rc.count = count;
    rc.verify = true;
    Node client(ca, rc);
    rc.server = true;
    Node server(cb, rc);
    if (!client.core.add_address(ip_a()) || !server.core.add_address(ip_b()))
        return {false, "add_address"};
    if (!server.core.listen({{ip_b(), 4791}, 0})) return {false, "listen"};
    const bool in_parts = seed % 2 == 1;
    io::CoreHost ha(
        client.core, [&](Instant now, Core&) { client.run(now); }, in_parts);
    io::CoreHost hb(
        server.core, [&](Instant now, Core&) { server.run(now); }, in_parts);
    io::SimNetwork net(seed);
    net.add_host(ha);
    net.add_host(hb);
    const SeedFaults faults(draw);
    const io::LinkFaults& f = faults.full();
    faults.start(net);
    trace_if_asked(net);
    auto c = client.core.connect(net.now(), connect_to_b());
    if (!c) return {false, "connect"};
    std::size_t steps = 0;
    while (steps < 5'000'000 && net.step()) {
        ++steps;
        if (client.qp && server.qp) faults.qps_ready(net);
        if (!client.failure.empty() || !server.failure.empty()) break;
    }
    const std::string ctx = " (crc " + std::to_string(crc) + ", size " + std::to_string(size) +
                            ", count " + std::to_string(count) + ", loss " +
                            std::to_string(f.loss) + ", client " +
                            std::to_string(client.rping.iterations()) + " server " +
                            std::to_string(server.rping.iterations()) + " iterations, steps " +
                            std::to_string(steps) + ")";
    for (Node* n : {&client, &server})
        if (!n->failure.empty()) return {false, n->failure + ctx};
    for (Node* n : {&client, &server}) {
        const char* who = n->server ? "server" : "client";
        if (n->rping.phase() != tools::Rping::Phase::kDone || n->rping.iterations() != count)
            return {false, std::string(who) + " did not finish" + ctx};
        if (n->rping.bytes() != 2 * count * size)
            return {false, std::string(who) + " moved " + std::to_string(n->rping.bytes()) +
                               " bytes" + ctx};
        if (!n->stopped) return {false, std::string(who) + " never freed its QP" + ctx};
    }
    if (!client.qp_events.empty()) return {false, "the client's QP reported an event" + ctx};
    if (server.qp_events.size() != 1 ||
        server.qp_events[0].type != rdma::QpEventType::kDisconnected ||
        server.qp_events[0].status != 0)
        return {false, "the server's QP did not end with one kDisconnected(0)" + ctx};
    for (Node* n : {&client, &server}) {
        const Core& core = n->core;
        if (core.live_nodes() != 0 || core.pending_timers() != 0 || core.queued_events() != 0)
            return {false, "something left after close" + ctx};
        if (!n->qp || n->dev.query_qp(*n->qp).error() != rdma::VerbsError::kStaleHandle)
            return {false, "the QP outlived stop()" + ctx};
    }
    log_if_asked(seed, ctx, net);
    return {true, {}};
}

TEST(RdmaSim, RpingUnderFaults) {
    run_seeds("IWCM_RDMA_SIM_SEEDS", "IWCM_RDMA_SIM_SEED", 200, run_seed);
}

// ---- a corrupted FPDU inside a frame with a good TCP checksum ----

// A Core with a Device and a QP, driven by hand (no rping).
struct Plain {
    explicit Plain(const CoreConfig& config) : core(config), dev(core) {
        cq = *dev.create_cq(64);
        mem.assign(8192, std::byte{0});
        recv_mem.assign(64, std::byte{0});
        const std::uint32_t rw = rdma::kAccessLocalWrite | rdma::kAccessRemoteWrite;
        mr = *dev.reg_mr(mem, rw);
        recv_mr = *dev.reg_mr(recv_mem, rdma::kAccessLocalWrite);
    }

    void run(Instant now) {
        while (auto e = core.poll_event()) {
            if (dev.on_event(now, *e)) continue;
            if (e->type == EventType::kConnectRequest) (void)core.accept(now, e->conn, {});
            if (e->type != EventType::kEstablished) continue;
            rdma::QpAttr attr;
            attr.send_cq = attr.recv_cq = cq;
            attr.sq_sig_all = true;
            auto q = dev.create_qp(now, e->conn, attr);
            ASSERT_TRUE(q.has_value());
            qp = *q;
            const rdma::Sge sge{recv_mr.addr, 64, recv_mr.lkey};
            rdma::RecvWr wr;
            wr.wr_id = 7;
            wr.sg_list = std::span(&sge, 1);
            ASSERT_TRUE(dev.post_recv(now, *qp, wr).has_value());
        }
        while (auto q = dev.poll_qp_event()) qp_events.push_back(*q);
        std::array<rdma::WorkCompletion, 8> out;
        while (std::size_t n = dev.poll_cq(cq, out))
            wcs.insert(wcs.end(), out.begin(), out.begin() + n);
    }

    Core core;
    rdma::Device dev;
    rdma::CqHandle cq;
    std::vector<std::byte> mem, recv_mem;
    rdma::MemoryRegion mr, recv_mr;
    std::optional<rdma::QpHandle> qp;
    std::vector<rdma::QpEvent> qp_events;
    std::vector<rdma::WorkCompletion> wcs;
};

// The client's host: once armed, flips one data byte of the first FPDU of an
// RDMA Write it sends and recomputes the TCP checksum over the change.
class TamperHost final : public io::SimHost {
public:
    TamperHost(Plain& side) : side_(side) {}
    MacAddr mac() const override { return side_.core.config().mac; }
    void receive(Instant now, std::span<const std::byte> frame) override {
        side_.core.receive(now, frame);
        side_.run(now);
    }
    void on_timer(Instant now) override {
        side_.core.on_timer(now);
        side_.run(now);
    }
    std::optional<Instant> next_deadline() const override { return side_.core.next_deadline(); }
    std::optional<std::span<const std::byte>> poll_transmit() override {
        auto f = side_.core.poll_transmit();
        if (!f || !armed || tampered) return f;
        auto p = wire::parse_tcp_frame(*f);
        // An RDMA Write FPDU: length, then DDP control T|L|version and RDMAP opcode 0.
        if (!p || p->payload.size() <= kFlipAt ||
            (p->payload[2] & std::byte{0x80}) == std::byte{0} ||
            (p->payload[3] & std::byte{0x0F}) != std::byte{0})
            return f;
        buf_.assign(f->begin(), f->end());
        const auto payload_off = static_cast<std::size_t>(p->payload.data() - f->data());
        const std::size_t seg_off = payload_off - p->repr.tcp.header_len();
        buf_[payload_off + kFlipAt] ^= std::byte{0x5A};
        wire::MutBytes seg(buf_.data() + seg_off, payload_off + p->payload.size() - seg_off);
        wire::finish_tcp_checksum(seg, wire::IpPseudoHeader{p->repr.ip.src, p->repr.ip.dst});
        EXPECT_TRUE(wire::parse_tcp_frame(buf_).has_value()) << "the repaired frame must pass";
        tampered = true;
        return std::span<const std::byte>(buf_);
    }

    // The byte flipped: data byte 100 of the Write (after the FPDU's length
    // field and the 14-byte tagged DDP header).
    static constexpr std::size_t kFlipAt = 2 + 14 + 100;
    bool armed = false;
    bool tampered = false;

private:
    Plain& side_;
    std::vector<std::byte> buf_;
};

void corrupt_fpdu_case(bool crc) {
    SCOPED_TRACE(crc ? "CRC on" : "CRC off");
    CoreConfig ca = config_for(kMacA, 1);
    ca.mpa.crc = crc;
    Plain client(ca), server(config_for(kMacB, 2));
    ASSERT_TRUE(client.core.add_address(ip_a()) && server.core.add_address(ip_b()));
    ASSERT_TRUE(server.core.listen({{ip_b(), 4791}, 0}));
    for (std::size_t i = 0; i < client.mem.size(); ++i)
        client.mem[i] = static_cast<std::byte>(1 + i % 251);
    TamperHost ha(client);
    io::CoreHost hb(server.core, [&](Instant now, Core&) { server.run(now); });
    io::SimNetwork net(1);
    net.add_host(ha);
    net.add_host(hb);
    ConnectParams p;
    p.local = {ip_a(), 0};
    p.remote = {ip_b(), 4791};
    p.remote_mac = kMacB;
    ASSERT_TRUE(client.core.connect(net.now(), p).has_value());
    net.run(100'000);
    ASSERT_TRUE(client.qp && server.qp);
    ASSERT_EQ(client.dev.query_qp(*client.qp)->crc, crc);
    // An RDMA Write of the whole region (several FPDUs), then a Send.
    const rdma::Sge src{client.mr.addr, 8192, client.mr.lkey};
    rdma::SendWr w;
    w.wr_id = 1;
    w.opcode = rdma::WrOpcode::kRdmaWrite;
    w.sg_list = std::span(&src, 1);
    w.remote_addr = server.mr.addr;
    w.rkey = server.mr.rkey;
    ha.armed = true;
    ASSERT_TRUE(client.dev.post_send(net.now(), *client.qp, w).has_value());
    const rdma::Sge msg{client.mr.addr, 16, client.mr.lkey};
    rdma::SendWr s;
    s.wr_id = 2;
    s.sg_list = std::span(&msg, 1);
    ASSERT_TRUE(client.dev.post_send(net.now(), *client.qp, s).has_value());
    net.run(1'000'000);
    ASSERT_TRUE(ha.tampered);
    std::vector<std::byte> want = client.mem;
    if (crc) {
        // Nothing of the bad FPDU, nor of what followed it, was placed.
        EXPECT_TRUE(std::all_of(server.mem.begin(), server.mem.end(),
                                [](std::byte b) { return b == std::byte{0}; }));
        ASSERT_EQ(server.qp_events.size(), 2u);
        EXPECT_EQ(server.qp_events[0].type, rdma::QpEventType::kTerminateSent);
        ASSERT_EQ(client.qp_events.size(), 2u);
        EXPECT_EQ(client.qp_events[0].type, rdma::QpEventType::kTerminateReceived);
        for (const auto& ev : {server.qp_events[0], client.qp_events[0]}) {
            EXPECT_EQ(ev.term.layer, 2);  // LLP (MPA)
            EXPECT_EQ(ev.term.etype, 0);
            EXPECT_EQ(ev.term.code, 2);  // CRC error
        }
        for (const auto* side : {&server, &client}) {
            EXPECT_EQ(side->qp_events[1].type, rdma::QpEventType::kDisconnected);
            EXPECT_EQ(side->qp_events[1].status, 0);
        }
        ASSERT_EQ(server.wcs.size(), 1u);
        EXPECT_EQ(server.wcs[0].status, rdma::WcStatus::kWrFlushErr);
    } else {
        // Without CRC only TCP's checksum guards the bytes: the flip lands.
        want[TamperHost::kFlipAt - 16] ^= std::byte{0x5A};
        EXPECT_TRUE(std::equal(want.begin(), want.end(), server.mem.begin()));
        EXPECT_TRUE(server.qp_events.empty());
        ASSERT_EQ(server.wcs.size(), 1u);
        EXPECT_EQ(server.wcs[0].status, rdma::WcStatus::kSuccess);
        EXPECT_EQ(server.wcs[0].byte_len, 16u);
    }
    // Both free their QPs; the connections close and nothing is left.
    for (Plain* side : {&client, &server}) {
        ASSERT_TRUE(side->dev.destroy_qp(net.now(), *side->qp).has_value());
        net.run(1'000'000);
    }
    for (Plain* side : {&client, &server}) {
        EXPECT_EQ(side->core.live_nodes(), 0u);
        EXPECT_EQ(side->core.pending_timers(), 0u);
    }
}

TEST(RdmaSim, CorruptFpduWithGoodTcpChecksum) {
    corrupt_fpdu_case(true);
    corrupt_fpdu_case(false);
}

}  // namespace
}  // namespace iwcm::test
