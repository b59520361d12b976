// The iwarp-cm subcommands. Read first: README.md "Command line".
#pragma once

#include <CLI/CLI.hpp>
#include <span>
#include <string>

namespace iwcm::tools {

void add_demo(CLI::App& app);
void add_bench(CLI::App& app);  // tools/bench.cpp
void add_sim(CLI::App& app);  // tools/sim.cpp
void add_listen(CLI::App& app); void add_connect(CLI::App& app);  // tools/listen.cpp, tools/connect.cpp
// The process exit code chosen by the subcommand that ran.
int exit_code();
void set_exit_code(int code);

// One line describing a frame: TCP flags, sequence numbers, and the MPA
// frame, RTR or TERMINATE it carries (for ladder diagrams and traces).
std::string describe_frame(std::span<const std::byte> frame);

}  // namespace iwcm::tools
