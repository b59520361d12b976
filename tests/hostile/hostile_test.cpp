// The hostile-input table (docs/reliability.md): each row is a test here.
//
// Every test starts from a bystander: a revision-2 peer-to-peer connection
// between cores A and B, established and idle. A hostile peer (RawPeer, at
// 10.0.0.9, hand-built frames) or a damaged copy of real traffic then hits B
// (or A). Each test checks the row's expected outcome (what is dropped and
// counted, what is answered, what times out) and then that the bystander was
// not disturbed: still established on both sides, no event, and a graceful
// close that ends with kDisconnected on both and nothing leaked.
//
// Read first: tests/cm/harness.hpp (Pair), RFC 9293 section 3.10.7 (segments
// for no connection), RFC 5961 sections 3 and 4 (RST and SYN checks), RFC
// 5044 section 7.1 (MPA frames).
#include <malloc.h>

#include <cerrno>
#include <chrono>
#include <cstdio>

#include "cm/harness.hpp"
#include "wire/checksum.hpp"
#include "wire/fpdu.hpp"
#include "wire/ip_extras.hpp"
#include "wire/mpa.hpp"

namespace iwcm::test {
namespace {

namespace tf = wire::tcp_flags;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr MacAddr kMacEvil{{0x02, 0, 0, 0, 0, 0x0e}};
inline IpAddr ip_evil() {
    return *IpAddr::parse("10.0.0.9");
}

std::vector<std::byte> mpa_request(std::uint8_t rev, std::span<const std::byte> pdata,
                                   const char* key = "MPA ID Req Frame") {
    wire::MpaRepr m;
    m.kind = wire::MpaKind::kRequest;
    m.revision = rev == 2 ? 2 : 1;
    if (rev == 2) m.v2 = wire::MpaV2Params{4, 4, false, false, false, false};
    m.private_data = pdata;
    std::vector<std::byte> out(m.buffer_len());
    m.emit(out);
    for (int i = 0; i < 16; ++i) out[i] = static_cast<std::byte>(key[i]);
    out[17] = static_cast<std::byte>(rev);  // the revision byte as given
    return out;
}

// A peer that builds every frame by hand and sees what B answers.
struct RawPeer {
    Core& core;
    Instant& now;
    std::uint16_t port;
    Endpoint target{ip_b(), 4791};
    wire::SeqNumber snd_nxt{1000};
    wire::SeqNumber rcv_nxt{};

    wire::FrameRepr frame(std::uint8_t flags, wire::SeqNumber seq) const {
        wire::FrameRepr f;
        f.eth.dst = kMacB;
        f.eth.src = kMacEvil;
        f.ip.src = ip_evil();
        f.ip.dst = target.addr;
        f.tcp.src_port = port;
        f.tcp.dst_port = target.port;
        f.tcp.seq = seq;
        f.tcp.ack = rcv_nxt;
        f.tcp.flags = flags;
        f.tcp.window = 65535;
        return f;
    }
    static std::vector<std::byte> build(const wire::FrameRepr& f,
                                        std::span<const std::byte> payload = {}) {
        std::vector<std::byte> buf(wire::tcp_frame_len(f, payload.size()));
        buf.resize(wire::emit_tcp_frame(f, payload, buf));
        return buf;
    }
    // Sends at snd_nxt and advances it; returns what the core answered.
    std::vector<Sent> send(std::uint8_t flags, std::span<const std::byte> payload = {}) {
        auto f = frame(flags, snd_nxt);
        core.receive(now, build(f, payload));
        snd_nxt += static_cast<std::uint32_t>(payload.size()) + ((flags & tf::kSyn) ? 1 : 0) +
                   ((flags & tf::kFin) ? 1 : 0);
        return drain(core);
    }
    // SYN, SYN-ACK, ACK: B's side is then ESTABLISHED, waiting for a request.
    void handshake() {
        auto out = send(tf::kSyn);
        ASSERT_EQ(out.size(), 1u);
        ASSERT_TRUE(out[0].flags(tf::kSyn | tf::kAck));
        rcv_nxt = out[0].tcp().seq + 1;
        EXPECT_TRUE(send(tf::kAck).empty());
    }
};

// The bystander connection and the checks that it was not disturbed.
struct Hostile : ::testing::Test {
    Pair p;
    ListenHandle listener;
    ConnHandle a_conn, b_conn;
    std::uint16_t next_port = 20000;

    void SetUp() override {
        auto l = p.b.listen({{ip_b(), 4791}, 0});
        ASSERT_TRUE(l.has_value());
        listener = *l;
        auto c = p.a.connect(p.now, p.connect_params());
        ASSERT_TRUE(c.has_value());
        a_conn = *c;
        p.pump();
        auto eb = events(p.b);
        ASSERT_EQ(eb.size(), 1u);
        b_conn = eb[0].conn;
        ASSERT_TRUE(p.b.accept(p.now, b_conn, {}).has_value());
        p.pump();
        ASSERT_EQ(events(p.a).size(), 1u);
        ASSERT_EQ(events(p.b).size(), 1u);
        ASSERT_EQ(*p.a.state(a_conn), CmState::kEstablished);
        ASSERT_EQ(*p.b.state(b_conn), CmState::kEstablished);
    }

    RawPeer peer() { return RawPeer{p.b, p.now, next_port++}; }

    // The bystander is untouched: established, no event; it then closes
    // cleanly and nothing is left on either core.
    void expect_bystander_ok() {
        EXPECT_EQ(p.a.state(a_conn).value_or(CmState::kClosed), CmState::kEstablished);
        EXPECT_EQ(p.b.state(b_conn).value_or(CmState::kClosed), CmState::kEstablished);
        for (auto& e : events(p.a)) ADD_FAILURE() << "bystander A event " << to_string(e.type);
        for (auto& e : events(p.b))
            if (e.conn == b_conn) ADD_FAILURE() << "bystander B event " << to_string(e.type);
        p.pump();
        ASSERT_TRUE(p.a.disconnect(p.now, a_conn, DisconnectMode::kGraceful).has_value());
        p.advance(p.now + seconds(1));
        auto ea = events(p.a);
        ASSERT_EQ(ea.size(), 1u);
        EXPECT_EQ(ea[0].type, EventType::kDisconnected);
        bool b_closed = false;
        for (auto& e : events(p.b))
            if (e.conn == b_conn) b_closed = e.type == EventType::kDisconnected;
        EXPECT_TRUE(b_closed);
        // Whatever the hostile input left must time out too.
        ASSERT_TRUE(p.b.destroy_listen(p.now, listener).has_value());
        p.advance(p.now + std::chrono::minutes(10));
        events(p.a);
        events(p.b);
        for (Core* c : {&p.a, &p.b}) {
            EXPECT_EQ(c->live_nodes(), 0u);
            EXPECT_EQ(c->pending_timers(), 0u);
            EXPECT_EQ(c->stats().nodes_created, c->stats().nodes_destroyed);
        }
    }

    // Real frames of a whole connection (SYN to the last ACK), from A to B.
    std::vector<std::vector<std::byte>> capture_connection() {
        std::vector<std::vector<std::byte>> frames;
        Pair q;
        auto l = q.b.listen({{ip_b(), 4791}, 0});
        EXPECT_TRUE(l.has_value());
        auto pd = bytes("private data of a real request");
        auto cp = q.connect_params();
        cp.private_data = pd;
        auto c = q.a.connect(q.now, cp);
        q.lose = [&](bool, const std::vector<std::byte>& f) {
            frames.push_back(f);
            return false;
        };
        q.pump();
        for (auto& e : events(q.b))
            if (e.type == EventType::kConnectRequest) (void)q.b.accept(q.now, e.conn, {});
        q.pump();
        (void)q.a.disconnect(q.now, *c, DisconnectMode::kGraceful);
        q.advance(q.now + seconds(1));
        return frames;
    }
};

// ---------------------------------------------------------------- malformed frames

TEST_F(Hostile, TruncatedFramesAtEveryByte) {
    auto frames = capture_connection();
    ASSERT_GE(frames.size(), 8u);
    std::uint64_t drops = p.b.stats().drops_total();
    std::uint64_t cut = 0;
    for (const auto& f : frames) {
        for (std::size_t len = 0; len < f.size(); ++len) {
            p.b.receive(p.now, std::span<const std::byte>(f).first(len));
            ++cut;
        }
    }
    // Every prefix is malformed (a length field points past its end): dropped,
    // counted, never answered.
    EXPECT_EQ(p.b.stats().drops_total() - drops, cut);
    EXPECT_TRUE(drain(p.b).empty());
    expect_bystander_ok();
}

TEST_F(Hostile, BadIpv4Checksum) {
    auto frames = capture_connection();
    std::uint64_t bad = p.b.stats().drops(DropReason::kBadChecksum);
    for (auto f : frames) {
        f[14 + 10] ^= std::byte{0x5a};  // the IPv4 header checksum
        p.b.receive(p.now, f);
    }
    EXPECT_EQ(p.b.stats().drops(DropReason::kBadChecksum) - bad, frames.size());
    EXPECT_TRUE(drain(p.b).empty());
    expect_bystander_ok();
}

TEST_F(Hostile, BadTcpChecksum) {
    auto frames = capture_connection();
    std::uint64_t bad = p.b.stats().drops(DropReason::kBadChecksum);
    for (auto f : frames) {
        f[14 + 20 + 16] ^= std::byte{0x01};  // the TCP checksum
        p.b.receive(p.now, f);
    }
    EXPECT_EQ(p.b.stats().drops(DropReason::kBadChecksum) - bad, frames.size());
    EXPECT_TRUE(drain(p.b).empty());
    expect_bystander_ok();
}

// Every frame of a connection as an IPv4 fragment: the first (MF), a middle one
// (MF and an offset) and the last (an offset): never reassembled, never answered.
TEST_F(Hostile, FragmentsOfEveryFrame) {
    auto frames = capture_connection();
    const std::uint64_t before = p.b.stats().drops(DropReason::kFragment);
    const std::uint16_t kFlags[] = {0x2000, 0x20b9, 0x00b9};
    for (auto f : frames) {
        for (std::uint16_t flags : kFlags) {
            wire::MutBytes ip = wire::MutBytes(f).subspan(14);
            wire::store_be16(ip, 6, flags);
            wire::store_be16(ip, 10, 0);
            wire::store_be16(ip, 10, wire::internet_checksum(ip.first(20)));
            p.b.receive(p.now, f);
        }
    }
    const std::uint64_t dropped = p.b.stats().drops(DropReason::kFragment) - before;
    std::printf("fragments: %zu frames x 3 = %llu kFragment drops\n", frames.size(),
                static_cast<unsigned long long>(dropped));
    EXPECT_EQ(dropped, 3 * frames.size());
    EXPECT_TRUE(drain(p.b).empty());
    expect_bystander_ok();
}

// Every frame of a connection with a malformed or refused IPv4 option.
TEST_F(Hostile, MalformedIpv4OptionsOnEveryFrame) {
    auto frames = capture_connection();
    const std::uint64_t before = p.b.stats().drops(DropReason::kMalformed);
    const char* kOptions[] = {
        "94 01 00 00",              // length below 2
        "94 08 00 00",              // runs past the header
        "01 01 01 94",              // length byte missing
        "83 07 04 0a 00 00 09 00",  // loose source route (RFC 7126: dropped)
        "89 07 04 0a 00 00 09 00",  // strict source route
    };
    for (const auto& f : frames)
        for (const char* o : kOptions)
            p.b.receive(p.now, wire::test::with_ipv4_options(f, wire::hex_bytes(o)));
    const std::uint64_t dropped = p.b.stats().drops(DropReason::kMalformed) - before;
    std::printf("bad IPv4 options: %zu frames x 5 = %llu kMalformed drops\n", frames.size(),
                static_cast<unsigned long long>(dropped));
    EXPECT_EQ(dropped, 5 * frames.size());
    EXPECT_TRUE(drain(p.b).empty());
    expect_bystander_ok();
}

// IPv6 SYNs behind abusive extension-header chains, 1,000 of each kind: each
// dropped under its reason, nothing answered, nothing created.
TEST_F(Hostile, Ipv6ExtensionHeaderAbuse) {
    const IpAddr b6 = *IpAddr::parse("fd00::2");
    ASSERT_TRUE(p.b.add_address(b6).has_value());
    auto l6 = p.b.listen({{b6, 4791}, 0});
    ASSERT_TRUE(l6.has_value());
    wire::FrameRepr syn;
    syn.eth.dst = kMacB;
    syn.eth.src = kMacEvil;
    syn.ip.src = *IpAddr::parse("fd00::9");
    syn.ip.dst = b6;
    syn.tcp.src_port = 30000;
    syn.tcp.dst_port = 4791;
    syn.tcp.flags = tf::kSyn;
    std::vector<std::byte> plain(wire::tcp_frame_len(syn, 0));
    wire::emit_tcp_frame(syn, {}, plain);
    std::string nine;
    for (int i = 0; i < 8; ++i) nine += "3c 00 01 04 00 00 00 00";
    struct Abuse {
        std::uint8_t first;
        std::string exts;
        DropReason reason;
    };
    const Abuse kAbuse[] = {
        {60, nine + "06 00 01 04 00 00 00 00", DropReason::kMalformed},  // nine headers
        {60, "06 ff 01 04 00 00 00 00", DropReason::kMalformed},         // 2048 bytes announced
        {60, "00 00 01 04 00 00 00 00 06 00 01 04 00 00 00 00", DropReason::kMalformed},
        {43, "06 00 00 01 00 00 00 00", DropReason::kMalformed},  // segments left 1
        {0, "06 00 c2 04 00 01 00 00", DropReason::kMalformed},   // Jumbo Payload
        {44, "06 00 00 00 00 00 00 01", DropReason::kFragment},
        {51, "06 04 00 00 00 00 01 00 00 00 00 01" + std::string(24, '0'), DropReason::kNotTcp},
    };
    const Stats before = p.b.stats();
    for (int round = 0; round < 1000; ++round)
        for (const Abuse& a : kAbuse)
            p.b.receive(p.now,
                        wire::test::with_ipv6_extensions(plain, a.first, wire::hex_bytes(a.exts)));
    EXPECT_EQ(p.b.stats().drops(DropReason::kMalformed) - before.drops(DropReason::kMalformed),
              5000u);
    EXPECT_EQ(p.b.stats().drops(DropReason::kFragment) - before.drops(DropReason::kFragment),
              1000u);
    EXPECT_EQ(p.b.stats().drops(DropReason::kNotTcp) - before.drops(DropReason::kNotTcp), 1000u);
    EXPECT_EQ(p.b.stats().syns_received, before.syns_received);
    EXPECT_TRUE(drain(p.b).empty());
    // The same SYN without the abuse is answered: the listener was reachable all along.
    p.b.receive(p.now, wire::test::with_ipv6_extensions(
                           plain, 0, wire::hex_bytes("06 00 05 02 00 00 01 00")));
    auto out = drain(p.b);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].flags(tf::kSyn | tf::kAck));
    EXPECT_TRUE(p.b.destroy_listen(p.now, *l6).has_value());
    drain(p.b);
    expect_bystander_ok();
}

// ---------------------------------------------------------------- MPA

// A bad MPA request: the connection is not iWARP; B resets it, counts kBadMpa
// and tells no application.
void expect_mpa_refused(Hostile& h, std::span<const std::byte> request) {
    RawPeer r = h.peer();
    r.handshake();
    std::uint64_t bad = h.p.b.stats().drops(DropReason::kBadMpa);
    auto out = r.send(tf::kAck | tf::kPsh, request);
    ASSERT_FALSE(out.empty());
    EXPECT_TRUE(out.back().tcp().has(tf::kRst));
    EXPECT_EQ(h.p.b.stats().drops(DropReason::kBadMpa) - bad, 1u);
    for (auto& e : events(h.p.b)) ADD_FAILURE() << "event " << to_string(e.type);
    h.expect_bystander_ok();
}

TEST_F(Hostile, WrongMpaKey) {
    expect_mpa_refused(*this, mpa_request(2, bytes("x"), "MPA ID Req Fraem"));
}
TEST_F(Hostile, MpaRevision0) {
    expect_mpa_refused(*this, mpa_request(0, bytes("x")));
}
TEST_F(Hostile, MpaRevision3) {
    expect_mpa_refused(*this, mpa_request(3, bytes("x")));
}
TEST_F(Hostile, MpaReplyWhileWeAreResponder) {
    expect_mpa_refused(*this, mpa_request(2, bytes("x"), "MPA ID Rep Frame"));
}

TEST_F(Hostile, PrivateDataLengthOver512) {
    auto req = mpa_request(1, {});
    req[18] = std::byte{0x02};  // 600 bytes announced
    req[19] = std::byte{0x58};
    req.resize(req.size() + 600, std::byte{'z'});
    expect_mpa_refused(*this, req);
}

TEST_F(Hostile, PrivateDataLengthLargerThanFrame) {
    // 100 bytes announced, 10 sent: B waits for the rest (TCP is a stream),
    // then its request timer (10 s) resets the connection and frees the node.
    auto req = mpa_request(1, bytes("0123456789"));
    req[19] = std::byte{100};
    RawPeer r = peer();
    r.handshake();
    std::size_t live = p.b.live_nodes();
    auto out = r.send(tf::kAck | tf::kPsh, req);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].flags(tf::kAck));  // just acknowledged
    EXPECT_TRUE(events(p.b).empty());
    p.now += seconds(9);
    p.b.on_timer(p.now);
    EXPECT_TRUE(drain(p.b).empty());
    p.now += seconds(2);
    p.b.on_timer(p.now);
    out = drain(p.b);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].tcp().has(tf::kRst));
    EXPECT_EQ(p.b.live_nodes(), live - 1);
    EXPECT_TRUE(events(p.b).empty());
    expect_bystander_ok();
}

TEST_F(Hostile, MpaRequestSplitAcrossSegments) {
    auto pd = bytes("split request private data");
    auto req = mpa_request(2, pd);
    RawPeer r = peer();
    r.handshake();
    std::size_t cuts[] = {0, 1, 7, 19, 20, 23, req.size()};
    for (std::size_t i = 0; i + 1 < std::size(cuts); ++i) {
        auto part = std::span<const std::byte>(req).subspan(cuts[i], cuts[i + 1] - cuts[i]);
        if (part.empty()) continue;
        (void)r.send(tf::kAck | tf::kPsh, part);
        if (i + 2 < std::size(cuts)) {
            EXPECT_TRUE(events(p.b).empty()) << "after " << cuts[i + 1] << " bytes";
        }
    }
    auto eb = events(p.b);
    ASSERT_EQ(eb.size(), 1u);
    EXPECT_EQ(eb[0].type, EventType::kConnectRequest);
    EXPECT_EQ(eb[0].pdata, pd);
    EXPECT_EQ(eb[0].mpa.ird, 4);
    ASSERT_TRUE(p.b.reject(p.now, eb[0].conn, {}).has_value());
    expect_bystander_ok();
}

TEST_F(Hostile, MpaRequestCoalescedWithFollowingBytes) {
    // A revision-1 request and the first bytes of the data path in one
    // segment: the request is taken, the rest waits for the data path.
    auto pd = bytes("coalesced");
    auto seg = mpa_request(1, pd);
    auto after = bytes("ULP DATA");
    seg.insert(seg.end(), after.begin(), after.end());
    RawPeer r = peer();
    r.handshake();
    (void)r.send(tf::kAck | tf::kPsh, seg);
    auto eb = events(p.b);
    ASSERT_EQ(eb.size(), 1u);
    EXPECT_EQ(eb[0].pdata, pd);
    ASSERT_TRUE(p.b.accept(p.now, eb[0].conn, {}).has_value());
    auto out = drain(p.b);
    ASSERT_FALSE(out.empty());
    eb = events(p.b);
    ASSERT_EQ(eb.size(), 1u);
    EXPECT_EQ(eb[0].type, EventType::kEstablished);
    auto ctx = p.b.handoff(eb[0].conn, HandoffParams{HandoffMode::kExternal});
    ASSERT_TRUE(ctx.has_value());
    EXPECT_EQ(std::vector<std::byte>(ctx->pending_rx.begin(), ctx->pending_rx.end()), after);
    ASSERT_TRUE(p.b.disconnect(p.now, eb[0].conn, DisconnectMode::kAbortive).has_value());
    events(p.b);
    expect_bystander_ok();
}

// ---------------------------------------------------------------- RFC 5961

struct Tuple {
    std::uint16_t a_port;
    wire::SeqNumber a_nxt;  // A's next sequence number = B's rcv_nxt
    wire::SeqNumber b_nxt;
};

Tuple bystander_tuple(Hostile& h) {
    // A's hand-off context names the tuple and both sequence numbers (it
    // moves A to OFFLOADED, still established; B is untouched).
    auto ctx = h.p.a.handoff(h.a_conn);  // moves A to OFFLOADED: still established for B
    EXPECT_TRUE(ctx.has_value());
    return {ctx->local.port, wire::SeqNumber(ctx->snd_nxt), wire::SeqNumber(ctx->rcv_nxt)};
}

// The bystander after bystander_tuple(): A is OFFLOADED, B ESTABLISHED; a
// graceful close still ends both with kDisconnected and leaves nothing.
void close_offloaded_bystander(Hostile& h) {
    EXPECT_EQ(h.p.a.state(h.a_conn).value_or(CmState::kClosed), CmState::kOffloaded);
    EXPECT_EQ(h.p.b.state(h.b_conn).value_or(CmState::kClosed), CmState::kEstablished);
    ASSERT_TRUE(h.p.a.disconnect(h.p.now, h.a_conn, DisconnectMode::kGraceful).has_value());
    // A, a stream, closed first: its TIME_WAIT is the stream's (2 * rto_max).
    h.p.advance(h.p.now + h.p.a.config().stream.time_wait + seconds(1));
    auto ea = events(h.p.a);
    auto eb = events(h.p.b);
    ASSERT_EQ(ea.size(), 1u);
    ASSERT_EQ(eb.size(), 1u);
    EXPECT_EQ(ea[0].type, EventType::kDisconnected);
    EXPECT_EQ(eb[0].type, EventType::kDisconnected);
    EXPECT_EQ(h.p.a.live_nodes() + h.p.b.live_nodes(), 0u);
    EXPECT_EQ(h.p.a.pending_timers() + h.p.b.pending_timers(), 0u);
}

wire::FrameRepr as_a(const Tuple& t, std::uint8_t flags, wire::SeqNumber seq) {
    wire::FrameRepr f;
    f.eth.dst = kMacB;
    f.eth.src = kMacA;
    f.ip.src = ip_a();
    f.ip.dst = ip_b();
    f.tcp.src_port = t.a_port;
    f.tcp.dst_port = 4791;
    f.tcp.seq = seq;
    f.tcp.ack = t.b_nxt;
    f.tcp.flags = flags;
    f.tcp.window = 65535;
    return f;
}

TEST_F(Hostile, OutOfWindowRstGetsChallengeAck) {
    Tuple t = bystander_tuple(*this);
    // In the window but not exactly rcv_nxt: a challenge ACK, no reset.
    p.b.receive(p.now, RawPeer::build(as_a(t, tf::kRst, t.a_nxt + 100)));
    auto out = drain(p.b);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].flags(tf::kAck));
    EXPECT_EQ(out[0].tcp().seq, t.b_nxt);
    EXPECT_EQ(out[0].tcp().ack, t.a_nxt);
    // Far out of the window: dropped in silence.
    p.b.receive(p.now, RawPeer::build(as_a(t, tf::kRst | tf::kAck, t.a_nxt + 0x40000000u)));
    EXPECT_TRUE(drain(p.b).empty());
    EXPECT_EQ(*p.b.state(b_conn), CmState::kEstablished);
    for (auto& e : events(p.b)) ADD_FAILURE() << "event " << to_string(e.type);
    close_offloaded_bystander(*this);
}

TEST_F(Hostile, SynOnEstablishedGetsChallengeAck) {
    Tuple t = bystander_tuple(*this);
    for (std::uint32_t off : {0u, 1u, 5000u, 0x80000000u}) {
        p.b.receive(p.now, RawPeer::build(as_a(t, tf::kSyn, t.a_nxt + off)));
        auto out = drain(p.b);
        ASSERT_EQ(out.size(), 1u) << off;
        EXPECT_TRUE(out[0].flags(tf::kAck)) << off;  // never a reset
    }
    EXPECT_EQ(*p.b.state(b_conn), CmState::kEstablished);
    for (auto& e : events(p.b)) ADD_FAILURE() << "event " << to_string(e.type);
    close_offloaded_bystander(*this);
}

TEST_F(Hostile, RstStorm) {
    Tuple t = bystander_tuple(*this);
    std::uint64_t ignored = p.b.stats().drops(DropReason::kRstIgnored);
    // 10,000 RSTs on the bystander's tuple, every sequence number but the
    // exact one, and 10,000 on tuples that do not exist.
    std::size_t challenge = 0;
    for (std::uint32_t i = 1; i <= 10000; ++i) {
        p.b.receive(p.now, RawPeer::build(as_a(t, tf::kRst, t.a_nxt + i * 7919u)));
        challenge += drain(p.b).size();
        auto f = as_a(t, tf::kRst, wire::SeqNumber(i));
        f.tcp.src_port = static_cast<std::uint16_t>(30000 + i % 20000);
        p.b.receive(p.now, RawPeer::build(f));
        EXPECT_TRUE(drain(p.b).empty());  // an RST is never answered
    }
    EXPECT_GT(challenge, 0u);
    EXPECT_EQ(p.b.stats().drops(DropReason::kRstIgnored) - ignored, 20000u - (10000u - challenge));
    EXPECT_EQ(*p.b.state(b_conn), CmState::kEstablished);
    for (auto& e : events(p.b)) ADD_FAILURE() << "event " << to_string(e.type);
    close_offloaded_bystander(*this);
}

TEST_F(Hostile, FinStorm) {
    Tuple t = bystander_tuple(*this);
    std::uint64_t resets = p.b.stats().resets_sent;
    for (std::uint32_t i = 1; i <= 10000; ++i) {
        // Out of the window on the bystander: an ACK, nothing closes.
        p.b.receive(p.now, RawPeer::build(as_a(t, tf::kFin | tf::kAck, t.a_nxt + 0x10000000u + i)));
        auto out = drain(p.b);
        ASSERT_EQ(out.size(), 1u);
        EXPECT_TRUE(out[0].flags(tf::kAck));
        // For no connection: a reset, as TCP requires.
        auto f = as_a(t, tf::kFin | tf::kAck, wire::SeqNumber(i));
        f.tcp.src_port = static_cast<std::uint16_t>(30000 + i % 20000);
        p.b.receive(p.now, RawPeer::build(f));
        out = drain(p.b);
        ASSERT_EQ(out.size(), 1u);
        EXPECT_TRUE(out[0].tcp().has(tf::kRst));
    }
    EXPECT_EQ(p.b.stats().resets_sent - resets, 10000u);
    EXPECT_EQ(*p.b.state(b_conn), CmState::kEstablished);
    for (auto& e : events(p.b)) ADD_FAILURE() << "event " << to_string(e.type);
    close_offloaded_bystander(*this);
}

TEST_F(Hostile, ChallengeAckRateLimit) {
    // RFC 5961 section 7: 10,000 in-window RSTs (none at RCV.NXT) and 10,000
    // SYNs in one virtual second draw at most challenge_ack_limit (1000)
    // challenge ACKs, and at least half of it; the rest are counted. The next
    // second has a fresh budget.
    Tuple t = bystander_tuple(*this);
    const Stats& st = p.b.stats();
    std::size_t acks = 0;
    Instant second = std::chrono::ceil<seconds>(p.now);  // one whole second, from its start
    for (std::uint32_t i = 0; i < 10'000; ++i) {
        p.now = second + std::chrono::microseconds(i * 99);
        p.b.receive(p.now, RawPeer::build(as_a(t, tf::kRst, t.a_nxt + 1 + i % 60'000)));
        p.b.receive(p.now, RawPeer::build(as_a(t, tf::kSyn, t.a_nxt + i)));
        for (auto& s : drain(p.b)) {
            EXPECT_TRUE(s.flags(tf::kAck));
            ++acks;
        }
    }
    std::printf("challenge ACKs for 20,000 RSTs and SYNs in one second: %zu (limit 1000)\n", acks);
    EXPECT_LE(acks, 1000u);
    EXPECT_GE(acks, 500u);
    EXPECT_EQ(st.challenge_acks_sent, acks);
    EXPECT_EQ(st.challenge_acks_limited, 20'000u - acks);
    EXPECT_EQ(st.drops(DropReason::kRstIgnored), 10'000u);
    p.now = second + seconds(1);
    p.b.receive(p.now, RawPeer::build(as_a(t, tf::kRst, t.a_nxt + 1)));
    EXPECT_EQ(drain(p.b).size(), 1u);
    EXPECT_EQ(*p.b.state(b_conn), CmState::kEstablished);
    for (auto& e : events(p.b)) ADD_FAILURE() << "event " << to_string(e.type);
    close_offloaded_bystander(*this);
}

// ---------------------------------------------------------------- no connection

TEST_F(Hostile, SegmentsForUnknownConnectionsGetRst) {
    RawPeer r = peer();
    r.target.port = 4999;  // nobody listens
    // RFC 9293 3.10.7.1: with ACK, <SEQ=SEG.ACK><CTL=RST>.
    r.rcv_nxt = wire::SeqNumber(777);
    auto out = r.send(tf::kAck | tf::kPsh, bytes("hello"));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].flags(tf::kRst));
    EXPECT_EQ(out[0].tcp().seq, wire::SeqNumber(777));
    // Without ACK (a SYN): <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
    wire::SeqNumber syn_seq = r.snd_nxt;
    out = r.send(tf::kSyn);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].flags(tf::kRst | tf::kAck));
    EXPECT_EQ(out[0].tcp().ack, syn_seq + 1);
    // An RST for nothing: dropped in silence.
    out = r.send(tf::kRst);
    EXPECT_TRUE(out.empty());
    // A segment for another host's address: not for us, no answer.
    auto f = r.frame(tf::kSyn, r.snd_nxt);
    f.ip.dst = *IpAddr::parse("10.0.0.77");
    std::uint64_t not_us = p.b.stats().drops(DropReason::kNotForUs);
    p.b.receive(p.now, RawPeer::build(f));
    EXPECT_TRUE(drain(p.b).empty());
    EXPECT_EQ(p.b.stats().drops(DropReason::kNotForUs) - not_us, 1u);
    expect_bystander_ok();
}

TEST_F(Hostile, PeerConnectsAndNeverSendsMpa) {
    RawPeer r = peer();
    r.handshake();
    std::size_t live = p.b.live_nodes();
    EXPECT_TRUE(events(p.b).empty());
    // The request timer (10 s): a reset, the node freed, no application event.
    p.advance(p.now + seconds(11));
    EXPECT_EQ(p.b.live_nodes(), live - 1);
    EXPECT_TRUE(events(p.b).empty());
    expect_bystander_ok();
}

// ---------------------------------------------------------------- SYN flood

std::size_t heap_in_use() {
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

// 100,000 SYNs from distinct ports, never completed. Returns the heap growth.
std::size_t flood(Hostile& h, std::uint32_t n, std::uint64_t* syn_acks) {
    std::size_t before = heap_in_use();
    *syn_acks = 0;
    wire::FrameRepr f;
    f.eth.dst = kMacB;
    f.eth.src = kMacEvil;
    f.ip.dst = ip_b();
    f.tcp.dst_port = 4791;
    f.tcp.flags = tf::kSyn;
    f.tcp.window = 65535;
    std::vector<std::byte> buf(wire::tcp_frame_len(f, 0) + 16);
    for (std::uint32_t i = 0; i < n; ++i) {
        // Distinct 4-tuples: 4 source addresses x 25,000 ports.
        f.ip.src = IpAddr(Ipv4Addr::from_u32(0x0A000100u + i % 4));
        f.tcp.src_port = static_cast<std::uint16_t>(10000 + i / 4);
        f.tcp.seq = wire::SeqNumber(i * 2654435761u);
        std::size_t len = wire::emit_tcp_frame(f, {}, buf);
        h.p.b.receive(h.p.now, std::span<const std::byte>(buf).first(len));
        while (h.p.b.poll_transmit()) ++*syn_acks;
    }
    return heap_in_use() - std::min(before, heap_in_use());
}

void relisten(Hostile& h, std::uint32_t backlog) {
    ASSERT_TRUE(h.p.b.destroy_listen(h.p.now, h.listener).has_value());
    auto l = h.p.b.listen({{ip_b(), 4791}, backlog});
    ASSERT_TRUE(l.has_value());
    h.listener = *l;
}

TEST_F(Hostile, SynFloodBeyondBacklog) {
    relisten(*this, 128);
    std::uint64_t drops = p.b.stats().backlog_drops;
    std::uint64_t syn_acks = 0;
    std::size_t grown = flood(*this, 100'000, &syn_acks);
    // Every SYN is answered: the backlog's worth by a node, the rest by a
    // SYN cookie (RFC 4987) that keeps nothing. None is dropped.
    EXPECT_EQ(syn_acks, 100'000u);
    EXPECT_EQ(p.b.stats().syn_cookies_sent, 100'000u - 128u);
    EXPECT_EQ(p.b.stats().backlog_drops - drops, 0u);
    EXPECT_EQ(p.b.stats().drops(DropReason::kBacklogFull), 0u);
    EXPECT_EQ(p.b.live_nodes(), 1u + 128u);
    std::printf("SYN flood, backlog 128: %zu bytes of heap grown per 100k SYNs (%zu live nodes)\n",
                grown, p.b.live_nodes());
    RecordProperty("heap_bytes_per_100k_syns_backlog_128", static_cast<int>(grown));
    // The half-open nodes go quietly when their SYN-ACK retransmissions run out.
    p.advance(p.now + seconds(80));
    EXPECT_EQ(p.b.live_nodes(), 1u);
    expect_bystander_ok();
}

// A legitimate client amid a flood: its SYN-ACK comes back at once (a
// cookie), its ACK makes the node, and the MPA exchange runs as usual.
void connect_through_flood(Hostile& h, const char* pdata) {
    RawPeer r = h.peer();
    std::size_t live = h.p.b.live_nodes();
    std::uint64_t cookies = h.p.b.stats().syn_cookies_sent;
    r.handshake();  // one SYN-ACK for the SYN, nothing for the ACK
    EXPECT_EQ(h.p.b.stats().syn_cookies_sent, cookies + 1);
    EXPECT_EQ(h.p.b.live_nodes(), live + 1);
    auto out = r.send(tf::kAck | tf::kPsh, mpa_request(2, bytes(pdata)));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].tcp().ack, r.snd_nxt);
    auto eb = events(h.p.b);
    ASSERT_EQ(eb.size(), 1u);
    EXPECT_EQ(eb[0].type, EventType::kConnectRequest);
    EXPECT_EQ(text(eb[0].pdata), pdata);
    ASSERT_TRUE(h.p.b.accept(h.p.now, eb[0].conn, {}).has_value());
    out = drain(h.p.b);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(wire::parse_mpa(out[0].payload).has_value());  // the reply
    eb = events(h.p.b);
    ASSERT_EQ(eb.size(), 1u);
    EXPECT_EQ(eb[0].type, EventType::kEstablished);
    ASSERT_TRUE(h.p.b.disconnect(h.p.now, eb[0].conn, DisconnectMode::kAbortive).has_value());
    drain(h.p.b);
    events(h.p.b);
}

TEST_F(Hostile, SynFloodLegitimateClientConnects) {
    relisten(*this, 128);
    std::uint64_t syn_acks = 0;
    std::size_t grown = flood(*this, 50'000, &syn_acks);
    connect_through_flood(*this, "during the flood");
    grown += flood(*this, 50'000,
                   &syn_acks);  // (same tuples again: half-open ones get their SYN-ACK again)
    connect_through_flood(*this, "right after the flood");
    EXPECT_EQ(p.b.stats().syn_cookies_accepted, 2u);
    EXPECT_EQ(p.b.stats().syn_cookies_failed, 0u);
    EXPECT_EQ(p.b.live_nodes(), 1u + 128u);
    std::printf("SYN flood with 2 clients, backlog 128: %zu bytes of heap grown per 100k SYNs\n",
                grown);
    p.advance(p.now + seconds(80));
    EXPECT_EQ(p.b.live_nodes(), 1u);
    expect_bystander_ok();
}

TEST_F(Hostile, SynFloodForgedCookieAcks) {
    // ACKs guessing cookies during a flood: each answered with a reset
    // (RFC 9293 3.10.7.2, as Linux does), counted; no node made.
    relisten(*this, 128);
    std::uint64_t syn_acks = 0;
    flood(*this, 1'000, &syn_acks);
    RawPeer r = peer();
    std::size_t live = p.b.live_nodes();
    std::uint64_t resets = p.b.stats().resets_sent;
    for (std::uint32_t i = 0; i < 10'000; ++i) {
        r.port = static_cast<std::uint16_t>(40000 + i % 20000);
        r.rcv_nxt = wire::SeqNumber(i * 2654435761u);
        auto out = r.send(tf::kAck);
        ASSERT_EQ(out.size(), 1u);
        EXPECT_TRUE(out[0].flags(tf::kRst));
    }
    EXPECT_EQ(p.b.stats().syn_cookies_failed, 10'000u);
    EXPECT_EQ(p.b.stats().drops(DropReason::kBadCookie), 10'000u);
    EXPECT_EQ(p.b.stats().resets_sent - resets, 10'000u);
    EXPECT_EQ(p.b.live_nodes(), live);
    p.advance(p.now + seconds(80));
    expect_bystander_ok();
}

TEST_F(Hostile, SynFloodWithinAHugeBacklog) {
    // What 100k half-open connections cost when the backlog admits them all.
    relisten(*this, 200'000);
    std::uint64_t syn_acks = 0;
    std::size_t grown = flood(*this, 100'000, &syn_acks);
    EXPECT_EQ(syn_acks, 100'000u);
    EXPECT_EQ(p.b.live_nodes(), 1u + 100'000u);
    std::printf(
        "SYN flood, backlog 200k: %zu bytes of heap grown per 100k SYNs (%zu bytes per half-open "
        "node)\n",
        grown, grown / 100'000);
    RecordProperty("heap_bytes_per_100k_syns_admitted", static_cast<int>(grown));
    p.advance(p.now + seconds(80));
    EXPECT_EQ(p.b.live_nodes(), 1u);
    expect_bystander_ok();
}

}  // namespace
}  // namespace iwcm::test
