// Several programs on one shared interface: the interface's switch.
//
// Read first: xsk.hpp (the AF_XDP socket and its XDP program), steered_device.hpp,
// docs/design.md "Several programs on one interface" (why a switch).
//
// AF_XDP lets one UMEM serve a receive queue, so one process owns the
// interface's socket: the switch (`iwarp-cm switch --dev IF`). Every program
// on the interface is its client, with its own whole stack (core, TCP, RDMA),
// its own ports (reserved in the kernel by the client, src/io/shared/ports.hpp) and
// its own neighbour look-ups (the kernel's):
//   * a client connects to the switch's socket, an abstract unix socket named
//     after the interface's index (per network namespace, gone with the
//     process); when none answers it starts the switch and tries again;
//   * the switch answers with a shared memory of two rings of frames (one
//     each way, single producer and single consumer) and two eventfds;
//   * the client names its ports (add / remove); the switch puts them in the
//     XDP program's map and in its own table, and hands each segment the
//     program redirects to the client whose (address, port) it is;
//   * a client that goes (its socket closes, also when it is killed) loses
//     its ports at once; the switch ends when its last client went.
// A side sleeping on an empty ring says so in the ring; the other side writes
// the eventfd only then, so a busy pair moves frames with no system call but
// the socket's own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/shared/steered_device.hpp"
#include "io/shared/xsk.hpp"
#include "iwcm/result.hpp"
#include "iwcm/time.hpp"

namespace iwcm::io {

// The switch's socket name for the interface of index ifindex (abstract).
std::string switch_socket_name(int ifindex);

struct SwitchConfig {
    std::string dev;
    XskDevice::Mode mode = XskDevice::Mode::kAuto;
    // Ends when no client came this long after the start, or this long after
    // the last one went (a program started right after another reuses it).
    Duration linger = std::chrono::seconds(2);
    // Not 0: busy polling (XskDevice::set_busy_poll for this many microseconds); the
    // switch then never sleeps while a program is connected.
    std::uint32_t busy_poll_us = 0;
};

// Runs the switch until it ends (see SwitchConfig::linger) or SIGINT/SIGTERM.
// The error names what failed (the interface, the socket, a second switch).
Expected<void, std::string> run_switch(const SwitchConfig& config);

class SwitchClient final : public SteeredDevice {
public:
    static constexpr std::size_t kSlots = 512;
    static constexpr std::size_t kSlotBytes = XskDevice::kFrameSize;

    // Connects to the switch of interface `dev`. When none runs and `spawn`
    // is not empty, runs it (argv: e.g. {"/usr/bin/iwarp-cm", "switch",
    // "--dev", dev}) detached from this process and tries again for up to 5 s.
    static Expected<std::unique_ptr<SwitchClient>, std::string> connect(
        const std::string& dev, const std::vector<std::string>& spawn);
    ~SwitchClient() override;
    SwitchClient(const SwitchClient&) = delete;
    SwitchClient& operator=(const SwitchClient&) = delete;

    int fd() const override;
    const std::string& name() const override;
    long read(std::span<std::byte> buf) override;
    int write(std::span<const std::byte> frame) override;
    void flush() override;
    std::size_t max_frame() const override { return kSlotBytes; }

    Expected<void, std::string> add_port(const IpAddr& addr, std::uint16_t port) override;
    void remove_port(const IpAddr& addr, std::uint16_t port) override;
    const char* attach_mode() const override;
    bool zero_copy() const override { return false; }
    const char* path() const override { return "switch"; }

    struct Impl;

private:
    explicit SwitchClient(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace iwcm::io
