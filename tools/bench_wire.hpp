// `iwarp-cm bench --wire`: iwarp-cm on a real wire beside the kernel's TCP on
// the same wire, in one run. Two network namespaces joined by a veth pair with
// native XDP (AF_XDP, `--dev`), a third with two TAP devices on a bridge, both
// ends on this machine; everything is removed at the end, also on a failure.
//
//   setup        complete setups per second (TCP, MPA v2 with private data both
//                ways, RTR) between `iwarp-cm connect --count` and `iwarp-cm
//                listen --count`, over AF_XDP and over TAP; the same exchange by
//                kernel sockets over the same veth (a client thread in one
//                namespace, a server thread in the other).
//   throughput   RDMA Write and Send of 4 KiB and 64 KiB, CRC off and on, by
//                perftest's ib_write_bw / ib_send_bw over libiwcm_rdma.so, beside
//                one kernel TCP stream moving the same messages over the veth.
//   latency      the round trip of a 64-byte Send ping-pong (ib_send_lat) beside a
//                kernel TCP ping-pong of 64 bytes over the veth; over AF_XDP also
//                with busy polling (IWCM_BUSY_POLL=50) and of a Write ping-pong
//                (ib_write_lat).
//   ABI          ib_write_bw and ib_send_bw of 64 KiB (CRC off) and ib_write_lat
//                over AF_XDP beside the same transfers made by this process on
//                the runtime's API (tools/bench_native.hpp): the ABI's own cost.
//                Both 64 KiB figures over AF_XDP, CRC off, are the means of three
//                runs each way, in turn (one with --quick).
//   cost         CPU time of each side per setup and per byte.
//
// Read first: docs/perf.md "The wire" (what each figure means and what bounds
// it), tools/bench_kernel.hpp (the kernel's setup exchange).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace iwcm::tools {

// What a run of `iwarp-cm bench --wire` measures and how much. (Named apart from
// wire_cli.hpp's WireOptions: one program links both, and two classes of one name are two
// definitions of its implicit members.)
struct WireBenchOptions {
    std::string self;     // this program, run as the listener and connector
    std::string library;  // libiwcm_rdma.so, preloaded into perftest
    std::size_t pdata = 32;
    std::uint32_t setups = 20'000;  // per path
    std::uint32_t parallel = 128;   // setups in flight, ours and the kernel's
    double kernel_seconds = 2;
    std::uint64_t flow_bytes = 256ull << 20;  // per throughput figure
    std::uint32_t latency_iters = 10'000;
    // Runs of each side of the ABI's comparison (64 KiB Write and Send over AF_XDP through
    // perftest and in-process), in turn; each figure is their mean.
    std::uint32_t abi_reps = 3;
    bool say = true;  // a line on stderr per figure
    // iwarp-cm's TAP with its virtio-net header (the default of `run`, `connect` and
    // `listen`); false: --no-tap-offload, IWCM_TAP_OFFLOAD=0.
    bool tap_offload = true;
};

// One path's setup figures. CPU time is user + system of the processes (ours)
// or the threads (the kernel's, softirq work included), per setup.
struct WireSetup {
    double rate_per_s = 0;  // wall
    double client_cpu_us = 0;
    double server_cpu_us = 0;
};

struct WireFlow {
    double mb_per_s = 0;  // 10^6 bytes per second of payload
    double sender_cpu_ns_per_byte = 0;
    double receiver_cpu_ns_per_byte = 0;
};

struct WireLatency {
    double p50_us = 0;  // the round trip
    double p99_us = 0;
};

struct WireReport {
    std::string xdp_mode;  // "native" or what the veth offered
    // Keys: setup "xdp", "tap", "kernel"; throughput "xdp.write_64k_crc_off" ...,
    // "kernel.64k", "xdp.native.write_64k_crc_off", "xdp.native.send_64k_crc_off";
    // latency "xdp.send_64", "tap.send_64", "kernel.tcp_64", "xdp.send_64_busy_poll",
    // "xdp.write_64", "xdp.native.write_64".
    std::vector<std::pair<std::string, WireSetup>> setup;
    std::vector<std::pair<std::string, WireFlow>> throughput;
    std::vector<std::pair<std::string, WireLatency>> latency;

    const WireSetup* find_setup(const std::string& key) const;
    const WireFlow* find_flow(const std::string& key) const;
    const WireLatency* find_latency(const std::string& key) const;
};

// Runs every part; false with `error` set when one could not run (not root, a
// program missing, a process that failed). Needs root.
bool run_wire(const WireBenchOptions& o, WireReport& r, std::string& error);

// The sample at fraction p (0.5: the median) of v, sorted; 0 for none.
double percentile(std::vector<double> v, double p);

// The calling thread into network namespace `ns` (/run/netns/NS); false if it
// could not.
bool enter_netns(const std::string& ns);

// The object written under "wire" in the bench's JSON.
std::string wire_json(const WireReport& r);

// The human-readable table.
void print_wire(const WireReport& r);

}  // namespace iwcm::tools
