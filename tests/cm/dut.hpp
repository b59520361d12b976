// A core under test and a hand-driven peer: build exact frames, feed them,
// check the exact frames and events that come out (docs/design.md "Code style", "Tests").
//
// The DUT is 10.0.0.2 (MAC ...:0b); the peer is 10.0.0.1:5000 (MAC ...:0a).
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "cm/harness.hpp"
#include "wire/fpdu.hpp"

namespace iwcm::test {

namespace tf = wire::tcp_flags;

// Every state transition any test saw, printed once at the end of the run
// (the issue note lists them).
std::set<std::pair<CmState, CmState>>& seen_transitions();

struct Dut {
    Core core;
    Instant now{};
    Endpoint peer{ip_a(), 5000};
    Endpoint self{ip_b(), 4791};
    std::uint32_t peer_iss = 1000;
    wire::SeqNumber peer_nxt{1001};   // the peer's next sequence number
    wire::SeqNumber dut_nxt{};        // what the peer has seen of the DUT's sequence
    std::vector<std::pair<CmState, CmState>> transitions;

    explicit Dut(CoreConfig cfg = config_for(kMacB, 7)) : core(cfg) {
        EXPECT_TRUE(core.add_address(ip_b()).has_value());
        core.set_trace([this](const TraceRecord& r) {
            if (r.kind != TraceRecord::Kind::kState) return;
            transitions.emplace_back(r.from, r.to);
            seen_transitions().emplace(r.from, r.to);
        });
    }

    wire::FrameRepr frame(std::uint8_t flags, wire::SeqNumber seq, wire::SeqNumber ack) const {
        wire::FrameRepr f;
        f.eth.dst = kMacB;
        f.eth.src = kMacA;
        f.ip.src = peer.addr;
        f.ip.dst = self.addr;
        f.tcp.src_port = peer.port;
        f.tcp.dst_port = self.port;
        f.tcp.seq = seq;
        f.tcp.ack = ack;
        f.tcp.flags = flags;
        f.tcp.window = 65535;
        return f;
    }

    void feed(const wire::FrameRepr& f, std::span<const std::byte> payload = {}) {
        std::vector<std::byte> buf(wire::tcp_frame_len(f, payload.size()));
        wire::emit_tcp_frame(f, payload, buf);
        core.receive(now, buf);
    }

    // A segment from the peer at its current sequence, acknowledging all the DUT sent.
    void seg(std::uint8_t flags, std::span<const std::byte> payload = {}) {
        feed(frame(flags, peer_nxt, dut_nxt), payload);
        peer_nxt += static_cast<std::uint32_t>(payload.size()) + ((flags & tf::kFin) ? 1 : 0);
    }

    std::vector<Sent> out() { return drain(core); }
    std::vector<Ev> evs() { return events(core); }

    void advance(Duration d) {
        Instant until = now + d;
        while (auto dl = core.next_deadline()) {
            if (*dl > until) break;
            now = *dl;
            core.on_timer(now);
        }
        now = until;
    }

    // Listen, take a SYN, answer it: SYN_RCVD. Returns the SYN-ACK.
    Sent to_syn_rcvd(std::optional<std::uint8_t> wscale = 7, std::optional<std::uint16_t> mss = 1460) {
        auto l = core.listen({self, 0});
        EXPECT_TRUE(l.has_value());
        listener = *l;
        auto syn = frame(tf::kSyn, wire::SeqNumber(peer_iss), wire::SeqNumber(0));
        syn.tcp.options.mss = mss;
        syn.tcp.options.window_scale = wscale;
        feed(syn);
        auto o = out();
        EXPECT_EQ(o.size(), 1u);
        if (o.empty()) return {};
        dut_nxt = o[0].tcp().seq + 1;
        return o[0];
    }

    // ... then the ACK: ESTABLISHED (TCP up, waiting for the MPA request).
    void to_established_passive() {
        to_syn_rcvd();
        seg(tf::kAck);
        EXPECT_TRUE(out().empty());
    }

    // ... then an MPA request: MPAREQ_RCVD, with the connect-request event.
    Ev to_mpareq_rcvd(const wire::MpaRepr& req) {
        to_established_passive();
        send_mpa(req);
        auto o = out();
        EXPECT_EQ(o.size(), 1u);  // the ACK of the request
        auto e = evs();
        EXPECT_EQ(e.size(), 1u);
        if (e.empty()) return {};
        conn = e[0].conn;
        return e[0];
    }

    void send_mpa(const wire::MpaRepr& m) {
        std::vector<std::byte> b(m.buffer_len());
        m.emit(b);
        seg(tf::kAck | tf::kPsh, b);
    }

    // What to_syn_sent() connects with by default: DUT port 4791 to the peer.
    ConnectParams connect_params() const {
        ConnectParams p;
        p.local = {self.addr, 4791};
        p.remote = {peer.addr, 5000};
        p.remote_mac = kMacA;
        return p;
    }

    // Active side: connect, SYN_SENT. Returns the SYN.
    Sent to_syn_sent(ConnectParams p = {}) {
        if (p.remote.port == 0) p = connect_params();
        auto c = core.connect(now, p);
        EXPECT_TRUE(c.has_value());
        if (c) conn = *c;
        auto o = out();
        EXPECT_EQ(o.size(), 1u);
        if (o.empty()) return {};
        dut_nxt = o[0].tcp().seq + 1;
        return o[0];
    }

    // ... SYN-ACK from the peer: the DUT sends its MPA request (MPAREQ_SENT).
    Sent to_mpareq_sent(ConnectParams p = {}, std::optional<std::uint8_t> wscale = 7) {
        to_syn_sent(p);
        auto sa = frame(tf::kSyn | tf::kAck, wire::SeqNumber(peer_iss), dut_nxt);
        sa.tcp.options.mss = 1460;
        sa.tcp.options.window_scale = wscale;
        feed(sa);
        auto o = out();
        EXPECT_EQ(o.size(), 1u);
        if (o.empty()) return {};
        dut_nxt += static_cast<std::uint32_t>(o[0].payload.size());
        return o[0];
    }

    ListenHandle listener;
    ConnHandle conn;
};

inline wire::MpaRepr request_v2(std::span<const std::byte> pd, std::uint16_t ird = 4, std::uint16_t ord = 4,
                                bool p2p = true, bool send = true, bool write = true, bool read = true) {
    wire::MpaRepr m;
    m.kind = wire::MpaKind::kRequest;
    m.revision = 2;
    wire::MpaV2Params v2;
    v2.ird = ird;
    v2.ord = ord;
    v2.peer_to_peer = p2p;
    v2.rtr_send = p2p && send;
    v2.rtr_write = p2p && write;
    v2.rtr_read = p2p && read;
    m.v2 = v2;
    m.private_data = pd;
    return m;
}

inline wire::MpaRepr request_v1(std::span<const std::byte> pd) {
    wire::MpaRepr m;
    m.kind = wire::MpaKind::kRequest;
    m.revision = 1;
    m.private_data = pd;
    return m;
}

inline wire::MpaRepr parse_mpa_or_fail(const std::vector<std::byte>& payload);

// A revision-2 reply with this IRD/ORD word (rtr_bits: a set of rtr::k*).
inline wire::MpaRepr reply_v2(std::uint16_t ird, std::uint16_t ord, bool p2p, std::uint8_t rtr_bits) {
    wire::MpaRepr m;
    m.kind = wire::MpaKind::kReply;
    m.revision = 2;
    m.v2 = wire::MpaV2Params{ird, ord, p2p, (rtr_bits & rtr::kSend) != 0, (rtr_bits & rtr::kWrite) != 0,
                             (rtr_bits & rtr::kRead) != 0};
    return m;
}

// The responder's reply to a request, after accept(); the peer's view of the
// DUT's sequence moves past it. `frames`: how many frames accept() must send
// (unset: at least the reply).
inline wire::MpaRepr accept_and_take_reply(Dut& d, const Ev& req, AcceptParams ap = {},
                                           std::optional<std::size_t> frames = std::nullopt) {
    EXPECT_TRUE(d.core.accept(d.now, req.conn, ap).has_value());
    auto o = d.out();
    if (frames) {
        EXPECT_EQ(o.size(), *frames);
    } else {
        EXPECT_GE(o.size(), 1u);
    }
    if (o.empty()) return {};
    d.dut_nxt += static_cast<std::uint32_t>(o[0].payload.size());
    static std::vector<std::byte> keep;
    keep = o[0].payload;
    return parse_mpa_or_fail(keep);
}

// The frame carries a TERMINATE FPDU (CRC off) with this error.
inline void expect_terminate(const Sent& s, wire::TermError error) {
    auto fpdu = wire::parse_fpdu(s.payload, false);
    ASSERT_TRUE(fpdu.has_value());
    auto term = wire::parse_terminate(fpdu->ulpdu);
    ASSERT_TRUE(term.has_value());
    EXPECT_EQ(*term, error);
}

inline wire::MpaRepr parse_mpa_or_fail(const std::vector<std::byte>& payload) {
    auto m = wire::parse_mpa(payload);
    EXPECT_TRUE(m.has_value());
    return m ? *m : wire::MpaRepr{};
}

}  // namespace iwcm::test
