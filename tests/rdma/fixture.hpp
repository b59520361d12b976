// Two engines joined by a PipeLinks, one queue pair each (a on end 0, b on
// end 1), and hand-made FPDUs for the error tests (written from RFC 5040 /
// 5041 / 5044 directly, not with the codecs under test).
//
// Read first: pipe.hpp.
#pragma once

#include "pipe.hpp"
#include "wire/crc32c.hpp"

namespace iwcm::rdma::test {

struct PairOptions {
    bool crc = false;
    std::uint16_t ird_a = 4, ord_a = 4, ird_b = 4, ord_b = 4;
    std::uint32_t max_fpdu = 1460;
    std::size_t ring = 256 * 1024;
    std::uint32_t max_send_wr = 64, max_recv_wr = 64;
};

struct Buf {
    ByteVec mem;
    MemoryRegion mr;
    Sge sge(std::size_t off, std::size_t len) const {
        return Sge{mr.addr + off, static_cast<std::uint32_t>(len), mr.lkey};
    }
    Sge all() const { return sge(0, mem.size()); }
};

inline std::byte pattern(std::size_t seed, std::size_t i) {
    return static_cast<std::byte>((seed * 131 + i * 7 + i / 251) & 0xFF);
}

struct Pair {
    explicit Pair(const PairOptions& o = {}) : links(o.ring), a(links, {}), b(links, {}) {
        acq = *a.create_cq(4096);
        bcq = *b.create_cq(4096);
        qa = make(a, acq, 0, o, o.ird_a, o.ord_a);
        qb = make(b, bcq, 1, o, o.ird_b, o.ord_b);
    }

    static QpHandle make(Engine& e, CqHandle cq, std::uint64_t link, const PairOptions& o,
                         std::uint16_t ird, std::uint16_t ord) {
        QpParams p;
        p.link = {link};
        p.attr.send_cq = p.attr.recv_cq = cq;
        p.attr.max_send_wr = o.max_send_wr;
        p.attr.max_recv_wr = o.max_recv_wr;
        p.attr.sq_sig_all = true;
        p.crc = o.crc;
        p.ird = ird;
        p.ord = ord;
        p.max_fpdu = o.max_fpdu;
        auto qp = e.create_qp(p);
        EXPECT_TRUE(qp.has_value());
        return *qp;
    }

    static Buf buf(Engine& e, std::size_t n, std::uint32_t access, std::size_t seed = 0,
                   std::uint32_t pd = 0) {
        Buf b;
        b.mem.resize(n);
        for (std::size_t i = 0; i < n; ++i) b.mem[i] = pattern(seed, i);
        auto mr = e.reg_mr(b.mem, access, pd);
        EXPECT_TRUE(mr.has_value());
        b.mr = *mr;
        return b;
    }

    // Delivers at most `chunk` bytes per end per round until nothing moves.
    void pump(std::size_t chunk = SIZE_MAX) {
        for (int round = 0; round < 1'000'000; ++round) {
            std::size_t moved = links.deliver(0, chunk) + links.deliver(1, chunk);
            a.on_readable(qa);
            b.on_readable(qb);
            a.on_writable(qa);
            b.on_writable(qb);
            if (moved == 0 && links.end(0).air.empty() && links.end(1).air.empty()) return;
            if (moved == 0) return;  // rings full and nobody reads: stuck
        }
        ADD_FAILURE() << "pump did not settle";
    }

    static std::vector<WorkCompletion> wcs(Engine& e, CqHandle cq) {
        std::vector<WorkCompletion> out(8192);
        out.resize(e.poll_cq(cq, out));
        return out;
    }

    PipeLinks links;
    Engine a, b;
    CqHandle acq, bcq;
    QpHandle qa, qb;
};

// ---- hand-made FPDUs ----

inline void put32(ByteVec& v, std::uint32_t x) {
    for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<std::byte>(x >> s));
}
inline void put64(ByteVec& v, std::uint64_t x) {
    put32(v, static_cast<std::uint32_t>(x >> 32));
    put32(v, static_cast<std::uint32_t>(x));
}
inline std::uint32_t get32(const ByteVec& v, std::size_t off) {
    return std::uint32_t{static_cast<std::uint8_t>(v[off])} << 24 |
           std::uint32_t{static_cast<std::uint8_t>(v[off + 1])} << 16 |
           std::uint32_t{static_cast<std::uint8_t>(v[off + 2])} << 8 |
           std::uint32_t{static_cast<std::uint8_t>(v[off + 3])};
}
inline std::uint16_t get16(const ByteVec& v, std::size_t off) {
    return static_cast<std::uint16_t>(static_cast<std::uint8_t>(v[off]) << 8 |
                                      static_cast<std::uint8_t>(v[off + 1]));
}

// byte 0: T 0x80 | L 0x40 | DDP version 1; byte 1: RDMAP version 1 << 6 | opcode.
inline ByteVec untagged(std::uint8_t c0, std::uint8_t c1, std::uint32_t qn, std::uint32_t msn,
                        std::uint32_t mo, const ByteVec& payload = {}) {
    ByteVec v{std::byte{c0}, std::byte{c1}};
    put32(v, 0);
    put32(v, qn);
    put32(v, msn);
    put32(v, mo);
    v.insert(v.end(), payload.begin(), payload.end());
    return v;
}

inline ByteVec tagged(std::uint8_t c0, std::uint8_t c1, std::uint32_t stag, std::uint64_t to,
                      const ByteVec& payload = {}) {
    ByteVec v{std::byte{c0}, std::byte{c1}};
    put32(v, stag);
    put64(v, to);
    v.insert(v.end(), payload.begin(), payload.end());
    return v;
}

inline ByteVec read_request(std::uint32_t sink_stag, std::uint64_t sink_to, std::uint32_t size,
                            std::uint32_t src_stag, std::uint64_t src_to) {
    ByteVec v;
    put32(v, sink_stag);
    put64(v, sink_to);
    put32(v, size);
    put32(v, src_stag);
    put64(v, src_to);
    return v;
}

// Length, ULPDU, zero pad, CRC32c least significant byte first (or zero).
inline ByteVec fpdu(const ByteVec& ulpdu, bool crc) {
    // Sized first and filled by index: g++ 12's -Warray-bounds misreads an
    // insert into a two-byte vector at -O2.
    ByteVec v(2 + ulpdu.size());
    v[0] = static_cast<std::byte>(ulpdu.size() >> 8);
    v[1] = static_cast<std::byte>(ulpdu.size());
    std::copy(ulpdu.begin(), ulpdu.end(), v.begin() + 2);
    while (v.size() % 4 != 0) v.push_back(std::byte{0});
    std::uint32_t c = crc ? wire::crc32c(v) : 0;
    for (int s = 0; s < 32; s += 8) v.push_back(static_cast<std::byte>(c >> s));
    return v;
}

// A TERMINATE FPDU read field by field (RFC 5040 section 4.8).
struct TermSeen {
    std::uint8_t layer = 0xF, etype = 0xF, code = 0;
    bool m = false, d = false, r = false;
    std::uint16_t seg_len = 0;
    ByteVec ddp_header, rdmap_header;
};

inline TermSeen read_terminate(const ByteVec& rec) {
    TermSeen t;
    EXPECT_GE(rec.size(), 28u);
    if (rec.size() < 28) return t;
    ByteVec u(rec.begin() + 2, rec.begin() + 2 + get16(rec, 0));
    EXPECT_EQ(u[0], std::byte{0x41});
    EXPECT_EQ(u[1], std::byte{0x47});
    EXPECT_EQ(get32(u, 6), 2u);   // QN 2
    EXPECT_EQ(get32(u, 10), 1u);  // MSN 1
    EXPECT_EQ(get32(u, 14), 0u);  // MO 0
    auto b = [&](std::size_t i) { return static_cast<std::uint8_t>(u[i]); };
    t.layer = b(18) >> 4;
    t.etype = b(18) & 0xF;
    t.code = b(19);
    t.m = b(20) & 0x80;
    t.d = b(20) & 0x40;
    t.r = b(20) & 0x20;
    std::size_t off = 22;
    if (t.m) {
        t.seg_len = get16(u, off);
        off += 2;
    }
    if (t.d) {
        std::size_t n = (b(off) & 0x80) ? 14 : 18;
        t.ddp_header.assign(u.begin() + off, u.begin() + off + n);
        off += n;
    }
    if (t.r) {
        t.rdmap_header.assign(u.begin() + off, u.begin() + off + 28);
        off += 28;
    }
    EXPECT_EQ(off, u.size());
    return t;
}

}  // namespace iwcm::rdma::test
