// The in-process twins of perftest's runs. Read first: tools/bench_native.hpp.
#include "tools/bench_native.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "iwcm/assert.hpp"
#include "iwcm/runtime.hpp"
#include "tools/bench_clock.hpp"

namespace iwcm::tools {

namespace {

// perftest's defaults: 128 sends in flight (tx_depth), 512 receives posted (rx_depth).
constexpr std::uint32_t kSendDepth = 128;
constexpr std::uint32_t kRecvDepth = 512;
constexpr std::uint32_t kInfoSize = 16;
// The longest a run may take, connection included.
constexpr double kRunLimitS = 300;

// wr_id values. Receives: the 16-byte info (and the end of a Write run), the
// data of Sends. Sends: our info, a data message, the end of the run.
enum WrId : std::uint64_t { kWrInfo = 1, kWrData, kWrEnd };

struct Info {
    std::uint64_t addr = 0;
    std::uint32_t rkey = 0;
    std::uint32_t size = 0;
};
static_assert(sizeof(Info) == kInfoSize);

std::string why(rdma::VerbsError e) {
    return std::string(rdma::to_string(e));
}

// One side: a Runtime of its own, the test's state machine over its Device,
// and the thread's loop. The state machine runs under the runtime's lock
// (inside call() or a handler callback); the loop reads only the atomics.
class Side final : public RuntimeHandler {
public:
    Side(bool server, NativeTest test, std::size_t size, std::uint64_t iters)
        : server_(server), test_(test), size_(static_cast<std::uint32_t>(size)), iters_(iters) {
        IWCM_ASSERT(size > 0 && size <= (1u << 30) && iters > 0);
    }

    // The thread's whole run, in its namespace; false with the reason in error().
    bool run(const NativePeers& p, bool crc, std::atomic<bool>& listening);

    const std::string& error() const { return error_; }
    double cpu_s() const { return cpu_s_; }
    double seconds() const { return seconds_; }
    const std::vector<double>& rtt_us() const { return rtt_us_; }

    void on_event(Session& s, const Event& e) override;
    void on_qp_event(Session&, const rdma::QpEvent& e) override {
        if (qp_ && e.qp == *qp_ && !done_.load())
            fail("the QP ended: " + std::string(rdma::to_string(e.type)));
    }
    void on_completion(Session&, rdma::CqHandle, bool) override {
        ready_.store(true, std::memory_order_release);
    }
    void on_resolved(Session& s, std::uint64_t, std::optional<MacAddr> mac,
                     const std::string& error) override;

private:
    struct Buffer {
        std::vector<std::byte> mem;
        rdma::MemoryRegion mr;
    };

    bool make_buffer(Session& s, Buffer& b, std::size_t n, std::uint32_t access);
    void start(Session& s, ConnHandle conn);
    void poll(Session& s);
    void on_wc(Session& s, const rdma::WorkCompletion& wc);
    void on_info(Session& s);
    bool post_recv(Session& s, WrId id, const Buffer& b, std::uint32_t len);
    bool post(Session& s, WrId id, rdma::WrOpcode op, const Buffer& b, std::uint32_t len);
    void fill_window(Session& s);
    // Write latency: our counter in the last 8 bytes of the peer's buffer.
    bool ping(Session& s, std::uint64_t n);
    std::uint64_t arrived() const;  // the counter the peer last wrote into ours
    void on_arrival(Session& s, std::uint64_t n);
    void finish() { done_.store(true); }
    void fail(std::string why) {
        if (error_.empty()) error_ = std::move(why);
        finish();
    }

    const bool server_;
    const NativeTest test_;
    const std::uint32_t size_;
    const std::uint64_t iters_;
    NativePeers peers_;
    std::atomic<bool> ready_{false};  // a completion waits
    std::atomic<bool> done_{false};   // the run is over (or failed: error_)
    std::atomic<bool> started_{false};
    std::string error_;
    std::optional<ConnHandle> conn_;
    std::optional<rdma::CqHandle> cq_;
    std::optional<rdma::QpHandle> qp_;
    Buffer data_;       // the peer's Writes land here; the server's receives
    Buffer src_;        // what our Writes and Sends carry
    Buffer info_recv_;  // the peer's Info (and the end of a Write run)
    Buffer info_send_;
    Info remote_;
    bool have_remote_ = false;
    std::uint64_t posted_ = 0;
    std::uint64_t completed_ = 0;
    std::uint64_t received_ = 0;
    std::uint64_t pong_ = 0;  // latency: the last counter we wrote
    std::uint64_t seen_ = 0;  // latency: the last counter the peer wrote
    SteadyClock::time_point began_{};
    SteadyClock::time_point ping_at_{};
    std::vector<double> rtt_us_;
    double seconds_ = 0;
    double cpu_s_ = 0;
};

bool Side::make_buffer(Session& s, Buffer& b, std::size_t n, std::uint32_t access) {
    b.mem.assign(n, std::byte{0});
    auto mr = s.device().reg_mr(b.mem, access);
    if (!mr) {
        fail("reg_mr: " + why(mr.error()));
        return false;
    }
    b.mr = *mr;
    return true;
}

void Side::start(Session& s, ConnHandle conn) {
    IWCM_ASSERT(!qp_ && conn_ && *conn_ == conn);
    rdma::Device& dev = s.device();
    auto cq = dev.create_cq(kSendDepth + kRecvDepth + 8);
    if (!cq) return fail("create_cq: " + why(cq.error()));
    cq_ = *cq;
    const std::uint32_t rw =
        rdma::kAccessLocalWrite | rdma::kAccessRemoteWrite | rdma::kAccessRemoteRead;
    // The data buffer ends in an aligned 8-byte word: the latency test's counter.
    const std::size_t data_len = (size_ + 7u) & ~std::size_t{7};
    if (!make_buffer(s, data_, data_len, rw) || !make_buffer(s, src_, data_len, 0) ||
        !make_buffer(s, info_recv_, kInfoSize, rdma::kAccessLocalWrite) ||
        !make_buffer(s, info_send_, kInfoSize, 0))
        return;
    rdma::QpAttr attr;
    attr.send_cq = *cq_;
    attr.recv_cq = *cq_;
    attr.max_send_wr = kSendDepth + 1;
    attr.max_recv_wr = kRecvDepth + 1;
    attr.max_sge = 1;
    auto qp = dev.create_qp(s.now(), conn, attr);
    if (!qp) return fail("create_qp: " + why(qp.error()));
    qp_ = *qp;
    if (!post_recv(s, kWrInfo, info_recv_, kInfoSize)) return;
    if (server_ && test_ == NativeTest::kSend)
        for (std::uint32_t i = 0; i < kRecvDepth; ++i)
            if (!post_recv(s, kWrData, data_, size_)) return;
    // The client speaks first: the server's receives are posted before its
    // connection is established, the client's only now.
    if (!server_) {
        const Info mine{data_.mr.addr, data_.mr.rkey, size_};
        std::memcpy(info_send_.mem.data(), &mine, kInfoSize);
        (void)post(s, kWrInfo, rdma::WrOpcode::kSend, info_send_, kInfoSize);
    }
    started_.store(true);
}

bool Side::post_recv(Session& s, WrId id, const Buffer& b, std::uint32_t len) {
    IWCM_ASSERT(qp_ && len <= b.mem.size());
    const rdma::Sge sge{b.mr.addr, len, b.mr.lkey};
    rdma::RecvWr wr;
    wr.wr_id = id;
    wr.sg_list = std::span(&sge, 1);
    if (auto r = s.device().post_recv(s.now(), *qp_, wr); !r) {
        fail("post_recv: " + why(r.error()));
        return false;
    }
    return true;
}

bool Side::post(Session& s, WrId id, rdma::WrOpcode op, const Buffer& b, std::uint32_t len) {
    IWCM_ASSERT(qp_ && len <= b.mem.size());
    const rdma::Sge sge{b.mr.addr, len, b.mr.lkey};
    rdma::SendWr wr;
    wr.wr_id = id;
    wr.opcode = op;
    wr.sg_list = std::span(&sge, 1);
    if (op == rdma::WrOpcode::kRdmaWrite) {
        IWCM_ASSERT(have_remote_);
        wr.remote_addr = remote_.addr;
        wr.rkey = remote_.rkey;
    }
    if (auto r = s.device().post_send(s.now(), *qp_, wr); !r) {
        fail("post_send: " + why(r.error()));
        return false;
    }
    return true;
}

void Side::poll(Session& s) {
    if (!cq_ || done_.load()) return;
    std::array<rdma::WorkCompletion, 32> wcs;
    for (;;) {
        const std::size_t n = s.device().poll_cq(*cq_, wcs);
        IWCM_ASSERT(n <= wcs.size());
        for (std::size_t i = 0; i < n && !done_.load(); ++i) on_wc(s, wcs[i]);
        if (n < wcs.size() || done_.load()) return;
    }
}

void Side::on_wc(Session& s, const rdma::WorkCompletion& wc) {
    if (wc.status != rdma::WcStatus::kSuccess)
        return fail(std::string(rdma::to_string(wc.opcode)) +
                    " completion failed: " + std::string(rdma::to_string(wc.status)));
    const bool recv = wc.opcode == rdma::WcOpcode::kRecv;
    if (recv && wc.wr_id == kWrInfo) return on_info(s);
    if (recv && wc.wr_id == kWrData) {
        // A Send run's server: every message counted, its receive posted again
        // while more are to come.
        ++received_;
        if (received_ == iters_) {
            seconds_ = seconds_since(began_);
            return finish();
        }
        if (received_ + kRecvDepth <= iters_) (void)post_recv(s, kWrData, data_, size_);
        return;
    }
    if (recv) return fail("a receive of an unknown kind");
    if (wc.wr_id == kWrEnd) return finish();
    if (wc.wr_id != kWrData) return;  // our info went out
    if (test_ == NativeTest::kWriteLatency) return;
    ++completed_;
    if (completed_ < iters_) return fill_window(s);
    seconds_ = seconds_since(began_);
    if (test_ == NativeTest::kSend) return finish();
    (void)post(s, kWrEnd, rdma::WrOpcode::kSend, info_send_, kInfoSize);
}

// The peer's Info, or on a Write run's server the client's end of the run.
void Side::on_info(Session& s) {
    if (have_remote_) {
        IWCM_ASSERT(server_);
        if (test_ != NativeTest::kWrite) return fail("an Info after the first");
        seconds_ = seconds_since(began_);
        return finish();
    }
    std::memcpy(&remote_, info_recv_.mem.data(), kInfoSize);
    have_remote_ = true;
    if (remote_.size != size_)
        return fail("the peer's size " + std::to_string(remote_.size) + " is not ours");
    began_ = SteadyClock::now();
    if (server_) {
        if (test_ == NativeTest::kWrite && !post_recv(s, kWrInfo, info_recv_, kInfoSize)) return;
        const Info mine{data_.mr.addr, data_.mr.rkey, size_};
        std::memcpy(info_send_.mem.data(), &mine, kInfoSize);
        (void)post(s, kWrInfo, rdma::WrOpcode::kSend, info_send_, kInfoSize);
        return;
    }
    if (test_ == NativeTest::kWriteLatency) {
        rtt_us_.reserve(iters_);
        (void)ping(s, 1);
        return;
    }
    fill_window(s);
}

void Side::fill_window(Session& s) {
    IWCM_ASSERT(!server_ && have_remote_ && completed_ <= posted_);
    const auto op =
        test_ == NativeTest::kWrite ? rdma::WrOpcode::kRdmaWrite : rdma::WrOpcode::kSend;
    while (posted_ < iters_ && posted_ - completed_ < kSendDepth) {
        if (!post(s, kWrData, op, src_, size_)) return;
        ++posted_;
    }
}

bool Side::ping(Session& s, std::uint64_t n) {
    IWCM_ASSERT(have_remote_ && n > pong_);
    std::memcpy(src_.mem.data() + src_.mem.size() - 8, &n, 8);
    pong_ = n;
    if (!server_) ping_at_ = SteadyClock::now();
    // Only the last 8 bytes change; the Write carries the whole message, as perftest's.
    return post(s, kWrData, rdma::WrOpcode::kRdmaWrite, src_,
                static_cast<std::uint32_t>(src_.mem.size()));
}

std::uint64_t Side::arrived() const {
    // The peer's Write lands in this word while we read it: an atomic read of
    // the aligned word, as perftest's volatile one.
    auto* word = const_cast<std::uint64_t*>(
        reinterpret_cast<const std::uint64_t*>(data_.mem.data() + data_.mem.size() - 8));
    return std::atomic_ref<std::uint64_t>(*word).load(std::memory_order_acquire);
}

void Side::on_arrival(Session& s, std::uint64_t n) {
    IWCM_ASSERT(test_ == NativeTest::kWriteLatency && n == seen_ + 1);
    IWCM_ASSERT(n == pong_ + (server_ ? 1 : 0));
    seen_ = n;
    if (server_) {
        (void)ping(s, n);
        if (n == iters_) finish();
        return;
    }
    rtt_us_.push_back(seconds_since(ping_at_) * 1e6);
    if (n == iters_) {
        seconds_ = seconds_since(began_);
        return finish();
    }
    (void)ping(s, n + 1);
}

void Side::on_event(Session& s, const Event& e) {
    if (e.type == EventType::kConnectRequest) {
        if (conn_) {
            (void)s.core().reject(s.now(), e.conn, {});
            return;
        }
        conn_ = e.conn;
        AcceptParams ap;
        if (auto r = s.core().accept(s.now(), e.conn, ap); !r)
            fail("accept: " + std::string(to_string(r.error())));
        return;
    }
    if (!conn_ || e.conn != *conn_) return;
    if (e.type == EventType::kEstablished) return start(s, e.conn);
    if (e.terminal() && !done_.load())
        fail("the connection ended (" + std::string(to_string(e.type)) + ", " +
             std::to_string(e.status) + ")");
}

void Side::on_resolved(Session& s, std::uint64_t, std::optional<MacAddr> mac,
                       const std::string& error) {
    if (!mac) return fail("no MAC for " + peers_.server_addr + ": " + error);
    ConnectParams cp;
    cp.remote = {*IpAddr::parse(peers_.server_addr), peers_.port};
    cp.remote_mac = *mac;
    auto c = s.connect(cp);
    if (!c) return fail("connect: " + c.error());
    conn_ = *c;
}

bool Side::run(const NativePeers& p, bool crc, std::atomic<bool>& listening) {
    peers_ = p;
    const double cpu0 = thread_cpu_s();
    RuntimeConfig cfg;
    cfg.dev = server_ ? p.dev_server : p.dev_client;
    cfg.xdp_mode = "native";
    cfg.crc = crc;
    auto rt = Runtime::start(cfg, this);
    if (!rt) {
        fail("runtime on " + cfg.dev + ": " + rt.error());
        return false;
    }
    (*rt)->set_close_limit(std::chrono::seconds(1));
    const auto limit = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                                std::chrono::duration<double>(kRunLimitS));
    const auto peer = IpAddr::parse(p.server_addr);
    IWCM_ASSERT(peer.has_value());
    if (server_) {
        auto l = (*rt)->call([&](Session& s) {
            ListenParams lp;
            lp.local = {s.info().addr, p.port};
            return s.listen(lp);
        });
        if (!l) fail("listen: " + l.error());
        listening.store(true);
    } else {
        while (!listening.load() && SteadyClock::now() < limit) std::this_thread::yield();
        auto r =
            (*rt)->call([&](Session& s) { return s.resolve(*peer, 1, std::chrono::seconds(5)); });
        if (!r) fail("resolve " + p.server_addr + ": " + r.error());
    }
    while (!done_.load()) {
        if (SteadyClock::now() > limit) {
            fail("no end within " + std::to_string(static_cast<int>(kRunLimitS)) + " s");
            break;
        }
        bool work = ready_.exchange(false, std::memory_order_acq_rel);
        std::uint64_t got = 0;
        if (test_ == NativeTest::kWriteLatency && started_.load()) {
            got = arrived();
            work = work || got > seen_;
        }
        if (!work) {
            (void)(*rt)->poll_inline();
            continue;
        }
        (*rt)->call([&](Session& s) {
            poll(s);
            if (got > seen_ && !done_.load()) on_arrival(s, got);
        });
    }
    cpu_s_ =
        thread_cpu_s() - cpu0 + std::chrono::duration<double>((*rt)->progress_cpu_time()).count();
    rt->reset();
    return error_.empty();
}

}  // namespace

bool native_run(const NativePeers& p, NativeTest test, std::size_t size, std::uint64_t iters,
                bool crc, WireFlow& flow, WireLatency& latency, std::string& error) {
    Side server(true, test, size, iters);
    Side client(false, test, size, iters);
    std::atomic<bool> listening{false};
    bool ok[2] = {false, false};
    bool entered[2] = {false, false};
    auto side = [&](Side& s, const std::string& ns, int i) {
        entered[i] = enter_netns(ns);
        if (!entered[i]) {
            listening.store(true);  // a client waiting for this server goes on, and fails
            return;
        }
        ok[i] = s.run(p, crc, listening);
    };
    std::thread ts([&] { side(server, p.ns_server, 0); });
    std::thread tc([&] { side(client, p.ns_client, 1); });
    ts.join();
    tc.join();
    if (!entered[0] || !entered[1]) {
        error = "in-process run: could not enter a namespace";
        return false;
    }
    if (!ok[0] || !ok[1]) {
        error = "in-process run: " +
                (ok[0] ? "client: " + client.error() : "server: " + server.error());
        return false;
    }
    if (test == NativeTest::kWriteLatency) {
        latency.p50_us = percentile(client.rtt_us(), 0.5);
        latency.p99_us = percentile(client.rtt_us(), 0.99);
        return true;
    }
    const double bytes = static_cast<double>(size) * static_cast<double>(iters);
    flow.mb_per_s = client.seconds() > 0 ? bytes / client.seconds() / 1e6 : 0;
    flow.sender_cpu_ns_per_byte = client.cpu_s() / bytes * 1e9;
    flow.receiver_cpu_ns_per_byte = server.cpu_s() / bytes * 1e9;
    return true;
}

}  // namespace iwcm::tools
