// RDMA message throughput on one thread: RDMA Writes or Sends of one size
// between two queue pairs, iwarp-cm's way (two cores wired back to back, a
// Device each, FPDUs over the cores' byte streams) against siw's way done in
// userspace (the same engine over a Linux TCP connection on loopback).
//
// Read first: include/iwcm/verbs.hpp, src/rdma/link.hpp, bench/stream_pair.hpp
// (the wiring of two cores and the loopback baseline this mirrors). Used by
// `iwarp-cm bench` and bench/rdma_bench.cpp.
//
// One unit of work: the sender keeps up to kDepth work requests posted (the
// receiver as many receives for Sends); a message counts when its work
// completion arrives (the receiver's for a Send, the sender's for a Write:
// over the cores a Write completes when the peer's ACK covers its last
// byte, since the stream sends it from the registered memory; over the
// socket once its last FPDU is in the socket). Time is the real clock.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "iwcm/core.hpp"
#include "iwcm/verbs.hpp"
#include "rdma/engine.hpp"
#include "rdma/link.hpp"
#include "stream_pair.hpp"

namespace iwcm::bench {

enum class RdmaOp : std::uint8_t { kWrite, kSend };

struct RdmaSample {
    std::uint64_t bytes = 0;     // message bytes completed
    std::uint64_t messages = 0;  // messages completed
    double seconds = 0;          // wall
    bool error = false;
    double mb_per_s() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0; }
};

// The buffers, registrations and work requests both pairs share (run_rdma
// below is the loop).
struct RdmaLoad {
    static constexpr std::uint32_t kDepth = 16;
    std::vector<std::byte> src;
    std::vector<std::byte> dst;
    // Kept across runs: work requests still outstanding from the last one.
    std::uint32_t in_flight = 0;
    bool receives_posted = false;
    rdma::MemoryRegion mr_src;  // the sender's, no remote access
    rdma::MemoryRegion mr_dst;  // the receiver's: receives and the Writes' target
    rdma::Sge src_sge;
    rdma::Sge dst_sge;

    // The sender's work request for `op`: all of src, into dst for a Write.
    rdma::SendWr send_wr(RdmaOp op) {
        src_sge = {mr_src.addr, static_cast<std::uint32_t>(src.size()), mr_src.lkey};
        rdma::SendWr wr;
        wr.opcode = op == RdmaOp::kWrite ? rdma::WrOpcode::kRdmaWrite : rdma::WrOpcode::kSend;
        wr.sg_list = {&src_sge, 1};
        wr.remote_addr = mr_dst.addr;
        wr.rkey = mr_dst.rkey;
        return wr;
    }
    rdma::RecvWr recv_wr() {
        dst_sge = {mr_dst.addr, static_cast<std::uint32_t>(dst.size()), mr_dst.lkey};
        rdma::RecvWr wr;
        wr.sg_list = {&dst_sge, 1};
        return wr;
    }

    explicit RdmaLoad(std::size_t message) : src(message), dst(message) {
        for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 13 + 1);
    }
};

inline RdmaSample rdma_failed(RdmaSample s) {
    s.error = true;
    return s;
}

// Runs `op` of the load's message size until `max_bytes` moved or `max_seconds` passed.
// Pair provides post(op), repost_recv(), progress() (false on a failure) and
// poll_sender / poll_receiver (completions out). Sends are bounded by the
// receives posted: a Send completes at the sender once it is in the stream,
// so only the receiver's completion frees its slot.
template <class Pair>
RdmaSample run_rdma(Pair& p, RdmaLoad& load, RdmaOp op, std::uint64_t max_bytes,
                    double max_seconds) {
    RdmaSample s;
    const auto start = std::chrono::steady_clock::now();
    const std::size_t message = load.src.size();
    std::uint32_t& in_flight = load.in_flight;
    std::uint32_t spins = 0;
    std::array<rdma::WorkCompletion, 32> wcs{};
    if (op == RdmaOp::kSend && !load.receives_posted) {
        for (std::uint32_t i = 0; i < RdmaLoad::kDepth; ++i)
            if (!p.repost_recv()) return rdma_failed(s);
        load.receives_posted = true;
    }
    while (s.bytes < max_bytes) {
        for (; in_flight < RdmaLoad::kDepth; ++in_flight)
            if (!p.post(op)) return rdma_failed(s);
        if (!p.progress()) return rdma_failed(s);
        std::size_t n = p.poll_sender(wcs);
        for (std::size_t i = 0; i < n; ++i) {
            if (wcs[i].status != rdma::WcStatus::kSuccess) return rdma_failed(s);
            if (op != RdmaOp::kWrite) continue;
            --in_flight;
            s.bytes += message;
            ++s.messages;
        }
        n = op == RdmaOp::kSend ? p.poll_receiver(wcs) : 0;
        for (std::size_t i = 0; i < n; ++i) {
            if (wcs[i].status != rdma::WcStatus::kSuccess || wcs[i].byte_len != message)
                return rdma_failed(s);
            --in_flight;
            s.bytes += message;
            ++s.messages;
            if (!p.repost_recv()) return rdma_failed(s);
        }
        if ((++spins & 63) == 0 && seconds_since(start) > max_seconds) break;
    }
    s.seconds = seconds_since(start);
    return s;
}

// iwarp-cm's way: two cores in memory, a Device on each.
class RdmaCorePair {
public:
    // `checksum_offload`: neither core computes or verifies the IPv4 and TCP checksums
    // (CoreConfig::checksum_offload), as Linux's loopback skips the TCP one.
    RdmaCorePair(std::size_t message, bool crc, std::uint32_t offload = 0,
                 bool checksum_offload = false)
        : load_(message),
          a_(config(0x0a, 1, crc, offload, checksum_offload)),
          b_(config(0x0b, 2, crc, offload, checksum_offload)),
          da_(a_),
          db_(b_) {
        ok_ = a_.add_address(pair_ip(1)).has_value() && b_.add_address(pair_ip(2)).has_value() &&
              connect_pair(a_, b_, now_, conn_a_, conn_b_) && setup();
    }
    bool ok() const { return ok_; }

    RdmaSample run(RdmaOp op, std::uint64_t max_bytes, double max_seconds) {
        return run_rdma(*this, load_, op, max_bytes, max_seconds);
    }

    bool post(RdmaOp op) {
        now_ = wall();
        return da_.post_send(now_, qa_, load_.send_wr(op)).has_value();
    }
    bool repost_recv() { return db_.post_recv(now_, qb_, load_.recv_wr()).has_value(); }
    bool progress() {
        now_ = wall();
        ferry(a_, b_, now_);
        if (!drive(b_, db_)) return false;
        ferry(b_, a_, now_);
        if (!drive(a_, da_)) return false;
        for (Core* c : {&a_, &b_})
            if (auto d = c->next_deadline(); d && *d <= now_) c->on_timer(now_);
        return true;
    }
    std::size_t poll_sender(std::span<rdma::WorkCompletion> out) { return da_.poll_cq(cqa_, out); }
    std::size_t poll_receiver(std::span<rdma::WorkCompletion> out) {
        return db_.poll_cq(cqb_, out);
    }
    // Bytes copied per message byte the receiver placed so far: the streams'
    // copies (FPDU headers and CRCs included) and the placements.
    double copies_per_byte() const {
        const rdma::Device::Placement p = db_.placement();
        return bench::copies_per_byte(a_, conn_a_, b_, conn_b_, p.placed + p.joined, p.placed);
    }
    // The same without the sender's FPDU framing (headers, pads, CRCs written around
    // payloads sent from registered memory): copies of message bytes only.
    double message_copies_per_byte() const {
        const rdma::Device::Placement p = db_.placement();
        return bench::copies_per_byte(a_, conn_a_, b_, conn_b_, p.placed + p.joined, p.placed,
                                      da_.framing_sent());
    }

private:
    static CoreConfig config(std::uint8_t mac_last, std::uint8_t secret, bool crc,
                             std::uint32_t offload, bool checksum_offload) {
        CoreConfig c;
        c.mac = MacAddr{{0x02, 0, 0, 0, 0, mac_last}};
        c.isn_secret.fill(secret);
        c.rcv_wscale = 7;
        c.mpa.crc = crc;
        c.checksum_offload = checksum_offload;
        c.stream.segment_offload = static_cast<std::uint16_t>(offload);
        return c;
    }
    static Instant wall() {
        return Instant(std::chrono::duration_cast<Duration>(
            std::chrono::steady_clock::now().time_since_epoch()));
    }
    // Events go to the device first; a QP's end is an error here.
    bool drive(Core& c, rdma::Device& d) {
        while (auto e = c.poll_event()) d.on_event(now_, *e);
        return !d.poll_qp_event().has_value();
    }

    bool setup() {
        auto cqa = da_.create_cq(256);
        auto cqb = db_.create_cq(256);
        if (!cqa || !cqb) return false;
        cqa_ = *cqa, cqb_ = *cqb;
        auto qa = da_.create_qp(now_, conn_a_, {cqa_, cqa_});
        auto qb = db_.create_qp(now_, conn_b_, {cqb_, cqb_});
        auto src = da_.reg_mr(load_.src, 0);
        auto dst = db_.reg_mr(load_.dst, rdma::kAccessLocalWrite | rdma::kAccessRemoteWrite);
        if (!qa || !qb || !src || !dst) return false;
        qa_ = *qa, qb_ = *qb, load_.mr_src = *src, load_.mr_dst = *dst;
        return true;
    }

    RdmaLoad load_;
    Core a_;
    Core b_;
    rdma::Device da_;
    rdma::Device db_;
    Instant now_{};
    ConnHandle conn_a_, conn_b_;
    rdma::CqHandle cqa_, cqb_;
    rdma::QpHandle qa_, qb_;
    bool ok_ = false;
};

// siw's way in userspace: the same engine, each queue pair's link a kernel
// TCP socket on loopback (MSS 1460, non-blocking), with a userspace send
// and receive buffer per end like the stream's.
class SocketLinks final : public rdma::Links {
public:
    static constexpr std::size_t kBuffer = 256 * 1024;

    explicit SocketLinks(int fd) : fd_(fd), tx_(kBuffer), rx_(kBuffer) {}

    std::size_t send_space(rdma::LinkId) override { return kBuffer - tx_len_; }
    bool send_record(rdma::LinkId, wire::Bytes record) override {
        if (record.size() > kBuffer - tx_len_) return false;
        std::memcpy(tx_.data() + tx_len_, record.data(), record.size());
        tx_len_ += record.size();
        return true;
    }
    std::size_t readable(rdma::LinkId) override { return rx_len_ - rx_off_; }
    wire::Bytes peek(rdma::LinkId) override {
        return wire::Bytes(rx_.data() + rx_off_, rx_len_ - rx_off_);
    }
    void consume(rdma::LinkId, std::size_t n) override { rx_off_ += n; }
    void close(rdma::LinkId, bool) override { closed_ = true; }

    // Moves bytes between the buffers and the socket; false on a socket error.
    // returns through `wrote` / `read` whether space opened or bytes came.
    bool pump(bool& wrote, bool& read) {
        wrote = read = false;
        if (tx_len_ > 0) {
            ssize_t n = ::send(fd_, tx_.data(), tx_len_, MSG_DONTWAIT);
            if (n < 0 && errno != EAGAIN) return false;
            if (n > 0) {
                std::memmove(tx_.data(), tx_.data() + n, tx_len_ - static_cast<std::size_t>(n));
                tx_len_ -= static_cast<std::size_t>(n);
                wrote = true;
            }
        }
        if (rx_off_ > 0) {
            std::memmove(rx_.data(), rx_.data() + rx_off_, rx_len_ - rx_off_);
            rx_len_ -= rx_off_;
            rx_off_ = 0;
        }
        if (rx_len_ < kBuffer) {
            ssize_t n = ::recv(fd_, rx_.data() + rx_len_, kBuffer - rx_len_, MSG_DONTWAIT);
            if (n < 0 && errno != EAGAIN) return false;
            if (n > 0) rx_len_ += static_cast<std::size_t>(n), read = true;
        }
        return !closed_;
    }

private:
    int fd_;
    std::vector<std::byte> tx_;
    std::size_t tx_len_ = 0;
    std::vector<std::byte> rx_;
    std::size_t rx_off_ = 0;
    std::size_t rx_len_ = 0;
    bool closed_ = false;
};

class RdmaSocketPair {
public:
    RdmaSocketPair(std::size_t message, bool crc) : load_(message) { ok_ = open() && setup(crc); }
    ~RdmaSocketPair() {
        ea_.reset(), eb_.reset(), la_.reset(), lb_.reset();
        for (int fd : {listen_fd_, fa_, fb_})
            if (fd >= 0) ::close(fd);
    }
    RdmaSocketPair(const RdmaSocketPair&) = delete;
    RdmaSocketPair& operator=(const RdmaSocketPair&) = delete;
    bool ok() const { return ok_; }

    RdmaSample run(RdmaOp op, std::uint64_t max_bytes, double max_seconds) {
        return run_rdma(*this, load_, op, max_bytes, max_seconds);
    }

    bool post(RdmaOp op) { return ea_->post_send(qa_, load_.send_wr(op)).has_value(); }
    bool repost_recv() { return eb_->post_recv(qb_, load_.recv_wr()).has_value(); }
    bool progress() {
        return step(*la_, *ea_, qa_) && step(*lb_, *eb_, qb_) && !ea_->poll_qp_event() &&
               !eb_->poll_qp_event();
    }
    std::size_t poll_sender(std::span<rdma::WorkCompletion> out) { return ea_->poll_cq(cqa_, out); }
    std::size_t poll_receiver(std::span<rdma::WorkCompletion> out) {
        return eb_->poll_cq(cqb_, out);
    }

private:
    static bool step(SocketLinks& l, rdma::Engine& e, rdma::QpHandle qp) {
        bool wrote = false, read = false;
        if (!l.pump(wrote, read)) return false;
        if (read) e.on_readable(qp);
        if (wrote) e.on_writable(qp);
        return true;
    }

    bool open() {
        if (!open_loopback_pair(listen_fd_, fa_, fb_)) return false;
        int one = 1;
        for (int fd : {fa_, fb_}) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return true;
    }

    bool setup(bool crc) {
        la_ = std::make_unique<SocketLinks>(fa_);
        lb_ = std::make_unique<SocketLinks>(fb_);
        ea_ = std::make_unique<rdma::Engine>(*la_, rdma::DeviceConfig{});
        eb_ = std::make_unique<rdma::Engine>(*lb_, rdma::DeviceConfig{});
        auto cqa = ea_->create_cq(256);
        auto cqb = eb_->create_cq(256);
        if (!cqa || !cqb) return false;
        cqa_ = *cqa, cqb_ = *cqb;
        rdma::QpParams pa;
        pa.link = {1};
        pa.attr = {cqa_, cqa_};
        pa.crc = crc;
        pa.max_fpdu = 1448;
        rdma::QpParams pb = pa;
        pb.link = {2};
        pb.attr = {cqb_, cqb_};
        auto qa = ea_->create_qp(pa);
        auto qb = eb_->create_qp(pb);
        auto src = ea_->reg_mr(load_.src, 0);
        auto dst = eb_->reg_mr(load_.dst, rdma::kAccessLocalWrite | rdma::kAccessRemoteWrite);
        if (!qa || !qb || !src || !dst) return false;
        qa_ = *qa, qb_ = *qb, load_.mr_src = *src, load_.mr_dst = *dst;
        return true;
    }

    RdmaLoad load_;
    int listen_fd_ = -1;
    int fa_ = -1;
    int fb_ = -1;
    std::unique_ptr<SocketLinks> la_, lb_;
    std::unique_ptr<rdma::Engine> ea_, eb_;
    rdma::CqHandle cqa_, cqb_;
    rdma::QpHandle qa_, qb_;
    bool ok_ = false;
};

}  // namespace iwcm::bench
