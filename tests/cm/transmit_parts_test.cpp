// Frames in two parts (Core::poll_transmit_parts, Core::receive_parts): a stream
// segment's payload is handed where it lies in the sender's memory, not copied into
// the frame; the frame the two parts make is the one poll_transmit() gives whole; a
// payload still queued is copied into its frame before that memory may change; a
// receiver reads the payload in place, with every check of a whole frame.
//
// Read first: include/iwcm/core.hpp (poll_transmit_parts), src/cm/core_impl.hpp
// (TxPayload), docs/perf.md "Copies".
#include <algorithm>
#include <string>
#include <vector>

#include "cm/dut.hpp"

namespace iwcm::test {
namespace {

using std::chrono::seconds;

void stream_up(Dut& d) {
    connect_active(d);
    ASSERT_TRUE(d.core.handoff(d.conn).has_value());
}

std::vector<std::byte> pattern(std::size_t n, unsigned salt) {
    std::vector<std::byte> b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>(i * 13 + salt);
    return b;
}

std::vector<std::byte> joined(const TransmitParts& t) {
    std::vector<std::byte> f(t.headers.begin(), t.headers.end());
    for (auto piece : t.payload) f.insert(f.end(), piece.begin(), piece.end());
    return f;
}

std::vector<std::vector<std::byte>> whole_frames(Core& core) {
    std::vector<std::vector<std::byte>> out;
    while (auto f = core.poll_transmit()) out.emplace_back(f->begin(), f->end());
    return out;
}

std::vector<std::byte> payload_of(std::span<const std::byte> frame) {
    auto p = wire::parse_tcp_frame(frame);
    EXPECT_TRUE(p.has_value());
    return p ? std::vector<std::byte>(p->payload.begin(), p->payload.end())
             : std::vector<std::byte>{};
}

void listen_b(Pair& p) {
    ListenParams lp;
    lp.local = {ip_b(), 4791};
    ASSERT_TRUE(p.b.listen(lp).has_value());
}

// A connects to B's listener (listen_b), B accepts, both hand off: a stream each end.
void streams_up(Pair& p, ConnHandle& a, ConnHandle& b) {
    auto c = p.a.connect(p.now, p.connect_params());
    ASSERT_TRUE(c.has_value());
    a = *c;
    p.pump();
    for (const Ev& e : events(p.b))
        if (e.type == EventType::kConnectRequest) b = e.conn;
    ASSERT_TRUE(p.b.accept(p.now, b, {}).has_value());
    p.pump();
    (void)events(p.a);
    (void)events(p.b);
    ASSERT_TRUE(p.a.handoff(a).has_value());
    ASSERT_TRUE(p.b.handoff(b).has_value());
}

// Two DUTs driven alike send the same frames: one polled in parts, one whole. The parts
// join into the whole frames; each segment's payload views the caller's memory given to
// send_ref (no copy: copied_to_frames stays 0), where the whole frames counted a copy.
TEST(TransmitParts, ASegmentsPayloadIsReadWhereItLies) {
    Dut parts(immediate_acks());
    Dut whole(immediate_acks());
    stream_up(parts);
    stream_up(whole);
    const std::vector<std::byte> mem = pattern(3000, 1);
    ASSERT_EQ(parts.core.send_ref(parts.now, parts.conn, mem).value_or(0), mem.size());
    ASSERT_EQ(whole.core.send_ref(whole.now, whole.conn, mem).value_or(0), mem.size());
    const auto want = whole_frames(whole.core);
    std::vector<TransmitParts> got;
    std::vector<std::vector<std::byte>> got_frames;
    while (auto t = parts.core.poll_transmit_parts()) {
        got.push_back(*t);
        got_frames.push_back(joined(*t));
    }
    ASSERT_EQ(got_frames, want);
    ASSERT_GE(got.size(), 3u);  // 1460 + 1460 + 80
    std::size_t off = 0;
    for (const TransmitParts& t : got) {
        ASSERT_EQ(t.payload.size(), 1u);
        EXPECT_EQ(t.payload[0].data(), mem.data() + off) << "the payload was copied";
        EXPECT_EQ(t.size(), t.headers.size() + t.payload[0].size());
        std::uint64_t h = 0;
        const auto frame = joined(t);
        ASSERT_TRUE(frame_flow_hash(frame, parts.core.config().flow_key, h));
        EXPECT_EQ(t.flow_hash, h);
        off += t.payload_size();
    }
    EXPECT_EQ(off, mem.size());
    EXPECT_EQ(parts.core.stream_info(parts.conn)->copied_to_frames, 0u);
    EXPECT_EQ(whole.core.stream_info(whole.conn)->copied_to_frames, mem.size());
}

// send() copies into the send buffer once; the frames read it there.
TEST(TransmitParts, WrittenBytesComeFromTheSendBuffer) {
    Dut d(immediate_acks());
    stream_up(d);
    const std::vector<std::byte> mem = pattern(2000, 2);
    ASSERT_EQ(d.core.send(d.now, d.conn, mem).value_or(0), mem.size());
    std::vector<std::byte> sent;
    while (auto t = d.core.poll_transmit_parts()) {
        ASSERT_EQ(t->payload.size(), 1u);
        const auto p = t->payload[0];
        EXPECT_FALSE(p.data() >= mem.data() && p.data() < mem.data() + 2000);
        sent.insert(sent.end(), p.begin(), p.end());
        EXPECT_EQ(payload_of(joined(*t)), std::vector<std::byte>(p.begin(), p.end()));
    }
    EXPECT_EQ(sent, mem);
    auto info = d.core.stream_info(d.conn);
    EXPECT_EQ(info->copied_in, mem.size());
    EXPECT_EQ(info->copied_to_frames, 0u);
}

// Frames not yet taken when the caller takes its memory back (own_send_bytes) carry the
// bytes as they were: the core fills them first.
TEST(TransmitParts, OwnSendBytesFillsTheQueuedFrames) {
    Dut d(immediate_acks());
    stream_up(d);
    std::vector<std::byte> mem = pattern(2000, 3);
    const std::vector<std::byte> original = mem;
    ASSERT_EQ(d.core.send_ref(d.now, d.conn, mem).value_or(0), mem.size());
    ASSERT_EQ(d.core.own_send_bytes(d.conn).value_or(0), mem.size());
    std::fill(mem.begin(), mem.end(), std::byte{0});
    std::vector<std::byte> sent;
    while (auto t = d.core.poll_transmit_parts()) {
        EXPECT_TRUE(t->payload.empty()) << "a payload still views the caller's memory";
        const auto p = payload_of(t->headers);
        sent.insert(sent.end(), p.begin(), p.end());
    }
    EXPECT_EQ(sent, original);
    EXPECT_EQ(d.core.stream_info(d.conn)->copied_to_frames, original.size());
}

// An ACK of every byte frees the send buffer; bytes written after it go into a new one.
// The frames queued before carry the first bytes, the later ones the second.
TEST(TransmitParts, AnAckFillsTheQueuedFramesBeforeTheBufferGoes) {
    Dut d(immediate_acks());
    stream_up(d);
    const std::vector<std::byte> first = pattern(1000, 4);
    const std::vector<std::byte> second = pattern(1000, 5);
    const wire::SeqNumber base = d.dut_nxt;
    ASSERT_EQ(d.core.send(d.now, d.conn, first).value_or(0), first.size());
    d.dut_nxt = base + 1000;
    d.seg(tf::kAck);  // acknowledges the segment queued, not yet taken
    EXPECT_EQ(d.core.stream_info(d.conn)->acked, 1000u);
    ASSERT_EQ(d.core.send(d.now, d.conn, second).value_or(0), second.size());
    std::vector<std::vector<std::byte>> payloads;
    while (auto t = d.core.poll_transmit_parts()) {
        auto p = payload_of(joined(*t));
        if (!p.empty()) payloads.push_back(std::move(p));
    }
    ASSERT_EQ(payloads.size(), 2u);
    EXPECT_EQ(payloads[0], first);
    EXPECT_EQ(payloads[1], second);
}

// The peer's FIN makes the handle stale (kDisconnected): the application may free the
// memory it gave send_ref, so the frame queued from it is filled before the event.
TEST(TransmitParts, TheTerminalEventComesAfterTheFramesAreFilled) {
    for (bool abort : {false, true}) {
        Dut d(immediate_acks());
        stream_up(d);
        std::vector<std::byte> mem = pattern(1000, 6);
        const std::vector<std::byte> original = mem;
        ASSERT_EQ(d.core.send_ref(d.now, d.conn, mem).value_or(0), mem.size());
        if (abort) {
            d.seg(tf::kRst);
        } else {
            d.seg(tf::kAck | tf::kFin);
        }
        auto e = d.evs();
        ASSERT_FALSE(e.empty());
        EXPECT_EQ(e.back().type, EventType::kDisconnected);
        std::fill(mem.begin(), mem.end(), std::byte{0});
        const auto frames = whole_frames(d.core);
        ASSERT_FALSE(frames.empty());
        EXPECT_EQ(payload_of(frames[0]), original) << (abort ? "reset" : "peer close");
    }
}

// A receiver given a frame in two parts acts as on the whole frame: the same answer, the
// same bytes readable, whether the cut is at the end of the headers (read in place) or
// anywhere else (joined first); with a bad checksum it drops the frame.
TEST(TransmitParts, ReceivedInPartsAsWhole) {
    Dut probe(immediate_acks());
    stream_up(probe);
    const std::vector<std::byte> data = pattern(1200, 7);
    std::vector<std::byte> frame(wire::tcp_frame_len(probe.frame(0, {}, {}), data.size()));
    wire::emit_tcp_frame(probe.frame(tf::kAck | tf::kPsh, probe.peer_nxt, probe.dut_nxt), data,
                         frame);
    const std::size_t header_end = frame.size() - data.size();
    for (std::size_t cut : {header_end, header_end - 4, header_end + 7, frame.size() - 1}) {
        Dut d(immediate_acks());
        stream_up(d);
        const std::span<const std::byte> f(frame);
        const std::span<const std::byte> rest = f.subspan(cut);
        d.core.receive_parts(d.now, f.first(cut), std::span(&rest, 1));
        auto o = d.out();
        ASSERT_EQ(o.size(), 1u) << "cut at " << cut;
        EXPECT_EQ(o[0].tcp().ack, d.peer_nxt + 1200u);
        auto view = d.core.peek(d.conn);
        ASSERT_TRUE(view.has_value());
        EXPECT_TRUE(std::equal(view->begin(), view->end(), data.begin(), data.end()));
        EXPECT_EQ(d.core.stream_info(d.conn)->copied_received, 1200u);
    }
    Dut bad(immediate_acks());
    stream_up(bad);
    std::vector<std::byte> corrupt(frame.begin() + static_cast<std::ptrdiff_t>(header_end),
                                   frame.end());
    corrupt[100] ^= std::byte{1};
    const std::span<const std::byte> bad_payload(corrupt);
    bad.core.receive_parts(bad.now, std::span(frame).first(header_end), std::span(&bad_payload, 1));
    EXPECT_TRUE(bad.out().empty());
    EXPECT_EQ(bad.core.stats().dropped[static_cast<std::size_t>(DropReason::kBadChecksum)], 1u);
    EXPECT_EQ(bad.core.stream_info(bad.conn)->readable, 0u);
}

// A segment of at least 2 KiB in parts has its checksum summed while it is copied into the
// receive buffer (cm::kSummedPlaceMin). A flipped bit in any piece, or in the TCP header,
// drops the frame as a bad checksum before anything of it is acted on (no ACK, nothing
// readable); the good frame after it, in parts or whole, is read whole, never the bytes the
// bad one left in the buffer.
TEST(TransmitParts, ALongSegmentIsVerifiedAsItIsPlaced) {
    Dut probe(immediate_acks());
    stream_up(probe);
    const std::vector<std::byte> data = pattern(3001, 9);
    std::vector<std::byte> frame(wire::tcp_frame_len(probe.frame(0, {}, {}), data.size()));
    wire::emit_tcp_frame(probe.frame(tf::kAck | tf::kPsh, probe.peer_nxt, probe.dut_nxt), data,
                         frame);
    const std::size_t header_end = frame.size() - data.size();
    const std::span<const std::byte> headers = std::span(frame).first(header_end);
    const auto cut = [](const std::vector<std::byte>& text) {
        const std::span<const std::byte> t(text);
        return std::vector<std::span<const std::byte>>{t.first(1001), t.subspan(1001, 999),
                                                       t.subspan(2000)};
    };
    const std::size_t bad_checksum = static_cast<std::size_t>(DropReason::kBadChecksum);
    for (std::size_t flip : {std::size_t{0}, std::size_t{1500}, std::size_t{3000}}) {
        Dut d(immediate_acks());
        stream_up(d);
        std::vector<std::byte> corrupt = data;
        corrupt[flip] ^= std::byte{0x20};
        d.core.receive_parts(d.now, headers, cut(corrupt));
        EXPECT_TRUE(d.out().empty()) << flip;
        EXPECT_EQ(d.core.stats().dropped[bad_checksum], 1u);
        EXPECT_EQ(d.core.stream_info(d.conn)->readable, 0u);
        if (flip == 1500) {
            d.core.receive(d.now, frame);
        } else {
            d.core.receive_parts(d.now, headers, cut(data));
        }
        auto o = d.out();
        ASSERT_EQ(o.size(), 1u) << flip;
        EXPECT_EQ(o[0].tcp().ack, d.peer_nxt + 3001u);
        auto view = d.core.peek(d.conn);
        ASSERT_TRUE(view.has_value());
        EXPECT_TRUE(std::equal(view->begin(), view->end(), data.begin(), data.end())) << flip;
        EXPECT_EQ(d.core.stream_info(d.conn)->copied_received, 3001u);
    }
    Dut d(immediate_acks());
    stream_up(d);
    std::vector<std::byte> bad_header(headers.begin(), headers.end());
    bad_header[header_end - 20 + 19] ^= std::byte{0x01};  // the urgent pointer's low byte
    d.core.receive_parts(d.now, bad_header, cut(data));
    EXPECT_TRUE(d.out().empty());
    EXPECT_EQ(d.core.stats().dropped[bad_checksum], 1u);
    EXPECT_EQ(d.core.stream_info(d.conn)->readable, 0u);
}

// A TCP checksum that comes out zero may be sent as 0xffff, its ones'-complement twin
// (RFC 1624 section 3); the Linux kernel's TCP does so now and then (a segment of the rping
// interop test's kernel peer had it). The receiver takes it like 0x0000, whole or in parts,
// short or long enough to be summed as it is placed; 0xfffe beside it is a bad checksum.
TEST(TransmitParts, AZeroChecksumSentAsFfffIsAccepted) {
    constexpr std::size_t kTcpChecksum = 14 + 20 + 16;  // untagged IPv4
    const std::size_t bad_checksum = static_cast<std::size_t>(DropReason::kBadChecksum);
    for (std::size_t len : {std::size_t{1200}, std::size_t{3001}}) {
        Dut probe(immediate_acks());
        stream_up(probe);
        const wire::FrameRepr repr =
            probe.frame(tf::kAck | tf::kPsh, probe.peer_nxt, probe.dut_nxt);
        std::vector<std::byte> data = pattern(len, 3);
        std::vector<std::byte> frame(wire::tcp_frame_len(repr, len));
        wire::emit_tcp_frame(repr, data, frame);
        const std::size_t header_end = frame.size() - len;
        ASSERT_EQ((header_end - 14 - 20) % 2, 0u);  // the payload's first word is a TCP word
        // The checksum added into that word makes the segment sum to 0xffff: checksum zero.
        const std::uint32_t w =
            std::uint32_t{wire::load_be16(data, 0)} + wire::load_be16(frame, kTcpChecksum);
        wire::store_be16(data, 0, static_cast<std::uint16_t>((w & 0xFFFFu) + (w >> 16)));
        wire::emit_tcp_frame(repr, data, frame);
        ASSERT_EQ(wire::load_be16(frame, kTcpChecksum), 0u);
        for (std::uint8_t low : {0xFF, 0xFE}) {
            frame[kTcpChecksum] = std::byte{0xFF};
            frame[kTcpChecksum + 1] = std::byte{low};
            const bool good = low == 0xFF;
            for (bool parts : {false, true}) {
                Dut d(immediate_acks());
                stream_up(d);
                const std::span<const std::byte> f(frame);
                if (parts) {
                    const std::span<const std::byte> pieces[] = {f.subspan(header_end, 700),
                                                                 f.subspan(header_end + 700)};
                    d.core.receive_parts(d.now, f.first(header_end), pieces);
                } else {
                    d.core.receive(d.now, f);
                }
                SCOPED_TRACE(testing::Message() << len << " bytes, 0xff" << std::hex << +low
                                                << (parts ? ", in parts" : ", whole"));
                auto o = d.out();
                EXPECT_EQ(d.core.stats().dropped[bad_checksum], good ? 0u : 1u);
                if (!good) {
                    EXPECT_TRUE(o.empty());
                    EXPECT_EQ(d.core.stream_info(d.conn)->readable, 0u);
                    continue;
                }
                ASSERT_EQ(o.size(), 1u);
                EXPECT_EQ(o[0].tcp().ack, d.peer_nxt + static_cast<std::uint32_t>(len));
                auto view = d.core.peek(d.conn);
                ASSERT_TRUE(view.has_value());
                EXPECT_TRUE(std::equal(view->begin(), view->end(), data.begin(), data.end()));
            }
        }
    }
}

// Two streams of one core with their frames queued in turn: settling one (its caller takes
// its memory back) fills that stream's frames and leaves the other's where they lie, also
// when the driver took one of the first stream's frames already (the settle passes it).
TEST(TransmitParts, SettlingOneStreamLeavesAnothersFramesInPlace) {
    Pair p(config_for(kMacA, 1), immediate_acks());
    listen_b(p);
    ConnHandle conns[2];
    for (ConnHandle& c : conns) {
        ConnHandle peer;
        ASSERT_NO_FATAL_FAILURE(streams_up(p, c, peer));
    }
    std::vector<std::byte> mem[2] = {pattern(1400, 9), pattern(1400, 10)};
    const std::vector<std::byte> original = mem[0];
    // 200 bytes at a time, in turn: frames 0, 2, 4 .. of the first stream, 1, 3, 5 .. of
    // the second.
    for (std::size_t off = 0; off < 1400; off += 200)
        for (int c = 0; c < 2; ++c)
            ASSERT_EQ(
                p.a.send_ref(p.now, conns[c], std::span(mem[c]).subspan(off, 200)).value_or(0),
                200u);
    auto first = p.a.poll_transmit_parts();
    ASSERT_TRUE(first.has_value());
    ASSERT_EQ(first->payload.size(), 1u);
    EXPECT_EQ(first->payload[0].data(), mem[0].data()) << "the first frame was copied";
    // The driver sent the frame it took before the caller takes its memory back.
    std::vector<std::byte> sent0(first->payload[0].begin(), first->payload[0].end());
    ASSERT_EQ(p.a.own_send_bytes(conns[0]).value_or(0), 1400u);
    std::fill(mem[0].begin(), mem[0].end(), std::byte{0});
    std::size_t off1 = 0;
    while (auto t = p.a.poll_transmit_parts()) {
        const auto frame = joined(*t);
        const auto parsed = wire::parse_tcp_frame(frame);
        ASSERT_TRUE(parsed.has_value());
        if (parsed->payload.empty()) continue;
        const bool second = !t->payload.empty() && t->payload[0].data() >= mem[1].data() &&
                            t->payload[0].data() < mem[1].data() + mem[1].size();
        if (second) {
            EXPECT_EQ(t->payload[0].data(), mem[1].data() + off1) << "out of order";
            off1 += t->payload_size();
        } else {
            EXPECT_TRUE(t->payload.empty()) << "a frame of the first stream views its memory";
            sent0.insert(sent0.end(), parsed->payload.begin(), parsed->payload.end());
        }
    }
    EXPECT_EQ(sent0, original);
    EXPECT_EQ(off1, 1400u) << "the second stream's frames were copied";
    EXPECT_EQ(p.a.stream_info(conns[0])->copied_to_frames, 1200u);
    EXPECT_EQ(p.a.stream_info(conns[1])->copied_to_frames, 0u);
}

// Two cores moving a stream frame by frame in parts: every byte arrives in order, each
// copied once on each side (into the send buffer, into the receive buffer).
TEST(TransmitParts, APairMovesAStreamWithTwoCopies) {
    Pair p(config_for(kMacA, 1), immediate_acks());
    listen_b(p);
    ConnHandle a;
    ConnHandle b;
    ASSERT_NO_FATAL_FAILURE(streams_up(p, a, b));
    const std::vector<std::byte> data = pattern(200000, 8);
    std::size_t sent = 0;
    std::vector<std::byte> got;
    for (int round = 0; round < 1000 && got.size() < data.size(); ++round) {
        if (sent < data.size()) {
            sent += p.a.send(p.now, a, std::span(data).subspan(sent)).value_or(0);
        }
        for (auto [from, to] : {std::pair{&p.a, &p.b}, std::pair{&p.b, &p.a}}) {
            while (auto t = from->poll_transmit_parts())
                to->receive_parts(p.now, t->headers, t->payload, t->flow_hash);
            if (from == &p.a) {
                while (true) {
                    auto view = p.b.peek(b);
                    ASSERT_TRUE(view.has_value());
                    if (view->empty()) break;
                    got.insert(got.end(), view->begin(), view->end());
                    ASSERT_TRUE(p.b.consume(p.now, b, view->size()).has_value());
                }
            }
        }
    }
    ASSERT_EQ(got, data);
    const auto sa = p.a.stream_info(a);
    const auto sb = p.b.stream_info(b);
    EXPECT_EQ(sa->copied_in, data.size());
    EXPECT_EQ(sa->copied_to_frames, 0u);
    EXPECT_EQ(sb->copied_received, data.size());
}

}  // namespace
}  // namespace iwcm::test
