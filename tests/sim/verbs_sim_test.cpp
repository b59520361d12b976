// Send with Invalidate and shared receive queues on the simulated network: two Cores with
// a Device each, driven by hand through the seeded simulator, under the faults of
// rdma_sim_test.cpp (loss, duplication, reordering and jitter from the first SYN,
// corruption once the QPs exist). Even seeds run with CRC; seeds 2 and 3 of every four
// move every frame in parts (io::PartsShuttle), so Sends are placed from pieces.
//
// Read first: rdma_sim.hpp (the faults), include/iwcm/verbs.hpp (kSendWithInvalidate,
// WorkCompletion::with_invalidate, SrqAttr, kSrqLimit), RFC 5040 sections 4.4 and 6.10.
//
// RdmaSim.SendInvalidateUnderFaults, per seed: each side registers 1 to 8 target regions
// (remote read and write) and a control region, and sends the other 1 to 24 Sends of 0
// to 6000 bytes (several FPDUs), with and without Solicited Event; one of them names each
// of the peer's targets in a Send with Invalidate, most of those right behind an RDMA
// Write into that target, and an RDMA Write into the control region comes last. Checked:
// every work request completes once, in order, with the whole completion expected (a
// receive of a Send with Invalidate says so and names the STag); every message's bytes
// and every Write's land; then no invalidated STag names its region for its owner
// (post_send refuses it as a local SGE), and the peer's RDMA Read or Write to one of them
// (the seed chooses) draws a TERMINATE whose events, on both sides, are compared whole,
// with the Read completing as a remote access error and the region unchanged.
//
// RdmaSim.SharedReceiveQueueUnderFaults, per seed: the client opens 2 to 4 connections to
// the server, whose QPs share one SRQ (1 to 6 SGEs per receive); each client QP sends 8
// to 31 numbered Sends, at most 1 to 3 of them outstanding. The server posts a receive
// back only when the SRQ's armed limit event says few are left (its limit is what the
// clients may have in flight, so a lost event starves a Send of its receive), then arms
// the limit again. Checked: every Send lands exactly once, in a receive of the SRQ on
// the QP of its connection, in the order it was sent; every receive posted completes
// once or is still in the SRQ at the end; the limit event comes each time the SRQ falls
// below the armed limit, only then, with the limit disarmed; all ends without a flush.
//
// IWCM_RDMA_SIM_SEEDS=n changes the number of seeds, IWCM_RDMA_SIM_SEED=s runs one,
// IWCM_RDMA_SIM_TRACE=1 prints every frame, IWCM_RDMA_SIM_LOG=1 a line per seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cm/harness.hpp"
#include "io/sim/rng.hpp"
#include "io/sim/sim.hpp"
#include "iwcm/verbs.hpp"
#include "sim/rdma_sim.hpp"
#include "sim/seeds.hpp"
#include "wire/ddp.hpp"
#include "wire/fpdu.hpp"

namespace iwcm::test {
namespace {

using rdma::QpEvent;
using rdma::QpEventType;
using rdma::WcOpcode;
using rdma::WcStatus;
using rdma::WorkCompletion;

struct Outcome {
    bool ok = false;
    std::string why;
};

constexpr std::uint32_t kMaxSge = 6;  // QpAttr::max_sge and SrqAttr::max_sge at most

std::string show(const QpEvent& e) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%s qp %u/%u conn %u/%u cq %u/%u srq %u/%u status %d term %u/%u/%u siw %d "
                  "control %08x",
                  std::string(rdma::to_string(e.type)).c_str(), e.qp.index, e.qp.generation,
                  e.conn.index, e.conn.generation, e.cq.index, e.cq.generation, e.srq.index,
                  e.srq.generation, e.status, e.term.layer, e.term.etype, e.term.code,
                  e.term.siw_order, e.term.control);
    return buf;
}

std::string show(const WorkCompletion& w) {
    char buf[256];
    std::snprintf(
        buf, sizeof buf, "wr %llu %s %s len %u qp %u/%u solicited %d with_inv %d rkey %08x",
        static_cast<unsigned long long>(w.wr_id), std::string(rdma::to_string(w.status)).c_str(),
        std::string(rdma::to_string(w.opcode)).c_str(), w.byte_len, w.qp.index, w.qp.generation,
        w.solicited, w.with_invalidate, w.invalidated_rkey);
    return buf;
}

// The whole lists, one line each, with the first difference named.
std::string compare(const std::vector<std::string>& want, const std::vector<std::string>& got) {
    for (std::size_t i = 0; i < std::max(want.size(), got.size()); ++i) {
        const std::string w = i < want.size() ? want[i] : "(nothing)";
        const std::string g = i < got.size() ? got[i] : "(nothing)";
        if (w != g) return "#" + std::to_string(i) + ": want " + w + ", got " + g;
    }
    return {};
}

template <class T>
std::vector<std::string> shown(const std::vector<T>& items) {
    std::vector<std::string> out;
    for (const T& item : items) out.push_back(show(item));
    return out;
}

// A seed's byte pattern: byte i of stream `stream`.
std::byte pattern(std::uint64_t seed, std::uint32_t stream, std::size_t i) {
    return static_cast<std::byte>((seed * 131 + stream * 29 + i * 7 + (i >> 8)) & 0xFF);
}

// A buffer of `length` bytes at `addr` cut into `sges` SGEs of uneven lengths, some of
// them perhaps empty.
std::vector<rdma::Sge> cut(io::Rng& draw, std::uint64_t addr, std::uint32_t length,
                           std::uint32_t lkey, std::uint32_t sges) {
    std::vector<rdma::Sge> out;
    std::uint32_t left = length;
    for (std::uint32_t i = 0; i + 1 < sges; ++i) {
        const auto n = static_cast<std::uint32_t>(draw.below(left / 2 + 1));
        out.push_back({addr, n, lkey});
        addr += n;
        left -= n;
    }
    out.push_back({addr, left, lkey});
    return out;
}

// One host of these scenarios: a Core and its Device (STag keys from the seed, so that a
// seed replays byte for byte), one CQ for all its QPs, a QP made for each connection as
// it is established, and everything the device reported. `app` runs after each frame and
// timer of the host, once the news are in.
struct VerbHost {
    VerbHost(MacAddr mac, std::uint8_t secret, std::uint64_t seed, bool crc)
        : core(core_config(mac, secret, crc)), dev(core, device_config(seed, secret)) {
        cq = *dev.create_cq(kCqDepth);
        attr.send_cq = attr.recv_cq = cq;
        attr.sq_sig_all = true;
        attr.max_sge = kMaxSge;
    }
    static constexpr std::uint32_t kCqDepth = 1024;

    static CoreConfig core_config(MacAddr mac, std::uint8_t secret, bool crc) {
        CoreConfig c = config_for(mac, secret);
        c.mpa.crc = crc;
        return c;
    }
    static rdma::DeviceConfig device_config(std::uint64_t seed, std::uint8_t secret) {
        rdma::DeviceConfig d;
        io::Rng r(seed * 4 + secret);
        std::array<std::uint8_t, 16> key{};
        for (auto& b : key) b = static_cast<std::uint8_t>(r.below(256));
        d.key_secret = key;
        return d;
    }

    void fail(const std::string& what) {
        if (failure.empty()) failure = what;
    }

    void run(Instant now) {
        while (auto e = core.poll_event()) {
            if (dev.on_event(now, *e)) continue;
            if (e->type == EventType::kConnectRequest) {
                if (!core.accept(now, e->conn, AcceptParams{{}, 4, 4})) fail("accept failed");
            } else if (e->type == EventType::kEstablished) {
                auto qp = dev.create_qp(now, e->conn, attr);
                if (!qp) {
                    fail("create_qp: " + std::string(rdma::to_string(qp.error())));
                    continue;
                }
                conns.push_back(e->conn);
                qps.push_back(*qp);
            } else if (!e->terminal() || !destroyed(e->conn)) {
                // Only a connection whose QP was destroyed while it closed ends here.
                fail("unexpected event " + std::string(to_string(e->type)));
            }
        }
        while (auto q = dev.poll_qp_event()) events.push_back(*q);
        std::array<WorkCompletion, 32> out;
        while (std::size_t n = dev.poll_cq(cq, out))
            wcs.insert(wcs.end(), out.begin(), out.begin() + n);
        if (app) app(now);
    }

    bool destroyed(ConnHandle conn) const {
        return std::find(gone.begin(), gone.end(), conn) != gone.end();
    }
    void destroy_qps(Instant now) {
        for (std::size_t i = 0; i < qps.size(); ++i) {
            if (!dev.destroy_qp(now, qps[i])) fail("destroy_qp");
            gone.push_back(conns[i]);
        }
    }
    // Nothing left of any connection once the network is idle.
    bool empty() const {
        return core.live_nodes() == 0 && core.pending_timers() == 0 && core.queued_events() == 0;
    }

    Core core;
    rdma::Device dev;
    rdma::CqHandle cq;
    rdma::QpAttr attr;  // of the QPs made at kEstablished
    std::vector<ConnHandle> conns;
    std::vector<rdma::QpHandle> qps;  // conns[i]'s
    std::vector<ConnHandle> gone;     // connections whose QP destroy_qps freed
    std::vector<QpEvent> events;
    std::vector<WorkCompletion> wcs;
    std::function<void(Instant)> app;
    std::string failure;
};

// Client and server hosts on a seeded network with the seed's faults: CRC on even seeds,
// frames in parts on seeds 2 and 3 of every four.
struct SimPair {
    SimPair(std::uint64_t seed, io::Rng& draw)
        : client(kMacA, 1, seed, seed % 2 == 0),
          server(kMacB, 2, seed, seed % 2 == 0),
          ha(
              client.core, [this](Instant now, Core&) { client.run(now); }, seed % 4 >= 2),
          hb(
              server.core, [this](Instant now, Core&) { server.run(now); }, seed % 4 >= 2),
          net(seed),
          faults(draw) {
        net.add_host(ha);
        net.add_host(hb);
        faults.start(net);
        trace_if_asked(net);
        ok = client.core.add_address(ip_a()).has_value() &&
             server.core.add_address(ip_b()).has_value() &&
             server.core.listen({{ip_b(), 4791}, 0}).has_value();
    }

    // Steps until `done` holds (true) or a host fails, the network idles or the step budget
    // runs out (false). Corruption starts once `qps` QPs exist on each side.
    bool run_until(const std::function<bool()>& done, std::size_t qps) {
        while (steps < kMaxSteps) {
            if (!client.failure.empty() || !server.failure.empty()) return false;
            if (done()) return true;
            if (client.qps.size() >= qps && server.qps.size() >= qps) faults.qps_ready(net);
            if (!net.step()) return done();
            ++steps;
        }
        return false;
    }
    std::string failure() const {
        if (!client.failure.empty()) return "client: " + client.failure;
        if (!server.failure.empty()) return "server: " + server.failure;
        return {};
    }

    static constexpr std::size_t kMaxSteps = 2'000'000;
    VerbHost client, server;
    io::CoreHost ha, hb;
    io::SimNetwork net;
    SeedFaults faults;
    std::size_t steps = 0;
    bool ok = false;
};

// ---- Send with Invalidate ----

constexpr std::uint32_t kMaxMessage = 6000;
constexpr std::uint32_t kControlLen = 512;

// What one side sends the other, in posting order.
struct InvWork {
    rdma::WrOpcode op = rdma::WrOpcode::kSend;
    std::uint64_t wr_id = 0;
    std::uint32_t length = 0;
    std::uint64_t src = 0;     // offset of its bytes in the sender's source
    std::uint32_t target = 0;  // Send with Invalidate, Write: the peer's target region
    std::uint32_t offset = 0;  // Write: where in the target (or control region)
    bool control = false;      // Write: into the peer's control region
    bool solicited = false;
};

struct InvSide {
    explicit InvSide(VerbHost& h) : host(h) {}
    VerbHost& host;
    // Ours: the regions the peer writes and invalidates, the control region, the source of
    // what we send, our receive buffers and the sink of our last Read.
    std::vector<std::uint32_t> target_len;
    std::vector<std::byte> targets, control, src, sink, read_sink;
    std::vector<rdma::MemoryRegion> target_mr;
    rdma::MemoryRegion control_mr, src_mr, sink_mr, read_sink_mr;
    std::vector<InvWork> work;   // what we post to the peer
    std::uint32_t receives = 0;  // the peer's Sends to us
    std::vector<std::vector<rdma::Sge>> recv_sges;
    bool posted = false;
};

std::uint32_t draw_length(io::Rng& draw) {
    switch (draw.below(8)) {
        case 0: return 0;
        case 1:
        case 2: return static_cast<std::uint32_t>(1 + draw.below(200));
        case 3:
        case 4: return static_cast<std::uint32_t>(200 + draw.below(1300));
        default: return static_cast<std::uint32_t>(1500 + draw.below(kMaxMessage - 1500 + 1));
    }
}

// Our regions and the work we send the peer, whose targets `peer` registered.
void plan_side(io::Rng& draw, std::uint64_t seed, std::uint32_t who, InvSide& me,
               const InvSide& peer) {
    const auto& pt = peer.target_len;
    const auto k = static_cast<std::uint32_t>(pt.size());
    const auto sends = static_cast<std::uint32_t>(k + draw.below(17));
    // Which Send invalidates which target: the first k of a shuffled list.
    std::vector<std::uint32_t> order(sends);
    for (std::uint32_t i = 0; i < sends; ++i) order[i] = i;
    for (std::uint32_t i = sends; i > 1; --i) std::swap(order[i - 1], order[draw.below(i)]);
    std::vector<std::int64_t> invalidates(sends, -1);
    for (std::uint32_t t = 0; t < k; ++t) invalidates[order[t]] = t;
    std::uint64_t src = 0;
    std::uint64_t wr_id = 0;
    for (std::uint32_t i = 0; i < sends; ++i) {
        if (invalidates[i] >= 0 && draw.below(4) != 0) {
            // A Write into the target, then the Send that invalidates it.
            InvWork w;
            w.op = rdma::WrOpcode::kRdmaWrite;
            w.wr_id = wr_id++;
            w.target = static_cast<std::uint32_t>(invalidates[i]);
            w.length = static_cast<std::uint32_t>(1 + draw.below(pt[w.target]));
            w.offset = static_cast<std::uint32_t>(draw.below(pt[w.target] - w.length + 1));
            w.src = src;
            src += w.length;
            me.work.push_back(w);
        }
        InvWork s;
        s.op = invalidates[i] >= 0 ? rdma::WrOpcode::kSendWithInvalidate : rdma::WrOpcode::kSend;
        s.wr_id = wr_id++;
        s.target = invalidates[i] >= 0 ? static_cast<std::uint32_t>(invalidates[i]) : 0;
        s.length = draw_length(draw);
        s.solicited = draw.below(2) == 1;
        s.src = src;
        src += s.length;
        me.work.push_back(s);
    }
    InvWork c;
    c.op = rdma::WrOpcode::kRdmaWrite;
    c.wr_id = wr_id++;
    c.control = true;
    c.length = static_cast<std::uint32_t>(1 + draw.below(kControlLen));
    c.offset = static_cast<std::uint32_t>(draw.below(kControlLen - c.length + 1));
    c.src = src;
    src += c.length;
    me.work.push_back(c);
    me.src.resize(src + 4096);  // and the last Write's bytes
    for (std::size_t i = 0; i < me.src.size(); ++i) me.src[i] = pattern(seed, who, i);
}

void register_side(io::Rng& draw, InvSide& s) {
    const auto k = static_cast<std::uint32_t>(1 + draw.below(8));
    std::size_t total = 0;
    for (std::uint32_t t = 0; t < k; ++t) {
        s.target_len.push_back(static_cast<std::uint32_t>(64 + draw.below(4033)));
        total += s.target_len.back();
    }
    s.targets.assign(total, std::byte{0});
    s.control.assign(kControlLen, std::byte{0});
    s.read_sink.assign(4096 + 64, std::byte{0});
    const std::uint32_t remote =
        rdma::kAccessLocalWrite | rdma::kAccessRemoteWrite | rdma::kAccessRemoteRead;
    std::size_t off = 0;
    for (std::uint32_t len : s.target_len) {
        s.target_mr.push_back(*s.host.dev.reg_mr(std::span(s.targets).subspan(off, len), remote));
        off += len;
    }
    s.control_mr = *s.host.dev.reg_mr(s.control, remote);
    s.read_sink_mr = *s.host.dev.reg_mr(s.read_sink, rdma::kAccessLocalWrite);
}

// Our receives (one per Send of the peer, each cut into 1 to 6 SGEs) and our work, posted
// as soon as our QP exists.
void post_side(Instant now, InvSide& me, const InvSide& peer) {
    VerbHost& h = me.host;
    if (me.posted || h.qps.empty()) return;
    me.posted = true;
    const rdma::QpHandle qp = h.qps[0];
    {
        rdma::Device::RecvBatch batch(h.dev, now, qp);
        for (std::uint32_t j = 0; j < me.receives; ++j) {
            const rdma::Sge* sges = me.recv_sges[j].data();
            rdma::RecvWr r{j, std::span(sges, me.recv_sges[j].size())};
            if (!h.dev.post_recv(now, qp, r)) h.fail("post_recv " + std::to_string(j));
        }
    }
    for (const InvWork& w : me.work) {
        const rdma::Sge g{me.src_mr.addr + w.src, w.length, me.src_mr.lkey};
        rdma::SendWr wr;
        wr.wr_id = w.wr_id;
        wr.opcode = w.op;
        wr.sg_list = w.length > 0 ? std::span(&g, 1) : std::span<const rdma::Sge>{};
        wr.solicited = w.solicited;
        if (w.op == rdma::WrOpcode::kRdmaWrite) {
            const rdma::MemoryRegion& to = w.control ? peer.control_mr : peer.target_mr[w.target];
            wr.remote_addr = to.addr + w.offset;
            wr.rkey = to.rkey;
        } else if (w.op == rdma::WrOpcode::kSendWithInvalidate) {
            wr.invalidate_rkey = peer.target_mr[w.target].rkey;
        }
        auto posted = h.dev.post_send(now, qp, wr);
        if (!posted)
            h.fail("post_send " + std::to_string(w.wr_id) + ": " +
                   std::string(rdma::to_string(posted.error())));
    }
}

// What `me` must have completed once all went through: its work in order, then the peer's
// Sends in its receives, in order.
std::vector<std::string> expected_wcs(const InvSide& me, const InvSide& peer) {
    std::vector<std::string> want;
    const rdma::QpHandle qp = me.host.qps[0];
    for (const InvWork& w : me.work) {
        WorkCompletion wc;
        wc.wr_id = w.wr_id;
        wc.opcode = w.op == rdma::WrOpcode::kRdmaWrite ? WcOpcode::kRdmaWrite : WcOpcode::kSend;
        wc.byte_len = w.length;
        wc.qp = qp;
        want.push_back(show(wc));
    }
    std::uint64_t j = 0;
    for (const InvWork& w : peer.work) {
        if (w.op == rdma::WrOpcode::kRdmaWrite) continue;
        WorkCompletion wc;
        wc.wr_id = j++;
        wc.opcode = WcOpcode::kRecv;
        wc.byte_len = w.length;
        wc.qp = qp;
        wc.solicited = w.solicited;
        wc.with_invalidate = w.op == rdma::WrOpcode::kSendWithInvalidate;
        wc.invalidated_rkey = wc.with_invalidate ? me.target_mr[w.target].rkey : 0;
        want.push_back(show(wc));
    }
    return want;
}

// The completions of `me` came in two streams (its work and its receives) that interleave
// as the network has it: each is compared in its own order.
std::string check_completions(const InvSide& me, const InvSide& peer) {
    std::vector<std::string> work, recv;
    for (const WorkCompletion& wc : me.host.wcs)
        (wc.opcode == WcOpcode::kRecv ? recv : work).push_back(show(wc));
    const auto want = expected_wcs(me, peer);
    const std::vector<std::string> want_work(want.begin(), want.begin() + me.work.size());
    const std::vector<std::string> want_recv(want.begin() + me.work.size(), want.end());
    std::string d = compare(want_work, work);
    if (!d.empty()) return "work completions " + d;
    d = compare(want_recv, recv);
    return d.empty() ? d : "receive completions " + d;
}

// The peer's bytes where they belong in `me`: each Send's in its receive's SGEs, each
// Write's in its region. Bytes nothing wrote stay zero.
std::string check_memory(const InvSide& me, const InvSide& peer) {
    std::vector<std::byte> sink(me.sink.size(), std::byte{0});
    std::vector<std::byte> targets(me.targets.size(), std::byte{0});
    std::vector<std::byte> control(kControlLen, std::byte{0});
    std::vector<std::size_t> target_at(me.target_len.size(), 0);
    for (std::size_t t = 1; t < target_at.size(); ++t)
        target_at[t] = target_at[t - 1] + me.target_len[t - 1];
    std::uint32_t j = 0;
    for (const InvWork& w : peer.work) {
        auto from = peer.src.begin() + static_cast<std::ptrdiff_t>(w.src);
        if (w.op == rdma::WrOpcode::kRdmaWrite) {
            auto to = w.control ? control.begin() : targets.begin() + target_at[w.target];
            std::copy(from, from + w.length, to + w.offset);
            continue;
        }
        std::uint32_t left = w.length;
        for (const rdma::Sge& s : me.recv_sges[j++]) {
            const std::uint32_t n = std::min(left, s.length);
            std::copy(from, from + n,
                      sink.begin() + static_cast<std::ptrdiff_t>(s.addr - me.sink_mr.addr));
            from += n;
            left -= n;
        }
    }
    if (sink != me.sink) return "the bytes of a receive";
    if (targets != me.targets) return "a target region's bytes";
    if (control != me.control) return "the control region's bytes";
    return {};
}

Outcome run_invalidate_seed(std::uint64_t seed) {
    io::Rng draw(seed);
    SimPair p(seed, draw);
    if (!p.ok) return {false, "setup"};
    InvSide client(p.client), server(p.server);
    register_side(draw, client);
    register_side(draw, server);
    plan_side(draw, seed, 0, client, server);
    plan_side(draw, seed, 1, server, client);
    for (auto [me, peer] : {std::pair{&client, &server}, std::pair{&server, &client}}) {
        for (const InvWork& w : peer->work) me->receives += w.op != rdma::WrOpcode::kRdmaWrite;
        me->sink.assign(std::size_t{me->receives} * kMaxMessage, std::byte{0});
        me->sink_mr = *me->host.dev.reg_mr(me->sink, rdma::kAccessLocalWrite);
        me->src_mr = *me->host.dev.reg_mr(me->src, 0);
        for (std::uint32_t j = 0; j < me->receives; ++j) {
            const auto sges = static_cast<std::uint32_t>(1 + draw.below(kMaxSge));
            me->recv_sges.push_back(cut(draw, me->sink_mr.addr + std::uint64_t{j} * kMaxMessage,
                                        kMaxMessage, me->sink_mr.lkey, sges));
        }
    }
    p.client.app = [&](Instant now) { post_side(now, client, server); };
    p.server.app = [&](Instant now) { post_side(now, server, client); };
    // The last access: who makes it, a Read or a Write, to which of the peer's targets.
    const bool by_client = draw.below(2) == 1;
    const bool read = draw.below(2) == 1;
    InvSide& actor = by_client ? client : server;
    InvSide& owner = by_client ? server : client;
    const auto target = static_cast<std::uint32_t>(draw.below(owner.target_len.size()));
    const std::string ctx = " (crc " + std::to_string(seed % 2 == 0) + ", client posts " +
                            std::to_string(client.work.size()) + ", server posts " +
                            std::to_string(server.work.size()) + ", loss " +
                            std::to_string(p.faults.full().loss) + ")";

    if (!p.client.core.connect(p.net.now(), connect_to_b())) return {false, "connect"};
    const auto all_done = [&] {
        for (const InvSide* s : {&client, &server})
            if (s->host.wcs.size() < s->work.size() + s->receives) return false;
        return true;
    };
    if (!p.run_until(all_done, 1))
        return {false, "the work did not complete: " + p.failure() + " at step " +
                           std::to_string(p.steps) + ctx};
    for (auto [me, peer] : {std::pair{&client, &server}, std::pair{&server, &client}}) {
        const char* who = me == &client ? "client: " : "server: ";
        std::string d = check_completions(*me, *peer);
        if (d.empty()) d = check_memory(*me, *peer);
        if (d.empty() && !me->host.events.empty())
            d = "an event before the end: " + show(me->host.events[0]);
        if (!d.empty()) return {false, who + d + ctx};
        // No invalidated STag names its region for its owner either.
        for (const rdma::MemoryRegion& mr : me->target_mr) {
            const rdma::Sge g{mr.addr, 1, mr.lkey};
            rdma::SendWr wr;
            wr.sg_list = std::span(&g, 1);
            auto r = me->host.dev.post_send(p.net.now(), me->host.qps[0], wr);
            if (r || r.error() != rdma::VerbsError::kLocalProtection)
                return {false, who + std::string("an invalidated STag still serves locally") + ctx};
        }
    }
    const std::size_t actor_wcs = actor.host.wcs.size();
    const std::vector<std::byte> before = owner.targets;
    const rdma::MemoryRegion& mr = owner.target_mr[target];
    const std::uint32_t len = std::min<std::uint32_t>(owner.target_len[target], 4096);
    const rdma::Sge g = read ? rdma::Sge{actor.read_sink_mr.addr, len, actor.read_sink_mr.lkey}
                             : rdma::Sge{actor.src_mr.addr, len, actor.src_mr.lkey};
    rdma::SendWr access;
    access.wr_id = 999;
    access.opcode = read ? rdma::WrOpcode::kRdmaRead : rdma::WrOpcode::kRdmaWrite;
    access.sg_list = std::span(&g, 1);
    access.remote_addr = mr.addr;
    access.rkey = mr.rkey;
    if (!actor.host.dev.post_send(p.net.now(), actor.host.qps[0], access))
        return {false, "the last access was refused" + ctx};
    const auto ended = [&] {
        return client.host.events.size() >= 2 && server.host.events.size() >= 2;
    };
    if (!p.run_until(ended, 1))
        return {false, "the TERMINATE did not end both QPs: " + p.failure() + ctx};
    // RFC 5040 section 4.8's Terminate Control: layer, error type, code, then the M, D and
    // R bits, as the owner quotes the DDP segment's length and header (and the Read
    // Request's RDMAP header).
    const std::uint8_t layer = read ? wire::kTermLayerRdmap : wire::kTermLayerDdp;
    const std::uint8_t etype = read ? wire::kRdmapEtypeRemoteProtection : wire::kDdpEtypeTagged;
    const std::uint8_t code = read ? wire::kRdmapCodeInvalidStag : wire::kDdpTaggedInvalidStag;
    const std::uint32_t control = std::uint32_t{layer} << 28 | std::uint32_t{etype} << 24 |
                                  std::uint32_t{code} << 16 | 0x8000 | 0x4000 | (read ? 0x2000 : 0);
    for (InvSide* s : {&actor, &owner}) {
        const bool is_actor = s == &actor;
        QpEvent term;
        term.type = is_actor ? QpEventType::kTerminateReceived : QpEventType::kTerminateSent;
        term.qp = s->host.qps[0];
        term.conn = s->host.conns[0];
        term.term = {layer, etype, code, false, is_actor ? control : 0};
        QpEvent down;
        down.qp = term.qp;
        down.conn = term.conn;
        const std::string d = compare(shown(std::vector{term, down}), shown(s->host.events));
        if (!d.empty())
            return {false, std::string(is_actor ? "actor" : "owner") + " events " + d + ctx};
    }
    if (owner.targets != before) return {false, "the refused access wrote the region" + ctx};
    // The Read completes with the peer's reason; a Write may have completed at the ACK
    // already (the bytes reached the peer's TCP) or is flushed with the QP.
    if (actor.host.wcs.size() != actor_wcs + 1)
        return {false, "the last access did not complete once" + ctx};
    const WorkCompletion& last = actor.host.wcs.back();
    WorkCompletion want;
    want.wr_id = access.wr_id;
    want.opcode = read ? WcOpcode::kRdmaRead : WcOpcode::kRdmaWrite;
    want.status = read                                ? WcStatus::kRemAccessErr
                  : last.status == WcStatus::kSuccess ? WcStatus::kSuccess
                                                      : WcStatus::kWrFlushErr;
    want.byte_len = want.status == WcStatus::kSuccess ? len : 0;
    want.qp = actor.host.qps[0];
    if (show(last) != show(want))
        return {false, "the last access completed as " + show(last) + ", want " + show(want) + ctx};
    if (read && !std::all_of(actor.read_sink.begin(), actor.read_sink.end(),
                             [](std::byte b) { return b == std::byte{0}; }))
        return {false, "the refused Read placed bytes" + ctx};
    if (owner.host.wcs.size() != owner.work.size() + owner.receives)
        return {false, "the owner completed more work" + ctx};
    p.client.destroy_qps(p.net.now());
    p.server.destroy_qps(p.net.now());
    p.run_until([] { return false; }, 1);
    if (!p.failure().empty()) return {false, p.failure() + ctx};
    if (!p.client.empty() || !p.server.empty()) return {false, "something left after close" + ctx};
    log_if_asked(seed, ctx, p.net);
    return {true, {}};
}

TEST(RdmaSim, SendInvalidateUnderFaults) {
    run_seeds("IWCM_RDMA_SIM_SEEDS", "IWCM_RDMA_SIM_SEED", 200, run_invalidate_seed);
}

// ---- shared receive queue ----

constexpr std::uint32_t kSrqBuffer = 4096;
constexpr std::size_t kHeader = 3;  // a Send's first bytes: its connection, its number

// The client's side: its connections' Sends, at most `window` of each outstanding.
struct SrqClient {
    std::vector<std::vector<std::uint32_t>> lengths;  // [connection][number]
    std::vector<std::vector<std::uint64_t>> at;       // where each lies in `src`
    std::vector<std::uint32_t> sent, completed;
    std::vector<std::byte> src;
    rdma::MemoryRegion src_mr;
    std::uint32_t window = 1;
    std::size_t seen = 0;  // completions checked
};

// The server's side: one SRQ, `buffers` receive buffers of kSrqBuffer bytes, each
// posted, taken, or held until the limit event says to post it again.
struct SrqServer {
    rdma::SrqHandle srq;
    std::uint32_t limit = 0;  // armed at this whenever `armed`
    bool armed = false;
    std::vector<std::byte> sink;
    rdma::MemoryRegion sink_mr;
    std::uint32_t max_sge = 1;
    struct Posting {
        std::uint32_t buffer;
        std::vector<rdma::Sge> sges;
        bool done = false;
    };
    std::vector<Posting> postings;  // by wr_id
    std::vector<std::uint32_t> held;
    std::map<std::uint32_t, std::size_t> conn_of_qp;  // our QP index -> the client's connection
    std::vector<std::uint32_t> next;                  // [connection]: the number expected
    std::uint64_t limit_events = 0;
    std::size_t disconnected = 0;
    std::size_t seen_wcs = 0, seen_events = 0;
};

std::byte srq_byte(std::uint64_t seed, std::size_t conn, std::uint32_t number, std::size_t i) {
    if (i == 0) return static_cast<std::byte>(conn);
    if (i == 1) return static_cast<std::byte>(number >> 8);
    if (i == 2) return static_cast<std::byte>(number);
    return pattern(seed, static_cast<std::uint32_t>(conn) << 16 | number, i);
}

void post_srq_buffer(Instant now, io::Rng& draw, VerbHost& h, SrqServer& s, std::uint32_t buffer) {
    SrqServer::Posting p{buffer,
                         cut(draw, s.sink_mr.addr + std::uint64_t{buffer} * kSrqBuffer, kSrqBuffer,
                             s.sink_mr.lkey, static_cast<std::uint32_t>(1 + draw.below(s.max_sge))),
                         false};
    const rdma::RecvWr wr{s.postings.size(), std::span(p.sges.data(), p.sges.size())};
    if (!h.dev.post_srq_recv(now, s.srq, wr)) h.fail("post_srq_recv");
    s.postings.push_back(std::move(p));
}

void arm(VerbHost& h, SrqServer& s) {
    auto info = h.dev.query_srq(s.srq);
    // Armed below the receives posted, or the event would be due at once.
    if (!info || info->posted < s.limit)
        return h.fail("arming at " + std::to_string(s.limit) + " with fewer posted");
    if (!h.dev.arm_srq_limit(s.srq, s.limit)) return h.fail("arm_srq_limit");
    s.armed = true;
}

void client_app(Instant now, VerbHost& h, SrqClient& c) {
    for (; c.seen < h.wcs.size(); ++c.seen) {
        const WorkCompletion& wc = h.wcs[c.seen];
        const auto conn = static_cast<std::size_t>(wc.wr_id >> 32);
        const auto number = static_cast<std::uint32_t>(wc.wr_id);
        if (conn >= h.qps.size() || number != c.completed[conn])
            return h.fail("send completion out of order: " + show(wc));
        WorkCompletion want;
        want.wr_id = wc.wr_id;
        want.byte_len = c.lengths[conn][number];
        want.qp = h.qps[conn];
        if (show(wc) != show(want))
            return h.fail("send completion " + show(wc) + ", want " + show(want));
        ++c.completed[conn];
    }
    for (std::size_t j = 0; j < h.qps.size(); ++j) {
        while (c.sent[j] < c.lengths[j].size() && c.sent[j] - c.completed[j] < c.window) {
            const std::uint32_t n = c.sent[j]++;
            const rdma::Sge g{c.src_mr.addr + c.at[j][n], c.lengths[j][n], c.src_mr.lkey};
            rdma::SendWr wr;
            wr.wr_id = std::uint64_t{j} << 32 | n;
            wr.sg_list = std::span(&g, 1);
            if (!h.dev.post_send(now, h.qps[j], wr)) return h.fail("post_send");
        }
    }
}

void server_app(Instant now, io::Rng& draw, std::uint64_t seed, VerbHost& h, SrqServer& s,
                const SrqClient& c) {
    // Completions first: a limit event then posts back every buffer they freed.
    for (; s.seen_wcs < h.wcs.size(); ++s.seen_wcs) {
        const WorkCompletion& wc = h.wcs[s.seen_wcs];
        if (wc.status != WcStatus::kSuccess) return h.fail("receive " + show(wc));
        if (wc.wr_id >= s.postings.size() || s.postings[wc.wr_id].done)
            return h.fail("a receive completed that is not posted: " + show(wc));
        SrqServer::Posting& p = s.postings[wc.wr_id];
        p.done = true;
        // The Send's first bytes say whose and which it is.
        std::vector<std::byte> got;
        for (const rdma::Sge& g : p.sges) {
            const auto from = s.sink.begin() + static_cast<std::ptrdiff_t>(g.addr - s.sink_mr.addr);
            got.insert(got.end(), from, from + g.length);
        }
        const auto conn = static_cast<std::size_t>(got[0]);
        const std::uint32_t number =
            static_cast<std::uint32_t>(got[1]) << 8 | static_cast<std::uint32_t>(got[2]);
        auto [it, fresh] = s.conn_of_qp.emplace(wc.qp.index, conn);
        if (conn >= c.lengths.size() || it->second != conn)
            return h.fail("a Send of connection " + std::to_string(conn) + " on QP " +
                          std::to_string(wc.qp.index));
        if (fresh && std::count_if(s.conn_of_qp.begin(), s.conn_of_qp.end(),
                                   [&](const auto& kv) { return kv.second == conn; }) != 1)
            return h.fail("two QPs carry connection " + std::to_string(conn));
        if (number != s.next[conn])
            return h.fail("connection " + std::to_string(conn) + ": Send " +
                          std::to_string(number) + " where " + std::to_string(s.next[conn]) +
                          " was due");
        ++s.next[conn];
        WorkCompletion want;
        want.wr_id = wc.wr_id;
        want.opcode = WcOpcode::kRecv;
        want.byte_len = c.lengths[conn][number];
        want.qp = wc.qp;
        if (show(wc) != show(want)) return h.fail("receive " + show(wc) + ", want " + show(want));
        if (std::find(h.qps.begin(), h.qps.end(), wc.qp) == h.qps.end())
            return h.fail("a receive on no QP of ours");
        for (std::size_t i = 0; i < want.byte_len; ++i)
            if (got[i] != srq_byte(seed, conn, number, i))
                return h.fail("connection " + std::to_string(conn) + " Send " +
                              std::to_string(number) + " byte " + std::to_string(i));
        s.held.push_back(p.buffer);
    }
    for (; s.seen_events < h.events.size(); ++s.seen_events) {
        const QpEvent& e = h.events[s.seen_events];
        if (e.type == QpEventType::kDisconnected) {
            QpEvent want;
            want.qp = e.qp;
            want.conn = e.conn;
            const bool ours = std::find(h.qps.begin(), h.qps.end(), e.qp) != h.qps.end();
            if (!ours || show(e) != show(want)) return h.fail("event " + show(e));
            ++s.disconnected;
            continue;
        }
        QpEvent want;
        want.type = QpEventType::kSrqLimit;
        want.srq = s.srq;
        if (show(e) != show(want)) return h.fail("event " + show(e) + ", want " + show(want));
        if (!s.armed) return h.fail("a limit event while none was armed");
        auto info = h.dev.query_srq(s.srq);
        if (!info || info->limit != 0 || info->posted >= s.limit)
            return h.fail("a limit event with " + std::to_string(info ? info->posted : 0) +
                          " posted");
        s.armed = false;
        ++s.limit_events;
        for (std::uint32_t b : s.held) post_srq_buffer(now, draw, h, s, b);
        s.held.clear();
        arm(h, s);
    }
    // The armed limit stands until its event, which comes as the SRQ falls below it.
    auto info = h.dev.query_srq(s.srq);
    if (!info) return h.fail("query_srq");
    if (info->limit != (s.armed ? s.limit : 0))
        return h.fail("the SRQ's limit is " + std::to_string(info->limit));
    if (s.armed && info->posted < s.limit)
        return h.fail("below the limit (" + std::to_string(info->posted) +
                      " posted) with no event");
}

Outcome run_srq_seed(std::uint64_t seed) {
    io::Rng draw(seed);
    SimPair p(seed, draw);
    if (!p.ok) return {false, "setup"};
    const auto conns = static_cast<std::size_t>(2 + draw.below(3));
    SrqClient c;
    c.window = static_cast<std::uint32_t>(1 + draw.below(3));
    std::uint64_t total = 0;
    for (std::size_t j = 0; j < conns; ++j) {
        c.lengths.emplace_back();
        c.at.emplace_back();
        const auto sends = 8 + draw.below(24);
        for (std::uint64_t n = 0; n < sends; ++n) {
            const std::uint32_t len =
                draw.below(3) == 0
                    ? static_cast<std::uint32_t>(1400 + draw.below(kSrqBuffer - 1400 + 1))
                    : static_cast<std::uint32_t>(kHeader + draw.below(400));
            c.lengths[j].push_back(len);
            c.at[j].push_back(total);
            total += len;
        }
    }
    c.src.resize(total);
    c.sent.assign(conns, 0);
    c.completed.assign(conns, 0);
    for (std::size_t j = 0; j < conns; ++j)
        for (std::size_t n = 0; n < c.lengths[j].size(); ++n)
            for (std::size_t i = 0; i < c.lengths[j][n]; ++i)
                c.src[c.at[j][n] + i] = srq_byte(seed, j, static_cast<std::uint32_t>(n), i);
    c.src_mr = *p.client.dev.reg_mr(c.src, 0);

    SrqServer s;
    // The limit is the most the clients may have in flight: while the SRQ holds that many
    // receives, every Send finds one, however many arrive between two turns of the server.
    s.limit = static_cast<std::uint32_t>(conns) * c.window;
    const auto buffers = static_cast<std::uint32_t>(s.limit + conns + draw.below(8));
    s.max_sge = static_cast<std::uint32_t>(1 + draw.below(kMaxSge));
    s.next.assign(conns, 0);
    s.srq = *p.server.dev.create_srq({buffers, s.max_sge, 0});
    s.sink.assign(std::size_t{buffers} * kSrqBuffer, std::byte{0});
    s.sink_mr = *p.server.dev.reg_mr(s.sink, rdma::kAccessLocalWrite);
    for (std::uint32_t b = 0; b < buffers; ++b) post_srq_buffer(p.net.now(), draw, p.server, s, b);
    arm(p.server, s);
    p.server.attr.srq = s.srq;
    p.client.app = [&](Instant now) { client_app(now, p.client, c); };
    p.server.app = [&](Instant now) { server_app(now, draw, seed, p.server, s, c); };
    const std::string ctx = " (crc " + std::to_string(seed % 2 == 0) + ", " +
                            std::to_string(conns) + " connections, window " +
                            std::to_string(c.window) + ", " + std::to_string(buffers) +
                            " receives, limit " + std::to_string(s.limit) + ", loss " +
                            std::to_string(p.faults.full().loss) + ")";
    for (std::size_t j = 0; j < conns; ++j)
        if (!p.client.core.connect(p.net.now(), connect_to_b())) return {false, "connect"};
    const auto all_sent = [&] {
        for (std::size_t j = 0; j < conns; ++j)
            if (c.completed[j] < c.lengths[j].size() || s.next[j] < c.lengths[j].size())
                return false;
        return true;
    };
    if (!p.run_until(all_sent, conns))
        return {false, "the Sends did not all land: " + p.failure() + ctx};
    if (!p.client.events.empty()) return {false, "client event " + show(p.client.events[0]) + ctx};
    if (s.limit_events == 0) return {false, "the limit event never came" + ctx};
    // Every receive posted either completed once or waits in the SRQ.
    std::uint32_t waiting = 0;
    for (const auto& posting : s.postings) waiting += !posting.done;
    if (p.server.dev.query_srq(s.srq)->posted != waiting)
        return {false, "the SRQ holds " + std::to_string(p.server.dev.query_srq(s.srq)->posted) +
                           " receives, not " + std::to_string(waiting) + ctx};
    // The client closes; the server's QPs end and go, then the SRQ with what it holds.
    p.client.destroy_qps(p.net.now());
    if (!p.run_until([&] { return s.disconnected == conns; }, conns))
        return {false, "the server's QPs did not all end: " + p.failure() + ctx};
    p.server.app = {};
    p.server.destroy_qps(p.net.now());
    if (!p.server.dev.destroy_srq(s.srq)) return {false, "destroy_srq" + ctx};
    p.run_until([] { return false; }, conns);
    if (!p.failure().empty()) return {false, p.failure() + ctx};
    if (p.server.wcs.size() != s.seen_wcs)
        return {false, "a receive completed after the last Send" + ctx};
    if (!p.client.empty() || !p.server.empty()) return {false, "something left after close" + ctx};
    log_if_asked(seed, ctx + ", " + std::to_string(s.limit_events) + " limit events", p.net);
    return {true, {}};
}

TEST(RdmaSim, SharedReceiveQueueUnderFaults) {
    run_seeds("IWCM_RDMA_SIM_SEEDS", "IWCM_RDMA_SIM_SEED", 200, run_srq_seed);
}

}  // namespace
}  // namespace iwcm::test
