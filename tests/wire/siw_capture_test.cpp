// Real iWARP frames from Linux soft-iWARP (siw): MPA v2 request, reply, reject,
// and CRC-protected and unprotected FPDUs, parsed (down to DDP and RDMAP) and
// emitted again.
//
// Read first: docs/fixtures.md "tests/fixtures/siw" (how the captures were made;
// frames from 10.231.0.1 were captured before checksum offload and carry wrong
// TCP checksums), src/wire/mpa.hpp, src/wire/fpdu.hpp.
#include <gtest/gtest.h>

#include <cstdio>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "wire/arp.hpp"
#include "wire/checksum.hpp"
#include "wire/crc32c.hpp"
#include "wire/ddp.hpp"
#include "wire/fpdu.hpp"
#include "wire/frame.hpp"
#include "wire/ipv4.hpp"
#include "wire/mpa.hpp"
#include "wire/wire_test_util.hpp"

namespace iwcm::wire {
namespace {

using test::Buffer;

const IpAddr kSiwHost = Ipv4Addr{{10, 231, 0, 2}};
const IpAddr kOffloadHost = Ipv4Addr{{10, 231, 0, 1}};
constexpr std::size_t kTcpChecksumOffset = 14 + 20 + 16;

std::string capture_path(const char* name) {
    return test::fixture_path(std::string("siw/") + name);
}

// One captured frame, parsed; `bytes` is the frame with its TCP checksum repaired
// when the capture point saw it before offload.
struct Captured {
    Buffer bytes;
    TcpFrame frame;
    bool repaired = false;
};

// Reads a capture and parses every frame; fails the test on any surprise.
std::vector<Captured> load(const char* name) {
    std::vector<Captured> out;
    auto pcap = test::read_pcap(capture_path(name));
    EXPECT_TRUE(pcap) << capture_path(name);
    if (!pcap) return out;
    EXPECT_EQ(pcap->link_type, 1u);
    out.reserve(pcap->frames.size());
    for (auto& bytes : pcap->frames) {
        Captured c{std::move(bytes), {}, false};
        auto f = parse_tcp_frame(c.bytes);
        if (!f) {
            // Only the offload host's frames may fail, and only on the TCP checksum.
            EXPECT_STREQ(f.error().field, "checksum") << name << ": " << f.error().to_string();
            EXPECT_EQ(f.error().offset, kTcpChecksumOffset);
            test::repair_tcp_checksum(c.bytes);
            c.repaired = true;
            f = parse_tcp_frame(c.bytes);
        }
        EXPECT_TRUE(f) << name << ": " << (f ? "" : f.error().to_string());
        if (f) c.frame = *f;
        out.push_back(std::move(c));
    }
    return out;
}

const char* const kCaptures[] = {"client-rping-crc.pcap", "client-rping-nocrc.pcap",
                                 "client-reply-reject.pcap", "ucmatose.pcap"};

TEST(Siw, EveryFrameParsesAndReemitsByteExact) {
    for (const char* name : kCaptures) {
        const auto frames = load(name);
        ASSERT_GE(frames.size(), 10u) << name;
        std::size_t repaired = 0;
        for (std::size_t i = 0; i < frames.size(); ++i) {
            const Captured& c = frames[i];
            // siw's frames carry final checksums; the other host's never do.
            EXPECT_EQ(c.repaired, c.frame.repr.ip.src == kOffloadHost) << name << " #" << i + 1;
            repaired += c.repaired ? 1 : 0;
            Buffer out(tcp_frame_len(c.frame.repr, c.frame.payload.size()));
            emit_tcp_frame(c.frame.repr, c.frame.payload, out);
            EXPECT_EQ(to_hex(out), to_hex(c.bytes)) << name << " #" << i + 1;
        }
        EXPECT_GT(repaired, 0u) << name;
    }
}

// ---------------------------------------------------------------- every capture, whole

// One direction of one TCP connection: its payload bytes in sequence order,
// retransmitted bytes taken once.
struct Direction {
    bool started = false;
    std::uint32_t next = 0;  // the next sequence number expected
    Buffer stream;
    bool from_initiator = false;
    std::size_t fpdus = 0;
    std::size_t bad_crc = 0;
};
using FlowKey = std::tuple<IpAddr, std::uint16_t, IpAddr, std::uint16_t>;

// Adds a segment's payload to its direction; a gap (bytes never captured) fails.
void take_segment(Direction& d, const TcpFrame& f, const std::string& where) {
    const TcpRepr& t = f.repr.tcp;
    if ((t.flags & tcp_flags::kSyn) != 0) {
        d.started = true;
        d.next = t.seq.value() + 1;
        d.from_initiator = (t.flags & tcp_flags::kAck) == 0;
        return;
    }
    if (f.payload.empty()) return;
    ASSERT_TRUE(d.started) << where << ": data before the SYN was captured";
    const std::uint32_t seq = t.seq.value();
    const auto len = static_cast<std::uint32_t>(f.payload.size());
    const std::uint32_t ahead = seq - d.next;  // wraps when behind
    ASSERT_FALSE(ahead < 0x80000000u && ahead > 0) << where << ": a gap of " << ahead;
    const std::uint32_t behind = d.next - seq;
    if (behind >= len) return;  // all of it seen before: a retransmission
    const Bytes fresh = Bytes(f.payload).subspan(behind);
    d.stream.insert(d.stream.end(), fresh.begin(), fresh.end());
    d.next += static_cast<std::uint32_t>(fresh.size());
}

// Reads a direction's stream: its MPA frame, then (with the peer-to-peer bit both ways)
// the initiator's RTR, then FPDUs to the end, each parsed down to its DDP header.
void read_stream(Direction& d, const MpaRepr& mpa, bool crc, bool rtr, const std::string& where) {
    Bytes rest = Bytes(d.stream).subspan(mpa.buffer_len());
    if (rtr && d.from_initiator) {
        auto f = parse_fpdu(rest, crc);
        ASSERT_TRUE(f) << where << ": no RTR after the MPA frame";
        EXPECT_TRUE(f->crc_ok) << where;
        EXPECT_TRUE(parse_rtr(f->ulpdu).has_value()) << where;
        rest = rest.subspan(f->total_len);
    }
    while (!rest.empty()) {
        auto f = parse_fpdu(rest, crc);
        ASSERT_TRUE(f) << where << ": FPDU " << d.fpdus + 1 << ": " << f.error().to_string();
        ++d.fpdus;
        if (!f->crc_ok) ++d.bad_crc;
        auto seg = parse_ddp(f->ulpdu);
        EXPECT_TRUE(seg) << where << ": FPDU " << d.fpdus << ": " << seg.error().to_string();
        rest = rest.subspan(f->total_len);
    }
}

struct CaptureSummary {
    std::size_t frames = 0, arp = 0, tcp = 0, repaired = 0, connections = 0;
    std::size_t fpdus = 0, bad_crc = 0, rejects = 0;
};

// Every frame of a capture: ARP or Ethernet/IPv4/TCP, parsed and emitted again byte for
// byte; then every connection's byte stream read MPA frame by MPA frame and FPDU by FPDU.
CaptureSummary read_capture(const std::string& path) {
    CaptureSummary sum;
    auto pcap = test::read_pcap(path);
    EXPECT_TRUE(pcap) << path;
    if (!pcap) return sum;
    EXPECT_EQ(pcap->link_type, 1u);
    std::map<FlowKey, Direction> dirs;
    for (Buffer& bytes : pcap->frames) {
        const std::string where = path + " #" + std::to_string(++sum.frames);
        auto eth = parse_ethernet(bytes);
        EXPECT_TRUE(eth) << where;
        if (!eth) continue;
        if (eth->repr.ethertype == kEtherTypeArp) {
            ++sum.arp;
            auto arp = parse_arp(eth->payload);
            EXPECT_TRUE(arp) << where;
            if (!arp) continue;
            Buffer again(kArpLen);
            arp->emit(again);
            EXPECT_EQ(to_hex(again), to_hex(eth->payload.first(kArpLen))) << where;
            continue;
        }
        auto f = parse_tcp_frame(bytes);
        if (!f) {
            EXPECT_STREQ(f.error().field, "checksum") << where << ": " << f.error().to_string();
            test::repair_tcp_checksum(bytes);
            ++sum.repaired;
            f = parse_tcp_frame(bytes);
        }
        EXPECT_TRUE(f) << where;
        if (!f) continue;
        ++sum.tcp;
        Buffer out(tcp_frame_len(f->repr, f->payload.size()));
        emit_tcp_frame(f->repr, f->payload, out);
        EXPECT_EQ(to_hex(out), to_hex(bytes)) << where;
        const FlowKey key{f->repr.ip.src, f->repr.tcp.src_port, f->repr.ip.dst,
                          f->repr.tcp.dst_port};
        take_segment(dirs[key], *f, where);
    }
    for (auto& [key, d] : dirs) {
        if (!d.from_initiator || d.stream.empty()) continue;
        const auto& [a, ap, b, bp] = key;
        const std::string where = path + " " + a.to_string() + ":" + std::to_string(ap);
        Direction& back = dirs[FlowKey{b, bp, a, ap}];
        ++sum.connections;
        auto req = parse_mpa(d.stream);
        EXPECT_TRUE(req && req->kind == MpaKind::kRequest) << where << ": no MPA request";
        if (back.stream.empty() || !req) continue;
        auto rep = parse_mpa(back.stream);
        EXPECT_TRUE(rep && rep->kind == MpaKind::kReply) << where << ": no MPA reply";
        if (!rep) continue;
        if (rep->reject) {
            ++sum.rejects;
            EXPECT_EQ(back.stream.size(), rep->buffer_len()) << where << ": bytes after a reject";
            continue;
        }
        const bool crc = req->crc || rep->crc;
        const bool rtr = req->v2 && rep->v2 && req->v2->peer_to_peer && rep->v2->peer_to_peer;
        read_stream(d, *req, crc, rtr, where + " (initiator)");
        read_stream(back, *rep, crc, rtr, where + " (responder)");
        sum.fpdus += d.fpdus + back.fpdus;
        sum.bad_crc += d.bad_crc + back.bad_crc;
    }
    return sum;
}

TEST(Siw, EveryCaptureFrameByFrame) {
    std::vector<std::string> paths;
    for (const auto& e : std::filesystem::directory_iterator(capture_path("")))
        if (e.path().extension() == ".pcap") paths.push_back(e.path().string());
    std::sort(paths.begin(), paths.end());
    ASSERT_EQ(paths.size(), 16u) << "docs/fixtures.md lists 16 captures";
    for (const std::string& path : paths) {
        SCOPED_TRACE(path);
        const CaptureSummary s = read_capture(path);
        const std::string name = std::filesystem::path(path).filename().string();
        std::printf(
            "%-28s %3zu frames (%zu ARP), %zu connection(s), %3zu FPDUs, %zu bad CRC, "
            "%zu repaired checksums\n",
            name.c_str(), s.frames, s.arp, s.connections, s.fpdus, s.bad_crc, s.repaired);
        EXPECT_GE(s.connections, 1u);
        EXPECT_EQ(s.frames, s.arp + s.tcp);
        // Our own captures (iwarp-cm's --pcap) hold final checksums only.
        if (name.starts_with("iwcm-")) {
            EXPECT_EQ(s.repaired, 0u);
        }
        // The one FPDU sent with its CRC spoiled on purpose (--corrupt-crc 1).
        EXPECT_EQ(s.bad_crc, name == "terminate-crc.pcap" ? 1u : 0u);
        EXPECT_EQ(s.rejects, name == "client-reply-reject.pcap" ? 1u : 0u);
        if (s.rejects == 0) {
            EXPECT_GT(s.fpdus, 0u);
        }
    }
}

// Checks an MPA frame fills its segment and emits back to the same bytes.
MpaRepr mpa_of(const Captured& c) {
    auto m = parse_mpa(c.frame.payload);
    EXPECT_TRUE(m) << (m ? "" : m.error().to_string());
    if (!m) return {};
    EXPECT_EQ(m->buffer_len(), c.frame.payload.size());
    Buffer out(m->buffer_len());
    m->emit(out);
    EXPECT_EQ(to_hex(out), to_hex(c.frame.payload));
    return *m;
}

constexpr std::size_t kRequest = 3;  // frame 4
constexpr std::size_t kReply = 5;    // frame 6

TEST(Siw, MpaV2RequestFromSiw) {
    for (const char* name : {"client-rping-crc.pcap", "client-rping-nocrc.pcap"}) {
        const auto frames = load(name);
        ASSERT_GT(frames.size(), kReply);
        EXPECT_EQ(frames[kRequest].frame.repr.ip.src, kSiwHost);
        const MpaRepr m = mpa_of(frames[kRequest]);
        EXPECT_EQ(m.kind, MpaKind::kRequest);
        EXPECT_EQ(m.revision, 2);
        EXPECT_FALSE(m.markers);
        EXPECT_FALSE(m.crc);  // siw leaves the choice to the responder
        EXPECT_FALSE(m.reject);
        ASSERT_TRUE(m.v2);
        EXPECT_EQ(*m.v2, (MpaV2Params{1, 1, false, false, false, false}));
        EXPECT_TRUE(m.private_data.empty());
    }
}

TEST(Siw, MpaReplyCrcAsCaptured) {
    const struct {
        const char* name;
        bool crc;
    } cases[] = {{"client-rping-crc.pcap", true}, {"client-rping-nocrc.pcap", false}};
    for (const auto& c : cases) {
        const auto frames = load(c.name);
        ASSERT_GT(frames.size(), kReply);
        const MpaRepr m = mpa_of(frames[kReply]);
        EXPECT_EQ(m.kind, MpaKind::kReply);
        EXPECT_EQ(m.crc, c.crc) << c.name;
        EXPECT_FALSE(m.reject);
        EXPECT_EQ(m.revision, 2);
        ASSERT_TRUE(m.v2);
        EXPECT_EQ(m.v2->ird, 1);
        EXPECT_EQ(m.v2->ord, 1);
    }
}

TEST(Siw, MpaReject) {
    const auto frames = load("client-reply-reject.pcap");
    ASSERT_GT(frames.size(), kReply);
    const MpaRepr m = mpa_of(frames[kReply]);
    EXPECT_EQ(m.kind, MpaKind::kReply);
    EXPECT_TRUE(m.reject);
    EXPECT_FALSE(m.crc);
    ASSERT_TRUE(m.v2);
    EXPECT_EQ(*m.v2, (MpaV2Params{1, 1, false, false, false, false}));
    EXPECT_TRUE(m.private_data.empty());
    EXPECT_EQ(mpa_frame_len(frames[kReply].frame.payload), 24u);  // the IRD/ORD word counted
}

TEST(Siw, SiwAsResponderCopiesTheRequest) {
    const auto frames = load("ucmatose.pcap");
    ASSERT_GT(frames.size(), kReply);
    const MpaRepr req = mpa_of(frames[kRequest]);
    const MpaRepr rep = mpa_of(frames[kReply]);
    EXPECT_EQ(frames[kReply].frame.repr.ip.src, kSiwHost);
    EXPECT_EQ(req.kind, MpaKind::kRequest);
    EXPECT_EQ(rep.kind, MpaKind::kReply);
    EXPECT_EQ(rep.revision, req.revision);
    EXPECT_EQ(rep.crc, req.crc);
    EXPECT_TRUE(rep.v2);
}

// The frames after the MPA exchange that carry data: FPDUs, one per segment.
std::vector<const Captured*> fpdus(const std::vector<Captured>& frames) {
    std::vector<const Captured*> out;
    for (std::size_t i = kReply + 1; i < frames.size(); ++i)
        if (!frames[i].frame.payload.empty()) out.push_back(&frames[i]);
    return out;
}

TEST(Siw, FpduCrcGood) {
    const auto frames = load("client-rping-crc.pcap");
    const auto list = fpdus(frames);
    ASSERT_EQ(list.size(), 7u);
    for (const Captured* c : list) {
        auto f = parse_fpdu(c->frame.payload, true);
        ASSERT_TRUE(f) << f.error().to_string();
        EXPECT_TRUE(f->crc_ok);
        EXPECT_EQ(f->total_len, c->frame.payload.size());
        EXPECT_EQ(fpdu_frame_len(c->frame.payload), c->frame.payload.size());
        Buffer again(f->total_len);
        emit_fpdu(f->ulpdu, true, again);
        EXPECT_EQ(to_hex(again), to_hex(c->frame.payload));
    }
    // Frame 8: a 34-byte Send whose CRC Wireshark shows as 0x87101d4b, the wire bytes.
    const Bytes send = list[0]->frame.payload;
    EXPECT_EQ(to_hex(send.last(4)), "87101d4b");
    EXPECT_EQ(load_le32(send, send.size() - 4), crc32c(send.first(send.size() - 4)));
    auto f = parse_fpdu(send, true);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->ulpdu.size(), 34u);
    // A Send with data and a 64-byte Read are not RTRs.
    auto rtr = parse_rtr(f->ulpdu);
    ASSERT_FALSE(rtr);
    EXPECT_STREQ(rtr.error().reason, "SEND RTR is not zero-length");
    rtr = parse_rtr(parse_fpdu(list[1]->frame.payload, true)->ulpdu);
    ASSERT_FALSE(rtr);
    EXPECT_STREQ(rtr.error().reason, "READ RTR is not zero-length");
}

TEST(Siw, FpduCrcZeroWithoutCrc) {
    const auto frames = load("client-rping-nocrc.pcap");
    const auto list = fpdus(frames);
    ASSERT_EQ(list.size(), 7u);
    for (const Captured* c : list) {
        const Bytes p = c->frame.payload;
        EXPECT_EQ(to_hex(p.last(4)), "00000000");
        auto f = parse_fpdu(p, false);
        ASSERT_TRUE(f) << f.error().to_string();
        EXPECT_TRUE(f->crc_ok);
        EXPECT_EQ(f->total_len, p.size());
        EXPECT_FALSE(parse_fpdu(p, true)->crc_ok);
    }
}

// rping's advertisement in a Send (rping.c struct rping_rdma_info): the
// buffer's address, its rkey and its size, all big-endian.
struct RpingInfo {
    std::uint64_t addr = 0;
    std::uint32_t rkey = 0;
    std::uint32_t size = 0;
};

RpingInfo rping_info(Bytes payload) {
    EXPECT_EQ(payload.size(), 16u);
    if (payload.size() != 16) return {};
    return {load_be64(payload, 0), load_be32(payload, 8), load_be32(payload, 12)};
}

// One FPDU of the capture, parsed down to its DDP segment; the header must
// emit back to the captured bytes.
struct CapturedSegment {
    const Captured* frame = nullptr;
    DdpSegment seg;
};

std::vector<CapturedSegment> segments(const std::vector<Captured>& frames, bool crc) {
    std::vector<CapturedSegment> out;
    for (const Captured* c : fpdus(frames)) {
        auto f = parse_fpdu(c->frame.payload, crc);
        EXPECT_TRUE(f && f->crc_ok);
        if (!f) continue;
        EXPECT_EQ(f->total_len, c->frame.payload.size());  // one FPDU per segment
        auto s = parse_ddp(f->ulpdu);
        EXPECT_TRUE(s) << s.error().to_string();
        if (!s) continue;
        Buffer again(s->header.header_len());
        emit_ddp_header(s->header, again);
        EXPECT_EQ(to_hex(again), to_hex(s->header_bytes));
        EXPECT_EQ(s->header.ddp_version, kDdpVersion);
        EXPECT_EQ(s->header.rdmap_version, kRdmapVersion);
        EXPECT_TRUE(s->header.last);
        out.push_back({c, *s});
    }
    return out;
}

// rping (client siw at 10.231.0.2, server at 10.231.0.1): the client's Send
// advertises its source buffer, the server reads it (Read Request, Read
// Response), answers with a Send, the client advertises its sink buffer, the
// server writes into it and sends its last Send.
TEST(Siw, RpingDdpSegments) {
    using Op = RdmapOpcode;
    const Op expected[] = {Op::kSend, Op::kReadRequest, Op::kReadResponse, Op::kSend,
                           Op::kSend, Op::kWrite,       Op::kSend};
    for (const auto& [name, crc] :
         {std::pair{"client-rping-crc.pcap", true}, std::pair{"client-rping-nocrc.pcap", false}}) {
        SCOPED_TRACE(name);
        const auto frames = load(name);  // the segments view these frames
        const auto list = segments(frames, crc);
        ASSERT_EQ(list.size(), std::size(expected));
        for (std::size_t i = 0; i < list.size(); ++i) {
            const DdpHeader& h = list[i].seg.header;
            EXPECT_EQ(h.opcode, static_cast<std::uint8_t>(expected[i])) << i;
            const bool tagged = expected[i] == Op::kReadResponse || expected[i] == Op::kWrite;
            EXPECT_EQ(h.tagged, tagged) << i;
            if (!tagged) {
                EXPECT_EQ(h.mo, 0u) << i;
            }
        }
        // Send MSNs count from 1 per direction; the Read Request queue from 1.
        EXPECT_EQ(list[0].seg.header.msn, 1u);
        EXPECT_EQ(list[3].seg.header.msn, 1u);
        EXPECT_EQ(list[4].seg.header.msn, 2u);
        EXPECT_EQ(list[6].seg.header.msn, 2u);
        EXPECT_EQ(list[1].seg.header.qn, kQnReadRequest);
        EXPECT_EQ(list[1].seg.header.msn, 1u);
        EXPECT_EQ(list[0].frame->frame.repr.ip.src, kSiwHost);
        EXPECT_EQ(list[1].frame->frame.repr.ip.src, kOffloadHost);

        // The Read Request reads what the first Send advertised.
        const RpingInfo source = rping_info(list[0].seg.payload);
        auto rr = parse_read_request(list[1].seg.payload);
        ASSERT_TRUE(rr) << rr.error().to_string();
        EXPECT_EQ(rr->source_stag, source.rkey);
        EXPECT_EQ(rr->source_to, source.addr);
        EXPECT_EQ(rr->size, source.size);
        Buffer again(kReadRequestPayloadLen);
        emit_read_request(*rr, again);
        EXPECT_EQ(to_hex(again), to_hex(list[1].seg.payload));
        // The Read Response lands in the requester's sink buffer.
        const DdpHeader& resp = list[2].seg.header;
        EXPECT_EQ(resp.stag, rr->sink_stag);
        EXPECT_EQ(resp.to, rr->sink_to);
        EXPECT_EQ(list[2].seg.payload.size(), rr->size);
        // The Write goes where the client's second Send pointed.
        const RpingInfo sink = rping_info(list[4].seg.payload);
        const DdpHeader& write = list[5].seg.header;
        EXPECT_EQ(write.stag, sink.rkey);
        EXPECT_EQ(write.to, sink.addr);
        EXPECT_EQ(list[5].seg.payload.size(), sink.size);
        // rping writes back what it read.
        EXPECT_EQ(to_hex(list[5].seg.payload), to_hex(list[2].seg.payload));
    }
}

}  // namespace
}  // namespace iwcm::wire
