// The rping exchange over iwcm::rdma::Device. Read first: tools/rping.hpp.
#include "tools/rping.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "iwcm/assert.hpp"
#include "tools/commands.hpp"

namespace iwcm::tools {

namespace {

// rping's queue sizes: RPING_SQ_DEPTH sends, two receives, a CQ for both.
constexpr std::uint32_t kSendDepth = 16;
constexpr std::uint32_t kRecvDepth = 2;
constexpr std::uint32_t kCqDepth = 2 * kSendDepth;
// The letters of the pattern: 'A' to 'z', as rping's 65 to 122.
constexpr unsigned kFirstLetter = 65;
constexpr unsigned kLastLetter = 122;
constexpr unsigned kLetters = kLastLetter - kFirstLetter + 1;

// wr_id values: which buffer or operation a completion is for.
enum WrId : std::uint64_t { kWrRecv = 1, kWrSendInfo, kWrRead, kWrWrite };

void put_be(std::byte* out, std::uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) {
        out[i] = static_cast<std::byte>(v & 0xFF);
        v >>= 8;
    }
}

std::uint64_t get_be(const std::byte* in, int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | std::to_integer<std::uint64_t>(in[i]);
    return v;
}

std::string byte_words(std::byte b) {
    const auto u = std::to_integer<unsigned>(b);
    char buf[24];
    if (u >= 0x20 && u < 0x7F)
        std::snprintf(buf, sizeof buf, "0x%02x '%c'", u, static_cast<char>(u));
    else
        std::snprintf(buf, sizeof buf, "0x%02x", u);
    return buf;
}

// The first byte where got differs from want, as the one-line reason.
std::string first_difference(std::span<const std::byte> want, std::span<const std::byte> got,
                             std::uint64_t iteration, const char* what) {
    IWCM_ASSERT(want.size() == got.size());
    const auto at = std::mismatch(want.begin(), want.end(), got.begin());
    IWCM_ASSERT(at.first != want.end());
    const auto offset = static_cast<std::size_t>(at.first - want.begin());
    return std::string("verify failed in iteration ") + std::to_string(iteration) + ": " + what +
           " differs at offset " + std::to_string(offset) + " (expected " + byte_words(*at.first) +
           ", got " + byte_words(*at.second) + ")";
}

}  // namespace

std::array<std::byte, RpingInfo::kWireSize> RpingInfo::encode() const {
    std::array<std::byte, kWireSize> out{};
    put_be(out.data(), buf, 8);
    put_be(out.data() + 8, rkey, 4);
    put_be(out.data() + 12, size, 4);
    return out;
}

RpingInfo RpingInfo::decode(std::span<const std::byte, kWireSize> bytes) {
    RpingInfo i;
    i.buf = get_be(bytes.data(), 8);
    i.rkey = static_cast<std::uint32_t>(get_be(bytes.data() + 8, 4));
    i.size = static_cast<std::uint32_t>(get_be(bytes.data() + 12, 4));
    return i;
}

void rping_fill(std::span<std::byte> out, std::uint32_t ping) {
    IWCM_ASSERT(out.size() >= kRpingMinSize);
    char head[32];
    const int n = std::snprintf(head, sizeof head, "rdma-ping-%u: ", ping);
    IWCM_ASSERT(n > 0 && static_cast<std::size_t>(n) < out.size());
    std::memcpy(out.data(), head, static_cast<std::size_t>(n));
    unsigned c = kFirstLetter + ping % kLetters;
    for (std::size_t i = static_cast<std::size_t>(n); i < out.size(); ++i) {
        out[i] = static_cast<std::byte>(c);
        c = c == kLastLetter ? kFirstLetter : c + 1;
    }
    out.back() = std::byte{0};
}

std::string rping_text(std::span<const std::byte> buf) {
    const auto end = std::find(buf.begin(), buf.end(), std::byte{0});
    return {reinterpret_cast<const char*>(buf.data()), static_cast<std::size_t>(end - buf.begin())};
}

struct Rping::Buffer {
    std::vector<std::byte> mem;
    rdma::MemoryRegion mr;
};

Rping::Rping(rdma::Device& dev, const RpingConfig& config) : dev_(dev), cfg_(config) {
    IWCM_ASSERT(cfg_.size >= kRpingMinSize && cfg_.size <= kRpingMaxSize);
}

Rping::~Rping() {
    for (auto* b : {&recv_, &send_, &rdma_, &start_})
        if (*b) (void)dev_.dereg_mr((*b)->mr.handle);
    if (cq_ && !qp_) (void)dev_.destroy_cq(*cq_);
}

bool Rping::register_buffers() {
    const auto make = [this](std::unique_ptr<Buffer>& b, std::size_t n, std::uint32_t access) {
        b = std::make_unique<Buffer>();
        b->mem.assign(n, std::byte{0});
        auto mr = dev_.reg_mr(b->mem, access);
        if (!mr) {
            fail(exit_codes::kSetup, "reg_mr: " + std::string(rdma::to_string(mr.error())));
            b.reset();
            return false;
        }
        b->mr = *mr;
        return true;
    };
    const std::uint32_t rw =
        rdma::kAccessLocalWrite | rdma::kAccessRemoteRead | rdma::kAccessRemoteWrite;
    return make(recv_, RpingInfo::kWireSize, rdma::kAccessLocalWrite) &&
           make(send_, RpingInfo::kWireSize, 0) && make(rdma_, cfg_.size, rw) &&
           (cfg_.server || make(start_, cfg_.size, rw));
}

bool Rping::start(Instant now, ConnHandle conn) {
    IWCM_ASSERT(phase_ == Phase::kIdle);
    phase_ = Phase::kRunning;
    last_progress_ = now;
    auto cq = dev_.create_cq(kCqDepth);
    if (!cq) {
        fail(exit_codes::kSetup, "create_cq: " + std::string(rdma::to_string(cq.error())));
        return false;
    }
    cq_ = *cq;
    if (!register_buffers()) return false;
    rdma::QpAttr attr;
    attr.send_cq = *cq_;
    attr.recv_cq = *cq_;
    attr.max_send_wr = kSendDepth;
    attr.max_recv_wr = kRecvDepth;
    attr.max_sge = 1;
    auto qp = dev_.create_qp(now, conn, attr);
    if (!qp) {
        fail(exit_codes::kError, "create_qp: " + std::string(rdma::to_string(qp.error())));
        return false;
    }
    qp_ = *qp;
    if (!post_recv(now)) return false;
    if (cfg_.server) {
        step_ = Step::kWaitStartInfo;
    } else if (cfg_.settle > Duration::zero()) {
        step_ = Step::kSettle;
        first_send_at_ = now + cfg_.settle;
    } else {
        begin_client_iteration(now);
    }
    return running();
}

bool Rping::post_recv(Instant now) {
    IWCM_ASSERT(qp_ && recv_);
    const rdma::Sge sge{recv_->mr.addr, RpingInfo::kWireSize, recv_->mr.lkey};
    rdma::RecvWr wr;
    wr.wr_id = kWrRecv;
    wr.sg_list = std::span(&sge, 1);
    if (auto r = dev_.post_recv(now, *qp_, wr); !r) {
        fail(exit_codes::kError, "post_recv: " + std::string(rdma::to_string(r.error())));
        return false;
    }
    return true;
}

bool Rping::post_send_info(Instant now, const Buffer& b, std::uint32_t size) {
    IWCM_ASSERT(qp_ && send_);
    if (!cfg_.server) {
        const auto bytes = RpingInfo{b.mr.addr, b.mr.rkey, size}.encode();
        std::copy(bytes.begin(), bytes.end(), send_->mem.begin());
    }
    const rdma::Sge sge{send_->mr.addr, RpingInfo::kWireSize, send_->mr.lkey};
    rdma::SendWr wr;
    wr.wr_id = kWrSendInfo;
    wr.opcode = rdma::WrOpcode::kSend;
    wr.sg_list = std::span(&sge, 1);
    if (auto r = dev_.post_send(now, *qp_, wr); !r) {
        fail(exit_codes::kError, "post_send (Send): " + std::string(rdma::to_string(r.error())));
        return false;
    }
    return true;
}

bool Rping::post_rdma(Instant now, rdma::WrOpcode op, std::uint32_t length) {
    IWCM_ASSERT(qp_ && rdma_ && length <= rdma_->mem.size());
    const rdma::Sge sge{rdma_->mr.addr, length, rdma_->mr.lkey};
    rdma::SendWr wr;
    const bool read = op == rdma::WrOpcode::kRdmaRead;
    wr.wr_id = read ? kWrRead : kWrWrite;
    wr.opcode = op;
    wr.sg_list = std::span(&sge, 1);
    wr.remote_addr = remote_.buf;
    wr.rkey = remote_.rkey;
    if (auto r = dev_.post_send(now, *qp_, wr); !r) {
        fail(exit_codes::kError, std::string("post_send (") + (read ? "RDMA Read" : "RDMA Write") +
                                     "): " + std::string(rdma::to_string(r.error())));
        return false;
    }
    return true;
}

void Rping::poll(Instant now) {
    if (first_send_at_ && now >= *first_send_at_ && running()) {
        first_send_at_.reset();
        last_progress_ = now;
        begin_client_iteration(now);
    }
    if (!cq_) return;
    std::array<rdma::WorkCompletion, 16> wcs;
    for (;;) {
        const std::size_t n = dev_.poll_cq(*cq_, wcs);
        IWCM_ASSERT(n <= wcs.size());
        for (std::size_t i = 0; i < n; ++i) on_completion(now, wcs[i]);
        if (n < wcs.size()) return;
    }
}

void Rping::on_completion(Instant now, const rdma::WorkCompletion& wc) {
    // Once done or failed, nothing more is answered (a client that goes on
    // past the server's -C gets no Read, and its QP's end is the story).
    if (phase_ != Phase::kRunning) return;
    if (wc.status == rdma::WcStatus::kWrFlushErr) return;  // the QP's end is a QpEvent
    if (wc.status != rdma::WcStatus::kSuccess) {
        fail(exit_codes::kError, std::string(rdma::to_string(wc.opcode)) +
                                     " completion failed: " + std::string(to_string(wc.status)) +
                                     " in iteration " + std::to_string(done_));
        return;
    }
    switch (wc.opcode) {
        case rdma::WcOpcode::kSend: return;
        case rdma::WcOpcode::kRdmaRead: on_read_done(now, wc.byte_len); return;
        case rdma::WcOpcode::kRdmaWrite: on_write_done(now); return;
        case rdma::WcOpcode::kRecv: on_recv(now, wc); return;
        case rdma::WcOpcode::kLocalInvalidate:  // rping posts neither
        case rdma::WcOpcode::kBindMw: return;
    }
    IWCM_ASSERT(false && "unknown completion opcode");
}

void Rping::on_recv(Instant now, const rdma::WorkCompletion& wc) {
    if (wc.byte_len != RpingInfo::kWireSize) {
        fail(exit_codes::kError, "received bogus data, size " + std::to_string(wc.byte_len) +
                                     " (expected 16) in iteration " + std::to_string(done_));
        return;
    }
    const auto info = RpingInfo::decode(
        std::span<const std::byte, RpingInfo::kWireSize>(recv_->mem.data(), RpingInfo::kWireSize));
    if (!post_recv(now)) return;
    last_progress_ = now;
    if (cfg_.server)
        on_recv_server(now, info);
    else
        on_recv_client(now);
}

void Rping::on_recv_server(Instant now, const RpingInfo& info) {
    remote_ = info;
    if (step_ == Step::kWaitStartInfo) {
        if (!began_) began_ = now;
        if (info.size == 0 || info.size > cfg_.size) {
            fail(exit_codes::kError, "the client's buffer of " + std::to_string(info.size) +
                                         " bytes does not fit ours (-S " +
                                         std::to_string(cfg_.size) + ")");
            return;
        }
        std::fill(rdma_->mem.begin(), rdma_->mem.end(), std::byte{0});
        if (post_rdma(now, rdma::WrOpcode::kRdmaRead, info.size)) step_ = Step::kReading;
        return;
    }
    if (step_ == Step::kWaitSinkInfo) {
        // rping writes strlen(rdma_buf) + 1: the text and its NUL.
        const std::span<const std::byte> got(rdma_->mem.data(), read_bytes_);
        const auto nul = std::find(got.begin(), got.end(), std::byte{0});
        const auto len = static_cast<std::uint32_t>(
            std::min<std::size_t>(static_cast<std::size_t>(nul - got.begin()) + 1, read_bytes_));
        if (post_rdma(now, rdma::WrOpcode::kRdmaWrite, len)) {
            step_ = Step::kWriting;
            bytes_ += len;
        }
        return;
    }
    fail(exit_codes::kError,
         "an unexpected Send from the client in iteration " + std::to_string(done_));
}

void Rping::on_read_done(Instant now, std::uint32_t bytes) {
    if (step_ != Step::kReading) {
        fail(exit_codes::kError, "an RDMA Read completed out of turn");
        return;
    }
    (void)bytes;  // a Read's byte_len is its length: the one we asked for
    read_bytes_ = remote_.size;
    bytes_ += read_bytes_;
    last_progress_ = now;
    if (cfg_.verify && !verify_server(read_bytes_)) return;
    if (post_send_info(now, *send_, 0)) step_ = Step::kWaitSinkInfo;
}

void Rping::on_write_done(Instant now) {
    if (step_ != Step::kWriting) {
        fail(exit_codes::kError, "an RDMA Write completed out of turn");
        return;
    }
    last_progress_ = now;
    if (!post_send_info(now, *send_, 0)) return;
    step_ = Step::kWaitStartInfo;
    iteration_done(now, rping_text(std::span(rdma_->mem.data(), read_bytes_)));
}

void Rping::begin_client_iteration(Instant now) {
    IWCM_ASSERT(!cfg_.server && start_ && rdma_);
    if (!began_) began_ = now;
    // A sink cleared each time: -V compares only what this iteration wrote.
    std::fill(rdma_->mem.begin(), rdma_->mem.end(), std::byte{0});
    rping_fill(start_->mem, static_cast<std::uint32_t>(done_));
    if (post_send_info(now, *start_, cfg_.size)) step_ = Step::kWaitGoRead;
}

void Rping::on_recv_client(Instant now) {
    if (step_ == Step::kSettle) {
        fail(exit_codes::kError, "a Send from the server before our first one");
        return;
    }
    if (step_ == Step::kWaitGoRead) {
        if (post_send_info(now, *rdma_, cfg_.size)) step_ = Step::kWaitGoWrite;
        return;
    }
    IWCM_ASSERT(step_ == Step::kWaitGoWrite);
    if (cfg_.verify && !verify_client()) return;
    bytes_ += 2 * std::uint64_t{cfg_.size};
    iteration_done(now, rping_text(rdma_->mem));
    if (running()) begin_client_iteration(now);
}

bool Rping::verify_client() {
    if (std::equal(start_->mem.begin(), start_->mem.end(), rdma_->mem.begin())) return true;
    verify_failed_ = true;
    fail(exit_codes::kError,
         first_difference(start_->mem, rdma_->mem, done_, "the data written back"));
    return false;
}

bool Rping::verify_server(std::uint32_t bytes) {
    std::vector<std::byte> want(bytes);
    if (bytes < kRpingMinSize) {
        fail(exit_codes::kError, "the client's buffer of " + std::to_string(bytes) +
                                     " bytes is below rping's minimum (-V)");
        return false;
    }
    rping_fill(want, static_cast<std::uint32_t>(done_));
    const std::span<const std::byte> got(rdma_->mem.data(), bytes);
    if (std::equal(want.begin(), want.end(), got.begin())) return true;
    verify_failed_ = true;
    fail(exit_codes::kError, first_difference(want, got, done_, "the data read"));
    return false;
}

void Rping::iteration_done(Instant now, const std::string& data) {
    last_progress_ = now;
    if (cfg_.verbose) lines_.push_back({done_, data});
    ++done_;
    if (last_ || (cfg_.count != 0 && done_ >= cfg_.count)) phase_ = Phase::kDone;
}

void Rping::finish_iteration() {
    IWCM_ASSERT(!cfg_.server);
    if (!running()) return;
    last_ = true;
    // Still settling: no Send has gone out, so no iteration is in flight.
    if (step_ == Step::kSettle) {
        first_send_at_.reset();
        phase_ = Phase::kDone;
    }
}

std::optional<RpingLine> Rping::take_line() {
    if (lines_.empty()) return std::nullopt;
    RpingLine l = std::move(lines_.front());
    lines_.pop_front();
    return l;
}

bool Rping::between_iterations() const {
    return cfg_.server && step_ == Step::kWaitStartInfo;
}

void Rping::on_qp_event(const rdma::QpEvent& ev) {
    const std::string at = " in iteration " + std::to_string(done_);
    switch (ev.type) {
        case rdma::QpEventType::kTerminateReceived:
            fail(exit_codes::kError, "TERMINATE received" + at + ": " + rdma::describe(ev.term));
            return;
        case rdma::QpEventType::kTerminateSent:
            fail(exit_codes::kError, "TERMINATE sent" + at + ": " + rdma::describe(ev.term));
            return;
        case rdma::QpEventType::kTerminateUnsent:
            fail(exit_codes::kError,
                 "TERMINATE not sent (the peer had closed)" + at + ": " + rdma::describe(ev.term));
            return;
        case rdma::QpEventType::kCqError:
            fail(exit_codes::kError, "completion queue overflow" + at);
            return;
        case rdma::QpEventType::kSrqLimit: return;  // rping makes no shared receive queue
        case rdma::QpEventType::kDisconnected: break;
    }
    if (phase_ == Phase::kDone || phase_ == Phase::kFailed) return;
    if (ev.status == 0 && cfg_.count == 0 && between_iterations()) {
        phase_ = Phase::kDone;  // -s without -C: the client closed between iterations
        return;
    }
    const std::string after = " after " + std::to_string(done_) +
                              (cfg_.count ? " of " + std::to_string(cfg_.count) : "") +
                              " iterations";
    if (ev.status == -ECONNRESET)
        fail(exit_codes::kReset, "connection reset by peer" + after);
    else if (ev.status != 0)
        fail(exit_codes::kError,
             std::string("connection ended: ") + std::strerror(-ev.status) + after);
    else
        fail(exit_codes::kError, "connection closed by peer" + after);
}

void Rping::stop(Instant now) {
    if (qp_) (void)dev_.destroy_qp(now, *qp_);
    qp_.reset();
}

void Rping::fail(int code, std::string why) {
    if (phase_ == Phase::kFailed) return;
    phase_ = Phase::kFailed;
    first_send_at_.reset();
    code_ = code;
    reason_ = std::move(why);
}

}  // namespace iwcm::tools
