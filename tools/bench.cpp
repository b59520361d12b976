// iwarp-cm bench: connection-setup rate, scale and memory per connection, and
// the timer tick, side by side with the kernel-socket way, in one run.
//
// Read first: docs/perf.md (what each figure means, today's numbers, how to
// reproduce them), bench/setup_pair.hpp (two cores back to back: what one
// setup is), bench/timer_workload.hpp (the timer comparison), docs/design.md
// "Cost facts". The parts:
//   setup    complete iWARP setups per second, two cores in one thread, no
//            loss; the setup is timed, the abortive teardown timed apart.
//   kernel   Linux TCP sockets over 127.0.0.1 (tools/bench_kernel.hpp; non-blocking,
//            epoll, both ends in this thread): socket, connect, accept, MPA request
//            (20-byte header + private data) client -> server, reply server -> client,
//            both checked byte for byte, the client's reset and both closes: the same
//            work as an iwarp-cm setup and its teardown, so ratios to it use iwarp-cm's
//            rate with teardown.
//   scale    N connections held (established, and half-open) in a fresh
//            child process each: RSS growth / N, setup rate while holding N.
//   timer    the timing wheel's tick against the driver's walk, at the same N.
//   shards   the setup rate on 1, 2, ... threads, one shard per thread
//            (tools/bench_shards.hpp).
//   wire     with --wire, first: iwarp-cm over a veth with XDP and over TAP
//            beside the kernel's TCP on the same veth (tools/bench_wire.hpp).
// The whole process is pinned to one CPU, but for the shards' threads. On a terminal, a progress
// line on stderr names the phase and the step (tools/progress.hpp).
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define IWCM_CALLGRIND_TOGGLE() CALLGRIND_TOGGLE_COLLECT
#else
#define IWCM_CALLGRIND_TOGGLE() ((void)0)
#endif

#include "bench/rdma_pair.hpp"
#include "bench/setup_pair.hpp"
#include "bench/stream_pair.hpp"
#include "bench/timer_workload.hpp"
#include "cm/node.hpp"
#include "iwcm/assert.hpp"
#include "tools/bench_clock.hpp"
#include "tools/bench_kernel.hpp"
#include "tools/bench_shards.hpp"
#include "tools/bench_wire.hpp"
#include "tools/commands.hpp"
#include "tools/json.hpp"
#include "tools/progress.hpp"
#include "wire/crc32c.hpp"
#include "wire/mpa.hpp"

namespace iwcm::tools {

namespace {

using bench::SetupPair;

struct BenchOptions {
    bool json = false;
    int progress = -1;  // --progress / --no-progress
    std::string json_out;
    bool quick = false;
    std::vector<std::size_t> scale{10'000, 100'000, 1'000'000};
    std::size_t batch = 256;
    std::size_t pdata = 32;
    int reps = 5;
    double seconds = 0.5;   // per repetition
    int concurrency = 128;  // kernel baseline: connections in flight
    int cpu = -1;
    std::uint64_t profile_setups = 0;
    std::uint32_t profile_shards = 0;
    bool profile_offload = false;
    bool skip_kernel = false;
    bool skip_scale = false;
    bool skip_timer = false;
    bool skip_stream = false;
    bool skip_rdma = false;
    bool skip_shards = false;
    bool scale_given = false;
    bool check = false;           // exit 1 when a target is missed
    bool wire = false;            // the wire part (tools/bench_wire.hpp)
    bool skip_memory = false;     // with --wire: no in-memory part
    bool no_tap_offload = false;  // with --wire: the TAP without its virtio-net header
    std::uint32_t wire_setups = 20'000;
};

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    std::size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// ---------------------------------------------------------------- iwarp-cm setup rate

struct RateSample {
    std::uint64_t setups = 0;
    double setup_s = 0;      // wall time inside setup rounds only
    double teardown_s = 0;   // wall time inside abortive teardowns
    double setup_cpu_s = 0;  // the same in thread CPU time
    double teardown_cpu_s = 0;
    std::uint64_t frames = 0;  // frames moved during the setup rounds
    std::uint64_t errors = 0;
    static double per(std::uint64_t n, double s) { return s > 0 ? static_cast<double>(n) / s : 0; }
    // Setups per second of CPU time, teardown excluded / included; and wall.
    double rate() const { return per(setups, setup_cpu_s); }
    double cycle_rate() const { return per(setups, setup_cpu_s + teardown_cpu_s); }
    double wall_rate() const { return per(setups, setup_s); }
    double cycle_wall_rate() const { return per(setups, setup_s + teardown_s); }
};

// Rounds of `batch` setups to the churn port, each torn down after it, until
// `seconds` of wall time (or `max_setups`) have gone. With `callgrind`, only
// the setup rounds are collected.
RateSample churn(SetupPair& p, std::size_t batch, double seconds, std::uint64_t max_setups,
                 bool callgrind = false) {
    RateSample s;
    std::uint64_t err0 = p.counters().errors;
    const auto start = SteadyClock::now();
    while (seconds_since(start) < seconds && s.setups < max_setups) {
        std::uint64_t f0 = p.counters().frames;
        double c0 = thread_cpu_s();
        auto t0 = SteadyClock::now();
        if (callgrind) IWCM_CALLGRIND_TOGGLE();
        s.setups += p.setup_round(batch);
        if (callgrind) IWCM_CALLGRIND_TOGGLE();
        auto t1 = SteadyClock::now();
        double c1 = thread_cpu_s();
        s.frames += p.counters().frames - f0;
        p.teardown_all();
        auto t2 = SteadyClock::now();
        double c2 = thread_cpu_s();
        s.setup_s += std::chrono::duration<double>(t1 - t0).count();
        s.teardown_s += std::chrono::duration<double>(t2 - t1).count();
        s.setup_cpu_s += c1 - c0;
        s.teardown_cpu_s += c2 - c1;
    }
    s.errors = p.counters().errors - err0;
    return s;
}

// ---------------------------------------------------------------- scale

struct ScaleSample {
    std::uint64_t n = 0;
    std::uint64_t held = 0;  // connections held (each is a node on A and on B)
    std::uint64_t rss_before = 0;
    std::uint64_t rss_after = 0;
    double build_s = 0;           // CPU time to set up the N held connections
    double churn_rate = 0;        // setups/s (setup only) with N held
    double churn_cycle_rate = 0;  // setups/s with teardown included
    std::uint64_t churn_setups = 0;
    std::uint64_t live_a = 0;
    std::uint64_t live_b = 0;
    std::uint64_t timers = 0;  // timer entries armed, both cores
    std::uint64_t errors = 0;
    // Established only: the initiators of `streamed` held connections (at most
    // kStreamedMost) handed off as byte streams (HandoffMode::kStream) and left idle until
    // `folded` of them folded (CoreConfig::stream_fold_after); the RSS before and after.
    std::uint64_t streamed = 0;
    std::uint64_t rss_unstreamed = 0;
    std::uint64_t folded = 0;
    std::uint64_t rss_folded = 0;
    double bytes_per_conn() const {
        return held ? static_cast<double>(rss_after - std::min(rss_after, rss_before)) /
                          static_cast<double>(held)
                    : 0;
    }
    // What a stream adds to one end of an idle connection, its whole TCP state (folded).
    double bytes_per_stream() const {
        return folded ? static_cast<double>(rss_folded - std::min(rss_folded, rss_unstreamed)) /
                            static_cast<double>(folded)
                      : 0;
    }
    // One end of an idle established connection with its stream: the node's share and the
    // stream's.
    double bytes_per_streamed_end() const {
        return streamed ? bytes_per_conn() / 2 + bytes_per_stream() : 0;
    }
    double build_rate() const { return build_s > 0 ? static_cast<double>(held) / build_s : 0; }
};

// The most held connections a scale point hands off as streams (ScaleSample::streamed).
constexpr std::uint64_t kStreamedMost = 100'000;
// How many of them are handed off before the time passes that folds them.
constexpr std::uint64_t kStreamedBatch = 1024;

std::uint16_t hold_port(std::uint64_t held) {
    return static_cast<std::uint16_t>(SetupPair::kChurnPort + 1 +
                                      held / SetupPair::kPortsPerRemote);
}

// Runs in a child process: holds n connections (established or half-open),
// measures RSS growth, then (established only) the churn rate with n held.
ScaleSample scale_child(std::uint64_t n, bool half_open, const BenchOptions& o) {
    ScaleSample s;
    s.n = n;
    auto p = std::make_unique<SetupPair>(o.pdata, o.pdata);
    for (std::uint64_t port = 0; port <= n / SetupPair::kPortsPerRemote; ++port)
        if (!p->add_listener(static_cast<std::uint16_t>(SetupPair::kChurnPort + 1 + port)))
            ++s.errors;
    malloc_trim(0);
    s.rss_before = bench::rss_bytes();
    const double cpu0 = thread_cpu_s();
    while (s.held < n) {
        std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(o.batch, n - s.held));
        std::size_t got = half_open ? p->half_open_round(k, hold_port(s.held))
                                    : p->setup_round(k, hold_port(s.held));
        if (got != k) ++s.errors;
        if (got == 0) break;
        s.held += got;
    }
    s.build_s = thread_cpu_s() - cpu0;
    s.rss_after = bench::rss_bytes();
    std::vector<ConnHandle> held = std::move(p->handles());
    p->handles().clear();
    if (!half_open) {
        RateSample r = churn(*p, o.batch, o.seconds, UINT64_MAX);
        s.churn_rate = r.rate();
        s.churn_cycle_rate = r.cycle_rate();
        s.churn_setups = r.setups;
    }
    s.live_a = p->a().live_nodes();
    s.live_b = p->b().live_nodes();
    s.timers = p->a().pending_timers() + p->b().pending_timers();
    if (!half_open) {
        // After the rate: the streams would be held through it otherwise.
        malloc_trim(0);
        s.rss_unstreamed = bench::rss_bytes();
        // In batches, each left idle until it folds (stream_fold_after) before the next is
        // handed off, as connections go idle one after another: the live streams of a batch
        // are freed before the next batch's take their place, and the RSS grows by what the
        // folded ones hold.
        const std::uint64_t folds0 = p->a().stats().streams_folded;
        const Duration idle = p->a().config().stream_fold_after + std::chrono::seconds(1);
        Instant t = p->now();
        for (std::size_t i = 0; i < held.size() && s.streamed < kStreamedMost; ++i) {
            if (!p->a().handoff(held[i], HandoffParams{HandoffMode::kStream, std::nullopt})) {
                ++s.errors;
                break;
            }
            ++s.streamed;
            if (s.streamed % kStreamedBatch == 0 || i + 1 == held.size() ||
                s.streamed == kStreamedMost) {
                t += idle;
                p->a().on_timer(t);
            }
        }
        s.folded = p->a().stats().streams_folded - folds0;
        s.rss_folded = bench::rss_bytes();
        if (s.folded != s.streamed) ++s.errors;
    }
    s.errors += p->counters().errors;
    return s;
}

// Forks, runs scale_child in the child (a fresh heap: RSS growth is the
// connections' alone), and reads its result from a pipe.
ScaleSample scale_point(std::uint64_t n, bool half_open, const BenchOptions& o) {
    ScaleSample s;
    s.n = n;
    int fds[2];
    if (pipe(fds) != 0) {
        s.errors = 1;
        return s;
    }
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
        ::close(fds[0]);
        ScaleSample r = scale_child(n, half_open, o);
        ssize_t w = ::write(fds[1], &r, sizeof r);
        _exit(w == static_cast<ssize_t>(sizeof r) ? 0 : 1);
    }
    ::close(fds[1]);
    if (pid < 0 || ::read(fds[0], &s, sizeof s) != static_cast<ssize_t>(sizeof s)) s.errors = 1;
    ::close(fds[0]);
    if (pid > 0) waitpid(pid, nullptr, 0);
    return s;
}

// ---------------------------------------------------------------- the run

struct TimerSample {
    bench::TickResult wheel;
    bench::TickResult walk;
};

struct Report {
    std::optional<WireReport> wire;
    int cpu = -1;
    std::vector<RateSample> setup;          // checksums computed and verified
    std::vector<RateSample> setup_offload;  // checksum offload, as loopback (the headline)
    std::vector<KernelSample> kernel;
    std::vector<ScaleSample> established;
    std::vector<ScaleSample> half_open;
    std::vector<TimerSample> timer;
    // iwarp-cm byte stream, one thread, with segmentation offload (as loopback's GSO) and
    // checksum offload (as loopback skips the TCP checksum): the headline
    std::vector<bench::StreamSample> stream_offload;
    // the same with both checksums computed and verified
    std::vector<bench::StreamSample> stream;
    std::vector<bench::StreamSample> stream_mss;     // the same, one MSS per segment
    std::vector<bench::StreamSample> kernel_stream;  // Linux TCP over loopback, one thread
    double stream_copies_per_byte = 0;  // iwarp-cm with segment offload (docs/perf.md "Copies")
    // The same with the zero-copy calls: Core::send_ref, and a sink reading from the segments.
    std::vector<bench::StreamSample> stream_zero_copy;
    double stream_zero_copy_copies_per_byte = 0;
    double frames_per_setup = 0;
    // RDMA message throughput (one thread), iwarp-cm against the same engine
    // over loopback TCP: medians of the repetitions.
    struct RdmaFigure {
        bench::RdmaOp op = bench::RdmaOp::kWrite;
        std::size_t size = 0;
        bool crc = false;
        double mb_per_s = 0;            // segmentation and checksum offload, as loopback
        double checksums_mb_per_s = 0;  // segmentation offload, both checksums computed
        double mss_mb_per_s = 0;        // one MSS per segment, checksums computed
        double loopback_tcp_mb_per_s = 0;
        double copies_per_byte = 0;          // iwarp-cm, both ends (docs/perf.md "Copies")
        double message_copies_per_byte = 0;  // the same, the sender's FPDU framing apart
        std::uint64_t errors = 0;
        const char* op_name() const { return op == bench::RdmaOp::kWrite ? "write" : "send"; }
        double ratio() const {
            return loopback_tcp_mb_per_s > 0 ? mb_per_s / loopback_tcp_mb_per_s : 0;
        }
    };
    std::vector<RdmaFigure> rdma;
    double crc_ns_per_byte = 0;           // SSE 4.2 when the CPU has it
    double crc_portable_ns_per_byte = 0;  // slice-by-8
    ShardScaling shards;                  // setup rate on 1..CPUs threads

    template <class Samples, class Fn>
    static double med(const Samples& samples, Fn fn) {
        std::vector<double> v;
        for (auto& s : samples) v.push_back(fn(s));
        return median(v);
    }
    // Medians over the repetitions; CPU time unless named wall.
    double setup_rate() const {
        return med(setup, [](const RateSample& s) { return s.rate(); });
    }
    double cycle_rate() const {
        return med(setup, [](const RateSample& s) { return s.cycle_rate(); });
    }
    double setup_wall_rate() const {
        return med(setup, [](const RateSample& s) { return s.wall_rate(); });
    }
    double offload_rate() const {
        return med(setup_offload, [](const RateSample& s) { return s.rate(); });
    }
    double offload_wall_rate() const {
        return med(setup_offload, [](const RateSample& s) { return s.wall_rate(); });
    }
    double cycle_wall_rate() const {
        return med(setup, [](const RateSample& s) { return s.cycle_wall_rate(); });
    }
    double offload_cycle_rate() const {
        return med(setup_offload, [](const RateSample& s) { return s.cycle_rate(); });
    }
    double offload_cycle_wall_rate() const {
        return med(setup_offload, [](const RateSample& s) { return s.cycle_wall_rate(); });
    }
    double kernel_rate() const {
        return med(kernel, [](const KernelSample& s) { return s.rate(); });
    }
    double kernel_wall_rate() const {
        return med(kernel, [](const KernelSample& s) { return s.wall_rate(); });
    }
    // iwarp-cm's setup and teardown against the kernel sockets over the interleaved
    // repetitions: the ratio of the two means, and the least and the greatest ratio
    // of one repetition to the kernel's repetition run beside it. A machine whose
    // speed drifts during the run moves both sides of a pair together, so the range
    // says how far the ratio itself moved.
    struct PairedRatio {
        double mean = 0;
        double min = 0;
        double max = 0;
        std::size_t pairs = 0;
    };
    PairedRatio kernel_ratio(bool offload) const {
        const std::vector<RateSample>& ours = offload ? setup_offload : setup;
        PairedRatio p;
        double sum_ours = 0;
        double sum_kernel = 0;
        for (std::size_t i = 0; i < std::min(ours.size(), kernel.size()); ++i) {
            const double k = kernel[i].rate();
            if (k <= 0) continue;
            const double x = ours[i].cycle_rate() / k;
            sum_ours += ours[i].cycle_rate();
            sum_kernel += k;
            p.min = p.pairs == 0 ? x : std::min(p.min, x);
            p.max = std::max(p.max, x);
            ++p.pairs;
        }
        p.mean = sum_kernel > 0 ? sum_ours / sum_kernel : 0;
        IWCM_ASSERT(p.pairs == 0 || (p.min <= p.mean * (1 + 1e-9) && p.mean <= p.max * (1 + 1e-9)));
        return p;
    }
    double stream_offload_mb_s() const {
        return med(stream_offload, [](const bench::StreamSample& s) { return s.mb_per_s(); });
    }
    double stream_mb_s() const {
        return med(stream, [](const bench::StreamSample& s) { return s.mb_per_s(); });
    }
    double stream_mss_mb_s() const {
        return med(stream_mss, [](const bench::StreamSample& s) { return s.mb_per_s(); });
    }
    double stream_zero_copy_mb_s() const {
        return med(stream_zero_copy, [](const bench::StreamSample& s) { return s.mb_per_s(); });
    }
    double kernel_stream_mb_s() const {
        return med(kernel_stream, [](const bench::StreamSample& s) { return s.mb_per_s(); });
    }
    std::uint64_t errors() const {
        std::uint64_t e = 0;
        for (auto& s : setup) e += s.errors;
        for (auto& s : setup_offload) e += s.errors;
        for (auto& s : kernel) e += s.errors;
        for (auto& s : established) e += s.errors;
        for (auto& s : half_open) e += s.errors;
        for (auto& s : stream) e += s.error ? 1 : 0;
        for (auto& s : stream_mss) e += s.error ? 1 : 0;
        for (auto& s : kernel_stream) e += s.error ? 1 : 0;
        for (auto& f : rdma) e += f.errors;
        return e + shards.errors();
    }
};

// The progress line of the run: a phase, its step of the total, the time so far.
class BenchProgress {
public:
    explicit BenchProgress(bool enabled) : line_(enabled) {}
    void step(const std::string& phase, std::size_t i, std::size_t n) {
        if (!line_.enabled()) return;
        char buf[160];
        std::snprintf(buf, sizeof buf, "bench: %s (%zu/%zu), %.1f s", phase.c_str(), i, n,
                      seconds_since(start_));
        line_.show(buf);
    }
    void clear() { line_.clear(); }
    void finish() {
        char buf[64];
        std::snprintf(buf, sizeof buf, "bench: done, %.1f s", seconds_since(start_));
        line_.finish(buf);
    }

private:
    Progress line_;
    SteadyClock::time_point start_ = SteadyClock::now();
};

int pin_cpu(int cpu) {
    if (cpu < 0) cpu = sched_getcpu();
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 ? cpu : -1;
}

// Setup rate (checksums computed, then offloaded) and kernel baseline, interleaved
// repetition by repetition so that all three see the same machine.
void run_rates(const BenchOptions& o, Report& r, BenchProgress& progress) {
    SetupPair p(o.pdata, o.pdata);
    SetupPair po(o.pdata, o.pdata, true);
    churn(p, o.batch, 0.1, 100'000);  // warm-up: pools, tables and arenas reach size
    churn(po, o.batch, 0.1, 100'000);
    KernelBaseline kb(o.pdata, o.concurrency);
    bool kernel_ok = o.skip_kernel || kb.open();
    if (!o.skip_kernel && kernel_ok) kb.run(0.05, 2000);  // warm-up
    const auto reps = static_cast<std::size_t>(o.reps);
    for (int i = 0; i < o.reps; ++i) {
        const auto at = static_cast<std::size_t>(i) + 1;
        progress.step("setup rate, iwarp-cm, repetition", at, reps);
        r.setup.push_back(churn(p, o.batch, o.seconds, UINT64_MAX));
        progress.step("setup rate, iwarp-cm with checksum offload, repetition", at, reps);
        r.setup_offload.push_back(churn(po, o.batch, o.seconds, UINT64_MAX));
        if (!o.skip_kernel && kernel_ok) {
            progress.step("setup rate, kernel sockets, repetition", at, reps);
            r.kernel.push_back(kb.run(o.seconds, UINT64_MAX));
        }
        if (!o.json) {
            progress.clear();
            std::fprintf(stderr,
                         "  rep %d: iwarp-cm %.0f setups/s with teardown (checksum offload %.0f)",
                         i + 1, r.setup.back().cycle_rate(), r.setup_offload.back().cycle_rate());
            if (!r.kernel.empty())
                std::fprintf(stderr, ", kernel %.0f setups/s with close", r.kernel.back().rate());
            std::fprintf(stderr, "\n");
        }
    }
    std::uint64_t setups = 0, frames = 0;
    for (auto& s : r.setup) setups += s.setups, frames += s.frames;
    r.frames_per_setup = setups ? static_cast<double>(frames) / static_cast<double>(setups) : 0;
    if (!o.skip_kernel && !kernel_ok) r.kernel.push_back(KernelSample{0, 0, 1});
}

// Byte-stream throughput against Linux TCP over loopback, repetition by
// repetition in the same run (both one thread, MSS 1460): ours with segments
// of 44 MSS (kPairOffload, as loopback's GSO) and with one MSS per segment.
void run_stream(const BenchOptions& o, Report& r, BenchProgress& progress) {
    if (o.skip_stream) return;
    bench::StreamPair offload_pair(256 * 1024, bench::kPairOffload, false, false, true);
    bench::StreamPair pair(256 * 1024, bench::kPairOffload);
    bench::StreamPair mss_pair;
    bench::StreamPair zc_pair(256 * 1024, bench::kPairOffload, true, true);
    bench::KernelStream kernel;
    if (!offload_pair.ok() || !pair.ok() || !mss_pair.ok() || !zc_pair.ok() || !kernel.ok()) {
        r.stream.push_back(bench::StreamSample{0, 0, 0, true});
        return;
    }
    // warm-up: buffers reach size
    offload_pair.transfer(UINT64_MAX, 0.05);
    std::uint64_t delivered = pair.transfer(UINT64_MAX, 0.05).bytes;
    mss_pair.transfer(UINT64_MAX, 0.05);
    std::uint64_t zc_delivered = zc_pair.transfer(UINT64_MAX, 0.05).bytes;
    kernel.transfer(UINT64_MAX, 0.05);
    const auto reps = static_cast<std::size_t>(o.reps);
    for (int i = 0; i < o.reps; ++i) {
        const auto at = static_cast<std::size_t>(i) + 1;
        progress.step("stream throughput, iwarp-cm, repetition", at, reps);
        r.stream_offload.push_back(offload_pair.transfer(UINT64_MAX, o.seconds));
        r.stream.push_back(pair.transfer(UINT64_MAX, o.seconds));
        delivered += r.stream.back().bytes;
        r.stream_mss.push_back(mss_pair.transfer(UINT64_MAX, o.seconds));
        r.stream_zero_copy.push_back(zc_pair.transfer(UINT64_MAX, o.seconds));
        zc_delivered += r.stream_zero_copy.back().bytes;
        progress.step("stream throughput, loopback TCP, repetition", at, reps);
        r.kernel_stream.push_back(kernel.transfer(UINT64_MAX, o.seconds));
        if (!o.json) {
            progress.clear();
            std::fprintf(stderr,
                         "  rep %d: stream %.0f MB/s (checksums computed %.0f, MSS segments %.0f,"
                         " zero-copy %.0f), loopback TCP %.0f MB/s\n",
                         i + 1, r.stream_offload.back().mb_per_s(), r.stream.back().mb_per_s(),
                         r.stream_mss.back().mb_per_s(), r.stream_zero_copy.back().mb_per_s(),
                         r.kernel_stream.back().mb_per_s());
        }
    }
    r.stream_copies_per_byte = pair.copies_per_byte(delivered);
    r.stream_zero_copy_copies_per_byte = zc_pair.copies_per_byte(zc_delivered);
}

// CRC32c over 64 KiB for `seconds`: nanoseconds per byte.
template <std::uint32_t (*Crc)(wire::Bytes, std::uint32_t)>
double crc_ns_per_byte(double seconds) {
    std::vector<std::byte> data(64 * 1024, std::byte{0x5a});
    std::uint64_t bytes = 0;
    std::uint32_t crc = 0;
    const auto start = SteadyClock::now();
    do {
        crc = Crc(data, crc);
        bytes += data.size();
    } while (seconds_since(start) < seconds);
    volatile std::uint32_t sink = crc;
    (void)sink;
    return seconds_since(start) * 1e9 / static_cast<double>(bytes);
}

// Median MB/s of `reps` samples of `seconds` each (after a short warm-up).
template <class Pair>
double rdma_mb_s(Pair& pair, bench::RdmaOp op, int reps, double seconds, std::uint64_t& errors) {
    if (!pair.ok()) return ++errors, 0;
    pair.run(op, UINT64_MAX, seconds / 4);
    std::vector<double> v;
    for (int i = 0; i < reps; ++i) {
        auto s = pair.run(op, UINT64_MAX, seconds);
        errors += s.error ? 1 : 0;
        v.push_back(s.mb_per_s());
    }
    return median(v);
}

// RDMA Write and Send of 4 KiB, 64 KiB and 1 MiB, CRC off and on: iwarp-cm's
// data path against the same exchange over loopback TCP, in the same run.
void run_rdma(const BenchOptions& o, Report& r, BenchProgress& progress) {
    if (o.skip_rdma) return;
    r.crc_ns_per_byte = crc_ns_per_byte<wire::crc32c>(o.seconds / 5);
    r.crc_portable_ns_per_byte = crc_ns_per_byte<wire::detail::crc32c_portable>(o.seconds / 5);
    const int reps = std::min(o.reps, 3);
    const double seconds = o.seconds / 5;
    const std::size_t steps = 12;
    for (bench::RdmaOp op : {bench::RdmaOp::kWrite, bench::RdmaOp::kSend}) {
        for (bool crc : {false, true}) {
            for (std::size_t size : {std::size_t{4096}, std::size_t{65536}, std::size_t{1} << 20}) {
                Report::RdmaFigure f;
                f.op = op, f.size = size, f.crc = crc;
                progress.step(std::string("rdma ") + f.op_name(), r.rdma.size() + 1, steps);
                bench::RdmaCorePair ours(size, crc, bench::kPairOffload, true);
                f.mb_per_s = rdma_mb_s(ours, op, reps, seconds, f.errors);
                f.copies_per_byte = ours.copies_per_byte();
                f.message_copies_per_byte = ours.message_copies_per_byte();
                bench::RdmaCorePair ours_summed(size, crc, bench::kPairOffload);
                f.checksums_mb_per_s = rdma_mb_s(ours_summed, op, reps, seconds, f.errors);
                bench::RdmaCorePair ours_mss(size, crc);
                f.mss_mb_per_s = rdma_mb_s(ours_mss, op, reps, seconds, f.errors);
                bench::RdmaSocketPair theirs(size, crc);
                f.loopback_tcp_mb_per_s = rdma_mb_s(theirs, op, reps, seconds, f.errors);
                r.rdma.push_back(f);
            }
        }
    }
}

void run_scale_and_timer(const BenchOptions& o, Report& r, BenchProgress& progress) {
    const std::size_t points = o.scale.size();
    for (std::uint64_t n : o.scale) {
        if (o.skip_scale) break;
        const std::string at = "N=" + std::to_string(n);
        progress.step("scale " + at + ", established", r.established.size() + 1, points);
        r.established.push_back(scale_point(n, false, o));
        progress.step("scale " + at + ", half-open", r.half_open.size() + 1, points);
        r.half_open.push_back(scale_point(n, true, o));
        if (!o.json) {
            progress.clear();
            const ScaleSample& e = r.established.back();
            std::fprintf(
                stderr,
                "  N=%llu: %.0f B/conn established, %.0f B/conn half-open, %.0f setups/s held, "
                "%.0f B/stream idle\n",
                static_cast<unsigned long long>(n), e.bytes_per_conn(),
                r.half_open.back().bytes_per_conn(), e.churn_rate, e.bytes_per_stream());
        }
    }
    auto budget = std::chrono::nanoseconds(static_cast<std::int64_t>(o.seconds * 1e9));
    for (std::uint64_t n : o.scale) {
        if (o.skip_timer) break;
        progress.step("timer tick N=" + std::to_string(n), r.timer.size() + 1, points);
        TimerSample t;
        t.wheel = bench::wheel_tick(static_cast<std::size_t>(n), budget);
        t.walk = bench::walk_tick(static_cast<std::size_t>(n), budget);
        r.timer.push_back(t);
    }
}

// ---------------------------------------------------------------- output

struct Target {
    const char* name;
    const char* want;
    double measured;
    const char* unit;
    bool met;
};

// The wire's targets (docs/perf.md "The wire"), from the same run's figures.
void wire_targets(const WireReport& w, std::vector<Target>& t) {
    const WireSetup* xs = w.find_setup("xdp");
    const WireSetup* ks = w.find_setup("kernel");
    if (xs != nullptr && ks != nullptr && ks->rate_per_s > 0) {
        const double x = xs->rate_per_s / ks->rate_per_s;
        t.push_back(
            {"wire: setup rate over AF_XDP vs kernel sockets, same veth", ">= 5x", x, "x", x >= 5});
    }
    const WireFlow* kf = w.find_flow("kernel.64k");
    const WireFlow* xf = w.find_flow("xdp.write_64k_crc_off");
    if (kf != nullptr && xf != nullptr && kf->mb_per_s > 0) {
        const double x = xf->mb_per_s / kf->mb_per_s;
        t.push_back({"wire: RDMA Write 64 KiB over AF_XDP vs kernel TCP, CRC off", ">= 1x", x, "x",
                     x >= 1});
    }
    const WireLatency* xl = w.find_latency("xdp.send_64");
    const WireLatency* kl = w.find_latency("kernel.tcp_64");
    if (xl != nullptr && kl != nullptr && xl->p50_us > 0) {
        const double x = kl->p50_us / xl->p50_us;
        t.push_back({"wire: 64 B round trip over AF_XDP vs kernel TCP (median, kernel/ours)",
                     ">= 1x", x, "x", x >= 1});
    }
    // The ABI's own cost: perftest through libiwcm_rdma.so against the same transfer made
    // in-process on the runtime's API, both over AF_XDP, CRC off (tools/bench_native.hpp).
    for (const char* op : {"write", "send"}) {
        const WireFlow* abi = w.find_flow(std::string("xdp.") + op + "_64k_crc_off");
        const WireFlow* own = w.find_flow(std::string("xdp.native.") + op + "_64k_crc_off");
        if (abi == nullptr || own == nullptr || own->mb_per_s <= 0) continue;
        const double x = abi->mb_per_s / own->mb_per_s;
        t.push_back({op[0] == 'w' ? "wire: ib_write_bw 64 KiB through the ABI vs in-process"
                                  : "wire: ib_send_bw 64 KiB through the ABI vs in-process",
                     ">= 0.9x", x, "x", x >= 0.9});
    }
}

std::vector<Target> targets(const Report& r) {
    std::vector<Target> t;
    if (r.wire) wire_targets(*r.wire, t);
    // The headline: both checksums computed, as on every wire; the rate with checksum
    // offload (the kernel's loopback baseline skips the TCP checksum) follows it. The
    // rates are of setups alone; the ratios compare the same work on both sides, setup
    // and teardown, as the ratio of the means of the interleaved repetitions.
    for (bool offload : {false, true}) {
        const double rate = offload ? r.offload_rate() : r.setup_rate();
        if (offload ? r.setup_offload.empty() : r.setup.empty()) continue;
        t.push_back({offload ? "setup rate, one core, setup only (checksum offload)"
                             : "setup rate, one core, setup only (checksums computed)",
                     ">= 1000000/s", rate, "setups/s", rate >= 1e6});
        const Report::PairedRatio x = r.kernel_ratio(offload);
        if (x.pairs > 0)
            t.push_back({offload ? "ratio to kernel sockets, setup+teardown (checksum offload)"
                                 : "ratio to kernel sockets, setup+teardown (checksums)",
                         ">= 50x", x.mean, "x", x.mean >= 50});
    }
    if (double ks = r.kernel_stream_mb_s(); ks > 0) {
        for (bool offload : {true, false}) {
            const double ratio = (offload ? r.stream_offload_mb_s() : r.stream_mb_s()) / ks;
            // Both with segments of 44 MSS, as loopback's GSO: an offload no wire has.
            t.push_back({offload ? "stream vs loopback TCP (44-MSS segments, checksum offload)"
                                 : "stream vs loopback TCP (44-MSS segments, checksums)",
                         ">= 1x", ratio, "x", ratio >= 1});
        }
        const double c = r.stream_zero_copy_copies_per_byte;
        t.push_back({"stream bytes copied per byte delivered (send_ref, sink)", "<= 1", c, "copies",
                     c <= 1});
    }
    for (const Report::RdmaFigure& f : r.rdma) {
        if (f.op != bench::RdmaOp::kWrite || f.size != 65536) continue;
        t.push_back(
            {f.crc
                 ? "RDMA Write 64 KiB vs loopback TCP, CRC on (44-MSS segments, checksum offload)"
                 : "RDMA Write 64 KiB vs loopback TCP, CRC off (44-MSS segments, checksum offload)",
             ">= 1x", f.ratio(), "x", f.ratio() >= 1});
    }
    for (const Report::RdmaFigure& f : r.rdma) {
        if (f.size != 4096 || f.crc) continue;
        t.push_back({f.op == bench::RdmaOp::kWrite
                         ? "RDMA Write 4 KiB vs loopback TCP, CRC off (44-MSS segments, checksum "
                           "offload)"
                         : "RDMA Send 4 KiB vs loopback TCP, CRC off (44-MSS segments, checksum "
                           "offload)",
                     ">= 1x", f.ratio(), "x", f.ratio() >= 1});
    }
    for (const Report::RdmaFigure& f : r.rdma) {
        if (f.op != bench::RdmaOp::kWrite || f.size != 65536 || f.crc) continue;
        t.push_back({"RDMA Write 64 KiB message bytes copied per byte placed", "<= 1",
                     f.message_copies_per_byte, "copies", f.message_copies_per_byte <= 1});
    }
    for (const ScaleSample& e : r.established) {
        double per_node = e.bytes_per_conn() / 2;
        if (&e == &r.established.back()) {
            t.push_back({"bytes per idle established connection (one side)", "<= 256 B", per_node,
                         "B", per_node <= 256});
            // With its whole TCP state after a kStream hand-off, the stream folded as an
            // idle one is.
            const double streamed = e.bytes_per_streamed_end();
            t.push_back({"bytes per idle connection with its stream (one side)", "<= 512 B",
                         streamed, "B", streamed > 0 && streamed <= 512});
            double mib =
                static_cast<double>(e.rss_after - std::min(e.rss_after, e.rss_before)) / 1048576.0;
            if (e.n >= 1'000'000)
                t.push_back(
                    {"1M concurrent, both sides, RSS growth", "< 512 MiB", mib, "MiB", mib < 512});
        }
    }
    if (r.established.size() >= 2) {
        const ScaleSample& lo = r.established.front();
        const ScaleSample& hi = r.established.back();
        double ratio = hi.churn_rate > 0 ? lo.churn_rate / hi.churn_rate : 0;
        t.push_back({"setup rate at largest N vs smallest N", "slowdown <= 2x", ratio, "x slower",
                     ratio > 0 && ratio <= 2});
    }
    if (r.shards.points.size() >= 2) {
        double x = r.shards.speedup(2);
        t.push_back(
            {"setup rate, 2 threads on 2 cores vs 1 (mean of reps)", ">= 1.8x", x, "x", x >= 1.8});
    }
    return t;
}

std::string machine_cpu() {
    std::FILE* f = std::fopen("/proc/cpuinfo", "r");
    if (!f) return "?";
    char line[512];
    std::string model = "?";
    while (std::fgets(line, sizeof line, f)) {
        if (std::strncmp(line, "model name", 10) == 0) {
            const char* c = std::strchr(line, ':');
            if (c) model = c + 2;
            if (!model.empty() && model.back() == '\n') model.pop_back();
            break;
        }
    }
    std::fclose(f);
    return model;
}

std::string to_json(const BenchOptions& o, const Report& r) {
    std::ostringstream j;
    j.precision(6);
    j << "{\n  \"machine\": {\"cpu\": " << json_quote(machine_cpu())
      << ", \"cpus\": " << sysconf(_SC_NPROCESSORS_ONLN) << ", \"pinned_cpu\": " << r.cpu << "},\n";
    j << "  \"config\": {\"batch\": " << o.batch << ", \"pdata\": " << o.pdata
      << ", \"reps\": " << o.reps << ", \"seconds_per_rep\": " << o.seconds
      << ", \"kernel_concurrency\": " << o.concurrency
      << ", \"quick\": " << (o.quick ? "true" : "false")
      << ", \"sizeof_node\": " << sizeof(cm::Node)
      << ", \"sizeof_node_buffers\": " << sizeof(cm::NodeBuffers) << "},\n";
    j << "  \"setup\": {\"rate_per_s\": " << r.setup_rate()
      << ", \"cycle_rate_per_s\": " << r.cycle_rate()
      << ", \"ns_per_setup\": " << (r.setup_rate() > 0 ? 1e9 / r.setup_rate() : 0)
      << ", \"frames_per_setup\": " << r.frames_per_setup
      << ", \"wall_rate_per_s\": " << r.setup_wall_rate()
      << ", \"cycle_wall_rate_per_s\": " << r.cycle_wall_rate() << ", \"reps\": [";
    auto reps = [&j](const std::vector<RateSample>& samples) {
        for (std::size_t i = 0; i < samples.size(); ++i)
            j << (i ? ", " : "") << "{\"setups\": " << samples[i].setups
              << ", \"setup_s\": " << samples[i].setup_s
              << ", \"teardown_s\": " << samples[i].teardown_s
              << ", \"setup_cpu_s\": " << samples[i].setup_cpu_s
              << ", \"teardown_cpu_s\": " << samples[i].teardown_cpu_s
              << ", \"errors\": " << samples[i].errors << "}";
    };
    reps(r.setup);
    j << "]},\n  \"kernel\": {\"rate_per_s\": " << r.kernel_rate()
      << ", \"wall_rate_per_s\": " << r.kernel_wall_rate() << ", \"reps\": [";
    for (std::size_t i = 0; i < r.kernel.size(); ++i)
        j << (i ? ", " : "") << "{\"setups\": " << r.kernel[i].setups
          << ", \"seconds\": " << r.kernel[i].seconds << ", \"cpu_s\": " << r.kernel[i].cpu_s
          << ", \"errors\": " << r.kernel[i].errors << "}";
    j << "]},\n  \"setup_offload\": {\"rate_per_s\": " << r.offload_rate()
      << ", \"cycle_rate_per_s\": " << r.offload_cycle_rate()
      << ", \"wall_rate_per_s\": " << r.offload_wall_rate()
      << ", \"cycle_wall_rate_per_s\": " << r.offload_cycle_wall_rate() << ", \"reps\": [";
    reps(r.setup_offload);
    // Ratios of like work only: iwarp-cm's setup and teardown against the kernel's, the
    // ratio of the means of the interleaved repetitions and its range over the pairs.
    const Report::PairedRatio x = r.kernel_ratio(false);
    const Report::PairedRatio xo = r.kernel_ratio(true);
    j << "]},\n  \"ratio\": {\"cycle_vs_kernel\": " << x.mean
      << ", \"cycle_vs_kernel_min\": " << x.min << ", \"cycle_vs_kernel_max\": " << x.max
      << ", \"offload_cycle_vs_kernel\": " << xo.mean
      << ", \"offload_cycle_vs_kernel_min\": " << xo.min
      << ", \"offload_cycle_vs_kernel_max\": " << xo.max << ", \"wall_cycle_vs_kernel\": "
      << (r.kernel_wall_rate() > 0 ? r.cycle_wall_rate() / r.kernel_wall_rate() : 0)
      << ", \"offload_wall_cycle_vs_kernel\": "
      << (r.kernel_wall_rate() > 0 ? r.offload_cycle_wall_rate() / r.kernel_wall_rate() : 0)
      << "},\n  \"scale\": [";
    for (std::size_t i = 0; i < r.established.size(); ++i) {
        const ScaleSample& e = r.established[i];
        const ScaleSample& h = r.half_open[i];
        j << (i ? "," : "") << "\n    {\"n\": " << e.n << ", \"established\": {\"held\": " << e.held
          << ", \"rss_growth\": " << (e.rss_after - std::min(e.rss_after, e.rss_before))
          << ", \"bytes_per_conn\": " << e.bytes_per_conn()
          << ", \"bytes_per_node\": " << e.bytes_per_conn() / 2
          << ", \"build_rate_per_s\": " << e.build_rate() << ", \"rate_per_s\": " << e.churn_rate
          << ", \"cycle_rate_per_s\": " << e.churn_cycle_rate
          << ", \"live_nodes\": " << e.live_a + e.live_b << ", \"timers\": " << e.timers
          << ", \"streamed\": " << e.streamed << ", \"folded\": " << e.folded
          << ", \"bytes_per_stream\": " << e.bytes_per_stream()
          << ", \"bytes_per_streamed_end\": " << e.bytes_per_streamed_end()
          << ", \"errors\": " << e.errors << "}, \"half_open\": {\"held\": " << h.held
          << ", \"rss_growth\": " << (h.rss_after - std::min(h.rss_after, h.rss_before))
          << ", \"bytes_per_conn\": " << h.bytes_per_conn()
          << ", \"bytes_per_node\": " << h.bytes_per_conn() / 2
          << ", \"live_nodes\": " << h.live_a + h.live_b << ", \"timers\": " << h.timers
          << ", \"errors\": " << h.errors << "}}";
    }
    j << "\n  ],\n  \"timer\": [";
    for (std::size_t i = 0; i < r.timer.size(); ++i) {
        const TimerSample& t = r.timer[i];
        j << (i ? "," : "") << "\n    {\"n\": " << t.wheel.n
          << ", \"wheel_ns_per_tick\": " << t.wheel.ns_per_tick
          << ", \"walk_ns_per_tick\": " << t.walk.ns_per_tick
          << ", \"fired_per_tick\": " << t.wheel.fired_per_tick << ", \"walk_over_wheel\": "
          << (t.wheel.ns_per_tick > 0 ? t.walk.ns_per_tick / t.wheel.ns_per_tick : 0) << "}";
    }
    j << "\n  ],\n  \"stream\": {\"checksum_offload_mb_per_s\": " << r.stream_offload_mb_s()
      << ", \"mb_per_s\": " << r.stream_mb_s() << ", \"mss_mb_per_s\": " << r.stream_mss_mb_s()
      << ", \"loopback_tcp_mb_per_s\": " << r.kernel_stream_mb_s()
      << ", \"copies_per_byte\": " << r.stream_copies_per_byte
      << ", \"zero_copy_mb_per_s\": " << r.stream_zero_copy_mb_s()
      << ", \"zero_copy_copies_per_byte\": " << r.stream_zero_copy_copies_per_byte
      << ", \"reps\": [";
    for (std::size_t i = 0; i < r.stream.size(); ++i)
        j << (i ? ", " : "") << "{\"bytes\": " << r.stream[i].bytes
          << ", \"frames\": " << r.stream[i].frames << ", \"seconds\": " << r.stream[i].seconds
          << "}";
    j << "]},\n  \"rdma\": {\"crc32c_ns_per_byte\": " << r.crc_ns_per_byte
      << ", \"crc32c_portable_ns_per_byte\": " << r.crc_portable_ns_per_byte << ", \"runs\": [";
    for (std::size_t i = 0; i < r.rdma.size(); ++i) {
        const Report::RdmaFigure& f = r.rdma[i];
        j << (i ? "," : "") << "\n    {\"op\": \"" << f.op_name() << "\", \"size\": " << f.size
          << ", \"crc\": " << (f.crc ? "true" : "false") << ", \"mb_per_s\": " << f.mb_per_s
          << ", \"checksums_mb_per_s\": " << f.checksums_mb_per_s
          << ", \"mss_mb_per_s\": " << f.mss_mb_per_s
          << ", \"loopback_tcp_mb_per_s\": " << f.loopback_tcp_mb_per_s
          << ", \"ratio\": " << f.ratio() << ", \"copies_per_byte\": " << f.copies_per_byte
          << ", \"message_copies_per_byte\": " << f.message_copies_per_byte
          << ", \"errors\": " << f.errors << "}";
    }
    j << "\n  ]},\n  \"shards\": ";
    shard_scaling_json(j, r.shards);
    if (r.wire) j << ",\n  \"wire\": " << wire_json(*r.wire);
    j << ",\n  \"targets\": [";
    auto ts = targets(r);
    for (std::size_t i = 0; i < ts.size(); ++i)
        j << (i ? "," : "") << "\n    {\"name\": \"" << ts[i].name << "\", \"target\": \""
          << ts[i].want << "\", \"measured\": " << ts[i].measured << ", \"unit\": \"" << ts[i].unit
          << "\", \"met\": " << (ts[i].met ? "true" : "false") << "}";
    j << "\n  ],\n  \"errors\": " << r.errors() << "\n}\n";
    return j.str();
}

void print_table(const Report& r) {
    double rate = r.setup_rate(), k = r.kernel_rate();
    std::printf(
        "\nsetup rate (one thread pinned to cpu %d; per second of its CPU time; wall in "
        "brackets)\n",
        r.cpu);
    std::printf(
        "  iwarp-cm   %10.0f setups/s [%.0f]  (setup only, %.0f ns/setup, %.1f frames/setup; "
        "checksums computed)\n",
        rate, r.setup_wall_rate(), rate > 0 ? 1e9 / rate : 0, r.frames_per_setup);
    const double ro = r.offload_rate();
    std::printf(
        "  iwarp-cm   %10.0f setups/s [%.0f]  (setup only, %.0f ns/setup; checksum offload: "
        "TCP and IPv4 checksums skipped, in memory only)\n",
        ro, r.offload_wall_rate(), ro > 0 ? 1e9 / ro : 0);
    const double cycle = r.cycle_rate(), cycle_o = r.offload_cycle_rate();
    std::printf(
        "  iwarp-cm   %10.0f setups/s [%.0f]  (setup and abortive teardown; checksums "
        "computed)\n",
        cycle, r.cycle_wall_rate());
    std::printf(
        "  iwarp-cm   %10.0f setups/s [%.0f]  (setup and abortive teardown; checksum "
        "offload)\n",
        cycle_o, r.offload_cycle_wall_rate());
    if (k > 0) {
        std::printf(
            "  kernel TCP %10.0f setups/s [%.0f]  (127.0.0.1, epoll: socket, connect, accept, "
            "MPA request and reply, client's reset, both closes)\n",
            k, r.kernel_wall_rate());
        const double kw = r.kernel_wall_rate();
        const Report::PairedRatio x = r.kernel_ratio(false);
        const Report::PairedRatio xo = r.kernel_ratio(true);
        std::printf(
            "  ratio      %10.1fx  (setup and teardown both sides; checksums computed; ratio of "
            "the means of %zu interleaved repetitions, each %.1f..%.1fx; wall: %.1fx)\n",
            x.mean, x.pairs, x.min, x.max, kw > 0 ? r.cycle_wall_rate() / kw : 0);
        std::printf(
            "  ratio      %10.1fx  (setup and teardown both sides; checksum offload; "
            "each %.1f..%.1fx; wall: %.1fx)\n",
            xo.mean, xo.min, xo.max, kw > 0 ? r.offload_cycle_wall_rate() / kw : 0);
    }
    if (!r.established.empty()) {
        std::printf("\nscale (RSS growth / N, both sides; rate = setups/s with N held)\n");
        std::printf("  %10s %14s %14s %14s %14s %14s\n", "N", "B/conn estab", "B/conn half",
                    "rate held", "build rate", "B/stream idle");
        for (std::size_t i = 0; i < r.established.size(); ++i) {
            const ScaleSample& e = r.established[i];
            std::printf("  %10llu %14.0f %14.0f %14.0f %14.0f %14.0f\n",
                        static_cast<unsigned long long>(e.n), e.bytes_per_conn(),
                        r.half_open[i].bytes_per_conn(), e.churn_rate, e.build_rate(),
                        e.bytes_per_stream());
        }
    }
    if (!r.timer.empty()) {
        std::printf("\ntimer tick (1 ms tick, N pending, deadlines 1 ms..60 s)\n");
        std::printf("  %10s %14s %14s %10s\n", "N", "wheel ns/tick", "walk ns/tick", "walk/wheel");
        for (const TimerSample& t : r.timer)
            std::printf("  %10zu %14.0f %14.0f %10.0f\n", t.wheel.n, t.wheel.ns_per_tick,
                        t.walk.ns_per_tick,
                        t.wheel.ns_per_tick > 0 ? t.walk.ns_per_tick / t.wheel.ns_per_tick : 0);
    }
    if (r.kernel_stream_mb_s() > 0) {
        std::printf("\nstream throughput (one thread, both ends, MSS 1460, wall)\n");
        std::printf(
            "  iwarp-cm     %10.0f MB/s  (segments of 44 MSS, as loopback's GSO; checksum"
            " offload, as loopback)\n",
            r.stream_offload_mb_s());
        std::printf("  iwarp-cm     %10.0f MB/s  (the same, checksums computed)\n",
                    r.stream_mb_s());
        std::printf("  iwarp-cm     %10.0f MB/s  (one MSS per segment)\n", r.stream_mss_mb_s());
        std::printf("  iwarp-cm     %10.0f MB/s  (44 MSS, zero-copy: send_ref and a sink)\n",
                    r.stream_zero_copy_mb_s());
        std::printf("  loopback TCP %10.0f MB/s\n", r.kernel_stream_mb_s());
        std::printf(
            "  bytes copied per byte delivered: iwarp-cm %.2f, zero-copy %.2f (loopback TCP: 2,"
            " into and out of the kernel)\n",
            r.stream_copies_per_byte, r.stream_zero_copy_copies_per_byte);
    }
    if (!r.rdma.empty()) {
        std::printf(
            "\nRDMA throughput (one thread, both ends; MB/s; loopback TCP: the same engine"
            " over a kernel socket;\n   iwarp-cm: segments of up to 44 MSS, as loopback's GSO,"
            " and checksum offload, as loopback;\n   checksums: the same with the IPv4 and TCP"
            " checksums computed; MSS segs: one MSS per segment, checksums computed)\n");
        std::printf("  %-6s %8s %4s %10s %10s %10s %14s %8s %9s %9s\n", "op", "size", "crc",
                    "iwarp-cm", "checksums", "MSS segs", "loopback TCP", "ratio", "copies/B",
                    "msg/B");
        for (const Report::RdmaFigure& f : r.rdma)
            std::printf("  %-6s %8zu %4s %10.0f %10.0f %10.0f %14.0f %7.2fx %9.2f %9.2f\n",
                        f.op_name(), f.size, f.crc ? "on" : "off", f.mb_per_s, f.checksums_mb_per_s,
                        f.mss_mb_per_s, f.loopback_tcp_mb_per_s, f.ratio(), f.copies_per_byte,
                        f.message_copies_per_byte);
        std::printf(
            "  (copies/B: every byte the streams and the device copied, FPDU framing"
            " included; msg/B: message bytes only)\n");
        std::printf("  CRC32c: %.3f ns/byte (portable: %.3f)\n", r.crc_ns_per_byte,
                    r.crc_portable_ns_per_byte);
    }
    if (!r.shards.points.empty()) print_shard_scaling(r.shards);
}

void print_targets(const Report& r) {
    std::printf("\ntargets\n");
    const std::vector<Target> ts = targets(r);
    int width = 0;
    for (const Target& t : ts) width = std::max(width, static_cast<int>(std::strlen(t.name)));
    for (const Target& t : ts)
        std::printf("  %-*s %-16s %12.1f %-9s %s\n", width, t.name, t.want, t.measured, t.unit,
                    t.met ? "met" : "MISSED");
    std::printf("errors: %llu\n", static_cast<unsigned long long>(r.errors()));
}

// Callgrind mode: warm up, then collect only `setups` setups' worth of rounds.
int run_profile(const BenchOptions& o) {
    SetupPair p(o.pdata, o.pdata, o.profile_offload);
    churn(p, o.batch, 60, o.profile_setups);
    RateSample s = churn(p, o.batch, 600, o.profile_setups, true);
    std::printf("profiled %llu setups (%llu frames), errors %llu\n",
                static_cast<unsigned long long>(s.setups),
                static_cast<unsigned long long>(s.frames),
                static_cast<unsigned long long>(s.errors));
    return s.errors == 0 ? 0 : 1;
}

// Checks what the options name on this machine before any work: --cpu must
// be one this process may run on, --json-out a file it can write (opened
// now, written at the end). Throws UsageError.
std::FILE* check_machine(const BenchOptions& o) {
    if (o.cpu >= 0) {
        cpu_set_t allowed;
        CPU_ZERO(&allowed);
        if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
            throw UsageError{"--cpu: sched_getaffinity failed"};
        if (!CPU_ISSET(o.cpu, &allowed))
            throw UsageError{"--cpu " + std::to_string(o.cpu) +
                             ": not a CPU this process may run on (" +
                             std::to_string(CPU_COUNT(&allowed)) + " allowed of " +
                             std::to_string(std::thread::hardware_concurrency()) + ")"};
    }
    if (o.json_out.empty()) return nullptr;
    std::FILE* f = std::fopen(o.json_out.c_str(), "w");
    if (f == nullptr) throw UsageError{"--json-out " + o.json_out + ": " + std::strerror(errno)};
    return f;
}

// Every in-memory part: the setup rate and the kernel baseline, stream, RDMA, the
// scaling over threads, scale and the timer.
void run_memory(const BenchOptions& o, Report& r, BenchProgress& progress) {
    if (!o.json) std::fprintf(stderr, "iwarp-cm bench: setup rate and kernel baseline\n");
    run_rates(o, r, progress);
    progress.clear();
    run_stream(o, r, progress);
    run_rdma(o, r, progress);
    progress.clear();
    if (!o.skip_shards) {
        // Four times the repetitions, each a quarter as long: the same time, and more pairs
        // of one and two threads run side by side in time (20 of 0.125 s by default).
        r.shards = run_shard_scaling(o.batch, o.pdata, 4 * o.reps, o.seconds / 4,
                                     std::max(1u, std::thread::hardware_concurrency()),
                                     [&](const std::string& phase, std::size_t i, std::size_t n) {
                                         progress.step(phase, i, n);
                                     });
        progress.clear();
    }
    if (!o.json && !o.skip_scale) std::fprintf(stderr, "scale (a child process per point)\n");
    run_scale_and_timer(o, r, progress);
}

int run_bench(BenchOptions o) {
    std::FILE* json_out = check_machine(o);
    if (o.profile_setups > 0) {
        if (json_out != nullptr) std::fclose(json_out);
        if (o.profile_shards > 0)
            return run_shard_profile(o.profile_setups, o.profile_shards, o.batch, o.pdata);
        return run_profile(o);
    }
    if (o.quick) {
        o.reps = std::min(o.reps, 3);
        o.seconds = std::min(o.seconds, 0.15);
        if (!o.scale_given) o.scale = {10'000, 100'000};
    }
    Report r;
    if (o.wire) {
        // Before the pinning: the wire's processes and threads use every CPU.
        WireBenchOptions w;
        std::string error;
        if (!run_paths(w.self, w.library, error)) {
            std::fprintf(stderr, "iwarp-cm: bench --wire: %s\n", error.c_str());
            return 1;
        }
        w.pdata = o.pdata;
        w.tap_offload = !o.no_tap_offload;
        w.setups = o.quick ? std::min<std::uint32_t>(o.wire_setups, 2000) : o.wire_setups;
        w.parallel = static_cast<std::uint32_t>(o.concurrency);
        if (o.quick) {
            w.kernel_seconds = 0.3;
            w.flow_bytes = 16ull << 20;
            w.latency_iters = 1000;
            w.abi_reps = 1;
        }
        w.say = !o.json;
        r.wire.emplace();
        if (!run_wire(w, *r.wire, error)) {
            std::fprintf(stderr, "iwarp-cm: bench --wire: %s\n", error.c_str());
            return 1;
        }
    }
    r.cpu = pin_cpu(o.cpu);
    BenchProgress progress(Progress::wanted(o.progress, false));
    if (!o.skip_memory) run_memory(o, r, progress);
    progress.finish();
    std::string json = to_json(o, r);
    if (o.json) {
        std::fputs(json.c_str(), stdout);
    } else {
        if (r.wire) print_wire(*r.wire);
        if (!o.skip_memory) print_table(r);
        print_targets(r);
    }
    if (json_out != nullptr) {
        const bool written = std::fputs(json.c_str(), json_out) >= 0;
        if (std::fclose(json_out) != 0 || !written) {
            std::fprintf(stderr, "iwarp-cm: --json-out %s: %s\n", o.json_out.c_str(),
                         std::strerror(errno));
            return 1;
        }
    }
    if (r.errors() != 0) return 1;
    if (!o.check) return 0;
    const auto ts = targets(r);
    const auto missed = std::count_if(ts.begin(), ts.end(), [](const Target& t) { return !t.met; });
    if (missed == 0) return 0;
    std::fprintf(stderr, "iwarp-cm: bench --check: %lld of %zu targets missed\n",
                 static_cast<long long>(missed), ts.size());
    return 1;
}

}  // namespace

void add_bench(CLI::App& app) {
    auto opt = std::make_shared<BenchOptions>();
    CLI::App* cmd = app.add_subcommand(
        "bench", "setup rate, scale, memory and timer tick vs the kernel-socket way");
    cmd->add_flag("--json", opt->json, "print the results as one JSON object");
    cmd->add_option("--json-out", opt->json_out,
                    "also write the JSON to this file (opened before the run)");
    Progress::add_options(cmd, opt->progress);
    cmd->add_flag("--check", opt->check,
                  "exit 1 when a target is missed (without it, only errors fail the run)");
    cmd->add_flag("--quick", opt->quick, "a short run: 3 repetitions of 0.15 s, N up to 100000");
    CLI::Option* scale = cmd->add_option("--scale", opt->scale,
                                         "N connections held, comma-separated "
                                         "(with --quick 10000,100000)");
    scale->delimiter(',')->transform(bounded(1, 10'000'000, true));
    cmd->add_option("--batch", opt->batch, "setups in flight per round")
        ->transform(bounded(1, 65536, true));
    cmd->add_option("--pdata", opt->pdata, "private data bytes, request and reply")
        ->transform(bounded(0, 508, true));
    cmd->add_option("--reps", opt->reps,
                    "repetitions of the rate measurements (the scaling over threads: four "
                    "times as many, each a quarter of --seconds)")
        ->transform(bounded(1, 100, true));
    cmd->add_option("--seconds", opt->seconds, "seconds per repetition")
        ->transform(bounded(0.01, 60, false));
    cmd->add_option("--concurrency", opt->concurrency, "kernel baseline: connections in flight")
        ->transform(bounded(1, 4096, true));
    cmd->add_option("--cpu", opt->cpu,
                    "pin to this CPU, one this process may run on (-1: the current one)")
        ->transform(bounded(-1, CPU_SETSIZE - 1, true));
    cmd->add_option("--profile-setups", opt->profile_setups,
                    "callgrind mode: collect only this many setups (run with --collect-atstart=no)")
        ->transform(bounded(0, 1e12, true));
    cmd->add_option("--profile-shards", opt->profile_shards,
                    "with --profile-setups: profile shard 0 of a network of this many shards "
                    "(default: one core, no shards)")
        ->transform(bounded(1, 1024, true))
        ->default_str("");
    cmd->add_flag("--profile-checksum-offload", opt->profile_offload,
                  "with --profile-setups: both cores with checksum offload (as loopback)");
    cmd->add_flag("--skip-kernel", opt->skip_kernel, "no kernel-socket baseline");
    cmd->add_flag("--skip-scale", opt->skip_scale, "no scale points");
    cmd->add_flag("--skip-rdma", opt->skip_rdma,
                  "no RDMA Write / Send throughput (and its loopback TCP baseline)");
    cmd->add_flag("--skip-stream", opt->skip_stream,
                  "no stream throughput (and its loopback TCP baseline)");
    cmd->add_flag("--skip-timer", opt->skip_timer, "no timer comparison");
    cmd->add_flag("--skip-shards", opt->skip_shards,
                  "no setup-rate scaling over threads (1 .. the CPUs)");
    CLI::Option* wire = cmd->add_flag(
        "--wire", opt->wire,
        "also measure on a wire (root; perftest): setup rate, throughput and latency over a "
        "veth with native XDP and over TAP, beside the kernel's TCP on the same veth "
        "(docs/perf.md \"The wire\")");
    cmd->add_flag("--skip-memory", opt->skip_memory, "with --wire: the wire part alone")
        ->needs(wire);
    cmd->add_flag("--no-tap-offload", opt->no_tap_offload,
                  "with --wire: iwarp-cm's TAP without its virtio-net header (every checksum "
                  "computed, every segment at most an MSS)")
        ->needs(wire);
    cmd->add_option("--wire-setups", opt->wire_setups,
                    "with --wire: setups per path (with --quick at most 2000)")
        ->transform(bounded(100, 1'000'000, true))
        ->needs(wire);
    cmd->footer(help_footer("iwarp-cm bench --quick --json-out perf.json"));
    cmd->callback([opt, scale] {
        opt->scale_given = scale->count() > 0;
        set_exit_code(run_bench(*opt));
    });
}

}  // namespace iwcm::tools
