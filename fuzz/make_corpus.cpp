// Writes the seed corpus of every fuzz target (fuzz/corpus/<target>/) from
// real traffic: two cores connect over IPv4, IPv6 and an 802.1Q VLAN at MPA
// revisions 1 and 2 (with CRC, RTR types, rejects, private data), close and
// reset; every frame is captured and cut into the layers each parser takes.
// The first SYN of each family is also written with IPv4 options, IPv6
// extension headers and as a fragment, the input those parsers skip or refuse.
// Run by scripts/fuzz.sh --corpus; the output is committed.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "fuzz/fuzz_util.hpp"
#include "fuzz/rdma_harness.hpp"
#include "iwcm/core.hpp"
#include "tests/wire/ip_extras.hpp"
#include "wire/ddp.hpp"
#include "wire/fpdu.hpp"
#include "wire/frame.hpp"
#include "wire/mpa.hpp"

using namespace iwcm;
namespace fs = std::filesystem;

namespace {

fs::path g_root;
std::set<std::string> g_written;

void write(const std::string& target, std::uint8_t prefix, bool with_prefix,
           std::span<const std::byte> bytes) {
    std::string data;
    if (with_prefix) data.push_back(static_cast<char>(prefix));
    for (std::byte b : bytes) data.push_back(static_cast<char>(b));
    // Name by content: the same input twice is one file.
    std::size_t h = std::hash<std::string>{}(data);
    char name[32];
    std::snprintf(name, sizeof name, "%016zx", h);
    fs::path dir = g_root / target;
    fs::create_directories(dir);
    if (!g_written.insert(target + name).second) return;
    std::ofstream(dir / name, std::ios::binary) << data;
}

struct Capture {
    std::vector<std::vector<std::byte>> frames;
};

void exchange(Capture& cap, bool v6, std::uint16_t vlan, std::uint8_t rev, bool crc,
              std::uint8_t rtr, bool reject) {
    CoreConfig ca, cb;
    ca.mac = MacAddr{{2, 0, 0, 0, 0, 0x0a}};
    cb.mac = MacAddr{{2, 0, 0, 0, 0, 0x0b}};
    ca.mpa.crc = crc;
    ca.mpa.rtr_types = rtr;
    cb.mpa.rtr_types = rtr;
    Core a(ca), b(cb);
    IpAddr ia = *IpAddr::parse(v6 ? "fd00::1" : "10.0.0.1");
    IpAddr ib = *IpAddr::parse(v6 ? "fd00::2" : "10.0.0.2");
    // Both addresses live on `vlan`: the listener and the connection follow it.
    (void)a.add_address(ia, vlan);
    (void)b.add_address(ib, vlan);
    (void)b.listen({{ib, 4791}, 0});
    Instant now{};
    auto pump = [&] {
        for (int i = 0; i < 50; ++i) {
            bool moved = false;
            while (auto f = a.poll_transmit()) {
                moved = true;
                cap.frames.emplace_back(f->begin(), f->end());
                b.receive(now, cap.frames.back());
            }
            while (auto f = b.poll_transmit()) {
                moved = true;
                cap.frames.emplace_back(f->begin(), f->end());
                a.receive(now, cap.frames.back());
            }
            while (auto e = b.poll_event()) {
                if (e->type != EventType::kConnectRequest) continue;
                std::vector<std::byte> pd(reject ? 7 : 12, std::byte{'r'});
                if (reject)
                    (void)b.reject(now, e->conn, pd);
                else
                    (void)b.accept(now, e->conn, {pd, 4, 4});
            }
            while (a.poll_event()) {
            }
            if (!moved) return;
        }
    };
    ConnectParams p;
    p.local = {ia, 0};
    p.remote = {ib, 4791};
    p.remote_mac = cb.mac;
    std::vector<std::byte> pd(20, std::byte{'q'});
    p.private_data = pd;
    p.mpa_revision = rev;
    auto h = a.connect(now, p);
    pump();
    if (h) (void)a.disconnect(now, *h, DisconnectMode::kGraceful);
    pump();
    // A segment for nothing (answered with RST), and a connect to a closed port.
    p.remote.port = 9;
    (void)a.connect(now, p);
    pump();
}

// The frame (untagged) with IPv4 options or IPv6 extension headers, and as a
// fragment: each to the frame, IP and core targets (core as a raw chunk).
void write_ip_variants(const std::vector<std::byte>& f, std::vector<std::byte>& core_input) {
    using wire::hex_bytes;
    std::vector<std::vector<std::byte>> variants;
    if (fuzz::be16(f, 12) == wire::kEtherTypeIpv4) {
        variants.push_back(wire::test::with_ipv4_options(f, hex_bytes("94 04 00 00")));
        variants.push_back(wire::test::with_ipv4_options(f, hex_bytes("01 01 94 04 00 00 00 00")));
        variants.push_back(f);
        fuzz::put16(variants.back(), 14 + 6, 0x2000);  // MF (fix_checksums repairs the sum)
    } else {
        const char* kChain =
            "3c 00 05 02 00 00 01 00 2b 00 01 04 00 00 00 00"
            "06 02 02 00 00 00 00 00 fd 00 00 00 00 00 00 00 00 00 00 00 00 00 00 09";
        variants.push_back(wire::test::with_ipv6_extensions(f, 0, hex_bytes(kChain)));
        variants.push_back(
            wire::test::with_ipv6_extensions(f, 44, hex_bytes("06 00 00 00 00 00 00 00")));
    }
    for (auto& v : variants) {
        fuzz::fix_checksums(v);
        write("frame", 1, true, v);
        const auto ip = std::span<const std::byte>(v).subspan(14);
        if (fuzz::be16(f, 12) == wire::kEtherTypeIpv4)
            write("ipv4", 0, true, ip);
        else
            write("ipv6", 0, false, ip);
        core_input.push_back(std::byte{0});
        core_input.push_back(static_cast<std::byte>(v.size()));
        core_input.insert(core_input.end(), v.begin(), v.end());
    }
}

// DDP seeds: the ULPDUs of RTRs, a tagged Write with data, and Terminates
// without and with the quoted DDP and Read Request headers.
void write_ddp_seeds() {
    for (auto type : {wire::RtrType::kSend, wire::RtrType::kWrite, wire::RtrType::kRead}) {
        std::byte buf[64];
        std::size_t n = wire::emit_rtr_fpdu({type, 0x1234}, false, buf);
        write("ddp", 0, false, wire::parse_fpdu(std::span<const std::byte>(buf, n), false)->ulpdu);
    }
    wire::DdpHeader w;
    w.tagged = true;
    w.stag = 0x923AD900;
    w.to = 0x5568CFBCBF30;
    std::vector<std::byte> write_seg(w.header_len() + 8, std::byte{'x'});
    wire::emit_ddp_header(w, write_seg);
    write("ddp", 0, false, write_seg);
    // Sends with Invalidate, with and without Solicited Event: the STag in the untagged
    // header's first word. Also as FPDUs (with and without CRC) for fuzz_fpdu.
    for (auto op : {wire::RdmapOpcode::kSendInvalidate, wire::RdmapOpcode::kSendSeInvalidate}) {
        wire::DdpHeader h;
        h.opcode = static_cast<std::uint8_t>(op);
        h.inval_stag = 0x923AD900;
        h.qn = wire::kQnSend;
        h.msn = 3;
        h.last = op == wire::RdmapOpcode::kSendInvalidate;
        std::vector<std::byte> seg(h.header_len() + 12, std::byte{'s'});
        wire::emit_ddp_header(h, seg);
        write("ddp", 0, false, seg);
        for (bool crc : {false, true}) {
            std::vector<std::byte> f(wire::fpdu_len_for_ulpdu(seg.size()));
            wire::store_bytes(f, wire::kFpduLengthLen, seg);
            wire::seal_fpdu_in_place(seg.size(), crc, f);
            write("fpdu", crc ? 1 : 0, true, f);
        }
    }
    std::byte rr[64];
    wire::emit_rtr_fpdu({wire::RtrType::kRead, 0x1234}, false, rr);
    const std::byte* read_ulpdu = rr + wire::kFpduLengthLen;
    wire::TerminateRepr t;
    for (int k = 0; k < 3; ++k) {
        t.layer = k == 0   ? wire::TermLayer::kLlp
                  : k == 1 ? wire::TermLayer::kDdp
                           : wire::TermLayer::kRdmap;
        t.etype = static_cast<std::uint8_t>(k);
        t.code = static_cast<std::uint8_t>(k + 1);
        if (k >= 1) {
            t.ddp_segment_len = 28;
            t.ddp_header = std::span<const std::byte>(read_ulpdu, wire::kDdpUntaggedHeaderLen);
        }
        if (k == 2)
            t.rdmap_header = std::span<const std::byte>(read_ulpdu + wire::kDdpUntaggedHeaderLen,
                                                        wire::kReadRequestPayloadLen);
        std::vector<std::byte> term(wire::terminate_ulpdu_len(t));
        wire::emit_terminate_ulpdu(t, 1, term);
        write("ddp", 0, false, term);
    }
}

// ---- fuzz_rdma: a peer's valid streams into the scene of rdma_harness.hpp ----

class NullLinks final : public rdma::Links {
public:
    std::size_t send_space(rdma::LinkId) override { return 0; }
    bool send_record(rdma::LinkId, wire::Bytes) override { return false; }
    std::size_t readable(rdma::LinkId) override { return 0; }
    wire::Bytes peek(rdma::LinkId) override { return {}; }
    void consume(rdma::LinkId, std::size_t) override {}
    void close(rdma::LinkId, bool) override {}
};

// Appends one FPDU: the DDP header, then `payload`.
void add_fpdu(std::vector<std::byte>& out, const wire::DdpHeader& h, wire::Bytes payload,
              bool crc) {
    std::vector<std::byte> f(wire::fpdu_len_for_ulpdu(h.header_len() + payload.size()));
    std::size_t n = wire::emit_ddp_header(h, wire::MutBytes(f).subspan(2));
    std::copy(payload.begin(), payload.end(), f.begin() + 2 + static_cast<long>(n));
    wire::seal_fpdu_in_place(n + payload.size(), crc, f);
    out.insert(out.end(), f.begin(), f.end());
}

wire::DdpHeader untagged_header(wire::RdmapOpcode op, std::uint32_t qn, std::uint32_t msn,
                                std::uint32_t mo, bool last) {
    wire::DdpHeader h;
    h.opcode = static_cast<std::uint8_t>(op);
    h.qn = qn;
    h.msn = msn;
    h.mo = mo;
    h.last = last;
    return h;
}

wire::DdpHeader tagged_header(wire::RdmapOpcode op, std::uint32_t stag, std::uint64_t to,
                              bool last) {
    wire::DdpHeader h;
    h.tagged = true;
    h.opcode = static_cast<std::uint8_t>(op);
    h.stag = stag;
    h.to = to;
    h.last = last;
    return h;
}

// The peer's side of a conversation: Sends (one in three segments), RDMA
// Writes into W (the last up to its end), Read Requests of R (the second up
// to its end), the Read Response to our Read, and
// (`term`) a TERMINATE at the end.
std::vector<std::byte> rdma_stream(const rdma::MemoryRegion (&mrs)[fuzz::kRegionCount], bool crc,
                                   bool term) {
    using wire::RdmapOpcode;
    std::vector<std::byte> s;
    std::vector<std::byte> data(300);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>('a' + i % 26);
    const wire::Bytes d(data);
    add_fpdu(s, untagged_header(RdmapOpcode::kSend, 0, 1, 0, true), d.first(40), crc);
    add_fpdu(s, untagged_header(RdmapOpcode::kSendSe, 0, 2, 0, false), d.first(20), crc);
    add_fpdu(s, untagged_header(RdmapOpcode::kSendSe, 0, 2, 20, false), d.subspan(20, 20), crc);
    add_fpdu(s, untagged_header(RdmapOpcode::kSendSe, 0, 2, 40, true), d.subspan(40, 10), crc);
    const auto& w = mrs[0];
    add_fpdu(s, tagged_header(RdmapOpcode::kWrite, w.rkey, w.addr + 10, false), d.first(100), crc);
    add_fpdu(s, tagged_header(RdmapOpcode::kWrite, w.rkey, w.addr + 110, true), d.first(50), crc);
    // Right up to the region's end: one byte more is out of bounds.
    add_fpdu(s, tagged_header(RdmapOpcode::kWrite, w.rkey, w.addr + w.length - 50, true),
             d.first(50), crc);
    wire::ReadRequest rr;
    rr.sink_stag = fuzz::kPeerStag;
    rr.sink_to = fuzz::kPeerTo;
    rr.size = 200;
    rr.source_stag = mrs[1].rkey;
    rr.source_to = mrs[1].addr + 16;
    std::byte rr_bytes[wire::kReadRequestPayloadLen];
    wire::emit_read_request(rr, rr_bytes);
    add_fpdu(s, untagged_header(RdmapOpcode::kReadRequest, 1, 1, 0, true), rr_bytes, crc);
    rr.size = 100;  // the last 100 bytes of R
    rr.source_to = mrs[1].addr + mrs[1].length - 100;
    wire::emit_read_request(rr, rr_bytes);
    add_fpdu(s, untagged_header(RdmapOpcode::kReadRequest, 1, 2, 0, true), rr_bytes, crc);
    const auto& l = mrs[2];
    const std::uint64_t sink = l.addr + fuzz::kReadSinkOffset;
    add_fpdu(s, tagged_header(RdmapOpcode::kReadResponse, l.lkey, sink, false), d.first(120), crc);
    add_fpdu(s, tagged_header(RdmapOpcode::kReadResponse, l.lkey, sink + 120, true),
             d.subspan(120, fuzz::kReadLen - 120), crc);
    add_fpdu(s, untagged_header(RdmapOpcode::kSend, 0, 3, 0, true), d.first(64), crc);
    if (term) {
        std::byte t[128];
        std::size_t n = wire::emit_terminate_fpdu(wire::TermError::kCrcError, crc, t);
        s.insert(s.end(), t, t + n);
    }
    return s;
}

// Which STag the peer's Sends with Invalidate name (invalidate_stream).
enum class Naming : std::uint8_t { kLive, kReceiveRegion, kForeign, kUnknown };

// The peer's Sends with Invalidate: a plain Send, then one naming I (or, per `naming`,
// our receives' region L, F of another domain, an STag nobody registered) and one with
// Solicited Event naming W in three segments, each Send in its own receive; then an RDMA
// Write into I, which names it no more when the first one took it (a TERMINATE), and a
// last Send.
std::vector<std::byte> invalidate_stream(const rdma::MemoryRegion (&mrs)[fuzz::kRegionCount],
                                         bool crc, Naming naming) {
    using wire::RdmapOpcode;
    std::vector<std::byte> s;
    std::vector<std::byte> data(120);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>('A' + i % 26);
    const wire::Bytes d(data);
    const std::uint32_t named = naming == Naming::kLive            ? mrs[fuzz::kInvalidatable].rkey
                                : naming == Naming::kReceiveRegion ? mrs[2].rkey
                                : naming == Naming::kForeign
                                    ? mrs[fuzz::kForeign].rkey
                                    : 0x5EED0000u ^ mrs[fuzz::kInvalidatable].rkey;
    add_fpdu(s, untagged_header(RdmapOpcode::kSend, 0, 1, 0, true), d.first(10), crc);
    auto inv = untagged_header(RdmapOpcode::kSendInvalidate, 0, 2, 0, true);
    inv.inval_stag = named;
    add_fpdu(s, inv, d.first(30), crc);
    for (std::uint32_t mo : {0u, 20u, 40u}) {
        auto se = untagged_header(RdmapOpcode::kSendSeInvalidate, 0, 3, mo, mo == 40);
        se.inval_stag = mrs[0].rkey;
        add_fpdu(s, se, d.subspan(mo, 20), crc);
    }
    const auto& i = mrs[fuzz::kInvalidatable];
    add_fpdu(s, tagged_header(RdmapOpcode::kWrite, i.rkey, i.addr + 8, true), d.first(16), crc);
    add_fpdu(s, untagged_header(RdmapOpcode::kSend, 0, 4, 0, true), d.first(8), crc);
    return s;
}

void write_rdma_seeds() {
    NullLinks links;
    rdma::Engine engine(links, fuzz::device_config());
    rdma::MemoryRegion mrs[fuzz::kRegionCount];
    if (!fuzz::register_regions(engine, mrs)) return;
    // flags: bit 0 CRC, 1 FPDU by FPDU, 2 link down, 3 fix CRCs, 4-5 FPDU size, 6-7 IRD/ORD;
    // shape; scene: bit 0 SRQ, 1 SGEs, 2 SRQ limit, 3 our Send with Invalidate, 4 with
    // Solicited Event, 5 local invalidate of I, 6 a fenced Send.
    const std::uint8_t variants[][3] = {{0x00, 0x35, 0x00}, {0x09, 0x35, 0x01}, {0x0B, 0x5F, 0x07},
                                        {0x02, 0xA1, 0x18}, {0x1D, 0x73, 0x42}, {0xE8, 0x20, 0x25},
                                        {0x31, 0x3C, 0x5F}};
    for (const auto& v : variants) {
        const bool crc = v[0] & 1;
        for (bool term : {false, true}) {
            std::vector<std::byte> in{std::byte{v[0]}, std::byte{v[1]}, std::byte{v[2]}};
            auto s = rdma_stream(mrs, crc, term);
            in.insert(in.end(), s.begin(), s.end());
            write("rdma", 0, false, in);
        }
    }
    for (auto naming :
         {Naming::kLive, Naming::kReceiveRegion, Naming::kForeign, Naming::kUnknown}) {
        for (const auto& v : variants) {
            std::vector<std::byte> in{std::byte{v[0]}, std::byte{v[1]}, std::byte{v[2]}};
            auto s = invalidate_stream(mrs, v[0] & 1, naming);
            in.insert(in.end(), s.begin(), s.end());
            write("rdma", 0, false, in);
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    g_root = argc > 1 ? argv[1] : "fuzz/corpus";
    Capture cap;
    for (bool v6 : {false, true})
        for (std::uint8_t rev : {1, 2})
            exchange(cap, v6, v6 ? kNoVlan : (rev == 2 ? 7 : kNoVlan), rev, rev == 2 && !v6,
                     rtr::kAll, false);
    exchange(cap, false, kNoVlan, 2, true, rtr::kWrite, false);
    exchange(cap, false, kNoVlan, 2, false, rtr::kRead, false);
    exchange(cap, false, kNoVlan, 2, false, rtr::kAll, true);
    exchange(cap, true, kNoVlan, 1, false, rtr::kAll, true);
    std::size_t core_inputs = 0;
    std::vector<std::byte> core_input{std::byte{0x0f}};
    std::vector<std::byte> variant_input{std::byte{0x0f}};
    bool syn_seen[2] = {false, false};
    for (std::size_t i = 0; i < cap.frames.size(); ++i) {
        const auto& f = cap.frames[i];
        write("ethernet", 0, false, f);
        write("frame", 1, true, f);
        auto eth = wire::parse_ethernet(f);
        if (!eth) continue;
        if (eth->repr.ethertype == wire::kEtherTypeIpv4) write("ipv4", 0, true, eth->payload);
        if (eth->repr.ethertype == wire::kEtherTypeIpv6) write("ipv6", 0, false, eth->payload);
        auto fr = wire::parse_tcp_frame(f);
        if (!fr) continue;
        const bool v6 = !fr->repr.ip.src.is_v4();
        if (fr->repr.tcp.flags == wire::tcp_flags::kSyn && !eth->repr.vlan && !syn_seen[v6]) {
            syn_seen[v6] = true;
            write_ip_variants(f, variant_input);
        }
        const auto seg_start = fr->payload.data() - fr->repr.tcp.header_len();
        auto seg = eth->payload.subspan(static_cast<std::size_t>(seg_start - eth->payload.data()));
        std::size_t tcp_len = fr->repr.tcp.header_len() + fr->payload.size();
        write("tcp", fr->repr.ip.src.is_v4() ? 0 : 2, true,
              seg.first(std::min(tcp_len, seg.size())));
        if (!fr->payload.empty()) {
            if (wire::parse_mpa(fr->payload))
                write("mpa", 0, false, fr->payload);
            else
                write("fpdu", 1, true, fr->payload), write("fpdu", 0, true, fr->payload);
        }
        // Core: a raw chunk (kind 0) of each frame small enough for a one-byte length.
        if (f.size() <= 255 && core_input.size() < 1500) {
            core_input.push_back(std::byte{0});
            core_input.push_back(static_cast<std::byte>(f.size()));
            core_input.insert(core_input.end(), f.begin(), f.end());
        }
    }
    write("core", 0, false, core_input);
    write("core", 0, false, variant_input);
    core_inputs += 2;
    // Core: template chunks (kind 1) carrying MPA frames and RTRs onto A's
    // connections in every state, with ACK+PSH flags.
    for (std::uint8_t mode : {0x0f, 0x06, 0x0c}) {
        std::vector<std::byte> in{static_cast<std::byte>(mode)};
        for (std::uint8_t t = 0; t < 25; ++t) {
            for (int kind = 0; kind < 3; ++kind) {
                std::vector<std::byte> payload;
                wire::MpaRepr m;
                m.kind = kind == 0 ? wire::MpaKind::kRequest : wire::MpaKind::kReply;
                m.reject = kind == 2;
                m.v2 = wire::MpaV2Params{4, 4, true, true, false, false};
                std::vector<std::byte> pd(9, std::byte{'p'});
                m.private_data = pd;
                payload.resize(m.buffer_len());
                m.emit(payload);
                if (kind == 1) {
                    std::byte rtr[64];
                    std::size_t n = wire::emit_rtr_fpdu({wire::RtrType::kSend}, false, rtr);
                    payload.insert(payload.end(), rtr, rtr + n);
                }
                in.push_back(std::byte{1});
                in.push_back(static_cast<std::byte>(4 + payload.size()));
                in.push_back(static_cast<std::byte>(t));
                in.push_back(std::byte{0x18});  // ACK | PSH
                in.push_back(std::byte{0});
                in.push_back(std::byte{0});
                in.insert(in.end(), payload.begin(), payload.end());
            }
        }
        write("core", 0, false, in);
        ++core_inputs;
    }
    // MPA and FPDU inputs made directly: every kind, revision and flag.
    for (int rev = 0; rev <= 3; ++rev)
        for (int flags = 0; flags < 16; ++flags) {
            std::vector<std::byte> f(20 + 8);
            auto key = (flags & 1) ? "MPA ID Rep Frame" : "MPA ID Req Frame";
            for (int i = 0; i < 16; ++i) f[i] = static_cast<std::byte>(key[i]);
            f[16] = static_cast<std::byte>((flags & 0xE) << 4);
            f[17] = static_cast<std::byte>(rev);
            f[19] = std::byte{8};
            write("mpa", 0, false, f);
        }
    for (auto type : {wire::RtrType::kSend, wire::RtrType::kWrite, wire::RtrType::kRead})
        for (bool crc : {false, true}) {
            std::byte buf[64];
            std::size_t n = wire::emit_rtr_fpdu({type}, crc, buf);
            write("fpdu", crc ? 1 : 0, true, std::span<const std::byte>(buf, n));
        }
    for (int e = 0; e < 3; ++e) {
        std::byte buf[128];
        auto err = e == 0   ? wire::TermError::kInsufficientIrd
                   : e == 1 ? wire::TermError::kNoMatchingRtr
                            : wire::TermError::kCrcError;
        std::size_t n = wire::emit_terminate_fpdu(err, e == 2, buf);
        write("fpdu", e == 2 ? 1 : 0, true, std::span<const std::byte>(buf, n));
    }
    write_ddp_seeds();
    write_rdma_seeds();
    std::printf("corpus: %zu frames captured, %zu files, %zu core inputs, in %s\n",
                cap.frames.size(), g_written.size(), core_inputs, g_root.c_str());
    return 0;
}
