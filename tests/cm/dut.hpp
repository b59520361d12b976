// A core under test and a hand-driven peer: build exact frames, feed them,
// check the exact frames and events that come out (docs/design.md "Code style", "Tests").
//
// The DUT is 10.0.0.2 (MAC ...:0b); the peer is 10.0.0.1:5000 (MAC ...:0a).
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <set>
#include <source_location>
#include <sstream>
#include <string>
#include <utility>

#include "cm/harness.hpp"
#include "cm/isn.hpp"
#include "wire/ethernet.hpp"
#include "wire/fpdu.hpp"

namespace iwcm::test {

namespace tf = wire::tcp_flags;

// A whole frame the DUT is expected to send: every header field and the payload.
struct Frame {
    wire::FrameRepr repr;
    std::vector<std::byte> payload;

    // Builders for the fields a test changes most.
    Frame& with_payload(std::span<const std::byte> p) {
        payload.assign(p.begin(), p.end());
        return *this;
    }
    Frame& with_window(std::uint16_t w) {
        repr.tcp.window = w;
        return *this;
    }
};

// Every state transition any test saw, printed once at the end of the run
// (the issue note lists them).
std::set<std::pair<CmState, CmState>>& seen_transitions();

struct Dut {
    Core core;
    Instant now{};
    Endpoint peer{ip_a(), 5000};
    Endpoint self{ip_b(), 4791};
    std::uint32_t peer_iss = 1000;
    wire::SeqNumber peer_nxt{1001};  // the peer's next sequence number
    wire::SeqNumber dut_nxt{};       // what the peer has seen of the DUT's sequence
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

    // The frame the DUT sends to the peer as the DUT builds it: its addresses and ports, the
    // configured TTL and TOS, and the window of a synchronized connection (scaled when both
    // SYNs carried the option, as the to_* helpers' SYNs do unless told otherwise). A SYN's
    // window and options differ: sent_syn.
    Frame sent_frame(std::uint8_t flags, wire::SeqNumber seq, wire::SeqNumber ack,
                     std::span<const std::byte> payload = {}) const {
        const CoreConfig& c = core.config();
        Frame f;
        f.repr.eth.dst = kMacA;
        f.repr.eth.src = c.mac;
        f.repr.eth.ethertype = wire::kEtherTypeIpv4;
        f.repr.ip.src = self.addr;
        f.repr.ip.dst = peer.addr;
        f.repr.ip.ttl = c.ttl;
        f.repr.ip.tos = c.tos;
        f.repr.tcp.src_port = self.port;
        f.repr.tcp.dst_port = peer.port;
        f.repr.tcp.seq = seq;
        f.repr.tcp.ack = (flags & tf::kAck) ? ack : wire::SeqNumber(0);
        f.repr.tcp.flags = flags;
        const std::uint32_t wnd = wscale ? c.rcv_wnd >> c.rcv_wscale : c.rcv_wnd;
        f.repr.tcp.window = static_cast<std::uint16_t>(std::min<std::uint32_t>(wnd, 65535));
        f.payload.assign(payload.begin(), payload.end());
        return f;
    }
    // A bare ACK at the DUT's current sequence of everything the peer sent.
    Frame sent_ack() const { return sent_frame(tf::kAck, dut_nxt, peer_nxt); }
    // A SYN or SYN-ACK as the DUT sends it: its window unscaled (RFC 7323 section 2.2), the
    // MSS of its MTU (IPv4: mtu - 40) and, when `offer_wscale` (an initiator, or a responder
    // to a SYN that offered one), its window shift.
    Frame sent_syn(std::uint8_t flags, wire::SeqNumber seq, wire::SeqNumber ack,
                   bool offer_wscale = true) const {
        const CoreConfig& c = core.config();
        Frame f = sent_frame(flags, seq, ack);
        f.repr.tcp.window = static_cast<std::uint16_t>(std::min<std::uint32_t>(c.rcv_wnd, 65535));
        f.repr.tcp.options.mss = static_cast<std::uint16_t>(c.mtu - 40);
        if (offer_wscale) f.repr.tcp.options.window_scale = c.rcv_wscale;
        return f;
    }
    // The ISN RFC 6528 gives the DUT's connection from `local` to `remote` now (its key);
    // unnamed, between `self` and `peer`.
    wire::SeqNumber isn(const Endpoint& local, const Endpoint& remote) const {
        return wire::SeqNumber(cm::initial_sequence(core.config().isn_secret, local, remote, now));
    }
    wire::SeqNumber isn() const { return isn(self, peer); }
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

    // Listen and take the peer's SYN at peer_iss with these options: SYN_RCVD. The SYN-ACK
    // is left for the test to take; dut_nxt is past the ISN RFC 6528 gives the tuple now.
    void start_passive(std::optional<std::uint8_t> wscale = 7,
                       std::optional<std::uint16_t> mss = 1460) {
        auto l = core.listen({self, 0});
        EXPECT_TRUE(l.has_value());
        if (l) listener = *l;
        auto syn = frame(tf::kSyn, wire::SeqNumber(peer_iss), wire::SeqNumber(0));
        syn.tcp.options.mss = mss;
        syn.tcp.options.window_scale = wscale;
        this->wscale = wscale.has_value();
        feed(syn);
        dut_nxt = isn() + 1;
    }

    // Listen, take a SYN, answer it: SYN_RCVD. Returns the SYN-ACK.
    Sent to_syn_rcvd(std::optional<std::uint8_t> wscale = 7,
                     std::optional<std::uint16_t> mss = 1460) {
        start_passive(wscale, mss);
        auto o = out();
        EXPECT_EQ(o.size(), 1u);
        if (o.empty()) return {};
        dut_nxt = o[0].tcp().seq + 1;
        return o[0];
    }

    // ... then the ACK: MPAREQ_WAIT (TCP up, waiting for the MPA request).
    void to_mpareq_wait() {
        to_syn_rcvd();
        seg(tf::kAck);
        EXPECT_TRUE(out().empty());
    }

    // ... then an MPA request: MPAREQ_RCVD, with the connect-request event.
    Ev to_mpareq_rcvd(const wire::MpaRepr& req) {
        to_mpareq_wait();
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

    // Active side: connect (unset `p`: connect_params()), SYN_SENT. The SYN is left for
    // the test to take; dut_nxt is past the ISN RFC 6528 gives the tuple now (p.local's
    // port must be set).
    void start_connect(ConnectParams p = {}) {
        if (p.remote.port == 0) p = connect_params();
        auto c = core.connect(now, p);
        EXPECT_TRUE(c.has_value());
        if (c) conn = *c;
        dut_nxt = isn(p.local, p.remote) + 1;
    }

    // Active side: connect, SYN_SENT. Returns the SYN.
    Sent to_syn_sent(ConnectParams p = {}) {
        start_connect(p);
        auto o = out();
        EXPECT_EQ(o.size(), 1u);
        if (o.empty()) return {};
        dut_nxt = o[0].tcp().seq + 1;
        return o[0];
    }

    // The peer's SYN-ACK to the DUT's SYN, at peer_iss: MSS 1460 and, when set, the window
    // shift `wscale`.
    void syn_ack(std::optional<std::uint8_t> wscale = 7) {
        auto sa = frame(tf::kSyn | tf::kAck, wire::SeqNumber(peer_iss), dut_nxt);
        sa.tcp.options.mss = 1460;
        sa.tcp.options.window_scale = wscale;
        this->wscale = wscale.has_value();
        feed(sa);
    }

    // ... SYN-ACK from the peer: the DUT sends its MPA request (MPAREQ_SENT).
    Sent to_mpareq_sent(ConnectParams p = {}, std::optional<std::uint8_t> wscale = 7) {
        to_syn_sent(p);
        syn_ack(wscale);
        auto o = out();
        EXPECT_EQ(o.size(), 1u);
        if (o.empty()) return {};
        dut_nxt += static_cast<std::uint32_t>(o[0].payload.size());
        return o[0];
    }

    ListenHandle listener;
    ConnHandle conn;
    bool wscale = true;  // both SYNs carried the window-scale option
};

namespace detail {

inline std::string flag_names(std::uint8_t f) {
    static constexpr std::pair<std::uint8_t, const char*> kNames[] = {{tf::kFin, "FIN"},
                                                                      {tf::kSyn, "SYN"},
                                                                      {tf::kRst, "RST"},
                                                                      {tf::kPsh, "PSH"},
                                                                      {tf::kAck, "ACK"}};
    std::string out;
    for (auto [bit, name] : kNames) {
        if ((f & bit) == 0) continue;
        if (!out.empty()) out += '|';
        out += name;
    }
    return out.empty() ? "none" : out;
}

inline std::string str(std::uint32_t v) {
    return std::to_string(v);
}
inline std::string str(wire::SeqNumber v) {
    return std::to_string(v.value());
}
inline std::string str(const IpAddr& a) {
    return a.to_string();
}
inline std::string str(const MacAddr& m) {
    std::ostringstream os;
    for (std::size_t i = 0; i < m.bytes.size(); ++i)
        os << (i ? ":" : "") << std::hex << int{m.bytes[i]};
    return os.str();
}
inline std::string str(const std::optional<wire::VlanTag>& v) {
    if (!v) return "none";
    return "id " + std::to_string(v->id) + " pcp " + std::to_string(v->priority) +
           (v->dei ? " dei" : "");
}
inline std::string str(const wire::TcpOptions& o) {
    std::string s;
    if (o.mss) s += "mss " + std::to_string(*o.mss) + " ";
    if (o.window_scale) s += "wscale " + std::to_string(*o.window_scale) + " ";
    if (o.sack_permitted) s += "sack_permitted ";
    if (o.timestamps) s += "timestamps ";
    return s.empty() ? "none" : s.substr(0, s.size() - 1);
}
inline std::string str(const std::vector<std::byte>& p) {
    std::ostringstream os;
    os << p.size() << " bytes";
    for (std::size_t i = 0; i < p.size() && i < 24; ++i)
        os << (i ? " " : ": ") << std::hex << std::to_integer<int>(p[i]);
    if (p.size() > 24) os << " ...";
    return os.str();
}

// One line per field that differs, "field: expected X, sent Y".
inline std::string frame_diff(const Frame& want, const Sent& got) {
    std::string out;
    auto field = [&](const char* name, const auto& w, const auto& g) {
        if (!(w == g))
            out += std::string("    ") + name + ": expected " + str(w) + ", sent " + str(g) + "\n";
    };
    const wire::FrameRepr& w = want.repr;
    const wire::FrameRepr& g = got.repr;
    field("eth.dst", w.eth.dst, g.eth.dst);
    field("eth.src", w.eth.src, g.eth.src);
    field("eth.vlan", w.eth.vlan, g.eth.vlan);
    field("eth.ethertype", std::uint32_t{w.eth.ethertype}, std::uint32_t{g.eth.ethertype});
    field("ip.src", w.ip.src, g.ip.src);
    field("ip.dst", w.ip.dst, g.ip.dst);
    field("ip.ttl", std::uint32_t{w.ip.ttl}, std::uint32_t{g.ip.ttl});
    field("ip.tos", std::uint32_t{w.ip.tos}, std::uint32_t{g.ip.tos});
    field("ip.ident", std::uint32_t{w.ip.ident}, std::uint32_t{g.ip.ident});
    field("ip.flow_label", w.ip.flow_label, g.ip.flow_label);
    field("ip.dont_fragment", std::uint32_t{w.ip.dont_fragment}, std::uint32_t{g.ip.dont_fragment});
    field("tcp.src_port", std::uint32_t{w.tcp.src_port}, std::uint32_t{g.tcp.src_port});
    field("tcp.dst_port", std::uint32_t{w.tcp.dst_port}, std::uint32_t{g.tcp.dst_port});
    if (w.tcp.flags != g.tcp.flags)
        out += "    tcp.flags: expected " + flag_names(w.tcp.flags) + ", sent " +
               flag_names(g.tcp.flags) + "\n";
    field("tcp.seq", w.tcp.seq, g.tcp.seq);
    field("tcp.ack", w.tcp.ack, g.tcp.ack);
    field("tcp.window", std::uint32_t{w.tcp.window}, std::uint32_t{g.tcp.window});
    field("tcp.urgent", std::uint32_t{w.tcp.urgent}, std::uint32_t{g.tcp.urgent});
    field("tcp.options", w.tcp.options, g.tcp.options);
    field("payload", want.payload, got.payload);
    return out;
}

inline std::string describe(const Sent& s) {
    return flag_names(s.repr.tcp.flags) + " seq " + str(s.repr.tcp.seq) + " ack " +
           str(s.repr.tcp.ack) + ", " + str(s.payload);
}

}  // namespace detail

// The DUT sent exactly these whole frames, in this order, since the frames were last taken
// (smoltcp's send!). A mismatch lists each differing field of each frame. Returns the frames
// taken, for a test that compares them further (a retransmission's bytes with the first's).
inline std::vector<Sent> expect_sent(Dut& d, std::initializer_list<Frame> want,
                                     std::source_location at = std::source_location::current()) {
    std::vector<Sent> got = d.out();
    std::string report;
    const std::size_t n = std::max(want.size(), got.size());
    for (std::size_t i = 0; i < n; ++i) {
        if (i >= got.size()) {
            report += "  frame " + std::to_string(i) + ": expected, not sent\n";
        } else if (i >= want.size()) {
            report += "  frame " + std::to_string(i) +
                      ": sent, not expected: " + detail::describe(got[i]) + "\n";
        } else if (std::string diff = detail::frame_diff(want.begin()[i], got[i]); !diff.empty()) {
            report +=
                "  frame " + std::to_string(i) + " (" + detail::describe(got[i]) + "):\n" + diff;
        }
    }
    if (!report.empty()) {
        ADD_FAILURE_AT(at.file_name(), static_cast<int>(at.line()))
            << "expected " << want.size() << " frame(s), the DUT sent " << got.size() << "\n"
            << report;
    }
    return got;
}

// The DUT sent nothing since the frames were last taken.
inline void expect_nothing_sent(Dut& d, std::source_location at = std::source_location::current()) {
    expect_sent(d, {}, at);
}

// Moves the DUT's clock to `since` after the epoch, its timers firing on the way, and checks
// that nothing went out up to a millisecond before: the next timer fires exactly then.
inline void quiet_until(Dut& d, Duration since,
                        std::source_location at = std::source_location::current()) {
    d.advance(since - std::chrono::milliseconds(1) - d.now.time_since_epoch());
    expect_nothing_sent(d, at);
    d.advance(std::chrono::milliseconds(1));
}

inline wire::MpaRepr request_v2(std::span<const std::byte> pd, std::uint16_t ird = 4,
                                std::uint16_t ord = 4, bool p2p = true, bool send = true,
                                bool write = true, bool read = true) {
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
inline wire::MpaRepr reply_v2(std::uint16_t ird, std::uint16_t ord, bool p2p,
                              std::uint8_t rtr_bits) {
    wire::MpaRepr m;
    m.kind = wire::MpaKind::kReply;
    m.revision = 2;
    m.v2 = wire::MpaV2Params{ird,
                             ord,
                             p2p,
                             (rtr_bits & rtr::kSend) != 0,
                             (rtr_bits & rtr::kWrite) != 0,
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

// The DUT's configuration with a stream that acknowledges at once (no delayed ACK), so that
// each segment's answer is there when the test looks.
inline CoreConfig immediate_acks() {
    CoreConfig c = config_for(kMacB, 7);
    c.stream.ack_delay = Duration{};
    return c;
}

// Initiator connected without peer-to-peer (no RTR): ESTABLISHED.
inline void connect_active(Dut& d) {
    d.to_mpareq_sent(d.connect_params());
    wire::MpaRepr rep;
    rep.kind = wire::MpaKind::kReply;
    rep.revision = 2;
    rep.v2 = wire::MpaV2Params{1, 1, false, false, false, false};
    d.send_mpa(rep);
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    ASSERT_EQ(e[0].type, EventType::kEstablished);
    d.out();  // the ACK of the reply
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
