// `iwarp-cm bench --wire`'s in-process figures: what perftest measures through
// the libibverbs ABI, measured again by this process on the runtime's own API,
// so that the ABI's own cost is a number (docs/perf.md "The wire").
//
// Read first: include/iwcm/runtime.hpp (the runtime both ways share),
// tools/bench_wire.hpp (the namespaces), docs/perf.md "The wire".
//
// Two threads of this process, each in one of the veth's namespaces, each
// with a Runtime on its end of the veth (AF_XDP, as `iwarp-cm run --dev`
// gives perftest), do what ib_write_bw, ib_send_bw and ib_write_lat do:
//
//   write, send  the client keeps up to 128 signaled RDMA Writes (or Sends)
//                of one size in flight (perftest's default send queue depth)
//                until `iters` completed; the server of Sends keeps 512
//                receives posted (perftest's receive depth) and posts each
//                again as it completes. Throughput is the client's, from its
//                first post to its last completion, as perftest reports it.
//   write_lat    a ping-pong of RDMA Writes: each side writes its counter
//                into the last 8 bytes of the other's buffer and spins on
//                its own buffer's for the answer; the round trip of each.
//
// Both threads spin as perftest's two processes do (its Write server polls
// its CQ for the client's last message all along): an empty CQ makes the
// thread read the frames waiting itself (Runtime::poll_inline), as the ABI's
// ibv_poll_cq does. Buffers and keys go across in a 16-byte Send of
// {address, rkey, size} each way first; a Write run's client ends it with a
// Send that tells the server the run is over.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tools/bench_wire.hpp"

namespace iwcm::tools {

struct NativePeers {
    std::string ns_server, ns_client;    // network namespaces
    std::string dev_server, dev_client;  // their ends of the veth
    std::string server_addr;             // the server's IPv4 address
    std::uint16_t port = 0;
};

enum class NativeTest : std::uint8_t { kWrite, kSend, kWriteLatency };

// Runs one test between a server and a client thread. kWrite and kSend fill
// `flow` (CPU time: each side's application thread and progress thread);
// kWriteLatency fills `latency`. False with `error` when the run failed.
bool native_run(const NativePeers& p, NativeTest test, std::size_t size, std::uint64_t iters,
                bool crc, WireFlow& flow, WireLatency& latency, std::string& error);

}  // namespace iwcm::tools
