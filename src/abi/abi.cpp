// The process's one runtime and the ABI's event handler (src/abi/abi.hpp).
//
// Read first: include/iwcm/runtime.hpp (the runtime's threads, lock and
// handler), src/abi/abi.hpp (what the two halves of the ABI expect here).
//
// Start. The first ABI call that needs the runtime starts it from
// RuntimeConfig::from_env() (std::call_once: concurrent first calls wait for
// one start). A failure is printed once on stderr as "iwcm: <why>" and kept:
// every later call fails at once (librdmacm's ENODEV, libibverbs' empty
// device list), as the real libraries do on a host without an RDMA device.
//
// Process exit. The runtime is never destroyed. A static destructor or an
// atexit hook that ran ~Runtime could free the core under a thread of the
// application that is still inside an ABI call (rping's CQ thread wakes on
// the flushed completions of the closing connections and calls back in), and
// the handler would reach the ABI's tables after their own destructors ran.
// So the runtime, the handler and the tables of both halves live until the
// process ends, and the progress thread with them (exit() ends it). What
// ~Runtime would have done for the peers is done by an atexit hook instead:
// under the lock it closes every connection of an rdma_cm id still open
// (gracefully once established, a reset before), then waits until the core
// has no connection left whose end waits on the peer (Core::open_nodes), for
// at most kExitCloseLimit. It holds the lock only for short calls, so it
// cannot deadlock with an application thread; a program that closed its
// connections before returning from main (rping, cmtime) waits for nothing.
// A program killed by a signal runs no hook: its TAP goes with it and the
// peer learns of the end from its own retransmission timeout, as with a host
// that crashed.
#include "abi/abi.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "abi/rdmacm_internal.hpp"

namespace iwcm::abi {
namespace {

constexpr auto kExitCloseLimit = std::chrono::seconds(2);
constexpr auto kExitPollInterval = std::chrono::milliseconds(5);

// Every callback holds the runtime's lock (runtime.hpp): each only hands the
// event to the half of the ABI it belongs to.
class AbiHandler final : public RuntimeHandler {
public:
    void on_event(Session& s, const Event& e) override { rdmacm_on_event(s, e); }
    // The verbs half first: the QP is in ERR with its work flushed before the
    // application hears RDMA_CM_EVENT_DISCONNECTED, as with the kernel's
    // iw_cm, which moves the QP to ERR before it reports the close.
    void on_qp_event(Session& s, const rdma::QpEvent& e) override {
        verbs_on_qp_event(s, e);
        rdmacm_on_qp_event(s, e);
    }
    void on_completion(Session& s, rdma::CqHandle cq, bool solicited) override {
        verbs_on_completion(s, cq, solicited);
    }
    void on_resolved(Session& s, std::uint64_t token, std::optional<MacAddr> mac,
                     const std::string& error) override {
        rdmacm_on_resolved(s, token, mac, error);
    }
};

struct Process {
    std::once_flag once;
    std::atomic<Runtime*> runtime{nullptr};
    std::string error;
    AbiHandler handler;
};

// Never destroyed (see the file comment).
Process& process() {
    static auto* p = new Process;
    return *p;
}

void close_at_exit() {
    Runtime* rt = process().runtime.load(std::memory_order_acquire);
    if (rt == nullptr) return;
    const auto deadline = std::chrono::steady_clock::now() + kExitCloseLimit;
    rt->call([](Session& s) { return rdmacm_close_all(s); });
    while (rt->call([](Session& s) { return s.core().open_nodes(); }) != 0) {
        if (std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(kExitPollInterval);
    }
}

void start(Process& p) {
    auto config = RuntimeConfig::from_env();
    if (!config) {
        p.error = config.error();
    } else if (auto rt = Runtime::start(*config, &p.handler); !rt) {
        p.error = rt.error();
    } else {
        p.runtime.store(rt->release(), std::memory_order_release);
        std::atexit(close_at_exit);
        return;
    }
    if (p.error.empty()) p.error = "the runtime did not start";
    std::fprintf(stderr, "iwcm: %s\n", p.error.c_str());
}

}  // namespace

Runtime* runtime() {
    Process& p = process();
    std::call_once(p.once, [&p] { start(p); });
    return p.runtime.load(std::memory_order_acquire);
}

const std::string& runtime_error() {
    Process& p = process();
    std::call_once(p.once, [&p] { start(p); });
    return p.error;
}

}  // namespace iwcm::abi
