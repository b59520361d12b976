// `iwarp-cm switch --dev IF`: the switch of an interface that several programs
// share (src/io/shared/switch.hpp). Programs under `iwarp-cm run --dev IF` start it
// themselves when none runs; it ends when its last program went.
#include <cstdio>
#include <memory>
#include <string>

#include "io/shared/switch.hpp"
#include "tools/commands.hpp"

namespace iwcm::tools {

namespace {

struct SwitchOptions {
    std::string dev;
    std::string xdp_mode = "auto";
    double linger = 2;
    std::uint32_t busy_poll_us = 0;
};

int run_switch_command(const SwitchOptions& o) {
    io::SwitchConfig c;
    c.dev = o.dev;
    c.mode = o.xdp_mode == "native"    ? io::XskDevice::Mode::kNative
             : o.xdp_mode == "generic" ? io::XskDevice::Mode::kGeneric
                                       : io::XskDevice::Mode::kAuto;
    c.linger = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(o.linger));
    c.busy_poll_us = o.busy_poll_us;
    auto r = io::run_switch(c);
    if (!r) {
        std::fprintf(stderr, "iwarp-cm: %s\n", r.error().c_str());
        return exit_codes::kSetup;
    }
    return exit_codes::kOk;
}

}  // namespace

void add_switch(CLI::App& app) {
    auto opt = std::make_shared<SwitchOptions>();
    CLI::App* cmd = app.add_subcommand(
        "switch", "share an interface among programs (run --dev starts it when none runs)");
    cmd->add_option("--dev", opt->dev, "the interface whose AF_XDP socket the switch owns")
        ->required()
        ->default_str("");
    cmd->add_option("--xdp-mode", opt->xdp_mode,
                    "where the XDP program runs: auto (native if the driver has it), native, "
                    "generic")
        ->check(CLI::IsMember({"auto", "native", "generic"}));
    cmd->add_option("--linger", opt->linger,
                    "seconds to wait for a first program, and after the last one went")
        ->transform(bounded(0, 3600, false));
    cmd->add_option("--busy-poll", opt->busy_poll_us,
                    "busy polling, microseconds (0: off, the default): the AF_XDP socket "
                    "prefers busy polling and the switch never sleeps while a program is "
                    "connected")
        ->transform(bounded(0, 1000000, true));
    cmd->footer(help_footer("iwarp-cm switch --dev eth1"));
    cmd->callback([opt] { set_exit_code(run_switch_command(*opt)); });
}

}  // namespace iwcm::tools
